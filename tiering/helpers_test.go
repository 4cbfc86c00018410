package tiering

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/sediment-io/sediment/internal/testutil"
	"hash/crc32"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/fs"
)

// makeBatch builds a valid uncompressed v2 batch of n records of valueSize
// bytes each, the values derived from seed.
func makeBatch(n, valueSize int, ts int64, seed uint64) []byte {
	var body []byte
	for i := 0; i < n; i++ {
		var rec []byte
		rec = append(rec, 0)
		rec = binary.AppendVarint(rec, 0)
		rec = binary.AppendVarint(rec, int64(i))
		rec = binary.AppendVarint(rec, -1)
		rec = binary.AppendVarint(rec, int64(valueSize))
		for j := 0; j < valueSize; j++ {
			rec = append(rec, byte(seed*31+uint64(i*7+j)))
		}
		rec = binary.AppendVarint(rec, 0)
		body = binary.AppendVarint(body, int64(len(rec)))
		body = append(body, rec...)
	}
	b := make([]byte, hotlog.BatchHeaderSize, hotlog.BatchHeaderSize+len(body))
	b = append(b, body...)
	be := binary.BigEndian
	be.PutUint32(b[8:], uint32(len(b)-12))
	be.PutUint32(b[12:], 0xffffffff)
	b[16] = 2
	be.PutUint32(b[23:], uint32(n-1))
	be.PutUint64(b[27:], uint64(ts))
	be.PutUint64(b[35:], uint64(ts))
	be.PutUint64(b[43:], 0xffffffffffffffff)
	be.PutUint16(b[51:], 0xffff)
	be.PutUint32(b[53:], 0xffffffff)
	be.PutUint32(b[57:], uint32(n))
	be.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// memCommitter keeps remote-log pointers in memory with the metadata log's
// rules (leader-epoch fencing, compare-and-set on the version, offsets never
// backwards). It stands in for metadata where a test injects faults into the
// commit itself; TestWithMetadataNode runs against the real thing.
type memCommitter struct {
	mu     sync.Mutex
	ptrs   map[TopicPartition]RemoteLog
	epochs map[TopicPartition]int32
	// failCommit, if set, is consulted before each commit: a non-nil error
	// is returned (applied reports whether the commit still happens, as
	// when the answer is lost).
	failCommit func() (err error, applied bool)
	commits    int
}

func newMemCommitter() *memCommitter {
	return &memCommitter{ptrs: map[TopicPartition]RemoteLog{}, epochs: map[TopicPartition]int32{}}
}

func (c *memCommitter) RemoteLog(_ context.Context, tp TopicPartition) (RemoteLog, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ptrs[tp], nil
}

func (c *memCommitter) CommitRemoteLog(_ context.Context, tp TopicPartition, epoch int32, expected int64, key string, start, end int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var injected error
	if c.failCommit != nil {
		err, applied := c.failCommit()
		if err != nil && !applied {
			return err
		}
		injected = err
	}
	if epoch != c.epochs[tp] {
		return fmt.Errorf("mem: epoch %d, current %d: %w", epoch, c.epochs[tp], ErrFenced)
	}
	cur := c.ptrs[tp]
	if expected != cur.ManifestVersion {
		return fmt.Errorf("mem: version %d, current %d: %w", expected, cur.ManifestVersion, ErrConflict)
	}
	if start < cur.StartOffset || end < cur.EndOffset || start > end {
		return fmt.Errorf("mem: offsets [%d, %d) after [%d, %d)", start, end, cur.StartOffset, cur.EndOffset)
	}
	c.ptrs[tp] = RemoteLog{ManifestKey: key, ManifestVersion: expected + 1, StartOffset: start, EndOffset: end, LeaderEpoch: epoch}
	c.commits++
	return injected
}

// CommitRemoteLogDeleted is CommitRemoteLog of the empty range [start,
// start), which may end below the current end (metadata's DeleteRemoteLog).
func (c *memCommitter) CommitRemoteLogDeleted(_ context.Context, tp TopicPartition, epoch int32, expected int64, key string, start int64, _ Fence) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epochs[tp] {
		return fmt.Errorf("mem: epoch %d, current %d: %w", epoch, c.epochs[tp], ErrFenced)
	}
	cur := c.ptrs[tp]
	if expected != cur.ManifestVersion {
		return fmt.Errorf("mem: version %d, current %d: %w", expected, cur.ManifestVersion, ErrConflict)
	}
	if start < cur.StartOffset {
		return fmt.Errorf("mem: deleted at %d, below [%d, %d)", start, cur.StartOffset, cur.EndOffset)
	}
	c.ptrs[tp] = RemoteLog{ManifestKey: key, ManifestVersion: expected + 1, StartOffset: start, EndOffset: start, LeaderEpoch: epoch}
	c.commits++
	return nil
}

// CommitRemoteLogTruncated is CommitRemoteLog whose end may go back, its
// start unchanged (metadata's TruncateRemoteLog).
func (c *memCommitter) CommitRemoteLogTruncated(_ context.Context, tp TopicPartition, epoch int32, expected int64, key string, start, end int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epochs[tp] {
		return fmt.Errorf("mem: epoch %d, current %d: %w", epoch, c.epochs[tp], ErrFenced)
	}
	cur := c.ptrs[tp]
	if expected != cur.ManifestVersion {
		return fmt.Errorf("mem: version %d, current %d: %w", expected, cur.ManifestVersion, ErrConflict)
	}
	if start != cur.StartOffset || end < start {
		return fmt.Errorf("mem: truncated to [%d, %d) from [%d, %d)", start, end, cur.StartOffset, cur.EndOffset)
	}
	c.ptrs[tp] = RemoteLog{ManifestKey: key, ManifestVersion: expected + 1, StartOffset: start, EndOffset: end, LeaderEpoch: epoch}
	c.commits++
	return nil
}

func (c *memCommitter) LeaderEpoch(tp TopicPartition) (int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.epochs[tp]
	return e, ok
}

func (c *memCommitter) setEpoch(tp TopicPartition, e int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epochs[tp] = e
}

// fakeClock is a settable clock.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	// Real time, so that objects' modification times (set by the store's
	// own clock) and this clock agree; tests only advance it.
	c.ns.Store(time.Now().Truncate(time.Second).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

var testTP = TopicPartition{Topic: "orders", TopicID: [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, Partition: 3}

// env is one partition with a local log, a bucket and a Manager.
type env struct {
	t     testing.TB
	dir   string
	log   *hotlog.Log
	store objectstore.Store
	com   *memCommitter
	clock *fakeClock
	m     *Manager
	p     *Partition
	// produced holds every appended batch by base offset, as appended.
	produced [][]byte
}

type envOptions struct {
	store        objectstore.Store
	segmentBytes int64
	cfg          *TopicConfig
	chunkSize    int64
	cacheBytes   int64
	recheckAfter time.Duration // Options.RecheckAfter (0: its default)
	readAhead    int           // Options.ReadAhead and ReadStreams (0: their defaults)
	readStreams  int
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), com: newMemCommitter(), clock: newClock()}
	if o.store == nil {
		s, err := fs.New(filepath.Join(e.dir, "bucket"))
		if err != nil {
			t.Fatal(err)
		}
		o.store = s
		t.Cleanup(func() { s.Close() })
	}
	e.store = o.store
	if o.segmentBytes == 0 {
		o.segmentBytes = 16 << 10
	}
	l, err := hotlog.Open(hotlog.Options{Dir: filepath.Join(e.dir, "log"), Config: hotlog.Config{SegmentBytes: o.segmentBytes, Flush: hotlog.FlushOS},
		Now: e.clock.Now, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	e.log = l
	t.Cleanup(func() { l.Close() })
	e.com.setEpoch(testTP, 5)
	cfg := DefaultTopicConfig()
	cfg.RetentionMs = -1
	if o.cfg != nil {
		cfg = *o.cfg
	}
	e.open(o, cfg)
	return e
}

// open (re)starts the Manager, as a broker restart does (empty cache).
func (e *env) open(o envOptions, cfg TopicConfig) {
	if o.chunkSize == 0 {
		o.chunkSize = 8 << 10
	}
	m, err := New(Options{Store: e.store, Committer: e.com, Leadership: e.com, CacheDir: filepath.Join(e.dir, "cache"),
		ChunkSize: o.chunkSize, CacheBytes: o.cacheBytes, Interval: -1, Now: e.clock.Now, Logger: quietLogger(),
		IndexIntervalBytes: 1024, OrphanGrace: time.Hour, ReadWorkers: 4, RecheckAfter: o.recheckAfter,
		ReadAhead: o.readAhead, ReadStreams: o.readStreams})
	if err != nil {
		e.t.Fatal(err)
	}
	e.m = m
	e.t.Cleanup(func() { m.Close() })
	p, err := m.AddPartition(PartitionOptions{TopicPartition: testTP, Log: e.log, Config: cfg})
	if err != nil {
		e.t.Fatal(err)
	}
	e.p = p
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// produce appends n batches of recs records each and advances the HW.
func (e *env) produce(n, recs, valueSize int) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		b := makeBatch(recs, valueSize, e.clock.Now().UnixMilli(), uint64(len(e.produced)))
		if _, err := e.log.Append(b, hotlog.AppendOptions{LeaderEpoch: 5}); err != nil {
			e.t.Fatal(err)
		}
		e.produced = append(e.produced, b)
	}
	e.log.SetHighWatermark(e.log.LogEndOffset())
}

func (e *env) run() {
	e.t.Helper()
	if err := e.p.RunOnce(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// readAll reads [from, to) across both tiers as a consumer would, and returns
// the batches' bytes.
func (e *env) readAll(from, to int64, maxBytes int64) ([]byte, error) {
	var out []byte
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for off := from; off < to; {
		if off >= e.log.LogStartOffset() {
			b, err := e.log.ReadBytes(off, maxBytes, e.log.HighWatermark())
			if err != nil {
				return nil, err
			}
			hdrs, err := hotlog.ValidateBatches(b)
			if err != nil {
				return nil, err
			}
			out = append(out, b...)
			off = hdrs[len(hdrs)-1].LastOffset() + 1
			continue
		}
		res, err := e.p.Read(ctx, off, maxBytes, e.log.HighWatermark())
		if err != nil {
			return nil, err
		}
		b, err := res.Bytes()
		res.Release()
		if err != nil {
			return nil, err
		}
		if len(b) == 0 || res.NextOffset <= off {
			return nil, fmt.Errorf("remote read at %d made no progress", off)
		}
		out = append(out, b...)
		off = res.NextOffset
	}
	return out, nil
}

// stamped returns the produced batches as the log holds them (base offsets
// and leader epoch set), concatenated, for offsets [from, ∞).
func (e *env) stampedFrom(from int64) []byte {
	var out []byte
	off := int64(0)
	for _, b := range e.produced {
		n := int64(binary.BigEndian.Uint32(b[23:])) + 1
		if off+n > from {
			c := append([]byte(nil), b...)
			binary.BigEndian.PutUint64(c[0:], uint64(off))
			binary.BigEndian.PutUint32(c[12:], 5)
			out = append(out, c...)
		}
		off += n
	}
	return out
}

// objects lists the partition's objects.
func (e *env) objects() []string {
	e.t.Helper()
	l, err := e.store.List(context.Background(), PartitionPrefix(testTP.TopicID, testTP.Partition), "")
	if err != nil {
		e.t.Fatal(err)
	}
	var keys []string
	for _, o := range l.Objects {
		keys = append(keys, o.Key)
	}
	return keys
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, what, cond)
}
