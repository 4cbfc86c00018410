package metadata

import (
	"slices"
	"testing"
	"time"

	"github.com/sediment-io/sediment/broker/replica"
)

// fsmWithTopic registers and unfences brokers ids in a fresh state machine
// and creates a one-partition topic with the replicas repl. do applies a
// command as a node would; part returns the partition as it is now.
func fsmWithTopic(t *testing.T, topic string, repl []int32, cfg map[string]string, ids ...int32) (h *fsmHarness, do func(Command) error, part func() *Partition) {
	t.Helper()
	h = &fsmHarness{f: newFSM(testLogger(t), nil)}
	do = func(c Command) error { _, err := h.apply(EncodeCommand(c)); return err }
	for _, id := range ids {
		if err := do(&RegisterBroker{BrokerID: id, IncarnationID: nameUUID(string(rune('a' + id))), NowMs: 1000, PreviousBrokerEpoch: -1}); err != nil {
			t.Fatal(err)
		}
		b, _ := h.f.current().Broker(id)
		if err := do(&BrokerHeartbeat{BrokerID: id, BrokerEpoch: b.Epoch, NowMs: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	if err := do(&CreateTopic{Name: topic, TopicID: nameUUID(topic), Assignment: [][]int32{repl}, Configs: cfg}); err != nil {
		t.Fatal(err)
	}
	part = func() *Partition { tp, _ := h.f.current().Topic(topic); return tp.Partitions[0] }
	return h, do, part
}

// TestIneligibleExpansionDoesNotBlockShrink runs a leader's ISR loop
// (broker/replication.go isrLoop) against the state machine: broker 3 was
// unregistered but keeps fetching and is caught up, broker 2 lags. The leader
// must not plan 3 back in, which the controller refuses (and with it the
// shrink of 2, for ever, stalling acks=all); planned alone, the shrink
// commits.
func TestIneligibleExpansionDoesNotBlockShrink(t *testing.T) {
	h, do, part := fsmWithTopic(t, "s", []int32{1, 2, 3}, nil, 1, 2, 3)
	b3, _ := h.f.current().Broker(3)
	if err := do(&UnregisterBroker{BrokerID: 3}); err != nil {
		t.Fatal(err)
	}
	lag, t0 := 10*time.Second, time.Unix(0, 0)
	tr := replica.NewTracker(1)
	tr.Reset(part().Replicas, part().ISR, t0)
	for i := 1; i <= 5; i++ {
		now := t0.Add(time.Duration(i) * lag)
		tr.RecordFetch(2, 2, 0, 100, now)
		tr.RecordFetch(3, b3.Epoch, 100, 100, now)
		isr, changed := tr.PlanISR(0, 0, now, lag, h.f.current().ISREligible)
		if !changed {
			continue
		}
		p := part()
		err := do(&ChangeLeaderAndISR{TopicID: nameUUID("s"), LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
			Leader: 1, ISR: isr, BrokerEpochs: tr.PlannedBrokerEpochs(isr)})
		if err != nil {
			t.Errorf("proposal of ISR %v refused: %v", isr, err)
			tr.ProposalFailed()
			continue
		}
		tr.SetAssignment(part().Replicas, part().ISR, now)
	}
	if isr := part().ISR; !slices.Equal(isr, []int32{1}) {
		t.Fatalf("ISR %v, want [1]: the lagging broker 2 shrunk out, the unregistered 3 not added", isr)
	}
}
