package broker

import (
	"errors"
	"strings"
	"testing"
	"time"

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

// TestRemoteLogCopyAndDeleteOnDisableConfigs: KIP-950's
// remote.log.copy.disable and remote.log.delete.on.disable (bool, false, no
// broker default), Kafka's rule that local retention equal total retention
// while copying is off, and its rule for turning remote.storage.enable from
// true to false: only with remote.log.delete.on.disable=true, which Sediment
// does not support yet and refuses too.
func TestRemoteLogCopyAndDeleteOnDisableConfigs(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	on := "true"

	createTopic(t, b, "readonly", 1, map[string]*string{"remote.storage.enable": &on, "remote.log.copy.disable": &on, "remote.log.delete.on.disable": &on})
	checkDescribed(t, adm, "readonly", "remote.log.copy.disable", "true", kmsg.ConfigSourceDynamicTopicConfig)
	checkDescribed(t, adm, "readonly", "remote.log.delete.on.disable", "true", kmsg.ConfigSourceDynamicTopicConfig)
	createTopic(t, b, "tiered", 1, map[string]*string{"remote.storage.enable": &on, "retention.ms": ptr("86400000"), "local.retention.ms": ptr("3600000")})
	checkDescribed(t, adm, "tiered", "remote.log.copy.disable", "false", kmsg.ConfigSourceDefaultConfig)
	checkDescribed(t, adm, "tiered", "remote.log.delete.on.disable", "false", kmsg.ConfigSourceDefaultConfig)

	for _, bad := range []kadm.AlterConfig{set("remote.log.copy.disable", "yes"), set("remote.log.delete.on.disable", "1")} {
		inc, legacy := alterTopicBoth(t, adm, "tiered", bad)
		wantInvalidConfig(t, bad.Name+"="+*bad.Value, inc, legacy)
	}
	// No broker-level default, as in Kafka: a broker resource's
	// remote.log.copy.disable is stored as any unknown name is, and is no
	// topic's default.
	rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{set("remote.log.copy.disable", "true")})
	if err != nil || rs[0].Err != nil {
		t.Fatalf("broker-level remote.log.copy.disable: %v %v", err, rs)
	}
	checkDescribed(t, adm, "tiered", "remote.log.copy.disable", "false", kmsg.ConfigSourceDefaultConfig)
	if _, ok := dynamicLogConfigs["remote.log.copy.disable"]; ok {
		t.Fatal("remote.log.copy.disable is a broker-level default")
	}
	rs, err = adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "remote.log.copy.disable"}})
	if err != nil || rs[0].Err != nil {
		t.Fatalf("delete broker-level remote.log.copy.disable: %v %v", err, rs)
	}

	// Copying off: local retention must be -2 or the total value.
	inc, _ := alterTopicBoth(t, adm, "tiered", set("remote.log.copy.disable", "true"))
	wantInvalidConfig(t, "copy disabled with local.retention.ms below retention.ms", inc)
	rsi, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("remote.log.copy.disable", "true"), set("local.retention.ms", "-2")}, "tiered")
	if err != nil || rsi[0].Err != nil {
		t.Fatalf("copy disabled with local.retention.ms=-2: %v %v", err, rsi)
	}
	checkDescribed(t, adm, "tiered", "remote.log.copy.disable", "true", kmsg.ConfigSourceDynamicTopicConfig)
	inc, _ = alterTopicBoth(t, adm, "tiered", set("local.retention.bytes", "1000"))
	wantInvalidConfig(t, "local.retention.bytes with copying off", inc)
	resp, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"remote.storage.enable": &on, "remote.log.copy.disable": &on, "local.retention.bytes": ptr("0")}, "never")
	if err == nil {
		err = resp.Err
	}
	wantInvalidConfig(t, "create with copying off and local.retention.bytes=0", err)
	// The rule is for tiered topics only.
	createTopic(t, b, "local", 1, map[string]*string{"remote.log.copy.disable": &on, "local.retention.bytes": ptr("0")})

	// Turning remote storage off: by SET, by DELETE (back to the default
	// false) and by a legacy AlterConfigs that does not list it.
	const kafkaMsg = "It is invalid to disable remote storage without deleting remote data"
	for _, how := range []struct {
		name string
		do   func() error
	}{
		{"set false", func() error {
			rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("remote.storage.enable", "false")}, "tiered")
			if err != nil {
				t.Fatal(err)
			}
			return rs[0].Err
		}},
		{"delete", func() error {
			rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "remote.storage.enable"}}, "tiered")
			if err != nil {
				t.Fatal(err)
			}
			return rs[0].Err
		}},
		{"legacy replace", func() error {
			rs, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{set("retention.ms", "1000")}, "tiered")
			if err != nil {
				t.Fatal(err)
			}
			return rs[0].Err
		}},
	} {
		err := how.do()
		wantInvalidConfig(t, "disable remote storage by "+how.name, err)
		var ke *kerr.Error
		if !errors.As(err, &ke) {
			t.Fatalf("%s: %v", how.name, err)
		}
	}
	rd, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("remote.storage.enable", "false")}, "tiered")
	if err != nil {
		t.Fatal(err)
	}
	if rd[0].ErrMessage == "" || !strings.Contains(rd[0].ErrMessage, kafkaMsg) {
		t.Fatalf("disable without delete.on.disable: message %q, want Kafka's (%q)", rd[0].ErrMessage, kafkaMsg)
	}
	checkDescribed(t, adm, "tiered", "remote.storage.enable", "true", kmsg.ConfigSourceDynamicTopicConfig)

	// A topic that never had remote storage on may set it false.
	rd, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("remote.storage.enable", "false")}, "local")
	if err != nil || rd[0].Err != nil {
		t.Fatalf("remote.storage.enable=false on a local topic: %v %v", err, rd)
	}
	// With remote.log.delete.on.disable=true, as in Kafka, when there is
	// nothing in the bucket to delete (this broker does not tier; see
	// TestRemoteLogCopyDisableTiered for a topic with remote data).
	rd, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("remote.storage.enable", "false"), set("remote.log.delete.on.disable", "true")}, "tiered")
	if err != nil || rd[0].Err != nil {
		t.Fatalf("disable with delete.on.disable and no remote data: %v %v", err, rd)
	}
	checkDescribed(t, adm, "tiered", "remote.storage.enable", "false", kmsg.ConfigSourceDynamicTopicConfig)
}

// TestRemoteLogCopyDisableTiered: on a tiering broker, a topic with data in
// the bucket. remote.log.copy.disable stops uploads (the latest tiered
// offset stays while sealed segments pile up locally) and remote reads go
// on; set back to false, uploads resume. Turning remote storage off
// without remote.log.delete.on.disable=true is refused
// (TestRemoteStorageDisableDeletesRemoteLog for with).
func TestRemoteLogCopyDisableTiered(t *testing.T) {
	b, _, _ := startFolderTieredBroker(t)
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	const topic = "readonly"
	createTopic(t, b, topic, 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1"), "min.insync.replicas": ptr("1")})
	cl := smallBatchClient(t, b)
	produceAll(t, cl, makeRecords(topic, 2000, "before"))
	waitTiered(t, "segments in the bucket", func() bool { return listOffset(t, b, topic, -5) > 0 })

	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("remote.storage.enable", "false")}, topic)
	if err != nil {
		t.Fatal(err)
	}
	wantInvalidConfig(t, "disable remote storage with data in the bucket", rs[0].Err)
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("remote.log.copy.disable", "true")}, topic)
	if err != nil {
		t.Fatal(err)
	}
	wantInvalidConfig(t, "copy disabled with local.retention.bytes 0, retention.bytes -1", rs[0].Err)
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("remote.log.copy.disable", "true"), set("local.retention.bytes", "-2")}, topic)
	if err != nil || rs[0].Err != nil {
		t.Fatalf("copy disable: %v %v", err, rs)
	}
	// The glue hands the config over within its sync interval (20 ms);
	// a round that started before may still commit: let it.
	time.Sleep(500 * time.Millisecond)
	tiered := listOffset(t, b, topic, -5)
	produceAll(t, cl, makeRecords(topic, 2000, "after"))
	time.Sleep(time.Second) // some fifty rounds
	if now := listOffset(t, b, topic, -5); now != tiered {
		t.Fatalf("latest tiered offset %d, was %d: uploaded with remote.log.copy.disable", now, tiered)
	}
	if end := listOffset(t, b, topic, -1); end < tiered+1000 {
		t.Fatalf("log end %d, tiered %d: nothing to hold back", end, tiered)
	}
	if earliest := listOffset(t, b, topic, -2); earliest != 0 {
		t.Fatalf("earliest %d, want 0", earliest)
	}
	if local := listOffset(t, b, topic, -4); local == 0 || local > tiered+1 {
		t.Fatalf("earliest local %d, latest tiered %d", local, tiered)
	}
	if rp := fetchAt(t, b, topic, 0); rp.ErrorCode != 0 || firstBatchOffset(t, rp) != 0 {
		t.Fatalf("remote read at 0 with copying off: %v", kerr.ErrorForCode(rp.ErrorCode))
	}

	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("remote.log.copy.disable", "false")}, topic)
	if err != nil || rs[0].Err != nil {
		t.Fatalf("copy enable: %v %v", err, rs)
	}
	waitTiered(t, "uploads resumed", func() bool { return listOffset(t, b, topic, -5) > tiered+1000 })
}

// TestRemoteLogCopyDisableReachesTiering: the broker hands
// remote.log.copy.disable to tiering (whose rounds then upload nothing:
// tiering.TestRemoteLogCopyDisable).
func TestRemoteLogCopyDisableReachesTiering(t *testing.T) {
	b, _, _ := startFolderTieredBroker(t)
	g := b.tier()
	if cfg := g.topicConfig(map[string]string{"remote.storage.enable": "true"}); !cfg.RemoteStorageEnable || cfg.RemoteLogCopyDisable {
		t.Fatalf("default: %+v", cfg)
	}
	if cfg := g.topicConfig(map[string]string{"remote.storage.enable": "true", "remote.log.copy.disable": "true"}); !cfg.RemoteLogCopyDisable {
		t.Fatalf("remote.log.copy.disable=true: %+v", cfg)
	}
}

// TestMessageDownconversionEnableConfig: Kafka 4.x still takes
// message.downconversion.enable (bool, default true, broker default
// log.message.downconversion.enable), a deprecated no-op; the configs it
// removed (message.format.version, message.timestamp.difference.max.ms)
// stay INVALID_CONFIG.
func TestMessageDownconversionEnableConfig(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	off := "false"
	createTopic(t, b, "noconv", 1, map[string]*string{"message.downconversion.enable": &off})
	checkDescribed(t, adm, "noconv", "message.downconversion.enable", "false", kmsg.ConfigSourceDynamicTopicConfig)
	createTopic(t, b, "plain", 1, nil)
	checkDescribed(t, adm, "plain", "message.downconversion.enable", "true", kmsg.ConfigSourceDefaultConfig)
	inc, legacy := alterTopicBoth(t, adm, "plain", set("message.downconversion.enable", "no"))
	wantInvalidConfig(t, "message.downconversion.enable=no", inc, legacy)
	inc, legacy = alterTopicBoth(t, adm, "plain", set("message.downconversion.enable", "FALSE"))
	if inc != nil || legacy != nil {
		t.Fatalf("message.downconversion.enable=FALSE: %v, %v", inc, legacy)
	}
	checkDescribed(t, adm, "plain", "message.downconversion.enable", "false", kmsg.ConfigSourceDynamicTopicConfig)

	rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{set("log.message.downconversion.enable", "false")})
	if err != nil || rs[0].Err != nil {
		t.Fatalf("log.message.downconversion.enable: %v %v", err, rs)
	}
	createTopic(t, b, "fresh", 1, nil)
	checkDescribed(t, adm, "fresh", "message.downconversion.enable", "false", kmsg.ConfigSourceDynamicDefaultBrokerConfig)

	for _, removed := range []string{"message.format.version", "message.timestamp.difference.max.ms"} {
		v := "3.0"
		if removed != "message.format.version" {
			v = "1000"
		}
		resp, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{removed: &v}, "never")
		if err == nil {
			err = resp.Err
		}
		wantInvalidConfig(t, "create with "+removed, err)
	}
}

// TestTopicConfigSetRules: the rules Kafka checks between a topic's configs
// on create and on both alter paths: min.compaction.lag.ms ≤
// max.compaction.lag.ms, and on tiered topics local.retention.* -2, or not
// -1 and within retention.* when that is not -1.
func TestTopicConfigSetRules(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	createBad := func(what string, configs map[string]*string) {
		t.Helper()
		resp, err := adm.CreateTopic(ctx, 1, 1, configs, "never")
		if err == nil {
			err = resp.Err
		}
		wantInvalidConfig(t, what, err)
	}
	on := "true"

	createBad("min.compaction.lag.ms above max", map[string]*string{"min.compaction.lag.ms": ptr("2000"), "max.compaction.lag.ms": ptr("1000")})
	createTopic(t, b, "compacted", 1, map[string]*string{"cleanup.policy": ptr("compact"), "max.compaction.lag.ms": ptr("1000")})
	inc, legacy := alterTopicBoth(t, adm, "compacted", set("min.compaction.lag.ms", "1001"))
	wantInvalidConfig(t, "min.compaction.lag.ms above the topic's max", inc)
	if legacy != nil { // the legacy replace drops max.compaction.lag.ms: back to its default
		t.Fatalf("legacy min.compaction.lag.ms=1001 without max: %v", legacy)
	}

	createBad("local.retention.ms above retention.ms", map[string]*string{"remote.storage.enable": &on, "retention.ms": ptr("1000"), "local.retention.ms": ptr("2000")})
	createBad("local.retention.ms -1 with retention.ms set", map[string]*string{"remote.storage.enable": &on, "local.retention.ms": ptr("-1")})
	createBad("local.retention.bytes above retention.bytes", map[string]*string{"remote.storage.enable": &on, "retention.bytes": ptr("1000"), "local.retention.bytes": ptr("1001")})
	createTopic(t, b, "unbounded", 1, map[string]*string{"remote.storage.enable": &on, "retention.ms": ptr("-1"), "local.retention.ms": ptr("-1")})
	createTopic(t, b, "tiered", 1, map[string]*string{"remote.storage.enable": &on, "retention.bytes": ptr("1000"), "local.retention.bytes": ptr("1000")})
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("retention.bytes", "999")}, "tiered")
	if err != nil {
		t.Fatal(err)
	}
	wantInvalidConfig(t, "retention.bytes below the topic's local.retention.bytes", rs[0].Err)
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("local.retention.bytes", "-1")}, "tiered")
	if err != nil {
		t.Fatal(err)
	}
	wantInvalidConfig(t, "local.retention.bytes -1 with retention.bytes set", rs[0].Err)
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("retention.bytes", "999"), set("local.retention.bytes", "0")}, "tiered")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("retention.bytes 999, local 0: %v %v", err, rs)
	}
	// Local topics: no such rule, as in Kafka.
	createTopic(t, b, "local", 1, map[string]*string{"retention.ms": ptr("1000"), "local.retention.ms": ptr("2000")})
}
