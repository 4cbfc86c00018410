package broker

import (
	"context"
	"fmt"
	"testing"

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
