package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sediment cluster config describe|set|delete: dynamic broker configs
// (KIP-226), as kafka-configs.sh --entity-type brokers [--entity-default]
// does: the cluster default without --broker, one broker's with it. What
// they are and which take effect: docs/configuration.md.

func newClusterConfigCmd(opts *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Describe, set and delete dynamic broker configs (log.retention.ms, log.cleanup.policy, the replication throttles, …) of the cluster default or one broker",
	}
	cmd.AddCommand(newClusterConfigDescribeCmd(opts), newClusterConfigSetCmd(opts), newClusterConfigDeleteCmd(opts))
	return cmd
}

// brokerFlag is --broker: one broker's configs instead of the cluster
// default's.
type brokerFlag struct{ id int32 }

func (f *brokerFlag) add(cmd *cobra.Command) {
	cmd.Flags().Int32Var(&f.id, "broker", -1, "this broker's configs (default: the cluster-wide default, which every broker without its own value takes)")
}

func (f *brokerFlag) ids() []int32 {
	if f.id < 0 {
		return nil
	}
	return []int32{f.id}
}

func (f *brokerFlag) String() string {
	if f.id < 0 {
		return "cluster default"
	}
	return fmt.Sprintf("broker %d", f.id)
}

func newClusterConfigDescribeCmd(opts *clientOptions) *cobra.Command {
	var bf brokerFlag
	var all bool
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "List the dynamic broker configs of the cluster default, or of one broker (--all: every config of that broker)",
		Example: `  sediment cluster config describe
  sediment cluster config describe --broker 1 --all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all && bf.id < 0 {
				return errors.New("--all needs --broker: the cluster default has only what is set there")
			}
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				rcs, err := adm.DescribeBrokerConfigs(ctx, bf.ids()...)
				if err != nil {
					return fmt.Errorf("DescribeConfigs: %w", err)
				}
				if len(rcs) != 1 {
					return fmt.Errorf("DescribeConfigs: %d resources in the answer, want 1", len(rcs))
				}
				if rcs[0].Err != nil {
					return fmt.Errorf("DescribeConfigs %s: %w", &bf, rcs[0].Err)
				}
				w := newTable(cmd.OutOrStdout())
				fmt.Fprintln(w, "NAME\tVALUE\tSOURCE")
				n := 0
				for _, c := range rcs[0].Configs {
					dynamic := c.Source == kmsg.ConfigSourceDynamicBrokerConfig || c.Source == kmsg.ConfigSourceDynamicDefaultBrokerConfig
					if !all && !dynamic {
						continue
					}
					v := "(null)"
					if c.Sensitive {
						v = "(sensitive)"
					} else if c.Value != nil {
						v = *c.Value
					}
					fmt.Fprintf(w, "%s\t%s\t%s\n", c.Key, v, c.Source)
					n++
				}
				if n == 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: no dynamic configs\n", &bf)
					return nil
				}
				return w.Flush()
			})
		},
	}
	bf.add(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "with --broker: every config of the broker, static ones and defaults too")
	return cmd
}

func newClusterConfigSetCmd(opts *clientOptions) *cobra.Command {
	var bf brokerFlag
	var validate bool
	cmd := &cobra.Command{
		Use:   "set KEY=VALUE...",
		Short: "Set dynamic broker configs of the cluster default or one broker (others are kept)",
		Example: `  sediment cluster config set log.retention.ms=259200000 log.cleanup.policy=delete
  sediment cluster config set --broker 2 follower.replication.throttled.rate=10485760`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kvs, err := parseKeyValues("", args)
			if err != nil {
				return err
			}
			var cfgs []kadm.AlterConfig
			seen := map[string]bool{}
			for _, kv := range kvs {
				k, v := strings.TrimSpace(kv[0]), strings.TrimSpace(kv[1])
				if seen[k] {
					return fmt.Errorf("%s given twice", k)
				}
				seen[k] = true
				cfgs = append(cfgs, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &v})
			}
			return alterBrokerConfigs(cmd, opts, &bf, cfgs, validate, "set")
		},
	}
	bf.add(cmd)
	cmd.Flags().BoolVar(&validate, "validate-only", false, "check the values without applying them")
	return cmd
}

func newClusterConfigDeleteCmd(opts *clientOptions) *cobra.Command {
	var bf brokerFlag
	cmd := &cobra.Command{
		Use:   "delete KEY...",
		Short: "Delete dynamic broker configs of the cluster default or one broker (back to the next fallback: the cluster default, then the broker's own setting)",
		Example: `  sediment cluster config delete log.retention.ms
  sediment cluster config delete --broker 2 follower.replication.throttled.rate`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var cfgs []kadm.AlterConfig
			for _, k := range splitKeys(args) {
				cfgs = append(cfgs, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
			}
			if len(cfgs) == 0 {
				return errors.New("no config names")
			}
			return alterBrokerConfigs(cmd, opts, &bf, cfgs, false, "deleted")
		},
	}
	bf.add(cmd)
	return cmd
}

func alterBrokerConfigs(cmd *cobra.Command, opts *clientOptions, bf *brokerFlag, cfgs []kadm.AlterConfig, validate bool, done string) error {
	return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
		alter := adm.AlterBrokerConfigs
		if validate {
			alter, done = adm.ValidateAlterBrokerConfigs, "valid"
		}
		rs, err := alter(ctx, cfgs, bf.ids()...)
		if err != nil {
			return fmt.Errorf("IncrementalAlterConfigs: %w", err)
		}
		for _, r := range rs {
			if r.Err != nil {
				return fmt.Errorf("%s: %w", bf, kafkaError(r.Err, r.ErrMessage))
			}
		}
		names := make([]string, len(cfgs))
		for i, c := range cfgs {
			names[i] = c.Name
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s: %s %s\n", bf, done, strings.Join(names, ", "))
		return nil
	})
}

// newClusterLogLevelCmd reads and sets one broker's log level: its
// BROKER_LOGGER config resource, the "root" logger (KIP-412, as
// kafka-configs.sh --entity-type broker-loggers). The change applies at
// once, to that broker alone, until it restarts.
func newClusterLogLevelCmd(opts *clientOptions) *cobra.Command {
	var id int32
	var validate bool
	cmd := &cobra.Command{
		Use:   "log-level --broker N [LEVEL]",
		Short: "Show or set one broker's log level while it runs (TRACE, DEBUG, INFO, WARN, ERROR, FATAL; back to its --log-level at restart)",
		Example: `  sediment cluster log-level --broker 1
  sediment cluster log-level --broker 1 debug`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if id < 0 {
				return errors.New("--broker is needed: each broker has its own log level")
			}
			name := fmt.Sprint(id)
			return withClient(cmd, opts, func(ctx context.Context, cl *kgo.Client) error {
				if len(args) == 1 {
					req := kmsg.NewPtrIncrementalAlterConfigsRequest()
					req.ValidateOnly = validate
					res := kmsg.NewIncrementalAlterConfigsRequestResource()
					res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeBrokerLogger, name
					c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
					c.Name, c.Value = "root", kmsg.StringPtr(strings.ToUpper(args[0]))
					res.Configs = append(res.Configs, c)
					req.Resources = append(req.Resources, res)
					resp, err := cl.Broker(int(id)).Request(ctx, req)
					if err != nil {
						return fmt.Errorf("IncrementalAlterConfigs to broker %d: %w", id, err)
					}
					r := resp.(*kmsg.IncrementalAlterConfigsResponse)
					if err := oneResource(req, len(r.Resources), func() (int16, *string) { return r.Resources[0].ErrorCode, r.Resources[0].ErrorMessage }); err != nil {
						return err
					}
				}
				req := kmsg.NewPtrDescribeConfigsRequest()
				res := kmsg.NewDescribeConfigsRequestResource()
				res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeBrokerLogger, name
				req.Resources = append(req.Resources, res)
				resp, err := cl.Broker(int(id)).Request(ctx, req)
				if err != nil {
					return fmt.Errorf("DescribeConfigs to broker %d: %w", id, err)
				}
				r := resp.(*kmsg.DescribeConfigsResponse)
				if err := oneResource(req, len(r.Resources), func() (int16, *string) { return r.Resources[0].ErrorCode, r.Resources[0].ErrorMessage }); err != nil {
					return err
				}
				for _, c := range r.Resources[0].Configs {
					v := "(null)"
					if c.Value != nil {
						v = *c.Value
					}
					fmt.Fprintf(cmd.OutOrStdout(), "broker %d: %s %s\n", id, c.Name, v)
				}
				if validate && len(args) == 1 {
					fmt.Fprintf(cmd.OutOrStdout(), "broker %d: %s is valid (not applied)\n", id, strings.ToUpper(args[0]))
				}
				return nil
			})
		},
	}
	cmd.Flags().Int32Var(&id, "broker", -1, "the broker's id")
	cmd.Flags().BoolVar(&validate, "validate-only", false, "check the level without applying it")
	return cmd
}

// oneResource checks the answer to a request about one config resource: n
// resources in it, and the first one's error code and message (read only
// when there is one).
func oneResource(req kmsg.Request, n int, first func() (int16, *string)) error {
	if n != 1 {
		return fmt.Errorf("%s: %d resources in the answer, want 1", kmsg.NameForKey(req.Key()), n)
	}
	return responseError(first())
}
