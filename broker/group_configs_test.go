package broker

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/group"
)

// TestGroupConfigs: Kafka 4.0's GROUP config resource. A group's
// consumer.heartbeat.interval.ms is set before the group exists, shown by
// DescribeConfigs with its source, and told to its KIP-848 members; another
// group keeps the broker default; out-of-range values, unknown names and a
// heartbeat not below the session timeout are INVALID_CONFIG; DELETE goes
// back to the default.
func TestGroupConfigs(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.Groups = group.Config{Partitions: 4, InitialRebalanceDelay: 100 * time.Millisecond}
	})
	createTopic(t, b, "gc", 1, nil)
	cl := newClient(t, b)
	ctx := testCtx(t)
	alter := func(groupID string, op kmsg.IncrementalAlterConfigOp, name, value string) int16 {
		t.Helper()
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, groupID
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op = name, op
		if op == kmsg.IncrementalAlterConfigOpSet {
			c.Value = kmsg.StringPtr(value)
		}
		r.Configs = append(r.Configs, c)
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Resources[0].ErrorCode
	}
	describe := func(groupID string) map[string]kmsg.DescribeConfigsResponseResourceConfig {
		t.Helper()
		req := kmsg.NewPtrDescribeConfigsRequest()
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, groupID
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("describe group %s: %v %+v", groupID, err, resp)
		}
		out := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
		for _, c := range resp.Resources[0].Configs {
			out[c.Name] = c
		}
		return out
	}
	heartbeat := func(groupID string) int32 {
		t.Helper()
		hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		hb.Group, hb.MemberID, hb.MemberEpoch = groupID, "m-"+groupID, 0
		hb.RebalanceTimeoutMillis = 10000
		hb.SubscribedTopicNames = []string{"gc"}
		hb.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		resp, err := hb.RequestWith(ctx, cl)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("heartbeat to %s: %v %+v", groupID, err, resp)
		}
		return resp.HeartbeatIntervalMillis
	}

	for _, bad := range []struct{ name, value string }{
		{"consumer.heartbeat.interval.ms", "1000"},  // below 5 s
		{"consumer.heartbeat.interval.ms", "16000"}, // above 15 s
		{"consumer.session.timeout.ms", "61000"},
		{"consumer.session.timeout.ms", "x"},
		{"share.record.lock.duration.ms", "500"}, // below 1 s
		{"share.auto.offset.reset", "middle"},
		{"share.heartbeat.interval.ms", "4000"},
		{"no.such.config", "1"},
	} {
		if code := alter("g1", kmsg.IncrementalAlterConfigOpSet, bad.name, bad.value); code != kerr.InvalidConfig.Code {
			t.Errorf("%s=%s: %v, want INVALID_CONFIG", bad.name, bad.value, kerr.ErrorForCode(code))
		}
	}
	if code := alter("g1", kmsg.IncrementalAlterConfigOpSet, "consumer.heartbeat.interval.ms", "7000"); code != 0 {
		t.Fatalf("heartbeat interval 7000: %v", kerr.ErrorForCode(code))
	}
	got := describe("g1")
	if c := got["consumer.heartbeat.interval.ms"]; c.Value == nil || *c.Value != "7000" || c.Source != kmsg.ConfigSourceGroupConfig {
		t.Errorf("g1 heartbeat interval: %+v, want 7000 from the group config", c)
	}
	if c := got["consumer.session.timeout.ms"]; c.Value == nil || *c.Value != "45000" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("g1 session timeout: %+v, want the default 45000", c)
	}
	if c := got["share.auto.offset.reset"]; c.Value == nil || *c.Value != "latest" || c.Source != kmsg.ConfigSourceDefaultConfig || c.ConfigType != kmsg.ConfigTypeString {
		t.Errorf("g1 share.auto.offset.reset: %+v, want the default latest", c)
	}
	if code := alter("g1", kmsg.IncrementalAlterConfigOpSet, "share.auto.offset.reset", "EARLIEST"); code != 0 {
		t.Fatalf("share.auto.offset.reset=EARLIEST: %v", kerr.ErrorForCode(code))
	}
	if c := describe("g1")["share.auto.offset.reset"]; c.Value == nil || *c.Value != "earliest" || c.Source != kmsg.ConfigSourceGroupConfig {
		t.Errorf("g1 share.auto.offset.reset: %+v, want earliest from the group config", c)
	}
	if c := describe("g2")["consumer.heartbeat.interval.ms"]; c.Value == nil || *c.Value != "5000" {
		t.Errorf("g2 heartbeat interval: %+v, want the default 5000", c)
	}
	if ms := heartbeat("g1"); ms != 7000 {
		t.Errorf("g1's member told to heartbeat every %d ms, want 7000", ms)
	}
	if ms := heartbeat("g2"); ms != 5000 {
		t.Errorf("g2's member told to heartbeat every %d ms, want 5000", ms)
	}
	if code := alter("g1", kmsg.IncrementalAlterConfigOpSet, "consumer.session.timeout.ms", "45000"); code != 0 {
		t.Fatalf("session timeout 45000: %v", kerr.ErrorForCode(code))
	}
	if code := alter("g2", kmsg.IncrementalAlterConfigOpSet, "consumer.heartbeat.interval.ms", "15000"); code != 0 {
		t.Fatalf("heartbeat interval 15000 under a 45 s session: %v", kerr.ErrorForCode(code))
	}
	if code := alter("g1", kmsg.IncrementalAlterConfigOpDelete, "consumer.heartbeat.interval.ms", ""); code != 0 {
		t.Fatalf("delete: %v", kerr.ErrorForCode(code))
	}
	if c := describe("g1")["consumer.heartbeat.interval.ms"]; c.Value == nil || *c.Value != "5000" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("g1 heartbeat interval after DELETE: %+v, want the default", c)
	}
}
