package metadata

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fastConfig returns raft timeouts short enough for tests.
func fastConfig(t testing.TB, id int32, dir string) Config {
	return Config{
		NodeID: id, Dir: dir, RaftAddr: "127.0.0.1:0",
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		ControllerInterval: 20 * time.Millisecond,
		Logger:             testLogger(t),
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

func mustPropose(t *testing.T, n *Node, cmd Command) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.Propose(ctx, cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd.Type(), err)
	}
	return res
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
