package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// FindCoordinator: v0-6
//
// Group keys (type 0) map to partition group.PartitionFor(key) of
// __consumer_offsets, which is created on first use (compacted, 50
// partitions unless Config.Groups.Partitions says otherwise); the
// coordinator is that partition's leader, answered with its address on the
// listener the client came through. If this broker leads it, the partition
// starts loading now and the answer waits (up to 2s) for the load, so the
// JoinGroup that follows is not told COORDINATOR_LOAD_IN_PROGRESS. v1+ coordinator type, v3+ flexible, v4+ batched keys.
// Transaction keys (type 1) map the same way to __transaction_state (50
// partitions, compacted, created on first use) and its partition's leader
// (txns.go); other types INVALID_REQUEST.

func init() { regKey(10, 0, 6).handler = handleFindCoordinator }

func handleFindCoordinator(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := req.CoordinatorKeys
	if r.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	var st *metadata.State
	var stErr error
	if req.CoordinatorType == 0 {
		st, stErr = b.createOffsetsTopic(ctx)
	} else if req.CoordinatorType == 1 {
		st, stErr = b.createTxnStateTopic(ctx)
	}
	for _, key := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID, c.Port = key, -1, -1
		switch {
		case req.CoordinatorType != 0 && req.CoordinatorType != 1:
			c.ErrorCode = kerr.InvalidRequest.Code
		case stErr != nil:
			c.ErrorCode = kerr.CoordinatorNotAvailable.Code
		case req.CoordinatorType == 1:
			c.NodeID, c.Host, c.Port, c.ErrorCode = txnCoordinator(b, st, key, r.Conn.Listener)
			if c.ErrorCode == 0 && c.NodeID == b.cfg.NodeID {
				b.txns.ensureWait(ctx, key, 2*time.Second)
			}
		default:
			c.NodeID, c.Host, c.Port, c.ErrorCode = groupCoordinator(b, st, key, r.Conn.Listener)
			if c.ErrorCode == 0 && c.NodeID == b.cfg.NodeID {
				b.groups.ensureWait(ctx, key, 2*time.Second)
			}
		}
		if c.ErrorCode != 0 {
			msg := kerr.ErrorForCode(c.ErrorCode).Error()
			c.ErrorMessage = &msg
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	if r.Version < 4 {
		c := resp.Coordinators[0]
		resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = c.ErrorCode, c.ErrorMessage, c.NodeID, c.Host, c.Port
		resp.Coordinators = nil
	}
	return &Reply{Msg: resp}, nil
}

// groupCoordinator finds the leader of a group's offsets partition and its
// address on the named listener.
func groupCoordinator(b *Broker, st *metadata.State, key, listener string) (node int32, host string, port int32, code int16) {
	t, ok := st.Topic(offsetsTopic)
	if !ok {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code
	}
	p := b.groups.partitionFor(key)
	if int(p) >= len(t.Partitions) {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code
	}
	leader := t.Partitions[p].Leader
	br, ok := st.Broker(leader)
	if !ok || br.Fenced || len(br.Listeners) == 0 {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code
	}
	l := br.Listeners[0]
	for _, bl := range br.Listeners {
		if bl.Name == listener {
			l = bl
		}
	}
	return br.ID, l.Host, l.Port, 0
}
