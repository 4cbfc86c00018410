package broker

import (
	"context"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// DeleteTopics: v1-6
//
// v1 is Kafka 4's minimum; v4+ flexible, v5+ error messages, v6 topics by
// name or id (not both). A topic given twice is INVALID_REQUEST. The deletion commits in the metadata log; each broker then
// closes and removes its partitions of the topic.

func init() { regKey(20, 1, 6).handler = handleDeleteTopics }

func handleDeleteTopics(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	topics := req.Topics
	if r.Version < 6 {
		topics = nil
		for _, n := range req.TopicNames {
			t := kmsg.NewDeleteTopicsRequestTopic()
			t.Topic = kmsg.StringPtr(n)
			topics = append(topics, t)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// As Kafka's ControllerApis.deleteTopics: a name or an id given twice
	// is INVALID_REQUEST (for every copy, and none is deleted), and so is
	// a topic given by both name and id.
	names, ids := map[string]int{}, map[[16]byte]int{}
	for _, t := range topics {
		if t.Topic != nil {
			names[*t.Topic]++
		} else {
			ids[t.TopicID]++
		}
	}
	for _, t := range topics {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		st := b.meta.State()
		var mt *metadata.Topic
		var ok bool
		switch {
		case t.Topic != nil && t.TopicID != [16]byte{}:
			rt.ErrorCode = kerr.InvalidRequest.Code
			rt.ErrorMessage = kmsg.StringPtr("a topic may not be given by both name and id")
		case t.Topic != nil && names[*t.Topic] > 1, t.Topic == nil && t.TopicID != [16]byte{} && ids[t.TopicID] > 1:
			rt.ErrorCode = kerr.InvalidRequest.Code
			rt.ErrorMessage = kmsg.StringPtr("topic given more than once")
		case t.Topic != nil:
			mt, ok = st.Topic(*t.Topic)
			if !ok {
				rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
		case t.TopicID != [16]byte{}:
			mt, ok = st.TopicByID(metadata.UUID(t.TopicID))
			if !ok {
				rt.ErrorCode = kerr.UnknownTopicID.Code
			}
		default:
			rt.ErrorCode = kerr.InvalidRequest.Code
		}
		if ok {
			rt.TopicID = mt.ID
			if r.Version >= 6 {
				rt.Topic = kmsg.StringPtr(mt.Name)
			}
			del := &metadata.DeleteTopic{TopicID: mt.ID, Name: mt.Name, DeleteRemote: b.deleteRemoteOnTopicDelete(mt)}
			if _, _, err := b.store.propose(ctx, del); err != nil {
				rt.ErrorCode = errCode(err)
				rt.ErrorMessage = errMessage(err)
			} else {
				b.store.reconcile(b.meta.State())
				b.forgetShareState(ctx, mt.ID)
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}

// forgetShareState deletes the share-partition state every share group
// kept for a deleted topic, as Kafka's share coordinator deletes it with
// the topic: a group left with none is no longer listed. It stayed for
// ever, and groups that had only read deleted topics stayed listed (a
// share group review). Best effort: a failure is logged, and the state
// of a topic id that no longer exists is never read again.
func (b *Broker) forgetShareState(ctx context.Context, id metadata.UUID) {
	st := b.meta.State()
	prefix := hex.EncodeToString(id[:]) + ":"
	for _, g := range st.ShareGroups() {
		var ops []metadata.ConfigOp
		for key := range st.ShareState(g) {
			if strings.HasPrefix(key, prefix) {
				ops = append(ops, metadata.ConfigOp{Key: key, Delete: true})
			}
		}
		if len(ops) == 0 {
			continue
		}
		slices.SortFunc(ops, func(a, b metadata.ConfigOp) int { return strings.Compare(a.Key, b.Key) })
		if _, _, err := b.store.propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceShareState, ResourceName: g, Ops: ops}); err != nil {
			b.log.Warn("share group: the state of a deleted topic not removed", "group", g, "topic_id", hex.EncodeToString(id[:]), "err", err)
		}
	}
}
