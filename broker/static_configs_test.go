package broker

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestStaticBrokerConfigSource: a topic config whose default comes from one
// of the broker's own settings that the operator gave (--log-retention-ms,
// a YAML key, a variable: Config.StaticConfigs, or a value other than the
// built-in default) is described, as by Kafka for a value in
// server.properties, with the source STATIC_BROKER_CONFIG and that setting
// as a STATIC_BROKER_CONFIG synonym, under a topic's own value or a dynamic
// broker config; one the operator left alone stays DEFAULT_CONFIG. It was
// DEFAULT_CONFIG in every case, so `sediment topic describe --all-configs`
// never showed "broker config file".
func TestStaticBrokerConfigSource(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.LogRetentionMs = 1000000
		c.LogSegmentDeleteDelay = 5 * time.Second
		c.StaticConfigs = map[string]bool{"message.max.bytes": true} // given, at its default
	})
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	createTopic(t, b, "plain", 1, nil)
	own := "3600000"
	createTopic(t, b, "own", 1, map[string]*string{"retention.ms": &own})

	const (
		topicSrc  = kmsg.ConfigSourceDynamicTopicConfig
		defSrc    = kmsg.ConfigSourceDynamicDefaultBrokerConfig
		staticSrc = kmsg.ConfigSourceStaticBrokerConfig
		builtin   = kmsg.ConfigSourceDefaultConfig
	)
	type syn struct {
		name, value string
		src         kmsg.ConfigSource
	}
	check := func(topic, name, want string, src kmsg.ConfigSource, synonyms ...syn) {
		t.Helper()
		c := describedConfig(t, adm, topic, name)
		if c.Value == nil || *c.Value != want || c.Source != src {
			t.Errorf("%s %s = %v (%v), want %s (%v)", topic, name, c.MaybeValue(), c.Source, want, src)
		}
		if len(c.Synonyms) != len(synonyms) {
			t.Errorf("%s %s synonyms %+v, want %+v", topic, name, c.Synonyms, synonyms)
			return
		}
		for i, s := range c.Synonyms {
			if s.Key != synonyms[i].name || s.Value == nil || *s.Value != synonyms[i].value || s.Source != synonyms[i].src {
				v := "(null)"
				if s.Value != nil {
					v = *s.Value
				}
				t.Errorf("%s %s synonym %d: %s=%s (%v), want %+v", topic, name, i, s.Key, v, s.Source, synonyms[i])
			}
		}
	}

	check("plain", "retention.ms", "1000000", staticSrc, syn{"log.retention.ms", "1000000", staticSrc})
	check("plain", "file.delete.delay.ms", "5000", staticSrc, syn{"log.segment.delete.delay.ms", "5000", staticSrc})
	check("plain", "max.message.bytes", "1048588", staticSrc, syn{"message.max.bytes", "1048588", staticSrc})
	check("plain", "segment.bytes", "1073741824", builtin, syn{"log.segment.bytes", "1073741824", builtin})
	check("plain", "cleanup.policy", "delete", builtin, syn{"log.cleanup.policy", "delete", builtin})
	check("own", "retention.ms", own, topicSrc, syn{"retention.ms", own, topicSrc}, syn{"log.retention.ms", "1000000", staticSrc})

	// A dynamic cluster default comes first; the static setting stays its
	// synonym, and is the value again once the dynamic one is deleted.
	alter := func(op kadm.IncrementalOp, value string) {
		t.Helper()
		rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: op, Name: "log.retention.ms", Value: &value}})
		if err == nil {
			err = rs[0].Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	alter(kadm.SetConfig, "12345")
	check("plain", "retention.ms", "12345", defSrc, syn{"log.retention.ms", "12345", defSrc}, syn{"log.retention.ms", "1000000", staticSrc})
	alter(kadm.DeleteConfig, "")
	check("plain", "retention.ms", "1000000", staticSrc, syn{"log.retention.ms", "1000000", staticSrc})

	// A broker left at the built-in defaults: DEFAULT_CONFIG (and, as
	// Kafka, no synonym for log.retention.ms, which has no default of
	// its own there).
	d := startBroker(t, "")
	dadm := kadm.NewClient(newClient(t, d))
	createTopic(t, d, "plain", 1, nil)
	if c := describedConfig(t, dadm, "plain", "retention.ms"); c.MaybeValue() != "604800000" || c.Source != builtin || len(c.Synonyms) != 0 {
		t.Errorf("default broker: retention.ms %s (%v) synonyms %+v, want 604800000 (DEFAULT_CONFIG) and none", c.MaybeValue(), c.Source, c.Synonyms)
	}
	if c := describedConfig(t, dadm, "plain", "max.message.bytes"); c.Source != builtin {
		t.Errorf("default broker: max.message.bytes from %v, want DEFAULT_CONFIG", c.Source)
	}
}

// TestBrokerConfigSources: a broker's own settings are described with
// Kafka's sources: STATIC_BROKER_CONFIG for those the operator gave
// (Config.StaticConfigs, even at their default) or that differ from the
// built-in default, and for the per-broker ones Kafka requires in
// server.properties (node.id, listeners); DEFAULT_CONFIG for the rest. They
// were all STATIC_BROKER_CONFIG. The listeners, their protocols and the
// advertised addresses (the bound port) are listed, as Kafka lists them.
func TestBrokerConfigSources(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.ReplicaLagTimeMax = 7 * time.Second
		c.StaticConfigs = map[string]bool{"num.partitions": true, "log.cleaner.threads": true}
	})
	rc, err := kadm.NewClient(newClient(t, b)).DescribeBrokerConfigs(testCtx(t), b.cfg.NodeID)
	if err != nil || rc[0].Err != nil {
		t.Fatalf("describe broker: %v %v", err, rc)
	}
	got := map[string]kadm.Config{}
	for _, c := range rc[0].Configs {
		got[c.Key] = c
	}
	static, def := kmsg.ConfigSourceStaticBrokerConfig, kmsg.ConfigSourceDefaultConfig
	for name, want := range map[string]struct {
		value string
		src   kmsg.ConfigSource
	}{
		"num.partitions":                   {"1", static}, // given, at its default
		"log.cleaner.threads":              {"1", static},
		"replica.lag.time.max.ms":          {"7000", static}, // not the default
		"default.replication.factor":       {"1", def},
		"log.cleaner.backoff.ms":           {"15000", def},
		"max.connections":                  {"0", def},
		"socket.request.max.bytes":         {"104857600", def},
		"offsets.topic.replication.factor": {"3", def},
		"node.id":                          {"0", static},
		"listeners":                        {"PLAINTEXT://127.0.0.1:0", static},
		"listener.security.protocol.map":   {"PLAINTEXT:PLAINTEXT", static},
		"advertised.listeners":             {"PLAINTEXT://" + b.Addr(), static},
	} {
		c, ok := got[name]
		if !ok || c.Value == nil || *c.Value != want.value || c.Source != want.src {
			t.Errorf("%s = %v (%v), want %s (%v)", name, c.MaybeValue(), c.Source, want.value, want.src)
		}
	}
}
