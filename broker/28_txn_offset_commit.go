package broker

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/broker/txn"
)

// TxnOffsetCommit: v0-5
//
// Offsets committed inside a transaction: the group coordinator validates
// the member (v3+ generation, member and instance ids, KIP-447; kafkajs
// sends v1 without them), the records are appended to the group's
// __consumer_offsets partition as a transactional batch of the producer
// (sequence -1, as Kafka's coordinator writes them, so the partition's
// producer state fences an old epoch), and they become the group's offsets
// only when the commit marker is written there (txns.go). The producer is
// checked first at the transaction coordinator of the id (in process, or
// AddPartitionsToTxn v4 VerifyOnly to another broker). v3+ flexible. v5 (KIP-890 part 2) comes without
// AddOffsetsToTxn: the offsets partition is added to the transaction at its
// coordinator here. A coordinator that cannot answer now makes the commit
// COORDINATOR_NOT_AVAILABLE (retried), never written unverified. Either is
// done under the offsets partition's verification guard (as a Produce's
// batch, txns.go): a commit whose transaction ended there after the
// coordinator answered is INVALID_TXN_STATE at the append. v6 (topic ids) is not served.
// PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v3.

func init() { regKey(28, 0, 5).handler = handleTxnOffsetCommit }

func handleTxnOffsetCommit(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.TxnOffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	fill := func(code int16) {
		resp.Topics = nil
		for _, t := range req.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	part := b.groups.partitionFor(req.Group)
	b.txns.ensure(req.TransactionalID)
	tp := txn.TopicPartition{Topic: offsetsTopic, Partition: part}
	p, err := b.store.partition(b.meta.State(), offsetsTopic, part)
	if err != nil {
		fill(txnOffsetsAppendCode(err, r.Version))
		return &Reply{Msg: resp}, nil
	}
	// Verified under a verification guard of the offsets partition's
	// producer state, as a Produce's batch (txns.go): a marker of the
	// producer written there after the coordinator answered (an EndTxn
	// that completed meanwhile) removes it, and the append is then refused
	// (INVALID_TXN_STATE, which Kafka's group coordinator passes on)
	// instead of opening a transaction after the marker that nothing ends.
	var code int16
	verified, err := b.verifyUnderGuard(p, req.ProducerID, req.ProducerEpoch, true, func() error {
		if r.Version >= 5 {
			// KIP-890 part 2: no AddOffsetsToTxn came; add the group's
			// offsets partition to the transaction here.
			code = b.addToTxn(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, []txn.TopicPartition{tp})
		} else {
			// KIP-890 part 1, as Kafka 3.6+ (transaction.partition.verification.enable):
			// the id's coordinator, here or on another broker, must have the
			// group's offsets partition in the producer's open transaction
			// (AddOffsetsToTxn).
			code = b.verifyInTxn(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, []txn.TopicPartition{tp})
		}
		if code != 0 {
			return kerr.ErrorForCode(code)
		}
		return nil
	})
	switch {
	case errors.Is(err, errTxnGuardLost):
		fill(kerr.CoordinatorNotAvailable.Code)
		return &Reply{Msg: resp}, nil
	case err == nil:
	case r.Version >= 5:
		fill(code)
		return &Reply{Msg: resp}, nil
	default:
		// A coordinator that cannot answer now makes the commit
		// COORDINATOR_NOT_AVAILABLE, which clients retry (as Kafka
		// answers): offsets written unverified, of a producer with no
		// transaction open, would stay open in __consumer_offsets with
		// no marker to come.
		switch code {
		case kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code, kerr.ConcurrentTransactions.Code:
			fill(kerr.CoordinatorNotAvailable.Code)
		case kerr.ClusterAuthorizationFailed.Code: // the brokers' own principal, not the client's (Kafka's AddPartitionsToTxnManager)
			fill(kerr.InvalidTxnState.Code)
		default:
			fill(fencedCode(code, r.Version, 3))
		}
		return &Reply{Msg: resp}, nil
	}
	b.groups.ensure(req.Group)
	names := make([]string, len(req.Topics))
	for i, t := range req.Topics {
		names[i] = t.Topic
	}
	gresp, records, err := b.groups.c.TxnOffsetCommit(ctx, req, names)
	if errors.Is(err, group.ErrClosed) {
		fill(kerr.NotCoordinator.Code)
		return &Reply{Msg: resp}, nil
	}
	if err != nil {
		return nil, err
	}
	if len(records) == 0 {
		return &Reply{Msg: gresp}, nil
	}
	// Registered before the append: the transaction's marker may be
	// written (a fence, a timeout) as soon as the records are in the log,
	// before this append returns, and must find them. A marker ends them
	// only once they are in the log (written, set in log order): one that
	// came first makes the append refuse them.
	ob := b.txns.addOffsets(part, req.ProducerID, records)
	verified.written = func() { ob.written.Store(true) }
	if b.testHooks.txnOffsetsVerified != nil {
		b.testHooks.txnOffsetsVerified()
	}
	batch := encodeBatch(records, req.ProducerID, req.ProducerEpoch, attrTransactional, time.Now().UnixMilli())
	// Answered once the ISR has it (acks=-1, replication.go).
	err = p.appendInternalTxn(ctx, batch, verified, b.stopping)
	if err == nil && b.testHooks.txnOffsetsAppended != nil {
		b.testHooks.txnOffsetsAppended()
	}
	if err != nil {
		// Nothing was written, or not replicated: release the pending
		// counts (the client retries or aborts), unless a marker ended
		// them already.
		if b.txns.takeBackOffsets(ob) {
			ectx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			b.groups.c.EndTxnOffsets(ectx, part, records, false)
			cancel()
		}
		code := txnOffsetsAppendCode(err, r.Version)
		for i := range gresp.Topics {
			for j := range gresp.Topics[i].Partitions {
				if gresp.Topics[i].Partitions[j].ErrorCode == 0 {
					gresp.Topics[i].Partitions[j].ErrorCode = code
				}
			}
		}
		return &Reply{Msg: gresp}, nil
	}
	return &Reply{Msg: gresp}, nil
}

// txnOffsetsAppendCode is the TxnOffsetCommit error code for a failed
// append to the group's offsets partition.
func txnOffsetsAppendCode(err error, version int16) int16 {
	code := errCode(err)
	switch {
	case code == kerr.NotLeaderForPartition.Code || code == kerr.UnknownTopicOrPartition.Code:
		code = kerr.NotCoordinator.Code
	case code == kerr.RequestTimedOut.Code || errors.Is(err, context.Canceled):
		// Not replicated in time (Kafka answers the same).
		code = kerr.CoordinatorNotAvailable.Code
	}
	return fencedCode(code, version, 3)
}
