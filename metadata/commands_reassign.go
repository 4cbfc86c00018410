package metadata

import "slices"

func init() {
	register(TypeAlterReassignment, commandInfo{name: "AlterReassignment", version: 1, decode: func(_ uint8, d *decoder) Command {
		return &AlterReassignment{TopicID: d.uuid(), Partition: d.int32(), Target: d.int32s()}
	}})
}

// AlterReassignment starts, changes or cancels the reassignment of one
// partition (KIP-455, AlterPartitionReassignments). With a Target, the
// partition's replicas become the target followed by the current replicas
// not in it (Adding: target replicas that are new, Removing: current ones
// not in the target); the new replicas fetch from the leader and join the
// ISR as any follower does, and once every target replica is in the ISR the
// reassignment completes (completeReassignment): the replicas become the
// target, the removed ones leave the ISR, and leadership moves to a target
// replica if the leader was removed. An empty Target cancels: the replicas go
// back to the original ones (ErrNoReassignment when none is in progress),
// registered or not; a Target must name registered brokers.
type AlterReassignment struct {
	TopicID   UUID
	Partition int32
	Target    []int32
}

func (*AlterReassignment) Type() CommandType { return TypeAlterReassignment }
func (c *AlterReassignment) encode(e *encoder) {
	e.uuid(c.TopicID)
	e.varint(int64(c.Partition))
	e.int32s(c.Target)
}

func (c *AlterReassignment) apply(s *State, _ uint64) (Result, error) {
	t, p, err := findPartition(s, c.TopicID, c.Partition)
	if err != nil {
		return Result{}, err
	}
	// The replicas before any reassignment in progress.
	var original []int32
	for _, r := range p.Replicas {
		if !contains(p.Adding, r) {
			original = append(original, r)
		}
	}
	target := c.Target
	if len(target) == 0 {
		if !p.Reassigning() {
			return Result{}, reject(ErrNoReassignment, "%s-%d", t.Name, p.Index)
		}
		target = original
	}
	for i, r := range target {
		// A new target must name registered brokers; a cancel goes back to
		// the original replicas whatever became of them since (Kafka's
		// cancelPartitionReassignment checks none), or a reassignment
		// could not be cancelled once one of them was unregistered.
		if _, ok := s.Broker(r); !ok && len(c.Target) > 0 {
			return Result{}, reject(ErrInvalidReplicaAssignment, "%s-%d: broker %d is not registered", t.Name, p.Index, r)
		}
		if contains(target[:i], r) {
			return Result{}, reject(ErrInvalidReplicaAssignment, "%s-%d: broker %d twice", t.Name, p.Index, r)
		}
	}
	np := p.clone()
	np.Replicas = slices.Clone(target)
	np.Adding, np.Removing = nil, nil
	for _, r := range original {
		if !contains(target, r) {
			np.Replicas = append(np.Replicas, r)
			np.Removing = append(np.Removing, r)
		}
	}
	for _, r := range target {
		if !contains(original, r) {
			np.Adding = append(np.Adding, r)
		}
	}
	// Replicas that are no longer replicas at all (an earlier target's
	// additions dropped by this one) leave the ISR.
	var isr []int32
	for _, r := range np.ISR {
		if contains(np.Replicas, r) {
			isr = append(isr, r)
		}
	}
	np.ISR = isr
	if len(np.ISR) == 0 {
		return Result{}, reject(ErrInvalidReplicaAssignment, "%s-%d: no in-sync replica would be left", t.Name, p.Index)
	}
	if !contains(np.ISR, np.Leader) && np.Leader != NoLeader {
		np.Leader = NoLeader // the controller elects from the ISR
		np.LeaderEpoch++
	}
	np.PartitionEpoch++
	completeReassignment(s, np)
	s.putTopic(t.withPartition(np))
	return Result{TopicID: t.ID, LeaderEpoch: np.LeaderEpoch, PartitionEpoch: np.PartitionEpoch}, nil
}

// completeReassignment finishes p's reassignment (in place, p being a
// private copy) once every target replica is in the ISR: the replicas become
// the target, removed replicas leave the ISR, and a removed leader hands over
// to the first eligible target replica in the ISR (a leader epoch bump).
func completeReassignment(s *State, p *Partition) {
	if !p.Reassigning() {
		return
	}
	target := p.Target()
	for _, r := range target {
		if !contains(p.ISR, r) {
			return
		}
	}
	p.Replicas = target
	var isr []int32
	for _, r := range p.ISR {
		if contains(target, r) {
			isr = append(isr, r)
		}
	}
	p.ISR = isr
	p.Adding, p.Removing = nil, nil
	if !contains(target, p.Leader) {
		p.Leader = NoLeader
		for _, r := range target {
			if contains(p.ISR, r) && eligible(s, r) {
				p.Leader = r
				break
			}
		}
		p.LeaderEpoch++
	}
	p.PartitionEpoch++
}
