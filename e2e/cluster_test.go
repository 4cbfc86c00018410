package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/internal/testutil"
)

// Cluster is n broker processes that are also the n voters of the metadata
// quorum (combined mode).
type Cluster struct {
	t       testing.TB
	Brokers []*Broker

	stopRegistered bool
}

// StartCluster starts n brokers at once (a quorum of n needs a majority up
// before any broker can register) and waits until each is ready.
func StartCluster(t testing.TB, n int, extra ...string) *Cluster {
	t.Helper()
	c := NewCluster(t, n, extra...)
	c.StartAll()
	return c
}

// NewCluster prepares n brokers (ports, data directories, the voter list)
// without starting them, so that a test can add arguments to each broker's
// command line (b.extra) before StartAll.
func NewCluster(t testing.TB, n int, extra ...string) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	dir := t.TempDir()
	var voters []string
	for i := 1; i <= n; i++ {
		b := &Broker{t: t, NodeID: i, DataDir: filepath.Join(dir, fmt.Sprintf("broker%d", i), "data"), log: &syncBuffer{}}
		if os.Getenv("SEDIMENT_E2E_VERBOSE") != "" {
			b.log.tee = os.Stderr
		}
		os.MkdirAll(filepath.Dir(b.DataDir), 0o755)
		b.pickPorts()
		voters = append(voters, fmt.Sprintf("%d@%s", i, b.RaftAddr))
		c.Brokers = append(c.Brokers, b)
		t.Cleanup(func() {
			b.Stop()
			logText := b.log.String()
			if strings.Contains(logText, "WARNING: DATA RACE") {
				t.Errorf("broker %d: the race detector reported a data race", b.NodeID)
			}
			if t.Failed() {
				t.Logf("broker %d log (%s, data %s):\n%s", b.NodeID, b.Addr, b.DataDir, logText)
			}
		})
	}
	for _, b := range c.Brokers {
		b.extra = append([]string{"--voters", strings.Join(voters, ","), "--replica-lag-time-max", "3s"}, extra...)
	}
	return c
}

// StartAll starts every broker at once and waits until each is ready.
func (c *Cluster) StartAll() {
	t := c.t
	t.Helper()
	if !c.stopRegistered {
		// Registered here, after NewCluster's per-broker cleanups and a
		// faultNet's proxies, so that it runs before both.
		c.stopRegistered = true
		t.Cleanup(c.stopAll)
	}
	errs := make([]error, len(c.Brokers))
	var wg sync.WaitGroup
	for i, b := range c.Brokers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = b.start() }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("broker %d did not come up: %v", i+1, err)
		}
	}
}

// stopAll stops the cluster at the end of a test: SIGTERM, one broker at a
// time, while a majority is up to carry out each controlled shutdown, and
// SIGKILL for the rest, whose controlled shutdown could only wait out its
// timeout for a quorum that is gone (about 10 s each, for every cluster
// test). The per-broker cleanups then find them stopped and check the logs.
func (c *Cluster) stopAll() {
	majority := len(c.Brokers)/2 + 1
	up := 0
	for _, b := range c.Brokers {
		if b.running() {
			up++
		}
	}
	for i := len(c.Brokers) - 1; i >= 0; i-- {
		b := c.Brokers[i]
		if !b.running() {
			continue
		}
		if up >= majority {
			b.Stop() //nolint:errcheck // the test is over; the log is checked
		} else {
			b.Kill()
		}
		up--
	}
}

// Seeds is every broker's address.
func (c *Cluster) Seeds() []string {
	var out []string
	for _, b := range c.Brokers {
		out = append(out, b.Addr)
	}
	return out
}

// Client returns a franz-go client seeded with every broker.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Seeds()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Broker returns the broker with node id id.
func (c *Cluster) Broker(id int32) *Broker { return c.Brokers[id-1] }

// partitionState is what Metadata says of one partition.
type partitionState struct {
	Leader        int32
	Replicas, ISR []int32
}

// Partitions describes topic's partitions, asking the given client.
func (c *Cluster) Partitions(ctx context.Context, adm *kadm.Client, topic string) (map[int32]partitionState, error) {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return nil, err
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("topic %s: %v", topic, td.Err)
	}
	out := map[int32]partitionState{}
	for _, p := range td.Partitions {
		out[p.Partition] = partitionState{Leader: p.Leader, Replicas: p.Replicas, ISR: p.ISR}
	}
	return out, nil
}

// WaitFullISR waits until every partition of topic has a leader and all its
// replicas in the ISR.
func (c *Cluster) WaitFullISR(t testing.TB, adm *kadm.Client, topic string, timeout time.Duration) map[int32]partitionState {
	t.Helper()
	var last map[int32]partitionState
	waitFor(t, timeout, "a full ISR on "+topic, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		ps, err := c.Partitions(ctx, adm, topic)
		if err != nil || len(ps) == 0 {
			return false
		}
		for _, p := range ps {
			if p.Leader < 0 || len(p.ISR) != len(p.Replicas) {
				return false
			}
		}
		last = ps
		return true
	})
	return last
}

// WaitAgreedLeader waits until every running broker's own metadata names
// the same leader for partition 0 of topic, with every replica in the ISR,
// and returns it. (A client's metadata may come from a broker that lags:
// killing a leader it wrongly shows with a full ISR could leave the
// partition with no eligible leader.)
func (c *Cluster) WaitAgreedLeader(t testing.TB, topic string, timeout time.Duration) int32 {
	t.Helper()
	var leader int32
	waitFor(t, timeout, "every broker to agree on the leader of "+topic+"-0", func() bool {
		leader = -1
		for _, b := range c.Brokers {
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
			if err != nil {
				return false
			}
			st, err := leaderSeenBy(t, cl, topic)
			cl.Close()
			if err != nil || st.Leader < 0 || (leader >= 0 && st.Leader != leader) || len(st.ISR) != len(st.Replicas) {
				return false
			}
			leader = st.Leader
		}
		return true
	})
	return leader
}

// replicaLog is the concatenation of a partition's segment files on one
// broker (the same bytes on every replica once they have caught up).
func replicaLog(b *Broker, topic string, partition int32) []byte {
	dir := filepath.Join(b.DataDir, "logs", fmt.Sprintf("%s-%d", topic, partition))
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var out []byte
	for _, n := range names {
		raw, _ := os.ReadFile(filepath.Join(dir, n))
		out = append(out, raw...)
	}
	return out
}

// WaitIdenticalReplicas waits until every replica of every partition holds
// the same log bytes.
func (c *Cluster) WaitIdenticalReplicas(t testing.TB, topic string, partitions int32, timeout time.Duration) {
	t.Helper()
	for p := range partitions {
		c.WaitIdenticalReplicasOf(t, topic, p, c.Brokers, timeout)
	}
}

// WaitIdenticalReplicasOf waits until the given replicas of one partition
// hold the same log bytes.
func (c *Cluster) WaitIdenticalReplicasOf(t testing.TB, topic string, p int32, replicas []*Broker, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("identical replicas of %s-%d", topic, p), func() bool {
		first := replicaLog(replicas[0], topic, p)
		for _, b := range replicas[1:] {
			if !bytes.Equal(first, replicaLog(b, topic, p)) {
				return false
			}
		}
		return len(first) > 0
	})
}

// ackedRecord is a record the producer got an acknowledgement for.
type ackedRecord struct {
	partition int32
	offset    int64
}

// keyedProducer writes keyed records ("k<n%keys>" = "<n>") with an
// idempotent acks=all producer until stopped, remembering what was
// acknowledged.
type keyedProducer struct {
	cl     *kgo.Client
	topic  string
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	acked   map[string]ackedRecord // value → where
	failed  int
	lastErr error
}

func startKeyedProducer(t testing.TB, c *Cluster, topic string, opts ...kgo.Opt) *keyedProducer {
	cl := c.Client(t, append([]kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(1 << 30),
		kgo.ProducerLinger(2 * time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond })}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	kp := &keyedProducer{cl: cl, topic: topic, cancel: cancel, done: make(chan struct{}), acked: map[string]ackedRecord{}}
	go func() {
		defer close(kp.done)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 200)
		for n := 0; ctx.Err() == nil; n++ {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				continue
			}
			v := strconv.Itoa(n)
			wg.Add(1)
			cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte("k" + strconv.Itoa(n%64)), Value: []byte(v)}, func(r *kgo.Record, err error) {
				defer wg.Done()
				defer func() { <-sem }()
				kp.mu.Lock()
				defer kp.mu.Unlock()
				if err != nil {
					kp.failed++
					kp.lastErr = err
					return
				}
				kp.acked[v] = ackedRecord{r.Partition, r.Offset}
			})
		}
		wg.Wait()
	}()
	return kp
}

func (kp *keyedProducer) count() int {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	return len(kp.acked)
}

func (kp *keyedProducer) stop() {
	kp.cancel()
	<-kp.done
}

// checkAcked reads the topic from the start and checks every acknowledged
// record is there exactly once, where it was acknowledged, and that each
// key's values grow with the offset.
func checkAcked(t testing.TB, c *Cluster, topic string, kp *keyedProducer) {
	t.Helper()
	kp.mu.Lock()
	acked := kp.acked
	kp.mu.Unlock()
	if kp.failed > 0 {
		t.Errorf("%d records failed (last: %v)", kp.failed, kp.lastErr)
	}
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]ackedRecord{}
	lastByKey := map[string]int{}
	dups := 0
	// Read until every acknowledged record is seen (not as many records as
	// were acknowledged: the log also holds records whose answer the
	// producer never got, written before it stopped, which made the loop
	// end early, the last acknowledged records unread), or until reading
	// makes no progress for 30 s (a loaded machine reads tens of thousands
	// of records, many from the bucket, slowly, but steadily), or 5 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seenAcked := 0
	for seenAcked < len(acked) && ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		fs := cl.PollFetches(pctx)
		stalled := pctx.Err() != nil
		pcancel()
		if stalled {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if _, ok := seen[v]; ok {
				dups++
			} else if _, ok := acked[v]; ok {
				seenAcked++
			}
			seen[v] = ackedRecord{r.Partition, r.Offset}
			n, _ := strconv.Atoi(v)
			if prev, ok := lastByKey[string(r.Key)]; ok && n <= prev {
				t.Errorf("key %s: value %d after %d (out of order)", r.Key, n, prev)
			}
			lastByKey[string(r.Key)] = n
		})
	}
	if dups > 0 {
		t.Errorf("%d records read twice", dups)
	}
	missing := 0
	for v, where := range acked {
		got, ok := seen[v]
		if !ok || got != where {
			missing++
			if missing <= 5 {
				t.Errorf("acknowledged record %s at %d/%d: read %v (%v)", v, where.partition, where.offset, got, ok)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged records missing or moved", missing, len(acked))
		ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
		t.Logf("the topic's end offsets now: %+v (%v)", ends, err)
		return
	}
	t.Logf("%d acknowledged records all present once, in order", len(acked))
}

// leaderKills kills the leader of a partition and restarts it, kills times,
// while an idempotent acks=all producer writes; then checks the log. With
// more than three faults (make chaos) every fourth is a SIGSTOP pause and
// every fourth (from the second) a network partition of the leader.
func leaderKills(t *testing.T, kills int) {
	c := NewCluster(t, 3)
	// Partition faults (the long run only) cut links through toxiproxy.
	var fn *faultNet
	if kills > 3 {
		fn = newFaultNet(t, c)
	}
	c.StartAll()
	adm := kadm.NewClient(c.Client(t))
	const topic = "chaos"
	const partitions = 3
	createClusterTopic(t, adm, topic, partitions, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")})
	c.WaitFullISR(t, adm, topic, 30*time.Second)
	kp := startKeyedProducer(t, c, topic)
	defer kp.stop()
	for i := 0; i < kills; i++ {
		base := kp.count()
		waitFor(t, 60*time.Second, "acknowledged writes", func() bool { return kp.count() > base+200 })
		ps := c.WaitFullISR(t, adm, topic, 60*time.Second)
		victim := c.Broker(ps[int32(i%partitions)].Leader)
		if i%4 == 3 {
			// Every fourth fault is a pause (SIGSTOP) longer than the
			// session timeout: the cluster fences the leader and moves on;
			// when it resumes it must find it leads nothing any more.
			t.Logf("fault %d: SIGSTOP leader %d of %s-%d (%d acknowledged so far)", i+1, victim.NodeID, topic, i%partitions, kp.count())
			victim.signalOnly(syscall.SIGSTOP)
			base = kp.count()
			waitFor(t, 60*time.Second, "writes acknowledged while the leader is paused", func() bool { return kp.count() > base+100 })
			victim.signalOnly(syscall.SIGCONT)
			continue
		}
		if fn != nil && i%4 == 1 {
			// A network partition of the leader from the other brokers
			// (clients still reach it), longer than the session timeout:
			// the majority fences it and moves on; healed, it truncates
			// what it appended alone and catches up.
			t.Logf("fault %d: network partition of leader %d of %s-%d (%d acknowledged so far)", i+1, victim.NodeID, topic, i%partitions, kp.count())
			fn.Isolate(victim.NodeID)
			waitFor(t, 60*time.Second, "a new leader of the partition on the majority side", func() bool {
				cl, err := kgo.NewClient(kgo.SeedBrokers(c.Broker(int32(victim.NodeID%3 + 1)).Addr))
				if err != nil {
					return false
				}
				defer cl.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				ps, err := c.Partitions(ctx, kadm.NewClient(cl), topic)
				return err == nil && ps[int32(i%partitions)].Leader >= 0 && ps[int32(i%partitions)].Leader != int32(victim.NodeID)
			})
			base = kp.count()
			waitFor(t, 60*time.Second, "writes acknowledged while the leader is cut off", func() bool { return kp.count() > base+100 })
			fn.HealAll()
			continue
		}
		t.Logf("fault %d: SIGKILL leader %d of %s-%d (%d acknowledged so far)", i+1, victim.NodeID, topic, i%partitions, kp.count())
		victim.Kill()
		base = kp.count()
		waitFor(t, 60*time.Second, "writes acknowledged while the leader is down", func() bool { return kp.count() > base+100 })
		victim.Start()
	}
	base := kp.count()
	waitFor(t, 60*time.Second, "acknowledged writes after the last restart", func() bool { return kp.count() > base+200 })
	kp.stop()
	c.WaitFullISR(t, adm, topic, 60*time.Second)
	c.WaitIdenticalReplicas(t, topic, partitions, 60*time.Second)
	checkAcked(t, c, topic, kp)
}

func TestReplicationLeaderKills(t *testing.T) {
	kills := 3
	if n, err := strconv.Atoi(os.Getenv("SEDIMENT_CHAOS_KILLS")); err == nil && n > 0 {
		kills = n
	}
	leaderKills(t, kills)
}

// TestReplicationMinISR: with min.insync.replicas=2 and only one live
// replica (replication factor 2, so that the third broker keeps the metadata
// quorum), acks=all writes are refused and nothing is appended; a killed
// follower catches up, rejoins the ISR, and acks=all writes are accepted
// again.
func TestReplicationMinISR(t *testing.T) {
	c := StartCluster(t, 3)
	adm := kadm.NewClient(c.Client(t))
	const topic = "minisr"
	createClusterTopic(t, adm, topic, 1, 2, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")})
	ps := c.WaitFullISR(t, adm, topic, 30*time.Second)
	leader := ps[0].Leader
	var follower *Broker
	for _, r := range ps[0].Replicas {
		if r != leader {
			follower = c.Broker(r)
		}
	}
	checkLeaderHint(t, c, adm, topic, ps[0], follower)
	prod := c.Client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(), kgo.RecordRetries(3),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	one := c.Client(t, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	produce := func(cl *kgo.Client, v string) error {
		pctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return cl.ProduceSync(pctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr()
	}
	if err := produce(prod, "first"); err != nil {
		t.Fatal(err)
	}
	follower.Kill()
	for i := range 50 {
		if err := produce(one, fmt.Sprintf("while-down-%d", i)); err != nil {
			t.Fatalf("acks=1 with the follower down: %v", err)
		}
	}
	waitFor(t, 60*time.Second, "the ISR to shrink to the leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		ps, err := c.Partitions(ctx, adm, topic)
		return err == nil && slices.Equal(ps[0].ISR, []int32{leader})
	})
	// Logged as Kafka logs it: the leader's ISR shrinking, the controller
	// fencing the broker (whichever broker is the metadata leader).
	waitFor(t, 30*time.Second, "the leader to log the ISR shrink", func() bool {
		return testutil.LogHasLine(c.Broker(leader).Log(), `msg="ISR changed"`, " topic="+topic+" partition=0 ", fmt.Sprintf(" to=[%d] ", leader))
	})
	waitFor(t, 30*time.Second, "the controller to log the fence", func() bool {
		for _, b := range c.Brokers {
			if b != follower && testutil.LogHasLine(b.Log(), `msg="metadata: fenced broker`, fmt.Sprintf(" broker=%d ", follower.NodeID)) {
				return true
			}
		}
		return false
	})
	end := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		o, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := o.Lookup(topic, 0)
		return r.Offset
	}
	waitFor(t, 30*time.Second, "the leader to count an under-replicated partition, under min.insync.replicas, in /metrics", func() bool {
		m := scrape(c.Broker(leader))
		return strings.Contains(m, "\nsediment_under_replicated_partitions 1\n") && strings.Contains(m, "\nsediment_under_min_isr_partitions 1\n") &&
			strings.Contains(m, "\nsediment_isr_shrinks_total 1\n")
	})
	before := end()
	err := produce(prod, "refused")
	if err == nil || !strings.Contains(err.Error(), "NOT_ENOUGH_REPLICAS") {
		t.Fatalf("acks=all with one in-sync replica: got %v, want NOT_ENOUGH_REPLICAS", err)
	}
	if after := end(); after != before {
		t.Fatalf("a refused write moved the log end from %d to %d", before, after)
	}
	follower.Start()
	c.WaitFullISR(t, adm, topic, 60*time.Second)
	waitFor(t, 30*time.Second, "the leader to count the ISR's expansion and the partition at min.insync.replicas", func() bool {
		m := scrape(c.Broker(leader))
		return strings.Contains(m, "\nsediment_isr_expands_total 1\n") && strings.Contains(m, "\nsediment_at_min_isr_partitions 1\n") &&
			strings.Contains(m, "\nsediment_under_min_isr_partitions 0\n")
	})
	if err := produce(prod, "accepted"); err != nil {
		t.Fatalf("acks=all after the follower rejoined: %v", err)
	}
	c.WaitIdenticalReplicasOf(t, topic, 0, []*Broker{c.Broker(leader), follower}, 30*time.Second)
}

// TestReplicationControlledShutdown: SIGTERM moves leadership away before
// the broker stops, and no acknowledged write is lost. Back in the ISR, the
// broker leads its preferred partition again at the controller's next
// leader imbalance check (--leader-imbalance-check-interval, 2 s here
// rather than Kafka's 300 s).
func TestReplicationControlledShutdown(t *testing.T) {
	c := StartCluster(t, 3, "--leader-imbalance-check-interval", "2s")
	adm := kadm.NewClient(c.Client(t))
	const topic = "shutdown"
	createClusterTopic(t, adm, topic, 3, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")})
	ps := c.WaitFullISR(t, adm, topic, 30*time.Second)
	status := c.Brokers[1].sediment(t, "", "cluster", "status").Stdout
	for _, want := range []string{"voters: [1 2 3]", "under-replicated partitions: 0"} {
		if !strings.Contains(status, want) {
			t.Errorf("sediment cluster status lacks %q:\n%s", want, status)
		}
	}
	if n := strings.Count(status, " active "); n != 3 || strings.Contains(status, "false") {
		t.Errorf("sediment cluster status: want three active, reachable voters:\n%s", status)
	}
	kp := startKeyedProducer(t, c, topic)
	defer kp.stop()
	waitFor(t, 60*time.Second, "acknowledged writes", func() bool { return kp.count() > 300 })
	victim := c.Broker(ps[0].Leader)
	if err := victim.Stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if !strings.Contains(victim.Log(), "controlled shutdown: leadership moved away") {
		t.Errorf("the broker stopped without moving leadership first")
	}
	// Its controlled shutdown ends by fencing it (Kafka's SHUTDOWN_NOW), so
	// that clients stop being sent to it while it exits and restarts.
	if !strings.Contains(victim.Log(), "controlled shutdown: leadership moved away; this broker is fenced") {
		t.Errorf("the broker did not fence itself at the end of its controlled shutdown:\n%s", victim.Log())
	}
	var other *Broker
	for _, ob := range c.Brokers {
		if ob != victim {
			other = ob
		}
	}
	ocl := other.Client(t)
	waitFor(t, 5*time.Second, fmt.Sprintf("Metadata from broker %d without broker %d", other.NodeID, victim.NodeID), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		m, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, ocl)
		if err != nil {
			return false
		}
		for _, b := range m.Brokers {
			if b.NodeID == int32(victim.NodeID) {
				return false
			}
		}
		return true
	})
	base := kp.count()
	waitFor(t, 60*time.Second, "writes acknowledged after the shutdown", func() bool { return kp.count() > base+300 })
	victim.Start()
	kp.stop()
	c.WaitFullISR(t, adm, topic, 60*time.Second)
	c.WaitIdenticalReplicas(t, topic, 3, 60*time.Second)
	checkAcked(t, c, topic, kp)
	// The new topic's first leaders were its preferred replicas.
	waitFor(t, 60*time.Second, fmt.Sprintf("broker %d to lead %s-0 again", victim.NodeID, topic), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		ps, err := c.Partitions(ctx, adm, topic)
		return err == nil && ps[0].Leader == int32(victim.NodeID)
	})
}

// checkLeaderHint: a Produce (v10+) sent to a follower, or a Fetch (v16+)
// sent to a broker that holds no replica, answers NOT_LEADER_OR_FOLLOWER
// with the current leader and its endpoint (KIP-951). (A consumer's Fetch
// v11+ to a follower is served there, as in Kafka: KIP-392.)
func checkLeaderHint(t *testing.T, c *Cluster, adm *kadm.Client, topic string, ps partitionState, follower *Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	id := td[topic].ID
	cl := follower.Client(t)
	preq := kmsg.NewPtrProduceRequest()
	preq.Acks, preq.TimeoutMillis = -1, 5000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic, pt.TopicID = topic, id
	pp := kmsg.NewProduceRequestTopicPartition()
	pt.Partitions = append(pt.Partitions, pp)
	preq.Topics = append(preq.Topics, pt)
	// A new topic's ISR is full from its creation, so the follower may not
	// have applied the topic yet: until it has, it answers
	// UNKNOWN_TOPIC_ID, as Kafka's brokers do.
	var presp *kmsg.ProduceResponse
	waitFor(t, 10*time.Second, "the follower to know the topic", func() bool {
		presp, err = preq.RequestWith(ctx, cl.Broker(follower.NodeID))
		if err != nil {
			t.Fatal(err)
		}
		code := presp.Topics[0].Partitions[0].ErrorCode
		return code != kerr.UnknownTopicID.Code && code != kerr.UnknownTopicOrPartition.Code
	})
	if presp.Version < 10 {
		t.Fatalf("produce answered with v%d", presp.Version)
	}
	rp := presp.Topics[0].Partitions[0]
	if rp.ErrorCode != kerr.NotLeaderForPartition.Code || rp.CurrentLeader.LeaderID != ps.Leader || len(presp.Brokers) != 1 || presp.Brokers[0].NodeID != ps.Leader {
		t.Fatalf("produce to a follower: error %d, current leader %+v, brokers %+v; want NOT_LEADER with leader %d", rp.ErrorCode, rp.CurrentLeader, presp.Brokers, ps.Leader)
	}
	freq := kmsg.NewPtrFetchRequest()
	freq.MaxWaitMillis = 10
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic, ft.TopicID = topic, id
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	freq.Topics = append(freq.Topics, ft)
	var outsider *Broker
	for _, b := range c.Brokers {
		if !slices.Contains(ps.Replicas, int32(b.NodeID)) {
			outsider = b
		}
	}
	if outsider == nil {
		t.Fatalf("every broker holds a replica of %s", topic)
	}
	// The follower serves it (KIP-392), once it has started its replica:
	// between applying the topic and opening the replica's log it answers
	// the retriable NOT_LEADER_OR_FOLLOWER, as Kafka's brokers do between
	// publishing a metadata image and applying its delta.
	var fresp *kmsg.FetchResponse
	waitFor(t, 10*time.Second, "the follower to serve a consumer fetch", func() bool {
		fresp, err = freq.RequestWith(ctx, cl.Broker(follower.NodeID))
		if err != nil {
			t.Fatal(err)
		}
		return fresp.Topics[0].Partitions[0].ErrorCode != kerr.NotLeaderForPartition.Code
	})
	if fr := fresp.Topics[0].Partitions[0]; fr.ErrorCode != 0 {
		t.Fatalf("a consumer fetch from a follower: error %d, want it served", fr.ErrorCode)
	}
	waitFor(t, 10*time.Second, "the broker without a replica to know the topic", func() bool {
		fresp, err = freq.RequestWith(ctx, cl.Broker(outsider.NodeID))
		if err != nil {
			t.Fatal(err)
		}
		code := fresp.Topics[0].Partitions[0].ErrorCode
		return code != kerr.UnknownTopicID.Code && code != kerr.UnknownTopicOrPartition.Code
	})
	if fresp.Version < 16 {
		t.Fatalf("fetch answered with v%d", fresp.Version)
	}
	fr := fresp.Topics[0].Partitions[0]
	if fr.ErrorCode != kerr.NotLeaderForPartition.Code || fr.CurrentLeader.LeaderID != ps.Leader || len(fresp.Brokers) != 1 {
		t.Fatalf("fetch from broker %d (no replica): error %d, current leader %+v, brokers %+v; want NOT_LEADER with leader %d", outsider.NodeID, fr.ErrorCode, fr.CurrentLeader, fresp.Brokers, ps.Leader)
	}
}

// scrape returns a broker's /metrics text ("" on error).
func scrape(b *Broker) string {
	resp, err := http.Get("http://" + b.AdminAddr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return string(raw)
}

// signalOnly sends sig to the running process without waiting for it to exit
// (SIGSTOP, SIGCONT).
func (b *Broker) signalOnly(sig syscall.Signal) {
	b.mu.Lock()
	cmd := b.cmd
	b.mu.Unlock()
	if cmd == nil {
		b.t.Fatalf("broker %d: %v while not running", b.NodeID, sig)
	}
	fmt.Fprintf(b.log, "=== e2e: sending %v\n", sig)
	if err := cmd.Process.Signal(sig); err != nil {
		b.t.Fatalf("broker %d: %v: %v", b.NodeID, sig, err)
	}
}

// createClusterTopic creates a topic with a replication factor through adm
// and fails the test on any error.
func createClusterTopic(t testing.TB, adm *kadm.Client, topic string, partitions int32, rf int16, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v (%s)", topic, err, resp.ErrMessage)
	}
}

// newJoiningBroker prepares (does not start) broker id outside the cluster's
// voter list: started, it joins the quorum as an observer. extra are more
// command-line arguments.
func (c *Cluster) newJoiningBroker(t testing.TB, id int, extra ...string) *Broker {
	t.Helper()
	var voters []string
	for _, b := range c.Brokers {
		voters = append(voters, fmt.Sprintf("%d@%s", b.NodeID, b.RaftAddr))
	}
	b := &Broker{t: t, NodeID: id, DataDir: filepath.Join(t.TempDir(), fmt.Sprintf("broker%d", id), "data"), log: &syncBuffer{}}
	if os.Getenv("SEDIMENT_E2E_VERBOSE") != "" {
		b.log.tee = os.Stderr
	}
	os.MkdirAll(filepath.Dir(b.DataDir), 0o755)
	b.pickPorts()
	b.extra = append([]string{"--voters", strings.Join(voters, ","), "--replica-lag-time-max", "3s"}, extra...)
	t.Cleanup(func() {
		b.Stop()
		if t.Failed() {
			t.Logf("broker %d log (%s, data %s):\n%s", id, b.Addr, b.DataDir, b.log.String())
		}
	})
	return b
}
