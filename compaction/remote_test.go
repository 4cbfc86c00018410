package compaction

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/objectstore/mem"
	"github.com/sediment-io/sediment/tiering"
)

// remoteMeta stands in for the metadata log in these tests (the broker's
// tests run the real one): the remote pointer with its compare-and-set, the
// leader epoch, and the one lease token that currently stands.
type remoteMeta struct {
	mu    sync.Mutex
	ptr   tiering.RemoteLog
	token uint64
	epoch int32 // the partition's leader epoch (this broker leads)
}

func (m *remoteMeta) RemoteLog(context.Context, tiering.TopicPartition) (tiering.RemoteLog, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ptr, nil
}

func (m *remoteMeta) CommitRemoteLog(ctx context.Context, tp tiering.TopicPartition, epoch int32, expected int64, key string, start, end int64) error {
	return m.CommitRemoteLogFenced(ctx, tp, epoch, expected, key, start, end, tiering.Fence{})
}

func (m *remoteMeta) CommitRemoteLogFenced(_ context.Context, _ tiering.TopicPartition, epoch int32, expected int64, key string,
	start, end int64, fence tiering.Fence) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if fence.Token != 0 && fence.Token != m.token {
		return fmt.Errorf("%w: token %d, current %d", tiering.ErrLeaseLost, fence.Token, m.token)
	}
	if expected != m.ptr.ManifestVersion {
		return tiering.ErrConflict
	}
	m.ptr = tiering.RemoteLog{ManifestKey: key, ManifestVersion: expected + 1, StartOffset: start, EndOffset: end, LeaderEpoch: epoch}
	return nil
}

func (m *remoteMeta) LeaderEpoch(tiering.TopicPartition) (int32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch, true
}

// remoteEnv is a local log tiered to an in-memory bucket.
type remoteEnv struct {
	l   *hotlog.Log
	tm  *tiering.Manager
	tp  *tiering.Partition
	md  *remoteMeta
	clk *clock
}

func newRemoteEnv(t testing.TB, segBytes int64) *remoteEnv {
	clk := &clock{}
	clk.add(time.Hour)
	fs := vfs.NewMem()
	md := &remoteMeta{token: 1}
	tm, err := tiering.New(tiering.Options{Store: mem.New(clk.now), Committer: md, Leadership: md, CacheFS: fs, CacheDir: "/cache",
		Interval: -1, ChunkSize: 4096, Now: clk.now, Logger: quiet, OrphanGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tm.Close() })
	l := openLog(t, fs, segBytes, clk)
	t.Cleanup(func() { l.Close() })
	tp, err := tm.AddPartition(tiering.PartitionOptions{TopicPartition: tiering.TopicPartition{Topic: "t", TopicID: [16]byte{1}},
		Log: l, FS: fs, Config: tiering.TopicConfig{RemoteStorageEnable: true, RetentionMs: -1, RetentionBytes: -1,
			LocalRetentionMs: -1, LocalRetentionBytes: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return &remoteEnv{l: l, tm: tm, tp: tp, md: md, clk: clk}
}

// upload uploads every sealed segment below the high watermark.
func (e *remoteEnv) upload(t testing.TB) {
	t.Helper()
	for {
		before, _ := e.md.RemoteLog(context.Background(), tiering.TopicPartition{})
		if err := e.tp.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		after, _ := e.md.RemoteLog(context.Background(), tiering.TopicPartition{})
		if after == before {
			return
		}
	}
}

// view reads the remote log below its end (through tiering's remote reads)
// and then the local log from there.
func (e *remoteEnv) view(t *testing.T) (remote, local []seen) {
	t.Helper()
	ctx := context.Background()
	ptr, _ := e.md.RemoteLog(ctx, tiering.TopicPartition{})
	for off := ptr.StartOffset; off < ptr.EndOffset; {
		res, err := e.tp.Read(ctx, off, 1<<20, ptr.EndOffset)
		if errors.Is(err, tiering.ErrOffsetOutOfRange) {
			break
		}
		if err != nil {
			t.Fatalf("remote read at %d: %v", off, err)
		}
		b, err := res.Bytes()
		res.Release()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			break
		}
		remote = append(remote, decodeBatches(t, b)...)
		off = res.NextOffset
	}
	for _, r := range readViewFrom(t, e.l, max(ptr.EndOffset, e.l.LogStartOffset())) {
		if r.offset >= ptr.EndOffset {
			local = append(local, r)
		}
	}
	return remote, local
}

// decodeBatches decodes whole batches with kmsg and the test's own
// decompression.
func decodeBatches(t *testing.T, b []byte) []seen {
	t.Helper()
	var out []seen
	for len(b) > 0 {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		raw := decompressForTest(t, rb.Attributes&7, rb.Records)
		for i := int32(0); i < rb.NumRecords; i++ {
			l, n := binary.Varint(raw)
			var rec kmsg.Record
			if err := rec.ReadFrom(raw[:n+int(l)]); err != nil {
				t.Fatalf("record: %v", err)
			}
			raw = raw[n+int(l):]
			out = append(out, seen{offset: rb.FirstOffset + int64(rec.OffsetDelta), key: rec.Key, value: rec.Value,
				control: rb.Attributes&attrControl != 0, ts: rb.FirstTimestamp + rec.TimestampDelta64})
		}
		b = b[int(rb.Length)+12:]
	}
	return out
}

// TestCleanRemote: keyed writes (updates, tombstones) for several codecs,
// uploaded to the bucket, then newer local writes; remote passes with a key
// map much smaller than the keys (several passes). After every pass the
// remote log followed by the local log still gives the latest record of
// every key; once the remote log is compacted to its end, each key is in it
// at most once. A last pass with a map large enough for every local key
// leaves no key in the remote log that the local log holds a newer record
// of, and (past delete.retention.ms) brings no deleted key back.
func TestCleanRemote(t *testing.T) {
	codecs := testCodecs
	if raceEnabled || testing.Short() {
		codecs = []testCodec{testCodecs[0], testCodecs[5]} // none, zstd
	}
	for _, tc := range codecs {
		t.Run(tc.name, func(t *testing.T) {
			const segBytes = 4096
			e := newRemoteEnv(t, segBytes)
			rng := rand.New(rand.NewPCG(7, uint64(tc.codec)))
			writeKeyed(t, e.l, e.clk, rng, tc, 200, 1500, 10)
			seal(t, e.l, e.clk, segBytes)
			e.upload(t)
			writeKeyed(t, e.l, e.clk, rng, tc, 200, 200, 10) // newer, local only
			seal(t, e.l, e.clk, segBytes)
			all := readView(t, e.l)
			want := latest(all)
			c := NewCleaner(CleanerConfig{DedupeBufferBytes: 80 * 24}, e.clk.now) // about 70 keys a pass
			defer c.Close()
			target := RemoteTarget{Remote: e.tp, Local: e.l, Config: TopicConfig{Policy: Policy{Compact: true}, SegmentBytes: 3 * segBytes}}
			ctx := context.Background()
			m0, err := e.tp.Manifest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var m *tiering.Manifest
			for pass := 0; ; pass++ {
				_, err := c.CleanRemote(ctx, target, tiering.Fence{Kind: "compact", Resource: "t-0", Holder: "me", Token: 1})
				if err != nil {
					t.Fatalf("pass %d: %v", pass, err)
				}
				remote, local := e.view(t)
				got := latest(append(remote, local...))
				if len(got) != len(want) {
					t.Fatalf("pass %d: %d keys, want %d", pass, len(got), len(want))
				}
				for k, w := range want {
					if g := got[k]; g.offset != w.offset || string(g.value) != string(w.value) || g.ts != w.ts {
						t.Fatalf("pass %d: key %s: %+v, want %+v", pass, k, g, w)
					}
				}
				m, err = e.tp.Manifest(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if m.CleanedUpTo == m.EndOffset {
					checkRemoteCompacted(t, remote, nil, 0)
					break
				}
				if pass > 20 {
					t.Fatalf("remote compaction does not finish: checkpoint %d of %d", m.CleanedUpTo, m.EndOffset)
				}
			}
			if m.Size()*3 > m0.Size() || len(m.Retired) == 0 {
				t.Fatalf("remote log of %d bytes became %d (%d retired segments)", m0.Size(), m.Size(), len(m.Retired))
			}
			// A final full pass with a large map over a clean remote log:
			// the view stays exact.
			c2 := NewCleaner(CleanerConfig{DedupeBufferBytes: 1 << 20}, e.clk.now)
			defer c2.Close()
			e.clk.add(48 * time.Hour) // past delete.retention.ms: remote tombstones may go
			if _, err := c2.CleanRemote(ctx, target, tiering.Fence{Token: 1}); err != nil {
				t.Fatal(err)
			}
			remote, local := e.view(t)
			// The large map held every local key: none with a newer local
			// record is left in the remote log.
			checkRemoteCompacted(t, remote, local, e.l.Segments()[len(e.l.Segments())-1].BaseOffset)
			got := latest(append(remote, local...))
			for k, w := range want {
				g, ok := got[k]
				if w.value == nil {
					if ok && g.value != nil {
						t.Fatalf("deleted key %s came back: %+v", k, g)
					}
					continue
				}
				if g.offset != w.offset || string(g.value) != string(w.value) {
					t.Fatalf("after horizon: key %s: %+v, want %+v", k, g, w)
				}
			}
		})
	}
}

// checkRemoteCompacted: a key is at most once in remote, and not there if
// local holds it below localCleanEnd.
func checkRemoteCompacted(t *testing.T, remote, local []seen, localCleanEnd int64) {
	t.Helper()
	inLocal := map[string]bool{}
	for _, r := range local {
		if r.offset < localCleanEnd && !r.control {
			inLocal[string(r.key)] = true
		}
	}
	seenKeys := map[string]int64{}
	for _, r := range remote {
		if r.control {
			continue
		}
		if prev, dup := seenKeys[string(r.key)]; dup {
			t.Fatalf("key %s twice in the compacted remote log (%d, %d)", r.key, prev, r.offset)
		}
		seenKeys[string(r.key)] = r.offset
		if inLocal[string(r.key)] {
			t.Fatalf("key %s in the remote log at %d though the local log has a newer record", r.key, r.offset)
		}
	}
}

// TestCleanRemoteStaleLease: a plan prepared under a lease that was taken
// over is refused at commit, its uploads deleted, the manifest unchanged;
// a plan whose groups left the manifest meanwhile is refused as a conflict.
func TestCleanRemoteStaleLease(t *testing.T) {
	const segBytes = 4096
	e := newRemoteEnv(t, segBytes)
	rng := rand.New(rand.NewPCG(1, 2))
	writeKeyed(t, e.l, e.clk, rng, testCodecs[0], 50, 1000, 0)
	seal(t, e.l, e.clk, segBytes)
	e.upload(t)
	c := NewCleaner(CleanerConfig{DedupeBufferBytes: 1 << 20}, e.clk.now)
	defer c.Close()
	ctx := context.Background()
	target := RemoteTarget{Remote: e.tp, Config: TopicConfig{Policy: Policy{Compact: true}}}
	pl, err := c.PrepareRemote(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	up := pl.Uploaded()
	if len(up) == 0 {
		t.Fatal("nothing uploaded")
	}
	e.md.mu.Lock()
	e.md.token = 2 // taken over
	e.md.mu.Unlock()
	before, _ := e.md.RemoteLog(ctx, tiering.TopicPartition{})
	if err := pl.Commit(ctx, tiering.Fence{Token: 1}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("stale commit: %v", err)
	}
	if after, _ := e.md.RemoteLog(ctx, tiering.TopicPartition{}); after != before {
		t.Fatal("a refused commit moved the pointer")
	}
	for _, s := range up {
		if _, err := e.tm.Store().Head(ctx, s.Stem+tiering.SuffixLog); err == nil {
			t.Fatalf("refused upload %s still in the bucket", s.Stem)
		}
	}
	// Conflict: the groups were replaced by another pass meanwhile.
	pl1, err := c.PrepareRemote(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	c2 := NewCleaner(CleanerConfig{DedupeBufferBytes: 1 << 20}, e.clk.now)
	defer c2.Close()
	if _, err := c2.CleanRemote(ctx, target, tiering.Fence{Token: 2}); err != nil {
		t.Fatal(err)
	}
	if err := pl1.Commit(ctx, tiering.Fence{Token: 2}); !errors.Is(err, tiering.ErrConflict) {
		t.Fatalf("commit of replaced groups: %v, want ErrConflict", err)
	}
}

// TestRemoteMaxCompactionLag: RemoteDirtyTimestamp finds the remote log's
// oldest uncleaned batch (none once a pass compacted it to its end, the
// first newly uploaded batch after), and RemoteForced turns it into
// max.compaction.lag.ms's verdict, below min.cleanable.dirty.ratio too.
func TestRemoteMaxCompactionLag(t *testing.T) {
	const segBytes = 4096
	e := newRemoteEnv(t, segBytes)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 9))
	firstTs := func(from int64) int64 {
		t.Helper()
		b, err := e.l.ReadBytes(from, 1, e.l.LogEndOffset())
		if err != nil {
			t.Fatal(err)
		}
		h, err := hotlog.ParseBatchHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		return h.MaxTimestamp
	}
	writeKeyed(t, e.l, e.clk, rng, testCodecs[0], 50, 600, 0)
	want := firstTs(0)
	seal(t, e.l, e.clk, segBytes)
	e.upload(t)
	m, err := e.tp.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stem, ts, err := RemoteDirtyTimestamp(ctx, e.tp, m)
	if err != nil || stem != m.Segments[0].Stem || ts != want {
		t.Fatalf("dirty timestamp %s %d (%v), want %s %d", stem, ts, err, m.Segments[0].Stem, want)
	}
	// A checkpoint inside a segment (a pass whose map filled there): the
	// headers before it are passed over.
	mid := *m
	mid.CleanedUpTo = (m.Segments[1].BaseOffset + m.Segments[1].EndOffset) / 2
	if stem, ts, err := RemoteDirtyTimestamp(ctx, e.tp, &mid); err != nil || stem != m.Segments[1].Stem || ts != firstTs(mid.CleanedUpTo) {
		t.Fatalf("dirty timestamp from %d: %s %d (%v), want %d", mid.CleanedUpTo, stem, ts, err, firstTs(mid.CleanedUpTo))
	}
	c := NewCleaner(CleanerConfig{}, e.clk.now)
	defer c.Close()
	cfg := TopicConfig{Policy: Policy{Compact: true}, MaxCompactionLag: time.Minute}
	if _, err := c.CleanRemote(ctx, RemoteTarget{Remote: e.tp, Config: cfg}, tiering.Fence{Token: 1}); err != nil {
		t.Fatal(err)
	}
	if m, _ = e.tp.Manifest(ctx); m.CleanedUpTo != m.EndOffset {
		t.Fatalf("cleaned up to %d of %d", m.CleanedUpTo, m.EndOffset)
	}
	if stem, ts, err := RemoteDirtyTimestamp(ctx, e.tp, m); err != nil || stem != "" || ts != -1 {
		t.Fatalf("nothing dirty: %s %d %v", stem, ts, err)
	}
	// Newer data, uploaded: a little dirty (below the default ratio 0.5).
	// (The first dirty batch is the seal's tail record, left in the active
	// segment by the first upload.)
	e.clk.add(10 * time.Minute)
	want = firstTs(m.EndOffset)
	writeKeyed(t, e.l, e.clk, rng, testCodecs[0], 50, 30, 0)
	seal(t, e.l, e.clk, segBytes)
	e.upload(t)
	if m, err = e.tp.Manifest(ctx); err != nil {
		t.Fatal(err)
	}
	if r := RemoteCleanableRange(m); r.DirtyBytes == 0 || r.DirtyRatio() >= 0.5 {
		t.Fatalf("remote range %+v: want a little dirty", r)
	}
	stem, ts, err = RemoteDirtyTimestamp(ctx, e.tp, m)
	if err != nil || ts != want || stem == "" {
		t.Fatalf("dirty timestamp %s %d (%v), want %d", stem, ts, err, want)
	}
	if RemoteForced(cfg, ts, time.UnixMilli(ts+30_000)) {
		t.Fatal("forced before max.compaction.lag.ms passed")
	}
	if !RemoteForced(cfg, ts, time.UnixMilli(ts+120_000)) {
		t.Fatal("not forced after max.compaction.lag.ms passed")
	}
	if RemoteForced(TopicConfig{}, ts, time.UnixMilli(ts+120_000)) {
		t.Fatal("forced without max.compaction.lag.ms")
	}
}

// TestRemoteMinCompactionLag: min.compaction.lag.ms holds for the remote
// log as for the local one: a pass maps and drops nothing from the first
// remote segment holding a record younger than the lag on (nor the local
// data above it), and cleans the older segments before it. Before, a pass
// compacted data seconds after its upload whatever the lag (a compaction
// review: 15 000 updates read back as 2 196 under a 10-minute lag).
func TestRemoteMinCompactionLag(t *testing.T) {
	const segBytes = 4096
	e := newRemoteEnv(t, segBytes)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 11))
	writeKeyed(t, e.l, e.clk, rng, testCodecs[0], 50, 600, 0)
	seal(t, e.l, e.clk, segBytes)
	e.upload(t)
	old, err := e.tp.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCleaner(CleanerConfig{}, e.clk.now)
	defer c.Close()
	cfg := TopicConfig{Policy: Policy{Compact: true}, MinCompactionLag: time.Hour, SegmentBytes: 3 * segBytes}
	pass := func() *tiering.Manifest {
		t.Helper()
		if _, err := c.CleanRemote(ctx, RemoteTarget{Remote: e.tp, Local: e.l, Config: cfg}, tiering.Fence{Token: 1}); err != nil {
			t.Fatal(err)
		}
		m, err := e.tp.Manifest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// Everything younger than the lag: nothing changes.
	if m := pass(); m.CleanedUpTo != old.CleanedUpTo || len(m.Segments) != len(old.Segments) {
		t.Fatalf("a pass within min.compaction.lag.ms: cleaned up to %d (was %d), %d segments (were %d)",
			m.CleanedUpTo, old.CleanedUpTo, len(m.Segments), len(old.Segments))
	}
	// Older than the lag, with younger data uploaded after it: the old
	// segments are cleaned, the young ones kept whole.
	e.clk.add(2 * time.Hour)
	youngFrom := old.EndOffset
	writeKeyed(t, e.l, e.clk, rng, testCodecs[0], 50, 300, 0)
	seal(t, e.l, e.clk, segBytes)
	e.upload(t)
	before, _ := e.view(t)
	m := pass()
	if m.CleanedUpTo > youngFrom || m.CleanedUpTo < old.Segments[len(old.Segments)-1].BaseOffset {
		t.Fatalf("cleaned up to %d: want the old segments cleaned (they end at %d), not the young ones", m.CleanedUpTo, youngFrom)
	}
	after, _ := e.view(t)
	var youngBefore, youngAfter int
	for _, r := range before {
		if r.offset >= m.CleanedUpTo {
			youngBefore++
		}
	}
	for _, r := range after {
		if r.offset >= m.CleanedUpTo {
			youngAfter++
		}
	}
	if youngAfter != youngBefore || len(after) >= len(before) {
		t.Fatalf("records past the lag boundary %d: %d before the pass, %d after; all records %d -> %d (want the old ones compacted)",
			m.CleanedUpTo, youngBefore, youngAfter, len(before), len(after))
	}
	// Once the young data is older than the lag too, it is cleaned.
	e.clk.add(2 * time.Hour)
	if m := pass(); m.CleanedUpTo != m.EndOffset {
		t.Fatalf("past the lag: cleaned up to %d of %d", m.CleanedUpTo, m.EndOffset)
	}
}
