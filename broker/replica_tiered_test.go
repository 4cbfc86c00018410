package broker

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/metadata"
)

// producerSeqs is each producer's epoch and last sequence in p's state.
func producerSeqs(p *partition) map[int64][2]int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[int64][2]int32{}
	for id, e := range p.mu.producers.m {
		out[id] = [2]int32{int32(e.epoch), e.lastSeq()}
	}
	return out
}

// TestFollowerBelowLocalStartStartsAtRemoteEnd: a new replica of a tiered
// partition whose leader has deleted its old segments locally is answered
// OFFSET_MOVED_TO_TIERED_STORAGE and starts its log at the remote log end
// (KIP-405, KIP-1023), never copying the bucket's records back: its log
// start is the remote end, its leader epoch and producer state are those of
// the log below it (an idempotent producer that wrote only before the
// remote end is known, with its last sequence, as on the leader); it then
// catches up locally and holds the leader's bytes. The producer state
// rebuilt from the remote batches alone (no snapshot) is the same.
func TestFollowerBelowLocalStartStartsAtRemoteEnd(t *testing.T) {
	dir := t.TempDir()
	store := fsBucket(t, dir)
	defer store.Close()
	lb := startTieredBroker(t, filepath.Join(dir, "broker"), store)
	const topic = "tailstart"
	createTopic(t, lb, topic, 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1")})
	early := newClient(t, lb, kgo.ProducerLinger(0))
	produceAll(t, early, makeRecords(topic, 300, "early"))
	late := newClient(t, lb, kgo.ProducerLinger(0))
	for range 10 {
		produceAll(t, late, makeRecords(topic, 100, "late"))
	}
	lp, err := lb.store.partition(lb.meta.State(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitTiered(t, "the leader's local log to start past the early producer's records", func() bool {
		return lp.log.LogStartOffset() > 300
	})
	want := producerSeqs(lp)
	if len(want) != 2 {
		t.Fatalf("leader's producers %v, want the two", want)
	}

	mustPropose(t, lb, &metadata.RegisterBroker{BrokerID: 9, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1,
		Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 1}}})
	mustPropose(t, lb, &metadata.AlterReassignment{TopicID: leaderPartitionTopicID(t, lb, topic), Target: []int32{lb.cfg.NodeID, 9}})
	testutil.WaitFor(t, 10*time.Second, "broker 9 a follower on the leader", func() bool { return lp.hasFollower(9) })
	fo := newFollowerOf(t, lb, topic)
	ctx := testCtx(t)

	// The follower's broker has no bucket: the leader's answer stops it
	// there, with nothing copied.
	fo.truncate(t)
	err = fo.f.fetch(ctx, fo.f.snapshot())
	if err == nil || !strings.Contains(err.Error(), "no bucket configured") {
		t.Fatalf("fetch from 0 below the leader's local start %d: %v, want the tiered-storage answer", lp.log.LogStartOffset(), err)
	}
	if end := fo.p.log.LogEndOffset(); end != 0 {
		t.Fatalf("the follower copied records up to %d from the bucket", end)
	}

	// What the follower does with a bucket.
	tp := lb.tier().tierPartition(lp)
	remoteEnd := listOffset(t, lb, topic, -5) + 1
	start, err := fo.p.startAtRemoteEnd(ctx, tp, fo.f.snapshot()[fo.p].epoch)
	if err != nil {
		t.Fatal(err)
	}
	if start != remoteEnd || fo.p.log.LogStartOffset() != remoteEnd || fo.p.log.LogEndOffset() != remoteEnd {
		t.Fatalf("follower started at %d, log [%d, %d); want the remote end %d", start,
			fo.p.log.LogStartOffset(), fo.p.log.LogEndOffset(), remoteEnd)
	}
	if e, le := fo.p.log.LatestEpoch(), lp.log.LatestEpoch(); e != le {
		t.Fatalf("follower's epoch %d, the leader's %d", e, le)
	}
	// The state at the remote end: the early producer's as the leader
	// has it, the late one's as of its record before the remote end.
	atEnd := map[int64][2]int32{}
	for id, e := range want {
		if e[1] != 299 {
			e[1] = int32(remoteEnd - 300 - 1)
		}
		atEnd[id] = e
	}
	if got := producerSeqs(fo.p); !equalSeqs(got, atEnd) {
		t.Fatalf("follower's producers %v at %d, want %v (the leader's at its end %d: %v)", got, remoteEnd, atEnd, lp.log.LogEndOffset(), want)
	}

	// Without a snapshot: the remote batches replayed give the same state.
	st := newProducerState()
	rs, err := tp.RemoteLogStart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := replayRemote(ctx, tp, st, rs, remoteEnd); err != nil {
		t.Fatal(err)
	}
	replayed := map[int64][2]int32{}
	for id, e := range st.m {
		replayed[id] = [2]int32{int32(e.epoch), e.lastSeq()}
	}
	if !equalSeqs(replayed, atEnd) {
		t.Fatalf("replayed producers %v, want %v", replayed, atEnd)
	}

	// It catches up from the leader's local log.
	end := lp.log.LogEndOffset()
	for i := 0; fo.p.log.LogEndOffset() < end; i++ {
		if i == 20 {
			t.Fatalf("follower at %d after 20 fetches, leader at %d", fo.p.log.LogEndOffset(), end)
		}
		if err := fo.f.fetch(ctx, fo.f.snapshot()); err != nil {
			t.Fatal(err)
		}
	}
	lb2, err := lp.log.ReadBytes(remoteEnd, 64<<20, end)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fo.p.log.ReadBytes(remoteEnd, 64<<20, end)
	if err != nil {
		t.Fatal(err)
	}
	if string(lb2) != string(fb) || len(fb) == 0 {
		t.Fatalf("follower holds %d bytes from %d, the leader %d, not the same", len(fb), remoteEnd, len(lb2))
	}
	if got := producerSeqs(fo.p); !equalSeqs(got, want) {
		t.Fatalf("caught up, the follower's producers %v, the leader's %v", got, want)
	}
}

func equalSeqs(a, b map[int64][2]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
