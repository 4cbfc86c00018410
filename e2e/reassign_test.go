package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestReplicationReassignment moves replicas with kadm's
// AlterPartitionAssignments (AlterPartitionReassignments, KIP-455) on a
// four-broker cluster while an idempotent acks=all producer writes: each
// partition gets the broker it was not on and loses its leader, so a new
// replica must catch up and join the ISR, the old leader leaves and
// leadership moves. One reassignment is held in progress (its new broker is
// down) and seen by ListPartitionReassignments until the broker returns.
// Afterwards every acknowledged record is there once, and the new replicas
// hold the same log as the others.
func TestReplicationReassignment(t *testing.T) {
	t.Parallel() // see TestMain
	c := StartCluster(t, 4)
	adm := kadm.NewClient(c.Client(t))
	const topic = "moving"
	const partitions = 3
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	createClusterTopic(t, adm, topic, partitions, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")})
	before := c.WaitFullISR(t, adm, topic, 30*time.Second)
	kp := startKeyedProducer(t, c, topic)
	defer kp.stop()
	waitFor(t, 60*time.Second, "acknowledged writes", func() bool { return kp.count() > 300 })

	// Each partition's target: the broker it lacks first (the new
	// preferred leader), then its replicas except the current leader.
	targets := map[int32][]int32{}
	for p, st := range before {
		var added int32
		for id := int32(1); id <= 4; id++ {
			if !slices.Contains(st.Replicas, id) {
				added = id
			}
		}
		target := []int32{added}
		for _, r := range st.Replicas {
			if r != st.Leader {
				target = append(target, r)
			}
		}
		targets[p] = target
	}
	alter := func(p int32) {
		t.Helper()
		assignReplicas(t, ctx, adm, topic, p, targets[p])
		t.Logf("%s-%d: replicas %v (leader %d) → %v", topic, p, before[p].Replicas, before[p].Leader, targets[p])
	}

	// Partition 0 with its new broker down: the reassignment waits.
	newcomer := c.Broker(targets[0][0])
	newcomer.Kill()
	alter(0)
	ls, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := ls[topic][0]
	if !ok || !slices.Equal(got.AddingReplicas, []int32{int32(newcomer.NodeID)}) ||
		!slices.Equal(got.RemovingReplicas, []int32{before[0].Leader}) || len(got.Replicas) != 4 {
		t.Fatalf("ListPartitionReassignments while broker %d is down: %+v (listed %v)", newcomer.NodeID, got, ok)
	}
	t.Logf("in progress: %+v", got)
	// Bad requests get Kafka's codes.
	var bad kadm.AlterPartitionAssignmentsReq
	bad.Assign(topic, 1, []int32{1, 1, 2})
	bad.CancelAssign(topic, 2)
	res, err := adm.AlterPartitionAssignments(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[topic][1]; r.Err == nil || r.Err.Error() == "" {
		t.Errorf("a duplicate replica was accepted: %+v", r)
	}
	if r := res[topic][2]; r.Err == nil {
		t.Errorf("cancelling with no reassignment in progress was accepted: %+v", r)
	}
	base := kp.count()
	waitFor(t, 60*time.Second, "writes acknowledged during the reassignment", func() bool { return kp.count() > base+200 })
	newcomer.Start()
	alter(1)
	alter(2)

	waitFor(t, 120*time.Second, "every reassignment to complete", func() bool {
		ls, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}, 2: {}}})
		if err != nil || len(ls[topic]) > 0 {
			return false
		}
		ps, err := c.Partitions(ctx, adm, topic)
		if err != nil {
			return false
		}
		for p, want := range targets {
			if !slices.Equal(ps[p].Replicas, want) || len(ps[p].ISR) != len(want) || !slices.Contains(want, ps[p].Leader) {
				return false
			}
		}
		return true
	})
	base = kp.count()
	waitFor(t, 60*time.Second, "writes acknowledged after the reassignment", func() bool { return kp.count() > base+200 })
	kp.stop()
	ps := c.WaitFullISR(t, adm, topic, 60*time.Second)
	for p, st := range ps {
		t.Logf("%s-%d: replicas %v, leader %d, ISR %v", topic, p, st.Replicas, st.Leader, st.ISR)
		c.WaitIdenticalReplicasOf(t, topic, p, c.brokersOf(st.Replicas), 60*time.Second)
		// The removed replica's data goes, once that broker has applied
		// the reassignment's end (it may be catching up after its restart).
		removed := c.Broker(before[p].Leader)
		waitFor(t, 60*time.Second, fmt.Sprintf("broker %d to delete %s-%d after it was removed", removed.NodeID, topic, p),
			func() bool { return len(replicaLog(removed, topic, p)) == 0 })
		// It ran throughout: the directory was renamed for deletion
		// (<topic>-<n>.<ms>-delete, removed after deleted-log-delete-delay),
		// not found stray at a restart.
		renamed := false
		for _, line := range strings.Split(removed.log.String(), "\n") {
			renamed = renamed || (strings.Contains(line, "partition directory renamed for deletion") &&
				strings.Contains(line, fmt.Sprintf("dir=%s-%d ", topic, p)) && strings.Contains(line, "replica moved away"))
		}
		if !renamed {
			t.Errorf("broker %d's log does not say %s-%d was renamed for deletion", removed.NodeID, topic, p)
		}
	}
	checkAcked(t, c, topic, kp)
}

// assignReplicas asks (AlterPartitionReassignments) that topic's partition p
// be moved to target, failing the test if the request or the partition's
// answer is an error.
func assignReplicas(t testing.TB, ctx context.Context, adm *kadm.Client, topic string, p int32, target []int32) {
	t.Helper()
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, p, target)
	res, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		t.Fatalf("reassigning %s-%d to %v: %v", topic, p, target, err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil {
			t.Fatalf("reassigning %s-%d to %v: %v (%s)", topic, r.Partition, target, r.Err, r.ErrMessage)
		}
	}
}

// brokersOf returns the cluster's brokers with the given ids.
func (c *Cluster) brokersOf(ids []int32) []*Broker {
	out := make([]*Broker, 0, len(ids))
	for _, id := range ids {
		out = append(out, c.Broker(id))
	}
	return out
}
