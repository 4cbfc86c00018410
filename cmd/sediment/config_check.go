package main

// Config hygiene: a misspelt key must not silently fall back to a default.
// `sediment broker` refuses to start when its YAML file has a key that is no
// setting, or when the environment has a SEDIMENT_* variable that names
// nothing, and says which valid key is closest.

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/viper"
)

// otherSedimentVars are SEDIMENT_* variables that are not broker settings
// but are read by something else a broker's environment may well carry:
// the client commands (client.go; SEDIMENT_BROKERS is shown in the README
// next to `make run`) and the test and benchmark knobs of `make`.
// TestOtherSedimentVarsComplete keeps the list whole.
var otherSedimentVars = []string{
	"SEDIMENT_BROKERS", "SEDIMENT_TIMEOUT", "SEDIMENT_CLIENT_ID", "SEDIMENT_CLIENT_LOG_LEVEL",
	"SEDIMENT_ADMIN", // sediment tier status/ls (--admin)
	"SEDIMENT_BENCH_KEYS", "SEDIMENT_BENCH_CHUNK", "SEDIMENT_BENCH_AHEAD", "SEDIMENT_BENCH_STREAMS",
	"SEDIMENT_BENCH_REPLAY_MB",
	"SEDIMENT_CHAOS_KILLS", "SEDIMENT_COMPACTION_KILLS", "SEDIMENT_E2E_PIPELINE_RECORDS",
	"SEDIMENT_TIER_E2E_MB", "SEDIMENT_E2E_VERBOSE",
	"SEDIMENT_COMPACTION_KILL_CHILD", "SEDIMENT_SEQ_BASE", // compaction's crash-test child process
	"SEDIMENT_FAILPOINT_DIR", // internal/failpoint (e2e tests)
}

// brokerSettingNames returns every broker key (the flag names).
func brokerSettingNames() []string {
	names := make([]string, 0, len(brokerSettings))
	for _, s := range brokerSettings {
		names = append(names, s.name)
	}
	return names
}

func envName(key string) string {
	return "SEDIMENT_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// checkConfigFile reads file on its own and returns an error naming each of
// its keys that is not a broker setting (nested keys count as their dotted
// path: a Kafka-style `node.id:` is reported as node.id).
func checkConfigFile(file string) error {
	v := viper.New()
	v.SetConfigFile(file)
	if err := v.ReadInConfig(); err != nil {
		return fmt.Errorf("reading config %s: %w", file, err)
	}
	valid := brokerSettingNames()
	var errs []error
	keys := v.AllKeys()
	sort.Strings(keys)
	for _, k := range keys {
		if slices.Contains(valid, k) {
			continue
		}
		errs = append(errs, fmt.Errorf("config %s: unknown key %q%s", file, k, suggest(k, valid)))
	}
	return errors.Join(errs...)
}

// checkEnv returns an error naming each SEDIMENT_* variable of environ that
// is neither a broker setting nor one of otherSedimentVars.
func checkEnv(environ []string) error {
	valid := []string{"SEDIMENT_CONFIG"} // --config
	for _, k := range brokerSettingNames() {
		valid = append(valid, envName(k))
	}
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "SEDIMENT_") || slices.Contains(valid, name) || slices.Contains(otherSedimentVars, name) {
			continue
		}
		errs = append(errs, fmt.Errorf("unknown environment variable %s%s", name, suggest(name, valid)))
	}
	return errors.Join(errs...)
}

// suggest returns ` (did you mean "X"?)` for the valid key closest to k:
// first one equal to k once case and the separators '-', '_' and '.' are
// ignored (node_id, node.id, NodeId for node-id), else the nearest by edit
// distance if it is near enough to be a typo; "" when nothing is close.
func suggest(k string, valid []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("-", "", "_", "", ".", "").Replace(strings.ToLower(s))
	}
	best, bestDist := "", -1
	for _, v := range valid {
		d := editDistance(norm(k), norm(v))
		if bestDist < 0 || d < bestDist {
			best, bestDist = v, d
		}
	}
	// A third of the key's length: a typo or two, not another word.
	if best == "" || bestDist > max(2, len(norm(k))/3) {
		return " (no setting is close; sediment broker --help lists them)"
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
