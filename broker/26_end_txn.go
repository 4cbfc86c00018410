package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// EndTxn: v0-4
//
// Commits or aborts the open transaction: answered once the decision is in
// __transaction_state; the markers follow (broker/txn). v3+ flexible.
// v5 (KIP-890's per-transaction epoch bump) is not advertised, nor the
// transaction.version feature, so clients use the classic flow.
// PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.

func init() { regKey(26, 0, 4).handler = handleEndTxn }

func handleEndTxn(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	b.txns.ensure(req.TransactionalID)
	code, err := b.txns.c.EndTxn(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
	resp.ErrorCode = fencedCode(code, r.Version, 2)
	return txnReply(resp, err, func(code int16) { resp.ErrorCode = code })
}
