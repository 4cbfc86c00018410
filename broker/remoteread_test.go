package broker

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sediment-io/sediment/objectstore/faulty"
	"github.com/sediment-io/sediment/tiering"
)

// fetchTopics sends one Fetch (v11, topics by name) of partition 0 of each
// topic at its offset, waiting up to maxWait for minBytes, and returns each
// topic's partition answer.
func fetchTopics(t *testing.T, b *Broker, maxWait time.Duration, minBytes int32, offsets map[string]int64) map[string]kmsg.FetchResponseTopicPartition {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.MaxVersions(kversion.V3_0_0()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrFetchRequest()
	req.Version = 11
	req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, int32(maxWait.Milliseconds()), minBytes, 1<<20
	for topic, off := range offsets {
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.LogStartOffset = 0, off, 1<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != 0 {
		t.Fatalf("fetch: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	out := map[string]kmsg.FetchResponseTopicPartition{}
	for _, rt := range resp.Topics {
		out[rt.Topic] = rt.Partitions[0]
	}
	return out
}

// TestRemoteFetchWaitBounded: the bucket hangs on the reads of a partition's
// segments. A Fetch of that cold partition and of a hot one, long-polling
// for a minute, answers after remote-fetch-max-wait with the hot
// partition's records and the cold one without records or error (before,
// the request waited for the read: here for the hour of the remote fetch
// timeout). Later fetches join the read in flight instead of starting more
// downloads. The broker closes with the read still hanging; restarted, with
// the bucket answering, the history reads back whole.
func TestRemoteFetchWaitBounded(t *testing.T) {
	dir := t.TempDir()
	store := faulty.Wrap(fsBucket(t, dir), 1)
	t.Cleanup(func() { store.Close() })
	tcfg := func(c *TieringConfig) {
		c.RemoteFetchMaxWait = 200 * time.Millisecond
		c.RemoteFetchTimeout = time.Hour
	}
	b := startTieredBrokerWith(t, filepath.Join(dir, "broker"), store, tcfg)
	createTopic(t, b, "cold", 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1")})
	createTopic(t, b, "hot", 1, nil)
	cl := smallBatchClient(t, b)
	produced := produceAll(t, cl, makeRecords("cold", 2000, "cold"))[0]
	hot := produceAll(t, cl, makeRecords("hot", 10, "hot"))[0]
	waitTiered(t, "old segments only in the bucket", func() bool { return listOffset(t, b, "cold", -4) > 500 })
	tt, ok := b.meta.State().Topic("cold")
	if !ok {
		t.Fatal("no topic")
	}
	hold := make(chan struct{}) // never closed: the bucket hangs until the broker closes
	store.SetRules(faulty.Rule{Ops: faulty.OpRead, KeyPrefix: tiering.PartitionPrefix(tt.ID, 0) + "s/", Hold: hold})

	got := fetchTopics(t, b, time.Minute, 1, map[string]int64{"cold": 0, "hot": 0})
	if c := got["cold"]; c.ErrorCode != 0 || len(c.RecordBatches) != 0 {
		t.Fatalf("cold partition with the bucket hanging: %v, %d bytes; want no error and no records", kerr.ErrorForCode(c.ErrorCode), len(c.RecordBatches))
	}
	if h := got["hot"]; h.ErrorCode != 0 || firstBatchOffset(t, h) != hot[0].Offset {
		t.Fatalf("hot partition beside the hanging read: %v, first batch %d", kerr.ErrorForCode(h.ErrorCode), firstBatchOffset(t, h))
	}
	held := store.Injected(faulty.OpRead)
	if held == 0 {
		t.Fatal("no read of the bucket held")
	}
	for range 3 {
		c := fetchTopics(t, b, time.Minute, 1, map[string]int64{"cold": 0})["cold"]
		if c.ErrorCode != 0 || len(c.RecordBatches) != 0 {
			t.Fatalf("cold partition alone with the bucket hanging: %v, %d bytes", kerr.ErrorForCode(c.ErrorCode), len(c.RecordBatches))
		}
	}
	if n := store.Injected(faulty.OpRead); n != held {
		t.Fatalf("%d reads of the bucket after three more fetches, %d before: each fetch started its own", n, held)
	}
	if v := testutil.ToFloat64(tierCounterVec(t, b, "remote_fetch_expired")); v < 4 {
		t.Fatalf("remote_fetch_expired %v, want at least 4", v)
	}
	b.Close() // returns with the read still held

	store.SetRules()
	b = startTieredBrokerWith(t, filepath.Join(dir, "broker"), store, tcfg)
	waitTiered(t, "the cold partition's first records from the bucket", func() bool {
		c := fetchTopics(t, b, 0, 0, map[string]int64{"cold": 0})["cold"]
		if c.ErrorCode != 0 {
			t.Fatalf("cold partition once the bucket answers: %v", kerr.ErrorForCode(c.ErrorCode))
		}
		return firstBatchOffset(t, c) == 0
	})
	if got := consumeN(t, b, "cold", len(produced))[0]; digest(got) != digest(produced) {
		t.Fatal("consumed another history")
	}
}
