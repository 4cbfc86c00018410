package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// sediment quota set|describe|delete: client quotas (KIP-546), as
// kafka-configs.sh --alter/--describe --entity-type users/clients does.
// The entity is given as kafka-configs' shortcuts do: --user NAME or
// --user-defaults, --client NAME or --client-defaults, or both; or --ip
// ADDRESS or --ip-defaults alone (connection_creation_rate, KIP-612).

func newQuotaCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Set, describe and delete client quotas: producer_byte_rate, consumer_byte_rate, request_percentage and controller_mutation_rate of users and client ids, connection_creation_rate of client addresses",
	}
	opts := addClientFlags(cmd)
	cmd.AddCommand(newQuotaSetCmd(opts), newQuotaDescribeCmd(opts), newQuotaDeleteCmd(opts))
	return cmd
}

// quotaEntityFlags are the entity selection flags of set and delete.
type quotaEntityFlags struct {
	user, client, ip                         string
	userDefaults, clientDefaults, ipDefaults bool
}

func (f *quotaEntityFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.user, "user", "", "the user (principal name; ANONYMOUS for clients that did not authenticate)")
	fs.StringVar(&f.client, "client", "", "the client id")
	fs.BoolVar(&f.userDefaults, "user-defaults", false, "the default user entity (<default>): applies to each user with no quota of its own")
	fs.BoolVar(&f.clientDefaults, "client-defaults", false, "the default client id entity (<default>)")
	fs.StringVar(&f.ip, "ip", "", "a client address (IP, or a host name the broker resolves), for connection_creation_rate")
	fs.BoolVar(&f.ipDefaults, "ip-defaults", false, "the default ip entity: the connection_creation_rate of each address with none of its own")
}

func (f *quotaEntityFlags) entity(cmd *cobra.Command) (kadm.ClientQuotaEntity, error) {
	var e kadm.ClientQuotaEntity
	for _, c := range []struct {
		typ, flag, what string
		name            *string
		defaults        bool
	}{
		{"user", "user", "user", &f.user, f.userDefaults},
		{"client-id", "client", "client id", &f.client, f.clientDefaults},
		{"ip", "ip", "ip", &f.ip, f.ipDefaults},
	} {
		set := cmd.Flags().Changed(c.flag)
		switch {
		case set && c.defaults:
			return nil, fmt.Errorf("--%s and --%s-defaults exclude each other", c.flag, c.flag)
		case set && *c.name == "":
			return nil, fmt.Errorf("--%s: empty name (use --%s-defaults for the default %s)", c.flag, c.flag, c.what)
		case set:
			e = append(e, kadm.ClientQuotaEntityComponent{Type: c.typ, Name: c.name})
		case c.defaults:
			e = append(e, kadm.ClientQuotaEntityComponent{Type: c.typ})
		}
	}
	if len(e) == 0 {
		return nil, errors.New("name an entity: --user, --user-defaults, --client and/or --client-defaults, or --ip or --ip-defaults")
	}
	if len(e) > 1 && e[len(e)-1].Type == "ip" {
		return nil, errors.New("an ip entity stands alone: --ip or --ip-defaults without --user or --client")
	}
	return e, nil
}

// parseQuotaSettings reads KEY=VALUE arguments (also comma-separated, as
// kafka-configs --add-config takes them).
func parseQuotaSettings(args []string) ([]kadm.AlterClientQuotaOp, error) {
	var ops []kadm.AlterClientQuotaOp
	for _, a := range args {
		for _, kv := range strings.Split(a, ",") {
			kv = strings.TrimSpace(kv)
			if kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("%q: want KEY=VALUE, e.g. producer_byte_rate=1048576", kv)
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %s is not a number", kv, v)
			}
			ops = append(ops, kadm.AlterClientQuotaOp{Key: strings.TrimSpace(k), Value: f})
		}
	}
	if len(ops) == 0 {
		return nil, errors.New("no quota given: KEY=VALUE, e.g. producer_byte_rate=1048576")
	}
	return ops, nil
}

func alterQuotas(ctx context.Context, cmd *cobra.Command, adm *kadm.Client, validate bool, entry kadm.AlterClientQuotaEntry, done string) error {
	alter := adm.AlterClientQuotas
	if validate {
		alter = adm.ValidateAlterClientQuotas
	}
	res, err := alter(ctx, []kadm.AlterClientQuotaEntry{entry})
	if err != nil {
		return fmt.Errorf("AlterClientQuotas: %w", err)
	}
	for _, r := range res {
		if r.Err != nil {
			var ke *kerr.Error
			if r.ErrMessage != "" && errors.As(r.Err, &ke) {
				return fmt.Errorf("%s: %s: %s", entry.Entity, ke.Message, r.ErrMessage)
			}
			return fmt.Errorf("%s: %w", entry.Entity, r.Err)
		}
	}
	if validate {
		done = "valid (not applied)"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", entry.Entity, done)
	return nil
}

func newQuotaSetCmd(opts *clientOptions) *cobra.Command {
	var ef quotaEntityFlags
	var validate bool
	cmd := &cobra.Command{
		Use:   "set KEY=VALUE...",
		Short: "Set quotas of a user, a client id, both, or a client address (others of the entity are kept)",
		Example: `  sediment quota set --user alice producer_byte_rate=1048576 consumer_byte_rate=2097152
  sediment quota set --user alice --client app producer_byte_rate=524288
  sediment quota set --client-defaults consumer_byte_rate=10485760
  sediment quota set --user alice request_percentage=50
  sediment quota set --ip 10.0.0.7 connection_creation_rate=20
  sediment quota set --ip-defaults connection_creation_rate=100`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := ef.entity(cmd)
			if err != nil {
				return err
			}
			ops, err := parseQuotaSettings(args)
			if err != nil {
				return err
			}
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				return alterQuotas(ctx, cmd, adm, validate, kadm.AlterClientQuotaEntry{Entity: e, Ops: ops}, "updated")
			})
		},
	}
	ef.add(cmd)
	cmd.Flags().BoolVar(&validate, "validate-only", false, "check the quotas without applying them")
	return cmd
}

func newQuotaDeleteCmd(opts *clientOptions) *cobra.Command {
	var ef quotaEntityFlags
	var validate bool
	cmd := &cobra.Command{
		Use:   "delete [KEY...]",
		Short: "Delete quotas of a user, a client id, both, or a client address (all of the entity's without KEY)",
		Example: `  sediment quota delete --user alice producer_byte_rate
  sediment quota delete --user alice --client app`,
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := ef.entity(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				keys := splitKeys(args)
				if len(keys) == 0 {
					// All the entity has.
					qs, err := adm.DescribeClientQuotas(ctx, true, exactComponents(e))
					if err != nil {
						return fmt.Errorf("DescribeClientQuotas: %w", err)
					}
					for _, q := range qs {
						for _, v := range q.Values {
							keys = append(keys, v.Key)
						}
					}
					if len(keys) == 0 {
						fmt.Fprintf(cmd.OutOrStdout(), "%s has no quotas\n", e)
						return nil
					}
				}
				var ops []kadm.AlterClientQuotaOp
				for _, k := range keys {
					ops = append(ops, kadm.AlterClientQuotaOp{Key: k, Remove: true})
				}
				return alterQuotas(ctx, cmd, adm, validate, kadm.AlterClientQuotaEntry{Entity: e, Ops: ops}, "deleted "+strings.Join(keys, ", "))
			})
		},
	}
	ef.add(cmd)
	cmd.Flags().BoolVar(&validate, "validate-only", false, "check without applying")
	return cmd
}

func splitKeys(args []string) []string {
	var out []string
	for _, a := range args {
		for _, k := range strings.Split(a, ",") {
			if k = strings.TrimSpace(k); k != "" {
				out = append(out, k)
			}
		}
	}
	return out
}

// exactComponents is a describe filter matching exactly e.
func exactComponents(e kadm.ClientQuotaEntity) []kadm.DescribeClientQuotaComponent {
	var out []kadm.DescribeClientQuotaComponent
	for _, c := range e {
		dc := kadm.DescribeClientQuotaComponent{Type: c.Type, MatchName: c.Name, MatchType: 0}
		if c.Name == nil {
			dc.MatchType = 1
		}
		out = append(out, dc)
	}
	return out
}

func newQuotaDescribeCmd(opts *clientOptions) *cobra.Command {
	var ef quotaEntityFlags
	var anyUser, anyClient, anyIP, strict bool
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "List quotas: all, or those of the entities the flags select",
		Example: `  sediment quota describe
  sediment quota describe --user alice            # alice's quotas, alone or with a client id
  sediment quota describe --users --strict        # every user quota without a client id
  sediment quota describe --ips                   # connection rates of client addresses`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var comps []kadm.DescribeClientQuotaComponent
			dimension := func(typ, flag string, name string, named, defaults, any bool) error {
				switch {
				case btoi(named)+btoi(defaults)+btoi(any) > 1:
					return fmt.Errorf("--%s, --%s-defaults and --%ss exclude each other", flag, flag, flag)
				case named && name == "":
					return fmt.Errorf("--%s: empty name", flag)
				case named:
					comps = append(comps, kadm.DescribeClientQuotaComponent{Type: typ, MatchName: &name, MatchType: 0})
				case defaults:
					comps = append(comps, kadm.DescribeClientQuotaComponent{Type: typ, MatchType: 1})
				case any:
					comps = append(comps, kadm.DescribeClientQuotaComponent{Type: typ, MatchType: 2})
				}
				return nil
			}
			if err := dimension("user", "user", ef.user, cmd.Flags().Changed("user"), ef.userDefaults, anyUser); err != nil {
				return err
			}
			if err := dimension("client-id", "client", ef.client, cmd.Flags().Changed("client"), ef.clientDefaults, anyClient); err != nil {
				return err
			}
			if err := dimension("ip", "ip", ef.ip, cmd.Flags().Changed("ip"), ef.ipDefaults, anyIP); err != nil {
				return err
			}
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				qs, err := adm.DescribeClientQuotas(ctx, strict, comps)
				if err != nil {
					return fmt.Errorf("DescribeClientQuotas: %w", err)
				}
				tw := newTable(cmd.OutOrStdout())
				fmt.Fprintln(tw, "USER\tCLIENT-ID\tIP\tQUOTAS")
				rows := make([]string, 0, len(qs))
				for _, q := range qs {
					user, client, ip := "", "", ""
					for _, c := range q.Entity {
						name := "<default>"
						if c.Name != nil {
							name = *c.Name
						}
						switch c.Type {
						case "user":
							user = name
						case "client-id":
							client = name
						case "ip":
							ip = name
						}
					}
					var vals []string
					for _, v := range q.Values {
						vals = append(vals, v.Key+"="+strconv.FormatFloat(v.Value, 'f', -1, 64))
					}
					sort.Strings(vals)
					rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s", dash(user), dash(client), dash(ip), strings.Join(vals, ",")))
				}
				sort.Strings(rows)
				for _, r := range rows {
					fmt.Fprintln(tw, r)
				}
				return tw.Flush()
			})
		},
	}
	ef.add(cmd)
	cmd.Flags().BoolVar(&anyUser, "users", false, "any user entity (named or default)")
	cmd.Flags().BoolVar(&anyClient, "clients", false, "any client id entity (named or default)")
	cmd.Flags().BoolVar(&anyIP, "ips", false, "any ip entity (named or default)")
	cmd.Flags().BoolVar(&strict, "strict", false, "only entities with no component besides the selected ones")
	return cmd
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
