package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterVoters changes the metadata quorum of a running 3-broker cluster
// with `sediment cluster voters`: a 4th broker started with the three voters
// in --voters joins as an observer (it bootstraps nothing, asks the voters to
// add it, receives the metadata log and serves without a vote): it learns a
// topic created afterwards, leads a partition of a topic replicated on all
// four and serves acks=all produce and consume, and DescribeQuorum lists it
// among the observers.
// `voters add` makes it a voter; every broker then lists four voters, also
// after broker 4 restarts with the same settings. Adding
// it again is DUPLICATE_VOTER, removing an unknown id VOTER_NOT_FOUND, adding
// an address nobody answers at REQUEST_TIMED_OUT and a node under another id
// INVALID_REQUEST (the quorum unchanged). `voters remove` takes it out of the
// quorum again, and it stays an observer that still learns new topics; once
// stopped and unregistered it is no observer any more, and the three voters
// commit.
func TestClusterVoters(t *testing.T) {
	t.Parallel() // see TestMain
	c := StartCluster(t, 3)
	list := func(via *Broker) string {
		t.Helper()
		return via.sediment(t, "", "cluster", "voters", "list").Stdout
	}
	if out := list(c.Broker(1)); strings.Count(out, "true") != 1 || len(parseVoterList(out)) != 3 || parseVoterList(out)["3"] != c.Broker(3).RaftAddr ||
		!strings.Contains(out, "commit index") || !strings.Contains(out, "observers: []") {
		t.Fatalf("voters list, three voters, one leader and no observer expected:\n%s", out)
	}

	// The joining broker comes up as an observer.
	b4 := c.newJoiningBroker(t, 4)
	if err := b4.start(); err != nil {
		t.Fatalf("broker 4 did not come up as an observer: %v", err)
	}
	if !strings.Contains(b4.log.String(), "added to the metadata quorum as an observer") {
		t.Errorf("broker 4's log does not say it joined as an observer")
	}
	for _, b := range append(c.Brokers, b4) {
		waitFor(t, 30*time.Second, fmt.Sprintf("broker %d to list broker 4 as an observer", b.NodeID), func() bool {
			r := b.sedimentMayFail(t, "", "cluster", "status")
			return r.Err == nil && strings.Contains(r.Stdout, "voters: [1 2 3]\n") && strings.Contains(r.Stdout, "observers: [4]\n")
		})
	}
	adm := kadm.NewClient(c.Client(t))
	cl4, err := kgo.NewClient(kgo.SeedBrokers(b4.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl4.Close()
	adm4 := kadm.NewClient(cl4)
	// learns: a topic created through broker 1 shows up in broker 4's own
	// Metadata answer.
	learns := func(topic string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if resp, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
		}
		waitFor(t, 30*time.Second, "broker 4 to know topic "+topic, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			md, err := adm4.Metadata(ctx, topic)
			return err == nil && md.Topics[topic].Err == nil && len(md.Topics[topic].Partitions) == 1
		})
	}
	learns("as-observer")
	// An observer is a whole broker: replicas on all four brokers, the
	// partition broker 4 leads among them, records produced with acks=all
	// through broker 4 and read back through it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if resp, err := adm.CreateTopic(ctx, 4, 4, nil, "replicated"); err != nil || resp.Err != nil {
		t.Fatalf("create topic replicated: %v %v", err, resp.Err)
	}
	waitFor(t, 30*time.Second, "broker 4 to lead a partition of replicated with all four in its ISR", func() bool {
		parts, err := c.Partitions(ctx, adm4, "replicated")
		if err != nil || len(parts) != 4 {
			return false
		}
		leads := false
		for _, p := range parts {
			if len(p.ISR) != 4 {
				return false
			}
			leads = leads || p.Leader == 4
		}
		return leads
	})
	pcl, err := kgo.NewClient(kgo.SeedBrokers(b4.Addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("replicated"))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	for i := range 200 {
		if err := pcl.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatalf("produce through the observer: %v", err)
		}
	}
	ccl, err := kgo.NewClient(kgo.SeedBrokers(b4.Addr), kgo.ConsumeTopics("replicated"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer ccl.Close()
	seen := map[string]bool{}
	for len(seen) < 200 && ctx.Err() == nil {
		fs := ccl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	if len(seen) != 200 {
		t.Fatalf("read back %d of 200 records through the observer", len(seen))
	}

	out := c.Broker(2).sediment(t, "", "cluster", "voters", "add", "4", b4.RaftAddr).Stdout
	if !strings.Contains(out, "added voter 4") {
		t.Fatalf("voters add: %s", out)
	}
	// Every broker, the new one too, reports four voters.
	for _, b := range append(c.Brokers, b4) {
		waitFor(t, 30*time.Second, fmt.Sprintf("broker %d to list four voters", b.NodeID), func() bool {
			r := b.sedimentMayFail(t, "", "cluster", "voters", "list")
			vs := parseVoterList(r.Stdout)
			return r.Err == nil && len(vs) == 4 && vs["4"] == b4.RaftAddr && strings.Contains(r.Stdout, "observers: []")
		})
	}
	if status := b4.sediment(t, "", "cluster", "status").Stdout; !strings.Contains(status, "voters: [1 2 3 4]") {
		t.Errorf("cluster status through broker 4:\n%s", status)
	}
	learns("after-join")
	// Restarted with the same settings (its id still not in --voters), it
	// asks to observe again and stays a voter, and says so: not the
	// observer's line and its `voters add` hint.
	if err := b4.Stop(); err != nil {
		t.Fatalf("stopping broker 4: %v", err)
	}
	asObserver := strings.Count(b4.log.String(), "added to the metadata quorum as an observer")
	if err := b4.start(); err != nil {
		t.Fatalf("restarting broker 4: %v", err)
	}
	if l := b4.log.String(); strings.Count(l, "added to the metadata quorum as an observer") != asObserver ||
		!strings.Contains(l, "rejoined the metadata quorum as a voter") {
		t.Errorf("broker 4's log after its restart as a voter does not say it rejoined as one")
	}
	if r := b4.sediment(t, "", "cluster", "voters", "list").Stdout; len(parseVoterList(r)) != 4 || !strings.Contains(r, "observers: []") {
		t.Fatalf("voters after broker 4's restart:\n%s", r)
	}

	// Refusals.
	if r := c.Broker(1).sedimentMayFail(t, "", "cluster", "voters", "add", "4", b4.RaftAddr); r.Err == nil || !strings.Contains(r.Stderr, "DUPLICATE_VOTER") {
		t.Errorf("adding voter 4 twice: err %v, stderr %s", r.Err, r.Stderr)
	}
	if r := c.Broker(1).sedimentMayFail(t, "", "cluster", "voters", "remove", "9"); r.Err == nil || !strings.Contains(r.Stderr, "VOTER_NOT_FOUND") {
		t.Errorf("removing voter 9: err %v, stderr %s", r.Err, r.Stderr)
	}
	// A voter nobody answers for (a typo), through every broker (followers
	// forward to the leader), and a running node under another id: refused
	// before the quorum changes, which stays at four.
	for _, b := range c.Brokers {
		if r := b.sedimentMayFail(t, "", "cluster", "voters", "add", "5", "127.0.0.1:1"); r.Err == nil || !strings.Contains(r.Stderr, "REQUEST_TIMED_OUT") {
			t.Errorf("adding an unreachable voter through broker %d: err %v, stderr %s", b.NodeID, r.Err, r.Stderr)
		}
	}
	if r := c.Broker(1).sedimentMayFail(t, "", "cluster", "voters", "add", "5", b4.RaftAddr); r.Err == nil || !strings.Contains(r.Stderr, "INVALID_REQUEST") {
		t.Errorf("adding broker 4 as voter 5: err %v, stderr %s", r.Err, r.Stderr)
	}
	if vs := parseVoterList(list(c.Broker(1))); len(vs) != 4 || vs["5"] != "" {
		t.Errorf("voters after the refused additions: %v", vs)
	}

	// Remove it again, through the new voter itself: it stays an observer
	// and still learns the metadata.
	if out := b4.sediment(t, "", "cluster", "voters", "remove", "4").Stdout; !strings.Contains(out, "removed voter 4") {
		t.Fatalf("voters remove: %s", out)
	}
	for _, b := range c.Brokers {
		waitFor(t, 30*time.Second, fmt.Sprintf("broker %d to list three voters and observer 4", b.NodeID), func() bool {
			r := b.sedimentMayFail(t, "", "cluster", "voters", "list")
			vs := parseVoterList(r.Stdout)
			return r.Err == nil && len(vs) == 3 && vs["4"] == "" && strings.Contains(r.Stdout, "observers: [4]")
		})
	}
	learns("after-remove")

	// Decommissioned: stopped, then unregistered, it leaves the Raft
	// configuration, and the three voters (two needed) commit.
	if err := b4.Stop(); err != nil {
		t.Errorf("stopping the removed broker: %v", err)
	}
	waitFor(t, 30*time.Second, "broker 4 fenced", func() bool {
		f := statusRow(c.Broker(1).sediment(t, "", "cluster", "status").Stdout, "4")
		return f != nil && f[2] == "fenced"
	})
	if out := c.Broker(1).sediment(t, "", "cluster", "unregister", "--id", "4").Stdout; !strings.Contains(out, "broker 4 unregistered") {
		t.Fatalf("unregister: %q", out)
	}
	for _, b := range c.Brokers {
		waitFor(t, 30*time.Second, fmt.Sprintf("broker %d to list no observer", b.NodeID), func() bool {
			r := b.sedimentMayFail(t, "", "cluster", "voters", "list")
			return r.Err == nil && len(parseVoterList(r.Stdout)) == 3 && strings.Contains(r.Stdout, "observers: []")
		})
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if resp, err := adm.CreateTopic(ctx2, 1, 1, nil, "after-unregister"); err != nil || resp.Err != nil {
		t.Fatalf("create topic after the removal: %v %v", err, resp.Err)
	}
}

// parseVoterList reads `sediment cluster voters list`: voter id → Raft address.
func parseVoterList(out string) map[string]string {
	vs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] != "VOTER" {
			vs[f[0]] = f[1]
		}
	}
	return vs
}

// TestObserverKills: three voters and a fourth broker that is an observer of
// the metadata quorum, all started at once (the observer asks to join while
// the quorum is still electing its first leader). A topic replicated three
// times over the four brokers, the observer among its leaders, takes an
// idempotent acks=all producer while the observer is SIGKILLed and
// restarted, and then the metadata quorum's leader; afterwards every
// acknowledged record is there once, the replicas are identical, and the
// observer is still an observer that learns the metadata.
func TestObserverKills(t *testing.T) {
	t.Parallel() // see TestMain
	c := NewCluster(t, 4)
	var voters []string
	for _, b := range c.Brokers[:3] {
		voters = append(voters, fmt.Sprintf("%d@%s", b.NodeID, b.RaftAddr))
	}
	for _, b := range c.Brokers {
		for i, a := range b.extra {
			if a == "--voters" {
				b.extra[i+1] = strings.Join(voters, ",")
			}
		}
	}
	c.StartAll()
	obs := c.Broker(4)
	quorum := func() string {
		t.Helper()
		return c.Broker(1).sediment(t, "", "cluster", "status").Stdout
	}
	if q := quorum(); !strings.Contains(q, "voters: [1 2 3]\n") || !strings.Contains(q, "observers: [4]\n") {
		t.Fatalf("cluster status, three voters and observer 4 expected:\n%s", q)
	}
	adm := kadm.NewClient(c.Client(t))
	const topic = "observed"
	const partitions = 4
	createClusterTopic(t, adm, topic, partitions, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")})
	ps := c.WaitFullISR(t, adm, topic, 60*time.Second)
	leads := false
	for _, p := range ps {
		leads = leads || p.Leader == 4
	}
	if !leads {
		t.Fatalf("the observer leads no partition: %v", ps)
	}
	kp := startKeyedProducer(t, c, topic)
	defer kp.stop()
	more := func(what string) {
		t.Helper()
		base := kp.count()
		waitFor(t, 60*time.Second, what, func() bool { return kp.count() > base+200 })
	}
	more("acknowledged writes")
	t.Logf("SIGKILL observer 4 (%d acknowledged so far)", kp.count())
	obs.Kill()
	more("writes acknowledged while the observer is down")
	obs.Start()
	c.WaitFullISR(t, adm, topic, 60*time.Second)
	more("writes acknowledged after the observer's restart")

	var controller int32 = -1
	for _, line := range strings.Split(quorum(), "\n") {
		if v, ok := strings.CutPrefix(line, "controller: "); ok {
			fmt.Sscan(v, &controller)
		}
	}
	if controller < 1 || controller > 3 {
		t.Fatalf("controller %d is not a voter", controller)
	}
	t.Logf("SIGKILL the metadata leader %d (%d acknowledged so far)", controller, kp.count())
	c.Broker(controller).Kill()
	more("writes acknowledged while the metadata leader is down")
	// The observer follows the new metadata leader: a topic created now
	// shows up in its own Metadata answer.
	createClusterTopic(t, adm, "after-leader-kill", 1, 1, nil)
	adm4 := kadm.NewClient(obs.Client(t))
	waitFor(t, 30*time.Second, "the observer to learn a topic created under the new metadata leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		md, err := adm4.Metadata(ctx, "after-leader-kill")
		return err == nil && md.Topics["after-leader-kill"].Err == nil
	})
	c.Broker(controller).Start()
	more("writes acknowledged after the metadata leader's restart")
	kp.stop()

	ps = c.WaitFullISR(t, adm, topic, 60*time.Second)
	for p, st := range ps {
		var replicas []*Broker
		for _, r := range st.Replicas {
			replicas = append(replicas, c.Broker(r))
		}
		c.WaitIdenticalReplicasOf(t, topic, p, replicas, 60*time.Second)
	}
	checkAcked(t, c, topic, kp)
	if q := quorum(); !strings.Contains(q, "voters: [1 2 3]\n") || !strings.Contains(q, "observers: [4]\n") {
		t.Fatalf("cluster status after the kills:\n%s", q)
	}
}
