package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetForLeaderEpoch: v0-4
//
// The end offset of the largest leader epoch at most the one asked for
// (KIP-101/KIP-279), from hotlog's leader-epoch checkpoint. Consumers use it
// after a leader change to detect truncation (franz-go sends v4). v2+
// fences with the current leader epoch, v3+ carries the replica id, v4
// flexible.

func init() { regKey(23, 0, 4).handler = handleOffsetForLeaderEpoch }

func handleOffsetForLeaderEpoch(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	st := b.meta.State()
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, pt := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition, rp.LeaderEpoch, rp.EndOffset = pt.Partition, -1, -1
			p, err := b.store.partition(st, t.Topic, pt.Partition)
			if err == nil && r.Version >= 2 && pt.CurrentLeaderEpoch >= 0 {
				if le := p.leaderEpoch(); pt.CurrentLeaderEpoch < le {
					err = kerr.FencedLeaderEpoch
				} else if pt.CurrentLeaderEpoch > le {
					err = kerr.UnknownLeaderEpoch
				}
			}
			if err == nil && !p.isLeader(-1) {
				// Only the leader answers, as in Kafka: a follower's epoch
				// cache can lag the leader's (the store's metadata may name
				// this broker leader a moment before its role changes).
				err = errNotLeader
			}
			if err == nil {
				rp.LeaderEpoch, rp.EndOffset, err = p.endOffsetForEpoch(pt.LeaderEpoch)
				if err == nil && rp.EndOffset > p.log.HighWatermark() && pt.LeaderEpoch >= p.leaderEpoch() && req.ReplicaID < 0 {
					// Consumers never see past the high watermark.
					rp.EndOffset = p.log.HighWatermark()
				}
			}
			if err != nil {
				rp.ErrorCode = errCode(err)
				rp.LeaderEpoch, rp.EndOffset = -1, -1
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}
