package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/txn"
)

// WriteTxnMarkers: v0-1
//
// Broker to broker: a transaction coordinator asks the leader of each
// partition to append a commit or abort marker. Each marker ends the
// producer's open transaction in the partition (see txns.go); a marker
// whose producer epoch is older than the partition's is skipped. A marker
// whose coordinator epoch is older than that of the producer's last marker
// in the partition comes from a replaced coordinator and is refused with
// TRANSACTION_COORDINATOR_FENCED (the same epoch passes: a retry is written
// again). v1+ flexible.

func init() { regKey(27, 0, 1).handler = handleWriteTxnMarkers }

func handleWriteTxnMarkers(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.WriteTxnMarkersRequest)
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	st := b.meta.State()
	for _, m := range req.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		for _, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition = p
				err := b.txns.writeMarker(st, txn.TopicPartition{Topic: t.Topic, Partition: p}, m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch)
				rp.ErrorCode = errCode(err)
				rt.Partitions = append(rt.Partitions, rp)
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	return &Reply{Msg: resp}, nil
}
