package hotlog

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
)

// markerBatch is a control batch (transactional|control) of producer pid;
// hotlog does not open its record.
func markerBatch(pid int64, ts int64) []byte {
	b := makeBatch(ts, 0, testRecord{key: []byte{0, 0, 0, 0}, value: []byte{0, 0, 0, 0, 0, 0}})
	binary.BigEndian.PutUint16(b[offAttributes:], 0x30)
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(pid))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], 0)
	fixCRC(b)
	return b
}

func txnDataBatch(pid int64, ts int64, n int) []byte {
	b := simpleBatch(n, 30, ts)
	binary.BigEndian.PutUint16(b[offAttributes:], 0x10)
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(pid))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], 0)
	fixCRC(b)
	return b
}

// txnModel drives transactions of a few producers into a log, as the
// broker's producer state would: it opens a transaction at a producer's
// first transactional batch, and on an abort marker hands hotlog the entry
// with the LSO after it.
type txnModel struct {
	open    map[int64]int64 // producer -> first offset of its open transaction
	aborted []AbortedTxn
}

func newTxnModel() *txnModel { return &txnModel{open: map[int64]int64{}} }

func (m *txnModel) lso(end int64) int64 {
	lso := end
	for _, f := range m.open {
		lso = min(lso, f)
	}
	return lso
}

// step appends one random batch.
func (m *txnModel) step(t testing.TB, l *Log, rng *rand.Rand, ts int64) {
	t.Helper()
	pid := int64(1 + rng.IntN(3))
	first, open := m.open[pid]
	switch r := rng.IntN(10); {
	case r < 2:
		if _, err := l.Append(simpleBatch(1+rng.IntN(3), 30, ts), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	case r < 7 || !open:
		res, err := l.Append(txnDataBatch(pid, ts, 1+rng.IntN(3)), AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !open {
			m.open[pid] = res.FirstOffset
		}
	default:
		abort := rng.IntN(2) == 0
		var entry AbortedTxn
		res, err := l.Append(markerBatch(pid, ts), AppendOptions{
			Aborted: func(h []BatchHeader) []AbortedTxn {
				if !abort {
					return nil
				}
				delete(m.open, pid)
				entry = AbortedTxn{ProducerID: pid, FirstOffset: first, LastOffset: h[0].BaseOffset, LastStableOffset: m.lso(h[0].BaseOffset + 1)}
				return []AbortedTxn{entry}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		delete(m.open, pid)
		if abort {
			if entry.LastOffset != res.FirstOffset {
				t.Fatalf("entry %+v for a marker at %d", entry, res.FirstOffset)
			}
			m.aborted = append(m.aborted, entry)
		}
	}
}

// want is what a read of [from, to) must be told, from the model.
func (m *txnModel) want(from, to, logStart int64, segs []SegmentInfo) []AbortedTxn {
	if from >= to {
		return nil
	}
	// Entries of deleted segments are gone with them.
	floor := logStart
	for _, s := range segs {
		if s.BaseOffset <= logStart {
			floor = s.BaseOffset
		}
	}
	var out []AbortedTxn
	for _, a := range m.aborted {
		if a.LastOffset >= from && a.LastOffset >= floor && a.FirstOffset < to {
			out = append(out, a)
		}
	}
	return out
}

func checkAborted(t testing.TB, l *Log, m *txnModel, rng *rand.Rand, what string) {
	t.Helper()
	start, end := l.LogStartOffset(), l.LogEndOffset()
	stable := m.lso(end)
	for range 40 {
		from := start + rng.Int64N(end-start+1)
		to := from + rng.Int64N(max(stable-from, 0)+2)
		if to > stable {
			to = stable
		}
		got, err := l.AbortedTxns(from, to)
		if err != nil {
			t.Fatalf("%s: AbortedTxns(%d, %d): %v", what, from, to, err)
		}
		if want := m.want(from, to, start, l.Segments()); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("%s: AbortedTxns(%d, %d) = %+v, want %+v", what, from, to, got, want)
		}
	}
}

func TestTxnIndex(t *testing.T) {
	for seed := range uint64(2) {
		rng := rand.New(rand.NewPCG(seed, 17))
		mem := vfs.NewMem()
		cfg := Config{SegmentBytes: 1500, IndexIntervalBytes: 200}
		l := openMem(t, mem, cfg)
		m := newTxnModel()
		for i := range 300 {
			m.step(t, l, rng, int64(i))
		}
		if len(m.aborted) < 10 || len(l.Segments()) < 5 {
			t.Fatalf("seed %d: only %d aborts over %d segments", seed, len(m.aborted), len(l.Segments()))
		}
		checkAborted(t, l, m, rng, "live")
		withIndex := 0
		for _, s := range l.Segments() {
			if s.TxnIndexFile != "" {
				withIndex++
				data, err := vfs.ReadFile(mem, s.TxnIndexFile, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				entries, err := DecodeTxnIndex(data)
				if err != nil || len(entries) == 0 || entries[0].LastOffset < s.BaseOffset || entries[len(entries)-1].LastOffset >= s.NextOffset {
					t.Fatalf("segment %d: %s holds %+v (%v)", s.BaseOffset, s.TxnIndexFile, entries, err)
				}
			}
		}
		if withIndex == 0 {
			t.Fatal("no segment has a .txnindex")
		}

		// A power loss: every entry was synced before its marker.
		crashed := openMem(t, mem.CrashClone(), cfg)
		checkAborted(t, crashed, m, rng, "after a crash")
		crashed.Close()
		// A clean restart.
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = openMem(t, mem, cfg)
		checkAborted(t, l, m, rng, "reopened")

		// Truncation drops the entries of the cut tail, durably.
		cut := l.LogEndOffset() * 2 / 3
		if err := l.TruncateTo(cut); err != nil {
			t.Fatal(err)
		}
		cut = l.LogEndOffset()
		var kept []AbortedTxn
		for _, a := range m.aborted {
			if a.LastOffset < cut {
				kept = append(kept, a)
			}
		}
		m.aborted = kept
		for p, f := range m.open {
			if f >= cut {
				delete(m.open, p)
			}
		}
		// Transactions cut in the middle stay open as far as the model
		// knows; close them all so that every read range is stable.
		m.open = map[int64]int64{}
		checkAborted(t, l, m, rng, "truncated")
		l.Close()
		mem = mem.CrashClone()
		l = openMem(t, mem, cfg)
		checkAborted(t, l, m, rng, "truncated, crashed")

		// Deleting segments deletes their indexes.
		segs := l.Segments()
		if err := l.DeleteBefore(segs[2].BaseOffset); err != nil {
			t.Fatal(err)
		}
		checkAborted(t, l, m, rng, "after DeleteBefore")
		l.Close()
		names, _ := mem.List("/p")
		for _, n := range names {
			if base, suf, ok := parseBaseName(n); ok && suf == txnIndexSuffix && base < segs[2].BaseOffset {
				t.Fatalf("%s left after DeleteBefore(%d)", n, segs[2].BaseOffset)
			}
		}
	}
}

// TestTxnIndexEarlyStop: a read stops at the first entry whose LSO reaches
// its end, so a consumer near the start of a long log reads one index.
func TestTxnIndexEarlyStop(t *testing.T) {
	entries := []AbortedTxn{
		{ProducerID: 1, FirstOffset: 0, LastOffset: 5, LastStableOffset: 3}, // 2's open from 3
		{ProducerID: 2, FirstOffset: 3, LastOffset: 9, LastStableOffset: 10},
		{ProducerID: 1, FirstOffset: 12, LastOffset: 20, LastStableOffset: 21},
	}
	got, complete := CollectAborted(entries, 0, 4, nil)
	if !complete || len(got) != 2 {
		t.Fatalf("read [0,4): %+v complete %v", got, complete)
	}
	got, complete = CollectAborted(entries, 6, 15, nil)
	if !complete || len(got) != 2 || got[0].LastOffset != 9 || got[1].LastOffset != 20 {
		t.Fatalf("read [6,15): %+v complete %v", got, complete)
	}
	got, complete = CollectAborted(entries, 21, 30, nil)
	if complete || len(got) != 0 {
		t.Fatalf("read [21,30): %+v complete %v", got, complete)
	}
}

// TestTxnIndexCrashAppends crashes before every file-system operation of
// appends with aborts and rolls: a recovered log has exactly the entries of
// the markers it kept.
func TestTxnIndexCrashAppends(t *testing.T) {
	for seed := range uint64(2) {
		rng := rand.New(rand.NewPCG(seed, 23))
		mem := vfs.NewMem()
		rec := &crashRecorder{mem: mem, rng: rng}
		fs := errorfs.Wrap(mem, rec)
		cfg := Config{SegmentBytes: 1200, IndexIntervalBytes: 200}
		l := openMem(t, fs, cfg)
		m := newTxnModel()
		rec.on.Store(true)
		for i := range 80 {
			m.step(t, l, rng, int64(i))
		}
		l.Close()
		rec.on.Store(false)
		for i, cp := range rec.clones {
			l := openMem(t, cp.fs, cfg)
			end := l.LogEndOffset()
			var want []AbortedTxn
			for _, a := range m.aborted {
				if a.LastOffset < end {
					want = append(want, a)
				}
			}
			// [0, end) is not stable in general: compare the indexes
			// without the early stop.
			var all []AbortedTxn
			for _, s := range l.Segments() {
				seg := (*l.segs.Load())[segmentFor(*l.segs.Load(), s.BaseOffset)]
				e, err := seg.txnEntries()
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, e...)
			}
			if !reflect.DeepEqual(all, want) && !(len(all) == 0 && len(want) == 0) {
				t.Fatalf("seed %d crash %d (%s): log end %d, entries %+v, want %+v", seed, i, cp.what, end, all, want)
			}
			l.Close()
		}
		t.Logf("seed %d: %d crash points", seed, len(rec.clones))
	}
}

// TestTxnIndexReplaceSegments: the cleaner's swap keeps the entries whose
// markers it keeps, crash-safely.
func TestTxnIndexReplaceSegments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	mem := vfs.NewMem()
	rec := &crashRecorder{mem: mem, rng: rng}
	fs := errorfs.Wrap(mem, rec)
	cfg := Config{SegmentBytes: 1500, IndexIntervalBytes: 200}
	l := openMem(t, fs, cfg)
	m := newTxnModel()
	for i := range 300 {
		m.step(t, l, rng, int64(i))
	}
	segs := l.Segments()
	// The group: segments 1..3; keep every batch but the first marker of
	// an aborted transaction in it.
	group := segs[1:4]
	var dropped int64 = -1
	for _, a := range m.aborted {
		if a.LastOffset >= group[0].BaseOffset && a.LastOffset < group[2].NextOffset {
			dropped = a.LastOffset
			break
		}
	}
	if dropped < 0 {
		t.Fatal("no abort in the group")
	}
	w, err := l.NewSegmentWriter(group[0].BaseOffset)
	if err != nil {
		t.Fatal(err)
	}
	var old []int64
	for _, s := range group {
		old = append(old, s.BaseOffset)
	}
	b, err := l.ReadBytes(group[0].BaseOffset, 1<<20, group[2].NextOffset)
	if err != nil {
		t.Fatal(err)
	}
	for len(b) > 0 {
		h, err := ParseBatchHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.BaseOffset != dropped {
			if err := w.Write(b[:h.Size()]); err != nil {
				t.Fatal(err)
			}
		}
		b = b[h.Size():]
	}
	entriesOf := func(l *Log) []AbortedTxn {
		var all []AbortedTxn
		for _, s := range *l.segs.Load() {
			e, err := s.txnEntries()
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, e...)
		}
		return all
	}
	before := entriesOf(l)
	var after []AbortedTxn
	for _, a := range before {
		if a.LastOffset != dropped {
			after = append(after, a)
		}
	}
	rec.on.Store(true)
	if err := l.ReplaceSegments(old, w); err != nil {
		t.Fatal(err)
	}
	rec.on.Store(false)
	if got := entriesOf(l); !reflect.DeepEqual(got, after) {
		t.Fatalf("after the swap: %+v, want %+v", got, after)
	}
	l.Close()
	sawOld, sawNew := false, false
	for i, cp := range rec.clones {
		l := openMem(t, cp.fs, cfg)
		got := entriesOf(l)
		newLog := len(l.Segments()) == len(segs)-2
		switch {
		case !newLog && reflect.DeepEqual(got, before):
			sawOld = true
		case newLog && reflect.DeepEqual(got, after):
			sawNew = true
		default:
			t.Fatalf("crash %d (%s): %d segments, entries %+v", i, cp.what, len(l.Segments()), got)
		}
		l.Close()
	}
	if !sawOld || !sawNew {
		t.Fatalf("crash points saw old %v new %v", sawOld, sawNew)
	}
}

// TestAddAbortedTxn: rebuilding a lost index from the log (the broker's
// replay) adds what is missing, once.
func TestAddAbortedTxn(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	mem := vfs.NewMem()
	cfg := Config{SegmentBytes: 1500, IndexIntervalBytes: 200}
	l := openMem(t, mem, cfg)
	m := newTxnModel()
	for i := range 200 {
		m.step(t, l, rng, int64(i))
	}
	l.Close()
	// Lose every index.
	names, _ := mem.List("/p")
	for _, n := range names {
		if strings.HasSuffix(n, txnIndexSuffix) {
			mem.Remove("/p/" + n)
		}
	}
	l = openMem(t, mem, cfg)
	defer l.Close()
	if got, _ := l.AbortedTxns(0, l.LogEndOffset()); len(got) != 0 {
		t.Fatalf("lost indexes still answer %+v", got)
	}
	// Add them back in a shuffled order (inserts in the middle too).
	perm := rng.Perm(len(m.aborted))
	for _, i := range perm {
		added, err := l.AddAbortedTxn(m.aborted[i])
		if err != nil || !added {
			t.Fatalf("AddAbortedTxn(%+v) = %v, %v", m.aborted[i], added, err)
		}
	}
	for _, a := range m.aborted {
		if added, err := l.AddAbortedTxn(a); err != nil || added {
			t.Fatalf("second AddAbortedTxn(%+v) = %v, %v", a, added, err)
		}
	}
	if _, err := l.AddAbortedTxn(AbortedTxn{ProducerID: 1, FirstOffset: 0, LastOffset: l.LogEndOffset(), LastStableOffset: 0}); err == nil {
		t.Fatal("an entry past the log end was accepted")
	}
	m.open = map[int64]int64{}
	checkAborted(t, l, m, rng, "rebuilt")
	l.Close()
	l = openMem(t, mem.CrashClone(), cfg)
	checkAborted(t, l, m, rng, "rebuilt, crashed")
}

func TestDecodeTxnIndex(t *testing.T) {
	entries := []AbortedTxn{{1, 0, 5, 6}, {2, 3, 9, 10}}
	b := AppendTxnIndex(nil, entries)
	if len(b) != 2*TxnIndexEntrySize {
		t.Fatalf("%d bytes", len(b))
	}
	got, err := DecodeTxnIndex(b)
	if err != nil || !reflect.DeepEqual(got, entries) {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range [][]byte{
		b[:len(b)-1],
		AppendTxnIndex(nil, []AbortedTxn{{2, 3, 9, 10}, {1, 0, 5, 6}}), // markers out of order
		AppendTxnIndex(nil, []AbortedTxn{{1, 7, 5, 6}}),                // first after last
		AppendTxnIndex(nil, []AbortedTxn{{-1, 0, 5, 6}}),
		append([]byte{0, 1}, b[2:]...), // version 1
	} {
		if _, err := DecodeTxnIndex(bad); err == nil {
			t.Fatalf("accepted %x", bad)
		}
	}
	var out bytes.Buffer
	mem := vfs.NewMem()
	mem.MkdirAll("/p", 0o755)
	vfs.WriteFileAtomic(mem, "/p/00000000000000000000.txnindex", b)
	if err := Dump(&out, mem, "/p/00000000000000000000.txnindex"); err != nil || !strings.Contains(out.String(), "producerId=2 firstOffset=3 lastOffset=9 lastStableOffset=10") {
		t.Fatalf("dump: %v\n%s", err, out.String())
	}
}

// FuzzTxnIndex decodes arbitrary bytes as a transaction index (as read from
// disk or a bucket) and opens a log whose sealed and active segments carry
// them: decoding either fails or round-trips, reads never panic, and a
// damaged active index is cut to its valid prefix.
func FuzzTxnIndex(f *testing.F) {
	f.Add(AppendTxnIndex(nil, []AbortedTxn{{1, 0, 1, 2}, {2, 1, 2, 3}}), int64(0), int64(3))
	f.Add(AppendTxnIndex(nil, []AbortedTxn{{1, 0, 1, 2}})[:20], int64(1), int64(2))
	f.Add([]byte{}, int64(0), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, from, to int64) {
		entries, err := DecodeTxnIndex(data)
		if err == nil {
			if !bytes.Equal(AppendTxnIndex(nil, entries), data) {
				t.Fatal("decode/encode does not round-trip")
			}
			got, _ := CollectAborted(entries, from, to, nil)
			for _, a := range got {
				if a.LastOffset < from || a.FirstOffset >= to {
					t.Fatalf("collected %+v for [%d, %d)", a, from, to)
				}
			}
		}
		fs := vfs.NewMem()
		fs.MkdirAll("/p", 0o755)
		w := func(name string, b []byte) {
			f, _ := fs.Create("/p/" + name)
			f.Write(b)
			f.Close()
		}
		w(baseName(0)+logSuffix, simpleBatch(3, 7, 1))
		w(baseName(0)+txnIndexSuffix, data)
		w(baseName(3)+logSuffix, simpleBatch(3, 7, 1)[:0])
		w(baseName(3)+txnIndexSuffix, data)
		l, err := Open(Options{FS: fs, Dir: "/p", Logger: quiet})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer l.Close()
		got, err := l.AbortedTxns(max(from, 0), to)
		if err == nil {
			for _, a := range got {
				if a.LastOffset < from || a.FirstOffset >= to || !a.valid() {
					t.Fatalf("read %+v for [%d, %d)", a, from, to)
				}
			}
		}
		// The active segment (base 3, empty) keeps no entry.
		if e, err := (*l.segs.Load())[1].txnEntries(); err != nil || len(e) != 0 {
			t.Fatalf("active segment entries %+v, %v", e, err)
		}
	})
}
