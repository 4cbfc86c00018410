package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/metadata"
)

// newFollowerTurnedLeader opens a partition that followed broker 2 and
// replicated batches from it, then became the leader (epoch 4) with broker 2
// still in the ISR: its high watermark stays where the follower last
// learnt it until broker 2 fetches again, below its log end.
func newFollowerTurnedLeader(t *testing.T, topic string, hw int64, batches ...[]byte) *partition {
	t.Helper()
	p := newBarePartition(t, topic)
	p.applyAssignment(1, &metadata.Partition{Leader: 2, LeaderEpoch: 3, PartitionEpoch: 5,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, 1)
	var off int64
	for _, b := range batches {
		h, err := hotlog.ParseBatchHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		// The leader's offsets and epoch (neither is under the CRC).
		binary.BigEndian.PutUint64(b[0:], uint64(off))
		binary.BigEndian.PutUint32(b[12:], 3)
		if err := p.appendReplicated(b); err != nil {
			t.Fatal(err)
		}
		off += int64(h.LastOffsetDelta) + 1
	}
	p.log.SetHighWatermark(hw)
	p.applyAssignment(1, &metadata.Partition{Leader: 1, LeaderEpoch: 4, PartitionEpoch: 6,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, 2)
	if !p.isLeader(4) || p.log.HighWatermark() != hw || p.log.LogEndOffset() != off {
		t.Fatalf("leader %v, high watermark %d, log end %d; want a leader at %d below %d",
			p.isLeader(4), p.log.HighWatermark(), p.log.LogEndOffset(), hw, off)
	}
	return p
}

func grec(k, v string) group.Record { return group.Record{Key: []byte(k), Value: []byte(v)} }

// A coordinator that loads its partition on becoming the leader reads it
// to the log end, not the high watermark: the previous leader acknowledged
// what the gap holds (an offset commit, a transaction's commit marker, a
// transaction state), and every bit of it is the partition's from now on.
// A load that stopped at the high watermark left a group at older offsets
// and a transaction in an older state (records consumed twice through an
// exactly-once chain under rolling restarts).
func TestCoordinatorLoadReadsToLogEnd(t *testing.T) {
	t.Run("offsets", func(t *testing.T) {
		p := newFollowerTurnedLeader(t, offsetsTopic, 1,
			encodeOffsetsBatch([]group.Record{grec("plain-1", "a")}, 1000),                      // 0
			encodeOffsetsBatch([]group.Record{grec("plain-2", "b")}, 1000),                      // 1: past the high watermark
			encodeBatch([]group.Record{grec("txn-commit", "c")}, 7, 0, attrTransactional, 1000), // 2
			encodeBatch([]group.Record{grec("txn-abort", "d")}, 8, 0, attrTransactional, 1000),  // 3
			encodeMarkerBatch(7, 0, true, 2, 1000),                                              // 4: commits 2
			encodeMarkerBatch(8, 0, false, 2, 1000),                                             // 5: aborts 3
		)
		tx := &txns{}
		tx.mu.offsets = make(map[int32]map[int64][]group.Record)
		var got []string
		err := tx.replayOffsets(context.Background(), p, 0, func(k, v []byte) error {
			got = append(got, fmt.Sprintf("%s=%s", k, v))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"plain-1=a", "plain-2=b", "txn-commit=c"}; !slices.Equal(got, want) {
			t.Fatalf("replayed %q, want %q", got, want)
		}
		if n := len(tx.mu.offsets[0]); n != 0 {
			t.Fatalf("%d producers left pending, want none (both markers are in the log)", n)
		}
	})

	t.Run("transaction state", func(t *testing.T) {
		p := newFollowerTurnedLeader(t, "__transaction_state", 1,
			encodeOffsetsBatch([]group.Record{grec("txn-a", "ongoing")}, 1000),
			encodeOffsetsBatch([]group.Record{grec("txn-a", "prepare-commit")}, 1000),
			encodeOffsetsBatch([]group.Record{grec("txn-a", "complete-commit")}, 1000),
		)
		var got []string
		end, err := replayLog(context.Background(), p, p.log.LogStartOffset(), func(data []byte, off int64) (int64, error) {
			return replayBatches(data, off, func(k, v []byte) error {
				got = append(got, fmt.Sprintf("%s=%s", k, v))
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"txn-a=ongoing", "txn-a=prepare-commit", "txn-a=complete-commit"}; !slices.Equal(got, want) || end != 3 {
			t.Fatalf("replayed %q to %d, want %q to 3", got, end, want)
		}
	})
}
