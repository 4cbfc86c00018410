package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// statusRow finds a broker's line in `sediment cluster status` (BROKER
// ADDRESS STATE REACHABLE VOTER); nil if it is not listed.
func statusRow(out, id string) []string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[0] == id {
			return f
		}
	}
	return nil
}

// TestUnregisterBroker: decommissioning as an operator does it on a
// 3-broker cluster (`sediment cluster unregister`, Kafka's UnregisterBroker):
// a broker shut down for good is listed fenced until it is unregistered,
// then no more; unregistering it again, or an id never registered, is
// refused; a broker unregistered while it runs (the metadata quorum's
// leader) is out of the cluster until it restarts, and Metadata names
// another broker as the controller meanwhile; both come back when started.
func TestUnregisterBroker(t *testing.T) {
	t.Parallel() // see TestMain
	c := StartCluster(t, 3)
	b1, b2, b3 := c.Brokers[0], c.Brokers[1], c.Brokers[2]
	b1.CreateTopic(t, "decommission", 3, nil)
	status := func() string { return b1.sediment(t, "", "cluster", "status").Stdout }

	if err := b3.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "broker 3 listed fenced", func() bool {
		f := statusRow(status(), "3")
		return f != nil && f[2] == "fenced"
	})
	out := b1.sediment(t, "", "cluster", "unregister", "--id", "3").Stdout
	if !strings.Contains(out, "broker 3 unregistered") {
		t.Fatalf("unregister: %q", out)
	}
	if out := status(); statusRow(out, "3") != nil || statusRow(out, "1") == nil {
		t.Fatalf("status after unregistering broker 3:\n%s", out)
	}
	// Metadata reports broker 3's replicas offline (v5+), as Kafka does for
	// a replica on a fenced or unregistered broker.
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("decommission")
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(context.Background(), b1.Client(t))
	if err != nil || len(mresp.Topics) != 1 {
		t.Fatalf("metadata: %v", err)
	}
	for _, p := range mresp.Topics[0].Partitions {
		if !slices.Contains(p.Replicas, 3) {
			continue
		}
		if !slices.Equal(p.OfflineReplicas, []int32{3}) || slices.Contains(p.ISR, 3) && len(p.ISR) > 1 {
			t.Errorf("partition %d: replicas %v ISR %v offline %v, want broker 3 offline and out of the ISR", p.Partition, p.Replicas, p.ISR, p.OfflineReplicas)
		}
	}
	for _, id := range []string{"3", "42"} {
		r := b2.sedimentMayFail(t, "", "cluster", "unregister", "--id", id)
		if r.Err == nil || !strings.Contains(r.Stderr, "BROKER_ID_NOT_REGISTERED") {
			t.Fatalf("unregister --id %s again: %v\n%s%s", id, r.Err, r.Stdout, r.Stderr)
		}
	}

	// A live broker unregistered by mistake leaves the cluster (its
	// heartbeats are refused) until its next start. Take the metadata
	// quorum's leader: Metadata must then name another, listed broker as
	// the controller, or clients that send it admin requests would wait
	// for an address they never learn.
	var leader string
	for _, line := range strings.Split(status(), "\n") {
		if v, ok := strings.CutPrefix(line, "controller: "); ok {
			leader = strings.TrimSpace(v)
		}
	}
	if leader != "1" && leader != "2" {
		t.Fatalf("controller %q, want broker 1 or 2:\n%s", leader, status())
	}
	live := c.Brokers[0]
	if leader == "2" {
		live = b2
	}
	b1.sediment(t, "", "cluster", "unregister", "--id", leader)
	if statusRow(status(), leader) != nil {
		t.Fatalf("broker %s still listed after unregistering it:\n%s", leader, status())
	}
	for _, b := range []*Broker{b1, b2} {
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(context.Background(), b.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		listed := false
		for _, br := range resp.Brokers {
			listed = listed || br.NodeID == resp.ControllerID
		}
		if !listed || fmt.Sprint(resp.ControllerID) == leader {
			t.Errorf("broker %s names controller %d, not a listed broker (%+v)", b.Addr, resp.ControllerID, resp.Brokers)
		}
	}
	if err := live.Stop(); err != nil {
		t.Fatal(err)
	}
	live.Start()
	b3.Start()
	waitFor(t, 60*time.Second, "brokers 1, 2 and 3 registered and active again", func() bool {
		out := status()
		for _, id := range []string{"1", "2", "3"} {
			if f := statusRow(out, id); f == nil || f[2] != "active" {
				return false
			}
		}
		return true
	})
	// The cluster still serves the topic from every broker.
	b3.CreateTopic(t, "after-decommission", 3, nil)
}
