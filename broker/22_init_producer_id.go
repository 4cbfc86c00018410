package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// InitProducerId: v0-5
//
// Idempotent producers (no transactional id) get a fresh producer id from a
// block allocated through the metadata log, at epoch 0. v3+ lets a producer
// that knows its id ask for an epoch bump (KIP-360); without a transaction
// coordinator a bump hands out a new id instead, which Kafka also does when
// the epoch would overflow. A transactional id goes to the transaction
// coordinator (broker/txn via txns.go): it bumps the id's epoch, fencing
// the previous instance and aborting what it left open. PRODUCER_FENCED is
// answered as INVALID_PRODUCER_EPOCH before v4. v2+ flexible.

func init() { regKey(22, 0, 5).handler = handleInitProducerID }

func handleInitProducerID(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.Version >= 3 && (req.ProducerID < 0) != (req.ProducerEpoch < 0) {
		// A producer id without its epoch or the reverse (Kafka's
		// KafkaApis answers INVALID_REQUEST): with the id alone, the
		// coordinator took epoch -1 for a retry of the last bump and
		// answered the current epoch to whoever asked.
		resp.ErrorCode = kerr.InvalidRequest.Code
		return &Reply{Msg: resp}, nil
	}
	if req.TransactionalID != nil {
		return initTransactionalProducer(ctx, b, r, req, resp) // txns.go
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	id, err := b.store.producerID(ctx)
	if err != nil {
		resp.ErrorCode = errCode(err)
		return &Reply{Msg: resp}, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return &Reply{Msg: resp}, nil
}
