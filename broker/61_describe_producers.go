package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeProducers: v0
//
// The idempotent producers a partition's leader knows: id, epoch, last
// sequence, last timestamp, the coordinator epoch of the producer's last
// transaction marker in the partition (-1 if none, as Kafka) and the first
// offset of its open transaction (-1 if none), which kafka-transactions.sh
// uses to find and abort hanging transactions (with WriteTxnMarkers, at
// that coordinator epoch). v0 is flexible.

func init() { regKey(61, 0, 0).handler = handleDescribeProducers }

func handleDescribeProducers(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeProducersRequest)
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	st := b.meta.State()
	for _, t := range req.Topics {
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		for _, idx := range t.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition = idx
			p, err := b.store.partition(st, t.Topic, idx)
			if err != nil {
				rp.ErrorCode = errCode(err)
				rp.ErrorMessage = errMessage(err)
			} else {
				p.mu.Lock()
				for _, e := range p.mu.producers.entries() {
					ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					ap.ProducerID, ap.ProducerEpoch = e.id, int32(e.epoch)
					ap.LastSequence, ap.LastTimestamp = e.lastSeq(), e.lastTimestamp
					ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = e.coordinatorEpoch, e.txnFirstOffset
					rp.ActiveProducers = append(rp.ActiveProducers, ap)
				}
				p.mu.Unlock()
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}
