package replica

import (
	"slices"
	"testing"
	"time"
)

func TestHighWatermarkFollowsSlowestISRMember(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := NewTracker(1)
	tr.Reset([]int32{1, 2, 3}, []int32{1, 2, 3}, now)
	if hw := tr.HighWatermark(10); hw != -1 {
		t.Fatalf("before any follower fetched: hw %d, want -1 (unknown)", hw)
	}
	tr.RecordFetch(2, -1, 7, 10, now)
	tr.RecordFetch(3, -1, 4, 10, now)
	if hw := tr.HighWatermark(10); hw != 4 {
		t.Fatalf("hw %d, want 4", hw)
	}
	tr.RecordFetch(3, -1, 10, 10, now)
	if hw := tr.HighWatermark(10); hw != 7 {
		t.Fatalf("hw %d, want 7", hw)
	}
	if hw := tr.HighWatermark(5); hw != 5 {
		t.Fatalf("leader's own durable end bounds the hw: got %d, want 5", hw)
	}
	// Out of the ISR, a follower no longer holds the high watermark back.
	tr.SetAssignment([]int32{1, 2, 3}, []int32{1, 3}, now)
	if hw := tr.HighWatermark(10); hw != 10 {
		t.Fatalf("hw %d, want 10", hw)
	}
	if tr.RecordFetch(9, -1, 1, 10, now) {
		t.Fatal("a broker that is not a replica was accepted")
	}
}

func TestPlanISRShrinksLaggardsAndExpandsCaughtUp(t *testing.T) {
	start := time.Unix(1000, 0)
	lag := 10 * time.Second
	tr := NewTracker(1)
	tr.Reset([]int32{1, 2, 3}, []int32{1, 2, 3}, start)
	if isr, changed := tr.PlanISR(0, 0, start.Add(lag), lag, nil); changed {
		t.Fatalf("within the lag time nobody leaves: %v", isr)
	}
	// 2 keeps up; 3 fetches but stays behind a growing log.
	for i := int64(1); i <= 20; i++ {
		now := start.Add(time.Duration(i) * time.Second)
		tr.RecordFetch(2, -1, i*10, i*10, now)
		tr.RecordFetch(3, -1, 5, i*10, now)
	}
	isr, changed := tr.PlanISR(100, 0, start.Add(20*time.Second), lag, nil)
	if !changed || !slices.Equal(isr, []int32{1, 2}) {
		t.Fatalf("shrink: got %v %v, want [1 2] true", isr, changed)
	}
	tr.SetAssignment([]int32{1, 2, 3}, []int32{1, 2}, start.Add(20*time.Second))
	// 3 catches up to the leader's end: it rejoins.
	now := start.Add(21 * time.Second)
	tr.RecordFetch(3, -1, 200, 200, now)
	isr, changed = tr.PlanISR(150, 0, now, lag, nil)
	if !changed || !slices.Equal(isr, []int32{1, 2, 3}) {
		t.Fatalf("expand: got %v %v, want [1 2 3] true", isr, changed)
	}
	// Not before it reaches the start of the current leadership.
	isr, changed = tr.PlanISR(150, 250, now, lag, nil)
	if changed || !slices.Equal(isr, []int32{1, 2}) {
		t.Fatalf("expand before the epoch start: got %v %v", isr, changed)
	}
}

func TestCaughtUpAtPreviousFetch(t *testing.T) {
	// A follower that reached the leader's end as of its previous fetch
	// was caught up then, even though the leader grew since (Kafka's
	// lastCaughtUpTime rule).
	start := time.Unix(1000, 0)
	lag := 5 * time.Second
	tr := NewTracker(1)
	tr.Reset([]int32{1, 2}, []int32{1, 2}, start)
	for i := int64(1); i <= 30; i++ {
		now := start.Add(time.Duration(i) * time.Second)
		// Each fetch reaches what the leader had at the previous one.
		tr.RecordFetch(2, -1, (i-1)*10, i*10, now)
	}
	if isr, changed := tr.PlanISR(0, 0, start.Add(30*time.Second), lag, nil); changed {
		t.Fatalf("a follower one fetch behind was dropped: %v", isr)
	}
}

// The shape franz-go's suite hit under rolling restarts: a follower is
// planned into the ISR at the high watermark it has reached, and the high
// watermark must not pass it while the change travels through the metadata
// log, or the follower joins lacking committed records (and, elected,
// truncates records consumers already read).
func TestExpansionHoldsHighWatermarkUntilCommitted(t *testing.T) {
	now := time.Unix(1000, 0)
	lag := 10 * time.Second
	tr := NewTracker(1)
	tr.Reset([]int32{1, 2}, []int32{1}, now)
	tr.RecordFetch(2, -1, 100, 100, now) // caught up
	if hw := tr.HighWatermark(100); hw != 100 {
		t.Fatalf("hw %d, want 100", hw)
	}
	isr, changed := tr.PlanISR(100, 0, now, lag, nil)
	if !changed || !slices.Equal(isr, []int32{1, 2}) {
		t.Fatalf("plan %v %v, want [1 2]", isr, changed)
	}
	// The leader appends more while the proposal is in flight; the
	// follower has not fetched it yet.
	if hw := tr.HighWatermark(150); hw != 100 {
		t.Fatalf("hw %d with an expansion pending, want 100 (the joining follower's end)", hw)
	}
	tr.RecordFetch(2, -1, 120, 150, now)
	if hw := tr.HighWatermark(150); hw != 120 {
		t.Fatalf("hw %d, want 120", hw)
	}
	// Committed: the follower is an ISR member and still counts.
	tr.SetAssignment([]int32{1, 2}, []int32{1, 2}, now)
	if hw := tr.HighWatermark(150); hw != 120 {
		t.Fatalf("hw %d after the commit, want 120", hw)
	}
}

func TestRefusedExpansionStopsHoldingHighWatermark(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := NewTracker(1)
	tr.Reset([]int32{1, 2}, []int32{1}, now)
	tr.RecordFetch(2, -1, 50, 50, now)
	tr.HighWatermark(50)
	if _, changed := tr.PlanISR(50, 0, now, 10*time.Second, nil); !changed {
		t.Fatal("no expansion planned")
	}
	if hw := tr.HighWatermark(80); hw != 50 {
		t.Fatalf("hw %d, want 50 while pending", hw)
	}
	tr.ProposalFailed()
	if hw := tr.HighWatermark(80); hw != 80 {
		t.Fatalf("hw %d after the refusal, want 80", hw)
	}
}

// A follower that reached the high watermark the caller passed, but not the
// one the tracker already answered (the caller has not applied it yet), must
// not be planned in.
func TestPlanISRUsesTrackersOwnHighWatermark(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := NewTracker(1)
	tr.Reset([]int32{1, 2}, []int32{1}, now)
	tr.RecordFetch(2, -1, 90, 90, now)
	if hw := tr.HighWatermark(100); hw != 100 {
		t.Fatalf("hw %d, want 100", hw)
	}
	// The caller still reads 90 from the log.
	if isr, changed := tr.PlanISR(90, 0, now, 10*time.Second, nil); changed {
		t.Fatalf("planned %v with the follower at 90 below the answered hw 100", isr)
	}
}

// The broker applies every metadata version to every partition it leads, so
// SetAssignment with the ISR unchanged (another broker's heartbeat, another
// partition's change) arrives while the expansion is still in flight. It
// must not release the joining follower's hold on the high watermark: that
// let the high watermark pass the follower again, which then joined the ISR
// lacking records consumers had read (franz-go's suite under rolling
// restarts, after the first maximal-ISR fix).
func TestUnrelatedAssignmentKeepsExpansionHold(t *testing.T) {
	now := time.Unix(1000, 0)
	lag := 10 * time.Second
	tr := NewTracker(3)
	tr.Reset([]int32{3, 1}, []int32{3}, now)
	tr.RecordFetch(1, -1, 7543, 7543, now)
	if hw := tr.HighWatermark(7543); hw != 7543 {
		t.Fatalf("hw %d, want 7543", hw)
	}
	isr, changed := tr.PlanISR(7543, 0, now, lag, nil)
	if !changed || !slices.Equal(isr, []int32{3, 1}) {
		t.Fatalf("plan %v %v, want [3 1]", isr, changed)
	}
	// A metadata version that leaves the partition as it was.
	tr.SetAssignment([]int32{3, 1}, []int32{3}, now)
	if hw := tr.HighWatermark(7544); hw != 7543 {
		t.Fatalf("hw %d after an unrelated metadata change, want 7543 (the joining follower's end)", hw)
	}
	// The expansion commits: the follower now holds it as an ISR member.
	tr.SetAssignment([]int32{3, 1}, []int32{3, 1}, now)
	if hw := tr.HighWatermark(7544); hw != 7543 {
		t.Fatalf("hw %d after the commit, want 7543", hw)
	}
	tr.RecordFetch(1, -1, 7544, 7544, now)
	if hw := tr.HighWatermark(7544); hw != 7544 {
		t.Fatalf("hw %d, want 7544", hw)
	}
}

// A follower of a pending expansion that stops being a replica (a
// reassignment) stops holding the high watermark; one refused releases it.
func TestExpansionHoldEndsWithReplicaOrRefusal(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := NewTracker(1)
	tr.Reset([]int32{1, 2}, []int32{1}, now)
	tr.RecordFetch(2, -1, 50, 50, now)
	tr.HighWatermark(50)
	if _, changed := tr.PlanISR(50, 0, now, 10*time.Second, nil); !changed {
		t.Fatal("no expansion planned")
	}
	tr.SetAssignment([]int32{1, 2}, []int32{1}, now)
	if hw := tr.HighWatermark(80); hw != 50 {
		t.Fatalf("hw %d, want 50 while pending", hw)
	}
	tr.SetAssignment([]int32{1}, []int32{1}, now)
	if hw := tr.HighWatermark(80); hw != 80 {
		t.Fatalf("hw %d once the follower is no replica, want 80", hw)
	}
}

// TestBrokerEpochOfExpansion (KIP-841): the plan that adds a follower names
// the broker epoch its fetches carried; a fetch of an earlier incarnation,
// arriving after one of a later, is not counted.
func TestBrokerEpochOfExpansion(t *testing.T) {
	now := time.Unix(1000, 0)
	lag := 10 * time.Second
	tr := NewTracker(1)
	tr.Reset([]int32{1, 2, 3}, []int32{1, 2}, now)
	tr.RecordFetch(2, 5, 100, 100, now)
	tr.RecordFetch(3, 7, 100, 100, now)
	isr, changed := tr.PlanISR(100, 0, now, lag, nil)
	if !changed || !slices.Equal(isr, []int32{1, 2, 3}) {
		t.Fatalf("expansion: %v %v", isr, changed)
	}
	if got := tr.PlannedBrokerEpochs(isr); !slices.Equal(got, []int64{-1, -1, 7}) {
		t.Fatalf("planned broker epochs %v, want [-1 -1 7] (only the joining follower's)", got)
	}
	// Broker 3 restarted (epoch 9) and fetches from further back; a stale
	// request of its previous incarnation arrives after.
	if !tr.RecordFetch(3, 9, 40, 100, now) {
		t.Fatal("the new incarnation's fetch was not counted")
	}
	if tr.RecordFetch(3, 7, 100, 100, now) {
		t.Fatal("a fetch of the previous incarnation was counted")
	}
	if end := tr.FollowerEnd(3); end != 40 {
		t.Fatalf("follower end %d, want 40 (the new incarnation's)", end)
	}
	tr.ProposalFailed()
	if got := tr.PlannedBrokerEpochs(isr); !slices.Equal(got, []int64{-1, -1, -1}) {
		t.Fatalf("after the proposal failed: %v", got)
	}
	// Caught up again, it is planned with its new epoch.
	tr.RecordFetch(3, 9, 100, 100, now)
	isr, _ = tr.PlanISR(100, 0, now, lag, nil)
	if got := tr.PlannedBrokerEpochs(isr); !slices.Equal(got, []int64{-1, -1, 9}) {
		t.Fatalf("planned broker epochs %v, want [-1 -1 9]", got)
	}
}

// TestIneligibleFollowerDoesNotBlockShrink: a caught-up follower the
// eligibility check refuses (here broker 3, unregistered but still fetching)
// is not planned into the ISR, so the shrink of a lagging member (broker 2)
// goes out alone. Planned together, the controller refused the whole change
// every time and the lagging member held the high watermark for good.
func TestIneligibleFollowerDoesNotBlockShrink(t *testing.T) {
	start := time.Unix(1000, 0)
	lag := 10 * time.Second
	tr := NewTracker(1)
	tr.Reset([]int32{1, 2, 3}, []int32{1, 2}, start)
	type asked struct {
		id    int32
		epoch int64
	}
	var calls []asked
	registered := map[int32]int64{1: 1, 2: 2} // broker 3 is not
	eligible := func(id int32, epoch int64) bool {
		calls = append(calls, asked{id, epoch})
		e, ok := registered[id]
		return ok && (epoch < 0 || epoch == e)
	}
	now := start.Add(2 * lag)
	tr.RecordFetch(2, 2, 0, 100, now)   // behind since the start
	tr.RecordFetch(3, 3, 100, 100, now) // caught up
	isr, changed := tr.PlanISR(0, 0, now, lag, eligible)
	if !changed || !slices.Equal(isr, []int32{1}) {
		t.Fatalf("plan %v %v, want the shrink alone: [1] true", isr, changed)
	}
	if !slices.Equal(calls, []asked{{3, 3}}) {
		t.Fatalf("eligibility asked %v, want only of the joining follower 3 with its fetch epoch 3", calls)
	}
	// Not planned, broker 3 does not hold the high watermark either.
	if got := tr.PlannedBrokerEpochs(isr); !slices.Equal(got, []int64{-1}) {
		t.Fatalf("planned broker epochs %v, want [-1]", got)
	}
	tr.SetAssignment([]int32{1, 2, 3}, []int32{1}, now)
	if hw := tr.HighWatermark(150); hw != 150 {
		t.Fatalf("hw %d, want 150 (the leader's end)", hw)
	}
	// Fetching as an incarnation other than the registered one does not
	// make it eligible; registered at that epoch, it joins.
	registered[3] = 4
	if isr, changed := tr.PlanISR(150, 0, now, lag, eligible); changed {
		t.Fatalf("planned %v with broker 3 fetching at epoch 3, registered at 4", isr)
	}
	registered[3] = 3
	tr.RecordFetch(3, 3, 150, 150, now)
	if isr, changed := tr.PlanISR(150, 0, now, lag, eligible); !changed || !slices.Equal(isr, []int32{1, 3}) {
		t.Fatalf("plan %v %v, want [1 3] true once broker 3 is eligible", isr, changed)
	}
}

// Joinable: a follower out of the ISR once its log end reaches the high
// watermark, not before, not while in the ISR or being added.
func TestJoinable(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := NewTracker(1)
	tr.Reset([]int32{1, 2, 3}, []int32{1, 3}, now)
	tr.RecordFetch(3, -1, 10, 10, now)
	if tr.Joinable(2, 10) {
		t.Fatal("a follower that never fetched is joinable")
	}
	tr.RecordFetch(2, -1, 6, 10, now)
	if tr.Joinable(2, 10) {
		t.Fatal("a follower behind the high watermark is joinable")
	}
	tr.RecordFetch(2, -1, 10, 10, now)
	if !tr.Joinable(2, 10) {
		t.Fatal("a caught-up follower out of the ISR is not joinable")
	}
	if tr.Joinable(3, 10) {
		t.Fatal("an ISR member is joinable")
	}
	if isr, changed := tr.PlanISR(10, 0, now, time.Minute, nil); !changed || !slices.Equal(isr, []int32{1, 2, 3}) {
		t.Fatalf("plan %v %v", isr, changed)
	}
	if tr.Joinable(2, 10) {
		t.Fatal("a follower being added is joinable")
	}
}
