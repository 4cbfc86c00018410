package broker

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// Topic configuration under Kafka's names. Every topic config a client may
// set is listed here with its type, its allowed values and its default
// (some defaults come from the broker's own settings). Create and alter
// validate against this table; DescribeConfigs reports from it.

type configType int8

const (
	cfgString configType = iota
	cfgInt
	cfgLong
	cfgDouble
	cfgBool
	cfgList
	cfgShort
)

// kafkaType is the DescribeConfigs v3+ config_type value.
func (t configType) kafkaType() int8 {
	switch t {
	case cfgBool:
		return 1
	case cfgString:
		return 2
	case cfgInt:
		return 3
	case cfgLong:
		return 5
	case cfgDouble:
		return 6
	case cfgList:
		return 7
	case cfgShort:
		return 4
	}
	return 0
}

type topicConfigDef struct {
	name string
	typ  configType
	min  float64 // for numbers
	max  float64
	// enum, if set, lists the allowed values (each element for lists).
	enum []string
	// def returns the default (from the broker config where Kafka does).
	def func(c *Config) string
	// brokerName is the broker-level setting the default comes from.
	brokerName string
	// brokerUnset is brokerName's value when the broker does not set it,
	// for the settings Kafka defines without a default of their own (the
	// value then comes from a coarser one: log.retention.hours,
	// log.roll.hours, log.roll.jitter.hours, log.flush.scheduler.interval.ms).
	// DescribeConfigs lists no synonym for that value, as Kafka's
	// ConfigHelper.configSynonyms keeps only the synonyms from brokerName
	// on and finds none for it.
	brokerUnset string
	doc         string
	// check, if set, validates the value instead of the type's rules.
	check func(v string) error
}

func constDef(v string) func(*Config) string { return func(*Config) string { return v } }

const maxLong = math.MaxInt64

var topicConfigDefs = func() map[string]*topicConfigDef {
	defs := []*topicConfigDef{
		{name: "cleanup.policy", typ: cfgList, enum: []string{"delete", "compact"}, def: constDef("delete"), brokerName: "log.cleanup.policy", doc: "delete and/or compact old segments"},
		{name: "compression.type", typ: cfgString, enum: []string{"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"}, def: constDef("producer"), brokerName: "compression.type", doc: "final compression of the topic's data: a codec recompresses batches in another one (producer: kept as sent)"},
		// KIP-390: the level of the rewrite a compression.type naming the
		// codec makes of a produced batch in another codec
		// (checkProducedRecords); the log cleaner rewrites a batch with
		// its own codec at the codec's default level, as Kafka's
		// (MemoryRecords.filterTo).
		{name: "compression.gzip.level", typ: cfgInt, def: constDef("-1"), brokerName: "compression.gzip.level", check: validateGzipLevel, doc: "gzip level where the broker compresses with gzip (1-9, -1: the codec's default)"},
		{name: "compression.lz4.level", typ: cfgInt, min: 1, max: 17, def: constDef("9"), brokerName: "compression.lz4.level", doc: "lz4 level where the broker compresses with lz4"},
		{name: "compression.zstd.level", typ: cfgInt, min: -131072, max: 22, def: constDef("3"), brokerName: "compression.zstd.level", doc: "zstd level where the broker compresses with zstd"},
		{name: "delete.retention.ms", typ: cfgLong, min: 0, max: maxLong, def: constDef("86400000"), brokerName: "log.cleaner.delete.retention.ms", doc: "how long tombstones are kept in compacted topics"},
		{name: "file.delete.delay.ms", typ: cfgLong, min: 0, max: maxLong, def: func(c *Config) string { return strconv.FormatInt(max(c.LogSegmentDeleteDelay, 0).Milliseconds(), 10) }, brokerName: "log.segment.delete.delay.ms", doc: "how long a deleted segment's files stay before they are removed"},
		{name: cfgFollowerThrottledReplicas, typ: cfgList, def: constDef(""), check: validateThrottledReplicas, doc: "replicas (partition:broker, or *) whose fetching the follower throttles (follower.replication.throttled.rate) while they are out of the ISR"},
		{name: "flush.messages", typ: cfgLong, min: 1, max: maxLong, def: constDef("9223372036854775807"), brokerName: "log.flush.interval.messages"},
		{name: "flush.ms", typ: cfgLong, min: 0, max: maxLong, def: constDef("9223372036854775807"), brokerName: "log.flush.interval.ms", brokerUnset: "9223372036854775807"},
		{name: "index.interval.bytes", typ: cfgInt, min: 0, max: math.MaxInt32, def: constDef("4096"), brokerName: "log.index.interval.bytes"},
		{name: cfgLeaderThrottledReplicas, typ: cfgList, def: constDef(""), check: validateThrottledReplicas, doc: "replicas (partition:broker, or *) whose replication the leader throttles (leader.replication.throttled.rate) while they are out of the ISR"},
		{name: "local.retention.bytes", typ: cfgLong, min: -2, max: maxLong, def: constDef("-2"), brokerName: "log.local.retention.bytes", doc: "local bytes kept once tiered (-2: retention.bytes)"},
		{name: "local.retention.ms", typ: cfgLong, min: -2, max: maxLong, def: constDef("-2"), brokerName: "log.local.retention.ms", doc: "local time kept once tiered (-2: retention.ms)"},
		{name: "max.compaction.lag.ms", typ: cfgLong, min: 1, max: maxLong, def: constDef("9223372036854775807"), brokerName: "log.cleaner.max.compaction.lag.ms"},
		{name: "max.message.bytes", typ: cfgInt, min: 0, max: math.MaxInt32, def: func(c *Config) string { return strconv.Itoa(int(c.MessageMaxBytes)) }, brokerName: "message.max.bytes", doc: "largest record batch the topic accepts"},
		// Kafka 4.0 kept it as a deprecated no-op (KAFKA-18269: no
		// record down-conversion since KIP-724), for removal in 5.0;
		// message.format.version and message.timestamp.difference.max.ms
		// it removed, and they are unknown here too.
		{name: "message.downconversion.enable", typ: cfgBool, def: constDef("true"), brokerName: "log.message.downconversion.enable", doc: "no-op, as in Kafka 4.0+: records are never down-converted"},
		{name: "message.timestamp.after.max.ms", typ: cfgLong, min: 0, max: maxLong, def: constDef("9223372036854775807"), brokerName: "log.message.timestamp.after.max.ms"},
		{name: "message.timestamp.before.max.ms", typ: cfgLong, min: 0, max: maxLong, def: constDef("9223372036854775807"), brokerName: "log.message.timestamp.before.max.ms"},
		{name: "message.timestamp.type", typ: cfgString, enum: []string{"CreateTime", "LogAppendTime"}, def: constDef("CreateTime"), brokerName: "log.message.timestamp.type"},
		{name: "min.cleanable.dirty.ratio", typ: cfgDouble, min: 0, max: 1, def: constDef("0.5"), brokerName: "log.cleaner.min.cleanable.ratio"},
		{name: "min.compaction.lag.ms", typ: cfgLong, min: 0, max: maxLong, def: constDef("0"), brokerName: "log.cleaner.min.compaction.lag.ms"},
		{name: "min.insync.replicas", typ: cfgInt, min: 1, max: math.MaxInt32, def: constDef("1"), brokerName: "min.insync.replicas"},
		{name: "preallocate", typ: cfgBool, def: constDef("false"), brokerName: "log.preallocate"},
		// KIP-950. Like remote.storage.enable, no broker-level default
		// (Kafka's LogConfig.CONFIGS_WITH_NO_SERVER_DEFAULTS).
		{name: "remote.log.copy.disable", typ: cfgBool, def: constDef("false"), doc: "stop uploading new segments; the remote log stays readable and retention keeps deleting from it"},
		{name: "remote.log.delete.on.disable", typ: cfgBool, def: constDef("false"), doc: "delete the remote log when remote.storage.enable turns false (required to turn it false)"},
		{name: "remote.storage.enable", typ: cfgBool, def: constDef("false"), doc: "tier sealed segments to the object store"},
		{name: "retention.bytes", typ: cfgLong, min: -1, max: maxLong, def: constDef("-1"), brokerName: "log.retention.bytes"},
		{name: "retention.ms", typ: cfgLong, min: -1, max: maxLong, def: func(c *Config) string { return strconv.FormatInt(c.LogRetentionMs, 10) }, brokerName: "log.retention.ms", brokerUnset: "604800000"},
		{name: "segment.bytes", typ: cfgInt, min: 14, max: math.MaxInt32, def: func(c *Config) string { return strconv.FormatInt(c.LogSegmentBytes, 10) }, brokerName: "log.segment.bytes"},
		{name: "segment.index.bytes", typ: cfgInt, min: 4, max: math.MaxInt32, def: constDef("10485760"), brokerName: "log.index.size.max.bytes"},
		{name: "segment.jitter.ms", typ: cfgLong, min: 0, max: maxLong, def: constDef("0"), brokerName: "log.roll.jitter.ms", brokerUnset: "0"},
		{name: "segment.ms", typ: cfgLong, min: 1, max: maxLong, def: constDef("604800000"), brokerName: "log.roll.ms", brokerUnset: "604800000"},
		{name: "unclean.leader.election.enable", typ: cfgBool, def: constDef("false"), brokerName: "unclean.leader.election.enable"},
	}
	m := make(map[string]*topicConfigDef, len(defs))
	for _, d := range defs {
		m[d.name] = d
	}
	return m
}()

var errInvalidConfig = errors.New("broker: invalid config")

// validateGzipLevel accepts what Kafka's gzip level validator does: 1 to 9,
// or -1 (the codec's default level).
func validateGzipLevel(v string) error {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return errors.New("not an integer")
	}
	if n != -1 && (n < 1 || n > 9) {
		return errors.New("must be in [1, 9] or -1")
	}
	return nil
}

// validateTopicConfig checks one name/value pair.
func validateTopicConfig(name string, value *string) error {
	d, ok := topicConfigDefs[name]
	if !ok {
		return fmt.Errorf("%w: unknown topic config %q", errInvalidConfig, name)
	}
	if value == nil {
		return fmt.Errorf("%w: null value for %q", errInvalidConfig, name)
	}
	v := strings.TrimSpace(*value)
	bad := func(why string) error {
		return fmt.Errorf("%w: invalid value %q for %s: %s", errInvalidConfig, *value, name, why)
	}
	if d.check != nil {
		if err := d.check(v); err != nil {
			return bad(err.Error())
		}
		return nil
	}
	switch d.typ {
	case cfgInt, cfgLong:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || (d.typ == cfgInt && (n > math.MaxInt32 || n < math.MinInt32)) {
			return bad("not an integer")
		}
		if float64(n) < d.min || float64(n) > d.max {
			return bad(fmt.Sprintf("must be in [%s, %s]", intBound(d.min), intBound(d.max)))
		}
	case cfgDouble:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || f < d.min || f > d.max {
			return bad(fmt.Sprintf("must be a number in [%v, %v]", d.min, d.max))
		}
	case cfgBool:
		if !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
			return bad("must be true or false")
		}
	case cfgString:
		if len(d.enum) > 0 && !containsStr(d.enum, v) {
			return bad("must be one of " + strings.Join(d.enum, ", "))
		}
	case cfgList:
		if v == "" {
			return bad("empty list")
		}
		for _, e := range strings.Split(v, ",") {
			if !containsStr(d.enum, strings.TrimSpace(e)) {
				return bad("elements must be among " + strings.Join(d.enum, ", "))
			}
		}
	}
	return nil
}

// validateTopicConfigSet checks the rules between a topic's configs that
// Kafka's LogConfig.validateTopicLogConfigValues applies to the whole set a
// create or an alter leaves (broker defaults for what the topic does not
// set): min.compaction.lag.ms ≤ max.compaction.lag.ms; for tiered topics
// local retention within the total one, and equal to it while copying is
// off; remote storage turned off only with remote.log.delete.on.disable.
// t is the topic before (nil on create), next its overrides after. Each
// value is already valid on its own (validateTopicConfig).
func (b *Broker) validateTopicConfigSet(t *metadata.Topic, next map[string]string) error {
	isTrue := func(set map[string]string, name string) bool {
		v, _ := b.topicConfigValue(set, name)
		return v == "true"
	}
	if lo, hi := configInt(b, next, "min.compaction.lag.ms"), configInt(b, next, "max.compaction.lag.ms"); lo > hi {
		return fmt.Errorf("%w: conflict topic config setting min.compaction.lag.ms (%d) > max.compaction.lag.ms (%d)", errInvalidConfig, lo, hi)
	}
	if isTrue(next, "remote.storage.enable") {
		// KIP-405: local retention is within the total one.
		for _, unit := range []string{"bytes", "ms"} {
			local, total := configInt(b, next, "local.retention."+unit), configInt(b, next, "retention."+unit)
			if total == -1 || local == -2 {
				continue
			}
			if local == -1 {
				return fmt.Errorf("%w: invalid value -1 for local.retention.%s: Value must not be -1 as retention.%s value is set as %d", errInvalidConfig, unit, unit, total)
			}
			if local > total {
				return fmt.Errorf("%w: invalid value %d for local.retention.%s: Value must not be more than retention.%s property value: %d", errInvalidConfig, local, unit, unit, total)
			}
		}
		// KIP-950: with copying off, nothing more reaches the bucket, so
		// local retention must be the total one.
		if isTrue(next, "remote.log.copy.disable") {
			for _, unit := range []string{"bytes", "ms"} {
				local, total := configInt(b, next, "local.retention."+unit), configInt(b, next, "retention."+unit)
				if local != -2 && local != total {
					return fmt.Errorf("%w: When `remote.log.copy.disable` is set to true, the `local.retention.%s` and `retention.%s` must be set to the identical value because there will be no more logs copied to the remote storage", errInvalidConfig, unit, unit)
				}
			}
		}
		return nil
	}
	// Turning remote storage off (Kafka 3.9+, KRaft): only together with
	// remote.log.delete.on.disable=true. Kafka compares with the topic's
	// own previous value only, as here (there is no broker default).
	if t == nil || t.Configs["remote.storage.enable"] != "true" {
		return nil
	}
	if !isTrue(next, "remote.log.delete.on.disable") {
		return fmt.Errorf("%w: It is invalid to disable remote storage without deleting remote data. "+
			"If you want to keep the remote data and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. "+
			"If you want to disable remote storage and delete all remote data, please set `remote.storage.enable=false,remote.log.delete.on.disable=true`", errInvalidConfig)
	}
	// Each partition's leader then deletes its remote log and the
	// partition goes on from its local log start (tiering/disable.go).
	return nil
}

// canonicalTopicConfig is the form a validated topic config value is
// stored in: the value as Kafka's ConfigDef parses it (surrounding spaces
// dropped, booleans in lower case, list elements trimmed), so that every
// reader of the stored value (strconv, == "true", …) sees what validation
// accepted; a stored " 1000" or "TRUE" would otherwise be accepted and then
// ignored in favour of the default.
func canonicalTopicConfig(name, value string) string {
	v := strings.TrimSpace(value)
	d := topicConfigDefs[name]
	if d == nil {
		return v
	}
	switch d.typ {
	case cfgBool:
		return strings.ToLower(v)
	case cfgList:
		parts := strings.Split(v, ",")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		return strings.Join(parts, ",")
	}
	return v
}

func containsStr(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

// dynamicLogConfigs maps the broker-level name of every topic config that
// has one (log.retention.ms, log.cleanup.policy, message.max.bytes,
// min.insync.replicas, …) to that topic config. As Kafka's DynamicLogConfig
// (KIP-226) they are dynamic broker configs: set by AlterConfigs or
// IncrementalAlterConfigs on a broker resource (one broker, or "" for the
// cluster default) and stored in the metadata log, they are the default of
// every topic that does not set the topic config itself, on the brokers
// they apply to, from the next metadata version on (open logs take them as
// they take an altered topic config: store.applyLogConfigs).
var dynamicLogConfigs = func() map[string]*topicConfigDef {
	m := make(map[string]*topicConfigDef)
	for _, d := range topicConfigDefs {
		if d.brokerName != "" {
			m[d.brokerName] = d
		}
	}
	return m
}()

// topicConfigValue returns a topic's effective value and its source: the
// topic's own, else the dynamic broker config of the same setting (this
// broker's, else the cluster default; unclean.leader.election.enable is
// cluster-wide only, which the controller reads too), else the broker's
// static default.
func (b *Broker) topicConfigValue(set map[string]string, name string) (string, kmsg.ConfigSource) {
	if v, ok := set[name]; ok {
		return v, kmsg.ConfigSourceDynamicTopicConfig
	}
	d := topicConfigDefs[name]
	if d == nil {
		return "", kmsg.ConfigSourceUnknown
	}
	if d.brokerName != "" {
		if v, src, ok := b.dynamicBrokerValue(b.meta.State(), d.brokerName); ok {
			return v, src
		}
	}
	return d.def(&b.cfg), b.staticSource(d)
}

// builtinConfig is a Config with nothing set: the built-in defaults.
var builtinConfig = func() Config {
	var c Config
	c.setDefaults()
	return c
}()

// staticSource is the source of the default of topic config d when no
// dynamic config sets it: STATIC_BROKER_CONFIG when it comes from one of
// the broker's own settings (log.retention.ms for retention.ms) that the
// operator gave (Config.StaticConfigs) or that differs from its built-in
// default, as Kafka reports a value from server.properties; else
// DEFAULT_CONFIG.
func (b *Broker) staticSource(d *topicConfigDef) kmsg.ConfigSource {
	if d.brokerName == "" || !staticBrokerSetting[d.brokerName] {
		return kmsg.ConfigSourceDefaultConfig
	}
	if b.cfg.StaticConfigs[d.brokerName] || d.def(&b.cfg) != d.def(&builtinConfig) {
		return kmsg.ConfigSourceStaticBrokerConfig
	}
	return kmsg.ConfigSourceDefaultConfig
}

// staticBrokerSetting names the broker's own settings (brokerConfigs) by
// their Kafka names.
var staticBrokerSetting = func() map[string]bool {
	m := map[string]bool{}
	for _, bc := range (&Broker{}).brokerConfigs() {
		m[bc.name] = true
	}
	return m
}()

// dynamicBrokerValue returns this broker's dynamic value of a broker config,
// else the cluster default's.
func (b *Broker) dynamicBrokerValue(st *metadata.State, name string) (string, kmsg.ConfigSource, bool) {
	if v, ok := st.BrokerConfigs(b.nodeName)[name]; ok {
		return v, kmsg.ConfigSourceDynamicBrokerConfig, true
	}
	if v, ok := st.BrokerConfigs("")[name]; ok {
		return v, kmsg.ConfigSourceDynamicDefaultBrokerConfig, true
	}
	return "", kmsg.ConfigSourceUnknown, false
}

func sortedConfigNames() []string {
	names := make([]string, 0, len(topicConfigDefs))
	for n := range topicConfigDefs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Topic names: Kafka's rules (at most 249 characters of [a-zA-Z0-9._-], not
// "." or "..").
func validTopicName(name string) error {
	switch {
	case name == "":
		return errors.New("topic name is empty")
	case name == "." || name == "..":
		return errors.New(`topic name cannot be "." or ".."`)
	case len(name) > 249:
		return errors.New("topic name is longer than 249 characters")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q contains a character other than ASCII alphanumerics, '.', '_' and '-'", name)
		}
	}
	return nil
}

// intBound prints an integer config's bound as an integer ("2147483647",
// not "2.147483647e+09").
func intBound(f float64) string {
	switch {
	case f >= math.MaxInt64:
		return strconv.FormatInt(math.MaxInt64, 10)
	case f <= math.MinInt64:
		return strconv.FormatInt(math.MinInt64, 10)
	}
	return strconv.FormatInt(int64(f), 10)
}
