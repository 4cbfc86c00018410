package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/txn"
)

// AddOffsetsToTxn: v0-4
//
// Adds the group's __consumer_offsets partition to the transaction, so its
// markers reach the offsets that TxnOffsetCommit writes there. v3+
// flexible. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.

func init() { regKey(25, 0, 4).handler = handleAddOffsetsToTxn }

func handleAddOffsetsToTxn(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	if _, err := b.createOffsetsTopic(ctx); err != nil {
		resp.ErrorCode = errCode(err)
		return &Reply{Msg: resp}, nil
	}
	b.txns.ensure(req.TransactionalID)
	tp := txn.TopicPartition{Topic: offsetsTopic, Partition: b.groups.partitionFor(req.Group)}
	codes, err := b.txns.c.AddPartitions(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, []txn.TopicPartition{tp})
	if len(codes) == 1 {
		resp.ErrorCode = fencedCode(codes[0], r.Version, 2)
	}
	return txnReply(resp, err, func(code int16) { resp.ErrorCode = code })
}
