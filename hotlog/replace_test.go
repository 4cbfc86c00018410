package hotlog

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
)

// replaceFixture fills a log with single-record batches over several
// segments and returns every batch by base offset.
func replaceFixture(t *testing.T, fs vfs.FS) (*Log, map[int64][]byte) {
	t.Helper()
	return replaceFixtureConfig(t, fs, Config{SegmentBytes: 1000, IndexIntervalBytes: 100})
}

// replaceFixtureConfig is replaceFixture with the log's Config.
func replaceFixtureConfig(t *testing.T, fs vfs.FS, cfg Config) (*Log, map[int64][]byte) {
	t.Helper()
	l := openMem(t, fs, cfg)
	batches := map[int64][]byte{}
	for i := range 60 {
		b := simpleBatch(1, 40, int64(i))
		res, err := l.Append(b, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		batches[res.FirstOffset] = append([]byte(nil), b...)
	}
	return l, batches
}

// dropOdd writes a replacement of the segments [from, to) of l that keeps the
// batches with even base offsets, and returns the writer, the old bases and
// the expected log content after the swap.
func dropOdd(t *testing.T, l *Log, batches map[int64][]byte, first, count int) (*SegmentWriter, []int64, []byte) {
	t.Helper()
	segs := l.Segments()
	group := segs[first : first+count]
	w, err := l.NewSegmentWriter(group[0].BaseOffset)
	if err != nil {
		t.Fatal(err)
	}
	var old []int64
	for _, s := range group {
		old = append(old, s.BaseOffset)
	}
	var want []byte
	for off := l.LogStartOffset(); off < l.LogEndOffset(); off++ {
		b, ok := batches[off]
		if !ok {
			continue
		}
		inGroup := off >= group[0].BaseOffset && off < group[len(group)-1].NextOffset
		if inGroup && off%2 == 1 {
			continue
		}
		if inGroup {
			if err := w.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, b...)
	}
	return w, old, want
}

func TestReplaceSegments(t *testing.T) {
	mem := vfs.NewMem()
	l, batches := replaceFixture(t, mem)
	before := readAll(t, l)
	nsegs := len(l.Segments())
	if nsegs < 6 {
		t.Fatalf("only %d segments", nsegs)
	}
	// A reader holding the old segments keeps its bytes.
	held, err := l.Read(0, 1<<20, l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	w, old, want := dropOdd(t, l, batches, 1, 3)
	if err := l.ReplaceSegments(old, w); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, l); !bytes.Equal(got, want) {
		t.Fatalf("after replace: %d bytes, want %d", len(got), len(want))
	}
	if n := len(l.Segments()); n != nsegs-2 {
		t.Fatalf("%d segments after replacing 3 by 1, want %d", n, nsegs-2)
	}
	var buf bytes.Buffer
	if _, err := held.WriteTo(&buf); err != nil || !bytes.HasPrefix(before, buf.Bytes()) || buf.Len() == 0 {
		t.Fatalf("held read: %v, %d bytes", err, buf.Len())
	}
	held.Release()
	// A stale group is refused and leaves nothing behind.
	w2, err := l.NewSegmentWriter(old[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReplaceSegments(old, w2); !errors.Is(err, ErrSegmentsChanged) {
		t.Fatalf("stale replace: %v", err)
	}
	// A truncation after the writer was made refuses it: the bytes it read
	// may be gone.
	segs0 := l.Segments()
	w4, _ := l.NewSegmentWriter(segs0[2].BaseOffset)
	if err := l.TruncateTo(l.LogEndOffset() - 1); err != nil {
		t.Fatal(err)
	}
	segs0 = l.Segments()
	if err := l.ReplaceSegments([]int64{segs0[2].BaseOffset}, w4); !errors.Is(err, ErrSegmentsChanged) {
		t.Fatalf("replace after a truncation: %v", err)
	}
	// The active segment is never replaced.
	segs := l.Segments()
	w3, _ := l.NewSegmentWriter(segs[len(segs)-1].BaseOffset)
	if err := l.ReplaceSegments([]int64{segs[len(segs)-1].BaseOffset}, w3); !errors.Is(err, ErrSegmentsChanged) {
		t.Fatalf("replace of the active segment: %v", err)
	}
	// Appends and reopening keep the swapped set.
	if _, err := l.Append(simpleBatch(1, 1, 1), AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	want = readAll(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := mem.List("/p")
	for _, n := range names {
		if bytes.Contains([]byte(n), []byte("cleaned")) || bytes.Contains([]byte(n), []byte("swap")) {
			t.Fatalf("leftover %s", n)
		}
	}
	l = openMem(t, mem, Config{SegmentBytes: 1000, IndexIntervalBytes: 100})
	defer l.Close()
	if got := readAll(t, l); !bytes.Equal(got, want) {
		t.Fatal("reopened log differs")
	}
	// Offsets inside the replaced range resolve: a dropped offset reads from
	// the next batch kept.
	dropped := old[0] | 1
	res, err := l.Read(dropped, 1, l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	if res.FirstOffset != dropped+1 {
		t.Fatalf("read of dropped offset %d starts at %d, want %d", dropped, res.FirstOffset, dropped+1)
	}
	res.Release()
}

// TestCrashReplaceSegments crashes at every file-system operation of a swap
// and checks that the reopened log is either the old log or the new one.
func TestCrashReplaceSegments(t *testing.T) {
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 5))
		mem := vfs.NewMem()
		rec := &crashRecorder{mem: mem, rng: rng}
		fs := errorfs.Wrap(mem, rec)
		l, batches := replaceFixture(t, fs)
		before := readAll(t, l)
		first := int(seed)
		w, old, want := dropOdd(t, l, batches, first, 2+int(seed))
		rec.on.Store(true)
		if err := l.ReplaceSegments(old, w); err != nil {
			t.Fatal(err)
		}
		rec.on.Store(false)
		rec.take("after replace")
		l.Close()
		sawOld, sawNew := false, false
		for i, cp := range rec.clones {
			l := openMem(t, cp.fs, Config{SegmentBytes: 1000, IndexIntervalBytes: 100})
			got := readAll(t, l)
			switch {
			case bytes.Equal(got, before):
				sawOld = true
			case bytes.Equal(got, want):
				sawNew = true
			default:
				t.Fatalf("seed %d crash %d (%s): log is neither the old nor the new one", seed, i, cp.what)
			}
			names, _ := cp.fs.List("/p")
			for _, n := range names {
				if bytes.Contains([]byte(n), []byte("cleaned")) || bytes.Contains([]byte(n), []byte("swap")) || bytes.Contains([]byte(n), []byte("deleted")) {
					t.Fatalf("seed %d crash %d (%s): leftover %s", seed, i, cp.what, n)
				}
			}
			l.Close()
		}
		if !sawOld || !sawNew {
			t.Fatalf("seed %d: crash points saw old %v new %v", seed, sawOld, sawNew)
		}
		t.Logf("seed %d: %d crash points", seed, len(rec.clones))
	}
}

func TestDumpSwapMarker(t *testing.T) {
	mem := vfs.NewMem()
	mem.MkdirAll("/p", 0o755)
	mk := swapMarker{Base: 7, End: 42, Size: 1000, CRC: 0xdeadbeef}
	if err := vfs.WriteFileAtomic(mem, "/p/00000000000000000007.swap", encodeSwap(mk)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Dump(&out, mem, "/p/00000000000000000007.swap"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out.Bytes(), []byte("[7, 42)")) {
		t.Fatalf("dump: %q", out.String())
	}
	if m, ok := decodeSwap(encodeSwap(mk)); !ok || m != mk {
		t.Fatal("swap marker round trip")
	}
	bad := encodeSwap(mk)
	bad[10] ^= 1
	if _, ok := decodeSwap(bad); ok {
		t.Fatal("damaged marker accepted")
	}
}

// TestReplaceSegmentsInjectedErrors fails the n-th file-system operation of
// a given kind during a swap: the live log reads as the old or the new one,
// a failure before the commit point leaves the old one and no leftovers, and
// the reopened log (with and without a crash) is the old or the new one.
func TestReplaceSegmentsInjectedErrors(t *testing.T) {
	ops := []errorfs.Op{errorfs.OpFileWrite, errorfs.OpFileSync, errorfs.OpCreate, errorfs.OpOpen, errorfs.OpRename, errorfs.OpOpenDir, errorfs.OpRemove}
	cfg := Config{SegmentBytes: 1000, IndexIntervalBytes: 100}
	for _, op := range ops {
		for n := int64(0); n < 12; n++ {
			mem := vfs.NewMem()
			inj := &errorfs.Toggle{Injector: errorfs.OnIndex(n, op)}
			efs := errorfs.Wrap(mem, inj)
			l, batches := replaceFixture(t, efs)
			before := readAll(t, l)
			w, old, want := dropOdd(t, l, batches, 1, 3)
			inj.On()
			err := l.ReplaceSegments(old, w)
			inj.Off()
			if err != nil && !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("%s #%d: %v", op, n, err)
			}
			if err != nil && !errors.Is(err, ErrLogFailed) {
				// Refused before the commit point: the old log, nothing left over.
				if got := readAll(t, l); !bytes.Equal(got, before) {
					t.Fatalf("%s #%d: a failed swap changed the live log", op, n)
				}
				names, _ := mem.List("/p")
				for _, name := range names {
					if bytes.Contains([]byte(name), []byte("cleaned")) {
						t.Fatalf("%s #%d: leftover %s", op, n, name)
					}
				}
			}
			if err == nil {
				if got := readAll(t, l); !bytes.Equal(got, want) {
					t.Fatalf("%s #%d: a swap that succeeded reads differently", op, n)
				}
			}
			l.Close()
			for _, fs := range []vfs.FS{mem.CrashClone(), mem} {
				l2 := openMem(t, fs, cfg)
				got := readAll(t, l2)
				if !bytes.Equal(got, before) && !bytes.Equal(got, want) {
					t.Fatalf("%s #%d: reopened log is neither the old nor the new", op, n)
				}
				if err == nil && !bytes.Equal(got, want) {
					t.Fatalf("%s #%d: a swap that succeeded was undone", op, n)
				}
				l2.Close()
			}
		}
	}
}
