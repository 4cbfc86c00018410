package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestReassignmentChaos moves replicas again and again on a four-broker
// cluster while an idempotent acks=all producer writes, and SIGKILLs a
// broker during most moves: the replica being added, one being removed, or
// the partition's leader. Every move must complete once the broker is back,
// every acknowledged record must be there once at its offset, each partition's
// final replicas must hold the same bytes, and a broker that no longer holds
// a replica must have removed its copy. make test runs 3 moves; `make chaos`
// (SEDIMENT_CHAOS_MOVES) more.
func TestReassignmentChaos(t *testing.T) {
	moves := 3
	if n, err := strconv.Atoi(os.Getenv("SEDIMENT_CHAOS_MOVES")); err == nil && n > 0 {
		moves = n
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("SEDIMENT_CHAOS_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (SEDIMENT_CHAOS_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))

	c := StartCluster(t, 4)
	adm := kadm.NewClient(c.Client(t))
	const topic = "shuffle"
	const partitions = 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	createClusterTopic(t, adm, topic, partitions, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")})
	c.WaitFullISR(t, adm, topic, 30*time.Second)
	kp := startKeyedProducer(t, c, topic)
	defer kp.stop()

	for i := 0; i < moves; i++ {
		base := kp.count()
		waitFor(t, 60*time.Second, "acknowledged writes", func() bool { return kp.count() > base+200 })
		ps := c.WaitFullISR(t, adm, topic, 120*time.Second)
		p := int32(i % partitions)
		before := ps[p]
		// A target of three of the four brokers, in a random order, that
		// differs from the current set (so a replica is added and one
		// removed).
		var target []int32
		for {
			target = []int32{1, 2, 3, 4}
			rng.Shuffle(len(target), func(a, b int) { target[a], target[b] = target[b], target[a] })
			target = target[:3]
			if !sameSet(target, before.Replicas) {
				break
			}
		}
		var added, removed int32
		for _, id := range target {
			if !slices.Contains(before.Replicas, id) {
				added = id
			}
		}
		for _, id := range before.Replicas {
			if !slices.Contains(target, id) {
				removed = id
			}
		}
		var victim *Broker
		switch i % 4 {
		case 0:
			victim = c.Broker(added)
		case 1:
			victim = c.Broker(removed)
		case 2:
			victim = c.Broker(before.Leader)
		}
		if victim != nil && victim.NodeID == int(added) {
			// Down before the move: the new replica cannot start at once.
			t.Logf("move %d: SIGKILL broker %d (the replica to add) first", i+1, victim.NodeID)
			victim.Kill()
		}
		assignReplicas(t, ctx, adm, topic, p, target)
		t.Logf("move %d: %s-%d replicas %v (leader %d) → %v (%d acknowledged so far)", i+1, topic, p, before.Replicas, before.Leader, target, kp.count())
		if victim != nil && victim.NodeID != int(added) {
			t.Logf("move %d: SIGKILL broker %d during the move", i+1, victim.NodeID)
			victim.Kill()
		}
		if victim != nil {
			base := kp.count()
			waitFor(t, 60*time.Second, "writes acknowledged while a broker is down", func() bool { return kp.count() > base+100 })
			victim.Start()
		}
		waitFor(t, 180*time.Second, fmt.Sprintf("move %d to complete", i+1), func() bool {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			ls, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {p: {}}})
			if err != nil || len(ls[topic]) > 0 {
				return false
			}
			ps, err := c.Partitions(ctx, adm, topic)
			if err != nil {
				return false
			}
			st := ps[p]
			return slices.Equal(st.Replicas, target) && len(st.ISR) == len(target) && slices.Contains(target, st.Leader)
		})
	}
	base := kp.count()
	waitFor(t, 60*time.Second, "acknowledged writes after the last move", func() bool { return kp.count() > base+200 })
	kp.stop()
	ps := c.WaitFullISR(t, adm, topic, 60*time.Second)
	for p, st := range ps {
		t.Logf("%s-%d: replicas %v, leader %d, ISR %v", topic, p, st.Replicas, st.Leader, st.ISR)
		c.WaitIdenticalReplicasOf(t, topic, p, c.brokersOf(st.Replicas), 60*time.Second)
		for id := int32(1); id <= 4; id++ {
			if slices.Contains(st.Replicas, id) {
				continue
			}
			b := c.Broker(id)
			waitFor(t, 60*time.Second, fmt.Sprintf("broker %d to delete %s-%d, which it no longer holds", id, topic, p),
				func() bool { return len(replicaLog(b, topic, p)) == 0 })
		}
	}
	checkAcked(t, c, topic, kp)
}

func sameSet(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
