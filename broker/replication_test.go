package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
