package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteRecords: v0-2
//
// Raises a partition's log start offset to the given offset (-1: the high
// watermark); whole segments below it are deleted by hotlog. An offset past
// the high watermark is OFFSET_OUT_OF_RANGE (of a partition whose ISR is the
// leader alone, once its pending fsync is done: awaitLoneWrites). v2
// flexible.

func init() { regKey(21, 0, 2).handler = handleDeleteRecords }

func handleDeleteRecords(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DeleteRecordsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	st := b.meta.State()
	for _, t := range req.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for _, pt := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.LowWatermark = pt.Partition, -1
			p, err := b.store.partition(st, t.Topic, pt.Partition)
			if err == nil {
				off := pt.Offset
				b.awaitLoneWrites(ctx, p) // read your acks=1 writes (replication.go)
				hw := p.log.HighWatermark()
				switch {
				case off == -1:
					off = hw
				case off < 0 || off > hw:
					err = kerr.OffsetOutOfRange
				}
				if err == nil {
					err = b.deleteRecordsBefore(ctx, p, off) // both tiers (tiering.go)
				}
				if err == nil {
					rp.LowWatermark, err = b.logStartOffset(ctx, p)
				}
			}
			rp.ErrorCode = errCode(err)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}
