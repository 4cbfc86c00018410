package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/sediment-io/sediment/broker"
	"github.com/sediment-io/sediment/broker/group"
)

func TestParseListeners(t *testing.T) {
	ls, err := parseListeners("PLAINTEXT://0.0.0.0:9092, internal://127.0.0.1:9093,localhost:9094")
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 3 || ls[0].Name != "PLAINTEXT" || ls[1].Name != "INTERNAL" || ls[1].Addr != "127.0.0.1:9093" || ls[2].Name != "PLAINTEXT" {
		t.Fatalf("%+v", ls)
	}
	for _, bad := range []string{"", "PLAINTEXT://nohost", "x://:a:b"} {
		if _, err := parseListeners(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// TestBrokerConfigLayers: flags over environment over the YAML file over
// the defaults.
func TestBrokerConfigLayers(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sediment.yaml")
	os.WriteFile(file, []byte("node-id: 7\ndata-dir: /from/file\nnum-partitions: 3\nlisteners: PLAINTEXT://127.0.0.1:1111\nadvertised-listeners: PLAINTEXT://kafka.example:1111\n"), 0o644)
	t.Setenv("SEDIMENT_DATA_DIR", "/from/env")
	t.Setenv("SEDIMENT_MESSAGE_MAX_BYTES", "2048")
	cfg := configFromFile(t, file, "--num-partitions", "5")
	if cfg.NodeID != 7 || cfg.DataDir != "/from/env" || cfg.NumPartitions != 5 || cfg.MessageMaxBytes != 2048 {
		t.Fatalf("layers: node %d dir %q partitions %d max %d", cfg.NodeID, cfg.DataDir, cfg.NumPartitions, cfg.MessageMaxBytes)
	}
	if cfg.Listeners[0].Addr != "127.0.0.1:1111" || cfg.Listeners[0].Advertised != "kafka.example:1111" {
		t.Fatalf("listeners: %+v", cfg.Listeners)
	}
	if !cfg.AutoCreateTopics || cfg.SocketRequestMaxBytes != 100<<20 {
		t.Fatalf("defaults: %+v", cfg)
	}
}

// parseBrokerFlags parses the broker command's flags (--config file when
// file is not empty, then args) and reads that config file, as RunE does.
func parseBrokerFlags(t *testing.T, file string, args ...string) (*viper.Viper, *pflag.FlagSet) {
	t.Helper()
	vv := viper.New()
	cmd := newBrokerCmdWith(vv)
	if file != "" {
		args = append([]string{"--config", file}, args...)
	}
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatal(err)
	}
	if file != "" {
		vv.SetConfigFile(file)
		if err := vv.ReadInConfig(); err != nil {
			t.Fatal(err)
		}
	}
	return vv, cmd.Flags()
}

// configFromFile parses the broker command's flags (--config file, then
// args) and builds the broker config as RunE does before starting it.
func configFromFile(t *testing.T, file string, args ...string) broker.Config {
	t.Helper()
	vv, flags := parseBrokerFlags(t, file, args...)
	if err := checkValues(vv, flags); err != nil {
		t.Fatal(err)
	}
	cfg, err := brokerConfig(vv, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestLogSegmentDeleteDelay: log-segment-delete-delay defaults to Kafka's
// minute, takes a YAML value, and 0 (at once) reaches the broker as its
// "none" (a negative delay), not as its zero value, which means the default.
func TestLogSegmentDeleteDelay(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want time.Duration
	}{
		{"", time.Minute},
		{"log-segment-delete-delay: 5s\n", 5 * time.Second},
		{"log-segment-delete-delay: 0s\n", -1},
	} {
		file := filepath.Join(t.TempDir(), "sediment.yaml")
		os.WriteFile(file, []byte("node-id: 1\n"+c.yaml), 0o644)
		cfg := configFromFile(t, file)
		if cfg.LogSegmentDeleteDelay != c.want {
			t.Errorf("%q: LogSegmentDeleteDelay %v, want %v", c.yaml, cfg.LogSegmentDeleteDelay, c.want)
		}
	}
}

// TestLeaderRebalanceSettings: the three settings of the automatic return
// of leadership to preferred replicas default to Kafka's (enabled, 300 s,
// 10%), take YAML values and flags, and reach the broker as its Config
// means them (0% as its "none", a negative percentage); values Kafka would
// refuse are refused.
func TestLeaderRebalanceSettings(t *testing.T) {
	for _, c := range []struct {
		yaml     string
		args     []string
		disabled bool
		interval time.Duration
		pct      int
	}{
		{"", nil, false, 300 * time.Second, 10},
		{"auto-leader-rebalance-enable: false\nleader-imbalance-check-interval: 30s\nleader-imbalance-per-broker-percentage: 25\n", nil, true, 30 * time.Second, 25},
		{"leader-imbalance-per-broker-percentage: 0\n", nil, false, 300 * time.Second, -1},
		{"", []string{"--leader-imbalance-check-interval", "1s", "--auto-leader-rebalance-enable=false"}, true, time.Second, 10},
	} {
		file := filepath.Join(t.TempDir(), "sediment.yaml")
		os.WriteFile(file, []byte("node-id: 1\n"+c.yaml), 0o644)
		cfg := configFromFile(t, file, c.args...)
		if cfg.DisableAutoLeaderRebalance != c.disabled || cfg.LeaderImbalanceCheckInterval != c.interval || cfg.LeaderImbalancePerBrokerPercentage != c.pct {
			t.Errorf("%q %q: disabled %v, interval %v, percentage %d; want %v, %v, %d", c.yaml, c.args,
				cfg.DisableAutoLeaderRebalance, cfg.LeaderImbalanceCheckInterval, cfg.LeaderImbalancePerBrokerPercentage, c.disabled, c.interval, c.pct)
		}
	}
	for _, bad := range []string{"leader-imbalance-check-interval: 0s\n", "leader-imbalance-per-broker-percentage: 101\n", "leader-imbalance-per-broker-percentage: -1\n"} {
		if configRefused(t, bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestFetchMaxBytesSetting: fetch-max-bytes defaults to Kafka's 55 MiB,
// takes a YAML value and a flag, and refuses what Kafka refuses (below
// 1024) and what could make an answer over 2 GiB (above 1 GiB).
func TestFetchMaxBytesSetting(t *testing.T) {
	for _, c := range []struct {
		yaml string
		args []string
		want int32
	}{
		{"", nil, 55 << 20},
		{"fetch-max-bytes: 1048576\n", nil, 1 << 20},
		{"", []string{"--fetch-max-bytes", "1024"}, 1024},
	} {
		file := filepath.Join(t.TempDir(), "sediment.yaml")
		os.WriteFile(file, []byte("node-id: 1\n"+c.yaml), 0o644)
		if cfg := configFromFile(t, file, c.args...); cfg.FetchMaxBytes != c.want {
			t.Errorf("%q %q: %d, want %d", c.yaml, c.args, cfg.FetchMaxBytes, c.want)
		}
	}
	for _, bad := range []string{"fetch-max-bytes: 1023\n", "fetch-max-bytes: 0\n", "fetch-max-bytes: 1073741825\n"} {
		if configRefused(t, bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestAuthorizerSettings: the authorizer's settings and the SSL principal
// mapping rules reach broker.Config; malformed ones are refused at start,
// and so are Kerberos principal rules, with or without a keytab.
func TestAuthorizerSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sediment.yaml")
	os.WriteFile(file, []byte("node-id: 1\nauthorizer-enabled: true\nsuper-users: User:admin; User:CN=broker,O=acme\nssl-principal-mapping-rules: RULE:^CN=([^,]*),.*$/$1/L,DEFAULT\n"), 0o644)
	cfg := configFromFile(t, file, "--allow-everyone-if-no-acl-found")
	if !cfg.Authorizer.Enabled || !cfg.Authorizer.AllowEveryoneIfNoACLFound || !slices.Equal(cfg.Authorizer.SuperUsers, []string{"User:admin", "User:CN=broker,O=acme"}) {
		t.Errorf("authorizer: %+v", cfg.Authorizer)
	}
	if p, err := cfg.SSLPrincipalMapper.Map("CN=Alice,O=acme"); err != nil || p != "alice" {
		t.Errorf("mapping: %q %v", p, err)
	}
	plain := filepath.Join(t.TempDir(), "sediment.yaml")
	os.WriteFile(plain, []byte("node-id: 1\n"), 0o644)
	if cfg := configFromFile(t, plain); cfg.Authorizer.Enabled || cfg.SSLPrincipalMapper != nil {
		t.Errorf("defaults: %+v, %v", cfg.Authorizer, cfg.SSLPrincipalMapper)
	}
	for _, bad := range []string{"super-users: alice\n", "super-users: Group:x\n", "ssl-principal-mapping-rules: RULE:(/x/\n", "ssl-principal-mapping-rules: NONE\n",
		"sasl-kerberos-principal-to-local-rules: RULE:[1:$2]\n", "sasl-kerberos-principal-to-local-rules: DEFAULT/L\n"} {
		if configRefused(t, bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// configRefused is the error of checkValues, else of brokerConfig, for a
// config file of "node-id: 1" and yaml: what RunE checks before it starts
// the broker.
func configRefused(t *testing.T, yaml string) error {
	t.Helper()
	file := filepath.Join(t.TempDir(), "sediment.yaml")
	os.WriteFile(file, []byte("node-id: 1\n"+yaml), 0o644)
	vv, flags := parseBrokerFlags(t, file)
	if err := checkValues(vv, flags); err != nil {
		return err
	}
	_, err := brokerConfig(vv, nil)
	return err
}

// TestGroupMigrationPolicy: group-consumer-migration-policy defaults to
// Kafka 4.0's bidirectional, takes YAML values and flags in any case, and
// refuses other values.
func TestGroupMigrationPolicy(t *testing.T) {
	for _, c := range []struct {
		yaml string
		args []string
		want group.MigrationPolicy
	}{
		{"", nil, group.MigrationBidirectional},
		{"group-consumer-migration-policy: upgrade\n", nil, group.MigrationUpgrade},
		{"", []string{"--group-consumer-migration-policy", "DISABLED"}, group.MigrationDisabled},
		{"group-consumer-migration-policy: upgrade\n", []string{"--group-consumer-migration-policy", "downgrade"}, group.MigrationDowngrade},
	} {
		file := filepath.Join(t.TempDir(), "sediment.yaml")
		os.WriteFile(file, []byte("node-id: 1\n"+c.yaml), 0o644)
		if got := configFromFile(t, file, c.args...).Groups.MigrationPolicy; got != c.want {
			t.Errorf("%q %v: policy %v, want %v", c.yaml, c.args, got, c.want)
		}
	}
	if configRefused(t, "group-consumer-migration-policy: both\n") == nil {
		t.Fatal("policy \"both\" accepted")
	}
}

// TestStaticConfigs: the broker settings the operator gives, by a flag, a
// variable or the config file, and only those, reach broker.Config's
// StaticConfigs under their Kafka names, for DescribeConfigs to report
// them as STATIC_BROKER_CONFIG (a value equal to the default included).
func TestStaticConfigs(t *testing.T) {
	t.Setenv("SEDIMENT_MESSAGE_MAX_BYTES", "1048588")
	file := filepath.Join(t.TempDir(), "sediment.yaml")
	os.WriteFile(file, []byte("node-id: 1\nlog-segment-bytes: 1073741824\n"), 0o644)
	cfg := configFromFile(t, file, "--log-retention-ms", "1000000")
	want := map[string]bool{"log.retention.ms": true, "log.segment.bytes": true, "message.max.bytes": true, "node.id": true, "broker.id": true}
	if len(cfg.StaticConfigs) != len(want) {
		t.Fatalf("StaticConfigs %v, want %v", cfg.StaticConfigs, want)
	}
	for k := range want {
		if !cfg.StaticConfigs[k] {
			t.Errorf("StaticConfigs %v lacks %s", cfg.StaticConfigs, k)
		}
	}
	os.Unsetenv("SEDIMENT_MESSAGE_MAX_BYTES")
	plain := filepath.Join(t.TempDir(), "sediment.yaml")
	os.WriteFile(plain, []byte("node-id: 1\n"), 0o644)
	if cfg := configFromFile(t, plain); len(cfg.StaticConfigs) != 2 || !cfg.StaticConfigs["node.id"] {
		t.Errorf("StaticConfigs %v with only node-id given, want node.id and broker.id", cfg.StaticConfigs)
	}
	// Every Kafka-named broker setting counts, not only topic defaults.
	cfg = configFromFile(t, plain, "--replica-lag-time-max", "30s", "--listeners", "PLAINTEXT://127.0.0.1:0", "--log-cleaner-threads", "1")
	for _, k := range []string{"replica.lag.time.max.ms", "listeners", "listener.security.protocol.map", "log.cleaner.threads"} {
		if !cfg.StaticConfigs[k] {
			t.Errorf("StaticConfigs %v lacks %s", cfg.StaticConfigs, k)
		}
	}
}
