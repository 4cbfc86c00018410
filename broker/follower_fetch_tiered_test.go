package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
	"github.com/sediment-io/sediment/tiering"
)

// TestFollowerFetchServesBucketHistory: a rack-aware consumer (KIP-392)
// fetching a tiered partition's history, below the leader's local log
// start, is sent to the in-sync follower in its rack, as Kafka checks the
// replica's log start across both tiers: the follower serves the bucket's
// records too. The leader served them itself, across racks, for every
// replay of history (a replay review).
func TestFollowerFetchServesBucketHistory(t *testing.T) {
	dir := t.TempDir()
	store := fsBucket(t, dir)
	t.Cleanup(func() { store.Close() })
	brokers := startPair(t, func(c *Config) {
		c.Listeners = []Listener{{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext}}
		c.LogFlush = "os"
		c.Rack = fmt.Sprintf("rack-%d", c.NodeID)
		c.Tiering = &TieringConfig{Store: store, SyncInterval: 20 * time.Millisecond, RemoteFetchMaxWait: time.Minute,
			Options: tiering.Options{Interval: 20 * time.Millisecond, ChunkSize: 64 << 10, Logger: testLogger(t),
				BaseBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}}
	})
	const topic = "history"
	cl := newClient(t, brokers[0], kgo.SeedBrokers(brokers[0].Addr(), brokers[1].Addr()), kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(4<<10), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createPairTopic(t, kadm.NewClient(cl), topic, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1")})
	produceAll(t, cl, makeRecords(topic, 2000, "h"))
	st := brokers[0].meta.State()
	tm, _ := st.Topic(topic)
	leaderID := tm.Partitions[0].Leader
	var leader, follower *Broker
	for _, b := range brokers {
		if b.cfg.NodeID == leaderID {
			leader = b
		} else {
			follower = b
		}
	}
	waitTiered(t, "the history only in the bucket", func() bool {
		mp, ok := leader.meta.State().Partition(metadata.UUID(tm.ID), 0)
		return listOffset(t, leader, topic, -4) > 500 && ok && mp.Remote.ManifestVersion > 0 && mp.Remote.StartOffset == 0 &&
			len(mp.ISR) == 2
	})
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.Rack = 12, -1, 0, 1<<20, fmt.Sprintf("rack-%d", follower.cfg.NodeID)
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, [16]byte(tm.ID) // the client sends its newest version
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 0, 10, 1<<20, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl.Broker(int(leader.cfg.NodeID)))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Topics[0].Partitions[0]; got.PreferredReadReplica != follower.cfg.NodeID {
		t.Fatalf("fetch of offset 10 (in the bucket) from rack-%d: preferred read replica %d (error %d, %d bytes), want the follower %d",
			follower.cfg.NodeID, got.PreferredReadReplica, got.ErrorCode, len(got.RecordBatches), follower.cfg.NodeID)
	}
}
