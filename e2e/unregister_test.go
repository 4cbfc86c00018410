package e2e

import (
	"context"
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
// refused; a broker unregistered while it runs is out of the cluster until
// it restarts, and both come back when started.
func TestUnregisterBroker(t *testing.T) {
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
	// heartbeats are refused) until its next start.
	b1.sediment(t, "", "cluster", "unregister", "--id", "2")
	if statusRow(status(), "2") != nil {
		t.Fatalf("broker 2 still listed after unregistering it:\n%s", status())
	}
	if err := b2.Stop(); err != nil {
		t.Fatal(err)
	}
	b2.Start()
	b3.Start()
	waitFor(t, 60*time.Second, "brokers 2 and 3 registered and active again", func() bool {
		out := status()
		f2, f3 := statusRow(out, "2"), statusRow(out, "3")
		return f2 != nil && f3 != nil && f2[2] == "active" && f3[2] == "active"
	})
	// The cluster still serves the topic from every broker.
	b3.CreateTopic(t, "after-decommission", 3, nil)
}
