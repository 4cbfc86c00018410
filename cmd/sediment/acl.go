package main

// sediment acl create|list|delete: ACLs through kadm (CreateAcls,
// DescribeAcls, DeleteAcls; KIP-140, KIP-290 for prefixed patterns), with
// kafka-acls.sh's flags (--allow-principal, --topic, --operation,
// --producer, …) and its list output.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func newACLCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Create, list and delete ACLs (as kafka-acls.sh does)",
	}
	opts := addClientFlags(cmd)
	cmd.AddCommand(newACLCreateCmd(opts), newACLListCmd(opts), newACLDeleteCmd(opts))
	return cmd
}

// aclOperations are the operations --operation takes, in Kafka's order.
var aclOperations = []kadm.ACLOperation{
	kadm.OpRead, kadm.OpWrite, kadm.OpCreate, kadm.OpDelete, kadm.OpAlter, kadm.OpDescribe,
	kadm.OpClusterAction, kadm.OpDescribeConfigs, kadm.OpAlterConfigs, kadm.OpIdempotentWrite, kadm.OpAll,
}

const aclOperationNames = "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All"

// normName lowercases s and drops '_', '-' and spaces: "ClusterAction",
// "CLUSTER_ACTION" and "cluster-action" are one operation.
func normName(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '_', '-', ' ':
			return -1
		}
		return r
	}, strings.ToLower(s))
}

func parseACLOperations(list []string) ([]kadm.ACLOperation, error) {
	var out []kadm.ACLOperation
	for _, s := range list {
		i := slices.IndexFunc(aclOperations, func(op kadm.ACLOperation) bool { return normName(op.String()) == normName(s) })
		if i < 0 {
			return nil, fmt.Errorf("--operation %q: unknown operation (want %s)", s, aclOperationNames)
		}
		if !slices.Contains(out, aclOperations[i]) {
			out = append(out, aclOperations[i])
		}
	}
	return out, nil
}

// aclSupportedOps are the operations each resource type has (Kafka's
// AclEntry.supportedOperations), ALL besides.
var aclSupportedOps = map[kmsg.ACLResourceType][]kadm.ACLOperation{
	kmsg.ACLResourceTypeTopic:           {kadm.OpRead, kadm.OpWrite, kadm.OpCreate, kadm.OpDescribe, kadm.OpDelete, kadm.OpAlter, kadm.OpDescribeConfigs, kadm.OpAlterConfigs},
	kmsg.ACLResourceTypeGroup:           {kadm.OpRead, kadm.OpDescribe, kadm.OpDelete},
	kmsg.ACLResourceTypeCluster:         {kadm.OpCreate, kadm.OpClusterAction, kadm.OpDescribeConfigs, kadm.OpAlterConfigs, kadm.OpIdempotentWrite, kadm.OpAlter, kadm.OpDescribe},
	kmsg.ACLResourceTypeTransactionalId: {kadm.OpDescribe, kadm.OpWrite},
}

// parsePatternType reads --resource-pattern-type, one of allowed.
func parsePatternType(s string, allowed ...kadm.ACLPattern) (kadm.ACLPattern, error) {
	var names []string
	for _, p := range allowed {
		names = append(names, strings.ToLower(p.String()))
		if normName(s) == normName(p.String()) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("--resource-pattern-type %q: want %s", s, strings.Join(names, ", "))
}

// checkPrincipals refuses principals that are not Type:name (User:alice).
func checkPrincipals(flag string, ps []string) error {
	for _, p := range ps {
		if typ, name, ok := strings.Cut(p, ":"); !ok || typ == "" || name == "" {
			return fmt.Errorf("--%s %q: want Type:name, e.g. User:alice (User:* for every user)", flag, p)
		}
	}
	return nil
}

// aclFlags holds the flags of the three subcommands (each declares the ones
// it takes).
type aclFlags struct {
	allow, deny           []string // principals
	allowHosts, denyHosts []string
	operations            []string
	topics, groups, txns  []string
	cluster               bool
	patternType           string
	producer, consumer    bool
	idempotent            bool
}

func (f *aclFlags) addResourceFlags(cmd *cobra.Command, patternDefault, patternHelp string) {
	fs := cmd.Flags()
	fs.StringArrayVar(&f.topics, "topic", nil, "a topic (repeatable; '*' is every topic)")
	fs.StringArrayVar(&f.groups, "group", nil, "a consumer group (repeatable; '*' is every group)")
	fs.StringArrayVar(&f.txns, "transactional-id", nil, "a transactional id (repeatable; '*' is every one)")
	fs.BoolVar(&f.cluster, "cluster", false, "the cluster resource (kafka-cluster)")
	fs.StringVar(&f.patternType, "resource-pattern-type", patternDefault, patternHelp)
}

func (f *aclFlags) addEntryFlags(cmd *cobra.Command, create bool) {
	fs := cmd.Flags()
	hostHelp := "host (IP address) the allow principals are allowed from (repeatable; default *, any host)"
	denyHostHelp := "host (IP address) the deny principals are denied from (repeatable; default *, any host)"
	opHelp := "operation (repeatable): " + aclOperationNames + "; case-insensitive (default All)"
	if !create {
		hostHelp = "only the ACLs of the allow principals with this host (repeatable; default: any host)"
		denyHostHelp = "only the ACLs of the deny principals with this host (repeatable; default: any host)"
		opHelp = "only the ACLs with this operation (repeatable): " + aclOperationNames + " (default: any operation)"
	}
	fs.StringArrayVar(&f.allow, "allow-principal", nil, "principal to allow, Type:name such as User:alice (repeatable)")
	fs.StringArrayVar(&f.deny, "deny-principal", nil, "principal to deny, Type:name such as User:mallory (repeatable)")
	fs.StringArrayVar(&f.allowHosts, "allow-host", nil, hostHelp)
	fs.StringArrayVar(&f.denyHosts, "deny-host", nil, denyHostHelp)
	fs.StringSliceVar(&f.operations, "operation", nil, opHelp)
	fs.BoolVar(&f.producer, "producer", false, "a producer's ACLs: WRITE, DESCRIBE and CREATE on the topics; WRITE and DESCRIBE on the transactional ids")
	fs.BoolVar(&f.consumer, "consumer", false, "a consumer's ACLs: READ and DESCRIBE on the topics, READ on the groups")
	fs.BoolVar(&f.idempotent, "idempotent", false, "with --producer: also IDEMPOTENT_WRITE on the cluster")
}

func (f *aclFlags) hasResource() bool {
	return len(f.topics)+len(f.groups)+len(f.txns) > 0 || f.cluster
}

func (f *aclFlags) checkNames() error {
	for _, c := range []struct {
		flag  string
		names []string
	}{{"topic", f.topics}, {"group", f.groups}, {"transactional-id", f.txns}} {
		if slices.Contains(c.names, "") {
			return fmt.Errorf("--%s: empty name", c.flag)
		}
	}
	return nil
}

// aclSpec is one resource type's names and the operations to create or
// match on them.
type aclSpec struct {
	typ   kmsg.ACLResourceType
	names []string // none for the cluster
	ops   []kadm.ACLOperation
}

// specs turns the resource, operation and convenience flags into one spec
// per resource type. ops nil (a filter without --operation) means any
// operation.
func (f *aclFlags) specs(create bool) ([]aclSpec, error) {
	if err := f.checkNames(); err != nil {
		return nil, err
	}
	if f.idempotent && !f.producer {
		return nil, errors.New("--idempotent goes with --producer")
	}
	if f.producer || f.consumer {
		return f.convenienceSpecs()
	}
	if !f.hasResource() {
		return nil, errors.New("name a resource: --topic, --group, --transactional-id and/or --cluster")
	}
	ops, err := parseACLOperations(f.operations)
	if err != nil {
		return nil, err
	}
	if create && len(ops) == 0 {
		ops = []kadm.ACLOperation{kadm.OpAll}
	}
	var out []aclSpec
	add := func(typ kmsg.ACLResourceType, names []string, set bool) {
		if set {
			out = append(out, aclSpec{typ, names, ops})
		}
	}
	add(kmsg.ACLResourceTypeTopic, f.topics, len(f.topics) > 0)
	add(kmsg.ACLResourceTypeGroup, f.groups, len(f.groups) > 0)
	add(kmsg.ACLResourceTypeTransactionalId, f.txns, len(f.txns) > 0)
	add(kmsg.ACLResourceTypeCluster, nil, f.cluster)
	if create {
		for _, s := range out {
			supported := append([]kadm.ACLOperation{kadm.OpAll}, aclSupportedOps[s.typ]...)
			for _, op := range s.ops {
				if !slices.Contains(supported, op) {
					var names []string
					for _, o := range supported {
						names = append(names, o.String())
					}
					return nil, fmt.Errorf("--operation %s: resource type %s only supports operations %s", op, s.typ, strings.Join(names, ", "))
				}
			}
		}
	}
	return out, nil
}

// convenienceSpecs: --producer and --consumer as kafka-acls.sh expands them.
func (f *aclFlags) convenienceSpecs() ([]aclSpec, error) {
	switch {
	case len(f.operations) > 0:
		return nil, errors.New("--operation does not go with --producer or --consumer, which set the operations themselves")
	case len(f.topics) == 0:
		return nil, errors.New("--producer and --consumer need a --topic")
	case f.consumer && len(f.groups) == 0:
		return nil, errors.New("--consumer needs a --group")
	case !f.consumer && len(f.groups) > 0:
		return nil, errors.New("--group goes with --consumer (a producer needs no group)")
	case !f.producer && len(f.txns) > 0:
		return nil, errors.New("--transactional-id goes with --producer (a consumer needs none)")
	case f.cluster:
		return nil, errors.New("--cluster does not go with --producer or --consumer (--idempotent adds IDEMPOTENT_WRITE on the cluster)")
	}
	var topicOps []kadm.ACLOperation
	if f.producer {
		topicOps = append(topicOps, kadm.OpWrite, kadm.OpDescribe, kadm.OpCreate)
	}
	if f.consumer {
		topicOps = append(topicOps, kadm.OpRead)
		if !f.producer {
			topicOps = append(topicOps, kadm.OpDescribe)
		}
	}
	out := []aclSpec{{kmsg.ACLResourceTypeTopic, f.topics, topicOps}}
	if f.consumer {
		out = append(out, aclSpec{kmsg.ACLResourceTypeGroup, f.groups, []kadm.ACLOperation{kadm.OpRead}})
	}
	if len(f.txns) > 0 {
		out = append(out, aclSpec{kmsg.ACLResourceTypeTransactionalId, f.txns, []kadm.ACLOperation{kadm.OpWrite, kadm.OpDescribe}})
	}
	if f.idempotent {
		out = append(out, aclSpec{kmsg.ACLResourceTypeCluster, nil, []kadm.ACLOperation{kadm.OpIdempotentWrite}})
	}
	return out, nil
}

// checkEntryFlags checks the principals and hosts.
func (f *aclFlags) checkEntryFlags() error {
	if err := checkPrincipals("allow-principal", f.allow); err != nil {
		return err
	}
	if err := checkPrincipals("deny-principal", f.deny); err != nil {
		return err
	}
	if len(f.allowHosts) > 0 && len(f.allow) == 0 {
		return errors.New("--allow-host needs an --allow-principal")
	}
	if len(f.denyHosts) > 0 && len(f.deny) == 0 {
		return errors.New("--deny-host needs a --deny-principal")
	}
	if slices.Contains(f.allowHosts, "") || slices.Contains(f.denyHosts, "") {
		return errors.New("--allow-host, --deny-host: empty host (* is any host)")
	}
	return nil
}

// resourceBuilder is a builder with spec's resource.
func (s aclSpec) resourceBuilder() *kadm.ACLBuilder {
	b := kadm.NewACLs()
	switch s.typ {
	case kmsg.ACLResourceTypeTopic:
		b.MaybeTopics(s.names...)
	case kmsg.ACLResourceTypeGroup:
		b.MaybeGroups(s.names...)
	case kmsg.ACLResourceTypeTransactionalId:
		b.MaybeTransactionalIDs(s.names...)
	case kmsg.ACLResourceTypeCluster:
		b.MaybeClusters(true)
	}
	return b
}

// filterBuilders: for delete, a filter per spec with the principals (any
// principal and any permission when none is given), hosts (any host when
// none is given) and operations (any when none is given).
func (f *aclFlags) filterBuilders(specs []aclSpec, pattern kadm.ACLPattern) []*kadm.ACLBuilder {
	var out []*kadm.ACLBuilder
	for _, s := range specs {
		b := s.resourceBuilder().ResourcePatternType(pattern).Operations(s.ops...)
		if len(f.allow) == 0 && len(f.deny) == 0 {
			b.Allow().AllowHosts().Deny().DenyHosts()
		}
		if len(f.allow) > 0 {
			b.Allow(f.allow...).AllowHosts(f.allowHosts...)
		}
		if len(f.deny) > 0 {
			b.Deny(f.deny...).DenyHosts(f.denyHosts...)
		}
		out = append(out, b)
	}
	return out
}

// aclEntry is one ACL: a resource pattern and an access control entry.
type aclEntry struct {
	typ        kmsg.ACLResourceType
	name       string
	pattern    kadm.ACLPattern
	principal  string
	host       string
	op         kadm.ACLOperation
	permission kmsg.ACLPermissionType
}

func (a aclEntry) resource() string {
	return fmt.Sprintf("ResourcePattern(resourceType=%s, name=%s, patternType=%s)", a.typ, a.name, a.pattern)
}

func (a aclEntry) entry() string {
	return fmt.Sprintf("(principal=%s, host=%s, operation=%s, permissionType=%s)", a.principal, a.host, a.op, a.permission)
}

func (a aclEntry) String() string { return a.resource() + " " + a.entry() }

func compareACLs(a, b aclEntry) int {
	if c := int(a.typ) - int(b.typ); c != 0 {
		return c
	}
	if c := strings.Compare(a.name, b.name); c != 0 {
		return c
	}
	if c := int(a.pattern) - int(b.pattern); c != 0 {
		return c
	}
	if c := strings.Compare(a.principal, b.principal); c != 0 {
		return c
	}
	if c := strings.Compare(a.host, b.host); c != 0 {
		return c
	}
	if c := strings.Compare(a.permission.String(), b.permission.String()); c != 0 {
		return c
	}
	return int(a.op) - int(b.op)
}

// sortACLs sorts by resource (type, name, pattern type), then principal,
// host, permission and operation, and drops duplicates.
func sortACLs(acls []aclEntry) []aclEntry {
	slices.SortFunc(acls, compareACLs)
	return slices.Compact(acls)
}

// printACLs writes acls grouped by resource, as kafka-acls.sh does:
//
//	Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
//		(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)
//
// with a blank line between resources.
func printACLs(w io.Writer, heading string, acls []aclEntry) {
	acls = sortACLs(acls)
	for i, a := range acls {
		if i == 0 || a.resource() != acls[i-1].resource() {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "%s for resource `%s`:\n", heading, a.resource())
		}
		fmt.Fprintf(w, "\t%s\n", a.entry())
	}
}

// aclJSON is an ACL in list --output json.
type aclJSON struct {
	ResourceType   string `json:"resource_type"`
	ResourceName   string `json:"resource_name"`
	PatternType    string `json:"pattern_type"`
	Principal      string `json:"principal"`
	Host           string `json:"host"`
	Operation      string `json:"operation"`
	PermissionType string `json:"permission_type"`
}

func printACLsJSON(w io.Writer, acls []aclEntry) error {
	out := make([]aclJSON, 0, len(acls))
	for _, a := range sortACLs(acls) {
		out = append(out, aclJSON{a.typ.String(), a.name, a.pattern.String(), a.principal, a.host, a.op.String(), a.permission.String()})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func describedEntries(res kadm.DescribeACLsResults) ([]aclEntry, error) {
	var out []aclEntry
	var errs []error
	for _, r := range res {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("DescribeAcls: %w", kafkaError(r.Err, r.ErrMessage)))
			continue
		}
		for _, d := range r.Described {
			out = append(out, aclEntry{d.Type, d.Name, d.Pattern, d.Principal, d.Host, d.Operation, d.Permission})
		}
	}
	return out, errors.Join(errs...)
}

func newACLCreateCmd(opts *clientOptions) *cobra.Command {
	var f aclFlags
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Add ACLs: each principal gets each operation on each resource (from each host)",
		Example: `  sediment acl create --allow-principal User:alice --operation Read --operation Describe --topic orders
  sediment acl create --allow-principal User:svc --producer --topic orders- --transactional-id svc- --resource-pattern-type prefixed --idempotent
  sediment acl create --allow-principal User:app --consumer --topic orders --group app
  sediment acl create --deny-principal User:mallory --deny-host 10.0.0.9 --operation All --topic logs- --resource-pattern-type prefixed`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pattern, err := parsePatternType(f.patternType, kadm.ACLPatternLiteral, kadm.ACLPatternPrefixed)
			if err != nil {
				return err
			}
			if len(f.allow) == 0 && len(f.deny) == 0 {
				return errors.New("name a principal: --allow-principal or --deny-principal (User:name)")
			}
			if err := f.checkEntryFlags(); err != nil {
				return err
			}
			if f.cluster && pattern == kadm.ACLPatternPrefixed {
				return errors.New("--cluster takes no --resource-pattern-type prefixed: the cluster's ACLs are literal (kafka-cluster)")
			}
			specs, err := f.specs(true)
			if err != nil {
				return err
			}
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				var added []aclEntry
				var errs []error
				for _, s := range specs {
					b := s.resourceBuilder().ResourcePatternType(pattern).Operations(s.ops...).
						MaybeAllow(f.allow...).MaybeAllowHosts(f.allowHosts...).
						MaybeDeny(f.deny...).MaybeDenyHosts(f.denyHosts...)
					res, err := adm.CreateACLs(ctx, b)
					if err != nil {
						errs = append(errs, fmt.Errorf("CreateAcls: %w", err))
						continue
					}
					for _, r := range res {
						a := aclEntry{r.Type, r.Name, r.Pattern, r.Principal, r.Host, r.Operation, r.Permission}
						if r.Err != nil {
							errs = append(errs, fmt.Errorf("%s: %w", a, kafkaError(r.Err, r.ErrMessage)))
							continue
						}
						added = append(added, a)
					}
				}
				printACLs(cmd.OutOrStdout(), "Added ACLs", added)
				return errors.Join(errs...)
			})
		},
	}
	f.addResourceFlags(cmd, "literal", "literal (the name itself) or prefixed (every name that starts with it)")
	f.addEntryFlags(cmd, true)
	return cmd
}

func newACLListCmd(opts *clientOptions) *cobra.Command {
	var f aclFlags
	var principals []string
	var output string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List ACLs: all of them, or those of the resources and principals given",
		Example: `  sediment acl list
  sediment acl list --topic orders
  sediment acl list --topic orders --resource-pattern-type match   # every ACL that applies to orders
  sediment acl list --principal User:alice -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pattern, err := parsePatternType(f.patternType, kadm.ACLPatternAny, kadm.ACLPatternMatch, kadm.ACLPatternLiteral, kadm.ACLPatternPrefixed)
			if err != nil {
				return err
			}
			if output != "text" && output != "json" {
				return fmt.Errorf("--output %q: want text or json", output)
			}
			if err := checkPrincipals("principal", principals); err != nil {
				return err
			}
			if err := f.checkNames(); err != nil {
				return err
			}
			var b *kadm.ACLBuilder
			if f.hasResource() {
				b = kadm.NewACLs().MaybeTopics(f.topics...).MaybeGroups(f.groups...).
					MaybeTransactionalIDs(f.txns...).MaybeClusters(f.cluster)
			} else {
				if pattern == kadm.ACLPatternMatch {
					return errors.New("--resource-pattern-type match needs a resource: --topic, --group, --transactional-id or --cluster")
				}
				b = kadm.NewACLs().AnyResource()
			}
			b.ResourcePatternType(pattern).Operations()
			if len(principals) > 0 {
				b.Allow(principals...).AllowHosts().Deny(principals...).DenyHosts()
			} else {
				b.Allow().AllowHosts().Deny().DenyHosts()
			}
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				res, err := adm.DescribeACLs(ctx, b)
				if err != nil {
					return fmt.Errorf("DescribeAcls: %w", err)
				}
				acls, err := describedEntries(res)
				if err != nil {
					return err
				}
				if output == "json" {
					return printACLsJSON(cmd.OutOrStdout(), acls)
				}
				printACLs(cmd.OutOrStdout(), "Current ACLs", acls)
				return nil
			})
		},
	}
	f.addResourceFlags(cmd, "any", "any (every pattern with the names given), match (every ACL that applies to the names: literal, wildcard and prefixed), literal or prefixed")
	cmd.Flags().StringArrayVar(&principals, "principal", nil, "only the ACLs of this principal, Type:name (repeatable)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text (as kafka-acls.sh prints them) or json")
	return cmd
}

func newACLDeleteCmd(opts *clientOptions) *cobra.Command {
	var f aclFlags
	var force bool
	cmd := &cobra.Command{
		Use:     "delete",
		Aliases: []string{"rm"},
		Short:   "Remove the ACLs of the resources given that match the principal, host and operation filters (needs --force)",
		Long: `Remove ACLs. At least one resource flag is needed; the principal, host and
operation flags narrow the match (without them every ACL of the resources
goes). Without --force nothing is removed: the command lists the ACLs it
would remove and fails, for it does not ask for confirmation.`,
		Example: `  sediment acl delete --topic orders                                 # lists what would go
  sediment acl delete --topic orders --allow-principal User:alice --force
  sediment acl delete --topic logs- --resource-pattern-type prefixed --force
  sediment acl delete --allow-principal User:app --consumer --topic orders --group app --force`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pattern, err := parsePatternType(f.patternType, kadm.ACLPatternAny, kadm.ACLPatternMatch, kadm.ACLPatternLiteral, kadm.ACLPatternPrefixed)
			if err != nil {
				return err
			}
			if err := f.checkEntryFlags(); err != nil {
				return err
			}
			specs, err := f.specs(false)
			if err != nil {
				return err
			}
			builders := f.filterBuilders(specs, pattern)
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				w := cmd.OutOrStdout()
				if !force {
					var acls []aclEntry
					for _, b := range builders {
						res, err := adm.DescribeACLs(ctx, b)
						if err != nil {
							return fmt.Errorf("DescribeAcls: %w", err)
						}
						got, err := describedEntries(res)
						if err != nil {
							return err
						}
						acls = append(acls, got...)
					}
					if n := len(sortACLs(acls)); n > 0 {
						printACLs(w, "Would remove ACLs", acls)
						return fmt.Errorf("nothing removed: acl delete does not ask for confirmation (it is not interactive); add --force to remove the %d ACLs listed", n)
					}
					return errors.New("nothing removed: no ACL matches (and acl delete removes nothing without --force)")
				}
				var removed []aclEntry
				var errs []error
				for _, b := range builders {
					res, err := adm.DeleteACLs(ctx, b)
					if err != nil {
						errs = append(errs, fmt.Errorf("DeleteAcls: %w", err))
						continue
					}
					for _, r := range res {
						if r.Err != nil {
							errs = append(errs, fmt.Errorf("DeleteAcls: %w", kafkaError(r.Err, r.ErrMessage)))
							continue
						}
						for _, d := range r.Deleted {
							a := aclEntry{d.Type, d.Name, d.Pattern, d.Principal, d.Host, d.Operation, d.Permission}
							if d.Err != nil {
								errs = append(errs, fmt.Errorf("%s: %w", a, kafkaError(d.Err, d.ErrMessage)))
								continue
							}
							removed = append(removed, a)
						}
					}
				}
				if len(removed) == 0 && len(errs) == 0 {
					fmt.Fprintln(w, "No ACL matched: nothing removed.")
				}
				printACLs(w, "Removed ACLs", removed)
				return errors.Join(errs...)
			})
		},
	}
	f.addResourceFlags(cmd, "literal", "any (every pattern with the names given), match (every ACL that applies to the names: literal, wildcard and prefixed), literal or prefixed")
	f.addEntryFlags(cmd, false)
	cmd.Flags().BoolVar(&force, "force", false, "remove without confirmation (required: the command is not interactive)")
	return cmd
}
