package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDynamicUncleanLeaderElection: unclean.leader.election.enable set
// cluster-wide at run time (IncrementalAlterConfigs on the default broker
// resource), as an operator does when a partition's only in-sync replica is
// gone for good. An RF 2 partition loses its follower (the ISR shrinks to the
// leader), then its leader as the follower returns: it has no leader, and the
// follower, out of the ISR, cannot lead it. Once the cluster default allows unclean
// elections the controller makes it leader; DescribeConfigs shows the value
// as a dynamic default, for the cluster and the topic; a broker id resource
// is refused (cluster-wide only).
func TestDynamicUncleanLeaderElection(t *testing.T) {
	c := StartCluster(t, 3)
	cl := c.Client(t)
	adm := kadm.NewClient(cl)
	const topic = "unclean"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	createClusterTopic(t, adm, topic, 1, 2, nil)
	ps := c.WaitFullISR(t, adm, topic, 30*time.Second)
	leader := c.Broker(ps[0].Leader)
	var follower, third *Broker
	for id := int32(1); id <= 3; id++ {
		switch {
		case id == ps[0].Leader:
		case slices.Contains(ps[0].Replicas, id):
			follower = c.Broker(id)
		default:
			third = c.Broker(id)
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Ask the third broker, which stays up throughout.
	watch := kadm.NewClient(third.Client(t))
	state := func() partitionState {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		ps, err := c.Partitions(ctx, watch, topic)
		if err != nil {
			return partitionState{Leader: -2}
		}
		return ps[0]
	}
	follower.Kill()
	waitFor(t, 60*time.Second, "the ISR to shrink to the leader", func() bool {
		return slices.Equal(state().ISR, []int32{int32(leader.NodeID)})
	})
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("only on the leader")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The follower comes back as the leader goes (two of three brokers
	// down would leave the metadata quorum without a majority).
	leader.Kill()
	follower.Start()
	waitFor(t, 60*time.Second, "the partition to lose its leader", func() bool { return state().Leader == -1 })
	// The active controller counts it offline (Kafka's
	// OfflinePartitionsCount), the other brokers 0.
	waitFor(t, 30*time.Second, "the active controller to count one offline partition", func() bool {
		a, b := scrape(follower), scrape(third)
		return strings.Count(a+b, "\nsediment_active_controller 1\n") == 1 &&
			strings.Count(a+b, "\nsediment_offline_partitions 1\n") == 1 && strings.Count(a+b, "\nsediment_offline_partitions 0\n") == 1
	})

	// Per broker it is refused: cluster-wide only.
	bad, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "unclean.leader.election.enable", Value: kadm.StringPtr("true")}}, int32(third.NodeID))
	if err != nil || len(bad) != 1 || bad[0].Err == nil {
		t.Fatalf("unclean election set on one broker: %+v, %v; want INVALID_REQUEST", bad, err)
	}
	if st := state(); st.Leader != -1 {
		t.Fatalf("partition led by %d with unclean election off (the returning replica was out of the ISR)", st.Leader)
	}
	res, err := watch.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "unclean.leader.election.enable", Value: kadm.StringPtr("true")}})
	if err == nil && len(res) == 1 && res[0].Err != nil {
		err = fmt.Errorf("%v (%s)", res[0].Err, res[0].ErrMessage)
	}
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "an unclean election of the returning replica", func() bool {
		st := state()
		return st.Leader == int32(follower.NodeID)
	})
	tc, err := watch.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range tc[0].Configs {
		if cfg.Key == "unclean.leader.election.enable" && (cfg.MaybeValue() != "true" || cfg.Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig) {
			t.Errorf("topic's unclean.leader.election.enable = %s (%v), want true from the dynamic cluster default", cfg.MaybeValue(), cfg.Source)
		}
	}
	// The partition serves again.
	cl2 := follower.Client(t)
	if err := cl2.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("produce after the unclean election: %v", err)
	}
	leader.Start()
	c.WaitFullISR(t, adm, topic, 60*time.Second)
}
