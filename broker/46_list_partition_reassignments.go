package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListPartitionReassignments: v0 (flexible)
//
// KIP-455: the reassignments in progress, of the topics and partitions asked
// for (null Topics: all): each partition's replicas (target first, then the
// ones being removed), adding replicas and removing replicas. Partitions and
// topics that do not exist, or are not being reassigned, are left out.

func init() { regKey(46, 0, 0).handler = handleListPartitionReassignments }

func handleListPartitionReassignments(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ListPartitionReassignmentsRequest)
	resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	st := b.meta.State()
	type want struct{ parts []int32 }
	var asked map[string]*want
	if req.Topics != nil {
		asked = map[string]*want{}
		for _, t := range req.Topics {
			w := asked[t.Topic]
			if w == nil {
				w = &want{}
				asked[t.Topic] = w
			}
			w.parts = append(w.parts, t.Partitions...)
		}
	}
	for _, t := range st.Topics() {
		var w *want
		if asked != nil {
			if w = asked[t.Name]; w == nil {
				continue
			}
		}
		rt := kmsg.NewListPartitionReassignmentsResponseTopic()
		rt.Topic = t.Name
		for _, p := range t.Partitions {
			if !p.Reassigning() || (w != nil && !slices.Contains(w.parts, p.Index)) {
				continue
			}
			rp := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
			rp.Partition = p.Index
			rp.Replicas = slices.Clone(p.Replicas)
			rp.AddingReplicas = slices.Clone(p.Adding)
			rp.RemovingReplicas = slices.Clone(p.Removing)
			if rp.AddingReplicas == nil {
				rp.AddingReplicas = []int32{}
			}
			if rp.RemovingReplicas == nil {
				rp.RemovingReplicas = []int32{}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		if len(rt.Partitions) > 0 {
			resp.Topics = append(resp.Topics, rt)
		}
	}
	return &Reply{Msg: resp}, nil
}
