package broker

import (
	"errors"
	"testing"
	"time"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/hotlog"
)

// TestSnapshotWhileStateRebuilds: between a follower's truncation of its
// divergent tail and the rebuild of its producer state, the state describes
// the cut tail; a periodic snapshot in that window writes nothing and says
// so with errStateRebuilding, which the snapshot loop does not log (before,
// the log's refusal was a WARN "producer snapshot failed … past log end",
// seen twice in a kafkajs chaos run), and writes once the state caught up.
func TestSnapshotWhileStateRebuilds(t *testing.T) {
	p := newBarePartition(t, "rebuild")
	if _, err := p.log.Append(encodeOffsetsBatch([]group.Record{{Key: []byte("k"), Value: []byte("v")}}, time.Now().UnixMilli()), hotlog.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	end := p.log.LogEndOffset()
	p.mu.Lock()
	p.mu.stateEnd = end + 1 // the tail the state still describes was cut
	p.mu.Unlock()
	if err := p.snapshotProducers(); !errors.Is(err, errStateRebuilding) {
		t.Fatalf("snapshot while the state is ahead of the log: %v, want errStateRebuilding", err)
	}
	if p.log.HasProducerSnapshot(end) || p.log.HasProducerSnapshot(end+1) {
		t.Fatal("a snapshot was written while the state was being rebuilt")
	}
	p.mu.Lock()
	p.mu.stateEnd = end // rebuilt
	p.mu.Unlock()
	if err := p.snapshotProducers(); err != nil || !p.log.HasProducerSnapshot(end) {
		t.Fatalf("snapshot after the rebuild: %v, written %v", err, p.log.HasProducerSnapshot(end))
	}
}
