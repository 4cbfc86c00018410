package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// IncrementalAlterConfigs: v0-1
//
// SET, DELETE (back to the default), APPEND and SUBTRACT (list configs such
// as cleanup.policy) on a topic's overrides; the resulting values are
// validated (INVALID_CONFIG) before one metadata command applies them all.
// On a broker resource, SET and DELETE of dynamic broker configs
// (dynamic_configs.go); the broker's static settings are INVALID_REQUEST.
// A resource listed twice, a config named twice or a null value (but for
// DELETE) is INVALID_REQUEST (checkConfigResource). v1 flexible.

func init() { regKey(44, 0, 1).handler = handleIncrementalAlterConfigs }

func handleIncrementalAlterConfigs(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	dup := duplicateConfigResources(len(req.Resources), func(i int) (kmsg.ConfigResourceType, string) {
		return req.Resources[i].ResourceType, req.Resources[i].ResourceName
	})
	for i, res := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		names := make([]string, len(res.Configs))
		var nulls []string
		for j, c := range res.Configs {
			names[j] = c.Name
			if c.Value == nil && c.Op != kmsg.IncrementalAlterConfigOpDelete {
				nulls = append(nulls, c.Name)
			}
		}
		err := checkConfigResource(dup[i], names, nulls)
		switch {
		case err != nil:
		case res.ResourceType == kmsg.ConfigResourceTypeTopic:
			err = b.incrementalAlterTopic(ctx, res, req.ValidateOnly)
		case res.ResourceType == kmsg.ConfigResourceTypeBroker:
			err = b.incrementalAlterBroker(ctx, res, req.ValidateOnly)
		case res.ResourceType == kmsg.ConfigResourceTypeGroupConfig:
			err = b.incrementalAlterGroup(ctx, res, req.ValidateOnly)
		case res.ResourceType == kmsg.ConfigResourceTypeBrokerLogger:
			err = b.alterBrokerLoggers(res, req.ValidateOnly) // broker_loggers.go
		default:
			err = fmt.Errorf("%w: unsupported resource type %d (topics, brokers, broker loggers and groups only)", kerr.InvalidRequest, res.ResourceType)
		}
		if err != nil {
			rr.ErrorCode = errCode(err)
			rr.ErrorMessage = errMessage(err)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return &Reply{Msg: resp}, nil
}

func (b *Broker) incrementalAlterTopic(ctx context.Context, res kmsg.IncrementalAlterConfigsRequestResource, validateOnly bool) error {
	t, ok := b.meta.State().Topic(res.ResourceName)
	if !ok {
		return errUnknownTopicOrPartition
	}
	cmd := &metadata.AlterConfigs{ResourceType: metadata.ResourceTopic, ResourceName: res.ResourceName}
	seen := map[string]bool{}
	for _, c := range res.Configs {
		if seen[c.Name] {
			return fmt.Errorf("%w: %s altered twice", errInvalidConfig, c.Name)
		}
		seen[c.Name] = true
		d, known := topicConfigDefs[c.Name]
		if !known {
			return fmt.Errorf("%w: unknown topic config %q", errInvalidConfig, c.Name)
		}
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if err := validateTopicConfig(c.Name, c.Value); err != nil {
				return err
			}
			cmd.Ops = append(cmd.Ops, metadata.ConfigOp{Key: c.Name, Value: canonicalTopicConfig(c.Name, *c.Value)})
		case kmsg.IncrementalAlterConfigOpDelete:
			cmd.Ops = append(cmd.Ops, metadata.ConfigOp{Key: c.Name, Delete: true})
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			if d.typ != cfgList {
				return fmt.Errorf("%w: %s is not a list", errInvalidConfig, c.Name)
			}
			if c.Value == nil {
				return fmt.Errorf("%w: null value for %s", errInvalidConfig, c.Name)
			}
			cur, _ := b.topicConfigValue(t.Configs, c.Name)
			nv := applyListOp(cur, c.Op, *c.Value)
			if err := validateTopicConfig(c.Name, &nv); err != nil {
				return err
			}
			cmd.Ops = append(cmd.Ops, metadata.ConfigOp{Key: c.Name, Value: nv})
		default:
			return fmt.Errorf("%w: unknown operation %d", errInvalidConfig, c.Op)
		}
	}
	next := maps.Clone(t.Configs)
	if next == nil {
		next = map[string]string{}
	}
	for _, op := range cmd.Ops {
		if op.Delete {
			delete(next, op.Key)
		} else {
			next[op.Key] = op.Value
		}
	}
	if err := b.validateTopicConfigSet(t, next); err != nil {
		return err
	}
	if validateOnly || len(cmd.Ops) == 0 {
		return nil
	}
	_, _, err := b.store.propose(ctx, cmd)
	return err
}

// setDeleteOps turns a non-topic resource's SET and DELETE operations into
// metadata ops (APPEND and SUBTRACT are for list configs, which only topics
// have); check validates each SET's value, and each DELETE's name (value nil).
func setDeleteOps(res kmsg.IncrementalAlterConfigsRequestResource, check func(name string, value *string) error) ([]metadata.ConfigOp, error) {
	var ops []metadata.ConfigOp
	seen := map[string]bool{}
	for _, c := range res.Configs {
		if seen[c.Name] {
			return nil, fmt.Errorf("%w: %s altered twice", errInvalidConfig, c.Name)
		}
		seen[c.Name] = true
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if c.Value == nil {
				return nil, fmt.Errorf("%w: null value for %s", errInvalidConfig, c.Name)
			}
			if err := check(c.Name, c.Value); err != nil {
				return nil, err
			}
			ops = append(ops, metadata.ConfigOp{Key: c.Name, Value: strings.TrimSpace(*c.Value)})
		case kmsg.IncrementalAlterConfigOpDelete:
			if err := check(c.Name, nil); err != nil {
				return nil, err
			}
			ops = append(ops, metadata.ConfigOp{Key: c.Name, Delete: true})
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			return nil, fmt.Errorf("%w: %s is not a list", errInvalidConfig, c.Name)
		default:
			return nil, fmt.Errorf("%w: unknown operation %d", errInvalidConfig, c.Op)
		}
	}
	return ops, nil
}

// incrementalAlterBroker sets or deletes dynamic broker configs (of one
// broker, or the cluster default for resource name "").
func (b *Broker) incrementalAlterBroker(ctx context.Context, res kmsg.IncrementalAlterConfigsRequestResource, validateOnly bool) error {
	if err := validateBrokerResource(res.ResourceName); err != nil {
		return err
	}
	// APPEND and SUBTRACT of a list (log.cleanup.policy) become a SET of
	// the list that results from the resource's value, else from what it
	// falls back to (the cluster default, the broker's static setting).
	st := b.meta.State()
	res.Configs = slices.Clone(res.Configs)
	for i, c := range res.Configs {
		if c.Op != kmsg.IncrementalAlterConfigOpAppend && c.Op != kmsg.IncrementalAlterConfigOpSubtract {
			continue
		}
		d := dynamicLogConfigs[c.Name]
		if d == nil || d.typ != cfgList {
			return fmt.Errorf("%w: %s is not a list", errInvalidConfig, c.Name)
		}
		if c.Value == nil {
			return fmt.Errorf("%w: null value for %s", errInvalidConfig, c.Name)
		}
		cur, ok := st.BrokerConfigs(res.ResourceName)[c.Name]
		if !ok {
			cur, ok = st.BrokerConfigs("")[c.Name]
		}
		if !ok {
			cur = d.def(&b.cfg)
		}
		res.Configs[i].Op, res.Configs[i].Value = kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(applyListOp(cur, c.Op, *c.Value))
	}
	ops, err := setDeleteOps(res, func(name string, value *string) error {
		if value == nil {
			return checkDynamicBrokerName(res.ResourceName, name)
		}
		return validateDynamicBrokerConfig(res.ResourceName, name, value)
	})
	if err != nil || validateOnly || len(ops) == 0 {
		return err
	}
	_, _, err = b.store.propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceBroker, ResourceName: res.ResourceName, Ops: ops})
	return err
}

// incrementalAlterGroup sets or deletes a group's configs (group_configs.go
// validates names and values).
func (b *Broker) incrementalAlterGroup(ctx context.Context, res kmsg.IncrementalAlterConfigsRequestResource, validateOnly bool) error {
	ops, err := setDeleteOps(res, func(string, *string) error { return nil })
	if err != nil || len(ops) == 0 {
		return err
	}
	return b.alterGroupConfigs(ctx, res.ResourceName, false, ops, validateOnly)
}

// duplicateConfigResources reports, for each of n resources, whether
// another resource of the request has its type and name: Kafka's
// ConfigAdminManager answers every copy INVALID_REQUEST ("Each resource must
// appear at most once.") and alters none of them.
func duplicateConfigResources(n int, key func(i int) (kmsg.ConfigResourceType, string)) []bool {
	type k struct {
		typ  kmsg.ConfigResourceType
		name string
	}
	count := make(map[k]int, n)
	for i := range n {
		t, name := key(i)
		count[k{t, name}]++
	}
	dup := make([]bool, n)
	for i := range n {
		t, name := key(i)
		dup[i] = count[k{t, name}] > 1
	}
	return dup
}

// checkConfigResource is Kafka's ConfigAdminManager.preprocess of one
// resource of AlterConfigs or IncrementalAlterConfigs, before any
// validation of names and values: a resource listed twice, a config named
// twice, or a null value (but for an incremental DELETE) is
// INVALID_REQUEST.
func checkConfigResource(dup bool, names, nullValues []string) error {
	if dup {
		return errors.Join(metadata.ErrInvalidRequest, errors.New("each resource must appear at most once"))
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			return errors.Join(metadata.ErrInvalidRequest, fmt.Errorf("config %q appears more than once", n))
		}
		seen[n] = true
	}
	if len(nullValues) > 0 {
		return errors.Join(metadata.ErrInvalidRequest, fmt.Errorf("null value not supported for: %s", strings.Join(nullValues, ", ")))
	}
	return nil
}

// applyListOp is the list cur after APPEND (each element of value not in it
// yet) or SUBTRACT (each element of value removed).
func applyListOp(cur string, op kmsg.IncrementalAlterConfigOp, value string) string {
	items := splitList(cur)
	for _, v := range splitList(value) {
		if op == kmsg.IncrementalAlterConfigOpAppend {
			if !containsStr(items, v) {
				items = append(items, v)
			}
		} else {
			items = removeStr(items, v)
		}
	}
	return strings.Join(items, ",")
}

func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func removeStr(s []string, v string) []string {
	out := s[:0]
	for _, e := range s {
		if e != v {
			out = append(out, e)
		}
	}
	return out
}
