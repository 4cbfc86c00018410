package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/internal/testutil"
)

// Consumer groups with real franz-go clients against a real broker.

func groupBroker(t testing.TB, dir string) *Broker {
	return startBroker(t, dir, func(c *Config) {
		c.Groups = group.Config{
			Partitions:            8, // fewer offsets partitions: faster tests
			InitialRebalanceDelay: 100 * time.Millisecond,
			MinSessionTimeout:     time.Second,
			// KIP-848 members heartbeat at the interval the broker says.
			ConsumerHeartbeatInterval: 200 * time.Millisecond,
		}
	})
}

// tracker records what a group consumed: every (partition, offset) and the
// order per partition.
type tracker struct {
	mu      sync.Mutex
	seen    map[int32]map[int64]int
	last    map[int32]int64
	total   int
	errs    []error
	changed chan struct{}
}

func newTracker() *tracker {
	return &tracker{seen: map[int32]map[int64]int{}, last: map[int32]int64{}, changed: make(chan struct{}, 1)}
}

func (tr *tracker) add(r *kgo.Record) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	m := tr.seen[r.Partition]
	if m == nil {
		m = map[int64]int{}
		tr.seen[r.Partition] = m
	}
	m[r.Offset]++
	if last, ok := tr.last[r.Partition]; ok && r.Offset <= last && m[r.Offset] == 1 {
		tr.errs = append(tr.errs, fmt.Errorf("partition %d: offset %d after %d", r.Partition, r.Offset, last))
	}
	tr.last[r.Partition] = r.Offset
	tr.total++
	tr.signal()
}

func (tr *tracker) fail(err error) {
	tr.mu.Lock()
	tr.errs = append(tr.errs, err)
	tr.mu.Unlock()
	tr.signal()
}

func (tr *tracker) signal() {
	select {
	case tr.changed <- struct{}{}:
	default:
	}
}

// waitTotal waits until n records were consumed (or fails on an error).
func (tr *tracker) waitTotal(t testing.TB, n int) {
	t.Helper()
	ctx := testCtx(t)
	for {
		tr.mu.Lock()
		total, errs := tr.total, tr.errs
		tr.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("consumer errors: %v", errs)
		}
		if total >= n {
			return
		}
		select {
		case <-tr.changed:
		case <-ctx.Done():
			t.Fatalf("consumed %d of %d records", total, n)
		}
	}
}

// exactlyOnce checks that every offset below end of every partition was
// consumed exactly once.
func (tr *tracker) exactlyOnce(t testing.TB, ends map[int32]int64, from map[int32]int64) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.errs) > 0 {
		t.Fatalf("consumer errors: %v", tr.errs)
	}
	for p, end := range ends {
		for o := from[p]; o < end; o++ {
			if n := tr.seen[p][o]; n != 1 {
				t.Errorf("partition %d offset %d consumed %d times", p, o, n)
			}
		}
		for o := range tr.seen[p] {
			if o < from[p] || o >= end {
				t.Errorf("partition %d: offset %d outside [%d, %d)", p, o, from[p], end)
			}
		}
	}
}

// consumer is one group member that commits after processing each poll and
// holds rebalances off while it processes.
type consumer struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func startConsumer(t testing.TB, b *Broker, groupID, topic string, tr *tracker, opts ...kgo.Opt) *consumer {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(b.Addr()),
		kgo.ConsumerGroup(groupID),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.BlockRebalanceOnPoll(),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.SessionTimeout(6 * time.Second),
		kgo.HeartbeatInterval(200 * time.Millisecond),
		kgo.RebalanceTimeout(20 * time.Second),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumer{cl: cl, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachError(func(topic string, p int32, err error) {
				if !errors.Is(err, context.Canceled) {
					tr.fail(fmt.Errorf("fetch %s/%d: %w", topic, p, err))
				}
			})
			fs.EachRecord(tr.add)
			cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
			if err := cl.CommitUncommittedOffsets(cctx); err != nil {
				tr.fail(fmt.Errorf("commit: %w", err))
			}
			ccancel()
			cl.AllowRebalance()
		}
	}()
	t.Cleanup(c.stop)
	return c
}

// stop stops polling and closes the client (a clean leave for a dynamic
// member).
func (c *consumer) stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
	c.cl.Close()
	c.cancel = nil
}

func endOffsets(t testing.TB, b *Broker, topic string) map[int32]int64 {
	t.Helper()
	adm := kadm.NewClient(newClient(t, b))
	ends, err := adm.ListEndOffsets(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

func committed(t testing.TB, b *Broker, groupID string) map[int32]int64 {
	t.Helper()
	adm := kadm.NewClient(newClient(t, b))
	resp, err := adm.FetchOffsets(testCtx(t), groupID)
	if err != nil || resp.Error() != nil {
		t.Fatalf("fetch offsets: %v %v", err, resp.Error())
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) { out[o.Partition] = o.At })
	return out
}

// TestGroupRebalances runs 1 then 3 then 2 members of a group over a topic
// of 8 partitions, for eager (range) and cooperative-sticky balancers:
// every record is consumed exactly once, in order per partition, through
// the rebalances on join and on clean leave, and the committed offsets end
// at the log end.
func TestGroupRebalances(t *testing.T) {
	for _, tc := range []struct {
		name     string
		balancer kgo.GroupBalancer
		opts     []kgo.Opt
	}{
		{"range", kgo.RangeBalancer(), nil},
		{"cooperative-sticky", kgo.CooperativeStickyBalancer(), nil},
		// Old protocol versions, as kafkajs, sarama and kafka-go send:
		// JoinGroup v2, SyncGroup/Heartbeat/LeaveGroup v1, OffsetCommit
		// and OffsetFetch v3, FindCoordinator v1.
		{"range-kafka-0.11", kgo.RangeBalancer(), []kgo.Opt{kgo.MaxVersions(kversion.V0_11_0())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := groupBroker(t, "")
			topic := "grp-" + tc.name
			createTopic(t, b, topic, 8, nil)
			const n = 4000
			produceAll(t, newClient(t, b), makeRecords(topic, n, "g"))
			ends := endOffsets(t, b, topic)

			tr := newTracker()
			opts := append([]kgo.Opt{kgo.Balancers(tc.balancer), kgo.FetchMaxPartitionBytes(2000)}, tc.opts...)
			a := startConsumer(t, b, "g-"+tc.name, topic, tr, opts...)
			tr.waitTotal(t, 500)
			m2 := startConsumer(t, b, "g-"+tc.name, topic, tr, opts...)
			m3 := startConsumer(t, b, "g-"+tc.name, topic, tr, opts...)
			tr.waitTotal(t, 2000)
			m2.stop() // a clean leave: its partitions move to the others
			tr.waitTotal(t, n)
			a.stop()
			m3.stop()
			tr.exactlyOnce(t, ends, nil)
			if got := committed(t, b, "g-"+tc.name); fmt.Sprint(got) != fmt.Sprint(ends) {
				t.Fatalf("committed %v, want the end offsets %v", got, ends)
			}
		})
	}
}

// TestConsumerGroupKIP848 runs KIP-848 groups (kgo.ServerSideBalancer, the
// uniform and range server assignors): 1 member, then 4, then 2 after two
// clean leaves, on 8 partitions. Every record is consumed exactly once, in
// order per partition, and ConsumerGroupDescribe shows a consumer group.
func TestConsumerGroupKIP848(t *testing.T) {
	for _, tc := range []struct {
		name     string
		balancer kgo.GroupBalancer
		assignor string
	}{
		{"uniform", kgo.StickyBalancer(), "uniform"},
		{"range", kgo.RangeBalancer(), "range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := groupBroker(t, "")
			topic := "kip848-" + tc.name
			groupID := "g848-" + tc.name
			createTopic(t, b, topic, 8, nil)
			const n = 6000
			produceAll(t, newClient(t, b), makeRecords(topic, n, "g"))
			ends := endOffsets(t, b, topic)

			tr := newTracker()
			opts := []kgo.Opt{kgo.Balancers(tc.balancer), kgo.ServerSideBalancer(), kgo.FetchMaxPartitionBytes(1000)}
			a := startConsumer(t, b, groupID, topic, tr, opts...)
			tr.waitTotal(t, 500)
			adm := kadm.NewClient(newClient(t, b))
			describe := func() kadm.DescribedConsumerGroup {
				d, err := adm.DescribeConsumerGroups(testCtx(t), groupID)
				if err != nil {
					t.Fatal(err)
				}
				return d[groupID]
			}
			if d := describe(); d.Err != nil || len(d.Members) != 1 || d.AssignorName != tc.assignor {
				t.Fatalf("describe after the first member: %+v", d)
			}
			var more []*consumer
			for i := 0; i < 3; i++ {
				more = append(more, startConsumer(t, b, groupID, topic, tr, opts...))
			}
			// All four members own partitions at some point: the group settles.
			waitCond(t, func() bool {
				d := describe()
				if d.Err != nil || len(d.Members) != 4 || d.State != "Stable" {
					return false
				}
				for _, m := range d.Members {
					if len(m.Assignment) == 0 {
						return false
					}
				}
				return true
			})
			tr.waitTotal(t, 3000)
			more[0].stop()
			more[1].stop()
			tr.waitTotal(t, n)
			a.stop()
			more[2].stop()
			tr.exactlyOnce(t, ends, nil)
			if got := committed(t, b, groupID); fmt.Sprint(got) != fmt.Sprint(ends) {
				t.Fatalf("committed %v, want the end offsets %v", got, ends)
			}
			lg, err := adm.ListGroups(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if g, ok := lg[groupID]; !ok || g.ProtocolType != "consumer" || g.State != "Empty" {
				t.Fatalf("listed: %+v", lg)
			}
		})
	}
}

// TestGroupsIndependent: two groups on one topic each see every record.
func TestGroupsIndependent(t *testing.T) {
	b := groupBroker(t, "")
	createTopic(t, b, "two", 8, nil)
	const n = 1000
	produceAll(t, newClient(t, b), makeRecords("two", n, "x"))
	ends := endOffsets(t, b, "two")
	t1, t2 := newTracker(), newTracker()
	for i := 0; i < 2; i++ {
		startConsumer(t, b, "first", "two", t1)
		startConsumer(t, b, "second", "two", t2)
	}
	t1.waitTotal(t, n)
	t2.waitTotal(t, n)
	t1.exactlyOnce(t, ends, nil)
	t2.exactlyOnce(t, ends, nil)

	adm := kadm.NewClient(newClient(t, b))
	listed, err := adm.ListGroups(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if names := listed.Groups(); fmt.Sprint(sortedStrings(names)) != "[first second]" {
		t.Fatalf("groups %v", names)
	}
	described, err := adm.DescribeGroups(testCtx(t), "first")
	if err != nil || described["first"].Err != nil {
		t.Fatalf("describe: %v %v", err, described["first"].Err)
	}
	if d := described["first"]; d.State != "Stable" || len(d.Members) != 2 {
		t.Fatalf("described %+v", d)
	}
}

func sortedStrings(s []string) []string {
	sort.Strings(s)
	return s
}

// TestGroupOffsetsSurviveRestart: committed offsets are in
// __consumer_offsets; after a broker restart a member resumes at them.
func TestGroupOffsetsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	b := groupBroker(t, dir)
	createTopic(t, b, "resume", 4, nil)
	produceAll(t, newClient(t, b), makeRecords("resume", 800, "before"))
	first := endOffsets(t, b, "resume")
	tr := newTracker()
	c := startConsumer(t, b, "resumers", "resume", tr)
	tr.waitTotal(t, 800)
	c.stop()
	before := committed(t, b, "resumers")
	if fmt.Sprint(before) != fmt.Sprint(first) {
		t.Fatalf("committed %v, want %v", before, first)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b2 := groupBroker(t, dir)
	if after := committed(t, b2, "resumers"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after restart committed %v, want %v", after, before)
	}
	produceAll(t, newClient(t, b2), makeRecords("resume", 400, "after"))
	ends := endOffsets(t, b2, "resume")
	tr2 := newTracker()
	startConsumer(t, b2, "resumers", "resume", tr2)
	tr2.waitTotal(t, 400)
	tr2.exactlyOnce(t, ends, first)
}

// TestStaticMemberRestart: a static member (group.instance.id) that
// restarts inside its session timeout gets its partitions back with no
// rebalance: the other member is never revoked. A second process with the
// same instance id fences the first.
func TestStaticMemberRestart(t *testing.T) {
	b := groupBroker(t, "")
	createTopic(t, b, "static", 8, nil)
	produceAll(t, newClient(t, b), makeRecords("static", 400, "s"))

	type events struct {
		mu       sync.Mutex
		assigned [][]int32
		revoked  int
	}
	watch := func(ev *events) []kgo.Opt {
		return []kgo.Opt{
			kgo.Balancers(kgo.RangeBalancer()),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				ev.mu.Lock()
				ps := append([]int32(nil), m["static"]...)
				sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
				ev.assigned = append(ev.assigned, ps)
				ev.mu.Unlock()
			}),
			kgo.OnPartitionsRevoked(func(context.Context, *kgo.Client, map[string][]int32) {
				ev.mu.Lock()
				ev.revoked++
				ev.mu.Unlock()
			}),
		}
	}
	waitAssigned := func(ev *events, n int) []int32 {
		t.Helper()
		var last []int32
		waitCond(t, func() bool {
			ev.mu.Lock()
			defer ev.mu.Unlock()
			if len(ev.assigned) >= n {
				last = ev.assigned[len(ev.assigned)-1]
				return len(last) > 0
			}
			return false
		})
		return last
	}

	tr := newTracker()
	var ev1, ev2, ev1b events
	s1 := startConsumer(t, b, "statics", "static", tr, append(watch(&ev1), kgo.InstanceID("s1"))...)
	s2 := startConsumer(t, b, "statics", "static", tr, append(watch(&ev2), kgo.InstanceID("s2"))...)
	// Both members hold partitions once the group settles on 2 members.
	var p1 []int32
	waitCond(t, func() bool {
		ev1.mu.Lock()
		ev2.mu.Lock()
		defer ev1.mu.Unlock()
		defer ev2.mu.Unlock()
		if len(ev1.assigned) == 0 || len(ev2.assigned) == 0 {
			return false
		}
		a, b := ev1.assigned[len(ev1.assigned)-1], ev2.assigned[len(ev2.assigned)-1]
		p1 = a
		return len(a) == 4 && len(b) == 4
	})
	tr.waitTotal(t, 400)
	ev2.mu.Lock()
	revokedBefore, assignedBefore := ev2.revoked, len(ev2.assigned)
	ev2.mu.Unlock()

	// s1 "restarts": a static member's Close does not leave the group.
	s1.stop()
	s1b := startConsumer(t, b, "statics", "static", tr, append(watch(&ev1b), kgo.InstanceID("s1"))...)
	got := waitAssigned(&ev1b, 1)
	if fmt.Sprint(got) != fmt.Sprint(p1) {
		t.Fatalf("restarted static member got %v, had %v", got, p1)
	}
	ev2.mu.Lock()
	if ev2.revoked != revokedBefore || len(ev2.assigned) != assignedBefore {
		t.Fatalf("the other member saw a rebalance: revoked %d→%d, assigned %d→%d", revokedBefore, ev2.revoked, assignedBefore, len(ev2.assigned))
	}
	ev2.mu.Unlock()
	produceAll(t, newClient(t, b), makeRecords("static", 200, "more"))
	tr.waitTotal(t, 600)
	tr.exactlyOnce(t, endOffsets(t, b, "static"), nil)

	// A second process with instance id s2: the first s2 is fenced.
	var ev2b events
	tr2 := newTracker()
	startConsumer(t, b, "statics", "static", tr2, append(watch(&ev2b), kgo.InstanceID("s2"))...)
	waitAssigned(&ev2b, 1)
	waitCond(t, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, err := range tr.errs {
			if errors.Is(err, kerr.FencedInstanceID) {
				return true
			}
		}
		return false
	})
	_ = s2
	_ = s1b
}

// waitCond polls cond until it holds or the test's deadline passes.
func waitCond(t testing.TB, cond func() bool) {
	t.Helper()
	ctx := testCtx(t)
	tick := time.NewTicker(10 * time.Millisecond) // polling interval, not synchronisation
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("condition not met in time")
		}
	}
}

// crashDialer gives a client connections that can all be cut at once, with
// every later dial failing: the client "crashes" without leaving its group.
type crashDialer struct {
	mu      sync.Mutex
	conns   []net.Conn
	crashed bool
}

func (d *crashDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.crashed {
		return nil, errors.New("crashed")
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, host)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *crashDialer) crash() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.crashed = true
	for _, c := range d.conns {
		c.Close()
	}
}

// TestGroupMemberCrash: a member that stops heartbeating (its connections
// cut, no LeaveGroup) is removed after its session timeout and the survivor
// takes over all partitions. (Records the crashed member processed but had
// not committed may be consumed twice: at least once, as in Kafka.)
func TestGroupMemberCrash(t *testing.T) {
	b := groupBroker(t, "")
	createTopic(t, b, "crash", 8, nil)
	produceAll(t, newClient(t, b), makeRecords("crash", 400, "a"))

	tr := newTracker()
	d := &crashDialer{}
	crashing := startConsumer(t, b, "crashers", "crash", tr, kgo.Dialer(d.dial), kgo.SessionTimeout(2*time.Second))
	startConsumer(t, b, "crashers", "crash", tr, kgo.SessionTimeout(2*time.Second))
	tr.waitTotal(t, 400)
	d.crash()
	crashing.cancel() // stop its poll loop; its client is not closed (no leave)
	<-crashing.done
	crashing.cancel = nil
	t.Cleanup(crashing.cl.Close)

	// Only the survivor can consume what is produced now, so seeing the
	// last offset of every partition proves it took the partitions over.
	produceAll(t, newClient(t, b), makeRecords("crash", 800, "b"))
	ends := endOffsets(t, b, "crash")
	waitCond(t, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for p, end := range ends {
			if tr.seen[p][end-1] == 0 {
				return false
			}
		}
		return true
	})
	adm := kadm.NewClient(newClient(t, b))
	described, err := adm.DescribeGroups(testCtx(t), "crashers")
	if err != nil {
		t.Fatal(err)
	}
	if d := described["crashers"]; d.State != "Stable" || len(d.Members) != 1 {
		t.Fatalf("after the crash: state %s, %d members", d.State, len(d.Members))
	}
}

// TestKcatBalancedConsumers: two kcat (librdkafka) balanced consumers in one
// group share the partitions: together they read every record once.
func TestKcatBalancedConsumers(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kcat not installed (.ci/run installs it)")
		}
		t.Skip("kcat not installed")
	}
	b := startBroker(t, "", func(c *Config) {
		// Both kcats join the first generation: a long initial delay.
		c.Groups = group.Config{Partitions: 8, InitialRebalanceDelay: 2 * time.Second, MinSessionTimeout: time.Second}
	})
	createTopic(t, b, "kc", 4, nil)
	produceAll(t, newClient(t, b), makeRecords("kc", 400, "k"))
	ends := endOffsets(t, b, "kc")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	outs := make([]bytes.Buffer, 2)
	errs := make([]bytes.Buffer, 2)
	cmds := make([]*exec.Cmd, 2)
	for i := range cmds {
		cmds[i] = exec.CommandContext(ctx, kcat, "-b", b.Addr(), "-G", "kcats", "-X", "auto.offset.reset=earliest",
			"-f", "%p %o\\n", "-e", "-q", "kc")
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &errs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("kcat %d: %v\n%s", i, err, errs[i].String())
		}
	}
	tr := newTracker()
	for i := range outs {
		lines := strings.Fields(outs[i].String())
		if len(lines) == 0 {
			t.Fatalf("kcat %d consumed nothing; stderr:\n%s", i, errs[i].String())
		}
		for j := 0; j+1 < len(lines); j += 2 {
			p, _ := strconv.Atoi(lines[j])
			o, _ := strconv.ParseInt(lines[j+1], 10, 64)
			tr.add(&kgo.Record{Partition: int32(p), Offset: o})
		}
	}
	tr.exactlyOnce(t, ends, nil)
}

// TestGroupLagMetrics: /metrics reports committed offsets and lag (high
// watermark minus committed) per group and partition, and their sum.
func TestGroupLagMetrics(t *testing.T) {
	b := groupBroker(t, "")
	createTopic(t, b, "lag", 2, nil)
	produceAll(t, newClient(t, b), makeRecords("lag", 100, "l"))
	ends := endOffsets(t, b, "lag")
	adm := kadm.NewClient(newClient(t, b))
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "lag", Partition: 0, At: 10, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: "lag", Partition: 1, At: ends[1], LeaderEpoch: -1})
	resp, err := adm.CommitOffsets(testCtx(t), "laggers", offs)
	if err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	rec := httptest.NewRecorder()
	b.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`sediment_consumer_group_committed_offset{group="laggers",partition="0",topic="lag"} 10`,
		fmt.Sprintf(`sediment_consumer_group_lag{group="laggers",partition="0",topic="lag"} %d`, ends[0]-10),
		`sediment_consumer_group_lag{group="laggers",partition="1",topic="lag"} 0`,
		fmt.Sprintf(`sediment_consumer_group_total_lag{group="laggers"} %d`, ends[0]-10),
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}

// kip848Broker is groupBroker with the given KIP-848 session timeout (short,
// so a crashed member is detected quickly).
func kip848Broker(t testing.TB, session time.Duration) *Broker {
	return startBroker(t, "", func(c *Config) {
		c.Groups = group.Config{
			Partitions:                8,
			InitialRebalanceDelay:     100 * time.Millisecond,
			MinSessionTimeout:         time.Second,
			ConsumerHeartbeatInterval: 200 * time.Millisecond,
			ConsumerSessionTimeout:    session,
		}
	})
}

// TestConsumerGroupKIP848Crash: a KIP-848 member whose connections die is
// removed by the session timeout and the survivor takes its partitions.
func TestConsumerGroupKIP848Crash(t *testing.T) {
	b := kip848Broker(t, 2*time.Second)
	createTopic(t, b, "crash848", 8, nil)
	produceAll(t, newClient(t, b), makeRecords("crash848", 400, "a"))
	opts := []kgo.Opt{kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer()}
	tr := newTracker()
	d := &crashDialer{}
	crashing := startConsumer(t, b, "crashers848", "crash848", tr, append(opts, kgo.Dialer(d.dial))...)
	startConsumer(t, b, "crashers848", "crash848", tr, opts...)
	tr.waitTotal(t, 400)
	d.crash()
	crashing.cancel()
	<-crashing.done
	crashing.cancel = nil
	t.Cleanup(crashing.cl.Close)

	produceAll(t, newClient(t, b), makeRecords("crash848", 800, "b"))
	ends := endOffsets(t, b, "crash848")
	waitCond(t, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for p, end := range ends {
			if tr.seen[p][end-1] == 0 {
				return false
			}
		}
		return true
	})
	adm := kadm.NewClient(newClient(t, b))
	waitCond(t, func() bool {
		ds, err := adm.DescribeConsumerGroups(testCtx(t), "crashers848")
		dg := ds["crashers848"]
		return err == nil && dg.Err == nil && len(dg.Members) == 1 && dg.State == "Stable"
	})
}

// TestConsumerGroupKIP848StaticRestart: a static KIP-848 member that closes
// and comes back with the same instance id gets its partitions back without
// a new group epoch. franz-go 1.22.3 sends its leave (epoch -2) without the
// instance id, which Kafka and this broker refuse (INVALID_REQUEST
// "InstanceId can't be null."), so the old member stays until its session
// times out and the new one is UNRELEASED_INSTANCE_ID until then: here it
// takes over after that timeout, inside waitCond (a consumer group review).
// A leave with the instance id releases it at once: testdata/consumer_static.
func TestConsumerGroupKIP848StaticRestart(t *testing.T) {
	// The restarted member must be back within the session timeout: a
	// generous one, as a loaded test machine may be slow to start a client.
	b := kip848Broker(t, 30*time.Second)
	createTopic(t, b, "static848", 8, nil)
	produceAll(t, newClient(t, b), makeRecords("static848", 400, "s"))
	opts := []kgo.Opt{kgo.Balancers(kgo.RangeBalancer()), kgo.ServerSideBalancer(), kgo.SessionTimeout(20 * time.Second)}
	adm := kadm.NewClient(newClient(t, b))
	describe := func() kadm.DescribedConsumerGroup {
		ds, err := adm.DescribeConsumerGroups(testCtx(t), "statics848")
		if err != nil {
			t.Fatal(err)
		}
		return ds["statics848"]
	}
	tr := newTracker()
	startConsumer(t, b, "statics848", "static848", tr, append(opts, kgo.InstanceID("s1"))...)
	s2 := startConsumer(t, b, "statics848", "static848", tr, append(opts, kgo.InstanceID("s2"))...)
	var before kadm.DescribedConsumerGroup
	waitCond(t, func() bool {
		before = describe()
		if before.Err != nil || len(before.Members) != 2 || before.State != "Stable" {
			return false
		}
		for _, m := range before.Members {
			if len(m.Assignment["static848"]) != 4 {
				return false
			}
		}
		return true
	})
	s2.stop() // franz-go's close: a static leave without the instance id, refused
	s2b := startConsumer(t, b, "statics848", "static848", tr, append(opts, kgo.InstanceID("s2"))...)
	_ = s2b
	var after kadm.DescribedConsumerGroup
	waitCond(t, func() bool {
		after = describe()
		if after.Err != nil || len(after.Members) != 2 || after.State != "Stable" {
			return false
		}
		for _, m := range after.Members {
			if m.InstanceID != nil && *m.InstanceID == "s2" && m.MemberEpoch > 0 && len(m.Assignment["static848"]) == 4 {
				return true
			}
		}
		return false
	})
	if after.Epoch != before.Epoch {
		t.Fatalf("group epoch moved from %d to %d on a static restart", before.Epoch, after.Epoch)
	}
	for i, m := range before.Members {
		if fmt.Sprint(m.Assignment) != fmt.Sprint(after.Members[i].Assignment) {
			t.Fatalf("assignment changed: %v → %v", before.Members, after.Members)
		}
	}
}

// TestConsumerGroupKIP848Regex: a franz-go regex consumer on a KIP-848
// group; the broker resolves the regex and assigns every matching topic.
func TestConsumerGroupKIP848Regex(t *testing.T) {
	b := kip848Broker(t, 30*time.Second)
	createTopic(t, b, "rx-one", 2, nil)
	createTopic(t, b, "rx-two", 2, nil)
	createTopic(t, b, "not-rx", 2, nil)
	cl := newClient(t, b)
	produceAll(t, cl, makeRecords("rx-one", 100, "a"))
	produceAll(t, cl, makeRecords("rx-two", 100, "b"))
	produceAll(t, cl, makeRecords("not-rx", 100, "c"))
	tr := newTracker()
	startConsumer(t, b, "rx848", "^rx-.*", tr, kgo.ConsumeRegex(), kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer())
	tr.waitTotal(t, 200)
	adm := kadm.NewClient(newClient(t, b))
	waitCond(t, func() bool {
		ds, err := adm.DescribeConsumerGroups(testCtx(t), "rx848")
		if err != nil || ds["rx848"].Err != nil || len(ds["rx848"].Members) != 1 {
			return false
		}
		m := ds["rx848"].Members[0]
		return m.SubscribedTopicRegex != nil && len(m.Assignment["rx-one"]) == 2 && len(m.Assignment["rx-two"]) == 2 && len(m.Assignment["not-rx"]) == 0
	})
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.total != 200 {
		t.Fatalf("consumed %d records, want the 200 of the rx- topics", tr.total)
	}
}

// TestDeletedTopicOffsetsRemoved: deleting a topic removes every group's
// committed offsets of it (Kafka's onPartitionsDeleted), so a group reading
// a topic created again under the same name starts at its reset offset and
// does not skip the new topic's first records at the old offsets.
func TestDeletedTopicOffsetsRemoved(t *testing.T) {
	b := groupBroker(t, t.TempDir())
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	createTopic(t, b, "again", 1, nil)
	produceAll(t, newClient(t, b), makeRecords("again", 10, "old"))
	resp, err := adm.CommitOffsets(ctx, "g", kadm.OffsetsFromRecords(kgo.Record{Topic: "again", Partition: 0, Offset: 9}))
	if err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	createTopic(t, b, "kept", 1, nil)
	if resp, err := adm.CommitOffsets(ctx, "g", kadm.OffsetsFromRecords(kgo.Record{Topic: "kept", Partition: 0, Offset: 0})); err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	if _, err := adm.DeleteTopics(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	// Asked by name, once the name is a topic again.
	cl0 := newClient(t, b)
	committedAt := func(topic string) int64 {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group = 7, "g"
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = topic, []int32{0}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl0)
		if err != nil || resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("offset fetch of %s: %v %+v", topic, err, resp)
		}
		return resp.Topics[0].Partitions[0].Offset
	}
	createTopic(t, b, "again", 1, nil)
	produceAll(t, newClient(t, b), makeRecords("again", 20, "new"))
	testutil.WaitFor(t, 10*time.Second, "the deleted topic's offsets removed (the new topic's name has none)", func() bool {
		if at := committedAt("kept"); at != 1 {
			t.Fatalf("the other topic's offset: %d, want 1", at)
		}
		return committedAt("again") == -1
	})
	cl := newClient(t, b, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("again"), kgo.DisableAutoCommit())
	var got int
	for got < 20 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if got == 0 && r.Offset != 0 {
				t.Fatalf("the group began the new topic at offset %d", r.Offset)
			}
			got++
		})
	}
}
