package main

// sediment acl create|list|delete: ACLs through CreateAcls, DescribeAcls
// and DeleteAcls (KIP-140, KIP-290 for prefixed patterns), with
// kafka-acls.sh's flags (--allow-principal, --topic, --operation,
// --producer, --user-principal, …) and its list output. The requests are
// built here: kadm's ACLBuilder has no USER resource type (KIP-373's
// CreateTokens and DescribeTokens on a user principal).

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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
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
	kadm.OpClusterAction, kadm.OpDescribeConfigs, kadm.OpAlterConfigs, kadm.OpIdempotentWrite,
	kmsg.ACLOperationCreateTokens, kmsg.ACLOperationDescribeTokens, kadm.OpAll,
}

const aclOperationNames = "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens, All"

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
	kmsg.ACLResourceTypeDelegationToken: {kadm.OpDescribe},
	kmsg.ACLResourceTypeUser:            {kmsg.ACLOperationCreateTokens, kmsg.ACLOperationDescribeTokens},
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
	tokens, users         []string // --delegation-token, --user-principal
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
	fs.StringArrayVar(&f.tokens, "delegation-token", nil, "a delegation token, by its id (repeatable; '*' is every token): Describe lets a principal see it")
	fs.StringArrayVar(&f.users, "user-principal", nil, "a user principal as the resource, Type:name such as User:alice (repeatable): CreateTokens lets a principal create tokens it owns, DescribeTokens see its tokens")
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
	return len(f.topics)+len(f.groups)+len(f.txns)+len(f.tokens)+len(f.users) > 0 || f.cluster
}

const aclResourceFlags = "--topic, --group, --transactional-id, --cluster, --delegation-token or --user-principal"

func (f *aclFlags) checkNames() error {
	for _, c := range []struct {
		flag  string
		names []string
	}{{"topic", f.topics}, {"group", f.groups}, {"transactional-id", f.txns}, {"delegation-token", f.tokens}, {"user-principal", f.users}} {
		if slices.Contains(c.names, "") {
			return fmt.Errorf("--%s: empty name", c.flag)
		}
	}
	return checkPrincipals("user-principal", f.users)
}

// resources is a spec per resource type named, with ops.
func (f *aclFlags) resources(ops []kadm.ACLOperation) []aclSpec {
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
	add(kmsg.ACLResourceTypeDelegationToken, f.tokens, len(f.tokens) > 0)
	add(kmsg.ACLResourceTypeUser, f.users, len(f.users) > 0)
	return out
}

// aclSpec is one resource type's names and the operations to create or
// match on them.
type aclSpec struct {
	typ   kmsg.ACLResourceType
	names []string // none for the cluster; none of type ANY: any resource
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
		return nil, errors.New("name a resource: " + aclResourceFlags)
	}
	ops, err := parseACLOperations(f.operations)
	if err != nil {
		return nil, err
	}
	if create && len(ops) == 0 {
		ops = []kadm.ACLOperation{kadm.OpAll}
	}
	out := f.resources(ops)
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
	case len(f.tokens) > 0 || len(f.users) > 0:
		return nil, errors.New("--delegation-token and --user-principal do not go with --producer or --consumer")
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

// resourceNames are the names the requests carry for s: kafka-cluster
// for the cluster, nil (any) for type ANY without names.
func (s aclSpec) resourceNames() []*string {
	if s.typ == kmsg.ACLResourceTypeCluster {
		return []*string{kmsg.StringPtr("kafka-cluster")}
	}
	if len(s.names) == 0 {
		return []*string{nil}
	}
	out := make([]*string, len(s.names))
	for i := range s.names {
		out[i] = &s.names[i]
	}
	return out
}

// creations are the ACLs create makes for s: each name, operation, allow
// principal from each allow host (* when none is given), then each deny
// principal from each deny host.
func (f *aclFlags) creations(s aclSpec, pattern kadm.ACLPattern) []kmsg.CreateACLsRequestCreation {
	var out []kmsg.CreateACLsRequestCreation
	for _, name := range s.resourceNames() {
		for _, op := range s.ops {
			for _, e := range []struct {
				principals, hosts []string
				perm              kmsg.ACLPermissionType
			}{{f.allow, f.allowHosts, kmsg.ACLPermissionTypeAllow}, {f.deny, f.denyHosts, kmsg.ACLPermissionTypeDeny}} {
				hosts := e.hosts
				if len(hosts) == 0 {
					hosts = []string{"*"}
				}
				for _, p := range e.principals {
					for _, h := range hosts {
						c := kmsg.NewCreateACLsRequestCreation()
						c.ResourceType, c.ResourceName, c.ResourcePatternType = s.typ, *name, pattern
						c.Operation, c.Principal, c.Host, c.PermissionType = op, p, h, e.perm
						out = append(out, c)
					}
				}
			}
		}
	}
	return out
}

// aclWho is the entry part of a filter: a principal and a host (nil: any)
// and a permission.
type aclWho struct {
	principal, host *string
	perm            kmsg.ACLPermissionType
}

// anyEntry matches every principal, host and permission.
var anyEntry = []aclWho{{perm: kmsg.ACLPermissionTypeAny}}

// entryFilters: for delete, the allow principals' ALLOW entries from the
// allow hosts (any host when none is given) and the deny principals' DENY
// entries from the deny hosts; every entry without a principal flag.
func (f *aclFlags) entryFilters() []aclWho {
	if len(f.allow) == 0 && len(f.deny) == 0 {
		return anyEntry
	}
	var out []aclWho
	for _, e := range []struct {
		principals, hosts []string
		perm              kmsg.ACLPermissionType
	}{{f.allow, f.allowHosts, kmsg.ACLPermissionTypeAllow}, {f.deny, f.denyHosts, kmsg.ACLPermissionTypeDeny}} {
		hosts := []*string{nil}
		if len(e.hosts) > 0 {
			hosts = nil
			for i := range e.hosts {
				hosts = append(hosts, &e.hosts[i])
			}
		}
		for i := range e.principals {
			for _, h := range hosts {
				out = append(out, aclWho{&e.principals[i], h, e.perm})
			}
		}
	}
	return out
}

// filters are s's DescribeAcls / DeleteAcls filters: each name (any for
// type ANY without names), operation (any when s has none) and entry.
func (s aclSpec) filters(pattern kadm.ACLPattern, who []aclWho) []kmsg.DeleteACLsRequestFilter {
	ops := s.ops
	if len(ops) == 0 {
		ops = []kadm.ACLOperation{kadm.OpAny}
	}
	var out []kmsg.DeleteACLsRequestFilter
	for _, name := range s.resourceNames() {
		for _, op := range ops {
			for _, w := range who {
				fl := kmsg.NewDeleteACLsRequestFilter()
				fl.ResourceType, fl.ResourceName, fl.ResourcePatternType = s.typ, name, pattern
				fl.Operation, fl.Principal, fl.Host, fl.PermissionType = op, w.principal, w.host, w.perm
				out = append(out, fl)
			}
		}
	}
	return out
}

// describeACLs sends a DescribeAcls request per filter (the request has
// one) and returns the ACLs they match.
func describeACLs(ctx context.Context, cl *kgo.Client, filters []kmsg.DeleteACLsRequestFilter) ([]aclEntry, error) {
	var out []aclEntry
	var errs []error
	for _, fl := range filters {
		req := kmsg.NewPtrDescribeACLsRequest()
		req.ResourceType, req.ResourceName, req.ResourcePatternType = fl.ResourceType, fl.ResourceName, fl.ResourcePatternType
		req.Principal, req.Host, req.Operation, req.PermissionType = fl.Principal, fl.Host, fl.Operation, fl.PermissionType
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return nil, fmt.Errorf("DescribeAcls: %w", err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			errs = append(errs, fmt.Errorf("DescribeAcls: %w", kafkaError(err, derefString(resp.ErrorMessage))))
			continue
		}
		for _, r := range resp.Resources {
			for _, a := range r.ACLs {
				out = append(out, aclEntry{r.ResourceType, r.ResourceName, r.ResourcePatternType, a.Principal, a.Host, a.Operation, a.PermissionType})
			}
		}
	}
	return out, errors.Join(errs...)
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// withKafkaClient runs fn with a client for the command's brokers, under
// signalContext.
func withKafkaClient(cmd *cobra.Command, opts *clientOptions, fn func(ctx context.Context, cl *kgo.Client) error) error {
	ctx, cancel := signalContext(cmd)
	defer cancel()
	cl, err := opts.newClient(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	return fn(ctx, cl)
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

func newACLCreateCmd(opts *clientOptions) *cobra.Command {
	var f aclFlags
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Add ACLs: each principal gets each operation on each resource (from each host)",
		Example: `  sediment acl create --allow-principal User:alice --operation Read --operation Describe --topic orders
  sediment acl create --allow-principal User:svc --producer --topic orders- --transactional-id svc- --resource-pattern-type prefixed --idempotent
  sediment acl create --allow-principal User:app --consumer --topic orders --group app
  sediment acl create --deny-principal User:mallory --deny-host 10.0.0.9 --operation All --topic logs- --resource-pattern-type prefixed
  sediment acl create --allow-principal User:scheduler --operation CreateTokens --user-principal User:alice   # tokens owned by alice`,
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
			return withKafkaClient(cmd, opts, func(ctx context.Context, cl *kgo.Client) error {
				var added []aclEntry
				var errs []error
				for _, s := range specs {
					req := kmsg.NewPtrCreateACLsRequest()
					req.Creations = f.creations(s, pattern)
					resp, err := req.RequestWith(ctx, cl)
					if err == nil && len(resp.Results) != len(req.Creations) {
						err = fmt.Errorf("%d results to %d creations", len(resp.Results), len(req.Creations))
					}
					if err != nil {
						errs = append(errs, fmt.Errorf("CreateAcls: %w", err))
						continue
					}
					for i, r := range resp.Results {
						c := req.Creations[i]
						a := aclEntry{c.ResourceType, c.ResourceName, c.ResourcePatternType, c.Principal, c.Host, c.Operation, c.PermissionType}
						if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
							errs = append(errs, fmt.Errorf("%s: %w", a, kafkaError(err, derefString(r.ErrorMessage))))
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
			resources := f.resources(nil) // any operation
			if len(resources) == 0 {
				if pattern == kadm.ACLPatternMatch {
					return errors.New("--resource-pattern-type match needs a resource: " + aclResourceFlags)
				}
				resources = []aclSpec{{typ: kmsg.ACLResourceTypeAny}}
			}
			who := anyEntry
			if len(principals) > 0 {
				who = nil
				for i := range principals {
					who = append(who, aclWho{principal: &principals[i], perm: kmsg.ACLPermissionTypeAllow},
						aclWho{principal: &principals[i], perm: kmsg.ACLPermissionTypeDeny})
				}
			}
			var filters []kmsg.DeleteACLsRequestFilter
			for _, s := range resources {
				filters = append(filters, s.filters(pattern, who)...)
			}
			return withKafkaClient(cmd, opts, func(ctx context.Context, cl *kgo.Client) error {
				acls, err := describeACLs(ctx, cl, filters)
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
			who := f.entryFilters()
			return withKafkaClient(cmd, opts, func(ctx context.Context, cl *kgo.Client) error {
				w := cmd.OutOrStdout()
				if !force {
					var acls []aclEntry
					for _, s := range specs {
						got, err := describeACLs(ctx, cl, s.filters(pattern, who))
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
				for _, s := range specs {
					req := kmsg.NewPtrDeleteACLsRequest()
					req.Filters = s.filters(pattern, who)
					resp, err := req.RequestWith(ctx, cl)
					if err == nil && len(resp.Results) != len(req.Filters) {
						err = fmt.Errorf("%d results to %d filters", len(resp.Results), len(req.Filters))
					}
					if err != nil {
						errs = append(errs, fmt.Errorf("DeleteAcls: %w", err))
						continue
					}
					for _, r := range resp.Results {
						if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
							errs = append(errs, fmt.Errorf("DeleteAcls: %w", kafkaError(err, derefString(r.ErrorMessage))))
							continue
						}
						for _, d := range r.MatchingACLs {
							a := aclEntry{d.ResourceType, d.ResourceName, d.ResourcePatternType, d.Principal, d.Host, d.Operation, d.PermissionType}
							if err := kerr.ErrorForCode(d.ErrorCode); err != nil {
								errs = append(errs, fmt.Errorf("%s: %w", a, kafkaError(err, derefString(d.ErrorMessage))))
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
