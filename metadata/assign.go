package metadata

import (
	"sort"
)

// prepareContext is what the leader knows when it completes a command before
// proposing it.
type prepareContext struct {
	st       *State
	nowMs    int64
	rotation int // varies the tie-breaking between calls, so equal brokers share load
	// renewedWithin reports whether this node (the leader) applied a
	// renewal of the broker's session (its registration or a heartbeat)
	// less than ms ago on its monotonic clock (sessionClock); nil: unknown.
	renewedWithin func(id int32, ms int64) bool
}

// assignReplicas places count new partitions (numbered from first, after
// the topic's existing ones) with rf replicas each on the eligible brokers.
// It spreads each partition's replicas over as many racks as it can,
// spreads the topic's preferred leaders and replicas over the brokers first
// (as Kafka's round-robin does: a 2-partition topic on 3 brokers has two
// leaders), and among brokers equal for the topic balances what the brokers
// already hold in the whole cluster.
func assignReplicas(s *State, existing []*Partition, first, count, rf int32, rotation int) ([][]int32, error) {
	if count <= 0 || count > MaxPartitionsPerCommand {
		return nil, reject(ErrInvalidPartitions, "partition count %d", count)
	}
	if rf <= 0 {
		return nil, reject(ErrInvalidReplicationFactor, "replication factor %d", rf)
	}
	type load struct {
		id       int32
		rack     string
		replicas int
		leaders  int
		// this topic's, among the above
		topicReplicas int
		topicLeaders  int
	}
	var brokers []*load
	index := map[int32]*load{}
	for _, b := range s.Brokers() {
		if b.Fenced || b.InControlledShutdown {
			continue
		}
		l := &load{id: b.ID, rack: b.Rack}
		brokers = append(brokers, l)
		index[b.ID] = l
	}
	if int(rf) > len(brokers) {
		return nil, reject(ErrInvalidReplicationFactor, "replication factor %d with %d available brokers", rf, len(brokers))
	}
	for _, t := range s.Topics() {
		for _, p := range t.Partitions {
			for i, r := range p.Replicas {
				if l := index[r]; l != nil {
					l.replicas++
					if i == 0 {
						l.leaders++
					}
				}
			}
		}
	}
	for _, p := range existing {
		for i, r := range p.Replicas {
			if l := index[r]; l != nil {
				l.topicReplicas++
				if i == 0 {
					l.topicLeaders++
				}
			}
		}
	}
	n := len(brokers)
	out := make([][]int32, 0, count)
	for i := int32(0); i < count; i++ {
		start := (rotation + int(first+i)) % n
		// Rotate the candidate order so ties break differently each partition.
		order := make([]*load, n)
		for j := range brokers {
			order[j] = brokers[(start+j)%n]
		}
		replicas := make([]int32, 0, rf)
		racks := map[string]int{}
		used := map[int32]bool{}
		for len(replicas) < int(rf) {
			leaderSlot := len(replicas) == 0
			sort.SliceStable(order, func(a, b int) bool {
				x, y := order[a], order[b]
				if used[x.id] != used[y.id] {
					return !used[x.id]
				}
				if racks[x.rack] != racks[y.rack] {
					return racks[x.rack] < racks[y.rack]
				}
				if leaderSlot && x.topicLeaders != y.topicLeaders {
					return x.topicLeaders < y.topicLeaders
				}
				if x.topicReplicas != y.topicReplicas {
					return x.topicReplicas < y.topicReplicas
				}
				if leaderSlot && x.leaders != y.leaders {
					return x.leaders < y.leaders
				}
				if x.replicas != y.replicas {
					return x.replicas < y.replicas
				}
				// Among equals, a follower slot goes to the broker leading more,
				// which keeps leaders and followers from piling on one broker.
				return !leaderSlot && x.leaders > y.leaders
			})
			pick := order[0]
			used[pick.id] = true
			racks[pick.rack]++
			pick.replicas++
			pick.topicReplicas++
			if leaderSlot {
				pick.leaders++
				pick.topicLeaders++
			}
			replicas = append(replicas, pick.id)
		}
		out = append(out, replicas)
	}
	return out, nil
}
