package broker

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
	"github.com/sediment-io/sediment/metadata"
)

// putBatchOffsetEpoch sets a batch's base offset and leader epoch, as a
// leader stamps them (neither is under the CRC).
func putBatchOffsetEpoch(b []byte, off int64, epoch int32) {
	binary.BigEndian.PutUint64(b[0:], uint64(off))
	binary.BigEndian.PutUint32(b[12:], uint32(epoch))
}

// A client's batch is checked against the leadership when its request is
// handled and written a moment later (after a transactional producer's
// partition is verified with its coordinator, for one). If the leadership
// moved in between, the write must be refused: written anyway it was
// stamped with the new leader's epoch on a broker that now follows, a tail
// the new leader never wrote under that epoch (seen under rolling restarts
// as a follower truncating twice, the second time with the new leader
// answering that its own epoch ended below the follower's log end).
func TestAppendAfterLeadershipMovedIsRefused(t *testing.T) {
	p := newLeaderPartition(t) // leader in epoch 3
	epoch := p.leaderEpoch()
	if _, err := p.appendBatch(encodeOffsetsBatch([]group.Record{grec("k", "v")}, 1000), 1<<20, epoch, false, false, func() {}); err != nil {
		t.Fatal(err)
	}
	p.applyAssignment(1, &metadata.Partition{Leader: 2, LeaderEpoch: 4, PartitionEpoch: 6,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, 2)
	for _, e := range []int32{epoch, p.leaderEpoch()} {
		_, err := p.appendBatch(encodeOffsetsBatch([]group.Record{grec("k", "late")}, 1000), 1<<20, e, false, false, func() {})
		if !errors.Is(err, errNotLeader) {
			t.Fatalf("append for epoch %d after the leadership moved to broker 2 in epoch 4: %v, want errNotLeader", e, err)
		}
	}
	if end, latest := p.log.LogEndOffset(), p.log.LatestEpoch(); end != 1 || latest != 3 {
		t.Fatalf("log end %d, latest epoch %d after refused appends; want 1 and 3", end, latest)
	}
	if err := p.appendMarker(8, 0, false, 0, nil); !errors.Is(err, errNotLeader) {
		t.Fatalf("transaction marker on a follower: %v, want errNotLeader", err)
	}
}

// A follower's fetcher decides a truncation and appends a response for the
// leader epoch it followed in. A response that arrives after this broker
// took over (or moved on to a newer leader) is not its log's to take: the
// append, the truncation and the high watermark are all dropped.
func TestStaleFetchResponseIsDroppedAfterTakeover(t *testing.T) {
	p := newBarePartition(t, "t")
	if err := p.loadProducers(); err != nil {
		t.Fatal(err)
	}
	p.applyAssignment(1, &metadata.Partition{Leader: 2, LeaderEpoch: 3, PartitionEpoch: 5,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, 1)
	fetched := func(off int64) []byte {
		b := encodeOffsetsBatch([]group.Record{grec("k", "v")}, 1000)
		putBatchOffsetEpoch(b, off, 3)
		return b
	}
	if err := p.appendReplicated(fetched(0), 3); err != nil {
		t.Fatal(err)
	}
	if err := p.appendReplicated(fetched(1), 2); !errors.Is(err, errRoleChanged) {
		t.Fatalf("append of a response from epoch 2 while following in 3: %v, want errRoleChanged", err)
	}
	p.followerHighWatermark(1, 3)
	if hw := p.log.HighWatermark(); hw != 1 {
		t.Fatalf("follower high watermark %d, want 1", hw)
	}
	p.applyAssignment(1, &metadata.Partition{Leader: 1, LeaderEpoch: 4, PartitionEpoch: 6,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, 2)
	if err := p.appendReplicated(fetched(1), 3); !errors.Is(err, errRoleChanged) {
		t.Fatalf("append of the old leader's response after taking over: %v, want errRoleChanged", err)
	}
	if err := p.truncateTo(0, 3); !errors.Is(err, errRoleChanged) {
		t.Fatalf("truncation decided as a follower, run as the leader: %v, want errRoleChanged", err)
	}
	if err := p.restartAt(5, 3); !errors.Is(err, errRoleChanged) {
		t.Fatalf("restart at the old leader's log start, run as the leader: %v, want errRoleChanged", err)
	}
	p.followerHighWatermark(0, 3) // no effect either way; must not touch the leader's
	if end, start := p.log.LogEndOffset(), p.log.LogStartOffset(); end != 1 || start != 0 {
		t.Fatalf("leader's log [%d, %d) after stale follower writes, want [0, 1)", start, end)
	}
}

// A producer snapshot is recorded at the offset the producer state has
// applied, not at the log end: a leader's append moves the log end just
// before the state applies the batch, and a snapshot in between recorded at
// the log end would skip that batch for good on the next load (a restart,
// or a follower's truncation): a transaction it began would be unknown,
// its records stable, with no aborted entry when it aborts.
func TestProducerSnapshotRecordsWhatTheStateApplied(t *testing.T) {
	p := newBarePartition(t, "t")
	if err := p.loadProducers(); err != nil {
		t.Fatal(err)
	}
	// In the log, not yet in the state (as between the log end's move and
	// the Written hook).
	if _, err := p.log.Append(encodeBatch([]group.Record{grec("txn", "v")}, 8, 0, attrTransactional, 1000), hotlog.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.snapshotProducers(); err != nil {
		t.Fatal(err)
	}
	if err := p.loadProducers(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	first := p.mu.producers.firstUnstable()
	p.mu.Unlock()
	if first != 0 {
		t.Fatalf("after a snapshot and a reload the transaction begun at 0 is open at %d, want 0", first)
	}
}

// A follower applies fetched batches to its producer state only once they
// are written, after their transaction index entries (as a leader does):
// followers serve read_committed fetches (KIP-392), so in no moment may a
// transaction count as closed there (its records below the last stable
// offset) while its abort's index entry is not yet readable. Checked from
// inside the append, at the index entry's write, and with a failed write
// (which must change nothing).
func TestFollowerAppliesStateAfterTheWrite(t *testing.T) {
	var hook func(op errorfs.Op, path string) error
	p := newErrorFSFollower(t, &hook)
	data := encodeBatch([]group.Record{grec("txn", "aborted")}, 8, 0, attrTransactional, 1000)
	putBatchOffsetEpoch(data, 0, 3)
	if err := p.appendReplicated(data, 3); err != nil {
		t.Fatal(err)
	}
	p.followerHighWatermark(1, 3) // the leader has the record at 0 everywhere
	marker := func() []byte {
		b := encodeMarkerBatch(8, 0, false, 1, 1000)
		putBatchOffsetEpoch(b, 1, 3)
		return b
	}
	checked := 0
	visible := func(when string) {
		checked++
		lso := p.lastStableOffset()
		list, err := p.abortedTxns(0, lso)
		if err != nil {
			t.Error(err)
		}
		if lso > 0 && len(list) == 0 {
			t.Errorf("%s: last stable offset %d passes the transaction at 0 with no aborted entry: a read_committed fetch from this follower reads it as committed", when, lso)
		}
	}

	// The log's write of the marker fails: nothing changes.
	hook = func(op errorfs.Op, path string) error {
		if op == errorfs.OpFileWrite && strings.HasSuffix(path, ".log") {
			return errorfs.ErrInjected
		}
		return nil
	}
	if err := p.appendReplicated(marker(), 3); err == nil {
		t.Fatal("append with a failing segment write succeeded")
	}
	p.mu.Lock()
	first := p.mu.producers.firstUnstable()
	p.mu.Unlock()
	if first != 0 || p.lastStableOffset() != 0 {
		t.Fatalf("after a failed write of the abort marker: transaction open at %d, last stable offset %d; want 0 and 0", first, p.lastStableOffset())
	}

	// Written this time; looked at while its index entry is being written.
	hook = func(op errorfs.Op, path string) error {
		if op == errorfs.OpFileWrite && strings.HasSuffix(path, ".txnindex") {
			visible("while the abort's index entry is written")
		}
		return nil
	}
	if err := p.appendReplicated(marker(), 3); err != nil {
		t.Fatal(err)
	}
	hook = nil
	p.followerHighWatermark(2, 3)
	visible("after the append")
	if checked != 2 {
		t.Fatalf("checked %d times, want 2 (once inside the append)", checked)
	}
	if lso := p.lastStableOffset(); lso != 2 {
		t.Fatalf("last stable offset %d after the abort, want 2", lso)
	}
}

// newErrorFSFollower opens a partition on a file system whose operations
// *hook (when set) may fail, following broker 2 in leader epoch 3.
func newErrorFSFollower(t *testing.T, hook *func(op errorfs.Op, path string) error) *partition {
	t.Helper()
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if *hook != nil {
			return (*hook)(op, path)
		}
		return nil
	}))
	l, err := hotlog.Open(hotlog.Options{FS: fs, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return newTestPartition(t, l, &metadata.Partition{Leader: 2, LeaderEpoch: 3, PartitionEpoch: 5,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}})
}

// newTestPartition is partition "t" of broker 1 on l, its producer state
// loaded, with assignment asg; l is closed at the test's end.
func newTestPartition(t *testing.T, l *hotlog.Log, asg *metadata.Partition) *partition {
	t.Helper()
	t.Cleanup(func() { l.Close() })
	p := &partition{topic: "t", log: l}
	p.mu.producers = newProducerState()
	p.mu.waiters = make(map[chan struct{}]struct{})
	p.resetDurableEnd()
	if err := p.loadProducers(); err != nil {
		t.Fatal(err)
	}
	p.applyAssignment(1, asg, 1)
	return p
}

// A follower's truncation whose producer-state rebuild fails keeps the
// last stable offset at the log start until a rebuild succeeds (its
// fetcher retries). If the broker becomes the leader first, there is no
// fetcher: taking the leadership rebuilds, or the partition's
// read_committed consumers would wait forever.
func TestLeadershipRebuildsPendingProducerState(t *testing.T) {
	var hook func(op errorfs.Op, path string) error
	p := newErrorFSFollower(t, &hook)
	for off := int64(0); off < 3; off++ {
		b := encodeOffsetsBatch([]group.Record{grec("k", "v")}, 1000)
		putBatchOffsetEpoch(b, off, 3)
		if err := p.appendReplicated(b, 3); err != nil {
			t.Fatal(err)
		}
	}
	p.followerHighWatermark(3, 3)
	hook = func(op errorfs.Op, path string) error {
		if op == errorfs.OpFileRead && strings.HasSuffix(path, ".log") {
			return errorfs.ErrInjected
		}
		return nil
	}
	if err := p.truncateTo(2, 3); err == nil {
		t.Fatal("truncation with a failing rebuild succeeded")
	}
	hook = nil
	if !p.rebuildPending() || p.lastStableOffset() != 0 {
		t.Fatalf("after a failed rebuild: pending %v, last stable offset %d; want true and 0", p.rebuildPending(), p.lastStableOffset())
	}
	p.applyAssignment(1, &metadata.Partition{Leader: 1, LeaderEpoch: 4, PartitionEpoch: 6,
		Replicas: []int32{1, 2}, ISR: []int32{1}}, 2)
	if p.rebuildPending() {
		t.Fatal("the new leader still has a producer-state rebuild pending")
	}
	if lso, hw := p.lastStableOffset(), p.log.HighWatermark(); lso == 0 || lso != hw {
		t.Fatalf("leader's last stable offset %d, want its high watermark %d (no transaction is open)", lso, hw)
	}
}
