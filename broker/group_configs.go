package broker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/metadata"
)

// Group configs (Kafka 4.0, KIP-848): a GROUP config resource, named by the
// group id, sets consumer.session.timeout.ms and consumer.heartbeat.interval.ms
// for that group's KIP-848 members, over the broker's
// group.consumer.session.timeout.ms / group.consumer.heartbeat.interval.ms.
// They are kept in the metadata log (metadata.ResourceGroup), may be set
// before the group exists, and take effect at each member's next heartbeat.
// Values must lie within Kafka's default bounds (session 45-60 s, heartbeat
// 5-15 s, each widened to take in the broker's own default) and the
// heartbeat interval must stay below the session timeout.

type groupConfigDef struct {
	name     string
	def      func(b *Broker) time.Duration
	min, max time.Duration
	doc      string
	// values, if set, makes it a string config of one of these (the
	// first is the default) instead of a duration.
	values []string
	// other, if set, accepts a string config's value that is not one of
	// values (share.auto.offset.reset's by_duration:…).
	other func(v string) bool
}

// The share group configs (KIP-932).
const (
	cfgShareAutoOffsetReset    = "share.auto.offset.reset"
	cfgShareRecordLockDuration = "share.record.lock.duration.ms"
	cfgShareSessionTimeout     = "share.session.timeout.ms"
	cfgShareHeartbeatInterval  = "share.heartbeat.interval.ms"
	cfgShareIsolationLevel     = "share.isolation.level"
)

func fixed(d time.Duration) func(*Broker) time.Duration {
	return func(*Broker) time.Duration { return d }
}

var groupConfigDefs = []groupConfigDef{
	{name: group.GroupConsumerHeartbeatInterval, def: func(b *Broker) time.Duration {
		return b.groupDefault(b.cfg.Groups.ConsumerHeartbeatInterval, group.DefaultConsumerHeartbeatInterval)
	},
		min: 5 * time.Second, max: 15 * time.Second, doc: "the interval this group's KIP-848 members are told to heartbeat at"},
	{name: group.GroupConsumerSessionTimeout, def: func(b *Broker) time.Duration {
		return b.groupDefault(b.cfg.Groups.ConsumerSessionTimeout, group.DefaultConsumerSessionTimeout)
	},
		min: 45 * time.Second, max: 60 * time.Second, doc: "a KIP-848 member of this group with no heartbeat within it is removed"},
	{name: cfgShareAutoOffsetReset, values: []string{"latest", "earliest"},
		other: func(v string) bool { _, ok := parseByDuration(v); return ok },
		doc:   "where a share group starts on a partition it has no start offset for: latest, earliest or by_duration:<ISO-8601 duration> (the first record no older than that, else latest)"},
	{name: cfgShareIsolationLevel, values: []string{"read_uncommitted", "read_committed"},
		doc: "read_committed: this share group is delivered only committed records, up to the last stable offset; records of aborted transactions are never delivered"},
	{name: cfgShareRecordLockDuration, def: fixed(30 * time.Second), min: time.Second, max: time.Hour,
		doc: "how long a share group member holds the records it acquired before they are delivered again"},
	{name: cfgShareSessionTimeout, def: fixed(shareSessionTimeoutDefault), min: 45 * time.Second, max: 60 * time.Second,
		doc: "a share group member with no heartbeat within it is removed"},
	{name: cfgShareHeartbeatInterval, def: fixed(shareHeartbeatIntervalDefault), min: 5 * time.Second, max: 15 * time.Second,
		doc: "the interval this share group's members are told to heartbeat at"},
}

// shareGroupDuration is a share group's effective value of a duration
// config.
func (b *Broker) shareGroupDuration(group, name string) time.Duration {
	d, _ := findGroupConfig(name)
	v, _ := b.groupConfigValue(b.meta.State().GroupConfigs(group), d)
	return v
}

func (b *Broker) shareLockDuration(group string) time.Duration {
	return b.shareGroupDuration(group, cfgShareRecordLockDuration)
}

func (b *Broker) shareGroupResetEarliest(st *metadata.State, group string) bool {
	return strings.EqualFold(st.GroupConfigs(group)[cfgShareAutoOffsetReset], "earliest")
}

// shareGroupResetDuration is the duration of a by_duration reset, if the
// group has one.
func shareGroupResetDuration(st *metadata.State, group string) (time.Duration, bool) {
	return parseByDuration(st.GroupConfigs(group)[cfgShareAutoOffsetReset])
}

func (b *Broker) shareReadCommitted(group string) bool {
	return strings.EqualFold(b.meta.State().GroupConfigs(group)[cfgShareIsolationLevel], "read_committed")
}

// parseByDuration reads "by_duration:<d>" (KIP-1106), d an ISO-8601
// duration as Java's Duration.parse takes it: PnDTnHnMn.nS, each part
// optional but at least one, case-insensitive; not negative.
func parseByDuration(v string) (time.Duration, bool) {
	const prefix = "by_duration:"
	if len(v) < len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return 0, false
	}
	s := strings.ToUpper(strings.TrimSpace(v[len(prefix):]))
	s = strings.TrimPrefix(s, "+")
	if !strings.HasPrefix(s, "P") {
		return 0, false
	}
	s = s[1:]
	var total time.Duration
	parts, inTime, units := 0, false, "D"
	for s != "" {
		if s[0] == 'T' {
			if inTime {
				return 0, false
			}
			inTime, units, s = true, "HMS", s[1:]
			if s == "" {
				return 0, false // "PT" alone
			}
			continue
		}
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		if i == 0 || i == len(s) || i > 18 {
			return 0, false
		}
		num, unit := s[:i], s[i]
		s = s[i+1:]
		j := strings.IndexByte(units, unit)
		if j < 0 {
			return 0, false
		}
		units = units[j+1:] // each unit once, in order
		var scale time.Duration
		switch unit {
		case 'D':
			scale = 24 * time.Hour
		case 'H':
			scale = time.Hour
		case 'M':
			scale = time.Minute
		case 'S':
			scale = time.Second
		}
		if strings.Contains(num, ".") && unit != 'S' {
			return 0, false // only seconds take a fraction
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil || f*float64(scale) > float64(1<<62) {
			return 0, false
		}
		total += time.Duration(f * float64(scale))
		if total < 0 || total > 1<<62 {
			return 0, false
		}
		parts++
	}
	return total, parts > 0
}

func (b *Broker) groupDefault(set, def time.Duration) time.Duration {
	if set > 0 {
		return set
	}
	return def
}

func findGroupConfig(name string) (groupConfigDef, bool) {
	for _, d := range groupConfigDefs {
		if d.name == name {
			return d, true
		}
	}
	return groupConfigDef{}, false
}

// groupConfigValue is a group's effective value of d and its source.
func (b *Broker) groupConfigValue(set map[string]string, d groupConfigDef) (time.Duration, kmsg.ConfigSource) {
	if v, ok := set[d.name]; ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Duration(ms) * time.Millisecond, kmsg.ConfigSourceGroupConfig
		}
	}
	return d.def(b), kmsg.ConfigSourceDefaultConfig
}

// validateGroupConfigs checks the configs a group would have after a change
// (each value in its bounds, the heartbeat below the session timeout).
func (b *Broker) validateGroupConfigs(after map[string]string) error {
	for name, v := range after {
		d, ok := findGroupConfig(name)
		if !ok {
			return fmt.Errorf("%w: unknown group config %q (%s)", errInvalidConfig, name, groupConfigNames())
		}
		if d.values != nil {
			if !containsStr(d.values, strings.ToLower(v)) && (d.other == nil || !d.other(v)) {
				one := strings.Join(d.values, ", ")
				if d.other != nil {
					one += ", by_duration:<ISO-8601 duration, not negative>"
				}
				return fmt.Errorf("%w: invalid value %q for %s: one of %s", errInvalidConfig, v, name, one)
			}
			continue
		}
		ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		lo, hi := min(d.min, d.def(b)), max(d.max, d.def(b))
		if err != nil || time.Duration(ms)*time.Millisecond < lo || time.Duration(ms)*time.Millisecond > hi {
			return fmt.Errorf("%w: invalid value %q for %s: must be a number of milliseconds in [%d, %d]", errInvalidConfig, v, name, lo.Milliseconds(), hi.Milliseconds())
		}
	}
	hb, _ := b.groupConfigValue(after, groupConfigDefs[0])
	session, _ := b.groupConfigValue(after, groupConfigDefs[1])
	if hb >= session {
		return fmt.Errorf("%w: %s (%d) must be below %s (%d)", errInvalidConfig, group.GroupConsumerHeartbeatInterval, hb.Milliseconds(), group.GroupConsumerSessionTimeout, session.Milliseconds())
	}
	shb, _ := findGroupConfig(cfgShareHeartbeatInterval)
	sst, _ := findGroupConfig(cfgShareSessionTimeout)
	hb, _ = b.groupConfigValue(after, shb)
	session, _ = b.groupConfigValue(after, sst)
	if hb >= session {
		return fmt.Errorf("%w: %s (%d) must be below %s (%d)", errInvalidConfig, cfgShareHeartbeatInterval, hb.Milliseconds(), cfgShareSessionTimeout, session.Milliseconds())
	}
	return nil
}

func groupConfigNames() string {
	names := make([]string, len(groupConfigDefs))
	for i, d := range groupConfigDefs {
		names[i] = d.name
	}
	return strings.Join(names, ", ")
}

// alterGroupConfigs validates and proposes a change of a group's configs:
// replace (legacy AlterConfigs) or SET/DELETE ops.
func (b *Broker) alterGroupConfigs(ctx context.Context, groupID string, replace bool, ops []metadata.ConfigOp, validateOnly bool) error {
	if groupID == "" {
		return fmt.Errorf("%w: empty group name", errInvalidConfig)
	}
	after := map[string]string{}
	if !replace {
		for k, v := range b.meta.State().GroupConfigs(groupID) {
			after[k] = v
		}
	}
	for _, op := range ops {
		if _, ok := findGroupConfig(op.Key); !ok {
			return fmt.Errorf("%w: unknown group config %q (%s)", errInvalidConfig, op.Key, groupConfigNames())
		}
		if op.Delete {
			delete(after, op.Key)
		} else {
			after[op.Key] = strings.TrimSpace(op.Value)
		}
	}
	if err := b.validateGroupConfigs(after); err != nil {
		return err
	}
	if validateOnly {
		return nil
	}
	for i := range ops {
		ops[i].Value = strings.TrimSpace(ops[i].Value)
	}
	_, _, err := b.store.propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceGroup, ResourceName: groupID, Replace: replace, Ops: ops})
	return err
}

// describeGroupConfigs answers DescribeConfigs for a GROUP resource.
func (b *Broker) describeGroupConfigs(st *metadata.State, res kmsg.DescribeConfigsRequestResource, includeDocs bool, rr *kmsg.DescribeConfigsResponseResource) {
	set := st.GroupConfigs(res.ResourceName)
	for _, d := range groupConfigDefs {
		if len(res.ConfigNames) > 0 && !containsStr(res.ConfigNames, d.name) {
			continue
		}
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		if d.values != nil {
			v, src := d.values[0], kmsg.ConfigSourceDefaultConfig
			if x, ok := set[d.name]; ok {
				v, src = x, kmsg.ConfigSourceGroupConfig
				if containsStr(d.values, strings.ToLower(x)) {
					v = strings.ToLower(x)
				}
			}
			c.Name, c.Value, c.Source = d.name, kmsg.StringPtr(v), src
			c.ConfigType = kmsg.ConfigTypeString
		} else {
			v, src := b.groupConfigValue(set, d)
			c.Name, c.Value, c.Source = d.name, kmsg.StringPtr(strconv.FormatInt(v.Milliseconds(), 10)), src
			c.ConfigType = kmsg.ConfigType(cfgInt.kafkaType())
		}
		if includeDocs {
			c.Documentation = kmsg.StringPtr(d.doc)
		}
		rr.Configs = append(rr.Configs, c)
	}
}
