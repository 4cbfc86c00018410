package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// DeleteShareGroupOffsets: v0
//
// KIP-932: forget a share group's start offsets on whole topics (the group
// then starts there again at share.auto.offset.reset), for a group without
// members; answered by the group's coordinator.

func init() { regKey(92, 0, 0).handler = handleDeleteShareGroupOffsets }

func handleDeleteShareGroupOffsets(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DeleteShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteShareGroupOffsetsResponse)
	if code := b.shares.coord.checkAdmin(req.GroupID); code != 0 {
		resp.ErrorCode = code
		return &Reply{Msg: resp}, nil
	}
	if !b.shares.coord.isShareGroup(req.GroupID) {
		// No such share group, as Kafka answers (it answered success).
		resp.ErrorCode = kerr.GroupIDNotFound.Code
		return &Reply{Msg: resp}, nil
	}
	st := b.meta.State()
	stored := st.ShareState(req.GroupID)
	var ops []metadata.ConfigOp
	for _, t := range req.Topics {
		rt := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
		rt.Topic = t.Topic
		topic, ok := st.Topic(t.Topic)
		if !ok {
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		rt.TopicID = [16]byte(topic.ID)
		for p := range topic.Partitions {
			key := sharePartKey{req.GroupID, [16]byte(topic.ID), int32(p)}.stateKey()
			if _, ok := stored[key]; ok {
				ops = append(ops, metadata.ConfigOp{Key: key, Delete: true})
			}
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
