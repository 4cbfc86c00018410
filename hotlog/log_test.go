package hotlog

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
)

func openMem(t testing.TB, fs vfs.FS, cfg Config) *Log {
	t.Helper()
	l, err := Open(Options{FS: fs, Dir: "/p", Config: cfg, Logger: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

var quiet = slog.New(slog.DiscardHandler)

// readAll reads the whole log from its start and checks it: valid batches,
// offsets increasing and ending at the log end.
func readAll(t testing.TB, l *Log) []byte {
	t.Helper()
	var out []byte
	off := l.LogStartOffset()
	for off < l.LogEndOffset() {
		res, err := l.Read(off, 64<<10, l.LogEndOffset())
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		var buf bytes.Buffer
		if _, err := res.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		res.Release()
		if buf.Len() == 0 || res.NextOffset <= off {
			t.Fatalf("Read(%d) made no progress: %+v", off, res)
		}
		out = append(out, buf.Bytes()...)
		off = res.NextOffset
	}
	if len(out) > 0 {
		hdrs, err := ValidateReplicatedBatches(out)
		if err != nil {
			t.Fatalf("log content invalid: %v", err)
		}
		for i := 1; i < len(hdrs); i++ {
			if hdrs[i].BaseOffset <= hdrs[i-1].LastOffset() {
				t.Fatalf("offsets not increasing at batch %d", i)
			}
		}
		if last := hdrs[len(hdrs)-1].LastOffset(); last+1 != l.LogEndOffset() {
			t.Fatalf("last offset %d, log end %d", last, l.LogEndOffset())
		}
	}
	return out
}

// fakeClock is a settable clock.
type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

func TestAppendRead(t *testing.T) {
	fs := vfs.NewMem()
	l := openMem(t, fs, Config{})
	var want [][]byte
	for i := range 10 {
		b := simpleBatch(3, 100, int64(1000+i))
		res, err := l.Append(b, AppendOptions{LeaderEpoch: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.FirstOffset != int64(3*i) || res.LastOffset != int64(3*i+2) || res.MaxTimestamp != int64(1000+i) || res.LogAppendTime != -1 {
			t.Fatalf("append %d: %+v", i, res)
		}
		h, _ := ParseBatchHeader(b)
		if h.BaseOffset != int64(3*i) || h.PartitionLeaderEpoch != 1 {
			t.Fatalf("not stamped: %+v", h)
		}
		want = append(want, b)
	}
	if l.LogEndOffset() != 30 || l.LogStartOffset() != 0 {
		t.Fatalf("LEO %d LSO %d", l.LogEndOffset(), l.LogStartOffset())
	}
	got, err := l.ReadBytes(4, 1<<20, 30)
	if err != nil || !bytes.Equal(got, bytes.Join(want[1:], nil)) {
		t.Fatalf("read from 4: %v, %d bytes", err, len(got))
	}
	// maxOffset stops before the batch that reaches it.
	got, _ = l.ReadBytes(0, 1<<20, 7)
	if !bytes.Equal(got, bytes.Join(want[:2], nil)) {
		t.Fatalf("maxOffset 7 gave %d bytes", len(got))
	}
	// maxBytes: at least one batch, then whole batches only.
	got, _ = l.ReadBytes(0, 1, 30)
	if !bytes.Equal(got, want[0]) {
		t.Fatalf("maxBytes 1 gave %d bytes", len(got))
	}
	got, _ = l.ReadBytes(0, int64(2*len(want[0])+10), 30)
	if !bytes.Equal(got, bytes.Join(want[:2], nil)) {
		t.Fatalf("maxBytes 2.x batches gave %d bytes", len(got))
	}
	res, err := l.Read(30, 100, 100)
	if err != nil || res.Size != 0 || res.NextOffset != 30 {
		t.Fatalf("read at end: %+v %v", res, err)
	}
	if _, err := l.Read(31, 100, 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	if _, err := l.Read(-1, 100, 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below start: %v", err)
	}
	l.SetHighWatermark(12)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(simpleBatch(1, 1, 1), AppendOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("double close: %v", err)
	}
	l = openMem(t, fs, Config{})
	defer l.Close()
	if l.LogEndOffset() != 30 || l.HighWatermark() != 12 {
		t.Fatalf("reopen LEO %d HW %d", l.LogEndOffset(), l.HighWatermark())
	}
	if got := readAll(t, l); !bytes.Equal(got, bytes.Join(want, nil)) {
		t.Fatal("reopen read mismatch")
	}
}

func TestBadAppendWritesNothing(t *testing.T) {
	l := openMem(t, vfs.NewMem(), Config{MaxMessageBytes: 500, TimestampBeforeMax: time.Hour})
	defer l.Close()
	bad := simpleBatch(2, 10, time.Now().UnixMilli())
	bad[len(bad)-1] ^= 0xff
	if _, err := l.Append(bad, AppendOptions{}); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("bad crc: %v", err)
	}
	if _, err := l.Append(simpleBatch(10, 100, time.Now().UnixMilli()), AppendOptions{}); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	if _, err := l.Append(simpleBatch(1, 10, time.Now().Add(-2*time.Hour).UnixMilli()), AppendOptions{}); !errors.Is(err, ErrInvalidTimestamp) {
		t.Fatalf("old timestamp: %v", err)
	}
	checkErr := errors.New("duplicate sequence")
	var gotFirst int64 = -1
	if _, err := l.Append(simpleBatch(1, 10, time.Now().UnixMilli()), AppendOptions{Check: func(first int64, b []BatchHeader) error {
		gotFirst = first
		return checkErr
	}}); !errors.Is(err, checkErr) || gotFirst != 0 {
		t.Fatalf("check: %v first %d", err, gotFirst)
	}
	if l.LogEndOffset() != 0 || l.Segments()[0].Size != 0 {
		t.Fatalf("something was appended: LEO %d", l.LogEndOffset())
	}
	var written []BatchHeader
	two := append(simpleBatch(2, 10, time.Now().UnixMilli()), simpleBatch(1, 10, time.Now().UnixMilli())...)
	if _, err := l.Append(two, AppendOptions{LeaderEpoch: 7, Written: func(b []BatchHeader) { written = b }}); err != nil {
		t.Fatal(err)
	}
	if len(written) != 2 || written[1].BaseOffset != 2 || written[1].PartitionLeaderEpoch != 7 {
		t.Fatalf("Written saw %+v", written)
	}
}

func TestRollAndIndexLookups(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{SegmentBytes: 4096, IndexIntervalBytes: 300}
	l := openMem(t, fs, cfg)
	var batches [][]byte
	for i := range 200 {
		b := simpleBatch(1+i%4, 40+i%50, int64(10_000+i*10))
		if _, err := l.Append(b, AppendOptions{LeaderEpoch: 5}); err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
	}
	segs := l.Segments()
	if len(segs) < 5 {
		t.Fatalf("only %d segments", len(segs))
	}
	for i, s := range segs {
		if s.Sealed != (i+1 < len(segs)) || (s.Sealed && s.Size > 4096) {
			t.Fatalf("segment %d: %+v", i, s)
		}
		if i > 0 && segs[i-1].NextOffset != s.BaseOffset {
			t.Fatalf("segments not contiguous: %+v %+v", segs[i-1], s)
		}
		if _, err := fs.Stat(s.LogFile); err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join("/p", fmt.Sprintf("%020d.log", s.BaseOffset)); s.LogFile != want {
			t.Fatalf("name %s", s.LogFile)
		}
	}
	check := func(l *Log) {
		t.Helper()
		// Every offset reads from the batch holding it.
		for off := int64(0); off < l.LogEndOffset(); off++ {
			got, err := l.ReadBytes(off, 1, l.LogEndOffset())
			if err != nil {
				t.Fatal(err)
			}
			h, err := ParseBatchHeader(got)
			if err != nil || off < h.BaseOffset || off > h.LastOffset() || int64(len(got)) != h.Size() {
				t.Fatalf("offset %d read batch %+v (%v)", off, h, err)
			}
		}
		if got := readAll(t, l); !bytes.Equal(got, bytes.Join(batches, nil)) {
			t.Fatal("content mismatch")
		}
		// Timestamps: batch i has max timestamp 10000+10i.
		for i := 0; i < 200; i += 7 {
			off, ts, err := l.OffsetForTimestamp(int64(10_000 + i*10 - 5))
			h, _ := ParseBatchHeader(batches[i])
			if err != nil || off != h.BaseOffset || ts != h.MaxTimestamp {
				t.Fatalf("timestamp of batch %d: got %d %d %v, want %d", i, off, ts, err, h.BaseOffset)
			}
		}
		if off, ts, err := l.OffsetForTimestamp(1 << 50); off != -1 || ts != -1 || err != nil {
			t.Fatalf("future timestamp: %d %d %v", off, ts, err)
		}
	}
	check(l)
	l.Close()
	l = openMem(t, fs, cfg)
	// A tiny index cache: indexes are evicted and read again as needed.
	l.cache.maxBytes = 64
	check(l)
	check(l)
	l.cache.mu.Lock()
	if n := len(l.cache.entries); n > 2 {
		t.Fatalf("%d segments still cached", n)
	}
	l.cache.mu.Unlock()
	// Damage a sealed index and remove another's time index: rebuilt on use.
	segs = l.Segments()
	l.Close()
	f, _ := fs.OpenReadWrite(segs[1].IndexFile)
	f.Write([]byte{0xff, 0xff, 0xff})
	f.Close()
	fs.Remove(segs[2].TimeIndexFile)
	l = openMem(t, fs, cfg)
	defer l.Close()
	check(l)
}

func TestRecordOffsetForTimestamp(t *testing.T) {
	l := openMem(t, vfs.NewMem(), Config{})
	defer l.Close()
	l.Append(makeBatch(100, 0, testRecord{tsDelta: 0}, testRecord{tsDelta: 50}, testRecord{tsDelta: 20}), AppendOptions{})
	l.Append(makeBatch(300, 0, testRecord{tsDelta: 0}), AppendOptions{})
	for _, tc := range []struct{ ts, off, got int64 }{{0, 0, 100}, {100, 0, 100}, {101, 1, 150}, {150, 1, 150}, {151, 3, 300}, {300, 3, 300}, {301, -1, -1}} {
		off, ts, err := l.OffsetForTimestamp(tc.ts)
		if err != nil || off != tc.off || ts != tc.got {
			t.Errorf("ts %d: got %d %d %v, want %d %d", tc.ts, off, ts, err, tc.off, tc.got)
		}
	}
}

func TestRollOnTimeAndFullIndex(t *testing.T) {
	clock := &fakeClock{}
	clock.ms.Store(1_000_000)
	mem := vfs.NewMem()
	l, err := Open(Options{FS: mem, Dir: "/p", Logger: quiet, Now: clock.now, Config: Config{SegmentMs: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	l.Append(simpleBatch(1, 10, 1), AppendOptions{})
	l.Append(simpleBatch(1, 10, 1), AppendOptions{})
	if n := len(l.Segments()); n != 1 {
		t.Fatalf("%d segments", n)
	}
	clock.ms.Add(int64(time.Minute / time.Millisecond))
	l.Append(simpleBatch(1, 10, 1), AppendOptions{})
	if segs := l.Segments(); len(segs) != 2 || segs[1].BaseOffset != 2 {
		t.Fatalf("no time roll: %+v", segs)
	}
	// The segment's age survives a clean restart.
	clock.ms.Add(40_000)
	l.Close()
	l, err = Open(Options{FS: mem, Dir: "/p", Logger: quiet, Now: clock.now, Config: Config{SegmentMs: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	clock.ms.Add(30_000)
	l.Append(simpleBatch(1, 10, 1), AppendOptions{})
	if segs := l.Segments(); len(segs) != 3 {
		t.Fatalf("age lost across restart: %+v", segs)
	}
	l.Close()

	l = openMem(t, vfs.NewMem(), Config{IndexIntervalBytes: 1, MaxIndexBytes: 48})
	defer l.Close()
	for range 20 {
		if _, err := l.Append(simpleBatch(1, 10, 1), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(l.Segments()); n < 3 {
		t.Fatalf("full index did not roll: %d segments", n)
	}
	readAll(t, l)
}

func TestTruncateTo(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{SegmentBytes: 2048, IndexIntervalBytes: 200}
	l := openMem(t, fs, cfg)
	var batches [][]byte
	for i := range 60 {
		b := simpleBatch(2, 60, int64(i))
		if _, err := l.Append(b, AppendOptions{LeaderEpoch: int32(i / 20)}); err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
	}
	if e, o, _ := l.EndOffsetForEpoch(1); e != 1 || o != 80 {
		t.Fatalf("EndOffsetForEpoch(1) = %d %d", e, o)
	}
	if err := l.WriteProducerSnapshot(100, []byte("state@100")); err != nil {
		t.Fatal(err)
	}
	nseg := len(l.Segments())
	// Offset 51 is inside batch 25 (offsets 50, 51): the whole batch goes.
	res, _ := l.Read(110, 1<<20, 120) // a reader holding a later segment
	if err := l.TruncateTo(51); err != nil {
		t.Fatal(err)
	}
	if l.LogEndOffset() != 50 {
		t.Fatalf("LEO %d", l.LogEndOffset())
	}
	if n := len(l.Segments()); n >= nseg {
		t.Fatalf("segments %d -> %d", nseg, n)
	}
	if got := readAll(t, l); !bytes.Equal(got, bytes.Join(batches[:25], nil)) {
		t.Fatal("content after truncate")
	}
	if e, o, _ := l.EndOffsetForEpoch(2); e != -1 || o != -1 {
		t.Fatalf("epoch 2 after truncate: %d %d", e, o)
	}
	if e, o, _ := l.EndOffsetForEpoch(1); e != 1 || o != 50 {
		t.Fatalf("epoch 1 after truncate: %d %d", e, o)
	}
	if off, _, _ := l.LatestProducerSnapshot(); off != -1 {
		t.Fatalf("snapshot past the end survived: %d", off)
	}
	// The held reader still reads its (deleted) bytes.
	var buf bytes.Buffer
	if _, err := res.WriteTo(&buf); err != nil || buf.Len() == 0 {
		t.Fatalf("held read: %v", err)
	}
	res.Release()
	// Appending continues from the cut, and survives a clean and an unclean reopen.
	for i := range 10 {
		b := simpleBatch(1, 30, int64(100+i))
		if _, err := l.Append(b, AppendOptions{LeaderEpoch: 3}); err != nil {
			t.Fatal(err)
		}
		batches = append(batches[:25+i], b)
	}
	want := bytes.Join(batches, nil)
	crashed := fs.CrashClone()
	l.Close()
	for _, f := range []vfs.FS{fs, crashed} {
		l := openMem(t, f, cfg)
		if got := readAll(t, l); !bytes.Equal(got, want) {
			t.Fatal("content after reopen")
		}
		if e, o, _ := l.EndOffsetForEpoch(1); e != 1 || o != 50 {
			t.Fatalf("epoch after reopen: %d %d", e, o)
		}
		l.Close()
	}
	if err := l.TruncateTo(0); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

func TestDeleteBefore(t *testing.T) {
	fs := vfs.NewMem()
	cfg := Config{SegmentBytes: 1024}
	l := openMem(t, fs, cfg)
	var batches [][]byte
	for i := range 40 {
		b := simpleBatch(1, 100, int64(i))
		l.Append(b, AppendOptions{LeaderEpoch: int32(i / 10)})
		batches = append(batches, b)
	}
	segs := l.Segments()
	held, err := l.Read(0, 100, 40)
	if err != nil {
		t.Fatal(err)
	}
	l.WriteProducerSnapshot(5, []byte("a"))
	l.WriteProducerSnapshot(12, []byte("b"))
	if err := l.DeleteBefore(41); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("past end: %v", err)
	}
	cut := segs[2].BaseOffset + 1
	if err := l.DeleteBefore(cut); err != nil {
		t.Fatal(err)
	}
	if l.LogStartOffset() != cut || l.Segments()[0].BaseOffset != segs[2].BaseOffset {
		t.Fatalf("start %d, first segment %+v", l.LogStartOffset(), l.Segments()[0])
	}
	if _, err := l.Read(cut-1, 10, 40); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below start: %v", err)
	}
	// The held segment's file is still there until Release.
	if _, err := fs.Stat(segs[0].LogFile + deletedSuffix); err != nil {
		t.Fatalf("held segment removed early: %v", err)
	}
	var buf bytes.Buffer
	if _, err := held.WriteTo(&buf); err != nil || !bytes.Equal(buf.Bytes(), batches[0]) {
		t.Fatalf("held read: %v", err)
	}
	held.Release()
	held.Release()
	if _, err := fs.Stat(segs[0].LogFile + deletedSuffix); !vfs.IsNotExist(err) {
		t.Fatalf("segment not removed after release: %v", err)
	}
	if _, err := fs.Stat(segs[1].LogFile); !vfs.IsNotExist(err) {
		t.Fatalf("segment 1 not removed: %v", err)
	}
	if off, data, _ := l.LatestProducerSnapshot(); off != 12 || string(data) != "b" {
		t.Fatalf("snapshot %d %q", off, data)
	}
	if e, o, _ := l.EndOffsetForEpoch(0); e != -1 && o < cut {
		t.Fatalf("epoch 0: %d %d", e, o)
	}
	want := readAll(t, l)
	// Reopen, clean and after a crash: the start is kept.
	crashed := fs.CrashClone()
	l.Close()
	for _, f := range []vfs.FS{fs, crashed} {
		l := openMem(t, f, cfg)
		if l.LogStartOffset() != cut || !bytes.Equal(readAll(t, l), want) {
			t.Fatalf("reopen: start %d", l.LogStartOffset())
		}
		l.Close()
	}
	// Deleting everything leaves an empty log at the end.
	l = openMem(t, fs, cfg)
	defer l.Close()
	if err := l.DeleteBefore(40); err != nil {
		t.Fatal(err)
	}
	if l.LogStartOffset() != 40 || l.LogEndOffset() != 40 || len(l.Segments()) != 1 {
		t.Fatalf("after delete all: %d %d %+v", l.LogStartOffset(), l.LogEndOffset(), l.Segments())
	}
	if res, err := l.Append(simpleBatch(1, 1, 1), AppendOptions{}); err != nil || res.FirstOffset != 40 {
		t.Fatalf("append after delete all: %+v %v", res, err)
	}
}

func TestEpochsAndReplication(t *testing.T) {
	leader := openMem(t, vfs.NewMem(), Config{})
	defer leader.Close()
	follower := openMem(t, vfs.NewMem(), Config{})
	defer follower.Close()
	for i := range 9 {
		b := simpleBatch(2, 10, int64(i))
		if _, err := leader.Append(b, AppendOptions{LeaderEpoch: int32(1 + i/3)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		in      int32
		e       int32
		off     int64
		comment string
	}{{0, 0, 0, "below the first"}, {1, 1, 6, ""}, {2, 2, 12, ""}, {3, 3, 18, "latest"}, {4, -1, -1, "unknown"}, {-1, -1, -1, "undefined"}} {
		e, off, _ := leader.EndOffsetForEpoch(tc.in)
		if tc.in == 0 {
			tc.e = 0 // Kafka answers the requested epoch with the first start
		}
		if e != tc.e || off != tc.off {
			t.Errorf("EndOffsetForEpoch(%d) %s = %d %d, want %d %d", tc.in, tc.comment, e, off, tc.e, tc.off)
		}
	}
	// Replicate batch by batch.
	for off := int64(0); off < leader.LogEndOffset(); {
		res, _ := leader.Read(off, 1, leader.LogEndOffset())
		var buf bytes.Buffer
		res.WriteTo(&buf)
		res.Release()
		if _, err := follower.AppendReplicated(buf.Bytes(), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		off = res.NextOffset
	}
	if !bytes.Equal(readAll(t, leader), readAll(t, follower)) {
		t.Fatal("replica differs")
	}
	if e, off, _ := follower.EndOffsetForEpoch(2); e != 2 || off != 12 {
		t.Fatalf("follower epochs: %d %d", e, off)
	}
	b := simpleBatch(1, 1, 1)
	putBaseOffset(b, 5)
	if _, err := follower.AppendReplicated(b, AppendOptions{}); !errors.Is(err, ErrUnexpectedOffset) {
		t.Fatalf("replicated append below the log end: %v", err)
	}
	// A gap before the batch (the leader's cleaner emptied [12, 40)).
	end := follower.LogEndOffset()
	b = simpleBatch(2, 1, 1)
	putBaseOffset(b, end+28)
	putLeaderEpoch(b, 2)
	if res, err := follower.AppendReplicated(b, AppendOptions{}); err != nil || res.FirstOffset != end+28 || follower.LogEndOffset() != end+30 {
		t.Fatalf("replicated append past a compaction gap: %+v %v, log end %d", res, err, follower.LogEndOffset())
	}
}

func TestLogAppendTime(t *testing.T) {
	clock := &fakeClock{}
	clock.ms.Store(777_000)
	l, _ := Open(Options{FS: vfs.NewMem(), Dir: "/p", Logger: quiet, Now: clock.now})
	defer l.Close()
	b := simpleBatch(2, 5, 1)
	res, err := l.Append(b, AppendOptions{LogAppendTime: true})
	if err != nil || res.LogAppendTime != 777_000 || res.MaxTimestamp != 777_000 {
		t.Fatalf("%+v %v", res, err)
	}
	hdrs, err := ValidateBatches(b) // the CRC was recomputed
	if err != nil || !hdrs[0].LogAppendTime() || hdrs[0].MaxTimestamp != 777_000 {
		t.Fatalf("%+v %v", hdrs, err)
	}
	if off, ts, _ := l.OffsetForTimestamp(500); off != 0 || ts != 777_000 {
		t.Fatalf("%d %d", off, ts)
	}
}

func TestProducerSnapshots(t *testing.T) {
	fs := vfs.NewMem()
	l := openMem(t, fs, Config{})
	if off, data, err := l.LatestProducerSnapshot(); off != -1 || data != nil || err != nil {
		t.Fatalf("empty: %d %v %v", off, data, err)
	}
	for i := range 5 {
		l.Append(simpleBatch(1, 1, 1), AppendOptions{})
		if err := l.WriteProducerSnapshot(int64(i+1), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.WriteProducerSnapshot(99, nil); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatal(err)
	}
	names, _ := fs.List("/p")
	n := 0
	for _, name := range names {
		if filepath.Ext(name) == ".snapshot" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d snapshot files: %v", n, names)
	}
	// Damage the newest: the one before is returned.
	f, _ := fs.OpenReadWrite(l.snapshotPath(5))
	f.Write([]byte("junk"))
	f.Close()
	if off, data, err := l.LatestProducerSnapshot(); off != 4 || !bytes.Equal(data, []byte{3}) || err != nil {
		t.Fatalf("after damage: %d %v %v", off, data, err)
	}
	l.Close()
}

func TestConcurrentAppendAndRead(t *testing.T) {
	for _, flush := range []FlushPolicy{FlushEveryCommit, FlushInterval, FlushOS} {
		t.Run(flush.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			cfg := Config{SegmentBytes: 8 << 10, IndexIntervalBytes: 512, Flush: flush, FlushInterval: time.Millisecond}
			l := openMem(t, fs, cfg)
			const writers, each = 8, 40
			var wg sync.WaitGroup
			var mu sync.Mutex
			byOffset := map[int64][]byte{}
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						b := simpleBatch(1+i%3, 50+w, int64(w*1000+i))
						res, err := l.Append(b, AppendOptions{})
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						byOffset[res.FirstOffset] = b
						mu.Unlock()
					}
				}()
			}
			stop := make(chan struct{})
			var rwg sync.WaitGroup
			rwg.Add(1)
			go func() {
				defer rwg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					end := l.LogEndOffset()
					if end == 0 {
						continue
					}
					if _, err := l.ReadBytes(end/2, 4096, end); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			wg.Wait()
			close(stop)
			rwg.Wait()
			offs := make([]int64, 0, len(byOffset))
			for off := range byOffset {
				offs = append(offs, off)
			}
			slices.Sort(offs)
			var want []byte
			for _, off := range offs {
				want = append(want, byOffset[off]...)
			}
			if got := readAll(t, l); !bytes.Equal(got, want) {
				t.Fatal("content mismatch")
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			// Everything was synced: a crash loses nothing.
			l2 := openMem(t, fs.CrashClone(), cfg)
			if got := readAll(t, l2); !bytes.Equal(got, want) {
				t.Fatal("crash after Sync lost data")
			}
			l2.Close()
			l.Close()
		})
	}
}

// TestCleanOpenScansNothing checks that a clean open reads no segment bytes,
// and an unclean one reads the active segment only.
func TestCleanOpenScansNothing(t *testing.T) {
	mem := vfs.NewMem()
	cfg := Config{SegmentBytes: 1024}
	l := openMem(t, mem, cfg)
	for range 30 {
		l.Append(simpleBatch(1, 100, 1), AppendOptions{})
	}
	crashed := mem.CrashClone()
	l.Close()
	count := func(fs vfs.FS) (logReads, indexReads int) {
		var lr, ir atomic.Int64
		efs := errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
			if op == errorfs.OpFileRead {
				switch filepath.Ext(path) {
				case ".log":
					lr.Add(1)
				case ".index", ".timeindex":
					ir.Add(1)
				}
			}
			return nil
		}))
		l := openMem(t, efs, cfg)
		l.Close()
		return int(lr.Load()), int(ir.Load())
	}
	if lr, ir := count(mem); lr != 0 || ir > 2 {
		t.Fatalf("clean open read %d log and %d index chunks", lr, ir)
	}
	if lr, _ := count(crashed); lr == 0 {
		t.Fatal("unclean open did not scan")
	}
}

func TestOpenManySegmentsIsLazy(t *testing.T) {
	mem := vfs.NewMem()
	cfg := Config{SegmentBytes: 200}
	l := openMem(t, mem, cfg)
	for range 300 {
		l.Append(simpleBatch(1, 100, 1), AppendOptions{})
	}
	l.Close()
	var opens atomic.Int64
	efs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpOpen || op == errorfs.OpStat {
			opens.Add(1)
		}
		return nil
	}))
	l = openMem(t, efs, cfg)
	defer l.Close()
	if n := opens.Load(); n > 10 {
		t.Fatalf("open of 300 segments made %d opens/stats", n)
	}
	// Segments needs each max timestamp: one small read per segment, no
	// index loads.
	for _, s := range l.Segments() {
		if s.MaxTimestamp != 1 {
			t.Fatalf("segment %+v", s)
		}
	}
	l.cache.mu.Lock()
	loaded := len(l.cache.entries)
	l.cache.mu.Unlock()
	if loaded != 0 {
		t.Fatalf("Segments loaded %d indexes", loaded)
	}
	if got := readAll(t, l); len(got) == 0 {
		t.Fatal("empty")
	}
}

func TestReplicatedCompactedSurvivesRecovery(t *testing.T) {
	mem := vfs.NewMem()
	l := openMem(t, mem, Config{})
	var all []byte
	for i, b := range [][]byte{makeCompacted([]int64{0, 2}, 2), makeCompacted(nil, 5), simpleBatch(2, 3, 4)} {
		putBaseOffset(b, []int64{0, 3, 9}[i])
		putLeaderEpoch(b, 4)
		fixCRC(b)
		if _, err := l.AppendReplicated(b, AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if l.LogEndOffset() != 11 {
		t.Fatalf("LEO %d", l.LogEndOffset())
	}
	// An append without a leader epoch (-1) records none.
	l2 := openMem(t, vfs.NewMem(), Config{})
	l2.Append(simpleBatch(1, 1, 1), AppendOptions{LeaderEpoch: -1})
	if l2.LatestEpoch() != -1 {
		t.Fatalf("epoch %d", l2.LatestEpoch())
	}
	l2.Close()
	l.Close()
	l = openMem(t, mem.CrashClone(), Config{})
	defer l.Close()
	if got := readAll(t, l); !bytes.Equal(got, all) || l.LatestEpoch() != 4 {
		t.Fatalf("recovery dropped compacted batches: %d of %d bytes, epoch %d", len(got), len(all), l.LatestEpoch())
	}
	res, err := l.Read(1, 1, 11) // offset 1 was compacted away: its batch is served
	if err != nil || res.FirstOffset != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	res.Release()
	if res, _ := l.Read(7, 1, 11); res.FirstOffset != 3 {
		t.Fatalf("read in the empty batch: %+v", res)
	}
}

func TestDump(t *testing.T) {
	fs := vfs.NewMem()
	l := openMem(t, fs, Config{SegmentBytes: 300, IndexIntervalBytes: 1})
	for i := range 5 {
		l.Append(simpleBatch(2, 50, int64(100+i)), AppendOptions{LeaderEpoch: 2})
	}
	l.WriteProducerSnapshot(4, []byte("s"))
	l.DeleteBefore(2)
	segs := l.Segments()
	l.Close()
	var out strings.Builder
	for _, name := range []string{segs[0].LogFile, segs[0].IndexFile, segs[0].TimeIndexFile, "/p/" + baseName(4) + snapshotSuffix,
		"/p/" + epochCheckpointFile, "/p/" + logStartOffsetFile, "/p/" + cleanShutdownFile} {
		if err := Dump(&out, fs, name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, want := range []string{"baseOffset=2 lastOffset=3", "crcOK=true", "epoch=2 startOffset=2", "logStartOffset=2", "intact=true", "timestamp=", "ActiveBase"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dump lacks %q:\n%s", want, out.String())
		}
	}
	if err := Dump(&out, fs, "/p/nothing.txt"); err == nil {
		t.Fatal("dumped a foreign file")
	}
}

// TestRollSnapshots: with Options.RollSnapshot every roll writes the
// producer snapshot at the new segment's base, kept (unlike other
// snapshots) while that segment is in the log.
func TestRollSnapshots(t *testing.T) {
	mem := vfs.NewMem()
	n := 0
	l, err := Open(Options{FS: mem, Dir: "/p", Config: Config{SegmentBytes: 1000}, Logger: quiet,
		RollSnapshot: func() []byte { n++; return []byte{byte(n)} }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 60 {
		if _, err := l.Append(simpleBatch(1, 40, int64(i)), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			if err := l.WriteProducerSnapshot(l.LogEndOffset(), []byte("periodic")); err != nil {
				t.Fatal(err)
			}
		}
	}
	segs := l.Segments()
	if len(segs) < 4 || n != len(segs)-1 {
		t.Fatalf("%d segments, %d roll snapshots", len(segs), n)
	}
	has := func(off int64) bool {
		_, err := mem.Stat("/p/" + baseName(off) + snapshotSuffix)
		return err == nil
	}
	for _, s := range segs[1:] {
		if !has(s.BaseOffset) {
			t.Fatalf("no snapshot at segment base %d", s.BaseOffset)
		}
	}
	if err := l.DeleteBefore(segs[2].BaseOffset); err != nil {
		t.Fatal(err)
	}
	if has(segs[1].BaseOffset) || !has(segs[2].BaseOffset) || !has(segs[3].BaseOffset) {
		t.Fatal("DeleteBefore kept the wrong snapshots")
	}
}

// TestRollSnapshotAcrossCompactionGap: a follower's first batch after a
// gap the leader's cleaner left rolls the log at the batch's base, past
// the log end; the roll's producer snapshot is still written at that base
// (nothing lies between: the state at the log end is the state there), as
// tiering expects beside the sealed segment. Before, it was refused as
// past the log end, with a WARN per partition at every such catch-up.
func TestRollSnapshotAcrossCompactionGap(t *testing.T) {
	mem := vfs.NewMem()
	var logs testutil.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, err := Open(Options{FS: mem, Dir: "/p", Config: Config{SegmentBytes: 1000}, Logger: logger,
		RollSnapshot: func() []byte { return []byte("state") }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	base := int64(0)
	for _, at := range []int64{0, 1, 5000} { // two fill the segment; the third comes after a gap
		b := simpleBatch(1, 400, at)
		putBaseOffset(b, at)
		if _, err := l.AppendReplicated(b, AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		base = at
	}
	segs := l.Segments()
	if len(segs) != 2 || segs[1].BaseOffset != base {
		t.Fatalf("segments %+v: the gap's batch did not roll the log", segs)
	}
	if _, err := mem.Stat("/p/" + baseName(base) + snapshotSuffix); err != nil {
		t.Fatalf("no producer snapshot at the new segment's base %d: %v", base, err)
	}
	if logs.String() != "" {
		t.Fatalf("logged:\n%s", logs.String())
	}
}

// TestWriteProducerSnapshotFunc: the state is read under the log's lock and
// written at the offset it names; one past the log end is refused.
func TestWriteProducerSnapshotFunc(t *testing.T) {
	l := openMem(t, vfs.NewMem(), Config{})
	defer l.Close()
	for i := range 3 {
		if _, err := l.Append(simpleBatch(1, 10, int64(i)), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.WriteProducerSnapshotFunc(func() (int64, []byte) { return 2, []byte("at2") }); err != nil {
		t.Fatal(err)
	}
	if off, data, err := l.LatestProducerSnapshot(); err != nil || off != 2 || string(data) != "at2" {
		t.Fatalf("latest snapshot %d %q %v", off, data, err)
	}
	if err := l.WriteProducerSnapshotFunc(func() (int64, []byte) { return 4, nil }); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("snapshot past the log end: %v", err)
	}
}

// TestUncleanOpenIsLogged: an open that recovers (no clean-shutdown
// marker) says so at INFO, with the scanned segment; a clean open and a new
// log say nothing.
func TestUncleanOpenIsLogged(t *testing.T) {
	mem := vfs.NewMem()
	cfg := Config{SegmentBytes: 1024}
	var logs bytes.Buffer
	open := func(fs vfs.FS) *Log {
		l, err := Open(Options{FS: fs, Dir: "/p", Config: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := open(mem)
	for range 30 {
		l.Append(simpleBatch(1, 100, 1), AppendOptions{})
	}
	crashed := mem.CrashClone()
	l.Close()
	open(mem).Close()
	if logs.Len() != 0 {
		t.Fatalf("a new log and a clean open logged:\n%s", logs.String())
	}
	open(crashed).Close()
	if !strings.Contains(logs.String(), `level=INFO msg="hotlog: recovered after an unclean shutdown: the active segment scanned"`) || !strings.Contains(logs.String(), " segment=24 bytes=1020 valid=1020 ") {
		t.Fatalf("the recovery is not logged:\n%s", logs.String())
	}
}
