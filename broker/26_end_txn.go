package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// EndTxn: v0-5
//
// Commits or aborts the open transaction: answered once the decision is in
// __transaction_state; the markers follow (broker/txn). v3+ flexible.
// v5 is KIP-890 part 2 (transaction.version 2, which ApiVersions
// advertises): every end bumps the producer epoch (a new producer id once
// it is exhausted), the answer carries the producer id and epoch to go on
// with, an abort with nothing open is legal, and an EndTxn at the previous
// epoch is a retry only right after the end it retries (otherwise
// PRODUCER_FENCED: a delayed end never lands in the next transaction).
// PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.

func init() { regKey(26, 0, 5).handler = handleEndTxn }

func handleEndTxn(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	b.txns.ensure(req.TransactionalID)
	res, err := b.txns.c.EndTxn(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit, r.Version >= 5)
	resp.ErrorCode = fencedCode(res.ErrorCode, r.Version, 2)
	resp.ProducerID, resp.ProducerEpoch = res.ProducerID, res.Epoch
	return txnReply(resp, err, func(code int16) { resp.ErrorCode = code })
}
