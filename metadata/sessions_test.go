package metadata

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sediment-io/sediment/internal/testutil"
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
	var logs testutil.Buffer
	cn := openClocked(t, func(cfg *Config) {
		cfg.LeaderImbalanceCheckInterval = interval
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
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
	// The controller says so (an operations review saw leaders move back
	// with nothing logged but each broker's new leadership).
	if !strings.Contains(logs.String(), `msg="metadata: leader imbalance check moved leaderships to preferred replicas" node=1 partitions=1`) {
		t.Errorf("no log line of the imbalance check's move:\n%s", logs.String())
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

// TestControllerSparesHeartbeatInFlight: the controller plans a session
// fence on a State that does not show a heartbeat already appended to the
// log (here held before the FSM applies it). The fence must not land after
// that heartbeat: the broker would be fenced although it renewed its
// session in time. Once the heartbeat is applied, a tick fences nothing;
// a session that really lapses is fenced; a renewal whose outcome never
// comes spares the broker for one session timeout at most.
func TestControllerSparesHeartbeatInFlight(t *testing.T) {
	var gate struct {
		armed   atomic.Bool
		held    chan struct{}
		release chan struct{}
	}
	gate.held, gate.release = make(chan struct{}), make(chan struct{})
	cn := openClocked(t, func(cfg *Config) {
		cfg.beforeObserve = func(changes []Change) {
			for _, c := range changes {
				if hb, ok := c.Command.(*BrokerHeartbeat); ok && hb.BrokerID == 3 && gate.armed.CompareAndSwap(true, false) {
					close(gate.held)
					<-gate.release
				}
			}
		}
	})
	n, clk := cn.n, cn.clk
	timeout := time.Duration(defaultSessionTimeoutMs) * time.Millisecond
	cn.heartbeat(2, 3)
	c := newController(n)
	c.tick()

	// Broker 3's next heartbeat comes just as its session ends: appended,
	// held before it is applied.
	clk.advance(timeout + time.Millisecond)
	cn.heartbeat(2)
	gate.armed.Store(true)
	hb := make(chan error, 1)
	go func() {
		res, err := n.Propose(testContext(t, 30*time.Second), &BrokerHeartbeat{BrokerID: 3, BrokerEpoch: cn.epochs[3]})
		if err == nil && res.Fenced {
			err = errors.New("still fenced after its heartbeat")
		}
		hb <- err
	}()
	<-gate.held
	if cn.fenced(3) {
		t.Fatal("broker 3 fenced before the tick")
	}
	c.tick() // plans a fence of broker 3: its State shows no renewal
	close(gate.release)
	if err := <-hb; err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if _, err := n.WaitForVersion(testContext(t, 10*time.Second), n.raft.LastIndex()); err != nil {
		t.Fatal(err)
	}
	if cn.fenced(3) {
		t.Fatal("broker 3 fenced by a fence appended after its heartbeat")
	}
	c.tick()
	if cn.fenced(2) || cn.fenced(3) {
		t.Fatal("a broker fenced within its session")
	}

	// Broker 3 stops: fenced once its session lapses.
	clk.advance(timeout + time.Millisecond)
	cn.heartbeat(2)
	c.tick()
	if !cn.fenced(3) || cn.fenced(2) {
		t.Fatalf("fenced: broker 2 %v (heartbeating), broker 3 %v (silent for %v)", cn.fenced(2), cn.fenced(3), timeout)
	}
}

// TestSessionClockLapsed: a renewal in flight keeps a session alive until it
// is applied, but not longer than a session timeout after it was appended.
func TestSessionClockLapsed(t *testing.T) {
	var mono atomic.Int64
	s := newSessionClock(func() time.Duration { return time.Duration(mono.Load()) * time.Millisecond })
	const timeout = 1000
	mono.Store(5000)
	s.observe([]Change{{Command: &BrokerHeartbeat{BrokerID: 1}}}, false)
	for _, c := range []struct {
		at       int64
		begin    bool
		end      bool
		want     bool
		whatWhen string
	}{
		{at: 6000, want: false, whatWhen: "a session timeout after the renewal"},
		{at: 6001, want: true, whatWhen: "past it"},
		{at: 6001, begin: true, want: false, whatWhen: "a renewal appended, not applied"},
		{at: 7001, want: false, whatWhen: "a session timeout after it was appended"},
		{at: 7002, want: true, whatWhen: "past it, still unanswered"},
		{at: 7002, begin: true, want: false, whatWhen: "a second one appended"},
		{at: 7002, end: true, want: false, whatWhen: "one of two answered, without a renewal"},
		{at: 7002, end: true, want: true, whatWhen: "both answered, without a renewal"},
	} {
		mono.Store(c.at)
		if c.begin {
			s.begin(1)
		}
		if c.end {
			s.end(1)
		}
		if got := s.lapsed(1, 0, timeout); got != c.want {
			t.Fatalf("%s (at %d ms): lapsed %v, want %v", c.whatWhen, c.at, got, c.want)
		}
	}
	if s.lapsed(2, 7000, timeout) {
		t.Fatal("a broker never renewed, within a session timeout of the takeover: lapsed")
	}
	if !s.lapsed(2, 6000, timeout) {
		t.Fatal("a broker never renewed, a session timeout after the takeover: not lapsed")
	}
}
