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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
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
		if err := p.appendReplicated(b, 3); err != nil {
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
		tx.mu.offsets = make(map[int32]map[int64][]*txnOffsetBatch)
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

// The log publishes a leader's append (its end moves; a follower may read
// the batch and the high watermark pass it) a moment before the producer
// state learns of it (hotlog's Written callback). A transaction's first
// batch must not count as stable in that moment: the last stable offset
// never passes what the producer state has applied, or a read_committed
// fetch could hand out records of a transaction that is later aborted.
func TestLastStableOffsetWaitsForProducerState(t *testing.T) {
	p := newBarePartition(t, "t")
	if err := p.loadProducers(); err != nil {
		t.Fatal(err)
	}
	plain := encodeOffsetsBatch([]group.Record{grec("k", "v")}, 1000)
	if _, err := p.log.Append(plain, hotlog.AppendOptions{Written: func(hs []hotlog.BatchHeader) {
		p.mu.Lock()
		p.mu.stateEnd = hs[0].LastOffset() + 1
		p.mu.Unlock()
	}}); err != nil {
		t.Fatal(err)
	}
	p.log.SetHighWatermark(1)
	if lso := p.lastStableOffset(); lso != 1 {
		t.Fatalf("last stable offset %d after a committed plain batch, want 1", lso)
	}
	txnBatch := encodeBatch([]group.Record{grec("k", "in a transaction")}, 7, 0, attrTransactional, 1000)
	var inWindow int64 = -1
	_, err := p.log.Append(txnBatch, hotlog.AppendOptions{Written: func(hs []hotlog.BatchHeader) {
		// The batch is in the log and (as if a follower had it) under
		// the high watermark; the producer state has not applied it yet.
		p.log.SetHighWatermark(p.log.LogEndOffset())
		inWindow = p.lastStableOffset()
		p.mu.Lock()
		info, _ := batchInfoOf(txnBatch, hs[0])
		p.mu.producers.apply(info, hs[0].BaseOffset, hs[0].LastOffset(), 1000)
		p.mu.stateEnd = hs[0].LastOffset() + 1
		p.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if inWindow != 1 {
		t.Fatalf("last stable offset %d while the transaction's first batch (offset 1) was in the log but not in the producer state, want 1", inWindow)
	}
	if lso := p.lastStableOffset(); lso != 1 {
		t.Fatalf("last stable offset %d with the transaction open at 1, want 1", lso)
	}
}

// A follower that truncates a divergent tail holding a transaction's abort
// marker (written by the previous leader, never replicated: the
// coordinator writes it again on the new leader) has that transaction open
// again once the tail is cut, and the cut drops the marker's transaction
// index entry. Until the producer state is rebuilt from the truncated log,
// the old state still counts the transaction as closed: the last stable
// offset must not pass its first batch in that moment, or a read_committed
// fetch (a long poll begun while this broker led) hands out its records
// with no aborted entry, as committed, although the transaction ends
// aborted (franz-go's TestTxnEtl "consumed too much" under rolling
// restarts).
func TestTruncationKeepsReopenedTransactionUnstable(t *testing.T) {
	p := newFollowerTurnedLeader(t, "t", 3,
		encodeOffsetsBatch([]group.Record{grec("plain", "a")}, 1000),                             // 0
		encodeBatch([]group.Record{grec("txn", "aborted later")}, 8, 0, attrTransactional, 1000), // 1
		encodeOffsetsBatch([]group.Record{grec("plain", "b")}, 1000),                             // 2
		encodeMarkerBatch(8, 0, false, 2, 1000),                                                  // 3: aborts 1, past the high watermark
	)
	if lso := p.lastStableOffset(); lso != 3 {
		t.Fatalf("last stable offset %d with the transaction aborted at 3, want 3 (the high watermark)", lso)
	}
	// visible checks what a read_committed fetch from the start would be
	// told: records below the last stable offset, and the aborted list.
	visible := func(when string) {
		t.Helper()
		lso := p.lastStableOffset()
		list, err := p.abortedTxns(0, lso)
		if err != nil {
			t.Fatal(err)
		}
		if lso > 1 && !slices.ContainsFunc(list, func(a kmsg.FetchResponseTopicPartitionAbortedTransaction) bool {
			return a.ProducerID == 8 && a.FirstOffset <= 1
		}) {
			t.Fatalf("%s: last stable offset %d passes the transaction at 1 with aborted list %+v: its record reads as committed", when, lso, list)
		}
	}
	visible("before the truncation")
	// The leadership moves back to broker 2, whose log ends at 3.
	p.applyAssignment(1, &metadata.Partition{Leader: 2, LeaderEpoch: 5, PartitionEpoch: 7,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, 3)
	p.testHookTruncated = func() { visible("between the truncation and the producer state's rebuild") }
	if err := p.truncateTo(3, 5); err != nil {
		t.Fatal(err)
	}
	visible("after the truncation")
	if lso := p.lastStableOffset(); lso != 1 {
		t.Fatalf("last stable offset %d after the truncation, want 1 (the transaction is open again)", lso)
	}

	// A truncation whose rebuild failed leaves the bound; the fetcher's
	// next attempt rebuilds although the log needs no further cut.
	p.testHookTruncated = nil
	p.mu.Lock()
	p.mu.rebuilding = true
	p.mu.Unlock()
	if !p.rebuildPending() || p.lastStableOffset() != 0 {
		t.Fatalf("pending rebuild: last stable offset %d, want the log start 0", p.lastStableOffset())
	}
	if err := p.truncateTo(p.log.LogEndOffset(), 5); err != nil {
		t.Fatal(err)
	}
	if p.rebuildPending() || p.lastStableOffset() != 1 {
		t.Fatalf("after the retried rebuild: pending %v, last stable offset %d, want false and 1", p.rebuildPending(), p.lastStableOffset())
	}
}

// A consumer's fetch that began while this broker led the partition and
// waits (a long poll) must not be answered from the partition once the
// broker follows: as a follower it truncates divergent tails, and while
// it does the producer state and the log disagree. It answers NOT_LEADER,
// as Kafka's DelayedFetch completes when the leadership moves.
func TestLongPollStopsServingAfterLeadershipMoves(t *testing.T) {
	p := newLeaderPartition(t)
	b := &Broker{}
	resp := kmsg.NewPtrFetchResponse()
	rt := kmsg.NewFetchResponseTopic()
	rt.Partitions = append(rt.Partitions, kmsg.NewFetchResponseTopicPartition())
	resp.Topics = append(resp.Topics, rt)
	parts := []*fetchPart{{p: p, maxBytes: 1 << 20, led: p.isLeader(-1)}}
	if _, failed, _ := b.readFetchParts(context.Background(), resp, parts, 1<<20, true); failed || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("read while leading: failed %v, error code %d", failed, resp.Topics[0].Partitions[0].ErrorCode)
	}
	releaseFetchParts(parts)
	p.applyAssignment(1, &metadata.Partition{Leader: 2, LeaderEpoch: 4, PartitionEpoch: 6,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, 2)
	_, failed, _ := b.readFetchParts(context.Background(), resp, parts, 1<<20, true)
	releaseFetchParts(parts)
	if code := resp.Topics[0].Partitions[0].ErrorCode; !failed || code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("re-read after the leadership moved: failed %v, error code %d, want NOT_LEADER_OR_FOLLOWER", failed, code)
	}
}
