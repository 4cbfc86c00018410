package broker

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Topic configs that newer Kafka versions added and that clients (the Java
// AdminClient 3.8+, kcat, kadm) may set: each is accepted on CreateTopics,
// described with its source, and a value out of Kafka's range is
// INVALID_CONFIG on both alter paths.

// describedConfig returns a topic's described config name.
func describedConfig(t *testing.T, adm *kadm.Client, topic, name string) kadm.Config {
	t.Helper()
	rc, err := adm.DescribeTopicConfigs(testCtx(t), topic)
	if err != nil || rc[0].Err != nil {
		t.Fatalf("describe %s: %v %v", topic, err, rc)
	}
	for _, c := range rc[0].Configs {
		if c.Key == name {
			return c
		}
	}
	t.Fatalf("%s: %s not described", topic, name)
	return kadm.Config{}
}

func checkDescribed(t *testing.T, adm *kadm.Client, topic, name, want string, src kmsg.ConfigSource) {
	t.Helper()
	c := describedConfig(t, adm, topic, name)
	if c.Value == nil || *c.Value != want || c.Source != src {
		t.Fatalf("%s %s = %v (source %v), want %s (%v)", topic, name, c.MaybeValue(), c.Source, want, src)
	}
}

// alterTopicBoth sets name=value on topic with IncrementalAlterConfigs and
// with the legacy AlterConfigs, and returns each one's error.
func alterTopicBoth(t *testing.T, adm *kadm.Client, topic string, configs ...kadm.AlterConfig) (incremental, legacy error) {
	t.Helper()
	ctx := testCtx(t)
	rs, err := adm.AlterTopicConfigs(ctx, configs, topic)
	if err != nil {
		t.Fatal(err)
	}
	incremental = rs[0].Err
	rs, err = adm.AlterTopicConfigsState(ctx, configs, topic)
	if err != nil {
		t.Fatal(err)
	}
	return incremental, rs[0].Err
}

func wantInvalidConfig(t *testing.T, what string, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if !errors.Is(err, kerr.InvalidConfig) {
			t.Fatalf("%s: got %v, want INVALID_CONFIG", what, err)
		}
	}
}

func set(name, value string) kadm.AlterConfig {
	return kadm.AlterConfig{Op: kadm.SetConfig, Name: name, Value: &value}
}

// TestCompressionLevelConfigs: KIP-390's compression.gzip.level (1-9 or -1,
// default -1), compression.lz4.level (1-17, default 9) and
// compression.zstd.level (-131072-22, default 3), with their broker-level
// defaults of the same names.
func TestCompressionLevelConfigs(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))

	gz, lz, zs := "9", "17", "-131072"
	createTopic(t, b, "levels", 1, map[string]*string{"compression.gzip.level": &gz, "compression.lz4.level": &lz, "compression.zstd.level": &zs})
	checkDescribed(t, adm, "levels", "compression.gzip.level", "9", kmsg.ConfigSourceDynamicTopicConfig)
	checkDescribed(t, adm, "levels", "compression.lz4.level", "17", kmsg.ConfigSourceDynamicTopicConfig)
	checkDescribed(t, adm, "levels", "compression.zstd.level", "-131072", kmsg.ConfigSourceDynamicTopicConfig)

	createTopic(t, b, "plain", 1, nil)
	checkDescribed(t, adm, "plain", "compression.gzip.level", "-1", kmsg.ConfigSourceDefaultConfig)
	checkDescribed(t, adm, "plain", "compression.lz4.level", "9", kmsg.ConfigSourceDefaultConfig)
	checkDescribed(t, adm, "plain", "compression.zstd.level", "3", kmsg.ConfigSourceDefaultConfig)

	for _, ok := range []kadm.AlterConfig{set("compression.gzip.level", "-1"), set("compression.gzip.level", "1"),
		set("compression.lz4.level", "1"), set("compression.zstd.level", "22"), set("compression.zstd.level", " -7 ")} {
		inc, legacy := alterTopicBoth(t, adm, "plain", ok)
		if inc != nil || legacy != nil {
			t.Fatalf("%s=%s: %v, %v", ok.Name, *ok.Value, inc, legacy)
		}
	}
	checkDescribed(t, adm, "plain", "compression.zstd.level", "-7", kmsg.ConfigSourceDynamicTopicConfig)

	for _, bad := range []kadm.AlterConfig{set("compression.gzip.level", "0"), set("compression.gzip.level", "10"),
		set("compression.gzip.level", "-2"), set("compression.gzip.level", "x"), set("compression.lz4.level", "0"),
		set("compression.lz4.level", "18"), set("compression.zstd.level", "23"), set("compression.zstd.level", "-131073"),
		set("compression.zstd.level", "3.5")} {
		inc, legacy := alterTopicBoth(t, adm, "plain", bad)
		wantInvalidConfig(t, bad.Name+"="+*bad.Value, inc, legacy)
		resp, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{bad.Name: bad.Value}, "never")
		if err == nil {
			err = resp.Err
		}
		wantInvalidConfig(t, "create with "+bad.Name+"="+*bad.Value, err)
	}

	// The broker-level defaults (Kafka's synonyms have the same names).
	rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{set("compression.zstd.level", "12")})
	if err != nil || rs[0].Err != nil {
		t.Fatalf("cluster default compression.zstd.level: %v %v", err, rs)
	}
	checkDescribed(t, adm, "levels", "compression.zstd.level", "-131072", kmsg.ConfigSourceDynamicTopicConfig)
	checkDescribed(t, adm, "plain", "compression.zstd.level", "-7", kmsg.ConfigSourceDynamicTopicConfig)
	createTopic(t, b, "fresh", 1, nil)
	checkDescribed(t, adm, "fresh", "compression.zstd.level", "12", kmsg.ConfigSourceDynamicDefaultBrokerConfig)
	rs, err = adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{set("compression.lz4.level", "18")})
	if err != nil {
		t.Fatal(err)
	}
	wantInvalidConfig(t, "broker compression.lz4.level=18", rs[0].Err)
}
