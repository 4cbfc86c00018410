package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/metadata"
)

// An ISR change whose fate is unknown is proposed again unchanged; only a
// refusal at the epochs it was made for releases the followers it adds
// from holding the high watermark (a stale epoch may be the proposal's own
// earlier copy committing, seen before this broker applied it).
func TestISRChangeRefused(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("%w: t-0: broker 1 is fenced or shutting down", metadata.ErrIneligibleReplica), true},
		{fmt.Errorf("%w: t-0: empty ISR", metadata.ErrInvalidRequest), true},
		{metadata.ErrUnknownPartition, true},
		{metadata.ErrUnknownTopic, true},
		{fmt.Errorf("%w: t-0: epochs 3/7, current 3/8", metadata.ErrStaleEpoch), false},
		{fmt.Errorf("%w: %w", metadata.ErrNoQuorum, context.DeadlineExceeded), false},
		{context.DeadlineExceeded, false},
		{metadata.ErrNotLeader, false},
		{metadata.ErrClosed, false},
		{fmt.Errorf("metadata: forward: connection reset"), false},
	} {
		if got := isrChangeRefused(tc.err); got != tc.want {
			t.Errorf("isrChangeRefused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestISRProposalDecided(t *testing.T) {
	cmd := &metadata.ChangeLeaderAndISR{LeaderEpoch: 4, PartitionEpoch: 9, Leader: 3, ISR: []int32{3, 1}}
	for _, tc := range []struct {
		leaderEpoch, partitionEpoch int32
		want                        bool
	}{
		{4, 9, false}, // still pending: propose it again
		{4, 10, true}, // committed (or something else did and it never can)
		{5, 9, true},  // a new leadership
		{5, 11, true},
	} {
		if got := isrProposalDecided(cmd, tc.leaderEpoch, tc.partitionEpoch); got != tc.want {
			t.Errorf("decided at %d/%d = %v, want %v", tc.leaderEpoch, tc.partitionEpoch, got, tc.want)
		}
	}
	if isrProposalDecided(nil, 4, 9) {
		t.Error("no proposal reported decided")
	}
}

// newBarePartition opens partition 0 of topic on a fresh log, outside any
// broker, with no assignment yet.
func newBarePartition(t *testing.T, topic string) *partition {
	t.Helper()
	l, err := hotlog.Open(hotlog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &partition{topic: topic, id: 0, log: l}
	p.mu.producers = newProducerState()
	p.mu.waiters = make(map[chan struct{}]struct{})
	p.resetDurableEnd()
	return p
}

// newLeaderPartition opens a partition led by broker 1 with follower 2 in
// the ISR, outside any broker (replication.go's bookkeeping only).
func newLeaderPartition(t *testing.T) *partition {
	t.Helper()
	p := newBarePartition(t, offsetsTopic)
	p.applyAssignment(1, &metadata.Partition{Leader: 1, LeaderEpoch: 3, PartitionEpoch: 5,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, 1)
	return p
}

// A write of the broker's own (coordinator records, markers) is answered
// only once the ISR has it: a local append alone was lost when leadership
// moved to a follower without it (acknowledged offset commits and
// transaction states went back under rolling restarts).
func TestAppendInternalWaitsForISR(t *testing.T) {
	batch := func() []byte {
		return encodeOffsetsBatch([]group.Record{{Key: []byte("k"), Value: []byte("v")}}, time.Now().UnixMilli())
	}
	stopping := make(chan struct{})

	t.Run("not replicated", func(t *testing.T) {
		p := newLeaderPartition(t)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err := p.appendInternal(ctx, batch(), stopping)
		if !errors.Is(err, kerr.RequestTimedOut) {
			t.Fatalf("appendInternal with the follower never fetching: %v, want REQUEST_TIMED_OUT", err)
		}
		if p.log.LogEndOffset() != 1 || p.log.HighWatermark() != 0 {
			t.Fatalf("log end %d, hw %d; want 1, 0", p.log.LogEndOffset(), p.log.HighWatermark())
		}
	})

	t.Run("replicated", func(t *testing.T) {
		p := newLeaderPartition(t)
		p.recordFollowerFetch(2, -1, 0)
		done := make(chan error, 1)
		go func() { done <- p.appendInternal(context.Background(), batch(), stopping) }()
		testutil.WaitFor(t, 10*time.Second, "the append", func() bool { return p.log.LogEndOffset() == 1 })
		p.recordFollowerFetch(2, -1, 1) // the follower has it
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("appendInternal: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("appendInternal did not return once the follower had the batch")
		}
	})

	t.Run("leadership moves", func(t *testing.T) {
		p := newLeaderPartition(t)
		done := make(chan error, 1)
		go func() { done <- p.appendInternal(context.Background(), batch(), stopping) }()
		testutil.WaitFor(t, 10*time.Second, "the append", func() bool { return p.log.LogEndOffset() == 1 })
		p.applyAssignment(1, &metadata.Partition{Leader: 2, LeaderEpoch: 4, PartitionEpoch: 6,
			Replicas: []int32{1, 2}, ISR: []int32{2}}, 2)
		select {
		case err := <-done:
			if !errors.Is(err, errNotLeader) {
				t.Fatalf("appendInternal after the leadership moved: %v, want errNotLeader", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("appendInternal did not return when the leadership moved")
		}
	})
}
