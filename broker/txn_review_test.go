package broker

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sediment-io/sediment/broker/txn"
	"github.com/sediment-io/sediment/metadata"
)

// waitTxnState polls the coordinator until id is in state (on a handler's
// goroutine: t.Errorf, not t.Fatal).
func waitTxnState(t *testing.T, b *Broker, id, state string) bool {
	ctx := testCtx(t)
	tick := time.NewTicker(5 * time.Millisecond) // polling a condition
	defer tick.Stop()
	for {
		s, err := b.txns.c.Describe(ctx, []string{id})
		if err == nil && len(s) == 1 && s[0].State == state {
			return true
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Errorf("transaction %q never reached %s: %v", id, state, ctx.Err())
			return false
		}
	}
}

// TestTxnVerifiedWriteAfterAbort: a transactional batch verified at the
// coordinator (KIP-890 part 1) whose transaction is ended, markers and all,
// before the batch reaches the log (a produce the client gave up on, then
// aborted: KAFKA-17754's shape) is refused with INVALID_TXN_STATE, as by
// Kafka's verification guard, instead of opening a transaction in the
// partition that no marker will ever end (the last stable offset stuck
// below it for good: the coordinator has nothing open to time out).
func TestTxnVerifiedWriteAfterAbort(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "guard", 1, nil)
	ctx := testCtx(t)
	const id = "guard"
	raw, pid, epoch := classicTxnOn(t, b, id, "guard")
	var once sync.Once
	b.testHooks.txnWriteVerified = func() {
		once.Do(func() {
			end := kmsg.NewPtrEndTxnRequest()
			end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, pid, epoch, false
			if er, err := end.RequestWith(ctx, raw); err != nil || er.ErrorCode != 0 {
				t.Errorf("EndTxn: %v %+v", err, er)
				return
			}
			waitTxnState(t, b, id, "CompleteAbort")
		})
	}
	req := kmsg.NewPtrProduceRequest()
	txnID := id
	req.TransactionID, req.Acks, req.TimeoutMillis = &txnID, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "guard"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, txnBatch(pid, epoch, 0, "late")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidTxnState.Code {
		t.Errorf("write after its transaction ended: %v, want INVALID_TXN_STATE", kerr.ErrorForCode(code))
	}
	if fp := rawFetch(t, b, "guard", 1); fp.LastStableOffset != fp.HighWatermark {
		t.Fatalf("LSO %d stuck below the high watermark %d", fp.LastStableOffset, fp.HighWatermark)
	}
}

// TestTxnBackToBackV2: transactions one right after another under
// transaction.version 2 (EndTxn answered before its markers are written;
// the next transaction's first write adds its partition at the
// coordinator, which waits for them): none is refused.
func TestTxnBackToBackV2(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "b2b", 2, nil)
	cl := txnClient(t, b, "b2b")
	var want []string
	for i := range 30 {
		v := values(fmt.Sprint(i), 2)
		produceTxn(t, cl, "b2b", int32(i%2), true, v...)
		want = append(want, v...)
	}
	if got := readValues(t, b, "b2b", len(want), true); len(got) != len(want) {
		t.Fatalf("read_committed got %d records, want %d", len(got), len(want))
	}
}

// TestInitProducerIDHalfPair: InitProducerId v3+ with a producer id but no
// epoch (or the reverse) is INVALID_REQUEST, as Kafka answers; it must not
// hand the id's current epoch to whoever names the producer id (which the
// coordinator took for a retry of the last bump, epoch -1).
func TestInitProducerIDHalfPair(t *testing.T) {
	b := txnTestBroker(t, "")
	ctx := testCtx(t)
	const id = "half"
	owner := txnClient(t, b, id)
	pid, epoch, err := owner.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw := newClient(t, b)
	for _, c := range []struct {
		pid   int64
		epoch int16
	}{{pid, -1}, {-1, epoch}} {
		req := kmsg.NewPtrInitProducerIDRequest()
		txnID := id
		req.TransactionalID, req.TransactionTimeoutMillis = &txnID, 60000
		req.ProducerID, req.ProducerEpoch = c.pid, c.epoch
		resp, err := req.RequestWith(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode != kerr.InvalidRequest.Code {
			t.Errorf("InitProducerId(producer %d, epoch %d): %v, producer %d epoch %d; want INVALID_REQUEST", c.pid, c.epoch, kerr.ErrorForCode(resp.ErrorCode), resp.ProducerID, resp.ProducerEpoch)
		}
	}
}

// TestTxnOffsetCommitUnverifiedRefused: a TxnOffsetCommit whose producer
// the transactional id's coordinator cannot vouch for now (here: there is
// no __transaction_state yet, so no coordinator) is answered
// COORDINATOR_NOT_AVAILABLE, which clients retry, as Kafka 3.6+ answers,
// instead of being written unverified: a transactional batch of a
// producer with no transaction open (a delayed request, a bogus producer)
// stays open in __consumer_offsets for good (no marker will come), and
// RequireStable readers of the group get UNSTABLE_OFFSET_COMMIT for ever.
func TestTxnOffsetCommitUnverifiedRefused(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "src", 1, nil)
	// TxnOffsetCommit v3; its retriable answer is not retried for long.
	cl := newClient(t, b, kgo.MaxVersions(kversion.V3_0_0()), kgo.RetryTimeout(time.Second))
	if off, code := fetchOffset(t, cl, "g", false); code != 0 || off != -1 { // the group's coordinator is up
		t.Fatalf("OffsetFetch: offset %d, %v", off, kerr.ErrorForCode(code))
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch, req.Generation = "nobody", "g", 999, 9, -1
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = "src"
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = 0, 5, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("unverified TxnOffsetCommit: %v, want COORDINATOR_NOT_AVAILABLE", kerr.ErrorForCode(code))
	}
	if off, code := fetchOffset(t, cl, "g", true); code != 0 || off != -1 {
		t.Fatalf("RequireStable OffsetFetch: offset %d, %v; want -1, none", off, kerr.ErrorForCode(code))
	}
}

// TestProduceTransactionalWithoutID: transactional records in a Produce
// without a transactional id are refused, TRANSACTIONAL_ID_AUTHORIZATION_FAILED
// for every partition, as Kafka's KafkaApis answers them. They were
// appended: a transaction open in the partition that no coordinator knows,
// so no marker ends it and the last stable offset stays below it for good.
func TestProduceTransactionalWithoutID(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "noid", 1, nil)
	raw := newClient(t, b)
	ctx := testCtx(t)
	init := kmsg.NewPtrInitProducerIDRequest()
	ir, err := init.RequestWith(ctx, raw)
	if err != nil || ir.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v %+v", err, ir)
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	tp, _ := b.meta.State().Topic("noid")
	rt.Topic, rt.TopicID = "noid", tp.ID // v13+ names it by id
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, txnBatch(ir.ProducerID, ir.ProducerEpoch, 0, "orphan")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Errorf("transactional batch without a transactional id: %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", kerr.ErrorForCode(code))
	}
	if fp := rawFetch(t, b, "noid", 1); fp.HighWatermark != 0 || fp.LastStableOffset != fp.HighWatermark {
		t.Fatalf("high watermark %d, LSO %d: the batch was appended", fp.HighWatermark, fp.LastStableOffset)
	}
}

// TestTxnOffsetCommitVerifiedAfterEnd: a TxnOffsetCommit verified at the
// transaction coordinator (KIP-890 part 1 before v5, the implicit add of
// part 2 at v5) whose transaction is ended, markers and all, before its
// batch reaches __consumer_offsets (the hook runs after the offsets were
// registered for the marker, just before the append) is refused with
// INVALID_TXN_STATE, as Kafka's group coordinator answers the append's
// verification-guard failure, instead of opening a transaction in the
// offsets partition that no marker will end: its last stable offset would
// stay below the high watermark for good (compaction stops there) and the
// offsets pending for RequireStable readers. Nor does the marker that came
// first apply the offsets of a batch that never reached the log.
func TestTxnOffsetCommitVerifiedAfterEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v5     bool // TxnOffsetCommit v5 (implicit add), else v3 after AddOffsetsToTxn
		commit bool // the hook's EndTxn (v3 / v4: no epoch bump)
		tv2    bool // EndTxn v5 instead: its markers fence the epoch
		want   int16
	}{
		{"v3 abort", false, false, false, kerr.InvalidTxnState.Code},
		{"v3 commit", false, true, false, kerr.InvalidTxnState.Code},
		{"v5 abort", true, false, false, kerr.InvalidTxnState.Code},
		{"v5 commit", true, true, false, kerr.InvalidTxnState.Code},
		{"v5 commit EndTxn v5", true, true, true, kerr.ProducerFenced.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := txnTestBroker(t, "")
			createTopic(t, b, "src", 1, nil)
			ctx := testCtx(t)
			const id = "offsets-guard"
			owner := txnClient(t, b, id)
			pid, epoch, err := owner.ProducerID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			classic := newClient(t, b, kgo.MaxVersions(kversion.V3_0_0())) // TxnOffsetCommit v3, EndTxn v3
			if !tc.v5 {
				add := kmsg.NewPtrAddOffsetsToTxnRequest()
				add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = id, pid, epoch, "g"
				if r, err := add.RequestWith(ctx, classic); err != nil || r.ErrorCode != 0 {
					t.Fatalf("AddOffsetsToTxn: %v %+v", err, r)
				}
			}
			// Its own connection: a broker answers one connection's
			// requests in order, and the TxnOffsetCommit waits in the hook.
			ender := newClient(t, b, kgo.MaxVersions(kversion.V3_0_0()))
			if tc.tv2 {
				ender = newClient(t, b)
			}
			var once sync.Once
			b.testHooks.txnOffsetsVerified = func() {
				once.Do(func() {
					end := kmsg.NewPtrEndTxnRequest()
					end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, pid, epoch, tc.commit
					if er, err := end.RequestWith(ctx, ender); err != nil || er.ErrorCode != 0 {
						t.Errorf("EndTxn: %v %+v", err, er)
						return
					}
					state := "CompleteAbort"
					if tc.commit {
						state = "CompleteCommit"
					}
					waitTxnState(t, b, id, state)
				})
			}
			cl := classic
			if tc.v5 {
				cl = newClient(t, b) // TxnOffsetCommit v5
			}
			req := kmsg.NewPtrTxnOffsetCommitRequest()
			req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch, req.Generation = id, "g", pid, epoch, -1
			rt := kmsg.NewTxnOffsetCommitRequestTopic()
			rt.Topic = "src"
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = 0, 99, -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				t.Fatal(err)
			}
			if wantV := map[bool]int16{false: 3, true: 5}[tc.v5]; resp.Version != wantV {
				t.Fatalf("TxnOffsetCommit v%d, want v%d", resp.Version, wantV)
			}
			if code := resp.Topics[0].Partitions[0].ErrorCode; code != tc.want {
				t.Errorf("TxnOffsetCommit after its transaction ended: %v, want %v", kerr.ErrorForCode(code), kerr.ErrorForCode(tc.want))
			}
			part := b.groups.partitionFor("g")
			p, err := b.store.partition(b.meta.State(), offsetsTopic, part)
			if err != nil {
				t.Fatal(err)
			}
			if lso, hw := p.lastStableOffset(), p.log.HighWatermark(); lso != hw {
				t.Errorf("__consumer_offsets-%d: LSO %d stuck below the high watermark %d", part, lso, hw)
			}
			b.txns.mu.Lock()
			left := len(b.txns.mu.offsets[part][pid])
			b.txns.mu.Unlock()
			if left != 0 {
				t.Errorf("%d batches of offsets kept for producer %d's next marker", left, pid)
			}
			if off, code := fetchOffset(t, newClient(t, b), "g", true); code != 0 || off != -1 {
				t.Errorf("RequireStable OffsetFetch: offset %d, %v; want -1, none", off, kerr.ErrorForCode(code))
			}
		})
	}
}

// TestTxnStatePartitionCountOfExistingTopic: a transactional id maps to its
// __transaction_state partition by the existing topic's partition count, as
// Kafka's TransactionStateManager does, not by
// transaction.state.log.num.partitions: a broker restarted with another
// setting looked for the id in another partition and handed its producer a
// new producer id at epoch 0, unfencing the old producer.
func TestTxnStatePartitionCountOfExistingTopic(t *testing.T) {
	dir := t.TempDir()
	withPartitions := func(n int32) func(*Config) {
		return func(c *Config) { c.Transactions = txn.Config{Partitions: n, AbortInterval: 100 * time.Millisecond} }
	}
	id := ""
	for i := 0; id == ""; i++ {
		if s := fmt.Sprintf("moved-%d", i); txn.PartitionFor(s, 8) >= 4 {
			id = s
		}
	}
	initID := func(b *Broker) (int64, int16) {
		t.Helper()
		cl := newClient(t, b, kgo.RequestRetries(50))
		var resp *kmsg.InitProducerIDResponse
		waitCond(t, func() bool {
			req := kmsg.NewPtrInitProducerIDRequest()
			req.TransactionalID, req.TransactionTimeoutMillis = kmsg.StringPtr(id), 60000
			var err error
			resp, err = req.RequestWith(testCtx(t), cl)
			return err == nil && resp.ErrorCode == 0
		})
		return resp.ProducerID, resp.ProducerEpoch
	}
	b := startBroker(t, dir, withPartitions(4))
	pid, epoch := initID(b)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, withPartitions(8))
	pid2, epoch2 := initID(b2)
	if pid2 != pid || epoch2 != epoch+1 {
		t.Fatalf("after a restart with another transaction.state.log.num.partitions: producer %d epoch %d, want %d epoch %d", pid2, epoch2, pid, epoch+1)
	}
}

// TestWriteMarkersWaitsBesideALeaderlessPartition: a marker round over a
// partition without a leader fails (the coordinator retries it), but only
// after the markers of the partitions it could write are written: it used
// to return at the leaderless partition, never starting the writes after it
// and leaving those before it running beside the retried round.
func TestWriteMarkersWaitsBesideALeaderlessPartition(t *testing.T) {
	b := startBroker(t, "")
	self := b.cfg.NodeID
	waitUnfenced(t, b)
	other := self + 1
	reg := mustPropose(t, b, &metadata.RegisterBroker{BrokerID: other, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1,
		Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 1}}})
	mustPropose(t, b, &metadata.BrokerHeartbeat{BrokerID: other, BrokerEpoch: reg.BrokerEpoch})
	mustPropose(t, b, &metadata.CreateTopic{Name: "marked-none", Assignment: [][]int32{{other}}})
	mustPropose(t, b, &metadata.FenceBroker{BrokerID: other, BrokerEpoch: -1})
	createTopic(t, b, "marked-here", 1, nil)
	if p, _ := b.meta.State().Topic("marked-none"); p.Partitions[0].Leader != metadata.NoLeader {
		t.Fatalf("marked-none led by %d", p.Partitions[0].Leader)
	}
	p, err := b.store.partition(b.meta.State(), "marked-here", 0)
	if err != nil {
		t.Fatal(err)
	}
	before := p.log.LogEndOffset()
	err = txnBroker{b}.WriteMarkers(testCtx(t), txn.Marker{ProducerID: 7, ProducerEpoch: 0, Commit: false, CoordinatorEpoch: 0,
		Partitions: []txn.TopicPartition{{Topic: "marked-none", Partition: 0}, {Topic: "marked-here", Partition: 0}}})
	if err == nil {
		t.Fatal("a round with a leaderless partition succeeded")
	}
	if after := p.log.LogEndOffset(); after != before+1 {
		t.Fatalf("when the round returned (%v), marked-here's log end was %d, want the marker at %d", err, after, before)
	}
}

// TestProduceNonTransactionalInOpenTxn: a non-transactional batch from a
// producer id with a transaction open in the partition is refused with
// INVALID_TXN_STATE, as Kafka's ProducerAppendInfo ("Expected
// transactional write from producer"), and not appended; the transaction
// goes on and commits.
func TestProduceNonTransactionalInOpenTxn(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "mixed", 1, nil)
	ctx := testCtx(t)
	const id = "mixed"
	raw, pid, epoch := classicTxnOn(t, b, id, "mixed")
	produce := func(txnID *string, batch []byte) int16 {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.TransactionID, req.Acks, req.TimeoutMillis = txnID, -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "mixed"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = 0, batch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	txnID := id
	if code := produce(&txnID, txnBatch(pid, epoch, 0, "in")); code != 0 {
		t.Fatalf("transactional write: %v", kerr.ErrorForCode(code))
	}
	// The same producer, next sequence, without the transactional bit (and
	// without the transactional id, as a plain idempotent producer sends).
	if code := produce(nil, buildBatch(pid, epoch, 1, 1, 8)); code != kerr.InvalidTxnState.Code {
		t.Errorf("non-transactional write inside the open transaction: %v, want INVALID_TXN_STATE", kerr.ErrorForCode(code))
	}
	if fp := rawFetch(t, b, "mixed", 0); fp.HighWatermark != 1 {
		t.Fatalf("high watermark %d, want 1: the plain batch was appended", fp.HighWatermark)
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, pid, epoch, true
	if er, err := end.RequestWith(ctx, raw); err != nil || er.ErrorCode != 0 {
		t.Fatalf("EndTxn: %v %+v", err, er)
	}
	waitTxnState(t, b, id, "CompleteCommit")
	// With the transaction ended, the producer's plain write goes in.
	if code := produce(nil, buildBatch(pid, epoch, 1, 1, 8)); code != 0 {
		t.Errorf("non-transactional write after the commit: %v", kerr.ErrorForCode(code))
	}
}

// classicTxnOn initializes transactional id id with a franz-go client and
// adds partition 0 of topic to its transaction through a client limited to
// Kafka 3.0's versions (the classic flow: AddPartitionsToTxn v3, Produce
// v9), which it returns for the test's raw requests with the producer id
// and epoch.
func classicTxnOn(t *testing.T, b *Broker, id, topic string) (raw *kgo.Client, pid int64, epoch int16) {
	t.Helper()
	ctx := testCtx(t)
	pid, epoch, err := txnClient(t, b, id).ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw = newClient(t, b, kgo.MaxVersions(kversion.V3_0_0()))
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = id, pid, epoch
	at := kmsg.NewAddPartitionsToTxnRequestTopic()
	at.Topic, at.Partitions = topic, []int32{0}
	add.Topics = append(add.Topics, at)
	if ar, err := add.RequestWith(ctx, raw); err != nil || ar.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("AddPartitionsToTxn: %v %+v", err, ar)
	}
	return raw, pid, epoch
}
