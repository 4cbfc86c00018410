package broker

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// AlterShareGroupOffsets: v0
//
// KIP-932: set share-partition start offsets of a share group without
// members (kafka-share-groups.sh --reset-offsets, Admin's
// alterShareGroupOffsets), answered by the group's coordinator. A group
// with members: NON_EMPTY_GROUP. The partitions' leaders take the new
// start at their next request for them (share_partition.go).

func init() { regKey(91, 0, 0).handler = handleAlterShareGroupOffsets }

func handleAlterShareGroupOffsets(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.AlterShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.AlterShareGroupOffsetsResponse)
	if code := b.shares.coord.checkAdmin(req.GroupID); code != 0 {
		resp.ErrorCode = code
		return &Reply{Msg: resp}, nil
	}
	st := b.meta.State()
	var ops []metadata.ConfigOp
	for _, t := range req.Topics {
		rt := kmsg.NewAlterShareGroupOffsetsResponseTopic()
		rt.Topic = t.Topic
		topic, ok := st.Topic(t.Topic)
		if ok {
			rt.TopicID = [16]byte(topic.ID)
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			switch {
			case !ok || p.Partition < 0 || int(p.Partition) >= len(topic.Partitions):
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case p.StartOffset < 0:
				rp.ErrorCode = kerr.InvalidRequest.Code
				rp.ErrorMessage = kmsg.StringPtr("the start offset must not be negative")
			default:
				key := sharePartKey{req.GroupID, [16]byte(topic.ID), p.Partition}
				ops = append(ops, metadata.ConfigOp{Key: key.stateKey(), Value: strconv.FormatInt(p.StartOffset, 10)})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(ops) > 0 {
		if _, _, err := b.store.propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceShareState, ResourceName: req.GroupID, Ops: ops}); err != nil {
			resp.ErrorCode = errCode(err)
		}
	}
	return &Reply{Msg: resp}, nil
}
