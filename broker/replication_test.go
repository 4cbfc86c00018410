package broker

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/metadata"
)

// A fetcher's failing rounds are a WARN only once they outlast
// replicaFailingAfter, then once a replicaFailingEvery, and an INFO when a
// round succeeds again.
func TestReplicaFetchFailuresLogged(t *testing.T) {
	var logs testutil.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var ff fetchFailures
	t0 := time.Unix(1000, 0)
	err := errors.New("gapped-0: hotlog: replicated batch does not continue the log")
	for _, d := range []time.Duration{0, time.Second, 29 * time.Second} {
		ff.failed(log, err, t0.Add(d))
	}
	if logs.String() != "" {
		t.Fatalf("logged within %v of failing:\n%s", replicaFailingAfter, logs.String())
	}
	for _, d := range []time.Duration{31 * time.Second, 40 * time.Second, 90 * time.Second, 92 * time.Second} {
		ff.failed(log, err, t0.Add(d))
	}
	if n := strings.Count(logs.String(), `level=WARN msg="replication from this leader keeps failing`); n != 2 {
		t.Fatalf("%d WARN lines for 92 s of failures, want 2 (at 31 s and 92 s):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "does not continue the log") {
		t.Fatalf("the error is not in the line:\n%s", logs.String())
	}
	ff.succeeded(log)
	if !strings.Contains(logs.String(), `level=INFO msg="replication from this leader works again"`) {
		t.Fatalf("no line when it works again:\n%s", logs.String())
	}
	before := logs.String()
	ff.failed(log, err, t0.Add(200*time.Second))
	ff.succeeded(log)
	if logs.String() != before {
		t.Fatalf("a short failure logged:\n%s", logs.String()[len(before):])
	}
}

// TestISRExpandsAtCatchUp: with a lag time of an hour the ISR loop's tick
// comes every 15 minutes; a replica added by a reassignment joins the ISR
// as soon as its fetches catch up (the fetch wakes the loop), as Kafka's
// leader expands the ISR at that fetch. Before, it waited for the tick
// (7.5 s at the default lag; 6-30 s for a restarted broker's partitions).
func TestISRExpandsAtCatchUp(t *testing.T) {
	brokers := startPair(t, func(c *Config) {
		c.Listeners = []Listener{{Addr: "127.0.0.1:0"}}
		c.ReplicaLagTimeMax = time.Hour
	})
	const topic = "expands"
	mt := createOnBroker1(t, brokers, topic, nil)
	cl := newClient(t, brokers[0], kgo.DefaultProduceTopic(topic))
	produceAll(t, cl, makeRecords(topic, 200, "expand"))
	reassignPartition0(t, brokers[0], topic, 1, 2)
	pollUntil(t, 30*time.Second, func() string {
		p, _ := brokers[0].meta.State().Partition(mt.ID, 0)
		if len(p.ISR) != 2 {
			return fmt.Sprintf("replicas %v, ISR %v: the caught-up replica did not join", p.Replicas, p.ISR)
		}
		return ""
	})
}

// createOnBroker1 creates topic with one partition on broker 1 alone, of a
// startPair, retrying until both brokers registered.
func createOnBroker1(t *testing.T, brokers []*Broker, topic string, configs map[string]string) *metadata.Topic {
	t.Helper()
	var st *metadata.State
	pollUntil(t, 20*time.Second, func() string {
		var err error
		if st, err = brokers[0].createTopic(testCtx(t), createTopicSpec{name: topic, partitions: -1, replicationFactor: -1,
			configs: configs, assignment: [][]int32{{1}}}); err != nil {
			return fmt.Sprintf("create on broker 1 alone: %v", err) // until both brokers registered
		}
		return ""
	})
	mt, _ := st.Topic(topic)
	return mt
}

// reassignPartition0 moves partition 0 of topic to replicas, through b.
func reassignPartition0(t *testing.T, b *Broker, topic string, replicas ...int32) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, b))
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, 0, replicas)
	res, err := adm.AlterPartitionAssignments(testCtx(t), req)
	if err != nil || res[topic][0].Err != nil {
		t.Fatalf("reassign %s-0 to %v: %v %v", topic, replicas, err, res[topic][0].Err)
	}
}

// TestFollowerPastLeaderEndStartsAgainThere: a follower whose log starts
// past the leader's log end (it restarted at the bucket's end, then an
// unclean election or a leader restored from an old backup left the leader
// shorter) empties its log and starts it again at the leader's end, as
// Kafka's follower does (UnifiedLog.truncateTo, truncateFullyAndStartAt);
// it then fetches the leader's records and joins the ISR. It cut its log to
// its own start instead (logging "truncating divergent tail" down to the
// leader's end), fetched from there, was answered OFFSET_OUT_OF_RANGE and
// truncated again, for good and with no WARN: out of the ISR for ever (a
// disaster-recovery review, follower log start 14127, leader log end 5547).
func TestFollowerPastLeaderEndStartsAgainThere(t *testing.T) {
	brokers := startPair(t, func(c *Config) { c.Listeners = []Listener{{Addr: "127.0.0.1:0"}} })
	const topic = "pastend"
	mt := createOnBroker1(t, brokers, topic, nil)
	cl := newClient(t, brokers[0], kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceAll(t, cl, makeRecords(topic, 10, "before"))
	reassignPartition0(t, brokers[0], topic, 1, 2)
	lp, err := brokers[0].store.partition(brokers[0].meta.State(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fp *partition
	pollUntil(t, 30*time.Second, func() string {
		p, _ := brokers[0].meta.State().Partition(mt.ID, 0)
		if fp == nil {
			if mt2, ok := brokers[1].meta.State().Topic(topic); ok && slices.Contains(mt2.Partitions[0].Replicas, 2) {
				fp, _ = brokers[1].store.openLocked(mt2, 0)
			}
		}
		if len(p.ISR) != 2 || fp == nil || fp.log.LogEndOffset() != 10 {
			end := int64(-1)
			if fp != nil {
				end = fp.log.LogEndOffset()
			}
			return fmt.Sprintf("ISR %v, broker 2's log end %d: it did not replicate the 10 records", p.ISR, end)
		}
		return ""
	})

	// Broker 2's log restarts at 1000, in the leader's epoch, as a tiered
	// follower's does at its bucket's end…
	const restart = 1000
	fp.role.Lock()
	err = fp.log.StartAt(restart, fp.leaderEpoch(), nil)
	fp.resetDurableEnd()
	if err == nil {
		err = fp.loadProducers()
	}
	fp.role.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	// …and broker 1, whose log ends at 10, is the ISR alone, as after its
	// unclean election.
	pollUntil(t, 30*time.Second, func() string {
		p, _ := brokers[0].meta.State().Partition(mt.ID, 0)
		if len(p.ISR) == 1 {
			return ""
		}
		_, _, err := brokers[0].store.propose(testCtx(t), &metadata.ChangeLeaderAndISR{TopicID: mt.ID,
			LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, Leader: 1, ISR: []int32{1}})
		return fmt.Sprintf("ISR %v: shrink to [1]: %v", p.ISR, err)
	})
	// Broker 2 starts its log again at the leader's end, 10. (Records
	// produced meanwhile may come first: it then starts where the leader
	// ends at its next truncation.)
	pollUntil(t, 30*time.Second, func() string {
		if start, end := fp.log.LogStartOffset(), fp.log.LogEndOffset(); start != 10 || end != 10 {
			return fmt.Sprintf("broker 2's log [%d, %d), want it emptied and started again at the leader's end: [10, 10)", start, end)
		}
		return ""
	})
	for range 5 {
		produceAll(t, cl, makeRecords(topic, 1, "after"))
	}
	if end := lp.log.LogEndOffset(); end != 15 {
		t.Fatalf("leader's log end %d, want 15", end)
	}

	pollUntil(t, 30*time.Second, func() string {
		p, _ := brokers[0].meta.State().Partition(mt.ID, 0)
		start, end := fp.log.LogStartOffset(), fp.log.LogEndOffset()
		if len(p.ISR) != 2 || start != 10 || end != 15 {
			return fmt.Sprintf("ISR %v, broker 2's log [%d, %d): want both in the ISR, its log [10, 15) (restarted at the leader's end 10)", p.ISR, start, end)
		}
		return ""
	})
	want, err := lp.log.ReadBytes(10, 1<<20, 15)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fp.log.ReadBytes(10, 1<<20, 15)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("broker 2's batches [10, 15) (%d bytes) differ from the leader's (%d bytes)", len(got), len(want))
	}
	if e := fp.log.LatestEpoch(); e != lp.leaderEpoch() {
		t.Errorf("broker 2's latest epoch %d, want the leader's %d", e, lp.leaderEpoch())
	}
}

// A replica fetch answered OFFSET_OUT_OF_RANGE while the follower's end is
// not below the leader's log start (the follower is past the leader's end)
// is a failed round (fetchFailures warns when it lasts): it counted as a
// success, so a follower caught in fetch / truncate / fetch never said why
// it stayed out of the ISR.
func TestReplicaFetchPastLeaderEndFails(t *testing.T) {
	lb := startBroker(t, "", func(c *Config) { c.NodeID = 1 })
	cl := newClient(t, lb, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const topic = "fetchpastend"
	createTopic(t, lb, topic, 1, nil)
	produceP0(t, cl, topic)
	// Broker 9 is a replica (the leader answers replica fetches only to
	// its followers).
	mustPropose(t, lb, &metadata.RegisterBroker{BrokerID: 9, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1,
		Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 1}}})
	mustPropose(t, lb, &metadata.AlterReassignment{TopicID: leaderPartitionTopicID(t, lb, topic), Target: []int32{1, 9}})
	lp, err := lb.store.partition(lb.meta.State(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "broker 9 a follower on the leader", func() bool { return lp.hasFollower(9) })
	fo := newFollowerOf(t, lb, topic)
	if err := fo.p.log.StartAt(100, fo.p.leaderEpoch(), nil); err != nil {
		t.Fatal(err)
	}
	fo.p.resetDurableEnd()
	fo.f.markTruncated(fo.p, fo.p.leaderEpoch())
	err = fo.f.fetch(testCtx(t), fo.f.snapshot())
	if !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("fetch at 100 from a leader whose log ends at 1: %v, want OFFSET_OUT_OF_RANGE", err)
	}
	if fo.f.snapshot()[fo.p].truncated {
		t.Error("the partition is still marked truncated: the next round does not truncate")
	}
	// The truncation then starts the log again at the leader's end.
	fo.truncate(t)
	if start, end := fo.p.log.LogStartOffset(), fo.p.log.LogEndOffset(); start != 1 || end != 1 {
		t.Errorf("follower's log [%d, %d) after the truncation, want [1, 1)", start, end)
	}
}
