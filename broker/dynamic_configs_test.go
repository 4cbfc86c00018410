package broker

import (
	"crypto/rand"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/internal/testutil"
)

// TestDynamicLogConfigs: the broker-level defaults of topic configs are
// dynamic broker configs (KIP-226), as in Kafka: set on the cluster default
// or on one broker, they become the value, the source and a synonym of
// every topic config that the topic does not set, and they take effect
// (message.max.bytes on Produce, min.insync.replicas on acks=all,
// log.segment.bytes on the open logs); deleting them brings back the
// static default. Bad values are INVALID_CONFIG, the broker's static
// settings INVALID_REQUEST, and names the broker does not know are stored
// and listed, as Kafka keeps them.
func TestDynamicLogConfigs(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	cl := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	adm := kadm.NewClient(cl)
	createTopic(t, b, "dyn", 1, nil)
	own := "3600000"
	createTopic(t, b, "own", 1, map[string]*string{"retention.ms": &own})
	id := b.cfg.NodeID

	alter := func(op kadm.IncrementalOp, name, value string, brokers ...int32) error {
		t.Helper()
		rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: op, Name: name, Value: &value}}, brokers...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(rs[0].ErrMessage, "\n") {
			t.Errorf("%s=%s: the error message spans lines: %q", name, value, rs[0].ErrMessage)
		}
		return rs[0].Err
	}
	topicConfig := func(topic, name string) kadm.Config {
		t.Helper()
		return describedConfig(t, adm, topic, name)
	}
	check := func(topic, name, want string, src kmsg.ConfigSource, synonyms ...kmsg.ConfigSource) {
		t.Helper()
		c := topicConfig(topic, name)
		if c.Value == nil || *c.Value != want || c.Source != src {
			t.Fatalf("%s %s = %v (%v), want %s (%v)", topic, name, c.Value, c.Source, want, src)
		}
		var got []kmsg.ConfigSource
		for _, s := range c.Synonyms {
			got = append(got, s.Source)
		}
		if len(got) != len(synonyms) {
			t.Fatalf("%s %s synonyms %v, want sources %v", topic, name, c.Synonyms, synonyms)
		}
		for i := range got {
			if got[i] != synonyms[i] {
				t.Fatalf("%s %s synonyms %v, want sources %v", topic, name, got, synonyms)
			}
		}
	}
	const (
		topicSrc  = kmsg.ConfigSourceDynamicTopicConfig
		brokerSrc = kmsg.ConfigSourceDynamicBrokerConfig
		defSrc    = kmsg.ConfigSourceDynamicDefaultBrokerConfig
		staticSrc = kmsg.ConfigSourceDefaultConfig
	)

	// (No static synonym: Kafka defines log.retention.ms without a default
	// of its own, configs.go's brokerUnset.)
	check("dyn", "retention.ms", "604800000", staticSrc)
	if err := alter(kadm.SetConfig, "log.retention.ms", "12345"); err != nil {
		t.Fatal(err)
	}
	check("dyn", "retention.ms", "12345", defSrc, defSrc)
	check("own", "retention.ms", own, topicSrc, topicSrc, defSrc)
	if err := alter(kadm.SetConfig, "log.retention.ms", "777", id); err != nil {
		t.Fatal(err)
	}
	check("dyn", "retention.ms", "777", brokerSrc, brokerSrc, defSrc)
	if err := alter(kadm.DeleteConfig, "log.retention.ms", "", id); err != nil {
		t.Fatal(err)
	}
	check("dyn", "retention.ms", "12345", defSrc, defSrc)
	check("dyn", "max.message.bytes", "1048588", staticSrc, staticSrc)

	// message.max.bytes: the default max.message.bytes of Produce.
	produce := func(size int) error {
		v := make([]byte, size)
		rand.Read(v) // incompressible: kgo compresses batches
		r := &kgo.Record{Topic: "dyn", Value: v}
		return cl.ProduceSync(ctx, r).FirstErr()
	}
	if err := produce(4000); err != nil {
		t.Fatal(err)
	}
	if err := alter(kadm.SetConfig, "message.max.bytes", "2000"); err != nil {
		t.Fatal(err)
	}
	if err := produce(4000); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("a 4000-byte record over a dynamic message.max.bytes of 2000: %v, want MESSAGE_TOO_LARGE", err)
	}
	if err := alter(kadm.DeleteConfig, "message.max.bytes", ""); err != nil {
		t.Fatal(err)
	}
	if err := produce(4000); err != nil {
		t.Fatalf("after the dynamic message.max.bytes was deleted: %v", err)
	}

	// min.insync.replicas: acks=all on this one broker needs 1.
	if err := alter(kadm.SetConfig, "min.insync.replicas", "2"); err != nil {
		t.Fatal(err)
	}
	acksAll := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(0), kgo.RequestRetries(0))
	if err := acksAll.ProduceSync(ctx, &kgo.Record{Topic: "dyn", Value: []byte("v")}).FirstErr(); !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all with a dynamic min.insync.replicas of 2 on one broker: %v, want NOT_ENOUGH_REPLICAS", err)
	}
	if err := alter(kadm.DeleteConfig, "min.insync.replicas", ""); err != nil {
		t.Fatal(err)
	}

	// log.segment.bytes reaches the open log.
	st := b.meta.State()
	p, err := b.store.partition(st, "dyn", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := alter(kadm.SetConfig, "log.segment.bytes", "65536"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the dynamic log.segment.bytes applied to the open log", func() bool {
		p.logConfig.Lock()
		defer p.logConfig.Unlock()
		return p.logConfig.applied.SegmentBytes == 65536
	})

	// Bad values, static settings, unknown names.
	for _, c := range []struct{ name, value string }{
		{"log.retention.ms", "soon"}, {"log.cleanup.policy", "shred"}, {"log.segment.bytes", "10"},
		{"min.insync.replicas", "0"}, {"log.message.timestamp.type", "Whenever"},
	} {
		if err := alter(kadm.SetConfig, c.name, c.value); !errors.Is(err, kerr.InvalidConfig) {
			t.Errorf("%s=%s: %v, want INVALID_CONFIG", c.name, c.value, err)
		}
	}
	for _, name := range []string{"num.partitions", "listeners", "log.dirs", "node.id", "log.retention.check.interval.ms", "queued.max.request.bytes"} {
		if err := alter(kadm.SetConfig, name, "1", id); !errors.Is(err, kerr.InvalidRequest) {
			t.Errorf("static %s: %v, want INVALID_REQUEST", name, err)
		}
	}
	if err := alter(kadm.SetConfig, "unclean.leader.election.enable", "true", id); !errors.Is(err, kerr.InvalidRequest) {
		t.Errorf("unclean.leader.election.enable on one broker: %v, want INVALID_REQUEST (cluster-wide)", err)
	}
	if err := alter(kadm.SetConfig, "sasl.kerberos.min.time.before.relogin", "58000", id); err != nil {
		t.Fatalf("a name Sediment does not use: %v, want it stored", err)
	}

	// The broker lists its dynamic values with their sources; the cluster
	// default lists what is set there.
	brokerConfigs := func(ids ...int32) map[string]kadm.Config {
		t.Helper()
		rc, err := adm.DescribeBrokerConfigs(ctx, ids...)
		if err != nil || rc[0].Err != nil {
			t.Fatalf("describe broker %v: %v %v", ids, err, rc)
		}
		m := map[string]kadm.Config{}
		for _, c := range rc[0].Configs {
			m[c.Key] = c
		}
		return m
	}
	own1 := brokerConfigs(id)
	for name, want := range map[string]struct {
		value string
		src   kmsg.ConfigSource
	}{
		"log.retention.ms":                      {"12345", defSrc},
		"log.segment.bytes":                     {"65536", defSrc},
		"message.max.bytes":                     {"1048588", kmsg.ConfigSourceStaticBrokerConfig},
		"log.cleanup.policy":                    {"delete", staticSrc},
		"sasl.kerberos.min.time.before.relogin": {"58000", brokerSrc},
		"num.partitions":                        {"1", kmsg.ConfigSourceDefaultConfig}, // not given
	} {
		c, ok := own1[name]
		if !ok || c.Value == nil || *c.Value != want.value || c.Source != want.src {
			t.Errorf("broker %d %s = %+v, want %s (%v)", id, name, c, want.value, want.src)
		}
	}
	def := brokerConfigs()
	if len(def) != 2 || def["log.retention.ms"].Value == nil || *def["log.retention.ms"].Value != "12345" || def["log.segment.bytes"].Source != defSrc {
		t.Errorf("cluster default configs %v, want log.retention.ms and log.segment.bytes", def)
	}

	// The log cleaner's settings reach the running cleaner.
	if err := alter(kadm.SetConfig, "log.cleaner.threads", "3"); err != nil {
		t.Fatal(err)
	}
	if err := alter(kadm.SetConfig, "log.cleaner.backoff.ms", "250", id); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the dynamic cleaner settings applied", func() bool {
		cc := b.cleaner.m.CleanerConfig()
		return cc.Threads == 3 && cc.Backoff == 250*time.Millisecond
	})
	own2 := brokerConfigs(id)
	if c := own2["log.cleaner.threads"]; c.Value == nil || *c.Value != "3" || c.Source != defSrc {
		t.Errorf("log.cleaner.threads %+v, want 3 from the cluster default", c)
	}
	if c := own2["log.cleaner.backoff.ms"]; c.Value == nil || *c.Value != "250" || c.Source != brokerSrc {
		t.Errorf("log.cleaner.backoff.ms %+v, want 250 from the broker", c)
	}
	if c := own2["log.cleaner.dedupe.buffer.size"]; c.Value == nil || *c.Value != "134217728" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("log.cleaner.dedupe.buffer.size %+v, want the built-in 128 MiB", c)
	}
	for _, c := range []struct{ name, value string }{
		{"log.cleaner.threads", "0"}, {"log.cleaner.threads", "65"}, {"log.cleaner.dedupe.buffer.size", "1000"},
		{"log.cleaner.io.max.bytes.per.second", "-1"}, {"log.cleaner.backoff.ms", "0"},
	} {
		if err := alter(kadm.SetConfig, c.name, c.value); !errors.Is(err, kerr.InvalidConfig) {
			t.Errorf("%s=%s: %v, want INVALID_CONFIG", c.name, c.value, err)
		}
	}
	if err := alter(kadm.DeleteConfig, "log.cleaner.threads", ""); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "log.cleaner.threads back to 1", func() bool {
		return b.cleaner.m.CleanerConfig().Threads == 1
	})

	// APPEND and SUBTRACT of the list log.cleanup.policy start from what
	// the resource falls back to (here the static "delete").
	if err := alter(kadm.AppendConfig, "log.cleanup.policy", "compact"); err != nil {
		t.Fatal(err)
	}
	check("dyn", "cleanup.policy", "delete,compact", defSrc, defSrc, staticSrc)
	if err := alter(kadm.SubtractConfig, "log.cleanup.policy", "delete"); err != nil {
		t.Fatal(err)
	}
	check("dyn", "cleanup.policy", "compact", defSrc, defSrc, staticSrc)
	if err := alter(kadm.SubtractConfig, "log.cleanup.policy", "compact"); !errors.Is(err, kerr.InvalidConfig) {
		t.Errorf("subtracting the last policy: %v, want INVALID_CONFIG (an empty list)", err)
	}
	if err := alter(kadm.AppendConfig, "log.retention.ms", "1"); !errors.Is(err, kerr.InvalidConfig) {
		t.Errorf("APPEND to a number: %v, want INVALID_CONFIG", err)
	}
}

// TestDynamicConnectionLimits: max.connections.per.ip.overrides set as a
// cluster-wide dynamic config applies to new connections at once (the
// clients here connect from 127.0.0.2, so the test's own admin client on
// 127.0.0.1 is not limited); deleting it lifts the limit. A host name in a
// dynamic override, or a negative limit, is INVALID_CONFIG.
func TestDynamicConnectionLimits(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	alter := func(op kadm.IncrementalOp, name, value string) error {
		t.Helper()
		rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: op, Name: name, Value: &value}})
		if err != nil {
			t.Fatal(err)
		}
		return rs[0].Err
	}
	from2 := func() net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
		nc, err := d.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	if err := alter(kadm.SetConfig, "max.connections.per.ip.overrides", "127.0.0.2:1"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the dynamic override applied", func() bool {
		b.limits.mu.Lock()
		defer b.limits.mu.Unlock()
		return b.limits.overrides["127.0.0.2"] == 1
	})
	if !apiVersionsOK(from2(), 1, 10*time.Second) {
		t.Fatal("the first connection from 127.0.0.2 was refused")
	}
	if apiVersionsOK(from2(), 2, 10*time.Second) {
		t.Fatal("a second connection from 127.0.0.2 was served over its dynamic override of 1")
	}
	if !apiVersionsOK(dialT(t, b.Addr()), 3, 10*time.Second) {
		t.Fatal("127.0.0.1 was limited")
	}
	if err := alter(kadm.DeleteConfig, "max.connections.per.ip.overrides", ""); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "a second connection from 127.0.0.2 once the override is gone", func() bool {
		return apiVersionsOK(from2(), 4, 10*time.Second)
	})
	for _, c := range []struct{ name, value string }{
		{"max.connections.per.ip.overrides", "localhost:3"}, {"max.connections.per.ip.overrides", "127.0.0.2"},
		{"max.connections", "-1"}, {"max.connections.per.ip", "many"},
	} {
		if err := alter(kadm.SetConfig, c.name, c.value); !errors.Is(err, kerr.InvalidConfig) {
			t.Errorf("%s=%s: %v, want INVALID_CONFIG", c.name, c.value, err)
		}
	}
}
