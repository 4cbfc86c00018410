package broker

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/metadata"
)

// TestStoppedStateMachineFencesItself: a broker whose metadata state machine
// stops (a committed entry it cannot read, as a binary older than the
// entry's encoding meets in a rolling upgrade) hands over the metadata
// leadership, fences itself (out of every ISR, leading nothing) and closes
// its Kafka listener, and the cluster goes on without it. Before, it kept
// heartbeating, stayed in every ISR, and the leader imbalance check gave
// it leaderships it could not serve; as the metadata leader it refused
// every proposal of the cluster.
func TestStoppedStateMachineFencesItself(t *testing.T) {
	brokers := startPair(t, func(c *Config) { c.Listeners = []Listener{{Addr: "127.0.0.1:0"}} })
	const topic = "survives"
	cl0 := newClient(t, brokers[0])
	createPairTopic(t, kadm.NewClient(cl0), topic, nil)
	// The broker that stops is the metadata leader: the harder case.
	var stale, other *Broker
	pollUntil(t, 20*time.Second, func() string {
		for i, b := range brokers {
			if b.meta.IsLeader() {
				stale, other = b, brokers[1-i]
				return ""
			}
		}
		return "no metadata leader"
	})
	// Both replicas in the ISR, and the stale broker leads a partition.
	pollUntil(t, 30*time.Second, func() string {
		st := other.meta.State()
		mt, ok := st.Topic(topic)
		if !ok {
			return "topic not applied yet"
		}
		leads := false
		for _, p := range mt.Partitions {
			if len(p.ISR) != 2 {
				return fmt.Sprintf("partition ISR %v", p.ISR)
			}
			leads = leads || p.Leader == stale.cfg.NodeID
		}
		if !leads {
			return "the stale broker leads no partition" // the preferred leaders alternate
		}
		return ""
	})

	stale.meta.RefuseEntriesForTest(func(c metadata.Command) error {
		if ct, ok := c.(*metadata.CreateTopic); ok && ct.Name == "poison" {
			return errors.New("an encoding of a newer binary")
		}
		return nil
	})
	cl1 := newClient(t, other)
	adm := kadm.NewClient(cl1)
	_, _ = adm.CreateTopic(testCtx(t), 1, 1, nil, "poison") // its answer may be the stopped leader's error
	pollUntil(t, 10*time.Second, func() string {
		if !errors.Is(stale.meta.Err(), metadata.ErrFSMStopped) {
			return "the refused entry did not stop the state machine"
		}
		return ""
	})

	pollUntil(t, 30*time.Second, func() string {
		if !other.meta.IsLeader() {
			return "the metadata leadership did not move to the broker that reads the log"
		}
		st := other.meta.State()
		if b, ok := st.Broker(stale.cfg.NodeID); !ok || !b.Fenced {
			return fmt.Sprintf("the stale broker is not fenced: %+v", b)
		}
		mt, _ := st.Topic(topic)
		for i, p := range mt.Partitions {
			if p.Leader == stale.cfg.NodeID || slices.Contains(p.ISR, stale.cfg.NodeID) {
				return fmt.Sprintf("partition %d: leader %d ISR %v", i, p.Leader, p.ISR)
			}
		}
		return ""
	})
	// Its Kafka listener refuses connections; its readiness says why.
	pollUntil(t, 10*time.Second, func() string {
		c, err := net.DialTimeout("tcp", stale.Addr(), time.Second)
		if err == nil {
			c.Close()
			return "the stale broker still accepts Kafka connections"
		}
		return ""
	})
	if r := stale.Readiness(false); r.Ready || !strings.Contains(strings.Join(r.Reasons, " "), "state machine stopped") {
		t.Fatalf("readiness of the stale broker: %+v", r)
	}
	// The cluster goes on: acks=all writes to every partition succeed on
	// the broker left, and new topics can be made.
	cl := newClient(t, other, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	produceAll(t, cl, makeRecords(topic, 100, "after"))
	if resp, err := adm.CreateTopic(testCtx(t), 1, 1, nil, "after-stop"); err != nil || resp.Err != nil {
		t.Fatalf("create a topic after the stop: %v %v", err, resp.Err)
	}
	// It stays fenced: its heartbeats ask for it.
	before := other.meta.State().Version
	pollUntil(t, 10*time.Second, func() string {
		st := other.meta.State()
		if b, _ := st.Broker(stale.cfg.NodeID); b == nil || !b.Fenced {
			t.Fatalf("the stale broker was unfenced: %+v", b)
		}
		if st.Version < before+5 {
			return "waiting for heartbeats"
		}
		return ""
	})
}
