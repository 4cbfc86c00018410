package broker

import (
	"context"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/txn"
)

// ListTransactions: v0-2
//
// The transactions of every __transaction_state partition this broker
// leads, filtered by state names and producer ids; v1 adds the minimum
// duration (running longer than, KIP-994); v2 a regular expression the
// transactional id must match whole (KIP-1152; RE2 syntax, which Java's
// patterns mostly share; one that does not compile is
// INVALID_REGULAR_EXPRESSION; empty or null: no filter). Unknown state
// names are listed in UnknownStateFilters. Flexible.

func init() { regKey(66, 0, 2).handler = handleListTransactions }

var txnStateNames = []string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}

func handleListTransactions(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ListTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	b.txns.ensureAll()
	f := txn.ListFilter{ProducerIDs: req.ProducerIDFilters}
	for _, s := range req.StateFilters {
		known := false
		for _, n := range txnStateNames {
			known = known || n == s
		}
		if known {
			f.States = append(f.States, s)
		} else {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, s)
		}
	}
	if len(req.StateFilters) > 0 && len(f.States) == 0 {
		return &Reply{Msg: resp}, nil
	}
	if r.Version >= 1 && req.DurationFilterMillis > 0 {
		f.MinDuration = time.Duration(req.DurationFilterMillis) * time.Millisecond
	}
	var pattern *regexp.Regexp
	if r.Version >= 2 && req.TransactionalIDPattern != nil && *req.TransactionalIDPattern != "" {
		var err error
		if pattern, err = regexp.Compile("^(?:" + *req.TransactionalIDPattern + ")$"); err != nil {
			resp.ErrorCode = kerr.InvalidRegularExpression.Code
			return &Reply{Msg: resp}, nil
		}
	}
	list, err := b.txns.c.List(ctx, f)
	for _, t := range list {
		if pattern != nil && !pattern.MatchString(t.TransactionalID) {
			continue
		}
		s := kmsg.NewListTransactionsResponseTransactionState()
		s.TransactionalID, s.ProducerID, s.TransactionState = t.TransactionalID, t.ProducerID, t.State
		resp.TransactionStates = append(resp.TransactionStates, s)
	}
	return txnReply(resp, err, func(code int16) { resp.ErrorCode = code })
}
