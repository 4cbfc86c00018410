package compaction

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/vfs"
)

// writeKeyed appends batches of random keys from [0, keys) with updates and
// about one tombstone in tombEvery records, and seals everything by rolling
// (a final one-record batch lands in a fresh active segment).
func writeKeyed(t testing.TB, l *hotlog.Log, clk *clock, rng *rand.Rand, tc testCodec, keys, records, tombEvery int) {
	t.Helper()
	for written := 0; written < records; {
		n := min(1+rng.IntN(8), records-written)
		recs := make([]kv, n)
		for i := range recs {
			k := rng.IntN(keys)
			recs[i] = kv{key: keyOf(k), value: []byte(fmt.Sprintf("v%d-%d", k, written+i))}
			if tombEvery > 0 && rng.IntN(tombEvery) == 0 {
				recs[i].value = nil
			}
		}
		if _, err := l.Append(makeBatch(t, tc, clk.now().UnixMilli(), batchOpts{}, recs...), hotlog.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		written += n
		clk.add(time.Millisecond)
	}
}

// seal rolls the active segment by appending a large batch of a key nobody
// checks, so that everything before it is cleanable, and moves the high
// watermark to the end.
func seal(t testing.TB, l *hotlog.Log, clk *clock, segBytes int64) {
	t.Helper()
	big := make([]byte, segBytes)
	if _, err := l.Append(makeBatch(t, testCodecs[0], clk.now().UnixMilli(), batchOpts{}, kv{[]byte("~seal"), big}), hotlog.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(makeBatch(t, testCodecs[0], clk.now().UnixMilli(), batchOpts{}, kv{[]byte("~tail"), []byte("x")}), hotlog.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	l.SetHighWatermark(l.LogEndOffset())
}

// cleanAll runs passes until the whole cleanable range was mapped.
func cleanAll(t testing.TB, c *Cleaner, tg *Target) []Stats {
	t.Helper()
	var all []Stats
	for i := 0; ; i++ {
		st, err := c.Clean(context.Background(), *tg)
		if err != nil {
			t.Fatalf("clean: %v", err)
		}
		all = append(all, st)
		tg.FirstDirty = st.MapEnd
		r, err := CleanableRange(*tg, c.now())
		if err != nil {
			t.Fatal(err)
		}
		if r.FirstDirty >= r.FirstUncleanable {
			return all
		}
		if i > 1000 {
			t.Fatal("cleaning does not finish")
		}
	}
}

func TestCleanEveryCodec(t *testing.T) {
	for _, tc := range testCodecs {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{}
			clk.ms.Store(1_000_000)
			rng := rand.New(rand.NewPCG(1, uint64(tc.codec)))
			mem := vfs.NewMem()
			l := openLog(t, mem, 4<<10, clk)
			defer func() { l.Close() }()
			writeKeyed(t, l, clk, rng, tc, 120, 1000, 10)
			seal(t, l, clk, 4<<10)
			before := readView(t, l)
			want := latest(before)
			segsBefore := len(l.Segments())
			c := NewCleaner(CleanerConfig{DedupeBufferBytes: 1 << 20}, clk.now)
			defer c.Close()
			tg := &Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, DeleteRetention: time.Hour, SegmentBytes: 16 << 10}}
			stats := cleanAll(t, c, tg)
			after := readView(t, l)
			checkCompacted(t, after, want, false)
			if stats[0].RecordsDropped == 0 || stats[0].SegmentsAfter >= stats[0].SegmentsBefore {
				t.Fatalf("nothing dropped or merged: %+v", stats[0])
			}
			if n := len(l.Segments()); n >= segsBefore {
				t.Fatalf("%d segments after cleaning, %d before", n, segsBefore)
			}
			// Before the horizon another pass keeps the tombstones.
			tg.FirstDirty = 0
			cleanAll(t, c, tg)
			checkCompacted(t, readView(t, l), want, false)
			// After delete.retention.ms they go, and the deleted keys with them.
			clk.add(time.Hour + time.Second)
			cleanAll(t, c, tg)
			checkCompacted(t, readView(t, l), want, true)
			// Once more: nothing left to drop, so no single segment is swapped.
			tg.FirstDirty = 0
			again := cleanAll(t, c, tg)
			if again[0].SegmentsUnchanged == 0 || again[0].RecordsDropped != 0 {
				t.Fatalf("a pass over a clean log: %+v", again[0])
			}
			checkCompacted(t, readView(t, l), want, true)
			// The log survives a reopen as it is.
			final := readView(t, l)
			end := l.LogEndOffset()
			l.Close()
			l = openLog(t, mem, 4<<10, clk)
			if l.LogEndOffset() != end || len(readView(t, l)) != len(final) {
				t.Fatal("reopened log differs")
			}
		})
	}
}

func TestCleanMultiPassTinyMap(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(5_000_000)
	rng := rand.New(rand.NewPCG(2, 2))
	l := openLog(t, vfs.NewMem(), 2<<10, clk)
	defer l.Close()
	writeKeyed(t, l, clk, rng, testCodecs[5], 300, 2000, 15)
	seal(t, l, clk, 2<<10)
	want := latest(readView(t, l))
	// Room for 43 keys (12 buckets of 4 slots at 90%, a quarter of the
	// memory for the bitmaps): many passes.
	c := NewCleaner(CleanerConfig{DedupeBufferBytes: 64 * offsetMapSlotBytes}, clk.now)
	defer c.Close()
	tg := &Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, DeleteRetention: time.Minute, SegmentBytes: 8 << 10}}
	passes := 0
	for {
		st, err := c.Clean(context.Background(), *tg)
		if err != nil {
			t.Fatal(err)
		}
		passes++
		if st.MapEntries > 43 {
			t.Fatalf("map holds %d keys, bound 43", st.MapEntries)
		}
		// After every pass the log still holds the latest of every key.
		checkLatestPreserved(t, readView(t, l), want)
		tg.FirstDirty = st.MapEnd
		r, _ := CleanableRange(*tg, clk.now())
		if r.FirstDirty >= r.FirstUncleanable {
			break
		}
	}
	if passes < 5 {
		t.Fatalf("only %d passes with a tiny map", passes)
	}
	// A last full pass (fresh checkpoint) leaves exactly the latest values.
	tg.FirstDirty = 0
	c2 := NewCleaner(CleanerConfig{DedupeBufferBytes: 1 << 20}, clk.now)
	defer c2.Close()
	cleanAll(t, c2, tg)
	checkCompacted(t, readView(t, l), want, false)
	t.Logf("%d passes", passes)
}

// checkLatestPreserved checks that the latest record of every key in view is
// the one in want (older duplicates may remain).
func checkLatestPreserved(t testing.TB, view []seen, want map[string]seen) {
	t.Helper()
	got := latest(view)
	for k, w := range want {
		g, ok := got[k]
		if !ok || g.offset != w.offset || string(g.value) != string(w.value) {
			t.Fatalf("key %q: latest is %+v, want %+v", k, g, w)
		}
	}
}

func TestCleanableRange(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(10_000_000)
	l := openLog(t, vfs.NewMem(), 1<<10, clk)
	defer l.Close()
	rng := rand.New(rand.NewPCG(3, 3))
	writeKeyed(t, l, clk, rng, testCodecs[0], 20, 300, 0)
	seal(t, l, clk, 1<<10)
	tg := Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}}}
	r, err := CleanableRange(tg, clk.now())
	if err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if r.FirstUncleanable != segs[len(segs)-1].BaseOffset || r.FirstDirty != 0 || r.DirtyRatio() != 1 {
		t.Fatalf("range %+v, active at %d", r, segs[len(segs)-1].BaseOffset)
	}
	// The high watermark bounds it.
	l.SetHighWatermark(10)
	if r, _ := CleanableRange(tg, clk.now()); r.FirstUncleanable != 10 {
		t.Fatalf("high watermark 10: %+v", r)
	}
	l.SetHighWatermark(l.LogEndOffset())
	// min.compaction.lag.ms: everything is younger than an hour.
	tg.Config.MinCompactionLag = time.Hour
	if r, _ := CleanableRange(tg, clk.now()); r.FirstUncleanable != 0 {
		t.Fatalf("min lag: %+v", r)
	}
	tg.Config.MinCompactionLag = 0
	// max.compaction.lag.ms forces.
	tg.Config.MaxCompactionLag = time.Minute
	if r, _ := CleanableRange(tg, clk.now()); r.Forced {
		t.Fatal("forced too early")
	}
	clk.add(2 * time.Minute)
	if r, _ := CleanableRange(tg, clk.now()); !r.Forced {
		t.Fatal("not forced past max lag")
	}
	// An open transaction bounds it.
	tg.Txn = &fixtureTxns{fuo: 42}
	if r, _ := CleanableRange(tg, clk.now()); r.FirstUncleanable != 42 {
		t.Fatalf("first unstable 42: %+v", r)
	}
	// After a clean the clean part counts.
	tg.Txn = nil
	c := NewCleaner(CleanerConfig{}, clk.now)
	defer c.Close()
	st, err := c.Clean(context.Background(), tg)
	if err != nil {
		t.Fatal(err)
	}
	tg.FirstDirty = st.MapEnd
	if r, _ := CleanableRange(tg, clk.now()); r.DirtyBytes != 0 || r.CleanBytes == 0 {
		t.Fatalf("after clean: %+v", r)
	}
}

// fixtureTxns is a Transactions fixture.
func newFixtureTxns() *fixtureTxns { return &fixtureTxns{fuo: -1, last: map[int64]int64{}} }

type fixtureTxns struct {
	fuo     int64
	aborted []AbortedTxn
	last    map[int64]int64
}

func (f *fixtureTxns) FirstUnstableOffset() int64 { return f.fuo }
func (f *fixtureTxns) AbortedTransactions(from, to int64) ([]AbortedTxn, error) {
	var out []AbortedTxn
	for _, a := range f.aborted {
		if a.LastOffset >= from && a.FirstOffset < to {
			out = append(out, a)
		}
	}
	return out, nil
}
func (f *fixtureTxns) ProducerLastOffset(pid int64) (int64, bool) {
	o, ok := f.last[pid]
	return o, ok
}

func TestCleanAbortedTransactions(t *testing.T) {
	for _, tc := range []testCodec{testCodecs[0], testCodecs[4]} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{}
			clk.ms.Store(1_000_000)
			l := openLog(t, vfs.NewMem(), 1<<10, clk)
			defer l.Close()
			fx := newFixtureTxns()
			app := appendTo(t, l)
			ts := clk.now().UnixMilli()
			// Committed values of a and b.
			app(makeBatch(t, tc, ts, batchOpts{}, kv{[]byte("a"), []byte("a1")}, kv{[]byte("b"), []byte("b1")}))
			// Producer 7 writes a newer a and c in a transaction, then aborts.
			r1 := app(makeBatch(t, tc, ts, batchOpts{producerID: 7, transactional: true}, kv{[]byte("a"), []byte("a-aborted")}, kv{[]byte("c"), []byte("c-aborted")}))
			// Producer 8 commits b and d meanwhile.
			app(makeBatch(t, tc, ts, batchOpts{producerID: 8, transactional: true}, kv{[]byte("b"), []byte("b2")}, kv{[]byte("d"), []byte("d1")}))
			abort := app(controlBatch(t, ts, 7, false))
			commit := app(controlBatch(t, ts, 8, true))
			fx.aborted = []AbortedTxn{{ProducerID: 7, FirstOffset: r1.FirstOffset, LastOffset: abort.FirstOffset}}
			fx.last[7], fx.last[8] = abort.LastOffset, commit.LastOffset
			for i := range 20 {
				app(makeBatch(t, tc, ts, batchOpts{}, kv{[]byte(fmt.Sprintf("z%d", i)), make([]byte, 100)}))
			}
			seal(t, l, clk, 1<<10)
			c := NewCleaner(CleanerConfig{}, clk.now)
			defer c.Close()
			tg := &Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, DeleteRetention: time.Minute}, Txn: fx}
			cleanAll(t, c, tg)
			view := readView(t, l)
			got := latest(view)
			if string(got["a"].value) != "a1" || string(got["b"].value) != "b2" || string(got["d"].value) != "d1" {
				t.Fatalf("after clean: a=%q b=%q d=%q", got["a"].value, got["b"].value, got["d"].value)
			}
			if _, ok := got["c"]; ok {
				t.Fatal("aborted key c survived")
			}
			for _, r := range view {
				if string(r.value) == "a-aborted" || string(r.value) == "c-aborted" {
					t.Fatalf("aborted record at %d survived", r.offset)
				}
			}
			markers := func() int {
				n := 0
				for _, r := range readView(t, l) {
					if r.control {
						n++
					}
				}
				return n
			}
			if n := markers(); n != 2 {
				t.Fatalf("%d markers before their horizon, want 2", n)
			}
			// Past the horizon: the abort marker's data is gone, so it goes;
			// the commit marker's data (b2, d1) is still there, so it stays.
			clk.add(2 * time.Minute)
			tg.FirstDirty = 0
			cleanAll(t, c, tg)
			if n := markers(); n != 1 {
				t.Fatalf("%d markers after the horizon, want 1 (the commit)", n)
			}
			got = latest(readView(t, l))
			if string(got["a"].value) != "a1" || string(got["b"].value) != "b2" || string(got["d"].value) != "d1" {
				t.Fatalf("after second clean: a=%q b=%q d=%q", got["a"].value, got["b"].value, got["d"].value)
			}
			// The producer's last batch keeps its header when all its
			// records go: offsets of producer 7's abort marker still read.
			b, err := l.ReadBytes(abort.FirstOffset, 1, l.LogEndOffset())
			if err != nil {
				t.Fatal(err)
			}
			h, _ := hotlog.ParseBatchHeader(b)
			if h.BaseOffset != abort.FirstOffset || h.NumRecords != 0 || h.ProducerID != 7 {
				t.Fatalf("producer 7's last batch: %+v", h)
			}
		})
	}
}

// writeCommittedKeys appends to l producer 8's transaction writing b and d,
// its commit marker and 20 other keys, and seals the log; it returns the
// transaction state for the cleaner.
func writeCommittedKeys(t testing.TB, l *hotlog.Log, clk *clock, segBytes int64) *fixtureTxns {
	t.Helper()
	fx := newFixtureTxns()
	app := appendTo(t, l)
	ts := clk.now().UnixMilli()
	app(makeBatch(t, testCodecs[0], ts, batchOpts{producerID: 8, transactional: true}, kv{[]byte("b"), []byte("b1")}, kv{[]byte("d"), []byte("d1")}))
	fx.last[8] = app(controlBatch(t, ts, 8, true)).LastOffset
	for i := range 20 {
		app(makeBatch(t, testCodecs[0], ts, batchOpts{}, kv{[]byte(fmt.Sprintf("z%d", i)), make([]byte, 100)}))
	}
	seal(t, l, clk, segBytes)
	return fx
}

// countMarkers counts the transaction markers left in l.
func countMarkers(t testing.TB, l *hotlog.Log) int {
	t.Helper()
	n := 0
	for _, r := range readView(t, l) {
		if r.control {
			n++
		}
	}
	return n
}

// TestKeptMarkerPastHorizonNotedNoMore: a commit marker whose delete horizon
// has passed but which stays, its transaction's records being still the
// latest of their keys, is not reported in Stats.NextDeleteHorizon. The
// Manager forces a pass once that time has come, so reporting the passed
// horizon made it clean the log back to back for ever, starving the other
// compacted logs of the broker (a review saw ~240 passes/s on an idle
// broker, and changelog partitions at dirty ratio 0.95 never cleaned). The
// horizon is reported while it is ahead; a tombstone kept before its
// horizon still reports its own; the marker goes in the pass after the one
// that drops its records.
func TestKeptMarkerPastHorizonNotedNoMore(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	l := openLog(t, vfs.NewMem(), 1<<10, clk)
	defer l.Close()
	fx := writeCommittedKeys(t, l, clk, 1<<10)
	c := NewCleaner(CleanerConfig{}, clk.now)
	defer c.Close()
	tg := &Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, DeleteRetention: time.Minute}, Txn: fx}
	next := func(what string, st []Stats, want int64) {
		t.Helper()
		if got := st[len(st)-1].NextDeleteHorizon; got != want {
			t.Fatalf("%s: NextDeleteHorizon %d, want %d (now %d)", what, got, want, clk.now().UnixMilli())
		}
	}
	markerHorizon := clk.now().Add(time.Minute).UnixMilli()
	next("first pass (stamps the marker)", cleanAll(t, c, tg), markerHorizon)
	clk.add(30 * time.Second)
	next("before the horizon", cleanAll(t, c, tg), markerHorizon)
	clk.add(time.Minute)
	for i := range 3 {
		next(fmt.Sprintf("pass %d past the horizon", i), cleanAll(t, c, tg), -1)
	}
	got := latest(readView(t, l))
	if n := countMarkers(t, l); n != 1 || string(got["b"].value) != "b1" || string(got["d"].value) != "d1" {
		t.Fatalf("%d markers, b=%q d=%q; want the marker and b1, d1", n, got["b"].value, got["d"].value)
	}
	// A tombstone kept within delete.retention.ms reports its horizon, not
	// the marker's passed one.
	app := appendTo(t, l)
	app(makeBatch(t, testCodecs[0], clk.now().UnixMilli(), batchOpts{}, kv{[]byte("z0"), nil}))
	seal(t, l, clk, 1<<10)
	tombHorizon := clk.now().Add(time.Minute).UnixMilli()
	next("a tombstone kept", cleanAll(t, c, tg), tombHorizon)
	// Newer values of b and d: the pass that drops b1 and d1 keeps the
	// marker (it read them); the next one drops it.
	app(makeBatch(t, testCodecs[0], clk.now().UnixMilli(), batchOpts{}, kv{[]byte("b"), []byte("b2")}, kv{[]byte("d"), []byte("d2")}))
	seal(t, l, clk, 1<<10)
	next("b1 and d1 dropped", cleanAll(t, c, tg), tombHorizon)
	if n := countMarkers(t, l); n != 1 {
		t.Fatalf("%d markers in the pass dropping the transaction's records, want 1", n)
	}
	next("the marker dropped", cleanAll(t, c, tg), tombHorizon)
	got = latest(readView(t, l))
	if n := countMarkers(t, l); n != 0 || string(got["b"].value) != "b2" || string(got["d"].value) != "d2" || got["z0"].value != nil {
		t.Fatalf("%d markers, b=%q d=%q z0=%q; want none and b2, d2, the tombstone", n, got["b"].value, got["d"].value, got["z0"].value)
	}
}

func TestCleanRefusesCorruptBatch(t *testing.T) {
	clk := &clock{}
	mem := vfs.NewMem()
	l := openLog(t, mem, 1<<10, clk)
	defer l.Close()
	// A batch whose CRC is right but whose compressed payload is garbage.
	b := makeBatch(t, testCodecs[1], 0, batchOpts{}, kv{[]byte("k"), []byte("v")})
	for i := hotlog.BatchHeaderSize; i < len(b); i++ {
		b[i] = 0xAA
	}
	fixCRC(b)
	if _, err := l.Append(b, hotlog.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	seal(t, l, clk, 1<<10)
	c := NewCleaner(CleanerConfig{}, clk.now)
	defer c.Close()
	_, err := c.Clean(context.Background(), Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}}})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("clean of a corrupt batch: %v", err)
	}
	names, _ := mem.List("/p")
	for _, n := range names {
		if len(n) > 8 && n[len(n)-8:] == ".cleaned" {
			t.Fatalf("leftover %s", n)
		}
	}
}

// TestCleanMultiPassHorizonsNoResurrection cleans in many passes with a tiny
// map while delete horizons pass between passes: a tombstone may vanish with
// its key, but no key ever shows an older value than its latest.
func TestCleanMultiPassHorizonsNoResurrection(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(5_000_000)
	rng := rand.New(rand.NewPCG(12, 12))
	l := openLog(t, vfs.NewMem(), 1<<10, clk)
	defer l.Close()
	writeKeyed(t, l, clk, rng, testCodecs[0], 120, 1500, 4)
	seal(t, l, clk, 1<<10)
	want := latest(readView(t, l))
	c := NewCleaner(CleanerConfig{DedupeBufferBytes: 30 * offsetMapSlotBytes}, clk.now)
	defer c.Close()
	tg := Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, DeleteRetention: time.Second, SegmentBytes: 4 << 10}}
	for pass := 0; pass < 400; pass++ {
		st, err := c.Clean(context.Background(), tg)
		if err != nil {
			t.Fatal(err)
		}
		got := latest(readView(t, l))
		for k, w := range want {
			g, ok := got[k]
			switch {
			case !ok && w.value == nil:
			case !ok:
				t.Fatalf("pass %d: key %q lost", pass, k)
			case g.offset != w.offset:
				t.Fatalf("pass %d: key %q shows offset %d (%q), latest is %d", pass, k, g.offset, g.value, w.offset)
			}
		}
		clk.add(700 * time.Millisecond) // horizons pass every other pass
		tg.FirstDirty = st.MapEnd
		if r, _ := CleanableRange(tg, clk.now()); r.FirstDirty >= r.FirstUncleanable {
			tg.FirstDirty = 0 // start over: horizons keep passing
		}
	}
}

// TestTombstonePastMapEndStays pins the map's end just before a tombstone
// (the high watermark bounds the cleanable range): the tombstone lies past
// the mapped range in a segment that is rewritten, so it must neither get a
// horizon nor be dropped there, or the older value it deletes would come
// back.
func TestTombstonePastMapEndStays(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(5_000_000)
	l := openLog(t, vfs.NewMem(), 4<<10, clk)
	defer l.Close()
	app := func(recs ...kv) {
		if _, err := l.Append(makeBatch(t, testCodecs[0], clk.now().UnixMilli(), batchOpts{}, recs...), hotlog.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	app(kv{[]byte("k"), []byte("old")}) // offset 0
	app(kv{[]byte("k"), nil})           // offset 1: deletes k
	for i := range 5 {
		app(kv{keyOf(i), []byte("x")})
	}
	seal(t, l, clk, 4<<10)
	end := l.HighWatermark()
	c := NewCleaner(CleanerConfig{}, clk.now)
	defer c.Close()
	tg := Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, DeleteRetention: time.Second}}
	for range 3 {
		l.SetHighWatermark(1) // map [0, 1) only
		if _, err := c.Clean(context.Background(), tg); err != nil {
			t.Fatal(err)
		}
		clk.add(2 * time.Second)
		got := latest(readView(t, l))
		if k, ok := got["k"]; !ok || k.value != nil {
			t.Fatalf("k after a pass mapping only offset 0: %+v (present %v)", k, ok)
		}
	}
	// With the whole range mapped, k's old value goes, then the tombstone.
	l.SetHighWatermark(end)
	for range 2 {
		if _, err := c.Clean(context.Background(), tg); err != nil {
			t.Fatal(err)
		}
		clk.add(2 * time.Second)
	}
	if _, ok := latest(readView(t, l))["k"]; ok {
		t.Fatal("k still there after its tombstone's horizon")
	}
}

// TestCleanSkipsSupersededRuns: runs of batches whose records were all
// superseded are passed over without being read (small read chunks, so the
// runs span chunks), yet a producer's last batch inside such a run keeps its
// header, a transactional batch inside it still counts for its commit
// marker, the batch of latest values is copied byte for byte, and the
// record counts include what was passed over.
func TestCleanSkipsSupersededRuns(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	l := openLog(t, vfs.NewMem(), 4<<10, clk)
	defer l.Close()
	fx := newFixtureTxns()
	ts := clk.now().UnixMilli()
	round := func(name string, o batchOpts) hotlog.AppendResult {
		recs := make([]kv, 10)
		for k := range recs {
			recs[k] = kv{[]byte(fmt.Sprintf("k%d", k)), []byte(fmt.Sprintf("%s-%d", name, k))}
		}
		res, err := l.Append(makeBatch(t, testCodecs[0], ts, o, recs...), hotlog.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var last hotlog.AppendResult
	var p7, commit hotlog.AppendResult
	for r := 1; r <= 20; r++ {
		last = round(fmt.Sprintf("r%d", r), batchOpts{})
		switch r {
		case 5:
			p7 = round("p7", batchOpts{producerID: 7})
			fx.last[7] = p7.LastOffset
		case 8:
			round("p8", batchOpts{producerID: 8, transactional: true})
			var err error
			if commit, err = l.Append(controlBatch(t, ts, 8, true), hotlog.AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			fx.last[8] = commit.LastOffset
		}
	}
	lastBytes, err := l.ReadBytes(last.FirstOffset, 1, l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	seal(t, l, clk, 4<<10)
	c := NewCleaner(CleanerConfig{ReadChunk: 512}, clk.now)
	defer c.Close()
	st, err := c.Clean(context.Background(), Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, DeleteRetention: time.Minute}, Txn: fx})
	if err != nil {
		t.Fatal(err)
	}
	if st.OffsetsSkipped == 0 {
		t.Fatalf("nothing skipped: %+v", st)
	}
	// 19 rounds, producer 7's and producer 8's batches dropped; the last
	// round, the commit marker and the seal batch kept.
	if st.RecordsDropped != 210 || st.RecordsRead != 222 {
		t.Fatalf("read %d records, dropped %d; want 222 and 210 (%+v)", st.RecordsRead, st.RecordsDropped, st)
	}
	view := readView(t, l)
	got := latest(view)
	for k := range 10 {
		if g := got[fmt.Sprintf("k%d", k)]; string(g.value) != fmt.Sprintf("r20-%d", k) {
			t.Fatalf("k%d holds %q", k, g.value)
		}
	}
	markers := 0
	for _, r := range view {
		if r.control {
			markers++
		}
	}
	// The last round, the marker, the seal and the tail.
	if markers != 1 || len(view) != 13 {
		t.Fatalf("%d records, %d markers after the pass; want 13 and 1", len(view), markers)
	}
	b, err := l.ReadBytes(p7.FirstOffset, 1, l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := hotlog.ParseBatchHeader(b); h.BaseOffset != p7.FirstOffset || h.NumRecords != 0 || h.ProducerID != 7 {
		t.Fatalf("producer 7's last batch: %+v", h)
	}
	after, err := l.ReadBytes(last.FirstOffset, 1, l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	if string(after[:len(lastBytes)]) != string(lastBytes) {
		t.Fatal("the batch of latest values was not copied as it was")
	}
}
