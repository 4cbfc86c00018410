package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// CreatePartitions: v0-3
//
// Grows a topic to Count partitions (never shrinks: INVALID_PARTITIONS),
// optionally with the new partitions' replica assignment. v2+ flexible.

func init() { regKey(37, 0, 3).handler = handleCreatePartitions }

func handleCreatePartitions(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.CreatePartitionsRequest)
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	seen := map[string]int{}
	var added int64
	st := b.meta.State()
	for _, t := range req.Topics {
		seen[t.Topic]++
		if mt, ok := st.Topic(t.Topic); ok {
			added += max(int64(t.Count)-int64(len(mt.Partitions)), 0)
		}
	}
	for _, t := range req.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		var err error
		mt, ok := st.Topic(t.Topic)
		switch {
		case added > maxPartitionsPerRequest:
			err = errTooManyPartitionsPerRequest
		case seen[t.Topic] > 1:
			err = errors.Join(metadata.ErrInvalidRequest, errors.New("topic listed more than once"))
		case !ok:
			err = errUnknownTopicOrPartition
		case t.Count <= int32(len(mt.Partitions)):
			err = fmt.Errorf("%w: topic has %d partitions, cannot go to %d", metadata.ErrInvalidPartitions, len(mt.Partitions), t.Count)
		case t.Count > 100000:
			err = fmt.Errorf("%w: %d partitions is more than this broker allows (100000)", metadata.ErrInvalidPartitions, t.Count)
		case len(t.Assignment) > 0 && len(t.Assignment) != int(t.Count)-len(mt.Partitions):
			err = fmt.Errorf("%w: %d assignments for %d new partitions", metadata.ErrInvalidReplicaAssignment, len(t.Assignment), int(t.Count)-len(mt.Partitions))
		case len(t.Assignment) > 0:
			// As the metadata log will, so that validate_only answers
			// what growing would.
			a := make([][]int32, len(t.Assignment))
			for i := range t.Assignment {
				a[i] = t.Assignment[i].Replicas
			}
			err = b.checkAssignment(a, len(mt.Partitions[0].Replicas))
		}
		if err == nil && !req.ValidateOnly {
			cmd := &metadata.CreatePartitions{TopicID: mt.ID, Name: mt.Name, Count: t.Count}
			for _, a := range t.Assignment {
				cmd.Assignment = append(cmd.Assignment, a.Replicas)
			}
			_, _, err = b.store.propose(ctx, cmd)
		}
		if err != nil {
			rt.ErrorCode = errCode(err)
			rt.ErrorMessage = errMessage(err)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}
