package hotlog

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
)

// The deleter's tests run in a synctest bubble: time.Sleep moves the bubble's
// clock (which the delay is measured by) once every goroutine is blocked, and
// synctest.Wait returns once the deleter is idle, so nothing races a real
// clock.

const testDelay = time.Minute

// delayFixture is replaceFixture's log with FileDeleteDelay set.
func delayFixture(t *testing.T, fs vfs.FS) (*Log, map[int64][]byte) {
	t.Helper()
	return replaceFixtureConfig(t, fs, Config{SegmentBytes: 1000, IndexIntervalBytes: 100, FileDeleteDelay: testDelay})
}

// deletedLogs lists the *.deleted .log files of the log directory.
func deletedLogs(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.List("/p")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, deletedSuffix) && strings.Contains(n, logSuffix) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// countDeleted counts every *.deleted file of the log directory.
func countDeleted(t *testing.T, fs vfs.FS) int {
	t.Helper()
	names, err := fs.List("/p")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, deletedSuffix) {
			n++
		}
	}
	return n
}

func readHeld(t *testing.T, r *ReadResult) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := r.WriteTo(&buf); err != nil {
		t.Fatalf("held read: %v", err)
	}
	return buf.Bytes()
}

// TestFileDeleteDelay: a swap's and a retention delete's old files stay
// (renamed) until the delay has passed and the last reader has released
// them, then go; a reader holding an old segment across the delay reads it.
func TestFileDeleteDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := vfs.NewMem()
		l, batches := delayFixture(t, mem)
		defer l.Close()
		segs := l.Segments()
		// A reader holds segment 1, which the swap replaces.
		held, err := l.Read(segs[1].BaseOffset, 1, l.LogEndOffset())
		if err != nil {
			t.Fatal(err)
		}
		heldWant := readHeld(t, held)
		w, old, want := dropOdd(t, l, batches, 1, 3)
		if err := l.ReplaceSegments(old, w); err != nil {
			t.Fatal(err)
		}
		wantNames := []string{
			baseName(segs[1].BaseOffset) + logSuffix + deletedSuffix,
			baseName(segs[2].BaseOffset) + logSuffix + deletedSuffix,
			baseName(segs[3].BaseOffset) + logSuffix + deletedSuffix,
		}
		synctest.Wait()
		if got := deletedLogs(t, mem); !slices.Equal(got, wantNames) {
			t.Fatalf("after the swap: %v, want %v", got, wantNames)
		}
		time.Sleep(testDelay - time.Millisecond)
		synctest.Wait()
		if got := deletedLogs(t, mem); !slices.Equal(got, wantNames) {
			t.Fatalf("before the delay passed: %v, want %v", got, wantNames)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := deletedLogs(t, mem); !slices.Equal(got, wantNames[:1]) {
			t.Fatalf("after the delay: %v, want only the held %v", got, wantNames[:1])
		}
		if got := readHeld(t, held); !bytes.Equal(got, heldWant) {
			t.Fatal("the held segment reads differently after the delay")
		}
		held.Release()
		synctest.Wait()
		if n := countDeleted(t, mem); n != 0 {
			t.Fatalf("%d deleted files left after the release", n)
		}
		if got := readAll(t, l); !bytes.Equal(got, want) {
			t.Fatal("log content after the swap differs")
		}

		// Retention: the same.
		segs = l.Segments()
		if err := l.DeleteBefore(segs[2].BaseOffset); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := deletedLogs(t, mem); len(got) != 2 {
			t.Fatalf("after DeleteBefore: %v, want 2 segments", got)
		}
		time.Sleep(testDelay)
		synctest.Wait()
		if n := countDeleted(t, mem); n != 0 {
			t.Fatalf("%d deleted files left after the delay", n)
		}
	})
}

// TestFileDeleteDelayNameClash: a segment replaced again within the delay,
// at the same base, gets other names than the first one's pending files, and
// the first removal leaves the second's files alone.
func TestFileDeleteDelayNameClash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := vfs.NewMem()
		l, batches := delayFixture(t, mem)
		defer l.Close()
		w, old, _ := dropOdd(t, l, batches, 1, 3)
		if err := l.ReplaceSegments(old, w); err != nil {
			t.Fatal(err)
		}
		base := old[0]
		time.Sleep(testDelay / 2)
		// The cleaned segment at base and the one after it, again.
		segs := l.Segments()
		if segs[1].BaseOffset != base {
			t.Fatalf("segment 1 at %d, want %d", segs[1].BaseOffset, base)
		}
		w, old, want := dropOdd(t, l, batches, 1, 2)
		if err := l.ReplaceSegments(old, w); err != nil {
			t.Fatal(err)
		}
		second := []string{
			baseName(base) + logSuffix + ".1" + deletedSuffix,
			baseName(old[1]) + logSuffix + deletedSuffix,
		}
		slices.Sort(second)
		time.Sleep(testDelay / 2)
		synctest.Wait()
		if got := deletedLogs(t, mem); !slices.Equal(got, second) {
			t.Fatalf("after the first swap's delay: %v, want the second's %v", got, second)
		}
		if n := countDeleted(t, mem); n != 3*len(second) {
			t.Fatalf("%d deleted files, want %d", n, 3*len(second))
		}
		time.Sleep(testDelay / 2)
		synctest.Wait()
		if n := countDeleted(t, mem); n != 0 {
			t.Fatalf("%d deleted files left", n)
		}
		if got := readAll(t, l); !bytes.Equal(got, want) {
			t.Fatal("log content differs")
		}
	})
}

// TestFileDeleteDelayClose: Close waits for a removal in progress and for no
// other, even due ones; pending deletions and segments released after Close stay on disk,
// the deleter is gone (the bubble's goroutines all exit), and the next Open
// (after a clean close or a crash) removes the leftovers.
func TestFileDeleteDelayClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := vfs.NewMem()
		gate := make(chan struct{})
		var blocked bool
		fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
			if op == errorfs.OpRemove && strings.HasSuffix(path, deletedSuffix) && !blocked {
				blocked = true // only the deleter removes .deleted files here
				<-gate
			}
			return nil
		}))
		l, _ := delayFixture(t, fs)
		segs := l.Segments()
		want := readAll(t, l)
		// Segments 0-3 are deleted together, and all are due when Close
		// comes: the deleter is removing segment 0 (held at the gate), and
		// segments 1-2 wait for it; segment 3 is held by a reader across
		// Close.
		held, err := l.Read(segs[3].BaseOffset, 1, l.LogEndOffset())
		if err != nil {
			t.Fatal(err)
		}
		heldWant := readHeld(t, held)
		if err := l.DeleteBefore(segs[1].BaseOffset); err != nil {
			t.Fatal(err)
		}
		if err := l.DeleteBefore(segs[4].BaseOffset); err != nil {
			t.Fatal(err)
		}
		time.Sleep(testDelay)
		synctest.Wait() // the deleter is blocked removing segment 0's .log
		if !blocked {
			t.Fatal("the deleter did not start on segment 0")
		}
		closed := make(chan error)
		go func() { closed <- l.Close() }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a removal was in progress")
		default:
		}
		close(gate)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		left := []string{
			baseName(segs[1].BaseOffset) + logSuffix + deletedSuffix,
			baseName(segs[2].BaseOffset) + logSuffix + deletedSuffix,
			baseName(segs[3].BaseOffset) + logSuffix + deletedSuffix,
		}
		if got := deletedLogs(t, mem); !slices.Equal(got, left) {
			t.Fatalf("after Close: %v, want %v", got, left)
		}
		if n := countDeleted(t, mem); n != 3*len(left) {
			t.Fatalf("%d deleted files after Close, want %d", n, 3*len(left))
		}
		// The held segment still reads, and its release removes nothing.
		if got := readHeld(t, held); !bytes.Equal(got, heldWant) {
			t.Fatal("the held segment reads differently after Close")
		}
		held.Release()
		time.Sleep(2 * testDelay)
		synctest.Wait()
		if got := deletedLogs(t, mem); !slices.Equal(got, left) {
			t.Fatalf("after Close and the delay: %v, want %v", got, left)
		}
		crashed := mem.CrashClone()
		for _, f := range []vfs.FS{mem, crashed} {
			l := openMem(t, f, Config{SegmentBytes: 1000, IndexIntervalBytes: 100, FileDeleteDelay: testDelay})
			if n := countDeleted(t, f); n != 0 {
				t.Fatalf("%d deleted files after Open", n)
			}
			if got := readAll(t, l); !bytes.Equal(got, want[len(want)-len(got):]) || l.LogStartOffset() != segs[4].BaseOffset {
				t.Fatalf("reopened log: start %d, want %d", l.LogStartOffset(), segs[4].BaseOffset)
			}
			l.Close()
		}
	})
}

// TestNoDelayReleaseAfterClose: without a delay the last release removes the
// files, but not once the log is closed (the broker may be removing the
// directory): the next Open does.
func TestNoDelayReleaseAfterClose(t *testing.T) {
	mem := vfs.NewMem()
	cfg := Config{SegmentBytes: 1000}
	l := openMem(t, mem, cfg)
	for i := range 30 {
		if _, err := l.Append(simpleBatch(1, 40, int64(i)), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	segs := l.Segments()
	held, err := l.Read(segs[0].BaseOffset, 1, l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteBefore(segs[2].BaseOffset); err != nil {
		t.Fatal(err)
	}
	if got := deletedLogs(t, mem); len(got) != 1 {
		t.Fatalf("after DeleteBefore: %v, want only the held segment", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	held.Release()
	if got := deletedLogs(t, mem); len(got) != 1 {
		t.Fatalf("after a release past Close: %v, want the held segment left", got)
	}
	l = openMem(t, mem, cfg)
	defer l.Close()
	if n := countDeleted(t, mem); n != 0 {
		t.Fatalf("%d deleted files after Open", n)
	}
}
