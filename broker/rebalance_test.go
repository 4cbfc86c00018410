package broker

import (
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// TestDescribeLeaderRebalanceConfigs: the broker's automatic leader
// rebalance settings are described under Kafka's names, with Kafka's
// defaults, and as configured (an interval in whole seconds, rounded up;
// a negative percentage is 0).
func TestDescribeLeaderRebalanceConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want map[string]string
	}{
		{"defaults", func(c *Config) {}, map[string]string{
			"auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": "300", "leader.imbalance.per.broker.percentage": "10"}},
		{"configured", func(c *Config) {
			c.DisableAutoLeaderRebalance, c.LeaderImbalanceCheckInterval, c.LeaderImbalancePerBrokerPercentage = true, 1500*time.Millisecond, -1
		}, map[string]string{
			"auto.leader.rebalance.enable": "false", "leader.imbalance.check.interval.seconds": "2", "leader.imbalance.per.broker.percentage": "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t, "", tc.mod)
			nc, err := net.Dial("tcp", b.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			req := kmsg.NewPtrDescribeConfigsRequest()
			req.SetVersion(4)
			res := kmsg.NewDescribeConfigsRequestResource()
			res.ResourceType = kmsg.ConfigResourceTypeBroker
			res.ResourceName = b.nodeName // "" would be the cluster default's dynamic configs
			for name := range tc.want {
				res.ConfigNames = append(res.ConfigNames, name)
			}
			req.Resources = append(req.Resources, res)
			resp := rawRequest(t, nc, req, 1).(*kmsg.DescribeConfigsResponse)
			got := map[string]string{}
			for _, c := range resp.Resources[0].Configs {
				if c.Value != nil {
					got[c.Name] = *c.Value
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("described %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

// TestControllerReturnsPreferredLeader: the broker's leader rebalance
// settings reach its controller. With a 100 ms leader imbalance check
// interval, a partition whose preferred replica (a second broker,
// registered by hand) rejoins the ISR gets it back as leader with no
// ElectLeaders request (TestElectLeaders, at the default 300 s, gets no
// such return before its own election).
func TestControllerReturnsPreferredLeader(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.LeaderImbalanceCheckInterval = 100 * time.Millisecond })
	ctx := testCtx(t)
	propose := func(cmd metadata.Command) metadata.Result { t.Helper(); return mustPropose(t, b, cmd) }
	self := b.cfg.NodeID
	// waitState waits until the applied state satisfies ok.
	waitState := func(what string, ok func(*metadata.State) bool) {
		t.Helper()
		for st := b.meta.State(); !ok(st); {
			var err error
			if st, err = b.meta.WaitForVersion(ctx, st.Version+1); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
	}
	waitState("this broker unfenced", func(st *metadata.State) bool {
		br, ok := st.Broker(self)
		return ok && !br.Fenced
	})
	// Broker self+1 is registered and fenced: the topic it prefers is led
	// by this broker.
	reg := propose(&metadata.RegisterBroker{BrokerID: self + 1, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1,
		Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 1}}})
	id := propose(&metadata.CreateTopic{Name: "returns", Assignment: [][]int32{{self + 1, self}}}).TopicID
	if p, _ := b.meta.State().Partition(id, 0); p.Leader != self {
		t.Fatalf("leader %d, want %d while the preferred replica is fenced", p.Leader, self)
	}
	// It comes back and catches up (its session lasts 9 s from here).
	propose(&metadata.BrokerHeartbeat{BrokerID: self + 1, BrokerEpoch: reg.BrokerEpoch})
	p, _ := b.meta.State().Partition(id, 0)
	propose(&metadata.ChangeLeaderAndISR{TopicID: id, Partition: 0, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
		Leader: p.Leader, ISR: []int32{self, self + 1}})
	waitState("the preferred replica leading again", func(st *metadata.State) bool {
		p, _ := st.Partition(id, 0)
		return p.Leader == self+1
	})
}
