package broker

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/txn"
)

// Helpers shared by the transaction handler files (22, 24-28, 65, 66).

// txnReply turns a coordinator error into a reply: ErrClosed (stopping)
// answers NOT_COORDINATOR through fill; a cancelled request closes the
// connection.
func txnReply(resp kmsg.Response, err error, fill func(code int16)) (*Reply, error) {
	if errors.Is(err, txn.ErrClosed) {
		fill(kerr.NotCoordinator.Code)
		return &Reply{Msg: resp}, nil
	}
	if err != nil {
		return nil, err
	}
	return &Reply{Msg: resp}, nil
}

// fencedCode answers PRODUCER_FENCED as INVALID_PRODUCER_EPOCH to request
// versions from before KIP-588 (which added the code).
func fencedCode(code int16, version, since int16) int16 {
	if code == kerr.ProducerFenced.Code && version < since {
		return kerr.InvalidProducerEpoch.Code
	}
	return code
}

func initTransactionalProducer(ctx context.Context, b *Broker, r *Request, req *kmsg.InitProducerIDRequest, resp *kmsg.InitProducerIDResponse) (*Reply, error) {
	if _, err := b.createTxnStateTopic(ctx); err != nil {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return &Reply{Msg: resp}, nil
	}
	b.txns.ensure(*req.TransactionalID)
	pid, epoch := int64(-1), int16(-1)
	if r.Version >= 3 {
		pid, epoch = req.ProducerID, req.ProducerEpoch
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := b.txns.c.InitProducerID(ctx, *req.TransactionalID, req.TransactionTimeoutMillis, pid, epoch)
	resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = fencedCode(res.ErrorCode, r.Version, 4), res.ProducerID, res.Epoch
	return txnReply(resp, err, func(code int16) { resp.ErrorCode = code })
}
