package broker

import (
	"context"
	"math"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeConfigs: v0-4
//
// Topics: every topic config of the table in configs.go with its effective
// value and source (dynamic topic override or default). v1+ synonyms (the
// broker-level name a default comes from, none where Kafka lists none:
// configs.go's brokerUnset), v3+ type and documentation, v4+
// flexible. Brokers: the broker's own settings under Kafka's names, read-only,
// with their types and (v3+, when asked) documentation, and the dynamic
// replication throttle rates (replication_throttle.go) with their sources.

func init() { regKey(32, 0, 4).handler = handleDescribeConfigs }

func handleDescribeConfigs(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	st := b.meta.State()
	for _, res := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		want := func(name string) bool {
			if res.ConfigNames == nil {
				return true
			}
			return containsStr(res.ConfigNames, name)
		}
		switch res.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
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
					if def := d.def(&b.cfg); d.brokerName != "" && (d.brokerUnset == "" || def != d.brokerUnset) {
						s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
						s.Name, s.Value, s.Source = d.brokerName, kmsg.StringPtr(def), kmsg.ConfigSourceDefaultConfig
						c.ConfigSynonyms = append(c.ConfigSynonyms, s)
					}
				}
				c.ConfigType = kmsg.ConfigType(d.typ.kafkaType())
				if req.IncludeDocumentation && d.doc != "" {
					c.Documentation = kmsg.StringPtr(d.doc)
				}
				rr.Configs = append(rr.Configs, c)
			}
		case kmsg.ConfigResourceTypeBroker:
			if res.ResourceName != "" && res.ResourceName != strconv.Itoa(int(b.cfg.NodeID)) {
				rr.ErrorCode = kerr.InvalidRequest.Code
				rr.ErrorMessage = kmsg.StringPtr("this broker describes only its own configs")
				break
			}
			for _, bc := range b.brokerConfigs() {
				if !want(bc.name) {
					continue
				}
				c := kmsg.NewDescribeConfigsResponseResourceConfig()
				c.Name, c.Value, c.ReadOnly, c.Source = bc.name, kmsg.StringPtr(bc.value), true, kmsg.ConfigSourceStaticBrokerConfig
				c.ConfigType = kmsg.ConfigType(bc.typ.kafkaType())
				if req.IncludeDocumentation {
					c.Documentation = kmsg.StringPtr(bc.doc)
				}
				rr.Configs = append(rr.Configs, c)
			}
			// The dynamic ones (replication_throttle.go), as Kafka shows
			// them: the broker's own value, else the cluster default,
			// else Long.MAX (no limit).
			for _, name := range []string{cfgFollowerThrottledRate, cfgLeaderThrottledRate} {
				if !want(name) {
					continue
				}
				c := kmsg.NewDescribeConfigsResponseResourceConfig()
				c.Name, c.Source = name, kmsg.ConfigSourceDefaultConfig
				value := strconv.FormatInt(math.MaxInt64, 10)
				if res.ResourceName == "" {
					if v, ok := st.BrokerConfigs("")[name]; ok {
						value, c.Source = v, kmsg.ConfigSourceDynamicDefaultBrokerConfig
					}
				} else if rate, src := throttleRate(st, b.cfg.NodeID, name); src == "broker" {
					value, c.Source = strconv.FormatInt(rate, 10), kmsg.ConfigSourceDynamicBrokerConfig
				} else if src == "default" {
					value, c.Source = strconv.FormatInt(rate, 10), kmsg.ConfigSourceDynamicDefaultBrokerConfig
				}
				c.Value = kmsg.StringPtr(value)
				c.ConfigType = kmsg.ConfigType(cfgLong.kafkaType())
				if req.IncludeDocumentation {
					c.Documentation = kmsg.StringPtr(dynamicBrokerConfigs[name])
				}
				rr.Configs = append(rr.Configs, c)
			}
			if want(cfgUncleanLeaderElection) {
				c := kmsg.NewDescribeConfigsResponseResourceConfig()
				c.Name, c.Value, c.Source = cfgUncleanLeaderElection, kmsg.StringPtr("false"), kmsg.ConfigSourceDefaultConfig
				if v, ok := st.BrokerConfigs("")[cfgUncleanLeaderElection]; ok {
					c.Value, c.Source = kmsg.StringPtr(v), kmsg.ConfigSourceDynamicDefaultBrokerConfig
				}
				c.ConfigType = kmsg.ConfigType(cfgBool.kafkaType())
				if req.IncludeDocumentation {
					c.Documentation = kmsg.StringPtr(dynamicBrokerConfigs[cfgUncleanLeaderElection])
				}
				rr.Configs = append(rr.Configs, c)
			}
		case kmsg.ConfigResourceTypeGroupConfig:
			b.describeGroupConfigs(st, res, req.IncludeDocumentation, &rr) // group_configs.go
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
		{"default.replication.factor", strconv.Itoa(int(c.DefaultReplicationFactor)), cfgInt, "replication factor of topics created without one (--default-replication-factor)"},
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
	}
}
