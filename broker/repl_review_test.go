package broker

import (
	"errors"
	"testing"
	"time"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/metadata"
)

// An acks=all wait (or a coordinator's appendInternal) that looks at the
// partition only after the leadership moved must not acknowledge: the high
// watermark it sees then is the new leader's, over a log this broker
// truncated and refilled with the new leader's records, so the offset it
// waits for may hold another batch than the one it appended. Kafka's
// checkEnoughReplicasReachOffset answers NOT_LEADER_OR_FOLLOWER once the
// replica is no longer the leader, whatever the high watermark says.
func TestWaitCommittedAfterLeadershipMovedIsNotAcknowledged(t *testing.T) {
	p := newLeaderPartition(t) // leader in epoch 3, follower 2 in the ISR
	epoch := p.leaderEpoch()
	res, err := p.appendBatch(encodeOffsetsBatch([]group.Record{grec("k", "acked?")}, 1000), 1<<20, epoch, false, false, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if hw := p.log.HighWatermark(); hw != 0 {
		t.Fatalf("high watermark %d before the follower fetched, want 0", hw)
	}
	// Broker 2 takes over in epoch 4 without the batch; this broker
	// follows, cuts its tail and takes broker 2's record at that offset.
	p.applyAssignment(1, &metadata.Partition{Leader: 2, LeaderEpoch: 4, PartitionEpoch: 6,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, 2)
	if err := p.truncateTo(res.baseOffset, 4); err != nil {
		t.Fatal(err)
	}
	other := encodeOffsetsBatch([]group.Record{grec("k", "new leader's")}, 1000)
	putBatchOffsetEpoch(other, res.baseOffset, 4)
	if err := p.appendReplicated(other, 4); err != nil {
		t.Fatal(err)
	}
	p.followerHighWatermark(res.baseOffset+1, 4)
	if hw := p.log.HighWatermark(); hw != res.baseOffset+1 {
		t.Fatalf("follower high watermark %d, want %d", hw, res.baseOffset+1)
	}
	// The producer's wait, woken by the role change, runs only now.
	stopping := make(chan struct{})
	err = p.waitCommitted(res.baseOffset, epoch, time.Now().Add(time.Second), stopping)
	if !errors.Is(err, errNotLeader) {
		t.Fatalf("wait for offset %d appended in epoch %d, after the leadership moved and the offset was replaced: %v, want errNotLeader",
			res.baseOffset, epoch, err)
	}
}
