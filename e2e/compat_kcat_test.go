package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kcatRecord is one line of `kcat -C -J` / `kcat -G -J` output.
type kcatRecord struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Offset    int64   `json:"offset"`
	TsType    string  `json:"tstype"`
	Ts        int64   `json:"ts"`
	Key       *string `json:"key"`
	Payload   *string `json:"payload"`
}

// testKcatMore covers librdkafka (kcat) beyond kcat_test.go: balanced
// consumer groups (-G), offsets for times (-Q) and the JSON envelope (-J)
// with timestamps.
func testKcatMore(t *testing.T, b *Broker) {
	t.Run("offsets-for-times", func(t *testing.T) { testKcatQuery(t, b) })
	t.Run("transactional", func(t *testing.T) {
		// kcat wraps a transactional.id producer's messages in one
		// transaction and commits it at the end of input.
		b.CreateTopic(t, "kcat-txn", 2, nil)
		recs := compatRecords("ct", 100)
		var in strings.Builder
		for _, k := range sortedKeys(recs) {
			fmt.Fprintf(&in, "%s\t%s\n", k, recs[k])
		}
		r := b.kcat(t, in.String(), "-P", "-t", "kcat-txn", "-K\t", "-z", "lz4", "-X", "transactional.id=kcat-txn-producer")
		if !strings.Contains(r.Stderr, "Transaction successfully committed") {
			t.Errorf("kcat transactional producer did not report a commit:\n%s", r.Stderr)
		}
		out := b.kcat(t, "", "-C", "-J", "-e", "-q", "-o", "beginning", "-X", "isolation.level=read_committed", "-t", "kcat-txn").Stdout
		c := newCollector()
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var r kcatRecord
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("kcat -J line %q: %v", l, err)
			}
			c.add(r.Partition, r.Offset, deref(r.Key), deref(r.Payload))
		}
		c.check(t, "kcat-txn read_committed", recs)
	})
	t.Run("auto-create", func(t *testing.T) {
		// librdkafka's producer on a topic that does not exist, idempotent
		// and compressed: the broker creates the topic.
		recs := compatRecords("ca", 50)
		var in strings.Builder
		for _, k := range sortedKeys(recs) {
			fmt.Fprintf(&in, "%s\t%s\n", k, recs[k])
		}
		b.kcat(t, in.String(), "-P", "-t", "kcat-auto-created", "-K\t", "-z", "zstd", "-X", "enable.idempotence=true")
		// check.crcs: librdkafka verifies each fetched batch's CRC-32C.
		out := b.kcat(t, "", "-C", "-J", "-e", "-q", "-o", "beginning", "-X", "check.crcs=true", "-t", "kcat-auto-created").Stdout
		c := newCollector()
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var r kcatRecord
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("kcat -J line %q: %v", l, err)
			}
			c.add(r.Partition, r.Offset, deref(r.Key), deref(r.Payload))
		}
		c.check(t, "kcat-auto-created", recs)
	})
	t.Run("balanced-group/range", func(t *testing.T) { testKcatGroup(t, b, "range", false) })
	t.Run("balanced-group/cooperative-sticky", func(t *testing.T) { testKcatGroup(t, b, "cooperative-sticky", false) })
	t.Run("balanced-group/range/static", func(t *testing.T) { testKcatGroup(t, b, "range", true) })
	t.Run("group-migration/range", func(t *testing.T) { testKcatGroupMigration(t, b, "range") })
	t.Run("group-migration/cooperative-sticky", func(t *testing.T) { testKcatGroupMigration(t, b, "cooperative-sticky") })
}

// testKcatQuery produces records with known timestamps and asks kcat -Q for
// the offsets of several times; then reads them with -J and compares the
// timestamps.
func testKcatQuery(t *testing.T, b *Broker) {
	topic := "kcat-query"
	b.CreateTopic(t, topic, 2, nil)
	const base = int64(1_700_000_000_000)
	cl := b.Client(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 100; i++ {
		r := &kgo.Record{Partition: int32(i % 2), Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("v%d", i)),
			Timestamp: time.UnixMilli(base + int64(i)*1000)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	// Partition 0 holds even i at offsets i/2, partition 1 odd i. One
	// query per run: librdkafka merges queries for the same partition.
	for _, q := range []struct {
		partition int
		ts        int64
		want      int64
	}{
		{0, base + 40*1000, 20},     // exactly record 40
		{1, base + 40*1000 + 1, 20}, // the first odd record after: 41
		{0, base - 1, 0},            // before every record
		{1, base + 1_000_000, -1},   // after every record
	} {
		out := b.kcat(t, "", "-Q", "-t", fmt.Sprintf("%s:%d:%d", topic, q.partition, q.ts)).Stdout
		if want := fmt.Sprintf("%s [%d] offset %d\n", topic, q.partition, q.want); out != want {
			t.Errorf("kcat -Q for partition %d at %d: %q, want %q", q.partition, q.ts, out, want)
		}
	}

	lines := strings.Split(strings.TrimSpace(b.kcat(t, "", "-C", "-J", "-e", "-q", "-o", "beginning", "-t", topic).Stdout), "\n")
	if len(lines) != 100 {
		t.Fatalf("kcat -C -J printed %d lines, want 100", len(lines))
	}
	for _, l := range lines {
		var r kcatRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Key == nil || r.Payload == nil {
			t.Fatalf("kcat -J line %q: %v", l, err)
		}
		var i int64
		fmt.Sscan(*r.Key, &i)
		if r.Ts != base+i*1000 || r.TsType != "create" || *r.Payload != fmt.Sprintf("v%d", i) ||
			r.Partition != int32(i%2) || r.Offset != i/2 {
			t.Errorf("kcat -J record %+v (key %s), want ts %d create, partition %d offset %d", r, *r.Key, base+i*1000, i%2, i/2)
		}
	}
}

// kcatMember is a `kcat -G` process whose stdout (JSON records) and stderr
// (rebalance notices) are collected.
type kcatMember struct {
	cmd    *exec.Cmd
	stderr syncBuffer
	out    syncBuffer
	done   chan struct{}
}

func startKcatMember(t *testing.T, b *Broker, args ...string) *kcatMember {
	t.Helper()
	m := &kcatMember{done: make(chan struct{})}
	m.cmd = exec.Command(kcatPath(t), append([]string{"-b", b.Addr}, args...)...)
	m.cmd.Env = brokerEnv()
	m.cmd.Stderr = &m.stderr
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start kcat: %v", err)
	}
	go func() {
		defer close(m.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(&m.out, sc.Text())
		}
		m.cmd.Wait() //nolint:errcheck // the exit status is checked through stderr and output
	}()
	t.Cleanup(func() {
		select {
		case <-m.done:
		default:
			m.cmd.Process.Kill() //nolint:errcheck // it may have exited meanwhile
			<-m.done
		}
	})
	return m
}

// records parses what the member printed so far.
func (m *kcatMember) records(t *testing.T) []kcatRecord {
	var rs []kcatRecord
	for _, l := range strings.Split(m.out.String(), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var r kcatRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("kcat -G -J line %q: %v", l, err)
		}
		rs = append(rs, r)
	}
	return rs
}

// kcatAssigned matches kcat's notice of an eager assignment ("rebalanced
// (memberid …): assigned: t [0], …") or of a cooperative one ("rebalanced:
// incremental assignment of 2 partition(s) (…): t [0], …").
var kcatAssigned = regexp.MustCompile(`rebalanced.*(assigned: |incremental assignment of [1-9][0-9]* partition).*\[`)

// assigned reports whether the member has been assigned partitions. The
// second member of a group is assigned only once the group is stable.
func (m *kcatMember) assigned() bool {
	return kcatAssigned.MatchString(m.stderr.String())
}

// stop sends SIGTERM (kcat then closes the consumer, committing) and waits.
func (m *kcatMember) stop(t *testing.T) {
	t.Helper()
	m.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
	select {
	case <-m.done:
	case <-time.After(stopTimeout):
		t.Errorf("kcat -G did not exit within %v of SIGTERM; stderr:\n%s", stopTimeout, m.stderr.String())
	}
}

// testKcatGroup runs two `kcat -G` members on a 4-partition topic: once both
// are assigned partitions, records are produced; each is read exactly once
// across the two, both read some, and the committed offsets reach the end.
func testKcatGroup(t *testing.T, b *Broker, strategy string, static bool) {
	topic, group := fmt.Sprintf("kcat-group-%s-%v", strategy, static), fmt.Sprintf("kcat-group-g-%s-%v", strategy, static)
	b.CreateTopic(t, topic, 4, nil)
	args := []string{"-G", group, "-J", "-u", "-o", "beginning", "-X", "auto.commit.interval.ms=100",
		"-X", "session.timeout.ms=10000", "-X", "heartbeat.interval.ms=500", "-X", "partition.assignment.strategy=" + strategy, topic}
	memberArgs := func(i int) []string {
		if !static {
			return args
		}
		// KIP-345 static membership: group.instance.id per member.
		return append([]string{"-X", fmt.Sprintf("group.instance.id=kcat-static-%d", i)}, args...)
	}
	m1 := startKcatMember(t, b, memberArgs(1)...)
	m2 := startKcatMember(t, b, memberArgs(2)...)
	waitFor(t, 60*time.Second, "both kcat members to be assigned partitions", func() bool {
		return m1.assigned() && m2.assigned()
	})
	recs := compatRecords("kc", 400)
	produceFranz(t, b, topic, recs)
	c := newCollector()
	deadline := time.Now().Add(60 * time.Second)
	for len(m1.records(t))+len(m2.records(t)) < len(recs) {
		if time.Now().After(deadline) {
			t.Fatalf("kcat members read %d+%d of %d records; stderr:\n%s\n---\n%s", len(m1.records(t)), len(m2.records(t)),
				len(recs), m1.stderr.String(), m2.stderr.String())
		}
		select {
		case <-m1.done:
			t.Fatalf("kcat member 1 exited; stderr:\n%s", m1.stderr.String())
		case <-m2.done:
			t.Fatalf("kcat member 2 exited; stderr:\n%s", m2.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i, m := range []*kcatMember{m1, m2} {
		rs := m.records(t)
		if len(rs) == 0 {
			t.Errorf("kcat member %d read nothing; stderr:\n%s", i+1, m.stderr.String())
		}
		for _, r := range rs {
			c.add(r.Partition, r.Offset, deref(r.Key), deref(r.Payload))
		}
	}
	c.check(t, group, recs)
	m1.stop(t)
	m2.stop(t)
	checkCommitted(t, b, group, topic)
}

// testKcatGroupMigration is a rolling upgrade of a running group from
// librdkafka's classic protocol to KIP-848 and back (online migration,
// docs/groups.md): a `kcat -G` member consumes; a franz-go KIP-848 member
// joins the same group, which becomes a consumer group with kcat in it as a
// classic member, and both consume; the KIP-848 member leaves and the group
// turns classic, kcat taking every partition again. Records produced in
// each phase are all consumed (kcat commits every 100 ms, so a record may
// be read twice across a rebalance), and the committed offsets reach the
// end.
func testKcatGroupMigration(t *testing.T, b *Broker, strategy string) {
	topic, group := "kcat-migrate-"+strategy, "kcat-migrate-g-"+strategy
	b.CreateTopic(t, topic, 4, nil)
	kc := startKcatMember(t, b, "-G", group, "-J", "-u", "-o", "beginning", "-X", "auto.commit.interval.ms=100",
		"-X", "session.timeout.ms=10000", "-X", "heartbeat.interval.ms=200", "-X", "partition.assignment.strategy="+strategy, topic)
	waitFor(t, 60*time.Second, "kcat to be assigned partitions", kc.assigned)

	all := map[string]string{}
	c := newCollector()
	c.allowDups = true
	kcatSeen := 0 // kcat lines already in c
	drainKcat := func() (n int) {
		rs := kc.records(t)
		for _, r := range rs[kcatSeen:] {
			c.add(r.Partition, r.Offset, deref(r.Key), deref(r.Payload))
			n++
		}
		kcatSeen = len(rs)
		return n
	}
	waitAll := func(what string) {
		t.Helper()
		waitFor(t, 60*time.Second, what, func() bool {
			drainKcat()
			return c.len() >= len(all)
		})
	}
	phase := func(prefix string, n int) map[string]string {
		recs := compatRecords(prefix, n)
		for k, v := range recs {
			all[k] = v
		}
		produceFranz(t, b, topic, recs)
		return recs
	}
	phase("mig1", 200)
	waitAll("kcat to read the first records")

	// A KIP-848 member (franz-go, server-side assignment) joins.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fr := b.Client(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ServerSideBalancer(),
		kgo.Balancers(kgo.StickyBalancer()), kgo.FetchMaxWait(100*time.Millisecond))
	frDone := make(chan struct{})
	frRead := 0
	var frMu sync.Mutex
	go func() {
		defer close(frDone)
		for ctx.Err() == nil {
			fs := fr.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				c.add(r.Partition, r.Offset, string(r.Key), string(r.Value))
				frMu.Lock()
				frRead++
				frMu.Unlock()
			})
		}
	}()
	// mixed: a stable consumer group of one classic and one consumer-protocol
	// member (ConsumerGroupDescribe v1 member types 0 and 1), both owning
	// partitions.
	adm := b.Admin(t)
	raw := b.Client(t)
	mixed := func() bool {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Version = 1
		req.Groups = []string{group}
		resp, err := req.RequestWith(context.Background(), raw)
		if err != nil || len(resp.Groups) != 1 {
			return false
		}
		g := resp.Groups[0]
		if g.ErrorCode != 0 || g.State != "Stable" || len(g.Members) != 2 {
			return false
		}
		types := map[int8]int{}
		for _, m := range g.Members {
			if len(m.Assignment.TopicPartitions) == 0 {
				return false
			}
			types[m.MemberType]++
		}
		return types[0] == 1 && types[1] == 1
	}
	waitFor(t, 60*time.Second, "a stable consumer group with kcat (classic) and franz-go (KIP-848) both assigned", mixed)
	drainKcat()
	kcatBefore := kcatSeen
	frMu.Lock()
	frBefore := frRead
	frMu.Unlock()
	phase("mig2", 400)
	waitAll("both members to read the mixed phase's records")
	frMu.Lock()
	frGot := frRead - frBefore
	frMu.Unlock()
	if kcatSeen == kcatBefore || frGot == 0 {
		t.Errorf("in the mixed group kcat read %d and franz-go %d of the new records; both should read some", kcatSeen-kcatBefore, frGot)
	}

	// The KIP-848 member leaves: the group turns classic with kcat alone.
	cancel()
	<-frDone
	fr.Close()
	waitFor(t, 60*time.Second, "the group to turn classic with kcat owning every partition", func() bool {
		lg, err := adm.ListGroups(context.Background())
		if err != nil || lg[group].GroupType != "classic" {
			return false
		}
		d, err := adm.DescribeGroups(context.Background(), group)
		if err != nil {
			return false
		}
		g := d[group]
		return g.State == "Stable" && len(g.Members) == 1 && len(g.AssignedPartitions()[topic]) == 4
	})
	phase("mig3", 200)
	waitAll("kcat to read the records after the downgrade")
	kc.stop(t)
	drainKcat()
	c.check(t, "kcat and franz-go", all)
	checkCommitted(t, b, group, topic)
}
