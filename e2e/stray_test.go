package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReplicationStrayAfterRestart: a broker that was down while one of its
// replicas was moved away (AlterPartitionReassignments) and while a topic it
// held was deleted and re-created under the same name finds those partition
// directories stray when it restarts (docs/replication.md, "Stray partition
// directories"): it renames them once it has caught up with the metadata
// log and deletes them after stray-log-delete-delay, while the partitions it
// still replicates keep their files (the same segment file, caught up, not
// re-fetched). Every acknowledged record is read back from the new replicas.
func TestReplicationStrayAfterRestart(t *testing.T) {
	t.Parallel() // see TestMain
	c := StartCluster(t, 3, "--stray-log-delete-delay", "2s")
	adm := kadm.NewClient(c.Client(t))
	const topic, reborn = "strays", "reborn"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	create := func(name string, partitions int32, rf int16) {
		t.Helper()
		resp, err := adm.CreateTopic(ctx, partitions, rf, nil, name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
	}
	create(topic, 3, 2)
	create(reborn, 1, 3)
	before := c.WaitFullISR(t, adm, topic, 30*time.Second)
	c.WaitFullISR(t, adm, reborn, 30*time.Second)
	kp := startKeyedProducer(t, c, topic)
	defer kp.stop()
	waitFor(t, 60*time.Second, "acknowledged writes", func() bool { return kp.count() > 300 })
	rcl := c.Client(t, kgo.RequiredAcks(kgo.AllISRAcks()))
	for i := range 20 {
		if err := rcl.ProduceSync(ctx, &kgo.Record{Topic: reborn, Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// X: a broker with two partitions of the topic; P moves away from it
	// while it is down, Q stays.
	var x *Broker
	var p, q int32 = -1, -1
	for id := int32(1); id <= 3 && x == nil; id++ {
		var mine []int32
		for part := int32(0); part < 3; part++ {
			if slices.Contains(before[part].Replicas, id) {
				mine = append(mine, part)
			}
		}
		if len(mine) >= 2 {
			x, p, q = c.Broker(id), mine[0], mine[1]
		}
	}
	if x == nil {
		t.Fatalf("no broker holds two partitions: %+v", before)
	}
	xid := int32(x.NodeID)
	var target []int32
	for _, r := range before[p].Replicas {
		if r != xid {
			target = append(target, r)
		}
	}
	for id := int32(1); id <= 3; id++ {
		if !slices.Contains(before[p].Replicas, id) {
			target = append(target, id)
		}
	}
	dirOf := func(b *Broker, name string, part int32) string {
		return filepath.Join(b.DataDir, "logs", fmt.Sprintf("%s-%d", name, part))
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("broker %d to hold records of %s-%d and %s-0", xid, topic, p, reborn), func() bool {
		return len(replicaLog(x, topic, p)) > 0 && len(replicaLog(x, topic, q)) > 0 && len(replicaLog(x, reborn, 0)) > 0
	})
	rebornOldID, err := os.ReadFile(filepath.Join(dirOf(x, reborn, 0), "topic_id"))
	if err != nil {
		t.Fatal(err)
	}
	firstSegment := func(dir string) (os.FileInfo, error) {
		names, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		if len(names) == 0 {
			return nil, fmt.Errorf("no segment in %s", dir)
		}
		slices.Sort(names)
		return os.Stat(names[0])
	}
	qSegment, err := firstSegment(dirOf(x, topic, q))
	if err != nil {
		t.Fatal(err)
	}

	if err := x.Stop(); err != nil {
		t.Fatalf("stopping broker %d: %v", xid, err)
	}
	t.Logf("broker %d stopped; %s-%d: %v → %v while it is down; %s-%d stays", xid, topic, p, before[p].Replicas, target, topic, q)
	assignReplicas(t, ctx, adm, topic, p, target)
	waitFor(t, 90*time.Second, "the reassignment to complete", func() bool {
		ls, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {p: {}}})
		if err != nil || len(ls[topic]) > 0 {
			return false
		}
		ps, err := c.Partitions(ctx, adm, topic)
		return err == nil && slices.Equal(ps[p].Replicas, target) && len(ps[p].ISR) == len(target)
	})
	// The other topic is deleted and re-created under the same name.
	if _, err := adm.DeleteTopics(ctx, reborn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, reborn+" to be re-created", func() bool {
		resp, err := adm.CreateTopic(ctx, 1, 2, nil, reborn)
		return err == nil && resp.Err == nil
	})
	base := kp.count()
	waitFor(t, 60*time.Second, "writes acknowledged while the broker is down", func() bool { return kp.count() > base+200 })

	x.Start()
	waitFor(t, 60*time.Second, fmt.Sprintf("broker %d to drop its directory of %s-%d", xid, topic, p), func() bool {
		_, err := os.Stat(dirOf(x, topic, p))
		return os.IsNotExist(err)
	})
	for _, want := range []string{fmt.Sprintf("%s-%d", topic, p), reborn + "-0"} {
		found := false
		for _, line := range strings.Split(x.Log(), "\n") {
			if strings.Contains(line, "stray partition directory renamed") && strings.Contains(line, "dir="+want+" ") {
				found = true
				t.Logf("broker %d: %s", xid, line)
			}
		}
		if !found {
			t.Errorf("broker %d's log does not say %s was renamed as stray", xid, want)
		}
	}
	// Its reborn-0 is gone or belongs to the new topic (if it was placed
	// on this broker again).
	if raw, err := os.ReadFile(filepath.Join(dirOf(x, reborn, 0), "topic_id")); err == nil && bytes.Equal(raw, rebornOldID) {
		t.Errorf("broker %d still has the deleted %s's directory", xid, reborn)
	}
	waitFor(t, 60*time.Second, "the renamed stray directories to be deleted", func() bool {
		ents, err := os.ReadDir(filepath.Join(x.DataDir, "logs"))
		if err != nil {
			return false
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), "-stray") {
				return false
			}
		}
		return true
	})

	base = kp.count()
	waitFor(t, 60*time.Second, "writes acknowledged after the restart", func() bool { return kp.count() > base+200 })
	kp.stop()
	ps := c.WaitFullISR(t, adm, topic, 60*time.Second)
	// Q is untouched: the same first segment file, caught up with the
	// other replica.
	if got, err := firstSegment(dirOf(x, topic, q)); err != nil || !os.SameFile(got, qSegment) {
		t.Errorf("broker %d's %s-%d was replaced: %v", xid, topic, q, err)
	}
	for part, st := range ps {
		c.WaitIdenticalReplicasOf(t, topic, part, c.brokersOf(st.Replicas), 60*time.Second)
	}
	if !slices.Equal(ps[p].Replicas, target) || !slices.Contains(ps[q].Replicas, xid) {
		t.Fatalf("replicas after the restart: %+v", ps)
	}
	if _, err := os.Stat(dirOf(x, topic, p)); !os.IsNotExist(err) {
		t.Errorf("broker %d has %s-%d again: %v", xid, topic, p, err)
	}
	checkAcked(t, c, topic, kp)
}
