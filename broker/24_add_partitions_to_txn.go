package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/txn"
)

// AddPartitionsToTxn: v0-4
//
// v0-v3 (the classic client flow) add partitions to one transactional id's
// open transaction, starting it. v3+ flexible. v4 is the broker-to-broker
// batched form of KIP-890 (many ids, VerifyOnly); served here too, with
// VerifyOnly answering whether each partition is already in the open
// transaction (INVALID_TXN_STATE if not). PRODUCER_FENCED is
// INVALID_PRODUCER_EPOCH before v2.

func init() { regKey(24, 0, 4).handler = handleAddPartitionsToTxn }

func handleAddPartitionsToTxn(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if r.Version < 4 {
		codes, err := addPartitions(ctx, b, req.TransactionalID, req.ProducerID, req.ProducerEpoch, false, topicsOf(req.Topics))
		fill := func(code int16) {
			resp.Topics = nil
			for _, t := range req.Topics {
				rt := kmsg.NewAddPartitionsToTxnResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
					rp.Partition = p
					if code != 0 {
						rp.ErrorCode = code
					} else {
						rp.ErrorCode = fencedCode(codes[txn.TopicPartition{Topic: t.Topic, Partition: p}], r.Version, 2)
					}
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
		}
		fill(0)
		return txnReply(resp, err, fill)
	}
	for _, tr := range req.Transactions {
		var topics []kmsg.AddPartitionsToTxnRequestTopic
		for _, t := range tr.Topics {
			topics = append(topics, kmsg.AddPartitionsToTxnRequestTopic{Topic: t.Topic, Partitions: t.Partitions})
		}
		codes, err := addPartitions(ctx, b, tr.TransactionalID, tr.ProducerID, tr.ProducerEpoch, tr.VerifyOnly, topicsOf(topics))
		if err != nil {
			return txnReply(resp, err, func(code int16) { resp.ErrorCode = code })
		}
		rtx := kmsg.NewAddPartitionsToTxnResponseTransaction()
		rtx.TransactionalID = tr.TransactionalID
		for _, t := range tr.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
				rp.Partition = p
				rp.ErrorCode = codes[txn.TopicPartition{Topic: t.Topic, Partition: p}]
				rt.Partitions = append(rt.Partitions, rp)
			}
			rtx.Topics = append(rtx.Topics, rt)
		}
		resp.Transactions = append(resp.Transactions, rtx)
	}
	return &Reply{Msg: resp}, nil
}

func topicsOf(ts []kmsg.AddPartitionsToTxnRequestTopic) []txn.TopicPartition {
	var out []txn.TopicPartition
	for _, t := range ts {
		for _, p := range t.Partitions {
			out = append(out, txn.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	return out
}

func addPartitions(ctx context.Context, b *Broker, id string, pid int64, epoch int16, verifyOnly bool, tps []txn.TopicPartition) (map[txn.TopicPartition]int16, error) {
	b.txns.ensure(id)
	out := make(map[txn.TopicPartition]int16, len(tps))
	if verifyOnly {
		for _, tp := range tps {
			code, err := b.txns.c.CheckProducer(ctx, id, pid, epoch, tp)
			if err != nil {
				return out, err
			}
			out[tp] = code
		}
		return out, nil
	}
	codes, err := b.txns.c.AddPartitions(ctx, id, pid, epoch, tps)
	for i, tp := range tps {
		if i < len(codes) {
			out[tp] = codes[i]
		} else {
			out[tp] = kerr.UnknownServerError.Code
		}
	}
	return out, err
}
