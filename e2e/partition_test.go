package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// faultNet puts a toxiproxy proxy (Shopify's toxiproxy used as a library,
// in-process on 127.0.0.1) on every directed link between the brokers of a
// cluster: broker i reaches broker j's Kafka listener and Raft address
// through proxies of its own (--peer-addresses), so that a broker can be cut
// off from the others in both directions while clients still reach it.
//
// A cut adds toxiproxy's "timeout" toxic with timeout 0 to both streams of
// each of its links: bytes are dropped and connections stay open (new ones
// are accepted and go nowhere), as in a network partition. Healing removes
// the toxics, which closes the connections that were cut; new ones flow.
type faultNet struct {
	t      testing.TB
	server *toxiproxy.ApiServer

	mu    sync.Mutex
	links map[[2]int][]*toxiproxy.Proxy // (from, to) node ids → Kafka and Raft proxies
	cut   map[[2]int]bool
}

// newFaultNet creates the proxies of a cluster made by NewCluster (not yet
// started) and adds --peer-addresses to each broker's command line.
func newFaultNet(t testing.TB, c *Cluster) *faultNet {
	t.Helper()
	fn := &faultNet{
		t:      t,
		server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		links:  map[[2]int][]*toxiproxy.Proxy{},
		cut:    map[[2]int]bool{},
	}
	for _, from := range c.Brokers {
		var peers []string
		for _, to := range c.Brokers {
			if from == to {
				continue
			}
			for _, upstream := range []string{to.Addr, to.RaftAddr} {
				// A port from freePort: one the kernel picks could be one
				// already handed to a broker that has not bound it yet.
				listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
				p := toxiproxy.NewProxy(fn.server, fmt.Sprintf("%d-%d-%s", from.NodeID, to.NodeID, upstream), listen, upstream)
				if err := fn.server.Collection.Add(p, true); err != nil {
					t.Fatalf("toxiproxy: %v", err)
				}
				t.Cleanup(p.Stop)
				key := [2]int{from.NodeID, to.NodeID}
				fn.links[key] = append(fn.links[key], p)
				peers = append(peers, upstream+"="+p.Listen)
			}
		}
		from.extra = append(from.extra, "--peer-addresses", strings.Join(peers, ","))
	}
	return fn
}

// Isolate cuts every link between node and the other brokers, both ways.
func (fn *faultNet) Isolate(node int) {
	fn.t.Helper()
	fn.mu.Lock()
	defer fn.mu.Unlock()
	for key, ps := range fn.links {
		if (key[0] != node && key[1] != node) || fn.cut[key] {
			continue
		}
		for _, p := range ps {
			for _, stream := range []string{"upstream", "downstream"} {
				body := fmt.Sprintf(`{"name":"cut-%s","type":"timeout","stream":%q,"attributes":{"timeout":0}}`, stream, stream)
				if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
					fn.t.Fatalf("toxiproxy %s: %v", p.Name, err)
				}
			}
		}
		fn.cut[key] = true
	}
}

// HealAll removes every cut.
func (fn *faultNet) HealAll() {
	fn.t.Helper()
	fn.mu.Lock()
	defer fn.mu.Unlock()
	for key := range fn.cut {
		for _, p := range fn.links[key] {
			for _, stream := range []string{"upstream", "downstream"} {
				if err := p.Toxics.RemoveToxic(context.Background(), "cut-"+stream); err != nil {
					fn.t.Fatalf("toxiproxy %s: %v", p.Name, err)
				}
			}
		}
		delete(fn.cut, key)
	}
}

// leaderSeenBy asks broker b alone (not whichever broker a client picks)
// for the leader and ISR of partition 0 of topic.
func leaderSeenBy(t testing.TB, cl *kgo.Client, topic string) (partitionState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		return partitionState{}, err
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition == 0 {
				return partitionState{Leader: rp.Leader, Replicas: rp.Replicas, ISR: rp.ISR}, nil
			}
		}
	}
	return partitionState{}, fmt.Errorf("no partition 0 of %s in the metadata", topic)
}

// TestReplicationNetworkPartition isolates a partition's leader from the
// other brokers (replica fetches and the metadata quorum's Raft cut both
// ways through toxiproxy) while clients still reach it. The isolated old
// leader must not acknowledge an acks=all write; the majority fences it and
// elects a new leader, and an idempotent producer's writes are acknowledged
// there. After healing, the old leader truncates its divergent tail (the
// writes it appended and never committed), catches up and rejoins the ISR,
// and every replica holds the same log: every acknowledged record once, none
// of the writes the isolated leader refused.
func TestReplicationNetworkPartition(t *testing.T) {
	c := NewCluster(t, 3)
	fn := newFaultNet(t, c)
	c.StartAll()
	adm := kadm.NewClient(c.Client(t))
	const topic = "partitioned"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	createClusterTopic(t, adm, topic, 1, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")})
	ps := c.WaitFullISR(t, adm, topic, 30*time.Second)
	old := c.Broker(ps[0].Leader)
	var majority []*Broker
	for _, b := range c.Brokers {
		if b != old {
			majority = append(majority, b)
		}
	}
	// The isolated leader still believes it leads and answers the
	// producer's acks=all writes REQUEST_TIMED_OUT, which franz-go
	// retries on the same leader without asking for metadata ("metadata
	// has nothing to say", kgo's sink.go), as the Java producer does: the
	// producer moves to the new leader at its next metadata refresh
	// (metadata.max.age, 5 min by default). Refreshed often here, so that
	// the test waits for the cluster, not for that timer (it failed once
	// in 60 s when nothing else made the client refresh).
	kp := startKeyedProducer(t, c, topic, kgo.MetadataMinAge(time.Second), kgo.MetadataMaxAge(2*time.Second))
	defer kp.stop()
	waitFor(t, 60*time.Second, "acknowledged writes", func() bool { return kp.count() > 200 })

	// Requests to the old leader alone (kgo would follow the new leader):
	// acks=all, not idempotent, so that each write it refuses stays in its
	// log as a divergent tail.
	iso := old.Client(t)
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	topicID := td[topic].ID
	if code, err := produceTo(iso, topic, topicID, "before-the-cut"); err != nil || code != 0 {
		t.Fatalf("acks=all write to the leader before the cut: error code %d, %v", code, err)
	}
	cutAt := time.Now()
	t.Logf("isolating broker %d, the leader (%d acknowledged so far)", old.NodeID, kp.count())
	fn.Isolate(old.NodeID)

	// Write to the isolated leader until the majority has moved on.
	var refused []string
	var isoMu sync.Mutex
	isoDone := make(chan struct{})
	isoStop := make(chan struct{})
	// Stopped however the test ends: the writer logs through t, which
	// must not outlive the test.
	stopIso := sync.OnceFunc(func() { close(isoStop); <-isoDone })
	defer stopIso()
	go func() {
		defer close(isoDone)
		for i := 0; ; i++ {
			select {
			case <-isoStop:
				return
			default:
			}
			v := fmt.Sprintf("isolated-%d", i)
			code, err := produceTo(iso, topic, topicID, v)
			isoMu.Lock()
			if err == nil && code == 0 {
				t.Errorf("the isolated leader acknowledged the acks=all write %s", v)
			} else {
				refused = append(refused, v)
				if len(refused) <= 3 {
					t.Logf("the isolated leader refused %s: error code %d (%v)", v, code, err)
				}
			}
			isoMu.Unlock()
		}
	}()
	watch := majority[0].Client(t)
	var newLeader int32
	waitFor(t, 60*time.Second, "a new leader elected by the majority", func() bool {
		st, err := leaderSeenBy(t, watch, topic)
		if err != nil || st.Leader < 0 || st.Leader == int32(old.NodeID) {
			return false
		}
		newLeader = st.Leader
		return true
	})
	t.Logf("broker %d leads on the majority side after %v", newLeader, time.Since(cutAt).Round(time.Millisecond))
	base := kp.count()
	waitFor(t, 60*time.Second, "writes acknowledged by the new leader", func() bool { return kp.count() > base+200 })
	// The old leader still believes it leads: clients that reach it see
	// it so, and its acks=all writes time out instead of succeeding.
	if st, err := leaderSeenBy(t, iso, topic); err == nil {
		t.Logf("the isolated broker's own view: leader %d, ISR %v", st.Leader, st.ISR)
	}
	stopIso()
	isoMu.Lock()
	t.Logf("the isolated leader refused %d acks=all writes", len(refused))
	if len(refused) == 0 {
		t.Errorf("no write reached the isolated leader")
	}
	isoMu.Unlock()

	fn.HealAll()
	healAt := time.Now()
	waitFor(t, 90*time.Second, "the old leader to truncate its divergent tail", func() bool {
		return strings.Contains(old.Log(), "truncating divergent tail") && strings.Contains(old.Log(), "topic="+topic)
	})
	for _, line := range strings.Split(old.Log(), "\n") {
		if strings.Contains(line, "truncating divergent tail") && strings.Contains(line, "topic="+topic) {
			t.Logf("broker %d: %s", old.NodeID, line)
		}
	}
	c.WaitFullISR(t, adm, topic, 90*time.Second)
	t.Logf("full ISR again %v after healing", time.Since(healAt).Round(time.Millisecond))
	base = kp.count()
	waitFor(t, 60*time.Second, "acknowledged writes after healing", func() bool { return kp.count() > base+200 })
	kp.stop()
	c.WaitFullISR(t, adm, topic, 60*time.Second)
	c.WaitIdenticalReplicas(t, topic, 1, 60*time.Second)
	checkAcked(t, c, topic, kp)

	// None of the refused writes survived anywhere.
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	want := kp.count() + 1 // and before-the-cut
	got := 0
	rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer rcancel()
	for got < want && rctx.Err() == nil {
		cl.PollFetches(rctx).EachRecord(func(r *kgo.Record) {
			got++
			if v := string(r.Value); strings.HasPrefix(v, "isolated-") && slices.Contains(refused, v) {
				t.Errorf("the refused write %s is in the log at offset %d", v, r.Offset)
			}
		})
	}
	if got != want {
		t.Errorf("read %d records, want %d (the acknowledged ones and before-the-cut)", got, want)
	}
}

// produceTo sends one acks=all record (not idempotent) in a Produce request
// to the client's seed broker only, and returns the partition's error code.
func produceTo(cl *kgo.Client, topic string, topicID [16]byte, value string) (int16, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := kmsg.NewRecord()
	r.Value = []byte(value)
	r.Length = int32(len(r.AppendTo(nil)) - 1) // the bytes after Length (a one-byte varint when 0)
	now := time.Now().UnixMilli()
	rb := kmsg.NewRecordBatch()
	rb.Magic = 2
	rb.FirstTimestamp, rb.MaxTimestamp = now, now
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = -1, -1, -1
	rb.NumRecords = 1
	rb.Records = r.AppendTo(nil)
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))                                          // Length: after itself
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli))) // CRC-32C: after itself
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 3000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = raw
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		return -1, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return -1, fmt.Errorf("produce response with %d topics", len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0].ErrorCode, nil
}
