package metadata

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestPlanFencesByRenewal: planLeadership fences by when the controller
// saw a session renewed (its monotonic clock), whatever LastHeartbeatMs (a
// proposer's wall clock) says.
func TestPlanFencesByRenewal(t *testing.T) {
	const now = int64(50_000)
	st := newState()
	for id := int32(1); id <= 3; id++ {
		// Wall clocks far in the past and far in the future.
		st.putBroker(&Broker{ID: id, Epoch: int64(id), LastHeartbeatMs: []int64{0, 1 << 50, -1 << 40}[id-1]})
	}
	renewed := map[int32]int64{1: now - defaultSessionTimeoutMs, 2: now - defaultSessionTimeoutMs - 1, 3: now}
	cmds, _ := planLeadership(st, now, func(id int32) int64 { return renewed[id] }, rebalance{}, 0)
	if len(cmds) != 1 {
		t.Fatalf("planned %v, want broker 2 fenced alone", cmds)
	}
	if f, ok := cmds[0].(*FenceBroker); !ok || f.BrokerID != 2 || f.BrokerEpoch != 2 {
		t.Fatalf("planned %#v, want FenceBroker{2, 2}", cmds[0])
	}
}

// fakeClocks is a wall clock and a monotonic one that tests move apart.
type fakeClocks struct{ wallMs, monoMs atomic.Int64 }

func (c *fakeClocks) now() time.Time { return time.UnixMilli(c.wallMs.Load()) }
func (c *fakeClocks) monotonic() time.Duration {
	return time.Duration(c.monoMs.Load()) * time.Millisecond
}
func (c *fakeClocks) advance(d time.Duration) {
	c.wallMs.Add(d.Milliseconds())
	c.monoMs.Add(d.Milliseconds())
}
func (c *fakeClocks) stepWall(d time.Duration) { c.wallMs.Add(d.Milliseconds()) }

// TestControllerSessionsIgnoreWallClockJumps: the controller (ticked by
// hand on a single node) fences by its monotonic clock alone. While brokers
// heartbeat, the leader's wall clock stepping minutes forward (between a
// heartbeat and a tick) or an hour back fences none of them; a broker that
// stops heartbeating, its last heartbeat stamped an hour ahead by a clock
// that then stepped back, is fenced once a session timeout has passed on
// the monotonic clock, not before; a new controller gives a broker a full
// session from when it took over.
// clockedNode is a single node on fakeClocks whose controller the test
// ticks by hand, with brokers 2 and 3 registered: not voters, so no
// liveness probe, sessions only.
type clockedNode struct {
	t      *testing.T
	n      *Node
	clk    *fakeClocks
	epochs map[int32]int64
}

func openClocked(t *testing.T, tweak func(*Config)) *clockedNode {
	clk := &fakeClocks{}
	clk.wallMs.Store(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC).UnixMilli())
	clk.monoMs.Store(1000)
	cfg := fastConfig(t, 1, t.TempDir())
	cfg.Bootstrap = true
	cfg.DisableController = true // ticked by the test
	cfg.Now, cfg.Monotonic = clk.now, clk.monotonic
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if err := n.WaitForLeader(testContext(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	c := &clockedNode{t: t, n: n, clk: clk, epochs: map[int32]int64{}}
	for id := int32(2); id <= 3; id++ {
		c.epochs[id] = mustPropose(t, n, &RegisterBroker{BrokerID: id, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1}).BrokerEpoch
	}
	return c
}

func (c *clockedNode) heartbeat(ids ...int32) {
	c.t.Helper()
	for _, id := range ids {
		if res := mustPropose(c.t, c.n, &BrokerHeartbeat{BrokerID: id, BrokerEpoch: c.epochs[id]}); res.Fenced {
			c.t.Fatalf("broker %d still fenced after a heartbeat", id)
		}
	}
}

func (c *clockedNode) fenced(id int32) bool {
	b, ok := c.n.State().Broker(id)
	return !ok || b.Fenced
}

func TestControllerSessionsIgnoreWallClockJumps(t *testing.T) {
	cn := openClocked(t, nil)
	n, clk, heartbeat, fenced := cn.n, cn.clk, cn.heartbeat, cn.fenced
	timeout := time.Duration(defaultSessionTimeoutMs) * time.Millisecond

	heartbeat(2, 3)
	c := newController(n)
	c.tick()
	for i := range 30 {
		clk.advance(time.Second)
		heartbeat(2, 3)
		switch i {
		case 5:
			clk.stepWall(10 * time.Minute)
		case 15:
			clk.stepWall(-time.Hour)
		}
		c.tick()
		for id := int32(2); id <= 3; id++ {
			if fenced(id) {
				t.Fatalf("step %d: broker %d fenced while heartbeating (wall clock stepped)", i, id)
			}
		}
	}

	// Broker 3's last heartbeat is stamped an hour ahead of the wall clock
	// that follows.
	clk.stepWall(time.Hour)
	heartbeat(2, 3)
	clk.stepWall(-time.Hour)
	for k := 1; k <= 12; k++ {
		clk.advance(time.Second)
		heartbeat(2)
		c.tick()
		if fenced(2) {
			t.Fatalf("%d s on: broker 2 fenced while heartbeating", k)
		}
		if want := time.Duration(k)*time.Second > timeout; fenced(3) != want {
			t.Fatalf("%d s after broker 3's last heartbeat (session timeout %v): fenced %v, want %v", k, timeout, fenced(3), want)
		}
	}

	// Broker 2 stops; a minute passes with no controller; a new one takes
	// over and gives it a full session from then.
	clk.advance(time.Minute)
	c = newController(n)
	for k := 0; k <= 12; k++ {
		c.tick()
		if want := time.Duration(k)*time.Second > timeout; fenced(2) != want {
			t.Fatalf("%d s after the takeover: broker 2 fenced %v, want %v", k, fenced(2), want)
		}
		clk.advance(time.Second)
	}
}

// TestControllerRebalanceIgnoresWallClockJumps: a leader imbalance check is
// due an interval after the controller saw the imbalance on its monotonic
// clock; the wall clock stepping past the due time moves nothing back.
func TestControllerRebalanceIgnoresWallClockJumps(t *testing.T) {
	const interval = time.Minute
	cn := openClocked(t, func(cfg *Config) { cfg.LeaderImbalanceCheckInterval = interval })
	n, clk := cn.n, cn.clk
	cn.heartbeat(2, 3)
	id := mustPropose(t, n, &CreateTopic{Name: "t", Assignment: [][]int32{{2, 3}}}).TopicID
	// Broker 2 loses leadership to 3 and comes back: 3 leads, 2 is preferred.
	mustPropose(t, n, &FenceBroker{BrokerID: 2, BrokerEpoch: cn.epochs[2]})
	cn.heartbeat(2)
	p, _ := n.State().Partition(id, 0)
	if p.Leader != 3 {
		t.Fatalf("leader %d, want 3", p.Leader)
	}
	// 2 back in the ISR: preferred and eligible.
	mustPropose(t, n, &ChangeLeaderAndISR{TopicID: id, Partition: 0, LeaderEpoch: p.LeaderEpoch,
		PartitionEpoch: p.PartitionEpoch, Leader: 3, ISR: []int32{3, 2}})
	leader := func() int32 {
		p, _ := n.State().Partition(id, 0)
		return p.Leader
	}

	c := newController(n)
	c.tick() // sees the imbalance: a check an interval on
	for k := 1; k <= 4; k++ {
		clk.advance(10 * time.Second)
		cn.heartbeat(2, 3)
		clk.stepWall(10 * time.Minute)
		c.tick()
		if leader() != 3 {
			t.Fatalf("%v on the monotonic clock (the wall clock %v on), before the check is due: leadership moved to %d",
				time.Duration(k)*10*time.Second, time.Duration(k)*(10*time.Second+10*time.Minute), leader())
		}
	}
	clk.advance(20 * time.Second)
	cn.heartbeat(2, 3)
	c.tick()
	if leader() != 2 {
		t.Fatalf("at the due check: leader %d, want 2 (preferred)", leader())
	}
}

// TestRegisterRefusesLiveSessionAfterWallClockStep: a second broker
// registering under the id of a broker whose session is live (another
// incarnation, not naming its epoch) is refused, also when the leader's
// wall clock has stepped forward past the session timeout, which made the
// wall-clock check of apply take the session for expired; once the session
// has really expired on the monotonic clock, the registration is taken.
func TestRegisterRefusesLiveSessionAfterWallClockStep(t *testing.T) {
	cn := openClocked(t, nil)
	n, clk := cn.n, cn.clk
	cn.heartbeat(2)
	clk.stepWall(time.Hour)
	ctx := testContext(t, 10*time.Second)
	_, err := n.Propose(ctx, &RegisterBroker{BrokerID: 2, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1})
	if !errors.Is(err, ErrDuplicateBroker) {
		t.Fatalf("a second broker 2 while the first heartbeats, the wall clock an hour ahead: %v, want ErrDuplicateBroker", err)
	}
	clk.advance(time.Duration(defaultSessionTimeoutMs) * time.Millisecond)
	if _, err := n.Propose(ctx, &RegisterBroker{BrokerID: 2, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1}); err != nil {
		t.Fatalf("broker 2 registering after its session expired: %v", err)
	}
}
