package metadata

import (
	"sync"
	"time"
)

// sessionClock records when this node applied each broker's last
// registration or heartbeat, on its monotonic clock (Config.Monotonic). The
// controller fences brokers by it, not by the LastHeartbeatMs the state
// carries: that is some proposer's wall clock, so a step of the leader's
// wall clock would fence every broker at once (forward) or spare a dead one
// for as long as the step (backward). Kafka's KRaft controller keeps its
// broker sessions the same way, in memory (BrokerHeartbeatManager). Only a
// leader's renewals count, and only from when it took over (controller.since):
// a new controller gives every broker a full session.
//
// observe runs on raft's FSM goroutine before a batch's state becomes
// current, so a heartbeat the controller sees in a State has its renewal
// recorded; renewals is called by the controller.
//
// A renewal this node proposed is also counted from the moment it is
// appended to the Raft log until it is applied (begin, end): the controller
// plans a session fence on a State that may not show a heartbeat already in
// the log ahead of the fence, and such a fence would apply after the
// heartbeat and fence a live broker. So the fence is appended only if, at
// that moment, no renewal of the broker is in flight and its session still
// has lapsed (lapsed); Node.proposeLocal orders the check and the appends.
// Kafka's controller has no such window: it handles heartbeats and session
// expiry on one thread.
type sessionClock struct {
	now func() time.Duration
	mu  struct {
		sync.Mutex
		renewed  map[int32]time.Duration // broker id → when its session was last renewed
		inFlight map[int32]pendingRenewals
	}
}

// pendingRenewals are a broker's renewals appended here and not yet applied.
type pendingRenewals struct {
	n    int
	last time.Duration // when the last of them was appended
}

func newSessionClock(now func() time.Duration) *sessionClock {
	s := &sessionClock{now: now}
	s.mu.renewed = map[int32]time.Duration{}
	s.mu.inFlight = map[int32]pendingRenewals{}
	return s
}

// begin counts a renewal of broker id about to be appended to the log; end,
// once it is applied (or its outcome is known to be no append, or never to
// come: leadership lost, shut down).
func (s *sessionClock) begin(id int32) {
	s.mu.Lock()
	p := s.mu.inFlight[id]
	p.n++
	p.last = s.now()
	s.mu.inFlight[id] = p
	s.mu.Unlock()
}

func (s *sessionClock) end(id int32) {
	s.mu.Lock()
	p := s.mu.inFlight[id]
	if p.n--; p.n <= 0 {
		delete(s.mu.inFlight, id)
	} else {
		s.mu.inFlight[id] = p
	}
	s.mu.Unlock()
}

// lapsed reports whether broker id's session has expired: no renewal of it
// in flight, and none applied within timeoutMs, counting from sinceMs at the
// earliest (when the controller took over; ms on the monotonic clock). A
// renewal appended more than timeoutMs ago and still unanswered no longer
// counts: hashicorp/raft may never answer an entry appended just before a
// configuration change (hashicorp/raft#498, see Node.wait), and that must
// not spare the broker for ever.
func (s *sessionClock) lapsed(id int32, sinceMs, timeoutMs int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if p, ok := s.mu.inFlight[id]; ok && (now-p.last).Milliseconds() <= timeoutMs {
		return false
	}
	last := sinceMs
	if at, ok := s.mu.renewed[id]; ok && at.Milliseconds() > last {
		last = at.Milliseconds()
	}
	return last+timeoutMs < now.Milliseconds()
}

// observe records the renewals among changes (applied commands); restored
// forgets them all (a snapshot replaced the state).
func (s *sessionClock) observe(changes []Change, restored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if restored {
		clear(s.mu.renewed)
	}
	var (
		now  time.Duration
		read bool
	)
	for _, c := range changes {
		var id int32
		switch cmd := c.Command.(type) {
		case *RegisterBroker:
			id = cmd.BrokerID
		case *BrokerHeartbeat:
			id = cmd.BrokerID
		case *UnregisterBroker:
			delete(s.mu.renewed, cmd.BrokerID)
			continue
		default:
			continue
		}
		if !read {
			now, read = s.now(), true
		}
		s.mu.renewed[id] = now
	}
}

// renewals returns when each broker's session was last renewed, in ms on
// the monotonic clock; a broker not renewed since this node started (or
// since a snapshot was installed) is missing.
func (s *sessionClock) renewals() map[int32]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int32]int64, len(s.mu.renewed))
	for id, at := range s.mu.renewed {
		out[id] = at.Milliseconds()
	}
	return out
}

// renewedWithin reports whether the broker's session was renewed less than
// ms ago (a broker not renewed since this node started, or since a
// snapshot was installed, was not).
func (s *sessionClock) renewedWithin(id int32, ms int64) bool {
	s.mu.Lock()
	at, ok := s.mu.renewed[id]
	s.mu.Unlock()
	return ok && (s.now()-at).Milliseconds() < ms
}

// monotonicSince returns a monotonic clock that reads 0 at start.
func monotonicSince(start time.Time) func() time.Duration {
	return func() time.Duration { return time.Since(start) }
}
