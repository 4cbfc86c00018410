package broker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/compaction"
	"github.com/sediment-io/sediment/internal/miniotest"
	"github.com/sediment-io/sediment/metadata"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/s3"
	"github.com/sediment-io/sediment/tiering"
)

type minioBucket struct {
	store  *s3.Store
	client *minio.Client // the independent client
	name   string
}

func startMinIOBucket(t *testing.T) minioBucket {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	store, err := s3.New(context.Background(), s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: miniotest.Region,
		PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, MaxAttempts: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	mc, err := minio.New(srv.Endpoint[len("http://"):], &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""),
		Region: miniotest.Region})
	if err != nil {
		t.Fatal(err)
	}
	return minioBucket{store: store, client: mc, name: bucket}
}

// startTieredCompactionBroker starts a tiered broker whose remote
// compaction worker runs every remoteInterval (negative: never).
func startTieredCompactionBroker(t *testing.T, dir string, store objectstore.Store, remoteInterval, grace time.Duration) *Broker {
	t.Helper()
	b := startBroker(t, dir, func(c *Config) {
		c.LogFlush = "os"
		c.Cleaner.RemoteInterval = remoteInterval
		c.Cleaner.LeaseTTL = 2 * time.Second
		c.Cleaner.DedupeBufferSize = 1 << 20
	})
	err := b.EnableTiering(TieringConfig{Store: store, SyncInterval: 20 * time.Millisecond,
		Options: tiering.Options{Interval: 20 * time.Millisecond, ChunkSize: 64 << 10, Logger: testLogger(t),
			OrphanGrace: grace, CleanInterval: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// keyedUpdates is keys × updates records, every key updated in turn.
func keyedUpdates(topic string, keys, updates int, tag string) []*kgo.Record {
	var out []*kgo.Record
	for u := 0; u < updates; u++ {
		for k := 0; k < keys; k++ {
			out = append(out, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("key-%04d", k)),
				Value: []byte(fmt.Sprintf("%s update %d of key %d %0100d", tag, u, k, u))})
		}
	}
	return out
}

func (b *Broker) testTierPart(t *testing.T, topic string) *tierPart {
	t.Helper()
	g := b.tier()
	g.mu.Lock()
	defer g.mu.Unlock()
	for tp, p := range g.mu.parts {
		if tp.Topic == topic && tp.Partition == 0 {
			return p
		}
	}
	return nil
}

func remotePointer(t *testing.T, b *Broker, topic string) metadata.RemoteLog {
	t.Helper()
	tt, ok := b.meta.State().Topic(topic)
	if !ok {
		t.Fatalf("no topic %s", topic)
	}
	return tt.Partitions[0].Remote
}

// TestTieredCompactionMinIO: a tiered topic with cleanup.policy=compact, tiny
// segments and no local retention; the broker's tiered-compaction worker
// takes the partition's lease, compacts the remote segments and swaps them
// into the manifest. Checked with minio-go (the independent client): the
// manifest the metadata log points at names segments that are in the bucket
// with its sizes, the replaced ones are kept for the grace period and then
// deleted; a franz-go consumer reading from offset 0 (cold: the local log
// holds only the tail) gets the latest value of every key, each key at most
// once below the compacted end.
func TestTieredCompactionMinIO(t *testing.T) {
	mb := startMinIOBucket(t)
	dir := t.TempDir()
	b := startTieredCompactionBroker(t, filepath.Join(dir, "broker"), mb.store, 50*time.Millisecond, 3*time.Second)
	topic := "tiered-compacted"
	createTopic(t, b, topic, 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1"), "cleanup.policy": ptr("compact"),
		"min.cleanable.dirty.ratio": ptr("0.3"), "min.insync.replicas": ptr("1")})
	const keys, updates = 150, 10
	cl := newClient(t, b, kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(4096), kgo.ProducerBatchCompression(kgo.NoCompression()))
	produced := produceAll(t, cl, keyedUpdates(topic, keys, updates, "v"))[0]
	lastOffset := produced[len(produced)-1].Offset
	latest := map[string]string{}
	for _, r := range produced {
		latest[string(r.Key)] = string(r.Value)
	}

	// Wait until the remote log is compacted up to its end, and its end
	// is past most of the data.
	var ptrNow metadata.RemoteLog
	var man *tiering.Manifest
	waitTiered(t, "remote log compacted to its end", func() bool {
		ptrNow = remotePointer(t, b, topic)
		if ptrNow.ManifestKey == "" || ptrNow.EndOffset < lastOffset-300 {
			return false
		}
		data, err := objectstore.ReadAll(context.Background(), mb.store, ptrNow.ManifestKey, 64<<20)
		if err != nil {
			return false
		}
		man, err = tiering.DecodeManifest(data)
		return err == nil && man.CleanedUpTo == man.EndOffset && len(man.Retired) > 0
	})
	st, ok := b.RemoteCleanStatus(topic, 0)
	if !ok || st.LastCleaned.IsZero() {
		t.Fatalf("no remote clean status: %+v", st)
	}

	// The manifest's segments are in the bucket (minio-go), with its sizes.
	ctx := context.Background()
	var remoteBytes int64
	for _, s := range man.Segments {
		info, err := mb.client.StatObject(ctx, mb.name, s.Stem+tiering.SuffixLog, minio.StatObjectOptions{})
		if err != nil || info.Size != s.Size {
			t.Fatalf("segment %s: %v, size %d, manifest %d", s.Stem, err, info.Size, s.Size)
		}
		remoteBytes += s.Size
	}
	var producedBytes int64
	for _, r := range produced[:ptrNow.EndOffset] {
		producedBytes += int64(len(r.Key) + len(r.Value))
	}
	if remoteBytes*2 > producedBytes {
		t.Fatalf("remote log of %d bytes for %d bytes of records below %d: not compacted", remoteBytes, producedBytes, ptrNow.EndOffset)
	}

	// A cold read from offset 0 gives the compacted view.
	got := consumeUntil(t, b, topic, lastOffset)
	seen := map[string]int64{}
	view := map[string]string{}
	for _, r := range got {
		if r.Offset >= int64(len(produced)) || string(produced[r.Offset].Value) != string(r.Value) || string(produced[r.Offset].Key) != string(r.Key) {
			t.Fatalf("record at %d was never written there: %q=%q", r.Offset, r.Key, r.Value)
		}
		if prev, dup := seen[string(r.Key)]; dup && r.Offset < man.CleanedUpTo {
			t.Fatalf("key %s twice below the compacted end %d: offsets %d and %d", r.Key, man.CleanedUpTo, prev, r.Offset)
		}
		seen[string(r.Key)] = r.Offset
		view[string(r.Key)] = string(r.Value)
	}
	if len(view) != len(latest) {
		t.Fatalf("%d keys read, %d written", len(view), len(latest))
	}
	for k, v := range latest {
		if view[k] != v {
			t.Fatalf("key %s: read %q, latest written %q", k, view[k], v)
		}
	}
	if len(got) > len(produced)/2 {
		t.Fatalf("read %d of %d records: not compacted", len(got), len(produced))
	}
	if b.TieringManager().Metrics().BytesServed == 0 {
		t.Fatal("nothing served from the bucket")
	}

	// The replaced segments go once the grace period passed.
	retired := man.Retired
	waitTiered(t, "retired segments deleted after the grace period", func() bool {
		for _, r := range retired {
			if _, err := mb.client.StatObject(ctx, mb.name, r.Stem+tiering.SuffixLog, minio.StatObjectOptions{}); err == nil {
				return false
			}
		}
		return true
	})
	if v := testutil.ToFloat64(b.leaseMetrics().held.WithLabelValues("compact")); v == 0 {
		t.Fatal("sediment_leases_acquired_total{kind=compact} is 0")
	}
}

// consumeUntil reads the partition from offset 0 until it has the record at
// last.
func consumeUntil(t *testing.T, b *Broker, topic string, last int64) []*kgo.Record {
	t.Helper()
	cl := newClient(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	ctx := testCtx(t)
	var got []*kgo.Record
	for len(got) == 0 || got[len(got)-1].Offset < last {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d records: %v", len(got), err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	return got
}

// TestTieredCompactionLeaseRace: two workers race for a partition's compact
// lease. The first prepares a pass under its lease and pauses past the
// lease's expiry; the second takes the lease over (the first could not
// while it stood: ErrLeaseHeld). The first's commit is then refused by the
// metadata log (ErrLeaseLost) and its uploads are deleted; the second's
// commit goes through.
func TestTieredCompactionLeaseRace(t *testing.T) {
	mb := startMinIOBucket(t)
	b := startTieredCompactionBroker(t, t.TempDir(), mb.store, -1, time.Hour)
	topic := "lease-race"
	createTopic(t, b, topic, 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1"), "cleanup.policy": ptr("compact"), "min.insync.replicas": ptr("1")})
	cl := newClient(t, b, kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(4096), kgo.ProducerBatchCompression(kgo.NoCompression()))
	// Keys written once, first, keep records in the bucket's first
	// segment whatever else is cleanable when worker 1 maps: without them,
	// a sealed local segment not yet uploaded can hold a later update of
	// every key, and the plan rightly drops the whole remote part, uploading
	// nothing.
	var recs []*kgo.Record
	for k := 0; k < 20; k++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("static-%02d", k)), Value: []byte("written once")})
	}
	produced := produceAll(t, cl, append(recs, keyedUpdates(topic, 50, 10, "r")...))[0]
	waitTiered(t, "most of the log in the bucket", func() bool {
		return remotePointer(t, b, topic).EndOffset > int64(len(produced))/2
	})
	tp := b.testTierPart(t, topic)
	tt, _ := b.meta.State().Topic(topic)
	cfg, ok := b.tieredCompactionConfig(tt.Configs)
	if !ok {
		t.Fatal("topic not seen as tiered and compacted")
	}
	ctx := testCtx(t)
	name := topic + "-0"
	// Worker 1's lease must outlast the next acquire (a metadata round
	// trip, slow on a loaded machine) and then expire for the takeover.
	w1, w2 := b.leases("worker-1", 2*time.Second), b.leases("worker-2", time.Minute)
	c1 := compaction.NewCleaner(compaction.CleanerConfig{DedupeBufferBytes: 1 << 20}, nil)
	defer c1.Close()
	c2 := compaction.NewCleaner(compaction.CleanerConfig{DedupeBufferBytes: 1 << 20}, nil)
	defer c2.Close()
	target := compaction.RemoteTarget{Remote: tp.tp, Local: tp.p.log, Config: cfg, Txn: partitionTxns{tp.p}}

	l1, err := w1.Acquire(ctx, compaction.LeaseCompact, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Acquire(ctx, compaction.LeaseCompact, name); !errors.Is(err, compaction.ErrLeaseHeld) {
		t.Fatalf("second acquire while the first stands: %v, want ErrLeaseHeld", err)
	}
	plan1, err := c1.PrepareRemote(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if plan1.Stats.SegmentsBefore == 0 {
		t.Fatalf("worker 1 prepared nothing: %+v", plan1.Stats)
	}
	before := remotePointer(t, b, topic)
	mBefore, err := tp.tp.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	uploaded1 := plan1.Uploaded()
	if len(uploaded1) == 0 {
		t.Fatal("worker 1 uploaded nothing")
	}
	// Worker 1 "pauses" past its lease; worker 2 takes it over.
	var l2 compaction.Lease
	waitTiered(t, "worker 2 takes the lease over", func() bool {
		l2, err = w2.Acquire(ctx, compaction.LeaseCompact, name)
		return err == nil
	})
	if l2.Token <= l1.Token {
		t.Fatalf("token %d after %d", l2.Token, l1.Token)
	}
	err = plan1.Commit(ctx, fenceOf(l1))
	if !errors.Is(err, compaction.ErrLeaseLost) || !errors.Is(err, tiering.ErrLeaseLost) {
		t.Fatalf("stale commit: %v, want ErrLeaseLost", err)
	}
	// The uploader goes on appending new segments meanwhile, so the
	// pointer may move; what the stale commit must not do is clean.
	if m, err := tp.tp.Manifest(ctx); err != nil {
		t.Fatal(err)
	} else {
		if m.CleanedUpTo != mBefore.CleanedUpTo {
			t.Fatalf("the stale commit moved the cleaned checkpoint: %d -> %d", mBefore.CleanedUpTo, m.CleanedUpTo)
		}
		for _, seg := range m.Segments {
			for _, s := range uploaded1 {
				if seg.Stem == s.Stem {
					t.Fatalf("worker 1's stale segment %s is in the manifest", s.Stem)
				}
			}
		}
	}
	// Its uploads were deleted.
	for obj := range mb.client.ListObjects(ctx, mb.name, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		for _, s := range uploaded1 {
			if obj.Key == s.Stem+tiering.SuffixLog {
				t.Fatalf("worker 1's upload %s is still in the bucket", obj.Key)
			}
		}
	}
	plan2, err := c2.CleanRemote(ctx, target, fenceOf(l2))
	if err != nil {
		t.Fatal(err)
	}
	after := remotePointer(t, b, topic)
	if after.ManifestVersion <= before.ManifestVersion || plan2.Stats.SegmentsBefore == 0 {
		t.Fatalf("worker 2's commit: pointer %+v -> %+v, stats %+v", before, after, plan2.Stats)
	}
	if err := w2.Release(ctx, l2); err != nil {
		t.Fatal(err)
	}
	// Every key still reads its latest value.
	got := consumeUntil(t, b, topic, produced[len(produced)-1].Offset)
	view := map[string]string{}
	for _, r := range got {
		view[string(r.Key)] = string(r.Value)
	}
	for _, r := range produced {
		if view[string(r.Key)] == "" {
			t.Fatalf("key %s lost", r.Key)
		}
	}
	for _, r := range produced[len(produced)-50:] {
		if view[string(r.Key)] != string(r.Value) {
			t.Fatalf("key %s: %q, want %q", r.Key, view[string(r.Key)], r.Value)
		}
	}
}

// TestTieredRetentionUnderLease: remote retention (retention.bytes across
// both tiers) drops remote segments under the partition's "retention" lease:
// the remote log start moves, the lease counter counts, and a lease another
// worker holds stops the remote part until it is released.
func TestTieredRetentionUnderLease(t *testing.T) {
	dir := t.TempDir()
	store := fsBucket(t, dir)
	defer store.Close()
	b := startTieredCompactionBroker(t, filepath.Join(dir, "broker"), store, -1, time.Hour)
	topic := "leased-retention"
	createTopic(t, b, topic, 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1"), "min.insync.replicas": ptr("1")})
	// Another worker holds the retention lease first.
	ctx := testCtx(t)
	other := b.leases("other-worker", time.Hour)
	held, err := other.Acquire(ctx, compaction.LeaseRetention, topic+"-0")
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, b, kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(4096), kgo.ProducerBatchCompression(kgo.NoCompression()))
	produceAll(t, cl, keyedUpdates(topic, 50, 10, "t"))
	waitTiered(t, "data tiered", func() bool { return remotePointer(t, b, topic).EndOffset > 250 })
	adm := kadm.NewClient(newClient(t, b))
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: ptr("20000")}}, topic); err != nil {
		t.Fatal(err)
	}
	// Held elsewhere: the remote start stays (retention rounds fail with
	// ErrLeaseHeld and back off). A round run here, once the partition has
	// the new setting, is refused, and the status says why.
	p := b.testTierPart(t, topic)
	if p == nil {
		t.Fatal("the partition is not tiered")
	}
	waitTiered(t, "retention.bytes applied", func() bool { return p.tp.Config().RetentionBytes == 20000 })
	if err := p.tp.RunOnce(ctx); !errors.Is(err, compaction.ErrLeaseHeld) {
		t.Fatalf("a retention round under another worker's lease: %v, want %v (status %+v)", err, compaction.ErrLeaseHeld, p.tp.Status())
	}
	if st := p.tp.Status(); !strings.Contains(st.LastError, "lease held") {
		t.Fatalf("status after a round refused for the lease: %+v", st)
	}
	if start := remotePointer(t, b, topic).StartOffset; start != 0 {
		t.Fatalf("remote start moved to %d while another worker held the lease", start)
	}
	if err := other.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	waitTiered(t, "remote retention under the broker's lease", func() bool { return remotePointer(t, b, topic).StartOffset > 0 })
	if v := testutil.ToFloat64(b.leaseMetrics().held.WithLabelValues("retention")); v == 0 {
		t.Fatal("sediment_leases_acquired_total{kind=retention} is 0")
	}
}

// TestTieredCompactionMaxCompactionLag: with min.cleanable.dirty.ratio=1 the
// remote log's ratio asks for a pass only while nothing of it is compacted;
// once a pass compacted it to its end, newer uploaded data is compacted
// only because max.compaction.lag.ms (1 s) forces it when the oldest
// uncleaned batch is older than that.
func TestTieredCompactionMaxCompactionLag(t *testing.T) {
	topic := "tiered-max-lag"
	b, cl := tieredCompactedTopic(t, topic, map[string]string{"min.cleanable.dirty.ratio": "1", "max.compaction.lag.ms": "1000"})
	manifest := func() *tiering.Manifest { return tierManifest(t, b, topic) }
	compactedPast := func(end int64) (m *tiering.Manifest) {
		t.Helper()
		waitTiered(t, fmt.Sprintf("remote log compacted to its end, past %d", end), func() bool {
			m = manifest()
			return m != nil && m.EndOffset > end && m.CleanedUpTo == m.EndOffset
		})
		return m
	}
	first := produceAll(t, cl, keyedUpdates(topic, 100, 5, "a"))[0]
	m1 := compactedPast(first[len(first)-1].Offset - 300)
	second := produceAll(t, cl, keyedUpdates(topic, 100, 5, "b"))[0]
	// The new uploads leave the dirty ratio below 1 from the first one on:
	// only the lag can bring the checkpoint to the new end.
	m2 := compactedPast(max(m1.EndOffset, second[len(second)-1].Offset-300))
	if r := compaction.RemoteCleanableRange(m2); r.DirtyBytes != 0 {
		t.Fatalf("remote range after the forced pass: %+v", r)
	}
	st, ok := b.RemoteCleanStatus(topic, 0)
	if !ok || st.LastCleaned.IsZero() {
		t.Fatalf("no remote clean status: %+v", st)
	}
}

// TestTieredCompactOnlyKeepsRemoteLog: cleanup.policy=compact alone takes
// nothing out of the log by time or size, as in Kafka and as the same topic
// without remote storage: retention.ms long past, retention rounds run, and
// the remote log still starts at 0 with every compacted segment, while
// compact,delete expires it. Before, total retention expired the remote
// segments of a compact-only topic and with them every key not written
// again (a compaction review: 1 803 of 1 995 keys lost in 2 minutes).
func TestTieredCompactOnlyKeepsRemoteLog(t *testing.T) {
	for _, policy := range []string{"compact", "compact,delete"} {
		t.Run(policy, func(t *testing.T) {
			topic := "retention-" + strings.ReplaceAll(policy, ",", "-")
			b, cl := tieredCompactedTopic(t, topic, map[string]string{"retention.ms": "1", "cleanup.policy": policy})
			produceAll(t, cl, keyedUpdates(topic, 100, 6, "a"))
			p := b.testTierPart(t, topic)
			if p == nil {
				t.Fatal("the partition is not tiered")
			}
			ctx := testCtx(t)
			if policy == "compact,delete" {
				// Uploads and expiry race; what matters is that the
				// remote start moves past what was uploaded.
				waitTiered(t, "remote segments expired", func() bool {
					_ = p.tp.RunOnce(ctx)
					return remotePointer(t, b, topic).StartOffset > 0
				})
				return
			}
			waitTiered(t, "data tiered and compacted", func() bool {
				m := tierManifest(t, b, topic)
				return m != nil && m.EndOffset > 300 && m.CleanedUpTo == m.EndOffset
			})
			for range 3 { // retention rounds, long past retention.ms
				if err := p.tp.RunOnce(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if m := tierManifest(t, b, topic); m.StartOffset != 0 || len(m.Segments) == 0 {
				t.Fatalf("cleanup.policy=compact: remote log start moved to %d, %d segments left", m.StartOffset, len(m.Segments))
			}
			if cfg := p.tp.Config(); cfg.RetentionMs != -1 || cfg.RetentionBytes != -1 {
				t.Fatalf("tiering config of a compact-only topic: %+v, want no total retention", cfg)
			}
		})
	}
}

// TestTieredCompactedGapsFetch: tiered compaction swaps groups that compact
// to nothing for no segment (ReplaceSegments with an empty replacement,
// under the partition's compact lease), which leaves gaps in the remote log
// (MinIO): one between two remote segments, one at its end, where the local
// log goes on. A Fetch at an offset inside either gets the next records (the
// next remote segment's first batch, the local log's first), never
// OFFSET_OUT_OF_RANGE, and a consumer from the start reads every record
// left.
func TestTieredCompactedGapsFetch(t *testing.T) {
	mb := startMinIOBucket(t)
	b := startTieredCompactionBroker(t, filepath.Join(t.TempDir(), "broker"), mb.store, -1, time.Hour)
	const topic = "gaps"
	createTopic(t, b, topic, 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1"), "min.insync.replicas": ptr("1")})
	cl := newClient(t, b, kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(4096), kgo.ProducerBatchCompression(kgo.NoCompression()))
	produced := produceAll(t, cl, makeRecords(topic, 3000, "gap"))[0]
	ctx := testCtx(t)
	var tpart *tierPart
	var mf *tiering.Manifest
	waitTiered(t, "four remote segments, the local log from the remote end on", func() bool {
		if tpart = b.testTierPart(t, topic); tpart == nil {
			return false
		}
		var err error
		mf, err = tpart.tp.Manifest(ctx)
		return err == nil && len(mf.Segments) >= 4 && mf.EndOffset == tpart.p.log.LogStartOffset()
	})
	mid, last := mf.Segments[1], mf.Segments[len(mf.Segments)-1]
	reps := []tiering.Replacement{{Old: []string{mid.Stem}}, {Old: []string{last.Stem}}}
	if err := b.tier().RunLeased(ctx, tpart.tp.TopicPartition(), tiering.LeaseCompact, func(ctx context.Context, fence tiering.Fence) error {
		return tpart.tp.ReplaceSegments(ctx, reps, mf.EndOffset, fence)
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ at, next int64 }{
		{mid.BaseOffset, mf.Segments[2].BaseOffset}, {mid.EndOffset - 1, mf.Segments[2].BaseOffset},
		{last.BaseOffset, mf.EndOffset}, {last.EndOffset - 1, mf.EndOffset},
	} {
		rp := fetchAt(t, b, topic, c.at)
		if rp.ErrorCode != 0 || firstBatchOffset(t, rp) != c.next || rp.LogStartOffset != 0 {
			t.Fatalf("fetch at %d (in a gap): %v, first batch %d, log start %d; want the batch at %d", c.at,
				kerr.ErrorForCode(rp.ErrorCode), firstBatchOffset(t, rp), rp.LogStartOffset, c.next)
		}
	}
	var want []*kgo.Record
	for _, r := range produced {
		if !(r.Offset >= mid.BaseOffset && r.Offset < mid.EndOffset || r.Offset >= last.BaseOffset && r.Offset < last.EndOffset) {
			want = append(want, r)
		}
	}
	if got := consumeUntil(t, b, topic, produced[len(produced)-1].Offset); digest(got) != digest(want) {
		t.Fatalf("consumed %d records, want %d", len(got), len(want))
	}
}

// TestTieredCompactionDropsTombstonesAtHorizon: a pass over the remote log
// keeps its tombstones until delete.retention.ms (3 s) has passed; the
// remote log is then compacted to its end and nothing new comes, so the
// dirty ratio never asks for another pass. The worker runs one when the
// earliest kept horizon passes, as the local cleaner does, and a replay
// from offset 0 no longer sees the deleted keys. Before, they stayed in the
// bucket until new data made the remote log dirty again.
func TestTieredCompactionDropsTombstonesAtHorizon(t *testing.T) {
	topic := "tiered-tombstones"
	b, cl := tieredCompactedTopic(t, topic, map[string]string{"min.cleanable.dirty.ratio": "0.3", "delete.retention.ms": "3000"})
	produceAll(t, cl, keyedUpdates(topic, 100, 4, "a"))
	var tombstones []*kgo.Record
	for k := range 20 {
		tombstones = append(tombstones, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("key-%04d", k))})
	}
	produceAll(t, cl, tombstones)
	// Later updates of other keys: the tombstones' segments seal and go to
	// the bucket.
	var later []*kgo.Record
	for _, r := range keyedUpdates(topic, 100, 3, "b") {
		if k := string(r.Key); k >= "key-0020" {
			later = append(later, r)
		}
	}
	last := produceAll(t, cl, later)[0]
	end := last[len(last)-1].Offset
	var m *tiering.Manifest
	waitTiered(t, "remote log compacted to its end, past the tombstones", func() bool {
		m = tierManifest(t, b, topic)
		return m != nil && m.EndOffset > end-200 && m.CleanedUpTo == m.EndOffset
	})
	remoteTombstones := func() int {
		n := 0
		for _, r := range consumeUntil(t, b, topic, end) {
			if r.Value == nil && r.Offset < m.EndOffset {
				n++
			}
		}
		return n
	}
	if n := remoteTombstones(); n == 0 {
		t.Logf("the tombstones went in the first passes already (a slow machine): nothing left to check")
	} else {
		t.Logf("%d tombstones in the remote log compacted to its end", n)
	}
	waitTiered(t, "the remote log's tombstones dropped once their horizon passed", func() bool {
		m2 := remotePointer(t, b, topic)
		if m2.EndOffset < m.EndOffset {
			return false
		}
		return remoteTombstones() == 0
	})
	// And no pass is due for ever after (markers and the like do not
	// count: a remote pass keeps them).
	waitTiered(t, "no delete horizon left", func() bool {
		st, _ := b.RemoteCleanStatus(topic, 0)
		return st.NextDeleteHorizon == -1
	})
}

// tieredCompactedTopic starts a tiered broker on a folder bucket whose remote
// compaction runs every 50 ms and creates a one-partition tiered compacted
// topic with small segments and no local retention, configs on top; it
// returns the broker and a client producing small uncompressed batches.
func tieredCompactedTopic(t *testing.T, topic string, configs map[string]string) (*Broker, *kgo.Client) {
	t.Helper()
	dir := t.TempDir()
	store := fsBucket(t, dir)
	t.Cleanup(func() { store.Close() })
	b := startTieredCompactionBroker(t, filepath.Join(dir, "broker"), store, 50*time.Millisecond, time.Minute)
	set := map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"), "remote.storage.enable": ptr("true"),
		"retention.ms": ptr("-1"), "cleanup.policy": ptr("compact"), "min.insync.replicas": ptr("1")}
	for k, v := range configs {
		set[k] = ptr(v)
	}
	createTopic(t, b, topic, 1, set)
	return b, newClient(t, b, kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(4096), kgo.ProducerBatchCompression(kgo.NoCompression()))
}

// tierManifest is partition 0 of topic's committed manifest, or nil while
// it cannot be read.
func tierManifest(t *testing.T, b *Broker, topic string) *tiering.Manifest {
	tp := b.testTierPart(t, topic)
	if tp == nil {
		return nil
	}
	m, err := tp.tp.Manifest(context.Background())
	if err != nil {
		return nil
	}
	return m
}
