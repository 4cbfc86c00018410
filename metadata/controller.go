package metadata

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
)

// maxControllerProposals bounds the proposals one controller pass makes, so a
// large cluster's rebalancing spreads over several passes.
const maxControllerProposals = 1000

// Liveness probes. A broker that stops heartbeating is fenced after the
// session timeout (on the controller's monotonic clock: sessionClock); but a
// broker whose process died is known sooner: its Raft address refuses
// connections (the kernel closed its listener). The controller dials a
// broker's Raft address (at most every probeEveryMs per broker) when Raft
// fails to heartbeat its voter, when the broker's session was renewed
// probeAfterMs ago (on the same clock), and for every broker when this node
// becomes the leader; a refused connection fences it at once. A broker that is
// paused or cut off by the network does not refuse (the dial times out, or a
// relay accepts it), so it keeps its full session, as in Kafka.
const (
	probeAfterMs   = 1500
	probeEveryMs   = 500
	probeDialLimit = 500 * time.Millisecond
)

// controller runs on every node and acts only while the node leads. It is
// the single owner of its fields (run's goroutine). Its times are ms on the
// node's monotonic clock (Config.Monotonic), never the wall clock.
type controller struct {
	n       *Node
	leading bool
	since   int64 // ms, when this node took over as controller

	probes       chan probeResult
	observations chan raft.Observation // Raft's failed heartbeats to a voter
	probeAll     bool                  // probe every broker on the next tick (new leader)
	probeNow     map[int32]bool        // probe these on the next tick
	probing      map[int32]bool        // a probe of this broker is running
	probedAt     map[int32]int64       // ms, when one was last started
	dead         map[int32]int64       // broker id → epoch whose Raft address refused a connection
	// balanceDue is when the next leader imbalance check runs (ms); 0
	// while none is scheduled (planLeadership).
	balanceDue int64
	// transferFailed: this leader's state machine stopped and the last
	// hand-over failed (logged once).
	transferFailed bool
}

// rebalance configures the automatic preferred leader election (Kafka's
// auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds,
// leader.imbalance.per.broker.percentage; Config).
type rebalance struct {
	enabled    bool
	intervalMs int64
	percentage int
}

func (c Config) rebalance() rebalance {
	return rebalance{enabled: !c.DisableAutoLeaderRebalance, intervalMs: c.LeaderImbalanceCheckInterval.Milliseconds(),
		percentage: c.LeaderImbalancePerBrokerPercentage}
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
		c.balanceDue = 0
		clear(c.dead)
		clear(c.probeNow)
		return
	}
	if err := n.fsm.err(); err != nil {
		// This node cannot apply the log (an entry of a newer binary): it
		// must not lead, or every proposal of the cluster is refused
		// (proposeLocalIf) and its plans would read a stale state. Hand
		// the leadership to another voter, picked at random: the most
		// up-to-date one, raft's own choice, may be stopped too (another
		// broker not yet upgraded), and the two would hand it back and
		// forth. A lone voter cannot.
		c.leading = false
		if f := c.transferTarget(); n.wait(n.ctx, f) != nil {
			if !c.transferFailed {
				n.logger.Error("metadata: this leader's state machine stopped and no other voter takes the leadership", "err", err)
			}
			c.transferFailed = true
		} else {
			n.logger.Warn("metadata: handed the metadata leadership over: this node's state machine stopped", "err", err)
		}
		return
	}
	c.transferFailed = false
	now := n.cfg.Monotonic().Milliseconds()
	if !c.leading {
		c.leading = true
		c.since = now
		c.balanceDue = 0 // a new controller schedules its first check afresh, as Kafka's does
		c.probeAll = true
		// Make sure our state includes everything committed by earlier leaders.
		if err := n.wait(n.ctx, n.raft.Barrier(5*time.Second)); err != nil {
			c.leading = false
			return
		}
	}
	st := n.State()
	// Read after the state: every renewal the state shows is recorded
	// (sessionClock).
	renewals := n.sessions.renewals()
	renewed := func(id int32) int64 {
		if at, ok := renewals[id]; ok && at > c.since {
			return at
		}
		return c.since // a full session from the takeover
	}
	cmds := planFenceDead(st, c.dead)
	balancing := false // this pass runs a leader imbalance check
	sessionFences := len(cmds) == 0
	if sessionFences {
		balancing = c.balanceDue != 0 && now >= c.balanceDue
		cmds, c.balanceDue = c.plan(st, now, renewed, c.balanceDue)
	}
	c.probeStale(st, now, renewed)
	timeout := sessionTimeoutMs(st)
	moved := 0 // leaderships changed by a leader imbalance check
	defer func() {
		if moved > 0 {
			// As Kafka's controller logs its preferred replica
			// elections: the brokers log each partition's new leader.
			n.logger.Info("metadata: leader imbalance check moved leaderships to preferred replicas", "partitions", moved)
		}
	}()
	for _, cmd := range cmds {
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		var err error
		if f, ok := cmd.(*FenceBroker); ok && sessionFences {
			// st may not show a heartbeat already in the log: fence only
			// if the session has still lapsed when the fence is appended.
			_, err = n.proposeLocalIf(ctx, cmd, func() error {
				if !n.sessions.lapsed(f.BrokerID, c.since, timeout) {
					return errNotDue
				}
				return nil
			})
			if errors.Is(err, raft.ErrNotLeader) {
				err = ErrNotLeader
			}
		} else {
			_, err = n.Propose(ctx, cmd)
		}
		cancel()
		if _, ok := cmd.(*ChangeLeaderAndISR); ok && err == nil && balancing {
			moved++
		}
		if f, ok := cmd.(*FenceBroker); ok && err == nil {
			// As Kafka's controller logs "Fencing broker N because its
			// session has timed out": its partitions lose it from their
			// ISRs and their leadership, which the brokers log.
			if sessionFences {
				n.logger.Info("metadata: fenced broker: no heartbeat within its session timeout", "broker", f.BrokerID, "epoch", f.BrokerEpoch,
					"session_timeout", time.Duration(timeout)*time.Millisecond)
			} else {
				n.logger.Info("metadata: fenced broker: its Raft address refuses connections", "broker", f.BrokerID, "epoch", f.BrokerEpoch)
			}
		}
		if err != nil {
			if n.ctx.Err() != nil || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoQuorum) {
				return
			}
			n.logger.Debug("metadata: controller proposal refused", "command", cmd.Type(), "err", err)
			if _, ok := cmd.(*ChangeLeaderAndISR); ok && balancing && c.balanceDue == 0 {
				// The partition changed meanwhile (a stale epoch): check
				// again on the next pass, on the new state, rather than
				// an interval on.
				c.balanceDue = now
			}
		}
	}
}

// transferTarget starts the hand-over of the leadership to a voter other
// than this node, picked at random.
func (c *controller) transferTarget() raft.Future {
	f := c.n.raft.GetConfiguration()
	if err := c.n.wait(c.n.ctx, f); err != nil {
		return c.n.raft.LeadershipTransfer()
	}
	var others []raft.Server
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != raft.ServerID(strconv.Itoa(int(c.n.cfg.NodeID))) {
			others = append(others, s)
		}
	}
	if len(others) == 0 {
		return c.n.raft.LeadershipTransfer() // fails: no other voter
	}
	s := others[rand.IntN(len(others))]
	return c.n.raft.LeadershipTransferToServer(s.ID, s.Address)
}

// plan decides what the controller proposes given the state at time now,
// when each broker's session was last renewed and when the next leader
// imbalance check is due (0: none scheduled), all ms on the controller's
// monotonic clock; it returns the commands and the new due time. It is a
// pure function of its inputs, so it is tested directly.
func (c *controller) plan(st *State, now int64, renewed func(id int32) int64, balanceDue int64) ([]Command, int64) {
	var out []Command
	if st.ClusterID == "" {
		id := c.n.cfg.ClusterID
		if id == "" {
			id = NewUUID().String()
		}
		out = append(out, &SetClusterID{ClusterID: id})
	}
	cmds, due := planLeadership(st, now, renewed, c.n.cfg.rebalance(), balanceDue)
	return append(out, cmds...), due
}

// planLeadership fences brokers whose session expired: renewed(id), when
// broker id's session was last renewed (the controller counts from when it
// took over at the earliest, so brokers get a full session to find a new
// leader), is more than the session timeout before now. It elects leaders
// for partitions that have none but could, at once. Leadership goes back to preferred replicas only at leader
// imbalance checks, as Kafka's controller does it:
//
//   - While no check is scheduled (balanceDue 0), a partition led by
//     another replica than its first (or by none) schedules one
//     rb.intervalMs from now (KRaft's QuorumController schedules its
//     maybeBalancePartitionLeaders so after a write leaves an imbalance;
//     a broker that unfences or rejoins an ISR brings nothing forward).
//   - When the check is due (now ≥ balanceDue), for each broker it counts
//     the partitions whose preferred replica (Replicas[0]) it is and those
//     of them it does not lead; where the second is more than
//     rb.percentage percent of the first (Kafka's ZooKeeper-mode
//     checkAndTriggerAutoLeaderRebalance; its KRaft controller ignores
//     leader.imbalance.per.broker.percentage, as 0 here does), every such
//     partition that has a leader and whose preferred replica is in the
//     ISR and eligible is moved back. The check then ends (balanceDue 0),
//     so a remaining imbalance schedules the next one an interval on,
//     unless the maxControllerProposals cap left elections out: then the
//     check runs again on the next tick.
//
// With !rb.enabled no check is scheduled. now, renewed's results and
// balanceDue are ms on one clock: the controller's monotonic clock (never
// the state's LastHeartbeatMs, a wall clock). It returns the commands and
// the new balanceDue.
func planLeadership(st *State, now int64, renewed func(id int32) int64, rb rebalance, balanceDue int64) ([]Command, int64) {
	var out []Command
	timeout := sessionTimeoutMs(st)
	for _, b := range st.Brokers() {
		if !b.Fenced && renewed(b.ID)+timeout < now {
			out = append(out, &FenceBroker{BrokerID: b.ID, BrokerEpoch: b.Epoch})
		}
	}
	if len(out) > 0 {
		// Elections are planned on the state after the fencing commits.
		return out, balanceDue
	}
	type preferredMove struct {
		t *Topic
		p *Partition
	}
	var (
		imbalanced bool
		preferred  = map[int32]int{} // broker → partitions it is the preferred replica of
		notLed     = map[int32]int{} // of those, the ones it does not lead
		moves      []preferredMove   // partitions whose preferred replica could lead now
	)
	elect := func(t *Topic, p *Partition, target int32) {
		isr := p.ISR
		if !contains(isr, target) {
			isr = []int32{target} // unclean election
		}
		out = append(out, &ChangeLeaderAndISR{TopicID: t.ID, Partition: p.Index,
			LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, Leader: target, ISR: isr})
	}
	due := rb.enabled && balanceDue != 0 && now >= balanceDue
	for it := st.topics.Iterator(); !it.Done(); {
		_, t, _ := it.Next()
		for _, p := range t.Partitions {
			if p.Leader == NoLeader && len(out) < maxControllerProposals {
				if target := electLeader(st, t, p); target != NoLeader {
					elect(t, p, target)
				}
			}
			if len(p.Replicas) == 0 {
				continue
			}
			pref := p.Replicas[0]
			if p.Leader == pref {
				if due {
					preferred[pref]++
				}
				continue
			}
			imbalanced = true
			if !due {
				continue
			}
			preferred[pref]++
			notLed[pref]++
			// A partition with no leader was elected for above (its
			// preferred replica first, when it may lead).
			if p.Leader != NoLeader && contains(p.ISR, pref) && eligible(st, pref) {
				moves = append(moves, preferredMove{t, p})
			}
		}
	}
	switch {
	case !rb.enabled:
		return out, 0
	case !due:
		if balanceDue == 0 && imbalanced {
			balanceDue = now + rb.intervalMs
		}
		return out, balanceDue
	}
	next := int64(0)
	for _, m := range moves {
		pref := m.p.Replicas[0]
		if notLed[pref]*100 <= rb.percentage*preferred[pref] {
			continue // this broker's imbalance is within the allowed ratio
		}
		if len(out) >= maxControllerProposals {
			next = now // the rest on the next tick
			break
		}
		elect(m.t, m.p, pref)
	}
	return out, next
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
// its id, of each unfenced broker whose session was renewed probeAfterMs
// ago or that was asked for (probeAll, probeNow).
func (c *controller) probeStale(st *State, now int64, renewed func(id int32) int64) {
	var voters []Peer
	all, asked := c.probeAll, c.probeNow
	c.probeAll, c.probeNow = false, map[int32]bool{}
	for _, b := range st.Brokers() {
		if b.Fenced || b.ID == c.n.cfg.NodeID || c.probing[b.ID] || (!all && !asked[b.ID] && now-renewed(b.ID) < probeAfterMs) {
			continue
		}
		if at, ok := c.probedAt[b.ID]; ok && now-at < probeEveryMs {
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
			r.refused = refusesConnections(dial, addr, probeDialLimit)
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
