package compaction

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"
	"github.com/zeebo/xxh3"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
)

// TestCrashDuringClean takes a crash clone of the file system before every
// operation of a cleaning pass (three groups swapped), reopens each, and
// checks that every key's latest record is the one written last and that the
// log holds nothing that was not written.
func TestCrashDuringClean(t *testing.T) {
	for _, tc := range []testCodec{testCodecs[0], testCodecs[2]} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{}
			clk.ms.Store(1_000_000)
			mem := vfs.NewMem()
			var on atomic.Bool
			var mu sync.Mutex
			var clones []*vfs.MemFS
			var what []string
			fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				if on.Load() {
					mu.Lock()
					clones = append(clones, mem.CrashClone())
					what = append(what, op.String()+" "+path)
					mu.Unlock()
				}
				return nil
			}))
			l := openLog(t, fs, 2<<10, clk)
			rng := rand.New(rand.NewPCG(9, 9))
			writeKeyed(t, l, clk, rng, tc, 60, 600, 8)
			seal(t, l, clk, 2<<10)
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			before := readView(t, l)
			want := latest(before)
			written := map[int64]string{}
			for _, r := range before {
				written[r.offset] = string(r.value)
			}
			c := NewCleaner(CleanerConfig{DedupeBufferBytes: 1 << 20}, clk.now)
			defer c.Close()
			on.Store(true)
			st, err := c.Clean(context.Background(), Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, SegmentBytes: 8 << 10}})
			on.Store(false)
			if err != nil {
				t.Fatal(err)
			}
			if st.SegmentsAfter < 2 {
				t.Fatalf("only %d groups: %+v", st.SegmentsAfter, st)
			}
			l.Close()
			sawNew := false
			for i, cfs := range clones {
				l := openLog(t, cfs, 2<<10, clk)
				view := readView(t, l)
				checkLatestPreserved(t, view, want)
				for _, r := range view {
					if v, ok := written[r.offset]; !ok || v != string(r.value) {
						t.Fatalf("crash %d (%s): record at %d was never written", i, what[i], r.offset)
					}
				}
				if len(view) < len(before) {
					sawNew = true
				}
				l.Close()
			}
			if !sawNew {
				t.Fatal("no crash point saw a cleaned segment")
			}
			t.Logf("%d crash points", len(clones))
		})
	}
}

func TestRetainLocal(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	l := openLog(t, vfs.NewMem(), 1<<10, clk)
	defer l.Close()
	for i := range 40 {
		if _, err := l.Append(makeBatch(t, testCodecs[0], clk.now().UnixMilli(), batchOpts{}, kv{keyOf(i), make([]byte, 200)}), hotlog.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		clk.add(time.Minute)
	}
	segs := l.Segments()
	// By size: keep at least 4 KiB.
	res, err := RetainLocal(l, TopicConfig{RetentionBytes: 4 << 10}, clk.now(), -1)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, s := range l.Segments() {
		total += s.Size
	}
	if res.SegmentsDeleted == 0 || total < 4<<10 || l.LogStartOffset() != res.NewLogStart {
		t.Fatalf("by size: %+v, %d bytes left", res, total)
	}
	if first := l.Segments()[0]; total-first.Size >= 4<<10 {
		t.Fatalf("by size: could delete more (%d bytes left)", total)
	}
	// By time: segments older than 10 minutes go; the active one never.
	res, err = RetainLocal(l, TopicConfig{Retention: 10 * time.Minute}, clk.now(), -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Segments() {
		if s.Sealed && s.MaxTimestamp < clk.now().Add(-10*time.Minute).UnixMilli() {
			t.Fatalf("segment %d (max ts %d) past retention kept", s.BaseOffset, s.MaxTimestamp)
		}
	}
	if res.SegmentsDeleted == 0 {
		t.Fatal("nothing deleted by time")
	}
	// A limit (the remote end offset) holds retention back.
	clk.add(time.Hour)
	start := l.LogStartOffset()
	limit := start + 3
	if _, err := RetainLocal(l, TopicConfig{Retention: time.Minute}, clk.now(), limit); err != nil {
		t.Fatal(err)
	}
	if l.LogStartOffset() > limit {
		t.Fatalf("log start %d passed the limit %d", l.LogStartOffset(), limit)
	}
	res, _ = RetainLocal(l, TopicConfig{Retention: time.Minute}, clk.now(), -1)
	if n := len(l.Segments()); n != 1 || res.SegmentsDeleted == 0 {
		t.Fatalf("%d segments left after everything expired (%d at first)", n, len(segs))
	}
}

// recordingMetrics is a Metrics fixture.
type recordingMetrics struct {
	mu        sync.Mutex
	cleaned   map[string]int
	dropped   int64
	retention map[string]int
	lag       map[string]int64
	rounds    map[string]int // scheduling rounds that considered the partition (Lag calls)
}

func newRecordingMetrics() *recordingMetrics {
	return &recordingMetrics{cleaned: map[string]int{}, retention: map[string]int{}, lag: map[string]int64{}, rounds: map[string]int{}}
}
func (r *recordingMetrics) Cleaned(p string, st Stats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleaned[p]++
	r.dropped += st.RecordsDropped
}
func (r *recordingMetrics) CleanFailed(string, error) {}
func (r *recordingMetrics) Lag(p string, dirty int64, _ float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lag[p] = dirty
	r.rounds[p]++
}
func (r *recordingMetrics) RetentionDeleted(p string, res RetentionResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retention[p] += res.SegmentsDeleted
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, what, cond)
}

// TestManagerBothPolicies registers a compacted log and a "compact,delete"
// log with a pool of two cleaners and checks both end up compacted, the
// second also trimmed by retention.bytes, with checkpoints persisted.
func TestManagerBothPolicies(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	mem := vfs.NewMem()
	open := func(dir string) *hotlog.Log {
		l, err := hotlog.Open(hotlog.Options{FS: mem, Dir: dir, Config: hotlog.Config{SegmentBytes: 2 << 10, IndexIntervalBytes: 512, Flush: hotlog.FlushOS}, Now: clk.now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := open("/a"), open("/b")
	defer a.Close()
	defer b.Close()
	rng := rand.New(rand.NewPCG(4, 4))
	writeKeyed(t, a, clk, rng, testCodecs[4], 80, 800, 0)
	seal(t, a, clk, 2<<10)
	writeKeyed(t, b, clk, rng, testCodecs[1], 80, 800, 0)
	seal(t, b, clk, 2<<10)
	wantA := latest(readView(t, a))
	met := newRecordingMetrics()
	m := NewManager(Config{Cleaner: CleanerConfig{Threads: 2, DedupeBufferBytes: 1 << 20, Backoff: 20 * time.Millisecond}, FS: mem, Now: clk.now, Logger: quiet, Metrics: met})
	defer m.Close()
	if err := m.Register(Partition{Name: "a-0", Log: a, Config: TopicConfig{Policy: Policy{Compact: true}, SegmentBytes: 16 << 10}}); err != nil {
		t.Fatal(err)
	}
	bcfg := TopicConfig{Policy: Policy{Compact: true, Delete: true}, SegmentBytes: 16 << 10}
	if err := m.Register(Partition{Name: "b-0", Log: b, Config: bcfg}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both cleaned", func() bool {
		met.mu.Lock()
		defer met.mu.Unlock()
		return met.cleaned["a-0"] > 0 && met.cleaned["b-0"] > 0
	})
	// Now a retention.bytes that leaves all but b's first segment.
	var total int64
	segs := b.Segments()
	for _, s := range segs {
		total += s.Size
	}
	bcfg.RetentionBytes = total - segs[0].Size
	if err := m.UpdateConfig("b-0", bcfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b trimmed", func() bool {
		met.mu.Lock()
		defer met.mu.Unlock()
		return met.retention["b-0"] > 0
	})
	if b.LogStartOffset() != segs[1].BaseOffset {
		t.Fatalf("b starts at %d, want %d", b.LogStartOffset(), segs[1].BaseOffset)
	}
	m.Unregister("a-0")
	m.Unregister("b-0")
	checkCompacted(t, readView(t, a), wantA, false)
	// b: what retention left is compacted (each key at most once).
	keys := map[string]bool{}
	for _, r := range readView(t, b) {
		if keys[string(r.key)] {
			t.Fatalf("b: key %q twice", r.key)
		}
		keys[string(r.key)] = true
	}
	cp, err := vfs.ReadFile(mem, "/a/"+checkpointFile, 64)
	if err != nil || !bytes.HasPrefix(cp, []byte("0\n")) {
		t.Fatalf("checkpoint: %q %v", cp, err)
	}
	if met.dropped == 0 {
		t.Fatal("metrics saw no dropped records")
	}
}

// TestManagerPastMarkerHorizonNoSpin: a log whose commit marker is past its
// delete horizon but stays (its transaction's records are the latest of
// their keys) is cleaned once when that horizon comes, not again and again,
// and a dirty compacted log beside it is cleaned. Before, the pass at the
// horizon reported that horizon again, in the past; the Manager forced the
// log at every round (score 2, above any dirty ratio), so with one cleaner
// the dirty log was never cleaned (a review saw ~240 passes/s on an idle
// broker, changelog partitions at dirty ratio 0.95 never cleaned). The
// clock is the test's; the backoff is an hour, so rounds come from kicks.
func TestManagerPastMarkerHorizonNoSpin(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	mem := vfs.NewMem()
	open := func(dir string) *hotlog.Log {
		l, err := hotlog.Open(hotlog.Options{FS: mem, Dir: dir, Config: hotlog.Config{SegmentBytes: 1 << 10, IndexIntervalBytes: 512, Flush: hotlog.FlushOS}, Now: clk.now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := open("/a"), open("/b")
	defer a.Close()
	defer b.Close()
	fx := writeCommittedKeys(t, a, clk, 1<<10)
	met := newRecordingMetrics()
	counts := func() (cleanedA, cleanedB, roundsA int) {
		met.mu.Lock()
		defer met.mu.Unlock()
		return met.cleaned["a-0"], met.cleaned["b-0"], met.rounds["a-0"]
	}
	m := NewManager(Config{Cleaner: CleanerConfig{Threads: 1, DedupeBufferBytes: 1 << 20, Backoff: time.Hour}, FS: mem, Now: clk.now, Logger: quiet, Metrics: met})
	defer m.Close()
	cfg := TopicConfig{Policy: Policy{Compact: true}, DeleteRetention: time.Minute}
	if err := m.Register(Partition{Name: "a-0", Log: a, Config: cfg, Txn: fx}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a cleaned", func() bool { ca, _, _ := counts(); return ca > 0 })
	m.mu.Lock()
	horizon := m.mu.parts["a-0"].nextHorizon
	m.mu.Unlock()
	if want := clk.now().Add(time.Minute).UnixMilli(); horizon != want {
		t.Fatalf("a's next horizon %d after its first pass, want %d (the marker's)", horizon, want)
	}
	// Past the marker's horizon, a dirty log b comes.
	clk.add(2 * time.Minute)
	writeKeyed(t, b, clk, rand.New(rand.NewPCG(9, 9)), testCodecs[0], 40, 400, 0)
	seal(t, b, clk, 1<<10)
	wantB := latest(readView(t, b))
	if err := m.Register(Partition{Name: "b-0", Log: b, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b cleaned", func() bool {
		ca, cb, _ := counts()
		if ca > 2 {
			t.Fatalf("a cleaned %d times, b %d: the Manager keeps forcing a past its marker's horizon", ca, cb)
		}
		return cb > 0
	})
	// More rounds (each kick lets the cleaner look again): nothing asks for
	// a pass of either log.
	_, _, r0 := counts()
	waitFor(t, "20 more rounds", func() bool {
		m.Kick()
		_, _, r := counts()
		return r >= r0+20
	})
	if ca, cb, _ := counts(); ca != 2 || cb != 1 {
		t.Fatalf("a cleaned %d times, b %d; want 2 (its dirty pass, its horizon) and 1", ca, cb)
	}
	m.mu.Lock()
	horizon = m.mu.parts["a-0"].nextHorizon
	m.mu.Unlock()
	if horizon != -1 {
		t.Fatalf("a's next horizon %d after the pass past it, want none", horizon)
	}
	m.Unregister("a-0")
	m.Unregister("b-0")
	if got := latest(readView(t, a)); countMarkers(t, a) != 1 || string(got["b"].value) != "b1" || string(got["d"].value) != "d1" {
		t.Fatalf("a: %d markers, b=%q d=%q; want the marker and b1, d1", countMarkers(t, a), got["b"].value, got["d"].value)
	}
	checkCompacted(t, readView(t, b), wantB, false)
}

func TestThrottler(t *testing.T) {
	clk := &clock{}
	th := newThrottler(1000, clk.now) // 1000 bytes/s
	var slept time.Duration
	th.sleep = func(_ context.Context, d time.Duration) error { slept += d; clk.add(d); return nil }
	for range 100 {
		th.wait(context.Background(), 100) // 10 000 bytes in all
	}
	if slept < 9*time.Second || slept > 11*time.Second {
		t.Fatalf("10000 bytes at 1000 B/s slept %v", slept)
	}
	unlimited := newThrottler(0, clk.now)
	if d := unlimited.delay(1 << 30); d != 0 {
		t.Fatalf("unlimited throttler delays %v", d)
	}
}

func TestOffsetMap(t *testing.T) {
	m := newOffsetMap(offsetMapBytes(100, 1000))
	if m.slots() < 112 || m.maxEntry < 100 || m.cover < 1000 {
		t.Fatalf("%d slots, max entries %d, cover %d; want room for 100 keys and 1000 offsets", m.slots(), m.maxEntry, m.cover)
	}
	n := m.maxEntry
	for i := range n {
		if !m.put(keyOf(i), int64(i)) {
			t.Fatalf("put %d refused", i)
		}
	}
	if !m.full() || m.put(keyOf(1000), 5) {
		t.Fatal("full map took a new key")
	}
	if !m.put(keyOf(3), 500) || m.get(keyOf(3)) != 500 || m.get(keyOf(4)) != 4 || m.get(keyOf(999)) != -1 {
		t.Fatal("lookups wrong")
	}
	if m.put(keyOf(3), 7); m.get(keyOf(3)) != 500 {
		t.Fatal("an older offset replaced a newer one")
	}
	m.clear()
	if m.get(keyOf(3)) != -1 || m.entries != 0 {
		t.Fatal("clear left entries")
	}
	// Offsets are relative to the first put: 2³²-2 past it is refused.
	if !m.put(keyOf(1), 1<<40) || m.put(keyOf(2), 1<<40+maxRelOffset) || m.get(keyOf(1)) != 1<<40 {
		t.Fatal("relative offsets wrong")
	}
}

// TestOffsetMapLargeTable: a table of hugeTableBytes or more (on Linux
// mapped outside the Go heap with huge pages advised) is zeroed, holds its
// keys through clear and a full refill, and is released once (a second
// release does nothing).
func TestOffsetMapLargeTable(t *testing.T) {
	const keys = 20_000
	m := newOffsetMap(6 << 20)
	if int64(len(m.buckets))*64 < hugeTableBytes {
		t.Fatalf("table of %d bytes, want at least %d", len(m.buckets)*64, hugeTableBytes)
	}
	for _, b := range m.buckets {
		if b != (mapBucket{}) {
			t.Fatal("a fresh table is not zeroed")
		}
	}
	for round := range 2 {
		for i := range keys {
			if !m.put(keyOf(i), int64(round*keys+i)) {
				t.Fatalf("round %d: put %d refused", round, i)
			}
		}
		for i := range keys {
			if got := m.get(keyOf(i)); got != int64(round*keys+i) {
				t.Fatalf("round %d: key %d at %d", round, i, got)
			}
		}
		m.clear()
	}
	m.release()
	m.release()
	if m.buckets != nil {
		t.Fatal("released table still set")
	}
}

// TestOffsetMapBitmaps: markBatch and markRecord leave superseded records
// and gaps dead, tombstones and whole batches marked look, and nextLook
// passes over exactly the dead offsets that are not marked look.
func TestOffsetMapBitmaps(t *testing.T) {
	m := newOffsetMap(offsetMapBytes(100, 1000))
	put := func(off int64, key int, tomb bool) {
		t.Helper()
		if !m.room(off, off, 1) {
			t.Fatal("no room")
		}
		old, ok := m.putHash(xxh3.Hash128(keyOf(key)), off)
		if !ok {
			t.Fatal("put refused")
		}
		m.markRecord(off, old, tomb)
	}
	// Batch [10, 14]: keys 0..3 at 10, 11, 13, 14 (12 a gap).
	m.room(10, 14, 4)
	m.markBatch(-1, 10, 14, false)
	put(10, 0, false)
	put(11, 1, false)
	put(13, 2, true)
	put(14, 3, false)
	// Batch [20, 22] after a gap [15, 20): keys 0, 1, 2 again.
	m.markBatch(15, 20, 22, false)
	put(20, 0, false)
	put(21, 1, false)
	put(22, 2, false)
	// Batch [23, 24], whole: key 3.
	m.markBatch(23, 23, 24, true)
	put(23, 3, false)
	put(24, 5, false)
	dead := func(o int64) bool { return bitGet(m.dead, o-m.base) }
	// Superseded (10, 11, 13; 14 by 23) and gaps (12, 15-19).
	for _, o := range []int64{10, 11, 12, 13, 14, 15, 19} {
		if !dead(o) {
			t.Errorf("offset %d not dead", o)
		}
	}
	for _, o := range []int64{20, 21, 22, 23, 24} {
		if dead(o) {
			t.Errorf("live offset %d dead", o)
		}
	}
	// 13 is a dead tombstone (look), so the run from 10 stops there; from
	// 14 it runs to 20.
	if got := m.nextLook(10, 100); got != 13 {
		t.Errorf("nextLook(10) = %d, want 13", got)
	}
	if got := m.nextLook(14, 100); got != 20 {
		t.Errorf("nextLook(14) = %d, want 20", got)
	}
	if got := m.nextLook(14, 18); got != 18 {
		t.Errorf("nextLook(14, limit 18) = %d, want 18", got)
	}
	if got := m.countMappedDead(0, 30-m.base); got != 4 {
		t.Errorf("%d mapped dead records, want 4 (10, 11, 13, 14)", got)
	}
	if countRange(m.look, 23-m.base, 24-m.base) != 2 {
		t.Error("whole batch not marked look")
	}
}

func TestCodecsRoundTrip(t *testing.T) {
	var c codecs
	defer c.close()
	src := bytes.Repeat([]byte("sediment compaction "), 5000)
	for _, tc := range testCodecs {
		out, err := c.compress(int(tc.codec), tc.xerial, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		// What the package writes, the libraries read.
		if got := decompressForTest(t, tc.codec, out); !bytes.Equal(got, src) {
			t.Fatalf("%s: round trip differs", tc.name)
		}
		back, err := c.decompress(int(tc.codec), compressForTest(t, tc, src), nil, len(src))
		if err != nil || !bytes.Equal(back, src) {
			t.Fatalf("%s: decompress: %v", tc.name, err)
		}
		if tc.codec != 0 {
			if _, err := c.decompress(int(tc.codec), out, nil, len(src)-1); err == nil {
				t.Fatalf("%s: limit not enforced", tc.name)
			}
		}
	}
	// An lz4 frame of the library's default 4 MiB blocks (a producer on
	// pierrec/lz4's defaults) reads too.
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	if err := w.Apply(lz4.BlockSizeOption(lz4.Block4Mb)); err != nil {
		t.Fatal(err)
	}
	w.Write(src)
	w.Close()
	if back, err := c.decompress(codecLz4, buf.Bytes(), nil, len(src)); err != nil || !bytes.Equal(back, src) {
		t.Fatalf("lz4 with 4 MiB blocks: %v", err)
	}
}

// FuzzDecodeRecords feeds arbitrary record bytes to the decoder: it must not
// panic or over-read, and what it accepts re-encodes to records it decodes
// the same way.
func FuzzDecodeRecords(f *testing.F) {
	b := makeBatch(f, testCodecs[0], 0, batchOpts{}, kv{[]byte("k"), []byte("v")}, kv{[]byte("k2"), nil}, kv{nil, []byte("x")})
	f.Add(b[hotlog.BatchHeaderSize:], int32(3), int32(2))
	f.Add([]byte{2, 0, 0}, int32(1), int32(0))
	f.Add(binary.AppendVarint(nil, 1<<40), int32(1), int32(5))
	f.Fuzz(func(t *testing.T, data []byte, count, lastDelta int32) {
		if count > 1<<16 {
			count = 1 << 16
		}
		var recs []Record
		err := decodeRecords(data, count, lastDelta, func(r *Record) error {
			if len(r.Framed) > len(data) || len(r.Key) > len(data) || len(r.Value) > len(data) {
				t.Fatal("field longer than the input")
			}
			cp := *r
			recs = append(recs, cp)
			return nil
		})
		keysErr := recordKeys(data, count, lastDelta, func(int32, []byte, bool) {})
		if (err == nil) != (keysErr == nil) {
			t.Fatalf("decodeRecords: %v; recordKeys: %v", err, keysErr)
		}
		if err != nil {
			return
		}
		// The key-only walker sees the same keys.
		j := 0
		if err := recordKeys(data, count, lastDelta, func(od int32, key []byte, tombstone bool) {
			if j >= len(recs) || recs[j].OffsetDelta != od || !bytes.Equal(recs[j].Key, key) || (key == nil) != (recs[j].Key == nil) ||
				tombstone != (recs[j].Value == nil) {
				t.Fatalf("recordKeys disagrees at record %d", j)
			}
			j++
		}); err != nil || j != len(recs) {
			t.Fatalf("recordKeys refused what decodeRecords took: %v", err)
		}
		var enc []byte
		for i := range recs {
			enc = appendRecord(enc, &recs[i], recs[i].TimestampDelta)
		}
		i := 0
		if err := decodeRecords(enc, count, lastDelta, func(r *Record) error {
			w := recs[i]
			if r.OffsetDelta != w.OffsetDelta || r.TimestampDelta != w.TimestampDelta || !bytes.Equal(r.Key, w.Key) ||
				(r.Key == nil) != (w.Key == nil) || !bytes.Equal(r.Value, w.Value) || (r.Value == nil) != (w.Value == nil) || !bytes.Equal(r.Headers, w.Headers) {
				t.Fatalf("record %d differs after re-encoding", i)
			}
			i++
			return nil
		}); err != nil {
			t.Fatalf("re-encoded records do not decode: %v", err)
		}
	})
}

// FuzzDecompress feeds arbitrary payloads to every codec with a small limit:
// errors are fine, panics and outputs past the limit are not.
func FuzzDecompress(f *testing.F) {
	var c codecs
	for _, tc := range testCodecs {
		f.Add(uint8(tc.codec), compressForTest(f, tc, bytes.Repeat([]byte("ab"), 100)))
	}
	f.Fuzz(func(t *testing.T, codec uint8, data []byte) {
		out, err := c.decompress(int(codec%5), data, nil, 4096)
		if err == nil && len(out) > 4096 {
			t.Fatalf("%d bytes past the limit", len(out))
		}
	})
}

// TestCleanWhileAppendingAndReading cleans over and over while one goroutine
// appends keyed records and another reads the log from its start: readers
// always see valid batches with increasing offsets, and at the end the log
// holds the latest record of every key.
func TestCleanWhileAppendingAndReading(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	l := openLog(t, vfs.NewMem(), 2<<10, clk)
	defer l.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the appender
		defer wg.Done()
		rng := rand.New(rand.NewPCG(6, 6))
		for i := 0; i < 400; i++ {
			recs := make([]kv, 1+rng.IntN(5))
			for j := range recs {
				k := rng.IntN(50)
				recs[j] = kv{key: keyOf(k), value: []byte(fmt.Sprintf("v%d-%d", k, i))}
			}
			if _, err := l.Append(makeBatch(t, testCodecs[3], 0, batchOpts{}, recs...), hotlog.AppendOptions{}); err != nil {
				t.Error(err)
				return
			}
			l.SetHighWatermark(l.LogEndOffset())
		}
	}()
	go func() { // the reader
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			prev := int64(-1)
			for off := l.LogStartOffset(); off < l.HighWatermark(); {
				b, err := l.ReadBytes(off, 4<<10, l.HighWatermark())
				if err != nil {
					t.Errorf("read %d: %v", off, err)
					return
				}
				if len(b) == 0 {
					break
				}
				hdrs, err := hotlog.ValidateReplicatedBatches(b)
				if err != nil {
					t.Errorf("read %d: %v", off, err)
					return
				}
				for _, h := range hdrs {
					if h.BaseOffset <= prev {
						t.Errorf("offset %d after %d", h.BaseOffset, prev)
						return
					}
					prev = h.LastOffset()
				}
				off = prev + 1
			}
		}
	}()
	c := NewCleaner(CleanerConfig{DedupeBufferBytes: 40 * offsetMapSlotBytes}, clk.now)
	defer c.Close()
	tg := Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, SegmentBytes: 8 << 10}}
	passes := 0
	for appending := true; appending; {
		st, err := c.Clean(context.Background(), tg)
		if err != nil && !errors.Is(err, hotlog.ErrSegmentsChanged) {
			t.Fatal(err)
		}
		tg.FirstDirty = st.MapEnd
		passes++
		appending = passes < 20 || l.LogEndOffset() < 400
	}
	close(stop)
	wg.Wait()
	seal(t, l, clk, 2<<10) // the active segment is never cleaned: seal it for the exact check
	want := latest(readView(t, l))
	tg.FirstDirty = 0
	cleanAll(t, c, &tg)
	checkCompacted(t, readView(t, l), want, false)
	t.Logf("%d passes while appending", passes)
}

// FuzzCleanBatch puts an arbitrary record payload (with any codec, record
// count and last offset delta; the CRC made right) into a log as a follower
// would receive it (hotlog does not open compressed payloads) and cleans the
// log: the cleaner must fail with ErrCorrupt or clean it, never panic or
// write an invalid batch.
func FuzzCleanBatch(f *testing.F) {
	good := makeBatch(f, testCodecs[1], 0, batchOpts{}, kv{[]byte("k"), []byte("v")}, kv{[]byte("k"), nil})
	f.Add(uint8(1), int32(2), int32(1), good[hotlog.BatchHeaderSize:])
	f.Add(uint8(0), int32(1), int32(0), []byte{2, 0, 0})
	f.Add(uint8(4), int32(3), int32(9), []byte("\x28\xb5\x2f\xfd"))
	f.Fuzz(func(t *testing.T, codec uint8, count, lastDelta int32, payload []byte) {
		if count < 0 || count > 1000 || lastDelta < count-1 || lastDelta > 1<<20 || len(payload) > 1<<16 {
			return
		}
		b := make([]byte, hotlog.BatchHeaderSize, hotlog.BatchHeaderSize+len(payload))
		copy(b, good[:hotlog.BatchHeaderSize])
		b = append(b, payload...)
		binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-12))
		binary.BigEndian.PutUint16(b[offAttributes:], uint16(codec%5))
		binary.BigEndian.PutUint32(b[23:], uint32(lastDelta))
		binary.BigEndian.PutUint32(b[offNumRecords:], uint32(count))
		fixCRC(b)
		clk := &clock{}
		l := openLog(t, vfs.NewMem(), 1<<10, clk)
		defer l.Close()
		if _, err := l.AppendReplicated(b, hotlog.AppendOptions{}); err != nil {
			return // refused at the door
		}
		seal(t, l, clk, 1<<10)
		c := NewCleaner(CleanerConfig{DedupeBufferBytes: 1 << 16, MaxBatchBytes: 1 << 20}, clk.now)
		defer c.Close()
		_, err := c.Clean(context.Background(), Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}}})
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrMapTooSmall) {
			t.Fatalf("clean: %v", err)
		}
		got, err := l.ReadBytes(0, 1<<20, l.LogEndOffset())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hotlog.ValidateReplicatedBatches(got); err != nil {
			t.Fatalf("log invalid after cleaning: %v", err)
		}
	})
}

// TestUnregisterCancelsPass unregisters a partition while a throttled pass
// over it is writing its cleaned segment: Unregister returns once the pass
// stopped, leaving the log whole (old segments or swapped groups, no
// leftovers after a reopen).
func TestUnregisterCancelsPass(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	mem := vfs.NewMem()
	l := openLog(t, mem, 8<<10, clk)
	rng := rand.New(rand.NewPCG(13, 13))
	writeKeyed(t, l, clk, rng, testCodecs[0], 100, 3000, 0)
	seal(t, l, clk, 8<<10)
	want := latest(readView(t, l))
	m := NewManager(Config{Cleaner: CleanerConfig{DedupeBufferBytes: 1 << 20, IOMaxBytesPerSecond: 64 << 10, ReadChunk: 4 << 10, Backoff: time.Hour},
		Logger: quiet})
	defer m.Close()
	if err := m.Register(Partition{Name: "p", Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, SegmentBytes: 32 << 10}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a cleaned segment being written", func() bool {
		names, _ := mem.List("/p")
		for _, n := range names {
			if len(n) > 8 && n[len(n)-8:] == ".cleaned" {
				return true
			}
		}
		return false
	})
	done := make(chan struct{})
	go func() { m.Unregister("p"); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Unregister did not return while a pass ran")
	}
	if _, ok := m.Status("p"); ok {
		t.Fatal("partition still registered")
	}
	checkLatestPreserved(t, readView(t, l), want)
	l.Close()
	l = openLog(t, mem, 8<<10, clk)
	defer l.Close()
	checkLatestPreserved(t, readView(t, l), want)
	names, _ := mem.List("/p")
	for _, n := range names {
		if len(n) > 8 && n[len(n)-8:] == ".cleaned" {
			t.Fatalf("leftover %s", n)
		}
	}
}

// TestManagerReconfigure: Reconfigure (the dynamic log.cleaner.* configs)
// starts cleaner goroutines, lets the ones past a smaller Threads exit
// (idle ones are woken for it: the backoff here is an hour), sets the
// throttle's rate, and the cleaners it leaves still clean, with a key map
// of the new size.
func TestManagerReconfigure(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	mem := vfs.NewMem()
	met := newRecordingMetrics()
	m := NewManager(Config{Cleaner: CleanerConfig{Threads: 1, DedupeBufferBytes: 1 << 20, Backoff: time.Hour}, FS: mem, Now: clk.now, Logger: quiet, Metrics: met})
	defer m.Close()
	running := func() (n int) {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, r := range m.mu.running {
			if r {
				n++
			}
		}
		return n
	}
	if n := running(); n != 1 {
		t.Fatalf("%d cleaners running, want 1", n)
	}
	m.Reconfigure(CleanerConfig{Threads: 3, DedupeBufferBytes: 1 << 20, Backoff: time.Hour, IOMaxBytesPerSecond: 5 << 20})
	if n := running(); n != 3 {
		t.Fatalf("%d cleaners running after Threads 3, want 3", n)
	}
	m.throttle.mu.Lock()
	rate := m.throttle.rate
	m.throttle.mu.Unlock()
	if rate != 5<<20 {
		t.Fatalf("throttle rate %v, want %v", rate, 5<<20)
	}
	m.Reconfigure(CleanerConfig{Threads: 2, DedupeBufferBytes: 2 << 20, Backoff: time.Hour})
	waitFor(t, "the third cleaner to exit", func() bool { return running() == 2 })
	if got := m.CleanerConfig(); got.Threads != 2 || got.DedupeBufferBytes != 2<<20 || got.IOMaxBytesPerSecond != 0 || got.MaxBatchBytes != 64<<20 {
		t.Fatalf("config %+v", got)
	}

	l, err := hotlog.Open(hotlog.Options{FS: mem, Dir: "/r", Config: hotlog.Config{SegmentBytes: 2 << 10, IndexIntervalBytes: 512, Flush: hotlog.FlushOS}, Now: clk.now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	writeKeyed(t, l, clk, rng, testCodecs[0], 50, 500, 0)
	seal(t, l, clk, 2<<10)
	want := latest(readView(t, l))
	if err := m.Register(Partition{Name: "r-0", Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, SegmentBytes: 16 << 10}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "cleaned after the reconfiguration", func() bool {
		met.mu.Lock()
		defer met.mu.Unlock()
		return met.cleaned["r-0"] > 0
	})
	m.Unregister("r-0")
	checkCompacted(t, readView(t, l), want, false)
}
