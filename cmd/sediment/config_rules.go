package main

// The allowed values of the broker settings that have an enumeration or a
// range: checkValues refuses anything else before the broker opens
// anything, naming the setting and what it takes. Without these an unknown
// log-flush became fsync-on-commit in the log while the lone-ISR fsync wait
// (which checks for "commit") was skipped, and a zero or negative number
// silently became the default (broker.Config's zero values mean "default").
// The bounds are the matching topic config's (configs.go in broker/) or
// Kafka's broker config validator (ConfigDef's atLeast, between, in) where
// there is one, narrowed where Sediment cannot carry a value: a 0 that the
// broker would read as its default is refused rather than taken.

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/sediment-io/sediment/broker"
	"github.com/sediment-io/sediment/compaction"
)

// settingRule checks one setting's value (already known to parse as its
// type) and says what is wrong with it.
type settingRule func(v *viper.Viper, name string) error

const noMax = math.MaxInt64

// intIn allows lo to hi (noMax: no upper bound beyond the type's).
func intIn(lo, hi int64) settingRule {
	return func(v *viper.Viper, name string) error {
		if n := v.GetInt64(name); n < lo || n > hi {
			return fmt.Errorf("%d is out of range (want %s)", n, intRange(lo, hi))
		}
		return nil
	}
}

func intRange(lo, hi int64) string {
	if hi == noMax {
		return fmt.Sprintf("%d or more", lo)
	}
	return fmt.Sprintf("%d to %d", lo, hi)
}

// intInNotZero allows lo to hi but 0, which the broker reads as its default.
func intInNotZero(lo, hi int64, zero string) settingRule {
	return func(v *viper.Viper, name string) error {
		if n := v.GetInt64(name); n < lo || n > hi || n == 0 {
			return fmt.Errorf("%d is out of range (want %s, not 0: %s)", n, intRange(lo, hi), zero)
		}
		return nil
	}
}

// durIn allows lo to hi (0 hi: no upper bound); positive: lo is exclusive 0.
func durIn(lo, hi time.Duration) settingRule {
	return func(v *viper.Viper, name string) error {
		if d := v.GetDuration(name); d < lo || hi > 0 && d > hi {
			want := fmt.Sprintf("%v or more", lo)
			if hi > 0 {
				want = fmt.Sprintf("%v to %v", lo, hi)
			}
			return fmt.Errorf("%v is out of range (want %s)", d, want)
		}
		return nil
	}
}

// positive allows durations above 0.
func positive() settingRule {
	return func(v *viper.Viper, name string) error {
		if d := v.GetDuration(name); d <= 0 {
			return fmt.Errorf("%v is out of range (want more than 0)", d)
		}
		return nil
	}
}

// notZero allows any duration but 0, which the broker reads as its
// default; negative means what negative says.
func notZero(negative string) settingRule {
	return func(v *viper.Viper, name string) error {
		if d := v.GetDuration(name); d == 0 {
			return fmt.Errorf("0 is out of range (want more than 0, or negative: %s)", negative)
		}
		return nil
	}
}

// oneOf allows the values given, in any case, with surrounding spaces.
func oneOf(values ...string) settingRule {
	return func(v *viper.Viper, name string) error {
		s := v.GetString(name)
		for _, a := range values {
			if strings.EqualFold(strings.TrimSpace(s), a) {
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %s", s, quoteEmpty(values))
	}
}

// listOf allows a comma-separated list of one or more of the values given,
// in any case.
func listOf(values ...string) settingRule {
	return func(v *viper.Viper, name string) error {
		s := v.GetString(name)
		n := 0
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e == "" {
				continue
			}
			n++
			ok := false
			for _, a := range values {
				ok = ok || strings.EqualFold(e, a)
			}
			if !ok {
				return fmt.Errorf("%q in %q is not one of %s", e, s, quoteEmpty(values))
			}
		}
		if n == 0 {
			return fmt.Errorf("%q lists none (want one or more of %s, comma-separated)", s, quoteEmpty(values))
		}
		return nil
	}
}

func quoteEmpty(values []string) string {
	out := make([]string, len(values))
	for i, a := range values {
		out[i] = a
		if a == "" {
			out[i] = `"" (empty)`
		}
	}
	return strings.Join(out, ", ")
}

// nonEmpty refuses an empty string, which the broker would read as its
// default.
func nonEmpty() settingRule {
	return func(v *viper.Viper, name string) error {
		if strings.TrimSpace(v.GetString(name)) == "" {
			return fmt.Errorf("%q is empty (want a value; unset it for the default)", v.GetString(name))
		}
		return nil
	}
}

var saslMechanisms = []string{broker.MechanismPlain, broker.MechanismSCRAMSHA256, broker.MechanismSCRAMSHA512, broker.MechanismOAuthBearer, broker.MechanismGSSAPI}

// settingRules are the checks beyond the type, by setting name. Every
// broker setting is either here or in freeSettings (TestSettingRulesCover).
var settingRules = map[string]settingRule{
	"node-id":                                intIn(0, math.MaxInt32),
	"cluster-id":                             nonEmpty(),
	"data-dir":                               nonEmpty(),
	"listeners":                              nonEmpty(),
	"raft-address":                           nonEmpty(),
	"join-timeout":                           positive(),
	"replica-lag-time-max":                   positive(),
	"replica-fetch-wait-max":                 positive(), // and at most replica-lag-time-max (crossRules)
	"leader-imbalance-check-interval":        positive(), // Kafka: atLeast(1) s
	"leader-imbalance-per-broker-percentage": intIn(0, 100),
	"stray-log-delete-delay":                 notZero("never"),
	"deleted-log-delete-delay":               notZero("at once"),
	"log-level":                              oneOf("debug", "info", "warn", "error"),
	"log-format":                             oneOf("text", "json"),
	"num-partitions":                         intIn(1, noMax), // Kafka: atLeast(1)
	"default-replication-factor":             intIn(1, noMax),
	// Kafka: atLeast(0), as the topic's max.message.bytes; 0 would read
	// as the default here.
	"message-max-bytes": intIn(1, noMax),
	// segment.bytes' and Kafka's log.segment.bytes' bounds (an INT,
	// atLeast(LegacyRecord.RECORD_OVERHEAD_V0)).
	"log-segment-bytes": intIn(14, math.MaxInt32),
	// retention.ms' bounds (-1: forever), but 0, the broker's "default".
	"log-retention-ms":         intInNotZero(-1, noMax, "it would read as the default 7 days"),
	"log-segment-delete-delay": durIn(0, 0), // file.delete.delay.ms: atLeast(0)
	"log-flush":                oneOf("commit", "interval", "os"),
	"log-flush-interval":       positive(),
	"socket-request-max-bytes": intIn(1, noMax), // Kafka: atLeast(1)
	"queued-max-request-bytes": intIn(1, noMax),
	"fetch-max-bytes":          intIn(1024, broker.MaxFetchMaxBytes), // Kafka: atLeast(1024); above 1 GiB an answer could pass 2 GiB
	"connections-max-idle":     notZero("never"),
	"max-connections-per-ip":   intIn(0, noMax), // Kafka: atLeast(0)
	"max-connections":          intIn(0, noMax),
	// Kafka: atLeast(0).
	"max-connection-creation-rate":           intIn(0, noMax),
	"connections-max-reauth":                 durIn(0, 0),
	"producer-id-expiration":                 positive(), // Kafka: atLeast(1)
	"producer-id-expiration-check-interval":  positive(),
	"quota-window-num":                       intIn(1, noMax), // Kafka: atLeast(1)
	"quota-window-size":                      positive(),
	"delegation-token-max-lifetime":          positive(), // Kafka: atLeast(1)
	"delegation-token-expiry-time":           positive(),
	"delegation-token-expiry-check-interval": positive(),
	"shutdown-timeout":                       positive(),
	"offsets-topic-num-partitions":           intIn(1, noMax), // Kafka: atLeast(1)
	"offsets-topic-replication-factor":       intIn(1, noMax), // Kafka: atLeast(1)
	"group-initial-rebalance-delay":          durIn(0, 0),
	"group-min-session-timeout":              positive(), // and at most the max (crossRules)
	"group-max-session-timeout":              positive(),
	"group-max-size":                         intIn(0, noMax), // 0: unlimited
	"group-consumer-migration-policy":        oneOf("bidirectional", "upgrade", "downgrade", "disabled"),
	"offsets-retention":                      positive(), // Kafka: atLeast(1) min
	// The dynamic log.cleaner.* bounds (broker/dynamic_configs.go).
	"log-cleaner-threads":                      intIn(1, compaction.MaxCleanerThreads),
	"log-cleaner-dedupe-buffer-size":           intIn(1<<20, 1<<40),
	"log-cleaner-io-max-bytes-per-second":      intIn(0, noMax),
	"log-cleaner-backoff":                      durIn(time.Millisecond, 24*time.Hour),
	"log-retention-check-interval":             positive(), // Kafka: atLeast(1)
	"tiered-compaction-interval":               notZero("never"),
	"lease-ttl":                                positive(),
	"transaction-state-log-num-partitions":     intIn(1, noMax), // Kafka: atLeast(1), and the six below
	"transaction-state-log-replication-factor": intIn(1, noMax),
	"transaction-state-log-min-isr":            intIn(1, noMax),
	"transaction-max-timeout":                  positive(),
	"transaction-abort-interval":               positive(),
	"transactional-id-expiration":              positive(),
	"transaction-remove-expired-interval":      positive(),
	// security.go
	"ssl-client-auth":                        oneOf("none", "requested", "required"), // Kafka: in(...)
	"sasl-enabled-mechanisms":                listOf(saslMechanisms...),
	"sasl-oauthbearer-jwks-endpoint-refresh": positive(),
	"sasl-oauthbearer-clock-skew":            positive(),
	"inter-broker-sasl-mechanism":            oneOf(saslMechanisms...),
	"ssl-endpoint-identification-algorithm":  oneOf("https", "", "none"),
	"raft-security-protocol":                 oneOf("PLAINTEXT", "SSL"),
	// tier.go
	"tier-cache-bytes":      intIn(1, noMax),
	"tier-orphan-grace":     positive(),
	"tier-clean-interval":   positive(),
	"remote-fetch-max-wait": positive(),
	"remote-fetch-timeout":  positive(),
}

// freeSettings take any value of their type, or are parsed (and refused
// with their own message) where they are read: addresses, lists of
// addresses, names, paths, rules, booleans.
var freeSettings = []string{
	"advertised-listeners", "admin-address", "voters", "broker-rack", "peer-addresses",
	"auto-leader-rebalance-enable", "auto-create-topics-enable", "max-connections-per-ip-overrides",
	"delegation-token-secret-key",
	"listener-security-protocol-map", "ssl-cert-file", "ssl-key-file", "ssl-ca-file",
	"sasl-kerberos-keytab", "sasl-kerberos-service-name", "sasl-kerberos-krb5-conf",
	"sasl-kerberos-principal-to-local-rules", "sasl-oauthbearer-jwks-endpoint-url",
	"sasl-oauthbearer-expected-issuer", "sasl-oauthbearer-expected-audience",
	"sasl-oauthbearer-sub-claim-name", "sasl-oauthbearer-unsecured", "inter-broker-sasl-username",
	"inter-broker-sasl-password", "sasl-oauthbearer-token-endpoint-url", "sasl-oauthbearer-scope",
	"ssl-principal-mapping-rules", "authorizer-enabled", "super-users", "allow-everyone-if-no-acl-found",
	"tiering", "bucket-dir", "s3-bucket", "s3-endpoint", "s3-region", "s3-prefix", "s3-path-style",
	"tier-cache-dir",
}

// crossRules relate two settings: the first must be at most the second.
var crossRules = []struct{ low, high, why string }{
	// Kafka's KafkaConfig requirement, "to prevent frequent changes in ISR".
	{"replica-fetch-wait-max", "replica-lag-time-max", "a follower's long poll must end before it would leave the ISR"},
	{"group-min-session-timeout", "group-max-session-timeout", "the bounds of a member's session timeout"},
}
