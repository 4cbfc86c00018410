package broker

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/compaction"
	"github.com/sediment-io/sediment/metadata"
)

// Dynamic broker configs (KIP-226): AlterConfigs and IncrementalAlterConfigs
// on a broker resource, one broker (its id) or the cluster default (the
// empty name), store them in the metadata log, so every broker sees the same
// and they survive restarts. Three kinds:
//   - the replication throttle rates (replication_throttle.go),
//     unclean.leader.election.enable (cluster-wide only: the controller
//     reads it), the log cleaner's settings (log.cleaner.threads,
//     .dedupe.buffer.size, .io.max.bytes.per.second, .backoff.ms) and the
//     connection limits (max.connections, max.connections.per.ip and its
//     overrides, max.connection.creation.rate);
//   - every topic config's broker-level default (configs.go
//     dynamicLogConfigs: log.retention.ms, log.cleanup.policy,
//     message.max.bytes, min.insync.replicas, …), validated as the topic
//     config, taking effect on every topic that does not set its own;
//   - any other name that is not one of the broker's static settings:
//     stored and listed, with no effect here, as Kafka keeps dynamic configs
//     it does not know (tools and tests set per-listener SASL settings,
//     say, which Kafka reconfigures and Sediment has no use for).
//
// The broker's own settings (listeners, node.id, log.dirs, …) are static:
// altering one is INVALID_REQUEST, as Kafka's "Cannot update these configs
// dynamically".

// cfgUncleanLeaderElection is a dynamic broker config, cluster-wide only:
// the controller reads the cluster default (metadata's uncleanAllowed) for
// topics that do not set it, at its next election.
const cfgUncleanLeaderElection = "unclean.leader.election.enable"

// dynamicBrokerConfigs documents the dynamic broker configs that are not
// (only) a topic config's default.
var dynamicBrokerConfigs = map[string]string{
	cfgLeaderThrottledRate:     "bytes per second a broker serves to throttled follower replicas (leader.replication.throttled.replicas), dynamic",
	cfgFollowerThrottledRate:   "bytes per second a broker fetches for its throttled replicas (follower.replication.throttled.replicas), dynamic",
	cfgUncleanLeaderElection:   "elect a leader outside the ISR when no in-sync replica is alive, for topics that do not set it (may lose acknowledged records), dynamic, cluster-wide",
	cfgCleanerThreads:          "log cleaner goroutines (--log-cleaner-threads), dynamic",
	cfgCleanerDedupeBuffer:     "bytes of each cleaner goroutine's key map; more dirty keys are cleaned in several passes (--log-cleaner-dedupe-buffer-size), dynamic",
	cfgCleanerIOMax:            "read plus written bytes per second of all cleaners, 0 for no limit (--log-cleaner-io-max-bytes-per-second), dynamic",
	cfgCleanerBackoff:          "how long an idle log cleaner waits before it looks for dirty logs again (--log-cleaner-backoff), dynamic",
	cfgMaxConnections:          "connections the client listeners accept at once, 0 for no limit (--max-connections), dynamic",
	cfgMaxConnectionsPerIP:     "connections one client address may have open, 0 for no limit (--max-connections-per-ip), dynamic",
	cfgMaxConnectionsOverrides: "ip:count pairs overriding max.connections.per.ip for those addresses (--max-connections-per-ip-overrides; dynamic values take IP addresses only), dynamic",
	cfgMaxConnectionRate:       "new connections per second the client listeners accept; beyond it accepting waits (--max-connection-creation-rate; 0 for no limit), dynamic",
}

// The log cleaner's settings (cleaner.go), dynamic as in Kafka
// (LogCleaner's reconfigurable configs): applied to the running cleaner
// (compaction.Manager.Reconfigure) at the next metadata version.
const (
	cfgCleanerThreads      = "log.cleaner.threads"
	cfgCleanerDedupeBuffer = "log.cleaner.dedupe.buffer.size"
	cfgCleanerIOMax        = "log.cleaner.io.max.bytes.per.second"
	cfgCleanerBackoff      = "log.cleaner.backoff.ms"
)

// cleanerSettings returns the log cleaner's settings in effect on this
// broker: each dynamic value (this broker's, else the cluster default's),
// else the broker's own setting; with each its value as DescribeConfigs
// shows it and its source.
func (b *Broker) cleanerSettings(st *metadata.State) (compaction.CleanerConfig, []dynamicSetting) {
	cc := b.cfg.Cleaner
	// The broker's settings as given, with the Manager's defaults for
	// what Config leaves zero.
	out := compaction.CleanerConfig{Threads: cc.Threads, DedupeBufferBytes: cc.DedupeBufferSize,
		IOMaxBytesPerSecond: cc.IOMaxBytesPerSecond, Backoff: cc.Backoff}.WithDefaults()
	def := compaction.CleanerConfig{}.WithDefaults()
	settings := []dynamicSetting{
		b.staticSetting(cfgCleanerThreads, strconv.Itoa(out.Threads), strconv.Itoa(def.Threads), cfgInt),
		b.staticSetting(cfgCleanerDedupeBuffer, strconv.FormatInt(out.DedupeBufferBytes, 10), strconv.FormatInt(def.DedupeBufferBytes, 10), cfgLong),
		b.staticSetting(cfgCleanerIOMax, strconv.FormatFloat(out.IOMaxBytesPerSecond, 'f', -1, 64), strconv.FormatFloat(def.IOMaxBytesPerSecond, 'f', -1, 64), cfgDouble),
		b.staticSetting(cfgCleanerBackoff, strconv.FormatInt(out.Backoff.Milliseconds(), 10), strconv.FormatInt(def.Backoff.Milliseconds(), 10), cfgLong),
	}
	for i := range settings {
		s := &settings[i]
		v, src, ok := b.dynamicBrokerValue(st, s.name)
		if !ok {
			continue
		}
		// Stored values were validated; one that does not parse (an
		// older broker's) leaves the setting as it is.
		switch s.name {
		case cfgCleanerThreads:
			n, err := strconv.Atoi(v)
			if err != nil {
				continue
			}
			out.Threads = n
		case cfgCleanerDedupeBuffer:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			out.DedupeBufferBytes = n
		case cfgCleanerIOMax:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				continue
			}
			out.IOMaxBytesPerSecond = f
		case cfgCleanerBackoff:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			out.Backoff = time.Duration(n) * time.Millisecond
		}
		s.value, s.source = v, src
	}
	return out, settings
}

// staticSetting is a dynamic broker setting as the broker's own config
// sets it: STATIC_BROKER_CONFIG when the operator gave it
// (Config.StaticConfigs) or it is not builtin, else DEFAULT_CONFIG, as
// Kafka tells a value from server.properties from its default.
func (b *Broker) staticSetting(name, value, builtin string, typ configType) dynamicSetting {
	src := kmsg.ConfigSourceDefaultConfig
	if b.cfg.StaticConfigs[name] || value != builtin {
		src = kmsg.ConfigSourceStaticBrokerConfig
	}
	return dynamicSetting{name, value, src, typ}
}

// The connection limits (conn_limits.go), dynamic as in Kafka (KIP-308,
// KIP-402): applied to new connections from the next metadata version.
const (
	cfgMaxConnections          = "max.connections"
	cfgMaxConnectionsPerIP     = "max.connections.per.ip"
	cfgMaxConnectionsOverrides = "max.connections.per.ip.overrides"
	cfgMaxConnectionRate       = "max.connection.creation.rate"
)

// connectionSettings returns the connection limits in effect on this
// broker (dynamic, else the broker's own), as cleanerSettings does.
func (b *Broker) connectionSettings(st *metadata.State) (connSettings, []dynamicSetting) {
	cs := connSettings{perIP: max(b.cfg.MaxConnectionsPerIP, 0), overrides: b.cfg.MaxConnectionsPerIPOverrides,
		max: max(b.cfg.MaxConnections, 0), creationRate: max(b.cfg.MaxConnectionCreationRate, 0)}
	settings := []dynamicSetting{
		b.staticSetting(cfgMaxConnections, strconv.Itoa(cs.max), "0", cfgInt),
		b.staticSetting(cfgMaxConnectionsPerIP, strconv.Itoa(cs.perIP), "0", cfgInt),
		b.staticSetting(cfgMaxConnectionsOverrides, formatConnectionOverrides(cs.overrides), "", cfgString),
		b.staticSetting(cfgMaxConnectionRate, strconv.Itoa(cs.creationRate), "0", cfgInt),
	}
	for i := range settings {
		ds := &settings[i]
		v, src, ok := b.dynamicBrokerValue(st, ds.name)
		if !ok {
			continue
		}
		switch ds.name {
		case cfgMaxConnections, cfgMaxConnectionsPerIP, cfgMaxConnectionRate:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				continue
			}
			switch ds.name {
			case cfgMaxConnections:
				cs.max = n
			case cfgMaxConnectionsPerIP:
				cs.perIP = n
			default:
				cs.creationRate = n
			}
		case cfgMaxConnectionsOverrides:
			m, err := parseIPOverrides(v)
			if err != nil {
				continue
			}
			cs.overrides = m
		}
		ds.value, ds.source = v, src
	}
	return cs, settings
}

// parseIPOverrides is ParseConnectionOverrides for dynamic values: IP
// addresses only, so that applying them never waits for a name lookup.
func parseIPOverrides(v string) (map[string]int, error) {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if i := strings.LastIndex(f, ":"); i > 0 && net.ParseIP(strings.Trim(f[:i], "[]")) == nil {
			return nil, fmt.Errorf("max connections per ip override %q: a dynamic override takes an IP address, not a host name", f)
		}
	}
	return ParseConnectionOverrides(v)
}

// applyDynamicSettings gives the log cleaner and the connection limits the
// values of metadata state st (at each metadata version).
func (b *Broker) applyDynamicSettings(st *metadata.State) {
	if b.cleaner != nil {
		cc, _ := b.cleanerSettings(st)
		b.cleaner.m.Reconfigure(cc)
	}
	if b.limits != nil {
		cs, _ := b.connectionSettings(st)
		b.limits.set(cs)
	}
}

// dynamicSetting is one dynamic broker config in effect, for DescribeConfigs.
type dynamicSetting struct {
	name, value string
	source      kmsg.ConfigSource
	typ         configType
}

// validateCleanerSetting checks a value of one of the log cleaner's
// dynamic settings.
func validateCleanerSetting(name, v string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: invalid value %q for %s: %s", errInvalidConfig, v, name, why)
	}
	switch name {
	case cfgCleanerThreads:
		if n, err := strconv.Atoi(v); err != nil || n < 1 || n > compaction.MaxCleanerThreads {
			return bad(fmt.Sprintf("must be an integer in [1, %d]", compaction.MaxCleanerThreads))
		}
	case cfgCleanerDedupeBuffer:
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 1<<20 || n > 1<<40 {
			return bad("must be a number of bytes in [1 MiB, 1 TiB]")
		}
	case cfgCleanerIOMax:
		if f, err := strconv.ParseFloat(v, 64); err != nil || math.IsNaN(f) || f < 0 {
			return bad("must be a non-negative number of bytes per second (0: no limit)")
		}
	case cfgCleanerBackoff:
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 1 || n > int64(24*time.Hour/time.Millisecond) {
			return bad("must be milliseconds in [1, 86400000]")
		}
	}
	return nil
}

// staticBrokerConfigNames are the broker settings that only its own config
// sets: the Kafka names of its settings (docs/configuration.md; some are
// dynamic in Kafka, static here), those DescribeConfigs lists read-only,
// and Kafka's static ones that a client might try to change.
var staticBrokerConfigNames = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range []string{
		"node.id", "broker.id", "process.roles", "log.dir", "log.dirs", "controller.quorum.voters",
		"controller.listener.names", "listeners", "advertised.listeners", "listener.security.protocol.map",
		"inter.broker.listener.name", "security.inter.broker.protocol", "broker.rack",
		"ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.keystore.type",
		"ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type", "ssl.client.auth",
		"ssl.endpoint.identification.algorithm", "ssl.principal.mapping.rules",
		"sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol",
		"sasl.kerberos.service.name", "sasl.kerberos.principal.to.local.rules",
		"sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.jwks.endpoint.refresh.ms",
		"sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.expected.audience",
		"sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.clock.skew.seconds",
		"authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found",
		"delegation.token.secret.key", "delegation.token.master.key",
		"replica.lag.time.max.ms", "replica.fetch.wait.max.ms", "auto.leader.rebalance.enable",
		"leader.imbalance.check.interval.seconds", "leader.imbalance.per.broker.percentage",
		"auto.create.topics.enable", "num.partitions", "default.replication.factor",
		"socket.request.max.bytes", "queued.max.request.bytes", "connections.max.idle.ms",
		"connections.max.reauth.ms", "producer.id.expiration.ms", "producer.id.expiration.check.interval.ms",
		"quota.window.num", "quota.window.size.seconds", "offsets.topic.num.partitions",
		"offsets.topic.replication.factor", "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
		"group.initial.rebalance.delay.ms", "group.min.session.timeout.ms", "group.max.session.timeout.ms",
		"group.max.size", "offsets.retention.minutes", "log.retention.check.interval.ms",
		"transaction.state.log.num.partitions", "transaction.max.timeout.ms",
		"transaction.abort.timed.out.transaction.cleanup.interval.ms", "transactional.id.expiration.ms",
		"transaction.remove.expired.transaction.cleanup.interval.ms", "remote.log.storage.system.enable",
	} {
		m[n] = true
	}
	for _, bc := range (&Broker{}).brokerConfigs() {
		if dynamicLogConfigs[bc.name] == nil {
			m[bc.name] = true
		}
	}
	return m
}()

// validateDynamicBrokerConfig checks one value of a dynamic broker config
// for the broker resource res (a broker id, or "" for the cluster).
func validateDynamicBrokerConfig(res, name string, value *string) error {
	if err := checkDynamicBrokerName(res, name); err != nil {
		return err
	}
	if value == nil {
		return fmt.Errorf("%w: null value for %q", errInvalidConfig, name)
	}
	v := strings.TrimSpace(*value)
	switch {
	case name == cfgLeaderThrottledRate || name == cfgFollowerThrottledRate:
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
			return fmt.Errorf("%w: invalid value %q for %s: must be a non-negative number of bytes per second", errInvalidConfig, *value, name)
		}
	case name == cfgCleanerThreads || name == cfgCleanerDedupeBuffer || name == cfgCleanerIOMax || name == cfgCleanerBackoff:
		return validateCleanerSetting(name, v)
	case name == cfgMaxConnections || name == cfgMaxConnectionsPerIP || name == cfgMaxConnectionRate:
		if n, err := strconv.ParseInt(v, 10, 32); err != nil || n < 0 {
			return fmt.Errorf("%w: invalid value %q for %s: must be an integer ≥ 0 (0: no limit)", errInvalidConfig, *value, name)
		}
	case name == cfgMaxConnectionsOverrides:
		if _, err := parseIPOverrides(v); err != nil {
			return fmt.Errorf("%w: invalid value %q for %s: %v", errInvalidConfig, *value, name, err)
		}
	case name == cfgUncleanLeaderElection:
		if v != "true" && v != "false" {
			return fmt.Errorf("%w: invalid value %q for %s: must be true or false", errInvalidConfig, *value, name)
		}
	case dynamicLogConfigs[name] != nil:
		d := dynamicLogConfigs[name]
		if err := validateTopicConfig(d.name, value); err != nil {
			return fmt.Errorf("%w (%s is the default of topic config %s)", err, name, d.name)
		}
	}
	return nil
}

// checkDynamicBrokerName refuses the names no broker resource may set or
// delete: static settings, and the cluster-wide ones on one broker.
func checkDynamicBrokerName(res, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty config name", errInvalidConfig)
	case staticBrokerConfigNames[name]:
		return &codedError{metadata.ErrInvalidRequest, fmt.Sprintf("%s cannot be altered dynamically: it is one of the broker's static settings in Sediment (set it in the broker's config file; docs/configuration.md)", name)}
	case name == cfgUncleanLeaderElection && res != "":
		return &codedError{metadata.ErrInvalidRequest, fmt.Sprintf("%s is cluster-wide: alter the default broker resource (empty name), not broker %s", name, res)}
	}
	return nil
}

// validateBrokerResource checks a broker resource name: "" (the cluster
// default) or a broker id.
func validateBrokerResource(name string) error {
	if name == "" {
		return nil
	}
	if id, err := strconv.ParseInt(name, 10, 32); err != nil || id < 0 {
		return fmt.Errorf("%w: broker resource %q is neither a broker id nor empty (the cluster default)", errInvalidConfig, name)
	}
	return nil
}
