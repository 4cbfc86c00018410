package e2e

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestReplicationThrottle: the replication throttles kafka-reassign-partitions
// --throttle sets (KIP-73). A partition of 16 MiB on one broker gets a second
// replica by AlterPartitionAssignments, once with the leader side throttled
// (leader.replication.throttled.rate as the cluster default, the leader named
// in leader.replication.throttled.replicas) and once with the follower side
// (follower.replication.throttled.rate on the new broker only, named in
// follower.replication.throttled.replicas). Each time the catch-up may not
// beat the rate (a burst of one second and one replica fetch of 4 MiB
// allowed), the broker's metrics show the throttle leaving the partition out
// of fetches, and once the replica is in the ISR it is no longer throttled.
// DescribeConfigs shows the rates with their sources; static broker configs
// and bad values are refused.
func TestReplicationThrottle(t *testing.T) {
	c := StartCluster(t, 3)
	adm := kadm.NewClient(c.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const rate = 2 << 20 // bytes per second
	const size = 16 << 20

	// Bad input first.
	bad := func(what string, res kmsg.ConfigResourceType, name, key, value string, code int16) {
		t.Helper()
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = res, name
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Value = key, kmsg.StringPtr(value)
		r.Configs = append(r.Configs, cfg)
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, c.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Resources[0].ErrorCode; got != code {
			t.Errorf("%s: error %d (%v), want %d", what, got, resp.Resources[0].ErrorMessage, code)
		}
	}
	bad("a static broker config", kmsg.ConfigResourceTypeBroker, "", "num.partitions", "3", 42)              // INVALID_REQUEST
	bad("a negative rate", kmsg.ConfigResourceTypeBroker, "", "leader.replication.throttled.rate", "-1", 40) // INVALID_CONFIG
	bad("a broker resource that is no id", kmsg.ConfigResourceTypeBroker, "x", "leader.replication.throttled.rate", "1", 40)

	type step struct {
		topic     string
		side      string // leader or follower
		configure func(leader, added int32)
	}
	alterBroker := func(name, key, value string) {
		t.Helper()
		var resp kadm.AlterConfigsResponses
		var err error
		if name == "" {
			resp, err = adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: kadm.StringPtr(value)}})
		} else {
			id, _ := strconv.Atoi(name)
			resp, err = adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: kadm.StringPtr(value)}}, int32(id))
		}
		if err == nil {
			for _, r := range resp {
				if r.Err != nil {
					err = fmt.Errorf("%v (%s)", r.Err, r.ErrMessage)
				}
			}
		}
		if err != nil {
			t.Fatalf("setting %s=%s on broker resource %q: %v", key, value, name, err)
		}
	}
	alterTopic := func(topic, key, value string) {
		t.Helper()
		resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: kadm.StringPtr(value)}}, topic)
		if err == nil {
			for _, r := range resp {
				if r.Err != nil {
					err = fmt.Errorf("%v (%s)", r.Err, r.ErrMessage)
				}
			}
		}
		if err != nil {
			t.Fatalf("setting %s=%s on topic %s: %v", key, value, topic, err)
		}
	}
	var followerBroker int32 // the second step's new replica
	steps := []step{
		{topic: "throttled-leader", side: "leader", configure: func(leader, added int32) {
			alterBroker("", "leader.replication.throttled.rate", strconv.Itoa(rate))
			alterTopic("throttled-leader", "leader.replication.throttled.replicas", fmt.Sprintf("0:%d", leader))
		}},
		{topic: "throttled-follower", side: "follower", configure: func(leader, added int32) {
			// The leader side off again (a cluster default of Long.MAX).
			alterBroker("", "leader.replication.throttled.rate", "9223372036854775807")
			followerBroker = added
			alterBroker(strconv.Itoa(int(added)), "follower.replication.throttled.rate", strconv.Itoa(rate))
			alterTopic("throttled-follower", "follower.replication.throttled.replicas", "*")
		}},
	}
	for _, s := range steps {
		createClusterTopic(t, adm, s.topic, 1, 1, nil)
		st := c.WaitFullISR(t, adm, s.topic, 30*time.Second)[0]
		leader := st.Leader
		added := leader%3 + 1
		// 16 MiB of 64 KiB records, acknowledged by the leader.
		cl := c.Client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()))
		record := func() *kgo.Record {
			value := make([]byte, 64<<10)
			crand.Read(value)
			return &kgo.Record{Topic: s.topic, Value: value}
		}
		for range size / (64 << 10) {
			cl.Produce(ctx, record(), nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		s.configure(leader, added)
		measured := c.Broker(leader)
		if s.side == "follower" {
			measured = c.Broker(added)
		}
		skips0 := metricValue(t, measured, "sediment_replication_throttled_skips_total", s.side)
		bytes0 := metricValue(t, measured, "sediment_replication_throttled_bytes_total", s.side)

		start := time.Now()
		assignReplicas(t, ctx, adm, s.topic, 0, []int32{leader, added})
		waitFor(t, 120*time.Second, fmt.Sprintf("broker %d to join the ISR of %s-0", added, s.topic), func() bool {
			ps, err := c.Partitions(ctx, adm, s.topic)
			return err == nil && slices.Contains(ps[0].ISR, added)
		})
		took := time.Since(start)
		floor := time.Duration(float64(size-rate-4<<20) / rate * float64(time.Second))
		t.Logf("%s side throttled at %d B/s: %d MiB caught up in %v (no faster than %v allowed)", s.side, rate, size>>20, took, floor)
		if took < floor {
			t.Errorf("%s side: the new replica caught up in %v, faster than the throttle allows (%v)", s.side, took, floor)
		}
		skips := metricValue(t, measured, "sediment_replication_throttled_skips_total", s.side) - skips0
		throttled := metricValue(t, measured, "sediment_replication_throttled_bytes_total", s.side) - bytes0
		if skips == 0 || throttled < size {
			t.Errorf("%s side: broker %d's metrics: %v skips, %v throttled bytes (want > 0 and >= %d)", s.side, measured.NodeID, skips, throttled, size)
		}
		// In the ISR the replica is not throttled: more writes add no
		// throttled bytes.
		for range 16 {
			cl.Produce(ctx, record(), nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		c.WaitIdenticalReplicasOf(t, s.topic, 0, []*Broker{c.Broker(leader), c.Broker(added)}, 60*time.Second)
		if after := metricValue(t, measured, "sediment_replication_throttled_bytes_total", s.side) - bytes0; after != throttled {
			t.Errorf("%s side: %v throttled bytes after the replica joined the ISR, %v before", s.side, after, throttled)
		}
	}

	// DescribeConfigs: the follower rate set on the second step's new
	// broker, the leader rate as the cluster default (Long.MAX) elsewhere.
	describeRate := func(key string, brokers ...int32) (string, kmsg.ConfigSource) {
		t.Helper()
		rc, err := adm.DescribeBrokerConfigs(ctx, brokers...)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rc {
			for _, cfg := range r.Configs {
				if cfg.Key == key {
					return cfg.MaybeValue(), cfg.Source
				}
			}
		}
		t.Fatalf("DescribeConfigs of brokers %v lists no %s", brokers, key)
		return "", 0
	}
	if v, src := describeRate("leader.replication.throttled.rate"); v != "9223372036854775807" || src != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
		t.Errorf("cluster default leader.replication.throttled.rate=%s (%v), want Long.MAX, DYNAMIC_DEFAULT_BROKER_CONFIG", v, src)
	}
	if v, src := describeRate("follower.replication.throttled.rate", followerBroker); v != strconv.Itoa(rate) || src != kmsg.ConfigSourceDynamicBrokerConfig {
		t.Errorf("broker %d: follower.replication.throttled.rate=%s (%v), want %d, DYNAMIC_BROKER_CONFIG", followerBroker, v, src, rate)
	}
	alterBroker(strconv.Itoa(int(followerBroker)), "follower.replication.throttled.rate", "9223372036854775807")

	// The same through the command line: sediment topic reassign
	// --throttle sets the four configs, waits for the move and removes
	// them; reassignments lists nothing left; bad arguments are refused.
	{
		const topic = "moved-by-cli"
		createClusterTopic(t, adm, topic, 1, 1, nil)
		leader := c.WaitFullISR(t, adm, topic, 30*time.Second)[0].Leader
		added := leader%3 + 1
		cl := c.Client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()))
		for range (8 << 20) / (64 << 10) {
			value := make([]byte, 64<<10)
			crand.Read(value)
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: value}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		b := c.Broker(leader)
		bytes0 := metricValue(t, b, "sediment_replication_throttled_bytes_total", "leader")
		for _, args := range [][]string{
			{"topic", "reassign", topic, "0=1,1"},
			{"topic", "reassign", topic, "x=1"},
			{"topic", "reassign", topic},
			{"topic", "reassign", topic, "7=1,2"},
			{"topic", "reassign", topic, "0=1,2", "--cancel", "0"},
		} {
			if r := b.sedimentMayFail(t, "", args...); r.Err == nil {
				t.Errorf("sediment %v succeeded: %s", args, r.Stdout)
			}
		}
		r := b.sediment(t, "", "topic", "reassign", topic, fmt.Sprintf("0=%d,%d", leader, added), "--throttle", strconv.Itoa(rate))
		t.Logf("sediment topic reassign:\n%s", r.Stdout)
		for _, want := range []string{"throttled the moving replicas to 2097152 bytes/s", fmt.Sprintf("%s-0: done, replicas %d,%d", topic, leader, added), "removed the throttles"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("sediment topic reassign printed no %q", want)
			}
		}
		if got := metricValue(t, b, "sediment_replication_throttled_bytes_total", "leader") - bytes0; got < 8<<20 {
			t.Errorf("the CLI's move: %v throttled bytes on the leader, want at least 8 MiB", got)
		}
		tc, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, cfg := range tc[0].Configs {
			if strings.Contains(cfg.Key, "throttled") && cfg.Source == kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("after the move %s is still set: %v", cfg.Key, cfg.MaybeValue())
			}
		}
		if r := b.sediment(t, "", "topic", "reassignments"); !strings.Contains(r.Stdout, "no reassignment in progress") {
			t.Errorf("sediment topic reassignments: %s", r.Stdout)
		}
		// (A broker's configs: the cluster default's list only what is
		// set there, as Kafka's.)
		if v, src := describeRate("leader.replication.throttled.rate", 1); v != "9223372036854775807" || src != kmsg.ConfigSourceDefaultConfig {
			t.Errorf("after the CLI's move: leader.replication.throttled.rate=%s (%v), want the default again", v, src)
		}
	}

}

// metricValue is the value of a counter with one label side="…" on the
// broker's /metrics (0 if absent).
func metricValue(t testing.TB, b *Broker, name, side string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + name + `\{side="` + side + `"\} (\S+)$`)
	m := re.FindStringSubmatch(scrape(b))
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}
