package broker

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/metadata"
)

// An acks=all wait (or a coordinator's appendInternal) that looks at the
// partition only after the leadership moved must not acknowledge: the high
// watermark it sees then is the new leader's, over a log this broker
// truncated and refilled with the new leader's records, so the offset it
// waits for may hold another batch than the one it appended. Kafka's
// checkEnoughReplicasReachOffset answers NOT_LEADER_OR_FOLLOWER once the
// replica is no longer the leader, whatever the high watermark says.
func TestWaitCommittedAfterLeadershipMovedIsNotAcknowledged(t *testing.T) {
	p := newLeaderPartition(t) // leader in epoch 3, follower 2 in the ISR
	epoch := p.leaderEpoch()
	res, err := p.appendBatch(encodeOffsetsBatch([]group.Record{grec("k", "acked?")}, 1000), 1<<20, epoch, false, false, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if hw := p.log.HighWatermark(); hw != 0 {
		t.Fatalf("high watermark %d before the follower fetched, want 0", hw)
	}
	// Broker 2 takes over in epoch 4 without the batch; this broker
	// follows, cuts its tail and takes broker 2's record at that offset.
	p.applyAssignment(1, &metadata.Partition{Leader: 2, LeaderEpoch: 4, PartitionEpoch: 6,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, 2)
	if err := p.truncateTo(res.baseOffset, 4); err != nil {
		t.Fatal(err)
	}
	other := encodeOffsetsBatch([]group.Record{grec("k", "new leader's")}, 1000)
	putBatchOffsetEpoch(other, res.baseOffset, 4)
	if err := p.appendReplicated(other, 4); err != nil {
		t.Fatal(err)
	}
	p.followerHighWatermark(res.baseOffset+1, 4)
	if hw := p.log.HighWatermark(); hw != res.baseOffset+1 {
		t.Fatalf("follower high watermark %d, want %d", hw, res.baseOffset+1)
	}
	// The producer's wait, woken by the role change, runs only now.
	stopping := make(chan struct{})
	err = p.waitCommitted(res.baseOffset, epoch, time.Now().Add(time.Second), stopping)
	if !errors.Is(err, errNotLeader) {
		t.Fatalf("wait for offset %d appended in epoch %d, after the leadership moved and the offset was replaced: %v, want errNotLeader",
			res.baseOffset, epoch, err)
	}
}

// followerOf is a follower of partition 0 of topic on the real broker lb
// (broker 9, a bare partition outside any broker) and the fetcher that
// replicates it from lb over lb's listener. The follower follows in lb's
// current leader epoch.
type followerOf struct {
	p *partition
	f *fetcher
}

func newFollowerOf(t *testing.T, lb *Broker, topic string) *followerOf {
	t.Helper()
	mp := leaderPartitionState(t, lb, topic)
	p := newBarePartition(t, topic)
	if err := p.loadProducers(); err != nil {
		t.Fatal(err)
	}
	p.topicID = leaderPartitionTopicID(t, lb, topic)
	p.applyAssignment(9, &metadata.Partition{Leader: lb.cfg.NodeID, LeaderEpoch: mp.LeaderEpoch, PartitionEpoch: mp.PartitionEpoch,
		Replicas: []int32{lb.cfg.NodeID, 9}, ISR: []int32{lb.cfg.NodeID, 9}}, 1)
	// The follower's broker (its config, metadata view and quotas, which
	// the fetcher reads) is a broker of its own.
	fb := startBroker(t, "", func(c *Config) { c.NodeID = 9 })
	r := &replicator{s: &store{b: fb}, client: newClient(t, lb)}
	f := &fetcher{r: r, leader: lb.cfg.NodeID}
	f.mu.parts = map[*partition]*fetchState{p: {epoch: mp.LeaderEpoch}}
	return &followerOf{p: p, f: f}
}

// appendOwn appends one record at the follower's log end stamped with
// leader epoch epoch (what it replicated, or wrote as a leader, before).
func (fo *followerOf) appendOwn(t *testing.T, epoch int32) {
	t.Helper()
	b := encodeOffsetsBatch([]group.Record{grec("k", "follower's")}, time.Now().UnixMilli())
	putBatchOffsetEpoch(b, fo.p.log.LogEndOffset(), epoch)
	if err := fo.p.appendReplicated(b, fo.p.leaderEpoch()); err != nil {
		t.Fatal(err)
	}
}

// truncate runs the fetcher's truncation as its loop does (fetcher.run:
// again while the partition is not marked truncated, at most a few rounds).
func (fo *followerOf) truncate(t *testing.T) {
	t.Helper()
	for range 5 {
		if err := fo.f.truncate(testCtx(t), fo.f.snapshot()); err != nil {
			t.Fatal(err)
		}
		if fo.f.snapshot()[fo.p].truncated {
			return
		}
	}
	t.Fatal("the truncation did not complete in 5 rounds")
}

func leaderPartitionState(t *testing.T, b *Broker, topic string) *metadata.Partition {
	t.Helper()
	mt, ok := b.meta.State().Topic(topic)
	if !ok {
		t.Fatalf("no topic %s", topic)
	}
	return mt.Partitions[0]
}

func leaderPartitionTopicID(t *testing.T, b *Broker, topic string) metadata.UUID {
	t.Helper()
	mt, ok := b.meta.State().Topic(topic)
	if !ok {
		t.Fatalf("no topic %s", topic)
	}
	return mt.ID
}

// bumpLeaderEpoch moves partition 0 of topic on b (its only replica) to no
// leader and back, two leader epochs on, and waits until b leads in the
// new epoch. It returns the new epoch.
func bumpLeaderEpoch(t *testing.T, b *Broker, topic string) int32 {
	t.Helper()
	self := b.cfg.NodeID
	id := leaderPartitionTopicID(t, b, topic)
	mp := leaderPartitionState(t, b, topic)
	res := mustPropose(t, b, &metadata.ChangeLeaderAndISR{TopicID: id, LeaderEpoch: mp.LeaderEpoch, PartitionEpoch: mp.PartitionEpoch,
		Leader: metadata.NoLeader, ISR: []int32{self}})
	res = mustPropose(t, b, &metadata.ChangeLeaderAndISR{TopicID: id, LeaderEpoch: res.LeaderEpoch, PartitionEpoch: res.PartitionEpoch,
		Leader: self, ISR: []int32{self}})
	testutil.WaitFor(t, 10*time.Second, "the broker leading in the new epoch", func() bool {
		p, err := b.store.partition(b.meta.State(), topic, 0)
		return err == nil && p.isLeader(res.LeaderEpoch)
	})
	return res.LeaderEpoch
}

// produceP0 produces one record (one batch) to partition 0 of topic.
func produceP0(t *testing.T, cl *kgo.Client, topic string) {
	t.Helper()
	if err := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: topic, Partition: 0, Value: []byte("leader's")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// KIP-279: a follower whose own end for the epoch the leader answered with
// belongs to an older epoch (it never had the leader's) truncates there and
// asks again with that older epoch; only an answer in an epoch it has ends
// the truncation. Ending after the first round left a tail of an epoch the
// leader wrote other records under, for good.
func TestFollowerTruncationAsksAgainForAnEpochItLacks(t *testing.T) {
	lb := startBroker(t, "", func(c *Config) { c.NodeID = 1 })
	cl := newClient(t, lb, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const topic = "kip279"
	createTopic(t, lb, topic, 1, nil)
	e0 := leaderPartitionState(t, lb, topic).LeaderEpoch
	// The leader: e0 [0, 2), e0+2 [2, 4), e0+4 [4, 5).
	produceP0(t, cl, topic)
	produceP0(t, cl, topic)
	e2 := bumpLeaderEpoch(t, lb, topic)
	produceP0(t, cl, topic)
	produceP0(t, cl, topic)
	e4 := bumpLeaderEpoch(t, lb, topic)
	produceP0(t, cl, topic)
	if e2 != e0+2 || e4 != e0+4 {
		t.Fatalf("epochs %d, %d, %d", e0, e2, e4)
	}
	// The follower: e0 [0, 3) (offset 2 written by the leader of e0, which
	// the leader of e0+2 never had), then e0+3 [3, 4) (it led in e0+3).
	fo := newFollowerOf(t, lb, topic)
	fo.appendOwn(t, e0)
	fo.appendOwn(t, e0)
	fo.appendOwn(t, e0)
	fo.appendOwn(t, e0+3)
	// Round 1: it asks for e0+3; the leader answers e0+2 ending at 4;
	// the follower's e0+2 is its e0, ending at 3: cut to 3. Round 2: it
	// asks for e0; the leader's ends at 2: cut to 2.
	fo.truncate(t)
	if end := fo.p.log.LogEndOffset(); end != 2 {
		t.Fatalf("follower's log end %d after the truncation, want 2 (offset 2 is e0 here, e0+2 on the leader)", end)
	}
}

// A leader answers OffsetForLeaderEpoch as if its own epoch began in its
// log when it took over, as Kafka's leader records it in its epoch cache on
// becoming leader, before it writes in it. Asked by a follower for an
// epoch past the last one in its log (the follower led in between and
// wrote records this leader never had), it answered UNDEFINED until it
// wrote in its epoch, and the follower then cut its log to its high
// watermark, which may lag what the ISR committed: committed records gone
// from an ISR member (KIP-101's loss, were it elected before it fetched
// them back).
func TestLeaderAnswersEpochsBeforeItsOwnUnwritten(t *testing.T) {
	lb := startBroker(t, "", func(c *Config) { c.NodeID = 1 })
	cl := newClient(t, lb, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const topic = "unwritten"
	createTopic(t, lb, topic, 1, nil)
	e0 := leaderPartitionState(t, lb, topic).LeaderEpoch
	for range 3 {
		produceP0(t, cl, topic)
	}
	e2 := bumpLeaderEpoch(t, lb, topic) // nothing written in it yet
	// The follower replicated [0, 3) of e0 but learnt a high watermark of
	// 1 only; it led in e0+1 and wrote offset 3, which nobody else has.
	fo := newFollowerOf(t, lb, topic)
	for range 3 {
		fo.appendOwn(t, e0)
	}
	fo.p.followerHighWatermark(1, e2)
	fo.appendOwn(t, e0+1)
	fo.truncate(t)
	if end := fo.p.log.LogEndOffset(); end != 3 {
		t.Fatalf("follower's log end %d after the truncation, want 3 (only its e%d record diverges)", end, e0+1)
	}

	// The answer itself, to a follower and to a consumer.
	for _, replica := range []int32{9, -1} {
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.ReplicaID = replica
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.CurrentLeaderEpoch, rp.LeaderEpoch = e2, e0+1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(testCtx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		got := resp.Topics[0].Partitions[0]
		if got.ErrorCode != 0 || got.LeaderEpoch != e0 || got.EndOffset != 3 {
			t.Errorf("replica %d: epoch %d asked of the leader of %d whose log ends in %d at 3: error %d, epoch %d, end %d; want epoch %d, end 3",
				replica, e0+1, e2, e0, got.ErrorCode, got.LeaderEpoch, got.EndOffset, e0)
		}
	}
}

// A follower that starts over at the leader's log start (it was behind it)
// where DeleteRecords cut inside a batch gets that whole batch, which begins
// below its (empty) log's end. As Kafka's follower does
// (Partition.appendRecordsToFollowerOrFutureReplica), it restarts its empty
// log at the batch's base and appends it; refusing it (unexpected offset)
// and truncating again, which changed nothing, it fetched the same batch
// for ever and never caught up (a replica added by a reassignment, say).
func TestFollowerStartsAtLeaderLogStartInsideABatch(t *testing.T) {
	lb := startBroker(t, "", func(c *Config) { c.NodeID = 1 })
	cl := newClient(t, lb, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const topic = "midbatch"
	createTopic(t, lb, topic, 1, nil)
	recs := make([]*kgo.Record, 5)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: 0, Value: []byte("v")}
	}
	// One batch, offsets [0, 5).
	var wg sync.WaitGroup
	wg.Add(len(recs))
	var produceErr error
	var mu sync.Mutex
	for _, r := range recs {
		cl.Produce(testCtx(t), r, func(_ *kgo.Record, err error) {
			mu.Lock()
			produceErr = keepFirst(produceErr, err)
			mu.Unlock()
			wg.Done()
		})
	}
	wg.Wait()
	if produceErr != nil {
		t.Fatal(produceErr)
	}
	p, err := lb.store.partition(lb.meta.State(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if end := p.log.LogEndOffset(); end != 5 {
		t.Fatalf("leader's log end %d, want 5", end)
	}
	if r, err := p.log.Read(2, 1<<20, 5); err != nil || r.FirstOffset != 0 {
		t.Fatalf("the records are not one batch (read at 2 starts at %d, %v)", r.FirstOffset, err)
	} else {
		r.Release()
	}
	del, err := kadm.NewClient(cl).DeleteRecords(testCtx(t), kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 2}}})
	if err != nil || del.Error() != nil {
		t.Fatalf("delete records before 2: %v %v", err, del.Error())
	}
	// Broker 9 becomes a replica (a reassignment adds it); it starts
	// with an empty log.
	mustPropose(t, lb, &metadata.RegisterBroker{BrokerID: 9, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1,
		Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 1}}})
	mustPropose(t, lb, &metadata.AlterReassignment{TopicID: leaderPartitionTopicID(t, lb, topic), Target: []int32{1, 9}})
	testutil.WaitFor(t, 10*time.Second, "broker 9 a follower on the leader", func() bool { return p.hasFollower(9) })

	fo := newFollowerOf(t, lb, topic)
	for range 6 {
		parts := fo.f.snapshot()
		if err := fo.f.truncate(testCtx(t), parts); err != nil {
			t.Fatal(err)
		}
		_ = fo.f.fetch(testCtx(t), fo.f.snapshot())
		if fo.p.log.LogEndOffset() == 5 {
			break
		}
	}
	if start, end := fo.p.log.LogStartOffset(), fo.p.log.LogEndOffset(); start != 2 || end != 5 {
		t.Fatalf("follower's log [%d, %d) after fetching from a leader whose log is [2, 5), want [2, 5)", start, end)
	}
}

// uncommittedOnLeader starts a broker that leads topic's one partition with
// a registered but silent follower (other) in the ISR, and produces one
// record with acks=1: in the leader's log, not committed (the follower
// never fetches). otherEpoch is the follower's broker epoch.
func uncommittedOnLeader(t *testing.T, topic string) (b *Broker, self, other int32, otherEpoch int64, p *partition) {
	t.Helper()
	b = startBroker(t, "")
	waitUnfenced(t, b)
	self, other = b.cfg.NodeID, b.cfg.NodeID+1
	reg := mustPropose(t, b, &metadata.RegisterBroker{BrokerID: other, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1,
		Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 1}}})
	mustPropose(t, b, &metadata.BrokerHeartbeat{BrokerID: other, BrokerEpoch: reg.BrokerEpoch})
	mustPropose(t, b, &metadata.CreateTopic{Name: topic, Assignment: [][]int32{{self, other}}})
	mp := leaderPartitionState(t, b, topic)
	if mp.Leader != self || len(mp.ISR) != 2 {
		t.Fatalf("leader %d ISR %v, want %d and both", mp.Leader, mp.ISR, self)
	}
	cl := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	produceP0(t, cl, topic)
	p, err := b.store.partition(b.meta.State(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b, self, other, reg.BrokerEpoch, p
}

// A replica fetch (replica id set: read to the log end, past the high
// watermark) from a broker that is not a follower of the partition is
// refused, as Kafka's followerReplicaOrThrow does (UNKNOWN_LEADER_EPOCH
// with a leader epoch in the request, NOT_LEADER_OR_FOLLOWER without): it
// read records no in-sync replica had yet, which a leader change may take
// back.
func TestReplicaFetchFromANonReplicaIsRefused(t *testing.T) {
	const topic = "nonreplica"
	b, self, other, _, p := uncommittedOnLeader(t, topic)
	leaderEpoch := p.leaderEpoch()
	if end, hw := p.log.LogEndOffset(), p.log.HighWatermark(); end != 1 || hw != 0 {
		t.Fatalf("log end %d, high watermark %d; want 1, 0", end, hw)
	}
	fetch := func(replica int32, version int16, epoch int32) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version = version
		req.ReplicaID = replica
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 0, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 0, 0, 1<<20, epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		nc := dial(t, b)
		defer nc.Close()
		return rawRequest(t, nc, req, 1).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	for _, tc := range []struct {
		replica int32
		version int16
		epoch   int32
		want    int16
	}{
		{42, 11, leaderEpoch, kerr.UnknownLeaderEpoch.Code},
		{42, 8, -1, kerr.NotLeaderForPartition.Code},
		{self, 11, leaderEpoch, kerr.UnknownLeaderEpoch.Code},
	} {
		got := fetch(tc.replica, tc.version, tc.epoch)
		if got.ErrorCode != tc.want || len(got.RecordBatches) != 0 {
			t.Errorf("replica fetch v%d from broker %d, not a follower: error %v, %d bytes of records; want %v and none",
				tc.version, tc.replica, kerr.ErrorForCode(got.ErrorCode), len(got.RecordBatches), kerr.ErrorForCode(tc.want))
		}
	}
	// The follower itself still reads to the log end.
	if got := fetch(other, 11, leaderEpoch); got.ErrorCode != 0 || len(got.RecordBatches) == 0 {
		t.Errorf("replica fetch from follower %d: error %v, %d bytes of records; want the uncommitted record",
			other, kerr.ErrorForCode(got.ErrorCode), len(got.RecordBatches))
	}
}

// A follower's fetch offset counts (its log end for the high watermark, its
// catching up for the ISR) only once the leader has read at it, as Kafka's
// Partition.fetchRecords updates the follower's fetch state after the read:
// a fetch past the leader's log end (a divergent follower, a bad request)
// answers OFFSET_OUT_OF_RANGE and is not recorded. It was recorded before
// the read, so such a fetch moved the high watermark (capped at the
// leader's end) over records the follower may not have.
func TestFollowerFetchPastLogEndIsNotRecorded(t *testing.T) {
	const topic = "pastend"
	b, _, other, otherEpoch, p := uncommittedOnLeader(t, topic)
	leaderEpoch := p.leaderEpoch()
	// The leader's own durable end reaches 1, so only the follower's end
	// holds the high watermark back.
	testutil.WaitFor(t, 10*time.Second, "the leader's record durable", func() bool { return p.repl.durableEnd.Load() == 1 })
	fetch := func(offset int64) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version = 15
		req.ReplicaID = -1
		req.ReplicaState.ID, req.ReplicaState.Epoch = other, otherEpoch
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 0, 1<<20
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.TopicID = leaderPartitionTopicID(t, b, topic)
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 0, offset, 1<<20, leaderEpoch
		rp.LastFetchedEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		nc := dial(t, b)
		defer nc.Close()
		return rawRequest(t, nc, req, 1).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	tr := func() int64 {
		p.repl.mu.Lock()
		defer p.repl.mu.Unlock()
		return p.repl.mu.tracker.FollowerEnd(other)
	}

	got := fetch(5) // the leader's log ends at 1
	if got.ErrorCode != kerr.OffsetOutOfRange.Code || len(got.RecordBatches) != 0 {
		t.Errorf("follower fetch at 5 past the leader's log end 1: error %v, %d bytes of records; want OFFSET_OUT_OF_RANGE and none",
			kerr.ErrorForCode(got.ErrorCode), len(got.RecordBatches))
	}
	if end, hw := tr(), p.log.HighWatermark(); end != -1 || hw != 0 {
		t.Fatalf("after an out-of-range follower fetch at 5: follower's end %d, high watermark %d; want -1 (unknown) and 0", end, hw)
	}

	// A fetch the leader serves counts: at 0 the follower lacks offset
	// 0, at 1 it has it and the high watermark passes it.
	if got := fetch(0); got.ErrorCode != 0 || len(got.RecordBatches) == 0 {
		t.Fatalf("follower fetch at 0: error %v, %d bytes; want the record", kerr.ErrorForCode(got.ErrorCode), len(got.RecordBatches))
	}
	if end, hw := tr(), p.log.HighWatermark(); end != 0 || hw != 0 {
		t.Fatalf("after a follower fetch at 0: follower's end %d, high watermark %d; want 0, 0", end, hw)
	}
	if got := fetch(1); got.ErrorCode != 0 || got.HighWatermark != 1 {
		t.Fatalf("follower fetch at 1: error %v, high watermark %d in the answer; want none, 1", kerr.ErrorForCode(got.ErrorCode), got.HighWatermark)
	}
	if end, hw := tr(), p.log.HighWatermark(); end != 1 || hw != 1 {
		t.Fatalf("after a follower fetch at 1: follower's end %d, high watermark %d; want 1, 1", end, hw)
	}
}
