package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeTransactions: v0
//
// The state of each transactional id whose coordinator is this broker
// (NOT_COORDINATOR for the others, TRANSACTIONAL_ID_NOT_FOUND for unknown
// ids). Flexible.

func init() { regKey(65, 0, 0).handler = handleDescribeTransactions }

func handleDescribeTransactions(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range req.TransactionalIDs {
		b.txns.ensure(id)
	}
	states, err := b.txns.c.Describe(ctx, req.TransactionalIDs)
	fill := func(code int16) {
		resp.TransactionStates = nil
		for _, id := range req.TransactionalIDs {
			s := kmsg.NewDescribeTransactionsResponseTransactionState()
			s.TransactionalID, s.ErrorCode = id, code
			resp.TransactionStates = append(resp.TransactionStates, s)
		}
	}
	for _, st := range states {
		s := kmsg.NewDescribeTransactionsResponseTransactionState()
		s.ErrorCode, s.TransactionalID, s.State = st.ErrorCode, st.TransactionalID, st.State
		s.TimeoutMillis, s.StartTimestamp, s.ProducerID, s.ProducerEpoch = st.TimeoutMs, st.StartMs, st.ProducerID, st.Epoch
		idx := map[string]int{}
		for _, tp := range st.Partitions {
			i, ok := idx[tp.Topic]
			if !ok {
				i = len(s.Topics)
				idx[tp.Topic] = i
				t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				t.Topic = tp.Topic
				s.Topics = append(s.Topics, t)
			}
			s.Topics[i].Partitions = append(s.Topics[i].Partitions, tp.Partition)
		}
		resp.TransactionStates = append(resp.TransactionStates, s)
	}
	return txnReply(resp, err, fill)
}
