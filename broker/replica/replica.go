// Package replica holds the leader-side bookkeeping of a replicated
// partition: each follower's log end offset as its fetches report it, when
// it was last caught up, the high watermark that follows from the in-sync
// replica set (ISR), and the ISR changes the leader should ask the
// controller for (Kafka's Partition.scala maybeShrinkIsr/maybeExpandIsr).
//
// A follower's fetch offset is its log end offset, and (by the durability
// rule followers obey: they fetch the next offset only after the previous
// append was flushed) everything below it is durable on that follower. The
// high watermark is therefore the smallest log end offset over the ISR,
// counting the leader's own durable end.
//
// While an expansion of the ISR is being proposed, the followers it adds
// count too (Kafka's "maximal ISR", KIP-497): from the moment the leader
// decides a follower may join, the high watermark does not pass that
// follower's log end, so when the change commits the new member holds every
// committed record and may be elected. Without it the high watermark could
// move past the follower while the change travels through the metadata log,
// and a leader elected from the new ISR would lack records consumers read.
//
// The Tracker knows nothing of logs, sockets or the metadata log; the broker
// feeds it and acts on what it answers, so it is tested directly.
package replica

import (
	"slices"
	"sync"
	"time"
)

// follower is what the leader knows of one follower.
type follower struct {
	leo          int64     // -1 until its first fetch in this leadership
	lastCaughtUp time.Time // last time its fetch offset reached the leader's end
	// The leader's end and the time at the previous fetch: a fetch that
	// reaches prevLeaderEnd shows it was caught up at prevFetch.
	prevLeaderEnd int64
	prevFetch     time.Time
	// brokerEpoch is the broker epoch (registration) its fetches carry
	// (Fetch v15+), -1 unknown (KIP-841).
	brokerEpoch int64
}

// Tracker is the leader's view of one partition's replicas. All methods are
// safe for concurrent use.
type Tracker struct {
	self int32
	mu   struct {
		sync.Mutex
		replicas  []int32
		isr       []int32
		followers map[int32]*follower
		// adding holds the followers of a proposed, not yet committed
		// ISR expansion; the high watermark counts them.
		adding []int32
		// addingEpochs are the broker epochs of the followers in adding,
		// as their fetches carried them when the plan was made.
		addingEpochs map[int32]int64
		// hw is the highest high watermark this tracker answered; a
		// follower joins only at or past it.
		hw int64
	}
}

// NewTracker returns a tracker for a leader with id self.
func NewTracker(self int32) *Tracker {
	t := &Tracker{self: self}
	t.mu.followers = map[int32]*follower{}
	return t
}

// Reset starts a new leadership: every follower is unknown (log end -1) and
// counts as caught up at now, so that it has a full lag period to fetch.
func (t *Tracker) Reset(replicas, isr []int32, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.followers = map[int32]*follower{}
	t.mu.hw = 0
	t.mu.adding, t.mu.addingEpochs = nil, nil
	t.setLocked(replicas, isr, now)
}

// SetAssignment applies a committed replica set and ISR during a leadership,
// keeping what is known of followers that stay.
func (t *Tracker) SetAssignment(replicas, isr []int32, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setLocked(replicas, isr, now)
}

func (t *Tracker) setLocked(replicas, isr []int32, now time.Time) {
	t.mu.replicas = slices.Clone(replicas)
	t.mu.isr = slices.Clone(isr)
	// The broker applies every metadata version, most of which (broker
	// heartbeats, other partitions) leave this partition as it was, while
	// the proposal is still in flight. So the followers of a pending
	// expansion keep holding the high watermark until they are in the
	// committed ISR, stop being replicas, the proposal fails
	// (ProposalFailed) or the next plan replaces it.
	t.mu.adding = slices.DeleteFunc(t.mu.adding, func(r int32) bool {
		return slices.Contains(isr, r) || !slices.Contains(replicas, r)
	})
	for _, r := range replicas {
		if r == t.self {
			continue
		}
		if _, ok := t.mu.followers[r]; !ok {
			t.mu.followers[r] = &follower{leo: -1, lastCaughtUp: now, prevLeaderEnd: -1, brokerEpoch: -1}
		}
	}
	for id := range t.mu.followers {
		if !slices.Contains(replicas, id) {
			delete(t.mu.followers, id)
		}
	}
}

// ISR returns the committed in-sync replica set.
func (t *Tracker) ISR() []int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.mu.isr)
}

// RecordFetch notes a fetch by follower id, sent by its incarnation
// brokerEpoch (-1 unknown: Fetch before v15), at fetchOffset when the
// leader's log ended at leaderEnd. It reports false for a broker that is not
// a follower of this partition, and for a fetch of an earlier incarnation
// than one already seen (a stale request of a broker that restarted: its log
// end says nothing of the broker now).
func (t *Tracker) RecordFetch(id int32, brokerEpoch, fetchOffset, leaderEnd int64, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.mu.followers[id]
	if !ok || (brokerEpoch >= 0 && brokerEpoch < f.brokerEpoch) {
		return false
	}
	if brokerEpoch >= 0 {
		f.brokerEpoch = brokerEpoch
	}
	f.leo = fetchOffset
	switch {
	case fetchOffset >= leaderEnd:
		f.lastCaughtUp = now
	case f.prevLeaderEnd >= 0 && fetchOffset >= f.prevLeaderEnd && f.prevFetch.After(f.lastCaughtUp):
		f.lastCaughtUp = f.prevFetch
	}
	f.prevLeaderEnd, f.prevFetch = leaderEnd, now
	return true
}

// HighWatermark is the smallest log end offset over the ISR and the
// followers a pending expansion adds, the leader's own being leaderEnd (its
// durable end).
func (t *Tracker) HighWatermark(leaderEnd int64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	hw := leaderEnd
	for _, set := range [][]int32{t.mu.isr, t.mu.adding} {
		for _, r := range set {
			if r == t.self {
				continue
			}
			f, ok := t.mu.followers[r]
			if !ok {
				return -1
			}
			hw = min(hw, f.leo)
		}
	}
	t.mu.hw = max(t.mu.hw, hw)
	return hw
}

// ProposalFailed ends a proposed expansion that was not committed: its
// followers stop holding the high watermark back.
func (t *Tracker) ProposalFailed() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.adding, t.mu.addingEpochs = nil, nil
}

// Eligible reports whether broker id, fetching with broker epoch
// brokerEpoch (-1 unknown), may join an ISR.
type Eligible func(id int32, brokerEpoch int64) bool

// PlanISR returns the ISR the leader should propose, and whether it differs
// from the committed one: ISR followers not caught up within lag leave;
// followers whose log end reached both the high watermark and the offset the
// leadership began at (so they hold every record of the current epoch the
// leader has committed) join. The leader always stays.
//
// The caller proposes the answer when it changed, and calls ProposalFailed
// if the proposal is refused. The followers it adds count in the high
// watermark from now until the change commits (a SetAssignment whose ISR
// lists them; one that leaves the ISR as it was keeps them holding) or fails.
// hw is the high watermark the caller knows; the tracker's own highest
// answer counts too, since a caller may not have applied it yet.
//
// eligible reports whether a follower may join the ISR, given the broker
// epoch its fetches carry (-1 unknown); nil means every follower may. A
// caught-up follower it refuses (Kafka's isReplicaIsrEligible: fenced,
// shutting down, not registered, or fetching as another incarnation than the
// registered one) is left out: the controller would refuse the whole change,
// and with it a shrink planned alongside.
func (t *Tracker) PlanISR(hw, epochStart int64, now time.Time, lag time.Duration, eligible Eligible) ([]int32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	hw = max(hw, t.mu.hw)
	var out, adding []int32
	epochs := map[int32]int64{}
	changed := false
	for _, r := range t.mu.replicas {
		if r == t.self {
			out = append(out, r)
			if !slices.Contains(t.mu.isr, r) {
				changed = true
			}
			continue
		}
		f := t.mu.followers[r]
		in := slices.Contains(t.mu.isr, r)
		switch {
		case in && f != nil && now.Sub(f.lastCaughtUp) > lag:
			changed = true // shrink
		case in:
			out = append(out, r)
		case f != nil && f.leo >= 0 && f.leo >= hw && f.leo >= epochStart && now.Sub(f.lastCaughtUp) <= lag &&
			(eligible == nil || eligible(r, f.brokerEpoch)):
			out = append(out, r) // expand
			adding = append(adding, r)
			epochs[r] = f.brokerEpoch
			changed = true
		}
	}
	t.mu.adding, t.mu.addingEpochs = adding, epochs
	return out, changed
}

// PlannedBrokerEpochs returns, parallel to isr (the last PlanISR answer),
// the broker epoch each follower it adds had in the fetches that made it
// eligible, and -1 for the others (members already in, the leader, a
// follower whose fetches carry no epoch). The controller refuses the change
// if a new member registered again since (KIP-841).
func (t *Tracker) PlannedBrokerEpochs(isr []int32) []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]int64, len(isr))
	for i, r := range isr {
		out[i] = -1
		if e, ok := t.mu.addingEpochs[r]; ok && slices.Contains(t.mu.adding, r) {
			out[i] = e
		}
	}
	return out
}

// Joinable reports whether follower id is out of the ISR, not being added,
// and has its log end at or past hw (or the tracker's own high watermark): a
// PlanISR now may add it (the leader epoch's start and eligibility are
// PlanISR's to check).
func (t *Tracker) Joinable(id int32, hw int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.mu.followers[id]
	return f != nil && f.leo >= 0 && f.leo >= max(hw, t.mu.hw) && !slices.Contains(t.mu.isr, id) && !slices.Contains(t.mu.adding, id)
}

// FollowerEnd returns what the leader knows of a follower's log end (-1 when
// unknown).
func (t *Tracker) FollowerEnd(id int32) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.mu.followers[id]; ok {
		return f.leo
	}
	return -1
}
