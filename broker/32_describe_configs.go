package broker

import (
	"context"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// DescribeConfigs: v0-4
//
// Topics: every topic config of the table in configs.go with its effective
// value and source (dynamic topic override or default). v1+ synonyms (the
// broker-level name a default comes from, none where Kafka lists none:
// configs.go's brokerUnset), v3+ type and documentation, v4+
// flexible. Brokers (this one): the broker's own settings under Kafka's
// names, read-only, with their types and (v3+, when asked) documentation,
// the dynamic broker configs (dynamic_configs.go) with their sources and
// synonyms, and the names stored only; the cluster default (the empty
// name): the dynamic configs set there, as Kafka lists.

func init() { regKey(32, 0, 4).handler = handleDescribeConfigs }

func handleDescribeConfigs(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	st := b.meta.State()
	for _, res := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		want := func(name string) bool {
			// Null or empty: all (Kafka's ConfigHelper).
			return len(res.ConfigNames) == 0 || containsStr(res.ConfigNames, name)
		}
		switch res.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			if err := validTopicName(res.ResourceName); err != nil {
				// As Kafka's ConfigHelper (Topic.validate first).
				rr.ErrorCode = kerr.InvalidTopicException.Code
				break
			}
			t, ok := st.Topic(res.ResourceName)
			if !ok {
				rr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				break
			}
			for _, name := range sortedConfigNames() {
				if !want(name) {
					continue
				}
				d := topicConfigDefs[name]
				v, src := b.topicConfigValue(t.Configs, name)
				c := kmsg.NewDescribeConfigsResponseResourceConfig()
				c.Name, c.Value, c.Source = name, kmsg.StringPtr(v), src
				c.IsDefault = src == kmsg.ConfigSourceDefaultConfig
				if r.Version == 0 && c.IsDefault {
					c.Source = kmsg.ConfigSourceDefaultConfig
				}
				if req.IncludeSynonyms {
					if src == kmsg.ConfigSourceDynamicTopicConfig {
						s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
						s.Name, s.Value, s.Source = name, kmsg.StringPtr(v), src
						c.ConfigSynonyms = append(c.ConfigSynonyms, s)
					}
					c.ConfigSynonyms = append(c.ConfigSynonyms, b.brokerSynonyms(st, d)...)
				}
				c.ConfigType = kmsg.ConfigType(d.typ.kafkaType())
				if req.IncludeDocumentation && d.doc != "" {
					c.Documentation = kmsg.StringPtr(d.doc)
				}
				rr.Configs = append(rr.Configs, c)
			}
		case kmsg.ConfigResourceTypeBroker:
			if res.ResourceName != "" && res.ResourceName != b.nodeName {
				rr.ErrorCode = kerr.InvalidRequest.Code
				rr.ErrorMessage = kmsg.StringPtr("this broker describes only its own configs")
				break
			}
			for _, c := range b.describeBrokerConfigs(st, res.ResourceName == "", req.IncludeSynonyms, req.IncludeDocumentation) {
				if want(c.Name) {
					rr.Configs = append(rr.Configs, c)
				}
			}
		case kmsg.ConfigResourceTypeGroupConfig:
			b.describeGroupConfigs(st, res, req.IncludeDocumentation, &rr) // group_configs.go
		case kmsg.ConfigResourceTypeBrokerLogger:
			b.describeBrokerLoggers(res, &rr) // broker_loggers.go
		default:
			rr.ErrorCode = kerr.InvalidRequest.Code
			rr.ErrorMessage = kmsg.StringPtr("unsupported resource type")
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return &Reply{Msg: resp}, nil
}

// brokerConfig is one of the broker's settings under Kafka's name, with its
// type and documentation (DescribeConfigs v3+).
type brokerConfig struct {
	name, value string
	typ         configType
	doc         string
}

// brokerConfigs lists the broker's settings under Kafka's names.
func (b *Broker) brokerConfigs() []brokerConfig {
	c := &b.cfg
	return []brokerConfig{
		{"auto.create.topics.enable", strconv.FormatBool(c.AutoCreateTopics), cfgBool, "create topics on Metadata requests (--auto-create-topics-enable)"},
		{"auto.leader.rebalance.enable", strconv.FormatBool(!c.DisableAutoLeaderRebalance), cfgBool, "the controller moves leadership back to preferred replicas at leader imbalance checks (--auto-leader-rebalance-enable)"},
		{"broker.id", strconv.Itoa(int(c.NodeID)), cfgInt, "this broker's id (--node-id)"},
		{"broker.rack", c.Rack, cfgString, "this broker's rack or zone, for rack-aware replica placement and fetching from the closest replica (--broker-rack)"},
		{"connections.max.idle.ms", strconv.FormatInt(c.ConnectionsMaxIdle.Milliseconds(), 10), cfgLong, "idle connections are closed after this (--connections-max-idle)"},
		{"delegation.token.expiry.check.interval.ms", strconv.FormatInt(c.DelegationTokenExpiryCheckInterval.Milliseconds(), 10), cfgLong, "how often expired delegation tokens are removed (--delegation-token-expiry-check-interval)"},
		{"delegation.token.expiry.time.ms", strconv.FormatInt(c.DelegationTokenExpiryTime.Milliseconds(), 10), cfgLong, "a delegation token's lifetime from its creation or renewal (--delegation-token-expiry-time)"},
		{"delegation.token.max.lifetime.ms", strconv.FormatInt(c.DelegationTokenMaxLifetime.Milliseconds(), 10), cfgLong, "the longest a delegation token lives (--delegation-token-max-lifetime)"},
		{"default.replication.factor", strconv.Itoa(int(c.DefaultReplicationFactor)), cfgInt, "replication factor of topics created without one (--default-replication-factor)"},
		{"fetch.max.bytes", strconv.Itoa(int(c.FetchMaxBytes)), cfgInt, "the most record bytes one Fetch or ShareFetch answer carries, whatever its max_bytes; the first batch still comes whole (--fetch-max-bytes)"},
		{"leader.imbalance.check.interval.seconds", strconv.FormatInt(int64(math.Ceil(c.LeaderImbalanceCheckInterval.Seconds())), 10), cfgLong, "how long after the controller sees a partition not led by its preferred replica it checks the leader imbalance (--leader-imbalance-check-interval)"},
		{"leader.imbalance.per.broker.percentage", strconv.Itoa(max(c.LeaderImbalancePerBrokerPercentage, 0)), cfgInt, "the share of a broker's preferred partitions that others may lead before a check moves them back, in percent (--leader-imbalance-per-broker-percentage)"},
		{"log.dirs", c.DataDir, cfgString, "the directory of partition logs and metadata (--data-dir)"},
		{"log.retention.ms", strconv.FormatInt(c.LogRetentionMs, 10), cfgLong, "default retention.ms of topics (--log-retention-ms)"},
		{"log.segment.bytes", strconv.FormatInt(c.LogSegmentBytes, 10), cfgInt, "default segment.bytes of topics (--log-segment-bytes)"},
		{"log.segment.delete.delay.ms", strconv.FormatInt(max(c.LogSegmentDeleteDelay, 0).Milliseconds(), 10), cfgLong, "default file.delete.delay.ms of topics: how long deleted segment files stay (--log-segment-delete-delay)"},
		{"message.max.bytes", strconv.Itoa(int(c.MessageMaxBytes)), cfgInt, "default max.message.bytes of topics (--message-max-bytes)"},
		{"node.id", strconv.Itoa(int(c.NodeID)), cfgInt, "this broker's id (--node-id)"},
		{"num.partitions", strconv.Itoa(int(c.NumPartitions)), cfgInt, "partitions of auto-created topics and of CreateTopics with -1 (--num-partitions)"},
		{"socket.request.max.bytes", strconv.Itoa(int(c.SocketRequestMaxBytes)), cfgInt, "largest request frame (--socket-request-max-bytes)"},
		{"queued.max.request.bytes", strconv.FormatInt(c.QueuedMaxRequestBytes, 10), cfgLong, "bytes of requests read and not yet answered, all connections together (--queued-max-request-bytes)"},
		{"listeners", kafkaListeners(c.Listeners, false), cfgString, "the Kafka listeners, NAME://host:port (--listeners)"},
		{"advertised.listeners", kafkaListeners(b.addrs, true), cfgString, "the addresses given to clients (--advertised-listeners; default the bound ones)"},
		{"listener.security.protocol.map", listenerProtocols(c.Listeners), cfgString, "each listener's security protocol"},
		{"replica.lag.time.max.ms", strconv.FormatInt(c.ReplicaLagTimeMax.Milliseconds(), 10), cfgLong, "a follower not caught up for this long leaves the ISR (--replica-lag-time-max)"},
		{"replica.fetch.wait.max.ms", strconv.FormatInt(c.ReplicaFetchMaxWait.Milliseconds(), 10), cfgInt, "a follower fetch's long poll (--replica-fetch-wait-max)"},
		{"offsets.topic.replication.factor", strconv.Itoa(int(c.OffsetsTopicReplicationFactor)), cfgShort, "replicas of __consumer_offsets when it is created (--offsets-topic-replication-factor)"},
		{"transaction.state.log.replication.factor", strconv.Itoa(int(c.TransactionStateReplicationFactor)), cfgShort, "replicas of __transaction_state when it is created (--transaction-state-log-replication-factor)"},
		{"transaction.state.log.min.isr", strconv.Itoa(int(c.TransactionStateMinISR)), cfgInt, "min.insync.replicas of __transaction_state (--transaction-state-log-min-isr)"},
	}
}

// kafkaListeners renders listeners as Kafka's listeners setting
// (NAME://host:port, comma-separated), their advertised addresses if
// advertised.
func kafkaListeners(ls []Listener, advertised bool) string {
	var parts []string
	for _, l := range ls {
		addr := l.Addr
		if advertised && l.Advertised != "" {
			addr = l.Advertised
		}
		name := l.Name
		if name == "" {
			name = "PLAINTEXT"
		}
		parts = append(parts, name+"://"+addr)
	}
	return strings.Join(parts, ",")
}

// listenerProtocols renders listener.security.protocol.map (NAME:PROTOCOL,
// comma-separated).
func listenerProtocols(ls []Listener) string {
	var parts []string
	for _, l := range ls {
		name, proto := l.Name, l.SecurityProtocol
		if name == "" {
			name = "PLAINTEXT"
		}
		if proto == "" {
			proto = ProtocolPlaintext
		}
		parts = append(parts, name+":"+proto)
	}
	return strings.Join(parts, ",")
}

// builtinBrokerConfigs are the values of brokerConfigs with every setting
// at its built-in default.
var builtinBrokerConfigs = func() map[string]string {
	m := map[string]string{}
	for _, bc := range (&Broker{cfg: builtinConfig}).brokerConfigs() {
		m[bc.name] = bc.value
	}
	return m
}()

// perBrokerConfigs are the settings Kafka requires of each broker's own
// config file (or that describe this broker alone): always
// STATIC_BROKER_CONFIG.
var perBrokerConfigs = map[string]bool{"node.id": true, "broker.id": true, "log.dirs": true, "listeners": true,
	"advertised.listeners": true, "listener.security.protocol.map": true}

// brokerConfigSource is the source DescribeConfigs gives a broker setting
// that no dynamic config sets, as Kafka's: STATIC_BROKER_CONFIG when the
// operator gave it (Config.StaticConfigs) or its value is not the built-in
// default, else DEFAULT_CONFIG.
func (b *Broker) brokerConfigSource(bc brokerConfig) kmsg.ConfigSource {
	if perBrokerConfigs[bc.name] || b.cfg.StaticConfigs[bc.name] || builtinBrokerConfigs[bc.name] != bc.value {
		return kmsg.ConfigSourceStaticBrokerConfig
	}
	return kmsg.ConfigSourceDefaultConfig
}

// passwordConfigs are Kafka's broker configs of type PASSWORD
// (SslConfigs, SaslConfigs, PasswordEncoderConfigs,
// DelegationTokenManagerConfigs).
var passwordConfigs = []string{
	"sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.keystore.key",
	"ssl.keystore.certificate.chain", "ssl.truststore.password", "ssl.truststore.certificates",
	"password.encoder.secret", "password.encoder.old.secret", "delegation.token.secret.key",
}

// passwordConfig reports whether a broker config name is one of Kafka's
// PASSWORD configs, also under a listener's (listener.name.<l>.) or a SASL
// mechanism's (listener.name.<l>.<mechanism>.) prefix, as KafkaConfig
// resolves the type of a dynamic name. DescribeConfigs never shows their
// values.
func passwordConfig(name string) bool {
	for _, p := range passwordConfigs {
		if name == p || strings.HasSuffix(name, "."+p) {
			return true
		}
	}
	return false
}

// brokerSynonyms lists the broker-level values a topic config d falls back
// to, in order: this broker's dynamic value, the cluster default's, the
// broker's static setting (STATIC_BROKER_CONFIG when the operator gave it:
// staticSource), else its default (none where Kafka lists none:
// brokerUnset).
func (b *Broker) brokerSynonyms(st *metadata.State, d *topicConfigDef) []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym {
	if d.brokerName == "" {
		return nil
	}
	var out []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
	add := func(v string, src kmsg.ConfigSource) {
		s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
		s.Name, s.Value, s.Source = d.brokerName, kmsg.StringPtr(v), src
		out = append(out, s)
	}
	if v, ok := st.BrokerConfigs(b.nodeName)[d.brokerName]; ok {
		add(v, kmsg.ConfigSourceDynamicBrokerConfig)
	}
	if v, ok := st.BrokerConfigs("")[d.brokerName]; ok {
		add(v, kmsg.ConfigSourceDynamicDefaultBrokerConfig)
	}
	switch def := d.def(&b.cfg); {
	case b.staticSource(d) == kmsg.ConfigSourceStaticBrokerConfig:
		add(def, kmsg.ConfigSourceStaticBrokerConfig)
	case d.brokerUnset == "" || def != d.brokerUnset:
		add(def, kmsg.ConfigSourceDefaultConfig)
	}
	return out
}

// describeBrokerConfigs lists this broker's configs, sorted by name: its
// static settings (read-only), every dynamic broker config with its value
// and source, and the names stored only. For the cluster default
// (clusterDefault) only what is set there, as Kafka.
func (b *Broker) describeBrokerConfigs(st *metadata.State, clusterDefault, synonyms, docs bool) []kmsg.DescribeConfigsResponseResourceConfig {
	var out []kmsg.DescribeConfigsResponseResourceConfig
	listed := map[string]bool{}
	add := func(name, value string, src kmsg.ConfigSource, readOnly bool, typ configType, doc string, syns []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym) {
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.Value, c.Source, c.ReadOnly = name, kmsg.StringPtr(value), src, readOnly
		c.IsDefault = src == kmsg.ConfigSourceDefaultConfig
		c.ConfigType = kmsg.ConfigType(typ.kafkaType())
		if passwordConfig(name) {
			// As Kafka (KafkaConfig.maybeSensitive): no value, in the
			// config or its synonyms.
			c.Value, c.IsSensitive, c.ConfigType = nil, true, kmsg.ConfigTypePassword
			for i := range syns {
				syns[i].Value = nil
			}
		}
		if docs && doc != "" {
			c.Documentation = kmsg.StringPtr(doc)
		}
		if synonyms {
			c.ConfigSynonyms = syns
		}
		out = append(out, c)
		listed[name] = true
	}
	static := map[string]brokerConfig{}
	for _, bc := range b.brokerConfigs() {
		static[bc.name] = bc
	}
	defaults := st.BrokerConfigs("")
	if clusterDefault {
		for name, v := range defaults {
			typ, doc := cfgString, dynamicBrokerConfigs[name]
			if d := dynamicLogConfigs[name]; d != nil {
				typ, doc = d.typ, static[name].doc
			} else {
				switch name {
				case cfgLeaderThrottledRate, cfgFollowerThrottledRate, cfgCleanerDedupeBuffer, cfgCleanerBackoff:
					typ = cfgLong
				case cfgCleanerThreads, cfgMaxConnections, cfgMaxConnectionsPerIP, cfgMaxConnectionRate:
					typ = cfgInt
				case cfgCleanerIOMax:
					typ = cfgDouble
				}
			}
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			syn.Name, syn.Value, syn.Source = name, kmsg.StringPtr(v), kmsg.ConfigSourceDynamicDefaultBrokerConfig
			add(name, v, kmsg.ConfigSourceDynamicDefaultBrokerConfig, false, typ, doc, []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{syn})
		}
	} else {
		for _, bc := range b.brokerConfigs() {
			if dynamicLogConfigs[bc.name] == nil {
				add(bc.name, bc.value, b.brokerConfigSource(bc), true, bc.typ, bc.doc, nil)
			}
		}
		// The topic configs' broker-level defaults: dynamic value, else
		// the broker's own setting.
		for name, d := range dynamicLogConfigs {
			syns := b.brokerSynonyms(st, d)
			v, src := d.def(&b.cfg), kmsg.ConfigSourceDefaultConfig
			if _, ok := static[name]; ok {
				src = kmsg.ConfigSourceStaticBrokerConfig
				if n := len(syns); n > 0 && syns[n-1].Source == kmsg.ConfigSourceDefaultConfig {
					syns[n-1].Source = src
				}
			}
			if dv, dsrc, ok := b.dynamicBrokerValue(st, name); ok {
				v, src = dv, dsrc
			}
			doc := static[name].doc
			if doc == "" {
				doc = dynamicBrokerConfigs[name]
			}
			if doc == "" {
				doc = "default " + d.name + " of topics that do not set it, dynamic"
				if d.doc != "" {
					doc += ": " + d.doc
				}
			}
			add(name, v, src, false, d.typ, doc, syns)
		}
		// The replication throttle rates, as Kafka shows them: the
		// broker's own value, else the cluster default, else Long.MAX
		// (no limit).
		for _, name := range []string{cfgFollowerThrottledRate, cfgLeaderThrottledRate} {
			value, src := strconv.FormatInt(math.MaxInt64, 10), kmsg.ConfigSourceDefaultConfig
			if rate, from := throttleRate(st, b.cfg.NodeID, name); from == "broker" {
				value, src = strconv.FormatInt(rate, 10), kmsg.ConfigSourceDynamicBrokerConfig
			} else if from == "default" {
				value, src = strconv.FormatInt(rate, 10), kmsg.ConfigSourceDynamicDefaultBrokerConfig
			}
			add(name, value, src, false, cfgLong, dynamicBrokerConfigs[name], nil)
		}
		// The log cleaner's settings (dynamic_configs.go).
		_, cleaner := b.cleanerSettings(st)
		_, conns := b.connectionSettings(st)
		for _, ds := range append(cleaner, conns...) {
			add(ds.name, ds.value, ds.source, false, ds.typ, dynamicBrokerConfigs[ds.name], nil)
		}
		// Names stored only (dynamic_configs.go).
		for _, set := range []struct {
			m   map[string]string
			src kmsg.ConfigSource
		}{{st.BrokerConfigs(b.nodeName), kmsg.ConfigSourceDynamicBrokerConfig}, {defaults, kmsg.ConfigSourceDynamicDefaultBrokerConfig}} {
			for name, v := range set.m {
				if !listed[name] {
					add(name, v, set.src, false, cfgString, "", nil)
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
