package metadata

import (
	"context"
	"errors"
	"time"
)

// maxControllerProposals bounds the proposals one controller pass makes, so a
// large cluster's rebalancing spreads over several passes.
const maxControllerProposals = 1000

// controller runs on every node and acts only while the node leads. It is
// the single owner of its fields (run's goroutine).
type controller struct {
	n           *Node
	leading     bool
	leaderSince int64 // ms, proposer clock
}

func newController(n *Node) *controller { return &controller{n: n} }

func (c *controller) run() {
	t := time.NewTicker(c.n.cfg.ControllerInterval)
	defer t.Stop()
	leaderCh := c.n.raft.LeaderCh()
	for {
		select {
		case <-c.n.ctx.Done():
			return
		case <-leaderCh:
		case <-t.C:
		}
		c.tick()
	}
}

func (c *controller) tick() {
	n := c.n
	if !n.IsLeader() {
		c.leading = false
		return
	}
	now := n.cfg.Now().UnixMilli()
	if !c.leading {
		c.leading = true
		c.leaderSince = now
		// Make sure our state includes everything committed by earlier leaders.
		if err := n.raft.Barrier(5 * time.Second).Error(); err != nil {
			c.leading = false
			return
		}
	}
	for _, cmd := range c.plan(n.State(), now) {
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		_, err := n.Propose(ctx, cmd)
		cancel()
		if err != nil {
			if n.ctx.Err() != nil || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoQuorum) {
				return
			}
			n.logger.Debug("metadata: controller proposal refused", "command", cmd.Type(), "err", err)
		}
	}
}

// plan decides what the controller proposes given the state at time now.
// It is a pure function of its inputs, so it is tested directly.
func (c *controller) plan(st *State, now int64) []Command {
	var out []Command
	if st.ClusterID == "" {
		id := c.n.cfg.ClusterID
		if id == "" {
			id = NewUUID().String()
		}
		out = append(out, &SetClusterID{ClusterID: id})
	}
	return append(out, planLeadership(st, now, c.leaderSince)...)
}

// planLeadership fences brokers whose session expired (counting from when
// this controller took over, at the earliest, so brokers get a full session to
// find a new leader), elects leaders for partitions that have none but could,
// and moves leadership back to preferred replicas.
func planLeadership(st *State, now, leaderSince int64) []Command {
	var out []Command
	timeout := sessionTimeoutMs(st)
	for _, b := range st.Brokers() {
		if !b.Fenced && max(b.LastHeartbeatMs, leaderSince)+timeout < now {
			out = append(out, &FenceBroker{BrokerID: b.ID, BrokerEpoch: b.Epoch})
		}
	}
	if len(out) > 0 {
		// Elections are planned on the state after the fencing commits.
		return out
	}
	for it := st.topics.Iterator(); !it.Done() && len(out) < maxControllerProposals; {
		_, t, _ := it.Next()
		for _, p := range t.Partitions {
			if len(out) >= maxControllerProposals {
				break
			}
			target := NoLeader
			if p.Leader == NoLeader {
				target = electLeader(st, t, p)
			} else if pref := p.Replicas[0]; p.Leader != pref && contains(p.ISR, pref) && eligible(st, pref) {
				target = pref
			}
			if target == NoLeader {
				continue
			}
			isr := p.ISR
			if !contains(isr, target) {
				isr = []int32{target} // unclean election
			}
			out = append(out, &ChangeLeaderAndISR{TopicID: t.ID, Partition: p.Index,
				LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, Leader: target, ISR: isr})
		}
	}
	return out
}
