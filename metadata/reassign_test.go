package metadata

import (
	"errors"
	"slices"
	"testing"
)

// TestReassignment: adding replicas keeps the old ones until the new ones
// are in the ISR; then the replicas become the target, the removed ones
// leave the ISR, and a removed leader hands over with a new leader epoch.
// Cancelling goes back to the original replicas.
func TestReassignment(t *testing.T) {
	st := newState()
	for id := int32(1); id <= 5; id++ {
		mustApply(t, st, &RegisterBroker{BrokerID: id, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1}, uint64(id))
		mustApply(t, st, &BrokerHeartbeat{BrokerID: id, BrokerEpoch: int64(id)}, uint64(10+id))
	}
	res := mustApply(t, st, &CreateTopic{Name: "t", TopicID: NewUUID(), NumPartitions: 1, ReplicationFactor: 3, Assignment: [][]int32{{1, 2, 3}}}, 20)
	id := res.TopicID
	part := func() *Partition { tp, _ := st.TopicByID(id); return tp.Partitions[0] }
	mustApply(t, st, &ChangeLeaderAndISR{TopicID: id, LeaderEpoch: part().LeaderEpoch, PartitionEpoch: part().PartitionEpoch, Leader: 1, ISR: []int32{1, 2, 3}}, 21)
	if _, err := (&AlterReassignment{TopicID: id}).apply(st, 22); !errors.Is(err, ErrNoReassignment) {
		t.Fatalf("cancel with none in progress: %v", err)
	}
	if _, err := (&AlterReassignment{TopicID: id, Target: []int32{4, 4}}).apply(st, 22); !errors.Is(err, ErrInvalidReplicaAssignment) {
		t.Fatalf("duplicate target: %v", err)
	}
	if _, err := (&AlterReassignment{TopicID: id, Target: []int32{4, 9}}).apply(st, 22); !errors.Is(err, ErrInvalidReplicaAssignment) {
		t.Fatalf("unknown broker: %v", err)
	}

	// Move {1,2,3} (leader 1) to {4,5,2}.
	mustApply(t, st, &AlterReassignment{TopicID: id, Target: []int32{4, 5, 2}}, 23)
	p := part()
	if !slices.Equal(p.Replicas, []int32{4, 5, 2, 1, 3}) || !slices.Equal(p.Adding, []int32{4, 5}) || !slices.Equal(p.Removing, []int32{1, 3}) || p.Leader != 1 {
		t.Fatalf("reassigning: %+v", p)
	}
	if !slices.Equal(p.Target(), []int32{4, 5, 2}) {
		t.Fatalf("target %v", p.Target())
	}
	// 4 catches up: still reassigning.
	mustApply(t, st, &ChangeLeaderAndISR{TopicID: id, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, Leader: 1, ISR: []int32{1, 2, 3, 4}}, 24)
	if p = part(); !p.Reassigning() {
		t.Fatalf("completed before 5 caught up: %+v", p)
	}
	le := p.LeaderEpoch
	// 5 catches up: complete, leadership moves to 4 (first target in the ISR).
	mustApply(t, st, &ChangeLeaderAndISR{TopicID: id, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, Leader: 1, ISR: []int32{1, 2, 3, 4, 5}}, 25)
	p = part()
	if p.Reassigning() || !slices.Equal(p.Replicas, []int32{4, 5, 2}) || !slices.Equal(p.ISR, []int32{2, 4, 5}) || p.Leader != 4 || p.LeaderEpoch != le+1 {
		t.Fatalf("after completion: %+v", p)
	}

	// A reassignment cancelled before completion goes back (to the
	// replicas minus those being added, as Kafka does: the order of the
	// list during the reassignment).
	mustApply(t, st, &AlterReassignment{TopicID: id, Target: []int32{1, 2, 3}}, 26)
	if p = part(); !slices.Equal(p.Adding, []int32{1, 3}) || !slices.Equal(p.Removing, []int32{4, 5}) {
		t.Fatalf("second reassignment: %+v", p)
	}
	mustApply(t, st, &AlterReassignment{TopicID: id}, 27)
	if p = part(); p.Reassigning() || !slices.Equal(p.Replicas, []int32{2, 4, 5}) || !slices.Equal(p.ISR, []int32{2, 4, 5}) || p.Leader != 4 {
		t.Fatalf("after cancel: %+v", p)
	}

	// The lists survive a snapshot.
	mustApply(t, st, &AlterReassignment{TopicID: id, Target: []int32{3}}, 28)
	back, err := DecodeSnapshot(EncodeSnapshot(st))
	if err != nil {
		t.Fatal(err)
	}
	if back.String() != st.String() {
		t.Fatalf("snapshot round trip:\n%s\nwant\n%s", back, st)
	}
}

func mustApply(t *testing.T, st *State, c Command, index uint64) Result {
	t.Helper()
	// Through the encoding, as the FSM sees it.
	c, err := DecodeCommand(EncodeCommand(c))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.apply(st, index)
	if err != nil {
		t.Fatalf("%s: %v", c.Type(), err)
	}
	return res
}
