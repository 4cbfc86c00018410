package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/txn"
)

// TestTxnClusterV2 runs transactions on a three-broker cluster whose
// partition leaders are spread over the brokers, so that most partitions
// are led by a broker other than the transaction coordinator: under
// transaction.version 2 each leader adds its partition to the transaction
// with AddPartitionsToTxn v4 to the coordinator's broker, and the
// coordinator writes markers with WriteTxnMarkers to the leaders. Committed
// transactions are visible to read_committed readers, aborted ones not, and
// the producer's epoch grows by one per transaction (EndTxn v5).
func TestTxnClusterV2(t *testing.T) {
	c := StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.Client(t))
	createClusterTopic(t, adm, "ctx", 6, 1, nil)
	parts := c.WaitFullISR(t, adm, "ctx", 30*time.Second)
	leaders := map[int32]bool{}
	for _, p := range parts {
		leaders[p.Leader] = true
	}
	if len(leaders) < 2 {
		t.Fatalf("all partitions led by one broker: %+v", parts)
	}
	cl := c.Client(t, kgo.TransactionalID("cluster-v2"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	var want []string
	var epochs []int16
	for i := 0; i < 8; i++ {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for p := int32(0); p < 6; p++ {
			recs = append(recs, &kgo.Record{Topic: "ctx", Partition: p, Value: []byte(fmt.Sprintf("t%d-p%d", i, p))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("transaction %d: produce: %v", i, err)
		}
		commit := i%3 != 2
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("transaction %d: end: %v", i, err)
		}
		if commit {
			for _, r := range recs {
				want = append(want, string(r.Value))
			}
		}
		_, e, err := cl.ProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		epochs = append(epochs, e)
	}
	// From the second transaction on, franz-go uses KIP-890 part 2.
	for i := 2; i < len(epochs); i++ {
		if epochs[i] != epochs[i-1]+1 {
			t.Fatalf("producer epochs %v: not one bump per transaction", epochs)
		}
	}
	consumer := c.Client(t, kgo.ConsumeTopics("ctx"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	got := map[string]bool{}
	for len(got) < len(want) {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d committed records", len(got), len(want))
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if got[v] {
				t.Fatalf("%s read twice", v)
			}
			got[v] = true
		})
	}
	for v := range got {
		var i int
		fmt.Sscanf(v, "t%d-", &i)
		if i%3 == 2 || !strings.HasPrefix(v, "t") {
			t.Fatalf("read_committed returned %s of an aborted transaction", v)
		}
	}
}

// TestTxnCoordinatorEpochFailover: the coordinator epoch of a producer's
// last marker (DescribeProducers) is kept by followers, so a partition
// leader that took over without a restart answers it; a coordinator that
// took over __transaction_state (a higher epoch) writes its markers
// unfenced; a marker of the coordinator before it is fenced with
// TRANSACTION_COORDINATOR_FENCED.
func TestTxnCoordinatorEpochFailover(t *testing.T) {
	// One __transaction_state partition, replicated on every broker, so
	// stopping its leader moves the coordinator.
	c := StartCluster(t, 3, "--default-replication-factor", "3", "--transaction-state-log-num-partitions", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.Client(t))
	const topic = "cef"
	createClusterTopic(t, adm, topic, 1, 3, nil)
	c.WaitFullISR(t, adm, topic, 30*time.Second)
	cl := c.Client(t, kgo.TransactionalID("cef-id"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	commit := func(v string) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit %s: %v", v, err)
		}
	}
	// coordinator is the leader and leader epoch of __transaction_state-0
	// (-1, -1 if Metadata fails).
	coordinator := func() (int32, int32) {
		md, err := adm.Metadata(ctx, txn.StateTopic)
		if err != nil {
			return -1, -1
		}
		p, ok := md.Topics[txn.StateTopic].Partitions[0]
		if !ok {
			return -1, -1
		}
		return p.Leader, p.LeaderEpoch
	}
	// described waits until the producer of cef-0 has no open transaction
	// and its coordinator epoch satisfies ok.
	described := func(what string, ok func(int32) bool) kadm.DescribedProducer {
		t.Helper()
		var last kadm.DescribedProducer
		waitFor(t, 60*time.Second, what, func() bool {
			ds, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}}})
			if err != nil {
				return false
			}
			dp := ds[topic].Partitions[0]
			if dp.Err != nil || len(dp.ActiveProducers) != 1 {
				return false
			}
			for _, p := range dp.ActiveProducers {
				last = p
			}
			return last.CurrentTxnStartOffset == -1 && ok(last.CoordinatorEpoch)
		})
		return last
	}

	commit("t1")
	c.WaitFullISR(t, adm, txn.StateTopic, 30*time.Second)
	_, epoch1 := coordinator()
	if epoch1 < 0 {
		t.Fatal("no coordinator epoch")
	}
	p1 := described("the first commit's marker", func(e int32) bool { return e == epoch1 })

	// The partition's leader stops: a follower, whose producer state came
	// from replication only, leads and answers the same epoch.
	ps := c.WaitFullISR(t, adm, topic, 30*time.Second)
	old := c.Broker(ps[0].Leader)
	if err := old.Stop(); err != nil {
		t.Fatalf("stop broker %d: %v", old.NodeID, err)
	}
	waitFor(t, 60*time.Second, "a new leader of "+topic, func() bool {
		ps, err := c.Partitions(ctx, adm, topic)
		return err == nil && ps[0].Leader >= 0 && ps[0].Leader != int32(old.NodeID)
	})
	if p := described("the producer on the new leader", func(int32) bool { return true }); p.ProducerID != p1.ProducerID || p.CoordinatorEpoch != p1.CoordinatorEpoch {
		t.Fatalf("new leader describes %+v, want coordinator epoch %d", p, p1.CoordinatorEpoch)
	}
	old.Start()
	c.WaitFullISR(t, adm, topic, 60*time.Second)
	c.WaitFullISR(t, adm, txn.StateTopic, 60*time.Second)

	// The coordinator stops: the next one has a higher epoch, and its
	// markers are written.
	leader, _ := coordinator()
	if leader < 0 {
		t.Fatal("no transaction coordinator")
	}
	co := c.Broker(leader)
	if err := co.Stop(); err != nil {
		t.Fatalf("stop broker %d: %v", co.NodeID, err)
	}
	var epoch2 int32
	waitFor(t, 60*time.Second, "a new transaction coordinator", func() bool {
		l, e := coordinator()
		epoch2 = e
		return l >= 0 && l != int32(co.NodeID)
	})
	if epoch2 <= epoch1 {
		t.Fatalf("coordinator epoch %d after the move, was %d", epoch2, epoch1)
	}
	// The producer's client must know the new coordinator: one it last
	// saw fenced (broker old, restarted above) is an "unknown broker" to
	// franz-go until its next metadata refresh, with Kafka as here.
	waitFor(t, 30*time.Second, "the producer to know the new coordinator", func() bool {
		cl.ForceMetadataRefresh()
		l, _ := coordinator()
		_, err := cl.Broker(int(l)).Request(ctx, kmsg.NewPtrApiVersionsRequest())
		return err == nil // not "unknown broker"
	})
	commit("t2")
	p2 := described("the second commit's marker", func(e int32) bool { return e == epoch2 })

	// A marker of the previous coordinator's epoch is fenced.
	res, err := adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{ProducerID: p2.ProducerID, ProducerEpoch: p2.ProducerEpoch,
		CoordinatorEpoch: epoch2 - 1, Topics: kadm.TopicsSet{topic: {0: {}}}})
	if err != nil {
		t.Fatal(err)
	}
	fenced := false
	for _, r := range res {
		r.Topics.EachPartition(func(p kadm.TxnMarkersPartitionResponse) {
			fenced = errors.Is(p.Err, kerr.TransactionCoordinatorFenced)
		})
	}
	if !fenced {
		t.Fatalf("a marker at coordinator epoch %d after %d was not fenced: %+v", epoch2-1, epoch2, res)
	}
	co.Start()

	consumer := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	var got []string
	for len(got) < 2 {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read_committed read %v", got)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if len(got) != 2 || got[0] != "t1" || got[1] != "t2" {
		t.Fatalf("read_committed read %v, want [t1 t2]", got)
	}
	t.Logf("coordinator epoch %d, after the move %d", epoch1, epoch2)
}
