package main

// Config hygiene: a misspelt key must not silently fall back to a default.
// `sediment broker` refuses to start when its YAML file has a key that is no
// setting, or when the environment has a SEDIMENT_* variable that names
// nothing, and says which valid key is closest.

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"
)

// otherSedimentVars are SEDIMENT_* variables that are not broker settings
// but are read by something else a broker's environment may well carry:
// the client commands (client.go; SEDIMENT_BROKERS is shown in the README
// next to `make run`) and the test and benchmark knobs of `make`.
// TestOtherSedimentVarsComplete keeps the list whole.
var otherSedimentVars = []string{
	"SEDIMENT_BROKERS", "SEDIMENT_TIMEOUT", "SEDIMENT_CLIENT_ID", "SEDIMENT_CLIENT_LOG_LEVEL",
	"SEDIMENT_SECURITY_PROTOCOL", "SEDIMENT_SASL_MECHANISM", "SEDIMENT_SASL_USERNAME", "SEDIMENT_SASL_PASSWORD", "SEDIMENT_SASL_TOKEN", "SEDIMENT_SASL_KERBEROS_SERVICE_NAME", "SEDIMENT_SASL_OAUTHBEARER_TOKEN_FILE", // client_security.go
	"SEDIMENT_SSL_CLIENT_CERT_FILE", "SEDIMENT_SSL_CLIENT_KEY_FILE",
	"SEDIMENT_ADMIN", // sediment tier status (--admin, the older name of --admin-address)
	"SEDIMENT_BENCH_KEYS", "SEDIMENT_BENCH_CHUNK", "SEDIMENT_BENCH_AHEAD", "SEDIMENT_BENCH_STREAMS",
	"SEDIMENT_BENCH_REPLAY_MB",
	"SEDIMENT_CHAOS_KILLS", "SEDIMENT_CHAOS_MOVES", "SEDIMENT_CHAOS_SEED", "SEDIMENT_COMPACTION_KILLS", "SEDIMENT_E2E_PIPELINE_RECORDS",
	"SEDIMENT_TIER_E2E_MB", "SEDIMENT_E2E_VERBOSE", "SEDIMENT_TEST_LOG", "SEDIMENT_FUZZ_STDERR",
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

// int16Settings are the int settings whose broker field is an int16; the
// other int settings are int32 fields (or plain ints kept small).
var int16Settings = []string{"default-replication-factor", "offsets-topic-replication-factor",
	"transaction-state-log-replication-factor", "transaction-state-log-min-isr"}

// checkValues returns an error naming each setting whose value, from
// whichever layer won (flag, environment, file), does not parse as the
// setting's type: an integer that is no integer or overflows its field, a
// bool that is no bool, a duration without a unit ("30" is not 30 seconds;
// only 0 may go without one). viper's typed getters would read all of
// these as zero. A value of its type must then keep its setting's
// enumeration or range (settingRules) and the settings' relations
// (crossRules).
func checkValues(v *viper.Viper, flags interface{ Changed(string) bool }) error {
	var errs []error
	for _, s := range brokerSettings {
		raw := v.Get(s.name)
		if raw == nil {
			continue
		}
		var err error
		if str, ok := raw.(string); ok && strings.TrimSpace(str) == "" {
			// Set but empty (an environment variable, a YAML ""):
			// no value of the type, and not the default either.
			switch s.def.(type) {
			case int, int64:
				err = fmt.Errorf("%q is empty, not an integer (unset it for the default)", str)
			case bool:
				err = fmt.Errorf("%q is empty, not a bool (unset it for the default)", str)
			case time.Duration:
				err = fmt.Errorf("%q is empty, not a duration (unset it for the default)", str)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", valueSource(v, flags, s.name), err))
				continue
			}
		}
		switch s.def.(type) {
		case string:
		case int:
			lo, hi := int64(math.MinInt32), int64(math.MaxInt32)
			if slices.Contains(int16Settings, s.name) {
				lo, hi = math.MinInt16, math.MaxInt16
			}
			err = checkInt(raw, lo, hi)
		case int64:
			err = checkInt(raw, math.MinInt64, math.MaxInt64)
		case bool:
			err = checkBool(raw)
		case time.Duration:
			err = checkDuration(raw)
		}
		if err == nil {
			// The value is of its type: then its enumeration or
			// range (config_rules.go).
			if rule := settingRules[s.name]; rule != nil {
				err = rule(v, s.name)
			}
		}
		if err == nil {
			continue
		}
		errs = append(errs, fmt.Errorf("%s: %w", valueSource(v, flags, s.name), err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, r := range crossRules {
		if lo, hi := v.GetDuration(r.low), v.GetDuration(r.high); lo > hi {
			errs = append(errs, fmt.Errorf("%s: %v is more than %s: %v (%s)", valueSource(v, flags, r.low), lo, valueSource(v, flags, r.high), hi, r.why))
		}
	}
	return errors.Join(errs...)
}

// valueSource names where setting name's value came from, in viper's
// order: its flag, its variable (set, even empty: AllowEmptyEnv), the
// config file, the default.
func valueSource(v *viper.Viper, flags interface{ Changed(string) bool }, name string) string {
	if flags.Changed(name) {
		return "--" + name
	}
	if _, ok := os.LookupEnv(envName(name)); ok {
		return envName(name)
	}
	if v.InConfig(name) {
		return "config " + v.ConfigFileUsed() + ": " + name
	}
	return name + " (default)"
}

func checkInt(raw any, lo, hi int64) error {
	var n int64
	switch x := raw.(type) {
	case int:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case uint64:
		if x > math.MaxInt64 {
			return fmt.Errorf("%d is out of range (%d to %d)", x, lo, hi)
		}
		n = int64(x)
	case float64:
		if x != math.Trunc(x) || x < math.MinInt64 || x >= math.MaxInt64 {
			return fmt.Errorf("%v is not an integer", x)
		}
		n = int64(x)
	case string:
		var err error
		if n, err = strconv.ParseInt(strings.TrimSpace(x), 10, 64); err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return fmt.Errorf("%q is out of range (%d to %d)", x, lo, hi)
			}
			return fmt.Errorf("%q is not an integer", x)
		}
	default:
		return fmt.Errorf("%v (%T) is not an integer", raw, raw)
	}
	if n < lo || n > hi {
		return fmt.Errorf("%d is out of range (%d to %d)", n, lo, hi)
	}
	return nil
}

// checkBool takes what strconv.ParseBool does (true, TRUE, t, 1, …), which
// flags and variables are parsed with, also as an unquoted YAML 1 or 0
// (viper reads those as ints); anything else (yes, on, 2) is refused.
func checkBool(raw any) error {
	switch x := raw.(type) {
	case bool:
		return nil
	case int:
		if x == 0 || x == 1 {
			return nil
		}
	case string:
		if _, err := strconv.ParseBool(strings.TrimSpace(x)); err != nil {
			return fmt.Errorf("%q is not a bool (want true or false)", x)
		}
		return nil
	}
	return fmt.Errorf("%v (%T) is not a bool (want true or false)", raw, raw)
}

func checkDuration(raw any) error {
	switch x := raw.(type) {
	case time.Duration:
		return nil
	case int, int64:
		if x == 0 || x == int64(0) {
			return nil
		}
		return fmt.Errorf("%v has no unit (write e.g. %vs or %vms)", x, x, x)
	case string:
		t := strings.TrimSpace(x)
		if t == "0" {
			return nil
		}
		if _, err := strconv.ParseFloat(t, 64); err == nil {
			return fmt.Errorf("%q has no unit (write e.g. %ss or %sms)", x, t, t)
		}
		if _, err := time.ParseDuration(t); err != nil {
			return fmt.Errorf("%q is not a duration (write e.g. 30s, 5m or 168h)", x)
		}
		return nil
	}
	return fmt.Errorf("%v (%T) is not a duration (write e.g. 30s, 5m or 168h)", raw, raw)
}
