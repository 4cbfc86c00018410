package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// AlterPartitionReassignments: v0-1 (flexible)
//
// KIP-455: per partition, Replicas is the target replica set (null cancels
// a reassignment in progress). The move itself is metadata.AlterReassignment:
// the new replicas are added, fetch from the leader, join the ISR, and then
// the removed ones leave (leadership moves if the leader is removed); see
// docs/replication.md. v1 (KIP-860): with AllowReplicationFactorChange false
// a target of another size is INVALID_REPLICATION_FACTOR.

func init() { regKey(45, 0, 1).handler = handleAlterPartitionAssignments }

func handleAlterPartitionAssignments(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.AlterPartitionAssignmentsRequest)
	resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	resp.AllowReplicationFactorChange = req.AllowReplicationFactorChange
	timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
	if timeout <= 0 || timeout > time.Minute {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	allowRF := req.Version < 1 || req.AllowReplicationFactorChange
	st := b.meta.State()
	for _, t := range req.Topics {
		rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		rt.Topic = t.Topic
		mt, ok := st.Topic(t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			rp.Partition = p.Partition
			var err error
			switch {
			case !ok || p.Partition < 0 || int(p.Partition) >= len(mt.Partitions):
				err = errUnknownTopicOrPartition
			case p.Replicas != nil && len(p.Replicas) == 0:
				err = fmt.Errorf("%w: an empty replica list", metadata.ErrInvalidReplicaAssignment)
			case p.Replicas != nil && !allowRF && len(p.Replicas) != len(mt.Partitions[p.Partition].Target()):
				err = fmt.Errorf("%w: %d replicas for a partition with %d (AllowReplicationFactorChange is false)",
					metadata.ErrInvalidReplicationFactor, len(p.Replicas), len(mt.Partitions[p.Partition].Target()))
			default:
				for _, id := range p.Replicas {
					if id < 0 {
						err = fmt.Errorf("%w: broker id %d", metadata.ErrInvalidReplicaAssignment, id)
					}
				}
			}
			if err == nil {
				_, _, err = b.store.propose(ctx, &metadata.AlterReassignment{TopicID: mt.ID, Partition: p.Partition, Target: p.Replicas})
				if errors.Is(err, metadata.ErrUnknownBroker) {
					err = fmt.Errorf("%w: %v", metadata.ErrInvalidReplicaAssignment, err)
				}
			}
			if err != nil {
				rp.ErrorCode = errCode(err)
				rp.ErrorMessage = errMessage(err)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}
