package metadata

import (
	"errors"
	"fmt"
	"testing"
)

func stateWithBrokers(t *testing.T, racks []string) *State {
	s := newState()
	for id, rack := range racks {
		next := s.clone()
		r, err := (&RegisterBroker{BrokerID: int32(id), IncarnationID: NewUUID(), Rack: rack, PreviousBrokerEpoch: -1}).apply(next, uint64(id+1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (&BrokerHeartbeat{BrokerID: int32(id), BrokerEpoch: r.BrokerEpoch}).apply(next, 0); err != nil {
			t.Fatal(err)
		}
		s = next
	}
	return s
}

func TestAssignReplicasBalancedAndRackAware(t *testing.T) {
	for _, tc := range []struct {
		racks      []string
		partitions int32
		rf         int32
	}{
		{[]string{"a", "a", "b", "b", "c", "c"}, 60, 3},
		{[]string{"a", "b", "c", "a", "b", "c", "a", "b", "c"}, 90, 3},
		{[]string{"", "", "", ""}, 40, 2},
		{[]string{"a", "b"}, 7, 1},
	} {
		t.Run(fmt.Sprint(tc.racks, tc.partitions, tc.rf), func(t *testing.T) {
			s := stateWithBrokers(t, tc.racks)
			a, err := assignReplicas(s, nil, 0, tc.partitions, tc.rf, 0)
			if err != nil {
				t.Fatal(err)
			}
			replicas := map[int32]int{}
			leaders := map[int32]int{}
			racks := map[string]bool{}
			for _, r := range tc.racks {
				racks[r] = true
			}
			for i, reps := range a {
				if len(reps) != int(tc.rf) {
					t.Fatalf("partition %d: %v", i, reps)
				}
				seen := map[string]bool{}
				for j, r := range reps {
					if contains(reps[:j], r) {
						t.Fatalf("partition %d repeats broker %d", i, r)
					}
					replicas[r]++
					seen[tc.racks[r]] = true
				}
				leaders[reps[0]]++
				if want := min(int(tc.rf), len(racks)); len(seen) != want {
					t.Fatalf("partition %d %v spans %d racks, want %d", i, reps, len(seen), want)
				}
			}
			spread := func(m map[int32]int) (lo, hi int) {
				lo = 1 << 30
				for id := range tc.racks {
					lo, hi = min(lo, m[int32(id)]), max(hi, m[int32(id)])
				}
				return
			}
			if lo, hi := spread(replicas); hi-lo > 1 {
				t.Fatalf("replicas per broker from %d to %d: %v", lo, hi, replicas)
			}
			if lo, hi := spread(leaders); hi-lo > 1 {
				t.Fatalf("leaders per broker from %d to %d: %v", lo, hi, leaders)
			}
		})
	}
}

func TestAssignReplicasSkipsIneligibleBrokers(t *testing.T) {
	s := stateWithBrokers(t, []string{"a", "b", "c"})
	if _, err := (&FenceBroker{BrokerID: 1, BrokerEpoch: -1}).apply(s, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := (&ControlledShutdown{BrokerID: 2, BrokerEpoch: -1}).apply(s, 0); err != nil {
		t.Fatal(err)
	}
	a, err := assignReplicas(s, nil, 0, 5, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, reps := range a {
		if reps[0] != 0 {
			t.Fatalf("assigned to ineligible broker: %v", a)
		}
	}
	if _, err := assignReplicas(s, nil, 0, 1, 2, 0); !errors.Is(err, ErrInvalidReplicationFactor) {
		t.Fatalf("rf 2 with one eligible broker: %v", err)
	}
	if _, err := assignReplicas(s, nil, 0, 0, 1, 0); !errors.Is(err, ErrInvalidPartitions) {
		t.Fatalf("0 partitions: %v", err)
	}
}

// TestAssignReplicasSpreadsATopic: a topic's partitions get different
// leaders before cluster-wide balance counts (Kafka's round-robin gives a
// 2-partition topic two leaders), also for partitions added later; among
// brokers equal for the topic the least loaded wins.
func TestAssignReplicasSpreadsATopic(t *testing.T) {
	s := stateWithBrokers(t, []string{"", "", ""})
	// Brokers 1 and 2 lead two partitions each, broker 0 none.
	if _, err := (&CreateTopic{Name: "busy", TopicID: NewUUID(), Assignment: [][]int32{{1}, {1}, {2}, {2}}}).apply(s, 10); err != nil {
		t.Fatal(err)
	}
	for rotation := 0; rotation < 3; rotation++ {
		a, err := assignReplicas(s, nil, 0, 2, 1, rotation)
		if err != nil {
			t.Fatal(err)
		}
		if a[0][0] != 0 || a[1][0] == 0 {
			t.Fatalf("rotation %d: %v, want broker 0 first (least loaded) then another", rotation, a)
		}
		a, err = assignReplicas(s, nil, 0, 3, 3, rotation)
		if err != nil {
			t.Fatal(err)
		}
		if leaders := map[int32]bool{a[0][0]: true, a[1][0]: true, a[2][0]: true}; len(leaders) != 3 {
			t.Fatalf("rotation %d: 3 partitions rf 3 on 3 brokers: %v", rotation, a)
		}
	}
	// CreatePartitions: the new partition avoids the existing one's leader.
	topic, _ := s.Topic("busy")
	a, err := assignReplicas(s, topic.Partitions[:1], 1, 1, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a[0][0] == 1 {
		t.Fatalf("added partition led by broker 1 again: %v", a)
	}
}
