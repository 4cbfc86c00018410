package metadata

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fastConfig returns raft timeouts short enough for tests.
func fastConfig(t testing.TB, id int32, dir string) Config {
	return Config{
		NodeID: id, Dir: dir, RaftAddr: "127.0.0.1:0",
		// Short enough for fast tests, long enough not to churn leaders on a
		// loaded 2-core machine.
		HeartbeatTimeout: 250 * time.Millisecond, ElectionTimeout: 250 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		ControllerInterval: 20 * time.Millisecond,
		Logger:             testLogger(t),
		// Every test runs the rejoin loop often: asking to be kept while
		// in the configuration must change nothing.
		rejoinAfter: 300 * time.Millisecond,
	}
}

func openSingle(t *testing.T) *Node {
	t.Helper()
	cfg := fastConfig(t, 1, t.TempDir())
	cfg.Bootstrap = true
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

// mustPropose proposes cmd, retrying when a leader change left the outcome
// unknown (a CreateTopic retried after it did commit finds its topic).
func mustPropose(t testing.TB, n *Node, cmd Command) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	retried := false
	for {
		res, err := n.Propose(ctx, cmd)
		if errors.Is(err, ErrNotLeader) && ctx.Err() == nil {
			t.Logf("%s: %v; retrying", cmd.Type(), err)
			retried = true
			continue
		}
		if ct, ok := cmd.(*CreateTopic); ok && retried && errors.Is(err, ErrTopicExists) {
			st := n.State()
			if topic, ok := st.Topic(ct.Name); ok {
				return Result{Version: st.Version, TopicID: topic.ID}
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", cmd.Type(), err)
		}
		return res
	}
}

func TestSingleNodeAPI(t *testing.T) {
	n := openSingle(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watch := n.Watch(ctx, n.State().Version)

	inc := NewUUID()
	reg := mustPropose(t, n, &RegisterBroker{BrokerID: 0, IncarnationID: inc, PreviousBrokerEpoch: -1,
		Listeners: []Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 9092}}})
	hb := mustPropose(t, n, &BrokerHeartbeat{BrokerID: 0, BrokerEpoch: reg.BrokerEpoch})
	if hb.Fenced {
		t.Fatal("broker still fenced after heartbeat")
	}
	if _, err := n.Propose(ctx, &BrokerHeartbeat{BrokerID: 0, BrokerEpoch: reg.BrokerEpoch - 1}); !errors.Is(err, ErrStaleBrokerEpoch) {
		t.Fatalf("stale heartbeat: %v", err)
	}
	ct := mustPropose(t, n, &CreateTopic{Name: "orders", NumPartitions: 3, ReplicationFactor: 1})
	if _, err := n.Propose(ctx, &CreateTopic{Name: "orders", NumPartitions: 1, ReplicationFactor: 1}); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("duplicate topic: %v", err)
	}
	if _, err := n.Propose(ctx, &CreateTopic{Name: "big-rf", NumPartitions: 1, ReplicationFactor: 3}); !errors.Is(err, ErrInvalidReplicationFactor) {
		t.Fatalf("rf 3 on one broker: %v", err)
	}
	mustPropose(t, n, &CreatePartitions{Name: "orders", Count: 5})
	mustPropose(t, n, &AlterConfigs{ResourceType: ResourceTopic, ResourceName: "orders", Ops: []ConfigOp{{Key: "retention.ms", Value: "1000"}}})
	mustPropose(t, n, &AlterConfigs{ResourceType: ResourceBroker, ResourceName: "", Ops: []ConfigOp{{Key: "log.retention.hours", Value: "1"}}})
	pid := mustPropose(t, n, &AllocateProducerIDs{BrokerID: 0, BrokerEpoch: reg.BrokerEpoch, Count: 1000})
	pid2 := mustPropose(t, n, &AllocateProducerIDs{BrokerID: 0, BrokerEpoch: reg.BrokerEpoch, Count: 1000})
	if pid2.ProducerIDStart != pid.ProducerIDStart+1000 {
		t.Fatalf("producer id blocks %d then %d", pid.ProducerIDStart, pid2.ProducerIDStart)
	}
	st, err := n.WaitForVersion(ctx, pid2.Version)
	if err != nil {
		t.Fatal(err)
	}
	topic, ok := st.Topic("orders")
	if !ok || topic.ID != ct.TopicID || len(topic.Partitions) != 5 || topic.Configs["retention.ms"] != "1000" {
		t.Fatalf("topic: %+v", topic)
	}
	for _, p := range topic.Partitions {
		if p.Leader != 0 || len(p.ISR) != 1 {
			t.Fatalf("partition %+v", p)
		}
	}
	if st.BrokerConfigs("")["log.retention.hours"] != "1" {
		t.Fatal("cluster config missing")
	}
	mustPropose(t, n, &DeleteTopic{Name: "orders"})
	if _, err := n.Propose(ctx, &DeleteTopic{Name: "orders"}); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("delete twice: %v", err)
	}
	// The watcher saw every accepted command in order.
	var types []CommandType
	for len(types) == 0 || types[len(types)-1] != TypeDeleteTopic {
		select {
		case c := <-watch:
			if c.Command != nil && c.Command.Type() != TypeSetClusterID {
				types = append(types, c.Command.Type())
			}
		case <-ctx.Done():
			t.Fatalf("watch: got %v", types)
		}
	}
	if types[0] != TypeRegisterBroker || len(types) != 9 {
		t.Fatalf("watch order %v", types)
	}
	if n.Stale() {
		t.Fatal("single leader reports stale")
	}
}

func TestSingleNodeRestartRecoversState(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig(t, 1, dir)
	cfg.Bootstrap = true
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	reg := mustPropose(t, n, &RegisterBroker{BrokerID: 1, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1})
	mustPropose(t, n, &BrokerHeartbeat{BrokerID: 1, BrokerEpoch: reg.BrokerEpoch})
	mustPropose(t, n, &CreateTopic{Name: "a", NumPartitions: 2, ReplicationFactor: 1})
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	last := mustPropose(t, n, &CreateTopic{Name: "b", NumPartitions: 1, ReplicationFactor: 1})
	before, err := n.WaitForVersion(ctx, last.Version)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	after, err := n.WaitForVersion(ctx, before.Version)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := after.Topic("b"); !ok {
		t.Fatalf("after restart:\n%s", after)
	}
	if a, b := stripVersion(before.String()), stripVersion(after.String()); a != b {
		t.Fatalf("state differs after restart:\n%s\nvs\n%s", a, b)
	}
}

// TestWatchFallsBackToSnapshot: a watcher that asks for history the node no
// longer holds, or that stops reading while many changes commit, gets a
// Change with a nil Command and the whole State, then continues in order.
func TestWatchFallsBackToSnapshot(t *testing.T) {
	cfg := fastConfig(t, 1, t.TempDir())
	cfg.Bootstrap = true
	cfg.WatchBuffer = 4
	cfg.DisableController = true
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := testContext(t, 30*time.Second)
	if err := n.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	slow := n.Watch(ctx, n.State().Version) // not read until the end
	var last Result
	for i := range 200 {
		last = mustPropose(t, n, &AcquireLease{Kind: "k", Resource: fmt.Sprint(i), Holder: "h", TTLMs: 1000})
	}
	check := func(ch <-chan Change) {
		t.Helper()
		resyncs, prev := 0, uint64(0)
		for {
			select {
			case c, ok := <-ch:
				if !ok {
					t.Fatal("watch closed")
				}
				if c.Version <= prev {
					t.Fatalf("version %d after %d", c.Version, prev)
				}
				prev = c.Version
				if c.Command == nil {
					resyncs++
				}
				if c.Version >= last.Version {
					if resyncs == 0 {
						t.Fatal("no resync for a lagging watcher")
					}
					if len(c.State.Leases()) != 200 {
						t.Fatalf("final state has %d leases", len(c.State.Leases()))
					}
					return
				}
			case <-ctx.Done():
				t.Fatalf("watch stalled at %d, want %d", prev, last.Version)
			}
		}
	}
	check(slow)
	check(n.Watch(ctx, 1)) // history long gone
	// Close ends watches.
	w := n.Watch(context.Background(), n.State().Version)
	n.Close()
	for range w {
	}
}

// TestUnknownEntryStopsNode: a committed entry this binary cannot read is
// skipped when flagged ignorable; otherwise the state machine stops, keeps
// its state, refuses snapshots (keeping the log) and says why.
func TestUnknownEntryStopsNode(t *testing.T) {
	n := openSingle(t)
	mustPropose(t, n, &AcquireLease{Kind: "k", Resource: "a", Holder: "h", TTLMs: 1000})
	if err := n.raft.Apply([]byte{0xfe, 0x81, 1, 2, 3}, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	mustPropose(t, n, &AcquireLease{Kind: "k", Resource: "b", Holder: "h", TTLMs: 1000})
	if n.Err() != nil {
		t.Fatalf("ignorable entry stopped the node: %v", n.Err())
	}
	before := n.State()
	if err := n.raft.Apply([]byte{0xfe, 0x01}, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "state machine stopped", func() error {
		if !errors.Is(n.Err(), ErrFSMStopped) || !errors.Is(n.Err(), ErrUnknownCommand) {
			return fmt.Errorf("err %v", n.Err())
		}
		return nil
	})
	ctx := testContext(t, 5*time.Second)
	if _, err := n.Propose(ctx, &AcquireLease{Kind: "k", Resource: "c", Holder: "h", TTLMs: 1000}); !errors.Is(err, ErrFSMStopped) {
		t.Fatalf("propose on a stopped node: %v", err)
	}
	if err := n.Snapshot(); err == nil {
		t.Fatal("a stopped state machine took a snapshot")
	}
	if got := n.State(); got.String() != before.String() {
		t.Fatalf("state changed after stop:\n%s\nvs\n%s", got, before)
	}
}

// TestCreateTopicCollision: the leader refuses a topic whose name differs
// from an existing one's only by '.' and '_' (ErrInvalidTopic), when it
// prepares the creation; the state machine itself does not check it, so a
// log written before the check replays as it was.
func TestCreateTopicCollision(t *testing.T) {
	n := openSingle(t)
	ctx := testContext(t, 10*time.Second)
	reg := mustPropose(t, n, &RegisterBroker{BrokerID: 1, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1})
	mustPropose(t, n, &BrokerHeartbeat{BrokerID: 1, BrokerEpoch: reg.BrokerEpoch})
	mustPropose(t, n, &CreateTopic{Name: "a_b.c", NumPartitions: 1, ReplicationFactor: 1})
	if _, err := n.Propose(ctx, &CreateTopic{Name: "a.b_c", NumPartitions: 1, ReplicationFactor: 1}); !errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("a.b_c beside a_b.c: %v, want ErrInvalidTopic", err)
	}
	st := n.State()
	if _, err := (&CreateTopic{Name: "a.b_c", TopicID: NewUUID(), Assignment: [][]int32{{1}}}).apply(st.clone(), 99); err != nil {
		t.Fatalf("apply refused a colliding name: %v", err)
	}
}

// unansweredFuture is a raft future that raft never answers, as
// hashicorp/raft#498 leaves an entry appended around a shutdown.
type unansweredFuture struct{ block chan struct{} }

func (f unansweredFuture) Error() error { <-f.block; return nil }

// TestCloseDoesNotWaitForUnansweredFutures: a proposal (or barrier) whose
// future raft never answers ends with ErrClosed when the node closes, and
// Close returns; before, Close waited for the goroutine reading the future
// for ever (a broker that never exited after SIGTERM).
func TestCloseDoesNotWaitForUnansweredFutures(t *testing.T) {
	n := openSingle(t)
	f := unansweredFuture{block: make(chan struct{})}
	defer close(f.block)
	waited := make(chan error, 1)
	go func() { waited <- n.wait(context.Background(), f) }()
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	ctx := testContext(t, 30*time.Second)
	select {
	case err := <-waited:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("wait on an unanswered future at Close: %v, want ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("wait on an unanswered future did not end at Close")
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not return")
	}
	// A wait bounded by its context ends with ErrNoQuorum.
	m := openSingle(t)
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := m.wait(short, f); !errors.Is(err, ErrNoQuorum) {
		t.Errorf("wait past its context: %v, want ErrNoQuorum", err)
	}
}

// TestCloseWithProposalsInFlight: Close returns while proposals are being
// committed, however the shutdown falls among them (raft may leave the
// future of an entry committed at that moment unanswered).
func TestCloseWithProposalsInFlight(t *testing.T) {
	for round := range 30 {
		cfg := fastConfig(t, 1, t.TempDir())
		cfg.Bootstrap = true
		n, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := testContext(t, 30*time.Second)
		if err := n.WaitForLeader(ctx); err != nil {
			t.Fatal(err)
		}
		reg := mustPropose(t, n, &RegisterBroker{BrokerID: 1, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1})
		var proposers sync.WaitGroup
		var committed atomic.Int64
		for range 4 {
			proposers.Add(1)
			go func() {
				defer proposers.Done()
				for {
					_, err := n.Propose(ctx, &BrokerHeartbeat{BrokerID: 1, BrokerEpoch: reg.BrokerEpoch})
					if err != nil {
						return // ErrClosed (or refused as the node stops)
					}
					committed.Add(1)
				}
			}()
		}
		for committed.Load() < int64(round%7) && ctx.Err() == nil {
			waitABit()
		}
		closed := make(chan error, 1)
		go func() { closed <- n.Close() }()
		select {
		case <-closed:
		case <-ctx.Done():
			t.Fatalf("round %d: Close did not return with proposals in flight", round)
		}
		proposers.Wait()
	}
}
