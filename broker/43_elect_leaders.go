package broker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// ElectLeaders: v0-2
//
// KIP-183 / KIP-460. A preferred election (v0, or election type 0) makes a
// partition's first replica its leader: ELECTION_NOT_NEEDED if it already
// leads, PREFERRED_LEADER_NOT_AVAILABLE unless it is in the ISR and neither
// fenced nor shutting down; otherwise a ChangeLeaderAndISR is committed
// before the answer, at once (the controller's own return of leadership to
// preferred replicas waits for its leader imbalance check, docs/metadata.md).
// An unclean election (type 1) is ELECTION_NOT_NEEDED for a partition with
// a leader. For one without, as Kafka's controller does when asked for an
// UNCLEAN election whatever unclean.leader.election.enable says, it elects
// the first eligible ISR member in replica order or, failing that, the first
// eligible replica, the ISR becoming that replica alone (records only the
// previous ISR had are lost); ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica
// is eligible (registered, neither fenced nor shutting down). The leader is
// committed before the answer. Null topics (v1+)
// mean every partition; then partitions that need no election are left out
// of the answer, as Kafka's controller does. v1+ top-level error code, v2
// flexible.

func init() { regKey(43, 0, 2).handler = handleElectLeaders }

func handleElectLeaders(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ElectLeadersRequest)
	resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
	timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
	if timeout <= 0 || timeout > time.Minute {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	electionType := req.ElectionType
	if r.Version == 0 {
		electionType = 0
	}
	if electionType != 0 && electionType != 1 {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return &Reply{Msg: resp}, nil
	}
	st := b.meta.State()
	all := req.Topics == nil
	topics := req.Topics
	if all {
		for _, t := range st.Topics() {
			rt := kmsg.NewElectLeadersRequestTopic()
			rt.Topic = t.Name
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, p.Index)
			}
			topics = append(topics, rt)
		}
	}
	for _, t := range topics {
		rt := kmsg.NewElectLeadersResponseTopic()
		rt.Topic = t.Topic
		mt, ok := st.Topic(t.Topic)
		for _, idx := range t.Partitions {
			var err error
			if !ok || idx < 0 || int(idx) >= len(mt.Partitions) {
				err = kerr.UnknownTopicOrPartition
			} else {
				err = b.electLeader(ctx, st, mt, mt.Partitions[idx], electionType)
			}
			if all && errors.Is(err, kerr.ElectionNotNeeded) {
				continue
			}
			rp := kmsg.NewElectLeadersResponseTopicPartition()
			rp.Partition = idx
			if err != nil {
				rp.ErrorCode = errCode(err)
				rp.ErrorMessage = errMessage(err)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		if all && len(rt.Partitions) == 0 {
			continue
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}

// electLeader runs one partition's election of the given type (0 preferred,
// 1 unclean) and answers as ElectLeaders does (nil: the new leader is
// committed).
func (b *Broker) electLeader(ctx context.Context, st *metadata.State, t *metadata.Topic, p *metadata.Partition, electionType int8) error {
	if electionType == 1 {
		return b.electUnclean(ctx, st, t, p)
	}
	if len(p.Replicas) == 0 {
		return kerr.PreferredLeaderNotAvailable
	}
	pref := p.Replicas[0]
	if p.Leader == pref {
		return kerr.ElectionNotNeeded
	}
	br, ok := st.Broker(pref)
	if !ok || br.Fenced || br.InControlledShutdown || !slices.Contains(p.ISR, pref) {
		return kerr.PreferredLeaderNotAvailable
	}
	_, _, err := b.store.propose(ctx, &metadata.ChangeLeaderAndISR{TopicID: t.ID, Partition: p.Index,
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, Leader: pref, ISR: p.ISR})
	switch {
	case errors.Is(err, metadata.ErrIneligibleReplica):
		return kerr.PreferredLeaderNotAvailable
	case errors.Is(err, metadata.ErrStaleEpoch):
		// The partition changed meanwhile (the controller may have
		// moved it already): look again.
		nst := b.meta.State()
		if nt, ok := nst.TopicByID(t.ID); ok && int(p.Index) < len(nt.Partitions) && nt.Partitions[p.Index].Leader == pref {
			return nil
		}
		return kerr.PreferredLeaderNotAvailable
	}
	return err
}

// electUnclean runs an unclean election (ElectLeaders type 1) of a partition
// without a leader: the first eligible ISR member in replica order, or else
// the first eligible replica with the ISR reset to it (Kafka's
// PartitionChangeBuilder, Election.UNCLEAN).
func (b *Broker) electUnclean(ctx context.Context, st *metadata.State, t *metadata.Topic, p *metadata.Partition) error {
	if p.Leader != metadata.NoLeader {
		return kerr.ElectionNotNeeded
	}
	cmd := &metadata.ChangeLeaderAndISR{TopicID: t.ID, Partition: p.Index, LeaderEpoch: p.LeaderEpoch,
		PartitionEpoch: p.PartitionEpoch, Leader: metadata.NoLeader, ISR: p.ISR}
	for _, r := range p.Replicas {
		if slices.Contains(p.ISR, r) && st.ISREligible(r, -1) {
			cmd.Leader = r
			break
		}
	}
	if cmd.Leader == metadata.NoLeader {
		for _, r := range p.Replicas {
			if st.ISREligible(r, -1) {
				cmd.Leader, cmd.ISR, cmd.Unclean = r, []int32{r}, true
				break
			}
		}
	}
	if cmd.Leader == metadata.NoLeader {
		return kerr.EligibleLeadersNotAvailable
	}
	_, _, err := b.store.propose(ctx, cmd)
	switch {
	case errors.Is(err, metadata.ErrIneligibleReplica):
		return kerr.EligibleLeadersNotAvailable
	case errors.Is(err, metadata.ErrStaleEpoch):
		// The partition changed meanwhile (the controller may have
		// elected a leader already): look again.
		nst := b.meta.State()
		if nt, ok := nst.TopicByID(t.ID); ok && int(p.Index) < len(nt.Partitions) && nt.Partitions[p.Index].Leader != metadata.NoLeader {
			return kerr.ElectionNotNeeded
		}
		return kerr.EligibleLeadersNotAvailable
	}
	return err
}
