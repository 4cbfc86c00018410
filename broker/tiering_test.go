package broker

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	waiting "github.com/sediment-io/sediment/internal/testutil"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/miniotest"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/faulty"
	"github.com/sediment-io/sediment/objectstore/fs"
	"github.com/sediment-io/sediment/objectstore/s3"
	"github.com/sediment-io/sediment/tiering"
)

func startTieredBroker(t *testing.T, dir string, store objectstore.Store, mods ...func(*Config)) *Broker {
	t.Helper()
	return startTieredBrokerWith(t, dir, store, nil, mods...)
}

// startTieredBrokerWith is startTieredBroker with tcfg changing the tiering
// config.
func startTieredBrokerWith(t *testing.T, dir string, store objectstore.Store, tcfg func(*TieringConfig), mods ...func(*Config)) *Broker {
	t.Helper()
	b := startBroker(t, dir, append([]func(*Config){func(c *Config) { c.LogFlush = "os" }}, mods...)...)
	cfg := TieringConfig{Store: store, SyncInterval: 20 * time.Millisecond,
		// A Fetch waits for its read from the bucket whatever the
		// machine's load (a test that reads the bucket once expects the
		// records in that answer; TestRemoteFetchWaitBounded tests the
		// bounded wait).
		RemoteFetchMaxWait: time.Minute,
		// A round that fails on a loaded machine (a slow commit) retries
		// within half a second, not after the production backoff of up
		// to a minute.
		Options: tiering.Options{Interval: 20 * time.Millisecond, ChunkSize: 64 << 10, Logger: testLogger(t),
			BaseBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}}
	if tcfg != nil {
		tcfg(&cfg)
	}
	if err := b.EnableTiering(cfg); err != nil {
		t.Fatal(err)
	}
	return b
}

func digest(recs []*kgo.Record) string {
	h := sha256.New()
	for _, r := range recs {
		fmt.Fprintf(h, "%d|%q|%q;", r.Offset, r.Key, r.Value)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestTieredEndToEnd produces with tiny segments and a tiny local retention,
// waits until the old segments live only in the bucket, consumes from 0
// across the tier boundary with franz-go and compares digests; then again
// after a restart with an empty cache. ListOffsets -2/-4/-5 tell the tiers.
func TestTieredEndToEnd(t *testing.T) {
	dir := t.TempDir()
	store := fsBucket(t, dir)
	defer store.Close()
	tieredEndToEnd(t, dir, store)
}

// TestTieredEndToEndMinIO is the same against a real MinIO server.
func TestTieredEndToEndMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	store, err := s3.New(context.Background(), s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: miniotest.Region,
		PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, MaxAttempts: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tieredEndToEnd(t, t.TempDir(), store)
}

func tieredEndToEnd(t *testing.T, dir string, store objectstore.Store) {
	b := startTieredBroker(t, filepath.Join(dir, "broker"), store)
	one := "1"
	segBytes, localBytes, enable := "32768", "0", "true"
	createTopic(t, b, "history", 1, map[string]*string{"segment.bytes": &segBytes, "local.retention.bytes": &localBytes,
		"remote.storage.enable": &enable, "retention.ms": ptr("-1"), "min.insync.replicas": &one})
	cl := smallBatchClient(t, b) // 5000 records, 155 KB, several segments
	const n = 5000
	produced := produceAll(t, cl, makeRecords("history", n, "tiered"))[0]
	if len(produced) != n {
		t.Fatalf("produced %d", len(produced))
	}
	defer func() {
		if t.Failed() { // what the tiering partition last saw (LastError)
			t.Logf("tier status: %+v", b.TierStatus(context.Background(), "history"))
		}
	}()
	waitTiered(t, "old segments only in the bucket", func() bool {
		local := listOffset(t, b, "history", -4)
		tiered := listOffset(t, b, "history", -5)
		return local > 1000 && tiered >= local-1
	})
	if earliest := listOffset(t, b, "history", -2); earliest != 0 {
		t.Fatalf("earliest across tiers %d, want 0", earliest)
	}
	// GET /v1/tier/status agrees with ListOffsets -4 and -5.
	var st TierStatus
	waitTiered(t, "tier status agreeing with ListOffsets -4/-5", func() bool {
		rec := httptest.NewRecorder()
		b.TierStatusHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/tier/status?topic=history", nil))
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &st) != nil || len(st.Partitions) != 1 {
			t.Fatalf("GET /v1/tier/status: %d %s", rec.Code, rec.Body)
		}
		p := st.Partitions[0]
		return st.Tiering && p.Leader && p.RemoteStorageEnable && p.RemoteStartOffset == 0 && p.LocalEndOffset == n &&
			p.LocalStartOffset == listOffset(t, b, "history", -4) && p.RemoteEndOffset-1 == listOffset(t, b, "history", -5) &&
			p.RemoteBytes > 0 && p.LocalBytes > 0 && p.UploadLagOffsets == n-p.RemoteEndOffset
	})
	rec := httptest.NewRecorder()
	b.TierStatusHandler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/tier/status", nil))
	if rec.Code != 405 {
		t.Fatalf("POST /v1/tier/status: %d", rec.Code)
	}
	got := consumeN(t, b, "history", n)[0]
	if digest(got) != digest(produced) {
		t.Fatalf("consumed %d records with another digest", len(got))
	}
	if m := b.TieringManager().Metrics(); m.SegmentsUploaded == 0 || m.BytesServed == 0 || m.LocalSegmentsDeleted == 0 {
		t.Fatalf("the consumer did not read from the bucket: %+v", m)
	}
	// Restart with an empty cache: the same records.
	b.Close()
	b = startTieredBroker(t, filepath.Join(dir, "broker"), store)
	got = consumeN(t, b, "history", n)[0]
	if digest(got) != digest(produced) {
		t.Fatal("after restart: another digest")
	}
	if m := b.TieringManager().Metrics(); m.BytesServed == 0 || m.CacheMisses == 0 {
		t.Fatalf("after restart, nothing read from the bucket: %+v", m)
	}
	if v := testutil.ToFloat64(tierCounterVec(t, b, "bytes_served")); v == 0 {
		t.Fatal("sediment_tier_events_total{kind=bytes_served} is 0")
	}
	// Deleting the topic deletes its objects.
	adm := kadm.NewClient(newClient(t, b))
	if _, err := adm.DeleteTopics(testCtx(t), "history"); err != nil {
		t.Fatal(err)
	}
	waitTiered(t, "the bucket emptied", func() bool {
		l, err := store.List(context.Background(), "", "")
		return err == nil && len(l.Objects) == 0
	})
}

func listOffset(t *testing.T, b *Broker, topic string, ts int64) int64 {
	t.Helper()
	// Closed here, not at cleanup: polls call this thousands of times.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Fatalf("list offsets %d: error %d", ts, p.ErrorCode)
	}
	return p.Offset
}

// tierCounterVec gathers one sediment_tier_events_total series.
func tierCounterVec(t *testing.T, b *Broker, kind string) prometheus.Collector {
	t.Helper()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	mfs, err := b.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sediment_tier_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					c.Add(m.GetCounter().GetValue())
				}
			}
		}
	}
	return c
}

// smallBatchClient is a client to b that produces small uncompressed
// batches at once: a tiered test's records make several segments whatever
// the timing (ProduceSync hands kgo every record at once, and on a loaded
// machine all of them went into one batch, one segment that never sealed)
// and whatever a codec would save.
func smallBatchClient(t *testing.T, b *Broker) *kgo.Client {
	return newClient(t, b, kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(4<<10), kgo.ProducerBatchCompression(kgo.NoCompression()))
}

// startFolderTieredBroker starts a tiering broker under a new temporary
// dir, on a local-folder bucket there (closed at the end of the test); it
// returns the dir so that the test can restart the broker on the same data.
func startFolderTieredBroker(t *testing.T) (*Broker, *fs.Store, string) {
	t.Helper()
	dir := t.TempDir()
	store := fsBucket(t, dir)
	t.Cleanup(func() { store.Close() })
	return startTieredBroker(t, filepath.Join(dir, "broker"), store), store, dir
}

// fsBucket is a local-folder bucket under dir/bucket.
func fsBucket(t *testing.T, dir string) *fs.Store {
	t.Helper()
	store, err := fs.New(filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func waitTiered(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waiting.WaitFor(t, 90*time.Second, what, cond)
}

// TestTieredDeleteRecords: DeleteRecords moves the start of both tiers.
func TestTieredDeleteRecords(t *testing.T) {
	b, _, _ := startFolderTieredBroker(t)
	createTopic(t, b, "cut", 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1")})
	cl := newClient(t, b, kgo.ProducerLinger(0))
	recs := makeRecords("cut", 2000, "cut")
	var produced []*kgo.Record
	for i := 0; i < len(recs); i += 100 { // many batches, many segments
		produced = append(produced, produceAll(t, cl, recs[i:i+100])[0]...)
	}
	waitTiered(t, "data tiered", func() bool { return listOffset(t, b, "cut", -4) > 500 })
	adm := kadm.NewClient(newClient(t, b))
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "cut", Partition: 0, At: 300})
	res, err := adm.DeleteRecords(testCtx(t), offs)
	if err != nil || res.Error() != nil {
		t.Fatalf("delete records: %v %v", err, res.Error())
	}
	if got := listOffset(t, b, "cut", -2); got != 300 {
		t.Fatalf("earliest after DeleteRecords(300): %d", got)
	}
	got := consumeN(t, b, "cut", len(produced)-300)[0]
	if len(got) == 0 || got[0].Offset != 300 || digest(got) != digest(produced[300:]) {
		t.Fatalf("consumed from %d, %d records", got[0].Offset, len(got))
	}
}

// fetchAt fetches partition 0 of topic from offset (read_uncommitted) and
// returns the partition's answer, whatever its error code.
func fetchAt(t *testing.T, b *Broker, topic string, offset int64) kmsg.FetchResponseTopicPartition {
	t.Helper()
	return fetchTopics(t, b, 0, 0, map[string]int64{topic: offset})[topic]
}

// firstBatchOffset is the base offset of the first batch of a fetch answer
// (-1 if it has none).
func firstBatchOffset(t *testing.T, rp kmsg.FetchResponseTopicPartition) int64 {
	t.Helper()
	if len(rp.RecordBatches) == 0 {
		return -1
	}
	hdrs, err := hotlog.ValidateBatches(wholeBatches(rp.RecordBatches))
	if err != nil || len(hdrs) == 0 {
		t.Fatalf("fetched batches: %v", err)
	}
	return hdrs[0].BaseOffset
}

// listOffsetCode is ListOffsets of partition 0 at ts: the offset and the
// error code.
func listOffsetCode(t *testing.T, cl *kgo.Client, topic string, ts int64) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, p.ErrorCode
}

// TestTieredLogStartBucketDown: after a restart the remote log's state is
// not cached, and the bucket (MinIO behind the fault-injecting wrapper)
// refuses to hand out the partition's manifest. ListOffsets -2 and a Fetch
// below the local log start answer KAFKA_STORAGE_ERROR (retriable), not the
// local log start as if the remote history did not exist; a Fetch of local
// data is served with log_start_offset -1 (unknown). Once the bucket
// answers again, -2 is the remote start (0) and the history reads back.
func TestTieredLogStartBucketDown(t *testing.T) {
	mb := startMinIOBucket(t)
	store := faulty.Wrap(mb.store, 1)
	dir := filepath.Join(t.TempDir(), "broker")
	b := startTieredBroker(t, dir, store)
	const topic = "down"
	createTopic(t, b, topic, 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1"), "min.insync.replicas": ptr("1")})
	cl := smallBatchClient(t, b)
	produced := produceAll(t, cl, makeRecords(topic, 2000, "down"))[0]
	waitTiered(t, "old segments only in the bucket", func() bool { return listOffset(t, b, topic, -4) > 500 })
	if got := listOffset(t, b, topic, -2); got != 0 {
		t.Fatalf("earliest %d, want 0", got)
	}
	tt, ok := b.meta.State().Topic(topic)
	if !ok {
		t.Fatal("no topic")
	}
	b.Close()
	// Every read of a manifest of the partition fails from now on.
	store.SetRules(faulty.Rule{Ops: faulty.OpRead, KeyPrefix: tiering.PartitionPrefix(tt.ID, 0) + "m/"})
	var logs waiting.Buffer
	b = startTieredBroker(t, dir, store, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	cl = newClient(t, b)
	var off int64
	var code int16
	waitTiered(t, "ListOffsets -2 answered by the leader", func() bool {
		off, code = listOffsetCode(t, cl, topic, -2)
		return code != kerr.NotLeaderForPartition.Code && code != kerr.UnknownTopicOrPartition.Code && code != kerr.LeaderNotAvailable.Code
	})
	if code != kerr.KafkaStorageError.Code {
		t.Fatalf("ListOffsets -2 with the manifest unreadable: offset %d, error %v; want KAFKA_STORAGE_ERROR", off, kerr.ErrorForCode(code))
	}
	if store.Injected(faulty.OpRead) == 0 {
		t.Fatal("no fault injected")
	}
	for range 3 {
		if rp := fetchAt(t, b, topic, 0); rp.ErrorCode != kerr.KafkaStorageError.Code {
			t.Fatalf("fetch at 0 with the manifest unreadable: %v, log start %d", kerr.ErrorForCode(rp.ErrorCode), rp.LogStartOffset)
		}
	}
	// The failed remote reads are logged, once a minute per partition.
	if n := strings.Count(logs.String(), "tiering: a fetch's read from the bucket failed"); n != 1 {
		t.Fatalf("%d lines for three failed remote reads, want 1:\n%s", n, logs.String())
	}
	local := listOffset(t, b, topic, -4)
	rp := fetchAt(t, b, topic, local)
	if rp.ErrorCode != 0 || rp.LogStartOffset != -1 || firstBatchOffset(t, rp) != local {
		t.Fatalf("fetch at the local start %d: %v, log start %d, first batch %d", local, kerr.ErrorForCode(rp.ErrorCode),
			rp.LogStartOffset, firstBatchOffset(t, rp))
	}
	store.SetRules()
	if got := listOffset(t, b, topic, -2); got != 0 {
		t.Fatalf("earliest %d once the bucket answers, want 0", got)
	}
	if rp := fetchAt(t, b, topic, local); rp.ErrorCode != 0 || rp.LogStartOffset != 0 {
		t.Fatalf("fetch at %d once the bucket answers: %v, log start %d", local, kerr.ErrorForCode(rp.ErrorCode), rp.LogStartOffset)
	}
	got := consumeN(t, b, topic, len(produced))[0]
	if digest(got) != digest(produced) {
		t.Fatal("consumed another history")
	}
}

// TestTieredFetchRacesLocalRetention: a Fetch finds its offset in the local
// log, then local retention (the segment is in the bucket) deletes it
// before the read: the records are read from the bucket, as Kafka reads
// them, not answered OFFSET_OUT_OF_RANGE (which resets a consumer).
func TestTieredFetchRacesLocalRetention(t *testing.T) {
	b, _, _ := startFolderTieredBroker(t)
	const topic = "race"
	createTopic(t, b, topic, 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("-1"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1")})
	cl := newClient(t, b, kgo.ProducerLinger(0))
	recs := makeRecords(topic, 2000, "race")
	var produced []*kgo.Record
	for i := 0; i < len(recs); i += 100 {
		produced = append(produced, produceAll(t, cl, recs[i:i+100])[0]...)
	}
	waitTiered(t, "segments uploaded", func() bool { return listOffset(t, b, topic, -5) > 1000 })
	if local := listOffset(t, b, topic, -4); local != 0 {
		t.Fatalf("local log start %d, want 0 (local.retention.bytes -1)", local)
	}
	p, err := b.store.partition(b.meta.State(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	const at = 500
	var once sync.Once
	b.testHooks.beforeLocalRead = func(hp *partition, off int64) {
		if hp == p && off == at {
			once.Do(func() {
				// What local retention does once the segments are
				// uploaded.
				if err := p.log.DeleteBefore(1000); err != nil {
					t.Error(err)
				}
			})
		}
	}
	rp := fetchAt(t, b, topic, at)
	if rp.ErrorCode != 0 {
		t.Fatalf("fetch at %d racing local retention: %v", at, kerr.ErrorForCode(rp.ErrorCode))
	}
	if got := firstBatchOffset(t, rp); got < 0 || got > at {
		t.Fatalf("fetch at %d: first batch at %d", at, got)
	}
	if p.log.LogStartOffset() <= at {
		t.Fatal("the hook did not run")
	}
	got := consumeN(t, b, topic, len(produced))[0]
	if digest(got) != digest(produced) {
		t.Fatal("consumed another history")
	}
}
