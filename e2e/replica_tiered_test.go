package e2e

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker"
)

// TestReplicationTieredNewReplica: a replica added to a tiered partition
// whose leader keeps only its newest segment locally (local.retention.bytes
// 0) starts at the remote log end instead of copying the bucket's history
// back (the leader answers OFFSET_MOVED_TO_TIERED_STORAGE, KIP-405): with
// brokers as processes sharing one bucket (a local folder), broker 3 joins
// the ISR of a partition written to throughout by an acks=all idempotent
// producer, its local log starts past the records of an idempotent
// producer that wrote only at the beginning, yet once it leads it still
// knows that producer (DescribeProducers: its id and last sequence, from
// the bucket's producer snapshot); every acknowledged record is read back
// from offset 0 once, the old part from the bucket.
func TestReplicationTieredNewReplica(t *testing.T) {
	t.Parallel() // see TestMain
	bucketDir := filepath.Join(t.TempDir(), "bucket")
	c := StartCluster(t, 3, "--bucket-dir", bucketDir)
	const topic = "tiered-new-replica"
	tc := &tierCheck{t: t, c: c, topic: topic, stopped: map[int]bool{}}
	tc.createTopic([]int32{1, 2}, map[string]string{"segment.bytes": "16384", "remote.storage.enable": "true",
		"local.retention.bytes": "0", "retention.ms": "-1", "min.insync.replicas": "1"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The early producer: 300 records, then silent (values -300..-1:
	// increasing for checkAcked's order check, apart from the keyed
	// producer's).
	early := c.Client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))
	for i := range 300 {
		if err := early.ProduceSync(ctx, &kgo.Record{Key: []byte("early"), Value: []byte(strconv.Itoa(i - 300))}).FirstErr(); err != nil {
			t.Fatalf("early record %d: %v", i, err)
		}
	}
	earlyID, _, err := early.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	early.Close()

	kp := startKeyedProducer(t, c, topic)
	defer kp.stop()
	var leaderStart int64
	waitFor(t, 90*time.Second, "the leader's local log to start past the early records", func() bool {
		st, ok := tc.status(c.Broker(1))
		leaderStart = st.LocalStartOffset
		return ok && st.LocalStartOffset > 300 && kp.count() > 1000
	})
	t.Logf("leader's local log starts at %d, committed remote end %d; adding broker 3", leaderStart, tc.committed().RemoteEndOffset)

	adm := kadm.NewClient(c.Client(t))
	assignReplicas(t, ctx, adm, topic, 0, []int32{3, 1, 2})
	waitFor(t, 60*time.Second, "broker 3 in the ISR", func() bool {
		ps, err := c.Partitions(ctx, adm, topic)
		return err == nil && len(ps[0].ISR) == 3
	})
	var st3 broker.TierPartitionStatus
	waitFor(t, 30*time.Second, "broker 3's tier status of the partition", func() bool {
		var ok bool
		st3, ok = tc.status(c.Broker(3))
		return ok
	})
	t.Logf("broker 3 status: %+v", st3)
	if st3.LocalStartOffset < leaderStart {
		t.Fatalf("broker 3's local log starts at %d, below the leader's %d when it joined: it copied the bucket's records", st3.LocalStartOffset, leaderStart)
	}
	// At least once (again if it fell behind the leader's local start
	// while catching up, on a loaded machine).
	if line := grepLines(scrape(c.Broker(3)), "sediment_replica_remote_starts_total "); line == "" || strings.HasSuffix(line, " 0") {
		t.Fatalf("broker 3 did not start at the remote log end (metric): %q", line)
	}

	// Broker 3 leads (its preferred replica): it knows the early producer.
	res, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		for _, pr := range r {
			if pr.Err != nil {
				t.Fatalf("electing broker 3: %v", pr.Err)
			}
		}
	}
	waitFor(t, 30*time.Second, "broker 3 to lead", func() bool {
		l := tc.leaderBroker()
		return l != nil && l.NodeID == 3
	})
	desc, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range desc.SortedProducers() {
		if p.ProducerID == earlyID {
			found = true
			if p.Leader != 3 || p.LastSequence != 299 {
				t.Fatalf("early producer %d on broker %d: last sequence %d, want 299 on 3", earlyID, p.Leader, p.LastSequence)
			}
		}
	}
	if !found {
		t.Fatalf("broker 3 leads without the early producer %d: %+v", earlyID, desc.SortedProducers())
	}

	base := kp.count()
	waitFor(t, 60*time.Second, "writes acknowledged by broker 3", func() bool { return kp.count() > base+200 })
	kp.stop()
	checkAcked(t, c, topic, kp)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
