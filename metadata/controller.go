package metadata

import (
	"context"
	"errors"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// maxControllerProposals bounds the proposals one controller pass makes, so a
// large cluster's rebalancing spreads over several passes.
const maxControllerProposals = 1000

// Liveness probes. A broker that stops heartbeating is fenced after the
// session timeout; but a broker whose process died is known sooner: its
// Raft address refuses connections (the kernel closed its listener). The
// controller dials a broker's Raft address (at most every probeEveryMs per
// broker) when Raft fails to heartbeat its voter, when the broker's last
// heartbeat is probeAfterMs old, and for every broker when this node becomes
// the leader; a refused connection fences it at once. A broker that is
// paused or cut off by the network does not refuse (the dial times out, or a
// relay accepts it), so it keeps its full session, as in Kafka.
const (
	probeAfterMs   = 1500
	probeEveryMs   = 500
	probeDialLimit = 500 * time.Millisecond
)

// controller runs on every node and acts only while the node leads. It is
// the single owner of its fields (run's goroutine).
type controller struct {
	n           *Node
	leading     bool
	leaderSince int64 // ms, proposer clock

	probes       chan probeResult
	observations chan raft.Observation // Raft's failed heartbeats to a voter
	probeAll     bool                  // probe every broker on the next tick (new leader)
	probeNow     map[int32]bool        // probe these on the next tick
	probing      map[int32]bool        // a probe of this broker is running
	probedAt     map[int32]int64       // ms, when it was last started
	dead         map[int32]int64       // broker id → epoch whose Raft address refused a connection
}

// probeResult is the outcome of one liveness probe.
type probeResult struct {
	id      int32
	epoch   int64
	refused bool
}

func newController(n *Node) *controller {
	return &controller{n: n, probes: make(chan probeResult), observations: make(chan raft.Observation, 16),
		probeNow: map[int32]bool{}, probing: map[int32]bool{}, probedAt: map[int32]int64{}, dead: map[int32]int64{}}
}

func (c *controller) run() {
	t := time.NewTicker(c.n.cfg.ControllerInterval)
	defer t.Stop()
	leaderCh := c.n.raft.LeaderCh()
	obs := raft.NewObserver(c.observations, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.FailedHeartbeatObservation)
		return ok
	})
	c.n.raft.RegisterObserver(obs)
	defer c.n.raft.DeregisterObserver(obs)
	for {
		select {
		case <-c.n.ctx.Done():
			return
		case <-leaderCh:
		case <-t.C:
		case o := <-c.observations:
			if f, ok := o.Data.(raft.FailedHeartbeatObservation); ok {
				if id, err := strconv.ParseInt(string(f.PeerID), 10, 32); err == nil {
					c.probeNow[int32(id)] = true
				}
			}
		case r := <-c.probes:
			delete(c.probing, r.id)
			if r.refused && c.leading {
				c.n.logger.Info("metadata: broker's Raft address refuses connections; fencing it", "broker", r.id, "epoch", r.epoch)
				c.dead[r.id] = r.epoch
			}
		}
		c.tick()
	}
}

func (c *controller) tick() {
	n := c.n
	if !n.IsLeader() {
		c.leading = false
		clear(c.dead)
		clear(c.probeNow)
		return
	}
	now := n.cfg.Now().UnixMilli()
	if !c.leading {
		c.leading = true
		c.leaderSince = now
		c.probeAll = true
		// Make sure our state includes everything committed by earlier leaders.
		if err := n.raft.Barrier(5 * time.Second).Error(); err != nil {
			c.leading = false
			return
		}
	}
	st := n.State()
	cmds := planFenceDead(st, c.dead)
	if len(cmds) == 0 {
		cmds = c.plan(st, now)
	}
	c.probeStale(st, now)
	for _, cmd := range cmds {
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

// planFenceDead fences the brokers found dead by a probe (still registered
// with the epoch probed, and not fenced yet) and forgets the others.
func planFenceDead(st *State, dead map[int32]int64) []Command {
	var out []Command
	for id, epoch := range dead {
		b, ok := st.Broker(id)
		if !ok || b.Epoch != epoch || b.Fenced {
			delete(dead, id)
			continue
		}
		out = append(out, &FenceBroker{BrokerID: id, BrokerEpoch: epoch})
	}
	return out
}

// probeStale starts a liveness probe, by the Raft address of the voter with
// its id, of each unfenced broker whose last heartbeat is probeAfterMs old
// or that was asked for (probeAll, probeNow).
func (c *controller) probeStale(st *State, now int64) {
	var voters []Peer
	all, asked := c.probeAll, c.probeNow
	c.probeAll, c.probeNow = false, map[int32]bool{}
	for _, b := range st.Brokers() {
		if b.Fenced || b.ID == c.n.cfg.NodeID || c.probing[b.ID] || now-c.probedAt[b.ID] < probeEveryMs ||
			(!all && !asked[b.ID] && now-b.LastHeartbeatMs < probeAfterMs) {
			continue
		}
		if voters == nil {
			var err error
			if voters, err = c.n.Voters(); err != nil {
				return
			}
		}
		addr := ""
		for _, v := range voters {
			if v.ID == b.ID {
				addr = v.Addr
			}
		}
		if addr == "" {
			continue // not a voter: its session timeout applies
		}
		c.probing[b.ID], c.probedAt[b.ID] = true, now
		r := probeResult{id: b.ID, epoch: b.Epoch}
		dial := c.n.cfg.Dial
		started := c.n.goTracked("", func() {
			conn, err := dial(addr, probeDialLimit)
			if err == nil {
				conn.Close()
			}
			r.refused = errors.Is(err, syscall.ECONNREFUSED)
			select {
			case c.probes <- r:
			case <-c.n.ctx.Done():
			}
		})
		if !started {
			delete(c.probing, b.ID)
			return
		}
	}
}
