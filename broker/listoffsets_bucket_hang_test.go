package broker

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/objectstore/faulty"
	"github.com/sediment-io/sediment/tiering"
)

// TestListOffsetsByTimeBucketHangs: ListOffsets by timestamp on a tiered
// partition is bounded by remote-fetch-timeout, as -2 and Fetch are. With
// the manifest cached and the bucket hanging on the segment objects
// (.timeindex), the request was held until the object store gave up (about
// five minutes against a SIGSTOPped MinIO, in a replay review).
func TestListOffsetsByTimeBucketHangs(t *testing.T) {
	dir := t.TempDir()
	store := faulty.Wrap(fsBucket(t, dir), 1)
	t.Cleanup(func() { store.Close() })
	b := startTieredBrokerWith(t, filepath.Join(dir, "broker"), store, func(c *TieringConfig) {
		c.RemoteFetchTimeout = time.Second
	})
	createTopic(t, b, "cold", 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1")})
	cl := smallBatchClient(t, b)
	produceAll(t, cl, makeRecords("cold", 2000, "cold"))
	waitTiered(t, "old segments only in the bucket", func() bool { return listOffset(t, b, "cold", -4) > 500 })
	if got := listOffset(t, b, "cold", -2); got != 0 { // the manifest is now cached
		t.Fatalf("earliest %d", got)
	}
	tt, _ := b.meta.State().Topic("cold")
	hold := make(chan struct{})
	defer close(hold)
	store.SetRules(faulty.Rule{Ops: faulty.OpRead, KeyPrefix: tiering.PartitionPrefix(tt.ID, 0) + "s/", Hold: hold})

	c2, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "cold"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, 1, -1 // every record is at or after 1 ms
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := req.RequestWith(ctx, c2)
	if err != nil {
		t.Fatalf("ListOffsets by timestamp with the bucket hanging: no answer after %v (remote-fetch-timeout 1s): %v", time.Since(start), err)
	}
	p := resp.Topics[0].Partitions[0]
	t.Logf("answered after %v: offset %d, %v", time.Since(start), p.Offset, kerr.ErrorForCode(p.ErrorCode))
	if p.ErrorCode == 0 {
		t.Fatalf("offset %d without error while the bucket hangs", p.Offset)
	}
}
