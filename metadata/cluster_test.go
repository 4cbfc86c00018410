package metadata

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sediment-io/sediment/internal/testutil"
)

// testCluster is a set of voters on 127.0.0.1, each in its own directory.
type testCluster struct {
	t     testing.TB
	cfgs  map[int32]Config
	nodes map[int32]*Node
}

func (c *testCluster) open(id int32) *Node {
	c.t.Helper()
	n, err := Open(c.cfgs[id])
	if err != nil {
		c.t.Fatalf("open node %d: %v", id, err)
	}
	c.nodes[id] = n
	// Restarts listen on the same address.
	cfg := c.cfgs[id]
	cfg.RaftAddr = n.Addr()
	c.cfgs[id] = cfg
	return n
}

func (c *testCluster) stop(id int32) {
	c.t.Helper()
	if err := c.nodes[id].Close(); err != nil {
		c.t.Logf("close node %d: %v", id, err)
	}
	delete(c.nodes, id)
}

// newCluster starts node 1 as a quorum of one and adds the others as voters.
func newCluster(t testing.TB, size int, tweak func(*Config)) *testCluster {
	c := &testCluster{t: t, cfgs: map[int32]Config{}, nodes: map[int32]*Node{}}
	t.Cleanup(func() {
		for id := range c.nodes {
			c.stop(id)
		}
	})
	for id := int32(1); id <= int32(size); id++ {
		cfg := fastConfig(t, id, t.TempDir())
		cfg.Bootstrap = id == 1
		if tweak != nil {
			tweak(&cfg)
		}
		c.cfgs[id] = cfg
		c.open(id)
	}
	ctx := testContext(t, 20*time.Second)
	if err := c.nodes[1].WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	for id := int32(2); id <= int32(size); id++ {
		if err := c.nodes[1].AddVoter(ctx, Peer{ID: id, Addr: c.nodes[id].Addr()}); err != nil {
			t.Fatalf("add voter %d: %v", id, err)
		}
	}
	for _, n := range c.nodes {
		if err := n.WaitForLeader(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (c *testCluster) leader() *Node {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range c.nodes {
			if n.IsLeader() {
				return n
			}
		}
		waitABit()
	}
	c.t.Fatal("no leader")
	return nil
}

func (c *testCluster) follower() *Node {
	for _, n := range c.nodes {
		if !n.IsLeader() {
			return n
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// waitABit paces polling loops; the condition, not the pause, synchronises.
func waitABit() { <-time.After(10 * time.Millisecond) }

// eventually polls cond until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		waitABit()
	}
	t.Fatalf("%s: %v", what, err)
}

// converged waits until every node's state equals the leader's (ignoring the
// version line, which differs by no-op entries only transiently).
func (c *testCluster) converged() string {
	c.t.Helper()
	var want string
	eventually(c.t, 20*time.Second, "states converge", func() error {
		ref := c.leader().State()
		for id, n := range c.nodes {
			if got := n.State(); got.Version != ref.Version || got.String() != ref.String() {
				return fmt.Errorf("node %d at %d, leader at %d", id, got.Version, ref.Version)
			}
		}
		want = ref.String()
		return nil
	})
	return want
}

func TestClusterLeaderFailover(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.TrailingLogs = 4 })
	ctx := testContext(t, 60*time.Second)
	reg := mustPropose(t, c.follower(), &RegisterBroker{BrokerID: 0, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1})
	mustPropose(t, c.follower(), &BrokerHeartbeat{BrokerID: 0, BrokerEpoch: reg.BrokerEpoch})
	var committed []string
	for i := range 20 {
		name := fmt.Sprintf("t%d", i)
		mustPropose(t, c.nodes[int32(1+i%3)], &CreateTopic{Name: name, NumPartitions: 1, ReplicationFactor: 1})
		committed = append(committed, name)
	}
	// Forwarded rejections keep their identity.
	if _, err := c.follower().Propose(ctx, &CreateTopic{Name: "t0", NumPartitions: 1, ReplicationFactor: 1}); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("forwarded duplicate: %v", err)
	}
	c.converged()

	old := c.leader()
	oldID := old.ID()
	if err := old.Snapshot(); err != nil {
		t.Fatal(err)
	}
	c.stop(oldID)
	nl := c.leader()
	if nl.ID() == oldID {
		t.Fatal("old leader still leads")
	}
	for i := 20; i < 30; i++ {
		name := fmt.Sprintf("t%d", i)
		mustPropose(t, c.follower(), &CreateTopic{Name: name, NumPartitions: 1, ReplicationFactor: 1})
		committed = append(committed, name)
	}
	// A linearizable read on a follower sees every committed command.
	st, err := c.follower().Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range committed {
		if _, ok := st.Topic(name); !ok {
			t.Fatalf("committed topic %s lost after failover", name)
		}
	}
	// The old leader restarts from its snapshot and log and catches up.
	c.open(oldID)
	if err := nl.Snapshot(); err != nil {
		t.Fatal(err)
	}
	mustPropose(t, nl, &CreateTopic{Name: "after-restart", NumPartitions: 1, ReplicationFactor: 1})
	want := c.converged()
	if _, ok := c.nodes[oldID].State().Topic("after-restart"); !ok {
		t.Fatalf("restarted voter did not catch up:\n%s", want)
	}
}

func TestClusterSnapshotInstallOnNewVoter(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.TrailingLogs = 2 })
	reg := mustPropose(t, c.leader(), &RegisterBroker{BrokerID: 0, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1})
	mustPropose(t, c.leader(), &BrokerHeartbeat{BrokerID: 0, BrokerEpoch: reg.BrokerEpoch})
	for i := range 30 {
		mustPropose(t, c.leader(), &CreateTopic{Name: fmt.Sprintf("s%d", i), NumPartitions: 2, ReplicationFactor: 1})
	}
	mustPropose(t, c.leader(), &AcquireLease{Kind: "compact", Resource: "s1-0", Holder: "w", TTLMs: 60000})
	if err := c.leader().Snapshot(); err != nil {
		t.Fatal(err)
	}
	// Node 4 joins after the log was truncated: it must install the snapshot.
	cfg := fastConfig(t, 4, t.TempDir())
	c.cfgs[4] = cfg
	n4 := c.open(4)
	ctx := testContext(t, 30*time.Second)
	if err := c.nodes[2].AddVoter(ctx, Peer{ID: 4, Addr: n4.Addr()}); err != nil {
		t.Fatal(err)
	}
	want := c.converged()
	if _, ok := n4.State().Lease("compact", "s1-0"); !ok {
		t.Fatalf("lease missing on new voter:\n%s", want)
	}
	voters, err := n4.Voters()
	if err != nil || len(voters) != 4 {
		t.Fatalf("voters %v %v", voters, err)
	}
	if err := n4.RemoveVoter(ctx, 4); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "voter removed", func() error {
		v, err := c.nodes[1].Voters()
		if err != nil || len(v) != 3 {
			return fmt.Errorf("voters %v %v", v, err)
		}
		return nil
	})
}

func TestClusterQuorumLoss(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testContext(t, 60*time.Second)
	mustPropose(t, c.leader(), &AcquireLease{Kind: "k", Resource: "r0", Holder: "h", TTLMs: 1000})
	// Losing a minority keeps writes working.
	c.stop(c.follower().ID())
	lease := mustPropose(t, c.follower(), &AcquireLease{Kind: "k", Resource: "r", Holder: "h", TTLMs: 1000})
	// Losing the majority: writes fail by the deadline, reads say stale.
	survivor := c.follower()
	// (A follower learns of a commit with the next append; wait for it so the
	// check below is about durability, not timing.)
	if _, err := survivor.WaitForVersion(ctx, lease.Version); err != nil {
		t.Fatal(err)
	}
	ldr := c.leader().ID()
	t.Logf("stopping leader %d; survivor %d; nodes %v", ldr, survivor.ID(), len(c.nodes))
	c.stop(ldr)
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := survivor.Propose(pctx, &AcquireLease{Kind: "k", Resource: "r2", Holder: "h", TTLMs: 1000})
	if !errors.Is(err, ErrNoQuorum) || !errors.Is(err, context.DeadlineExceeded) {
		l, _ := survivor.Leader()
		v, _ := survivor.Voters()
		t.Logf("voters %v stats %v", v, survivor.raft.Stats())
		t.Fatalf("propose without quorum: %v (survivor %d sees leader %v)", err, survivor.ID(), l)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("propose took %v to fail", d)
	}
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	if _, err := survivor.Sync(sctx); !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("linearizable read without quorum: %v", err)
	}
	eventually(t, 10*time.Second, "survivor reports stale", func() error {
		if !survivor.Stale() {
			return errors.New("not stale")
		}
		return nil
	})
	if _, ok := survivor.State().Lease("k", "r"); !ok {
		t.Fatal("survivor lost a committed lease")
	}
}

// TestClusterFencesSilentBroker: a broker that stops heartbeating is fenced
// by the controller and the partitions it led get leaders from the ISR.
func TestClusterFencesSilentBroker(t *testing.T) {
	// A leader imbalance check 200 ms after the controller sees one (not
	// Kafka's 300 s), so that the preferred leaders come back below.
	c := newCluster(t, 3, func(cfg *Config) { cfg.LeaderImbalanceCheckInterval = 200 * time.Millisecond })
	ctx := testContext(t, 60*time.Second)
	// A 2 s session: with 400 ms, on a 2-core machine at load average 20
	// under the race detector, brokers 1 and 2 (heartbeating every 50 ms)
	// were sometimes fenced too and left ISRs of broker 3 alone.
	mustPropose(t, c.leader(), &AlterConfigs{ResourceType: ResourceBroker, Ops: []ConfigOp{{Key: ConfigSessionTimeoutMs, Value: "2000"}}})
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		r := mustPropose(t, c.follower(), &RegisterBroker{BrokerID: id, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1, Rack: fmt.Sprintf("r%d", id)})
		epochs[id] = r.BrokerEpoch
		mustPropose(t, c.follower(), &BrokerHeartbeat{BrokerID: id, BrokerEpoch: r.BrokerEpoch})
	}
	res := mustPropose(t, c.leader(), &CreateTopic{Name: "events", NumPartitions: 6, ReplicationFactor: 3})
	st, err := c.leader().WaitForVersion(ctx, res.Version)
	if err != nil {
		t.Fatal(err)
	}
	topic, _ := st.TopicByID(res.TopicID)
	led := map[int32]int{}
	for _, p := range topic.Partitions {
		led[p.Leader]++
	}
	if led[1] != 2 || led[2] != 2 || led[3] != 2 {
		t.Fatalf("unbalanced preferred leaders: %v", led)
	}

	// Brokers 1 and 2 keep heartbeating (through any node); 3 goes silent.
	hbCtx, stopHB := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, id := range []int32{1, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-hbCtx.Done():
					return
				case <-tick.C:
					pctx, cancel := context.WithTimeout(hbCtx, time.Second)
					_, _ = c.nodes[id].Propose(pctx, &BrokerHeartbeat{BrokerID: id, BrokerEpoch: epochs[id]})
					cancel()
				}
			}
		}()
	}
	defer func() { stopHB(); wg.Wait() }()

	eventually(t, 15*time.Second, "broker 3 fenced, its partitions re-led from the ISR", func() error {
		st := c.leader().State()
		b, _ := st.Broker(3)
		if !b.Fenced {
			return errors.New("broker 3 not fenced")
		}
		topic, _ := st.Topic("events")
		for _, p := range topic.Partitions {
			if p.Leader == 3 || p.Leader == NoLeader || contains(p.ISR, 3) {
				return fmt.Errorf("partition %d leader %d isr %v", p.Index, p.Leader, p.ISR)
			}
		}
		for id := int32(1); id <= 2; id++ {
			if b, _ := st.Broker(id); b.Fenced {
				return fmt.Errorf("broker %d fenced", id)
			}
		}
		return nil
	})

	// Broker 3 comes back with a new incarnation (its session expired), and
	// once back in the ISR the controller restores it as preferred leader
	// at its next leader imbalance check (broker 3 prefers 2 partitions and
	// leads none: above leader.imbalance.per.broker.percentage's 10%).
	r := mustPropose(t, c.follower(), &RegisterBroker{BrokerID: 3, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1})
	mustPropose(t, c.follower(), &BrokerHeartbeat{BrokerID: 3, BrokerEpoch: r.BrokerEpoch})
	// The leaders add 3 back to the ISRs, as brokers would after catch-up
	// (retrying on a stale epoch: the controller may change a partition too).
	eventually(t, 10*time.Second, "broker 3 back in every ISR", func() error {
		topic, _ := c.leader().State().Topic("events")
		for _, p := range topic.Partitions {
			if contains(p.ISR, 3) {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.leader().Propose(pctx, &ChangeLeaderAndISR{TopicID: topic.ID, Partition: p.Index,
				LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, Leader: p.Leader, ISR: append(append([]int32(nil), p.ISR...), 3)})
			cancel()
			if err != nil {
				return err
			}
		}
		return nil
	})
	eventually(t, 10*time.Second, "preferred leaders restored", func() error {
		topic, _ := c.leader().State().Topic("events")
		for _, p := range topic.Partitions {
			if p.Leader != p.Replicas[0] {
				return fmt.Errorf("partition %d led by %d, preferred %d", p.Index, p.Leader, p.Replicas[0])
			}
		}
		return nil
	})
}

// TestFollowersLearnCommitsAtOnce: a committed command reaches every
// follower's state without waiting for another entry or for raft's
// CommitTimeout (here an hour, so only the leader's nudge can tell them),
// whether it was proposed on the leader or forwarded by a follower.
func TestFollowersLearnCommitsAtOnce(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.CommitTimeout = time.Hour
		cfg.DisableController = true
	})
	for i, via := range []*Node{c.leader(), c.follower()} {
		res := mustPropose(t, via, &AlterConfigs{ResourceType: ResourceGroup, ResourceName: "g",
			Ops: []ConfigOp{{Key: "share.isolation.level", Value: fmt.Sprint(i)}}})
		for id, n := range c.nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := n.WaitForVersion(ctx, res.Version)
			cancel()
			if err != nil {
				t.Fatalf("proposal %d: node %d did not apply version %d: %v (at %d)", i, id, res.Version, err, n.State().Version)
			}
		}
	}
}

// TestQuorumReachable: with three voters, the quorum is reachable while two
// listen (one stopped), and not once two of the three are stopped (their
// Raft ports refuse connections).
func TestQuorumReachable(t *testing.T) {
	c := newCluster(t, 3, nil)
	for id, n := range c.nodes {
		eventually(t, 20*time.Second, fmt.Sprintf("node %d to know the three voters", id), func() error {
			if v, err := n.Voters(); err != nil || len(v) != 3 {
				return fmt.Errorf("voters %v, %v", v, err)
			}
			return nil
		})
		if !n.QuorumReachable(time.Second) {
			t.Fatalf("node %d: quorum unreachable with every voter up", id)
		}
	}
	c.stop(3)
	for id, n := range c.nodes {
		if !n.QuorumReachable(time.Second) {
			t.Fatalf("node %d: quorum unreachable with two voters of three up", id)
		}
	}
	c.stop(2)
	if c.nodes[1].QuorumReachable(time.Second) {
		t.Fatal("node 1: quorum reachable with two voters of three stopped")
	}
}

// TestAddVoterChecksTheNewVoter: a voter is added only if the node at its
// address answers as that node and is not a member of another cluster.
// Before, AddVoter appended the configuration at once: a quorum of one that
// was given an address nobody answered at counted two voters and never
// committed anything again, its removal included.
func TestAddVoterChecksTheNewVoter(t *testing.T) {
	c := newCluster(t, 1, nil)
	n1 := c.nodes[1]
	ctx := testContext(t, 30*time.Second)

	// Nobody listens there (a port just closed).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	if err := n1.AddVoter(ctx, Peer{ID: 2, Addr: dead}); !errors.Is(err, ErrVoterUnreachable) {
		t.Fatalf("add an unreachable voter: %v, want ErrVoterUnreachable", err)
	}
	// The quorum of one still commits.
	mustPropose(t, n1, &AcquireLease{Kind: "k", Resource: "after-unreachable", Holder: "h", TTLMs: 1000})

	// Node 3 waits to be added: asked to add it as node 2, the leader refuses.
	cfg := fastConfig(t, 3, t.TempDir())
	c.cfgs[3] = cfg
	n3 := c.open(3)
	if err := n1.AddVoter(ctx, Peer{ID: 2, Addr: n3.Addr()}); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "is node 3") {
		t.Fatalf("add node 3 as voter 2: %v, want ErrInvalidRequest naming node 3", err)
	}

	// A voter of another cluster (a quorum of one of its own) is refused:
	// by its cluster id once recorded, before that by its Raft
	// configuration, which does not name node 1.
	other := newCluster(t, 1, func(cfg *Config) { cfg.NodeID = 4 })
	if err := n1.AddVoter(ctx, Peer{ID: 4, Addr: other.nodes[1].Addr()}); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "another") {
		t.Fatalf("add another cluster's voter: %v, want ErrInvalidRequest", err)
	}
	if v, err := n1.Voters(); err != nil || len(v) != 1 {
		t.Fatalf("voters after the refusals: %v, %v", v, err)
	}

	// Node 3 as itself joins, and the two commit together.
	if err := n1.AddVoter(ctx, Peer{ID: 3, Addr: n3.Addr()}); err != nil {
		t.Fatal(err)
	}
	mustPropose(t, n1, &AcquireLease{Kind: "k", Resource: "after-join", Holder: "h", TTLMs: 1000})
	c.converged()
}

// TestObservers: a node that joins with the voters' addresses asks them to
// add it as an observer (a Raft non-voter) and receives the log; AddVoter
// makes it a voter and JoinAsObserver then leaves it one; RemoveVoter demotes
// a voter that answers to observer (the leader too: it steps down and goes
// on receiving the log) and removes one that does not; RemoveObserver takes
// an observer out. Before, a node not in the voters waited to be added by
// hand, and a removed voter stopped receiving the log for good.
func TestObservers(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testContext(t, 90*time.Second)
	idsOf := func(ps []Peer, err error) []int32 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var ids []int32
		for _, p := range ps {
			ids = append(ids, p.ID)
		}
		slices.Sort(ids)
		return ids
	}
	membersAre := func(voters, observers []int32) {
		t.Helper()
		eventually(t, 20*time.Second, fmt.Sprintf("voters %v, observers %v", voters, observers), func() error {
			for id, n := range c.nodes {
				v, o := idsOf(n.Voters()), idsOf(n.Observers())
				if !slices.Equal(v, voters) || !slices.Equal(o, observers) {
					return fmt.Errorf("node %d: voters %v, observers %v", id, v, o)
				}
			}
			return nil
		})
	}

	// Node 4 is given the voters, a dead address first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	cfg := fastConfig(t, 4, t.TempDir())
	cfg.Peers = []Peer{{ID: 9, Addr: dead}}
	for id := int32(1); id <= 3; id++ {
		cfg.Peers = append(cfg.Peers, Peer{ID: id, Addr: c.nodes[id].Addr()})
	}
	c.cfgs[4] = cfg
	n4 := c.open(4)
	if err := n4.JoinAsObserver(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n4.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	membersAre([]int32{1, 2, 3}, []int32{4})
	mustPropose(t, c.leader(), &AcquireLease{Kind: "k", Resource: "after-join", Holder: "h", TTLMs: 60000})
	mustPropose(t, n4, &AcquireLease{Kind: "k", Resource: "through-observer", Holder: "h", TTLMs: 60000})
	c.converged()
	if err := n4.JoinAsObserver(ctx); err != nil { // again: nothing changes
		t.Fatal(err)
	}
	// A second node under id 4 is refused while the first answers.
	dup := fastConfig(t, 4, t.TempDir())
	dup.Peers = cfg.Peers
	n4dup, err := Open(dup)
	if err != nil {
		t.Fatal(err)
	}
	defer n4dup.Close()
	if err := n4dup.JoinAsObserver(ctx); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "still answers") {
		t.Fatalf("a second node 4 asking to observe: %v, want ErrInvalidRequest", err)
	}
	n4dup.Close()
	membersAre([]int32{1, 2, 3}, []int32{4})

	// Promoted, it stays a voter when it asks to observe (a restart).
	if err := c.nodes[2].AddVoter(ctx, Peer{ID: 4, Addr: n4.Addr()}); err != nil {
		t.Fatal(err)
	}
	membersAre([]int32{1, 2, 3, 4}, nil)
	if err := n4.JoinAsObserver(ctx); err != nil {
		t.Fatal(err)
	}
	membersAre([]int32{1, 2, 3, 4}, nil)

	// A voter that does not answer is removed, not kept as an observer.
	c.stop(3)
	if err := c.nodes[1].RemoveVoter(ctx, 3); err != nil {
		t.Fatal(err)
	}
	membersAre([]int32{1, 2, 4}, nil)

	// A voter that answers is demoted to observer and keeps learning.
	if err := c.nodes[1].RemoveVoter(ctx, 4); err != nil {
		t.Fatal(err)
	}
	membersAre([]int32{1, 2}, []int32{4})
	mustPropose(t, c.leader(), &AcquireLease{Kind: "k", Resource: "after-demotion", Holder: "h", TTLMs: 60000})
	c.converged()

	// The leader demotes itself: it steps down, the other voter leads, and
	// the old leader receives the log as an observer.
	old := c.leader()
	if err := old.RemoveVoter(ctx, old.ID()); err != nil {
		t.Fatal(err)
	}
	others := []int32{1, 2}
	others = slices.DeleteFunc(others, func(id int32) bool { return id == old.ID() })
	observers := []int32{old.ID(), 4}
	slices.Sort(observers)
	membersAre(others, observers)
	eventually(t, 20*time.Second, "the other voter leads", func() error {
		if !c.nodes[others[0]].IsLeader() {
			return errors.New("not yet")
		}
		return nil
	})
	mustPropose(t, old, &AcquireLease{Kind: "k", Resource: "after-leader-demotion", Holder: "h", TTLMs: 60000})
	c.converged()

	// An observer removed (its broker unregistered) leaves the configuration;
	// RemoveObserver leaves a voter alone.
	if err := c.nodes[others[0]].RemoveObserver(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[others[0]].RemoveObserver(ctx, others[0]); err != nil {
		t.Fatal(err)
	}
	c.stop(4)
	membersAre(others, []int32{old.ID()})
}

// TestRemovedVoterRejoinsUnderANewLeader: a voter removed while it was down,
// whose Raft configuration predates the current leader, rejoins as an
// observer with its old state: it has recorded this cluster's id, so the
// leader does not take it for another quorum's voter (before, it was refused
// and had to start over with an empty directory).
func TestRemovedVoterRejoinsUnderANewLeader(t *testing.T) {
	c := newCluster(t, 2, nil)
	ctx := testContext(t, 60*time.Second)
	mustPropose(t, c.leader(), &AcquireLease{Kind: "k", Resource: "before", Holder: "h", TTLMs: 60000})
	c.converged()
	if c.nodes[2].IsLeader() {
		if err := c.nodes[2].RemoveVoter(ctx, 2); err != nil { // demoted, then promoted back
			t.Fatal(err)
		}
		if err := c.nodes[1].AddVoter(ctx, Peer{ID: 2, Addr: c.nodes[2].Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	c.stop(2)
	if err := c.nodes[1].RemoveVoter(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// Node 3 joins and becomes the only voter, so it leads.
	cfg := fastConfig(t, 3, t.TempDir())
	c.cfgs[3] = cfg
	n3 := c.open(3)
	if err := c.nodes[1].AddVoter(ctx, Peer{ID: 3, Addr: n3.Addr()}); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[1].RemoveVoter(ctx, 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "node 3 leads", func() error {
		if !n3.IsLeader() {
			return errors.New("not yet")
		}
		return nil
	})
	mustPropose(t, n3, &AcquireLease{Kind: "k", Resource: "under-3", Holder: "h", TTLMs: 60000})

	// Node 2 restarts with its old state and asks node 3 to observe.
	cfg2 := c.cfgs[2]
	cfg2.Bootstrap = false
	cfg2.Peers = []Peer{{ID: 3, Addr: n3.Addr()}}
	c.cfgs[2] = cfg2
	n2 := c.open(2)
	if err := n2.JoinAsObserver(ctx); err != nil {
		t.Fatalf("rejoin as observer: %v", err)
	}
	c.converged()
	if _, ok := n2.State().Lease("k", "under-3"); !ok {
		t.Fatal("the rejoined node did not learn what was committed without it")
	}
	if err := n3.AddVoter(ctx, Peer{ID: 2, Addr: n2.Addr()}); err != nil {
		t.Fatalf("promote the rejoined node: %v", err)
	}
	mustPropose(t, n3, &AcquireLease{Kind: "k", Resource: "after-rejoin", Holder: "h", TTLMs: 60000})
	c.converged()
}

// TestJoinAsObserverOlderQuorum: a voter of a version without op 6 answers
// it INVALID_REQUEST ("forward: op 6"); JoinAsObserver returns
// ErrInvalidRequest at once, and the broker then waits to be added by hand.
func TestJoinAsObserverOlderQuorum(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var proto [1]byte
		if _, err := c.Read(proto[:]); err != nil || proto[0] != protoForward {
			return
		}
		if _, err := readFrame(c); err != nil {
			return
		}
		e := encoder{}
		e.u8(1)
		e.buf = binary.BigEndian.AppendUint16(e.buf, codeOf(reject(ErrInvalidRequest, "forward: op 6")))
		e.str("metadata: invalid request: forward: op 6")
		_ = writeFrame(c, e.buf)
	}()
	cfg := fastConfig(t, 4, t.TempDir())
	cfg.Peers = []Peer{{ID: 1, Addr: ln.Addr().String()}}
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := testContext(t, 20*time.Second)
	if err := n.JoinAsObserver(ctx); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("JoinAsObserver against an older voter: %v, want ErrInvalidRequest", err)
	}
}

// TestRemovedWhileDownRejoinsByItself: a voter removed while it was down,
// restarted with its old settings, believes it is a voter and hears from no
// leader; after rejoinAfter without one it asks the voters of its own
// configuration to keep it, and comes back as an observer that learns the
// log. (Every test of the package runs the loop every 300 ms: a node still
// in the configuration that asks changes nothing.)
func TestRemovedWhileDownRejoinsByItself(t *testing.T) {
	c := newCluster(t, 3, nil) // rejoinAfter 300 ms (fastConfig)
	ctx := testContext(t, 60*time.Second)
	mustPropose(t, c.leader(), &AcquireLease{Kind: "k", Resource: "before", Holder: "h", TTLMs: 60000})
	c.converged()
	down := c.follower().ID()
	c.stop(down)
	var live *Node
	for _, n := range c.nodes {
		live = n
	}
	if err := live.RemoveVoter(ctx, down); err != nil {
		t.Fatal(err)
	}
	mustPropose(t, c.leader(), &AcquireLease{Kind: "k", Resource: "while-down", Holder: "h", TTLMs: 60000})
	n := c.open(down) // Peers empty: it asks the voters of its configuration
	eventually(t, 30*time.Second, "the removed voter back as an observer", func() error {
		o, err := c.leader().Observers()
		if err != nil || len(o) != 1 || o[0].ID != down {
			return fmt.Errorf("observers %v, %v", o, err)
		}
		return nil
	})
	c.converged()
	if _, ok := n.State().Lease("k", "while-down"); !ok {
		t.Fatal("the rejoined node did not learn what was committed while it was away")
	}
	if v, err := c.leader().Voters(); err != nil || len(v) != 2 {
		t.Fatalf("voters %v, %v: want the two that stayed", v, err)
	}
}

// TestUnreachableObserverRemoved: the leader takes an observer it has not
// reached for ObserverTimeout out of the configuration (never a voter, even
// one down longer), logging the failures to reach it once, not at every
// heartbeat; started again, the observer asks to observe and is back, with
// what was committed while it was away.
func TestUnreachableObserverRemoved(t *testing.T) {
	var logs testutil.Buffer
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.ObserverTimeout = time.Second
		cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	ctx := testContext(t, 60*time.Second)
	cfg := fastConfig(t, 4, t.TempDir())
	cfg.ObserverTimeout = time.Second
	for id := int32(1); id <= 3; id++ {
		cfg.Peers = append(cfg.Peers, Peer{ID: id, Addr: c.nodes[id].Addr()})
	}
	c.cfgs[4] = cfg
	if err := c.open(4).JoinAsObserver(ctx); err != nil {
		t.Fatal(err)
	}
	c.converged()
	addr4 := c.nodes[4].Addr()
	leader := c.leader()
	var voter int32
	for id, n := range c.nodes {
		if id != 4 && n != leader {
			voter = id
		}
	}
	// The voter is down first, so longer than the observer.
	c.stop(voter)
	c.stop(4)
	eventually(t, 30*time.Second, "the unreachable observer removed", func() error {
		for id, n := range c.nodes {
			if o, err := n.Observers(); err != nil || len(o) != 0 {
				return fmt.Errorf("node %d: observers %v, %v", id, o, err)
			}
		}
		return nil
	})
	if v, err := c.leader().Voters(); err != nil || len(v) != 3 {
		t.Fatalf("voters %v, %v: the voter that is down must stay one", v, err)
	}
	// The configuration shows the change once appended; the line comes
	// once it is committed.
	eventually(t, 20*time.Second, "the removal logged", func() error {
		if !strings.Contains(logs.String(), "removed an unreachable observer from the metadata quorum") {
			return errors.New("not yet")
		}
		return nil
	})
	// Raft failed to heartbeat node 4 every 125 ms (half the heartbeat
	// timeout) for more than a second: logged once per leader.
	heartbeats := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"msg":"failed to heartbeat to"`) && strings.Contains(line, `"peer":"`+addr4+`"`) {
			heartbeats++
		}
	}
	if heartbeats == 0 || heartbeats > 2 {
		t.Fatalf("%d lines of failed heartbeats to the observer, want 1 (2 if the leader changed):\n%s", heartbeats, logs.String())
	}

	mustPropose(t, c.leader(), &AcquireLease{Kind: "k", Resource: "while-away", Holder: "h", TTLMs: 60000})
	if err := c.open(4).JoinAsObserver(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the observer back", func() error {
		if o, err := c.leader().Observers(); err != nil || len(o) != 1 || o[0].ID != 4 {
			return fmt.Errorf("observers %v, %v", o, err)
		}
		return nil
	})
	c.open(voter)
	c.converged()
	if _, ok := c.nodes[4].State().Lease("k", "while-away"); !ok {
		t.Fatal("the observer did not learn what was committed while it was away")
	}
}

// TestLeaderHandsOverOnClose: a leader that closes hands its leadership to
// another voter (raft's leadership transfer) instead of leaving the voters
// to notice its silence and hold an election.
func TestLeaderHandsOverOnClose(t *testing.T) {
	var logs testutil.Buffer
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	mustPropose(t, c.leader(), &AcquireLease{Kind: "k", Resource: "before", Holder: "h", TTLMs: 60000})
	c.converged()
	old := c.leader().ID()
	c.stop(old)
	if !strings.Contains(logs.String(), "leadership of the metadata quorum handed over") {
		t.Fatalf("the closing leader did not hand over:\n%s", logs.String())
	}
	if c.leader().ID() == old {
		t.Fatal("the closed leader still leads")
	}
	mustPropose(t, c.leader(), &AcquireLease{Kind: "k", Resource: "after", Holder: "h", TTLMs: 60000})
	// One voter down: the last two are no quorum without the closing
	// leader, so it hands nothing over (the other would win an election
	// and lead nothing).
	c.stop(c.leader().ID())
	if n := strings.Count(logs.String(), "leadership of the metadata quorum handed over"); n != 1 {
		t.Fatalf("%d hand-overs, want 1 (none with a voter down):\n%s", n, logs.String())
	}
}

// TestNoPipelinedReplication: the Raft transport refuses pipelined
// AppendEntries, so the leader replicates one request at a time: raft
// v1.8.0's pipeline can deadlock (node.go, NewNetworkTransportWithConfig),
// stalling a follower for good and hanging Shutdown.
func TestNoPipelinedReplication(t *testing.T) {
	c := newCluster(t, 1, nil)
	if _, err := c.leader().trans.AppendEntriesPipeline("2", "127.0.0.1:1"); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline: %v, want raft.ErrPipelineReplicationNotSupported", err)
	}
}
