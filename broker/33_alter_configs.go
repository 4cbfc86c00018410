package broker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// AlterConfigs: v0-2
//
// Replaces a topic's whole set of overrides (Kafka's non-incremental
// semantics: configs not listed return to their defaults). Every value is
// validated first (INVALID_CONFIG); validate_only stops there. On a broker
// resource (a broker id, or "" for the cluster default) it replaces the
// resource's dynamic broker configs (dynamic_configs.go: throttle rates,
// topic configs' broker-level defaults, names stored only); the broker's
// static settings are INVALID_REQUEST. A resource listed twice, a config
// named twice or a null value is INVALID_REQUEST, as Kafka's
// ConfigAdminManager.preprocess (checkConfigResource). v2 flexible.

func init() { regKey(33, 0, 2).handler = handleAlterConfigs }

func handleAlterConfigs(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	dup := duplicateConfigResources(len(req.Resources), func(i int) (kmsg.ConfigResourceType, string) {
		return req.Resources[i].ResourceType, req.Resources[i].ResourceName
	})
	for i, res := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		names := make([]string, len(res.Configs))
		var nulls []string
		for j, c := range res.Configs {
			names[j] = c.Name
			if c.Value == nil {
				nulls = append(nulls, c.Name)
			}
		}
		err := checkConfigResource(dup[i], names, nulls)
		switch {
		case err != nil:
		case res.ResourceType == kmsg.ConfigResourceTypeTopic:
			cmd := &metadata.AlterConfigs{ResourceType: metadata.ResourceTopic, ResourceName: res.ResourceName, Replace: true}
			if _, ok := b.meta.State().Topic(res.ResourceName); !ok {
				err = errUnknownTopicOrPartition
			}
			for _, c := range res.Configs {
				if err == nil {
					if err = validateTopicConfig(c.Name, c.Value); err == nil {
						cmd.Ops = append(cmd.Ops, metadata.ConfigOp{Key: c.Name, Value: canonicalTopicConfig(c.Name, *c.Value)})
					}
				}
			}
			if err == nil {
				next := make(map[string]string, len(cmd.Ops))
				for _, op := range cmd.Ops {
					next[op.Key] = op.Value
				}
				if t, ok := b.meta.State().Topic(res.ResourceName); ok {
					err = b.validateTopicConfigSet(t, next)
				} else {
					err = errUnknownTopicOrPartition
				}
			}
			if err == nil && !req.ValidateOnly {
				_, _, err = b.store.propose(ctx, cmd)
			}
		case res.ResourceType == kmsg.ConfigResourceTypeBroker:
			// Replaces the resource's dynamic configs, as Kafka's legacy
			// AlterConfigs does; only the dynamic ones may be named.
			cmd := &metadata.AlterConfigs{ResourceType: metadata.ResourceBroker, ResourceName: res.ResourceName, Replace: true}
			err = validateBrokerResource(res.ResourceName)
			for _, c := range res.Configs {
				if err == nil {
					if err = validateDynamicBrokerConfig(res.ResourceName, c.Name, c.Value); err == nil {
						cmd.Ops = append(cmd.Ops, metadata.ConfigOp{Key: c.Name, Value: strings.TrimSpace(*c.Value)})
					}
				}
			}
			if err == nil && !req.ValidateOnly {
				_, _, err = b.store.propose(ctx, cmd)
			}
		case res.ResourceType == kmsg.ConfigResourceTypeGroupConfig:
			ops := make([]metadata.ConfigOp, 0, len(res.Configs))
			for _, c := range res.Configs {
				if c.Value == nil {
					err = fmt.Errorf("%w: null value for %q", errInvalidConfig, c.Name)
					break
				}
				ops = append(ops, metadata.ConfigOp{Key: c.Name, Value: *c.Value})
			}
			if err == nil {
				err = b.alterGroupConfigs(ctx, res.ResourceName, true, ops, req.ValidateOnly) // group_configs.go
			}
		default:
			err = fmt.Errorf("%w: unsupported resource type %d (topics, brokers and groups only)", kerr.InvalidRequest, res.ResourceType)
		}
		if err != nil {
			rr.ErrorCode = errCode(err)
			rr.ErrorMessage = errMessage(err)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return &Reply{Msg: resp}, nil
}
