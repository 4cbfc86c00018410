package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// checkArgs runs the broker command's value checks (checkValues) on the
// flags args and, when file is not empty, that config file.
func checkArgs(t *testing.T, file string, args ...string) error {
	t.Helper()
	vv, flags := parseBrokerFlags(t, file, args...)
	return checkValues(vv, flags)
}

// TestSettingRules: every setting with an enumeration or a range refuses a
// value outside it, naming the flag and what it takes, and takes the values
// at its bounds. Without the rules each bad value below started a broker:
// log-flush=always as fsync-on-commit in the log but without the lone-ISR
// fsync wait, and most zero or negative numbers as the default.
func TestSettingRules(t *testing.T) {
	cases := []struct {
		name string
		good []string
		bad  string
		want string
	}{
		{"node-id", []string{"0", "2147483647"}, "-1", "-1 is out of range (want 0 to 2147483647)"},
		{"cluster-id", []string{"c"}, "", `"" is empty (want a value`},
		{"data-dir", []string{"/d"}, " ", `" " is empty (want a value`},
		{"listeners", []string{"127.0.0.1:0"}, "", `"" is empty`},
		{"raft-address", []string{"127.0.0.1:0"}, "", `"" is empty`},
		{"join-timeout", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"replica-lag-time-max", []string{"1m"}, "-1s", "-1s is out of range (want more than 0)"},
		{"replica-fetch-wait-max", []string{"1ms", "30s"}, "0s", "0s is out of range (want more than 0)"},
		{"leader-imbalance-check-interval", []string{"1s"}, "0s", "0s is out of range (want more than 0)"},
		{"leader-imbalance-per-broker-percentage", []string{"0", "100"}, "101", "101 is out of range (want 0 to 100)"},
		{"stray-log-delete-delay", []string{"-1s", "1ns"}, "0s", "0 is out of range (want more than 0, or negative: never)"},
		{"deleted-log-delete-delay", []string{"-1s", "1s"}, "0s", "0 is out of range (want more than 0, or negative: at once)"},
		{"log-level", []string{"debug", "WARN", "error"}, "trace", `"trace" is not one of debug, info, warn, error`},
		{"log-format", []string{"json", "Text"}, "xml", `"xml" is not one of text, json`},
		{"num-partitions", []string{"1"}, "-5", "-5 is out of range (want 1 or more)"},
		{"default-replication-factor", []string{"1", "32767"}, "0", "0 is out of range (want 1 or more)"},
		{"message-max-bytes", []string{"1"}, "-1", "-1 is out of range (want 1 or more)"},
		{"log-segment-bytes", []string{"14", "2147483647"}, "10", "10 is out of range (want 14 to 2147483647)"},
		{"log-retention-ms", []string{"-1", "1"}, "0", "0 is out of range (want -1 or more, not 0: it would read as the default 7 days)"},
		{"log-segment-delete-delay", []string{"0s"}, "-1s", "-1s is out of range (want 0s or more)"},
		{"log-flush", []string{"commit", "interval", "OS"}, "always", `"always" is not one of commit, interval, os`},
		{"log-flush-interval", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"socket-request-max-bytes", []string{"1"}, "0", "0 is out of range (want 1 or more)"},
		{"queued-max-request-bytes", []string{"1"}, "-1", "-1 is out of range (want 1 or more)"},
		{"fetch-max-bytes", []string{"1024", "1073741824"}, "1023", "1023 is out of range (want 1024 to 1073741824)"},
		{"connections-max-idle", []string{"-1s", "1s"}, "0s", "0 is out of range (want more than 0, or negative: never)"},
		{"max-connections-per-ip", []string{"0"}, "-1", "-1 is out of range (want 0 or more)"},
		{"max-connections", []string{"0"}, "-1", "-1 is out of range (want 0 or more)"},
		{"max-connection-creation-rate", []string{"0"}, "-1", "-1 is out of range (want 0 or more)"},
		{"connections-max-reauth", []string{"0s"}, "-1s", "-1s is out of range (want 0s or more)"},
		{"producer-id-expiration", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"producer-id-expiration-check-interval", []string{"1ms"}, "-1m", "-1m0s is out of range (want more than 0)"},
		{"quota-window-num", []string{"1"}, "0", "0 is out of range (want 1 or more)"},
		{"quota-window-size", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"delegation-token-max-lifetime", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"delegation-token-expiry-time", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"delegation-token-expiry-check-interval", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"shutdown-timeout", []string{"1ms"}, "-5s", "-5s is out of range (want more than 0)"},
		{"offsets-topic-num-partitions", []string{"1"}, "0", "0 is out of range (want 1 or more)"},
		{"offsets-topic-replication-factor", []string{"1", "3"}, "0", "0 is out of range (want 1 or more)"},
		{"group-initial-rebalance-delay", []string{"0s"}, "-1s", "-1s is out of range (want 0s or more)"},
		{"group-min-session-timeout", []string{"1ms", "30m"}, "0s", "0s is out of range (want more than 0)"},
		{"group-max-session-timeout", []string{"6s"}, "0s", "0s is out of range (want more than 0)"},
		{"group-max-size", []string{"0"}, "-1", "-1 is out of range (want 0 or more)"},
		{"group-consumer-migration-policy", []string{"upgrade", "DISABLED"}, "both", `"both" is not one of bidirectional, upgrade, downgrade, disabled`},
		{"offsets-retention", []string{"1m"}, "0s", "0s is out of range (want more than 0)"},
		{"log-cleaner-threads", []string{"1", "64"}, "0", "0 is out of range (want 1 to 64)"},
		{"log-cleaner-dedupe-buffer-size", []string{"1048576", "1099511627776"}, "1000", "1000 is out of range (want 1048576 to 1099511627776)"},
		{"log-cleaner-io-max-bytes-per-second", []string{"0"}, "-1", "-1 is out of range (want 0 or more)"},
		{"log-cleaner-backoff", []string{"1ms", "24h"}, "25h", "25h0m0s is out of range (want 1ms to 24h0m0s)"},
		{"log-retention-check-interval", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"tiered-compaction-interval", []string{"-1s", "1s"}, "0s", "0 is out of range (want more than 0, or negative: never)"},
		{"lease-ttl", []string{"1s"}, "0s", "0s is out of range (want more than 0)"},
		{"transaction-state-log-num-partitions", []string{"1"}, "0", "0 is out of range (want 1 or more)"},
		{"transaction-state-log-replication-factor", []string{"1", "3"}, "0", "0 is out of range (want 1 or more)"},
		{"transaction-state-log-min-isr", []string{"1", "2"}, "-1", "-1 is out of range (want 1 or more)"},
		{"transaction-max-timeout", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"transaction-abort-interval", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"transactional-id-expiration", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"transaction-remove-expired-interval", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"ssl-client-auth", []string{"none", "requested", "REQUIRED"}, "optional", `"optional" is not one of none, requested, required`},
		{"sasl-enabled-mechanisms", []string{"PLAIN", "scram-sha-512, GSSAPI,OAUTHBEARER"}, "PLAIN,FOO", `"FOO" in "PLAIN,FOO" is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, GSSAPI`},
		{"sasl-oauthbearer-jwks-endpoint-refresh", []string{"1s"}, "0s", "0s is out of range (want more than 0)"},
		{"sasl-oauthbearer-clock-skew", []string{"1s"}, "0s", "0s is out of range (want more than 0)"},
		{"inter-broker-sasl-mechanism", []string{"PLAIN", "scram-sha-256", "GSSAPI", "OAUTHBEARER"}, "FOO", `"FOO" is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, GSSAPI`},
		{"ssl-endpoint-identification-algorithm", []string{"https", "HTTPS", ""}, "foo", `"foo" is not one of https, "" (empty), none`},
		{"raft-security-protocol", []string{"PLAINTEXT", "ssl"}, "SASL_SSL", `"SASL_SSL" is not one of PLAINTEXT, SSL`},
		{"tier-cache-bytes", []string{"1"}, "0", "0 is out of range (want 1 or more)"},
		{"tier-orphan-grace", []string{"1s"}, "0s", "0s is out of range (want more than 0)"},
		{"tier-clean-interval", []string{"1s"}, "0s", "0s is out of range (want more than 0)"},
		{"remote-fetch-max-wait", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
		{"remote-fetch-timeout", []string{"1ms"}, "0s", "0s is out of range (want more than 0)"},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.name] = true
		for _, good := range c.good {
			if err := checkArgs(t, "", "--"+c.name+"="+good); err != nil {
				t.Errorf("--%s=%s refused: %v", c.name, good, err)
			}
		}
		err := checkArgs(t, "", "--"+c.name+"="+c.bad)
		if want := "--" + c.name + ": " + c.want; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--%s=%s: error %v, want %q", c.name, c.bad, err, want)
		}
	}
	for name := range settingRules {
		if !covered[name] {
			t.Errorf("%s has a rule and no case here", name)
		}
	}

	// The same from the environment and the config file, named so.
	t.Setenv("SEDIMENT_LOG_FLUSH", "always")
	file := writeConfig(t, "num-partitions: -5\nlog-cleaner-threads: 0\n")
	err := checkArgs(t, file, "--shutdown-timeout=-5s")
	for _, want := range []string{
		`SEDIMENT_LOG_FLUSH: "always" is not one of commit, interval, os`,
		"config " + file + ": num-partitions: -5 is out of range (want 1 or more)",
		"config " + file + ": log-cleaner-threads: 0 is out of range (want 1 to 64)",
		"--shutdown-timeout: -5s is out of range (want more than 0)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestCrossSettingRules: a follower's long poll may not outlast the ISR
// timeout (Kafka's requirement), nor the least session timeout pass the
// greatest.
func TestCrossSettingRules(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--replica-fetch-wait-max=31s"}, "--replica-fetch-wait-max: 31s is more than replica-lag-time-max (default): 30s"},
		{[]string{"--replica-lag-time-max=400ms"}, "replica-fetch-wait-max (default): 500ms is more than --replica-lag-time-max: 400ms"},
		{[]string{"--group-min-session-timeout=31m"}, "--group-min-session-timeout: 31m0s is more than group-max-session-timeout (default): 30m0s"},
	} {
		if err := checkArgs(t, "", c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
	if err := checkArgs(t, "", "--replica-fetch-wait-max=30s", "--group-min-session-timeout=30m"); err != nil {
		t.Errorf("equal bounds refused: %v", err)
	}
}

// TestSettingRulesCover: every broker setting has a rule or is listed as
// taking any value of its type, not both, so that a new setting is
// classified when it is added.
func TestSettingRulesCover(t *testing.T) {
	for _, s := range brokerSettings {
		_, ruled := settingRules[s.name]
		free := slices.Contains(freeSettings, s.name)
		if ruled == free {
			t.Errorf("%s: rule %v, free %v: want exactly one", s.name, ruled, free)
		}
	}
	names := brokerSettingNames()
	for name := range settingRules {
		if !slices.Contains(names, name) {
			t.Errorf("rule for %s, which is no setting", name)
		}
	}
	for _, name := range freeSettings {
		if !slices.Contains(names, name) {
			t.Errorf("free %s is no setting", name)
		}
	}
}

// TestDocumentedDefaultsPass: the embedded defaults, and the example
// sediment.yaml of docs/configuration.md, pass every check.
func TestDocumentedDefaultsPass(t *testing.T) {
	if err := checkArgs(t, ""); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(# sediment.yaml.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("no example sediment.yaml in docs/configuration.md")
	}
	file := writeConfig(t, string(m[1]))
	if err := checkConfigFile(file); err != nil {
		t.Fatal(err)
	}
	if err := checkArgs(t, file); err != nil {
		t.Fatalf("the example sediment.yaml of docs/configuration.md: %v", err)
	}
	// And the default column of its settings table, where it is a value.
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\| ([^|]*) \\|")
	n := 0
	for _, r := range row.FindAllStringSubmatch(string(doc), -1) {
		name, def := r[1], strings.Trim(strings.TrimSpace(r[2]), "`")
		if !slices.Contains(brokerSettingNames(), name) {
			continue
		}
		switch {
		case strings.HasPrefix(def, "empty"), strings.Contains(def, " "), strings.Contains(def, "GiB"), strings.Contains(def, "MiB"):
			continue // words, or a size in words
		}
		n++
		if err := checkArgs(t, "", "--"+name+"="+def); err != nil {
			t.Errorf("documented default %s = %q: %v", name, def, err)
		}
	}
	t.Logf("%d documented defaults checked", n)
	if n < 40 {
		t.Fatalf("only %d documented defaults checked", n)
	}
}

// TestBadSettingStopsBroker: a value out of its range stops `sediment
// broker` before it opens its data directory.
func TestBadSettingStopsBroker(t *testing.T) {
	dir := t.TempDir()
	err := runBrokerCmd(t, "broker", "--data-dir", dir, "--listeners", "PLAINTEXT://127.0.0.1:23101", "--raft-address", "127.0.0.1:23102",
		"--admin-address=", "--log-flush=always")
	if err == nil || !strings.Contains(err.Error(), `--log-flush: "always" is not one of commit, interval, os`) {
		t.Fatalf("error %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "meta")); err == nil {
		t.Error("the broker opened its data directory before failing")
	}
}

// TestBoolForms: a bool takes the same forms in every layer, those of Go's
// strconv.ParseBool (true, True, TRUE, t, T, 1 and their false), and no
// other (yes, on, 2). An unquoted YAML 1 or 0 was refused while --tiering=1
// and SEDIMENT_TIERING=1 were taken.
func TestBoolForms(t *testing.T) {
	good := []string{"true", "True", "TRUE", "t", "T", "1", "false", "FALSE", "f", "F", "0"}
	bad := []string{"yes", "no", "on", "off", "2", "-1"}
	for _, v := range good {
		if err := checkArgs(t, writeConfig(t, "tiering: "+v+"\n")); err != nil {
			t.Errorf("YAML tiering: %s refused: %v", v, err)
		}
		if err := checkArgs(t, "", "--tiering="+v); err != nil {
			t.Errorf("--tiering=%s refused: %v", v, err)
		}
		t.Setenv("SEDIMENT_TIERING", v)
		if err := checkArgs(t, ""); err != nil {
			t.Errorf("SEDIMENT_TIERING=%s refused: %v", v, err)
		}
		os.Unsetenv("SEDIMENT_TIERING")
	}
	for _, v := range bad {
		if err := checkArgs(t, writeConfig(t, "tiering: "+v+"\n")); err == nil || !strings.Contains(err.Error(), "is not a bool") {
			t.Errorf("YAML tiering: %s: %v, want not a bool", v, err)
		}
		t.Setenv("SEDIMENT_TIERING", v)
		if err := checkArgs(t, ""); err == nil || !strings.Contains(err.Error(), "SEDIMENT_TIERING") {
			t.Errorf("SEDIMENT_TIERING=%s: %v, want not a bool", v, err)
		}
		os.Unsetenv("SEDIMENT_TIERING")
	}
}
