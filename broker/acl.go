package broker

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// The authorizer: Kafka's StandardAuthorizer over the ACLs of the metadata
// log (metadata/acl.go). A principal is "User:" and the connection's
// principal (a SASL user, a TLS client certificate's subject, ANONYMOUS on
// PLAINTEXT), its host the client's IP address. A request for (operation,
// resource):
//
//   - is allowed for a super user (super.users);
//   - is denied if a DENY entry matches: a pattern that covers the resource
//     (LITERAL with its name or "*", PREFIXED with a prefix of it), whose
//     principal is the principal or User:*, whose host is the host or "*",
//     and whose operation is the operation or ALL;
//   - is allowed if an ALLOW entry matches the same way, where ALLOW READ,
//     WRITE, DELETE or ALTER also grant DESCRIBE, and ALLOW ALTER_CONFIGS
//     grants DESCRIBE_CONFIGS;
//   - otherwise is allowed only with allow.everyone.if.no.acl.found and no
//     ACL at all on the resource.
//
// Which operation each API needs on which resource is authz.go's table,
// one place for every handler.

// AuthorizerConfig turns the authorizer on (Kafka's authorizer.class.name);
// off, every client may do everything, as in Kafka without an authorizer.
type AuthorizerConfig struct {
	Enabled bool
	// SuperUsers are principals ("User:admin") allowed everything
	// (super.users).
	SuperUsers []string
	// AllowEveryoneIfNoACLFound allows an operation on a resource that has
	// no ACL at all (allow.everyone.if.no.acl.found).
	AllowEveryoneIfNoACLFound bool
}

// ParseSuperUsers reads Kafka's super.users form: principals separated by
// semicolons, each "User:<name>".
func ParseSuperUsers(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ";") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if err := checkPrincipal(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// checkPrincipal accepts Kafka's principal form, "User:<name>".
func checkPrincipal(p string) error {
	typ, name, ok := strings.Cut(p, ":")
	if !ok || name == "" || typ != "User" {
		return fmt.Errorf("principal %q: want User:<name>", p)
	}
	if !metadata.ValidACLStrings(p) {
		return fmt.Errorf("principal %q: contains NUL", p)
	}
	return nil
}

type resKey struct {
	typ  kmsg.ACLResourceType
	name string
}

// aclIndex is one ACLSet arranged for look-ups.
type aclIndex struct {
	src      *metadata.ACLSet
	literal  map[resKey][]metadata.ACL               // LITERAL patterns, "*" included
	prefixed map[kmsg.ACLResourceType][]metadata.ACL // PREFIXED patterns by type
}

type authorizer struct {
	cfg   AuthorizerConfig
	super map[string]bool
	idx   atomic.Pointer[aclIndex]
}

func newAuthorizer(cfg AuthorizerConfig) *authorizer {
	a := &authorizer{cfg: cfg, super: map[string]bool{}}
	for _, p := range cfg.SuperUsers {
		a.super[p] = true
	}
	return a
}

// index returns the look-up structure for the ACLs of st, rebuilt only when
// they changed (the metadata keeps the set's pointer until then).
func (a *authorizer) index(st *metadata.State) *aclIndex {
	set := st.ACLs()
	if ix := a.idx.Load(); ix != nil && ix.src == set {
		return ix
	}
	ix := buildACLIndex(set, set.All())
	a.idx.Store(ix)
	return ix
}

func buildACLIndex(set *metadata.ACLSet, acls []metadata.ACL) *aclIndex {
	ix := &aclIndex{src: set, literal: map[resKey][]metadata.ACL{}, prefixed: map[kmsg.ACLResourceType][]metadata.ACL{}}
	for _, acl := range acls {
		rt := kmsg.ACLResourceType(acl.ResourceType)
		switch kmsg.ACLResourcePatternType(acl.PatternType) {
		case kmsg.ACLResourcePatternTypeLiteral:
			k := resKey{rt, acl.ResourceName}
			ix.literal[k] = append(ix.literal[k], acl)
		case kmsg.ACLResourcePatternTypePrefixed:
			ix.prefixed[rt] = append(ix.prefixed[rt], acl)
		}
	}
	return ix
}

// subject is who asks: the principal and host of one connection, with the
// ACLs current when its request arrived.
type subject struct {
	a         *authorizer
	ix        *aclIndex
	principal string // "User:alice"
	host      string
	super     bool
}

func (a *authorizer) subject(st *metadata.State, ci *ConnInfo) *subject {
	s := &subject{a: a, ix: a.index(st), principal: "User:" + ci.principal(), host: "*"}
	if ci.Remote != nil {
		if h, _, err := net.SplitHostPort(ci.Remote.String()); err == nil {
			s.host = h
		}
	}
	s.super = a.super[s.principal]
	return s
}

// implies reports whether an ALLOW entry for granted allows op.
func implies(granted, op kmsg.ACLOperation) bool {
	if granted == op || granted == kmsg.ACLOperationAll {
		return true
	}
	switch op {
	case kmsg.ACLOperationDescribe:
		return granted == kmsg.ACLOperationRead || granted == kmsg.ACLOperationWrite ||
			granted == kmsg.ACLOperationDelete || granted == kmsg.ACLOperationAlter
	case kmsg.ACLOperationDescribeConfigs:
		return granted == kmsg.ACLOperationAlterConfigs
	}
	return false
}

func (s *subject) matches(acl *metadata.ACL) bool {
	return (acl.Principal == s.principal || acl.Principal == "User:*") && (acl.Host == s.host || acl.Host == "*")
}

// allowed reports whether the subject may do op on the resource.
func (s *subject) allowed(op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	if s == nil || s.super {
		return true
	}
	found, allow := false, false
	check := func(acls []metadata.ACL) bool { // false: denied
		for i := range acls {
			acl := &acls[i]
			found = true
			if !s.matches(acl) {
				continue
			}
			granted := kmsg.ACLOperation(acl.Operation)
			switch kmsg.ACLPermissionType(acl.Permission) {
			case kmsg.ACLPermissionTypeDeny:
				if granted == op || granted == kmsg.ACLOperationAll {
					return false
				}
			case kmsg.ACLPermissionTypeAllow:
				if implies(granted, op) {
					allow = true
				}
			}
		}
		return true
	}
	if !check(s.ix.literal[resKey{rt, name}]) {
		return false
	}
	if name != "*" && !check(s.ix.literal[resKey{rt, "*"}]) {
		return false
	}
	for i := range s.ix.prefixed[rt] {
		acl := s.ix.prefixed[rt][i : i+1]
		if strings.HasPrefix(name, acl[0].ResourceName) && !check(acl) {
			return false
		}
	}
	if allow {
		return true
	}
	return !found && s.a.cfg.AllowEveryoneIfNoACLFound
}

func (s *subject) topic(op kmsg.ACLOperation, name string) bool {
	return s.allowed(op, kmsg.ACLResourceTypeTopic, name)
}

func (s *subject) group(op kmsg.ACLOperation, name string) bool {
	return s.allowed(op, kmsg.ACLResourceTypeGroup, name)
}

func (s *subject) txnID(op kmsg.ACLOperation, name string) bool {
	return s.allowed(op, kmsg.ACLResourceTypeTransactionalId, name)
}

func (s *subject) cluster(op kmsg.ACLOperation) bool {
	return s.allowed(op, kmsg.ACLResourceTypeCluster, "kafka-cluster")
}

// writeAnyTopic is Kafka's authorizeByResourceType(TOPIC, WRITE) (KIP-679:
// an idempotent producer needs WRITE on some topic, or IDEMPOTENT_WRITE on
// the cluster): some ALLOW WRITE (or ALL) entry of the subject on a topic
// pattern that no DENY of the subject covers.
func (s *subject) writeAnyTopic() bool {
	if s == nil || s.super {
		return true
	}
	var allows, denies []metadata.ACL
	collect := func(acls []metadata.ACL) {
		for _, acl := range acls {
			op := kmsg.ACLOperation(acl.Operation)
			if !s.matches(&acl) || (op != kmsg.ACLOperationWrite && op != kmsg.ACLOperationAll) {
				continue
			}
			if kmsg.ACLPermissionType(acl.Permission) == kmsg.ACLPermissionTypeDeny {
				denies = append(denies, acl)
			} else {
				allows = append(allows, acl)
			}
		}
	}
	for k, acls := range s.ix.literal {
		if k.typ == kmsg.ACLResourceTypeTopic {
			collect(acls)
		}
	}
	collect(s.ix.prefixed[kmsg.ACLResourceTypeTopic])
	covers := func(d, a metadata.ACL) bool {
		if kmsg.ACLResourcePatternType(d.PatternType) == kmsg.ACLResourcePatternTypeLiteral {
			return d.ResourceName == "*" || (d.ResourceName == a.ResourceName && kmsg.ACLResourcePatternType(a.PatternType) == kmsg.ACLResourcePatternTypeLiteral)
		}
		return strings.HasPrefix(a.ResourceName, d.ResourceName)
	}
	for _, a := range allows {
		denied := false
		for _, d := range denies {
			if covers(d, a) {
				denied = true
				break
			}
		}
		if !denied {
			return true
		}
	}
	if len(allows) == 0 && s.a.cfg.AllowEveryoneIfNoACLFound {
		// Kafka: allowed if no topic ACL could deny it.
		return len(denies) == 0
	}
	return false
}

// authorizedOps is the bit field of the operations among ops the subject
// may do on the resource (Kafka's *AuthorizedOperations fields: bit n set
// for operation code n).
func (s *subject) authorizedOps(rt kmsg.ACLResourceType, name string, ops ...kmsg.ACLOperation) int32 {
	var bits int32
	for _, op := range ops {
		if s.allowed(op, rt, name) {
			bits |= 1 << op
		}
	}
	return bits
}

var (
	topicOps   = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationCreate, kmsg.ACLOperationDelete, kmsg.ACLOperationAlter, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs}
	groupOps   = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDelete, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs}
	clusterOps = []kmsg.ACLOperation{kmsg.ACLOperationCreate, kmsg.ACLOperationAlter, kmsg.ACLOperationDescribe, kmsg.ACLOperationClusterAction, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs, kmsg.ACLOperationIdempotentWrite}
)

// aclFilter is a DescribeAcls or DeleteAcls filter.
type aclFilter struct {
	rt        kmsg.ACLResourceType
	name      *string
	pattern   kmsg.ACLResourcePatternType
	principal *string
	host      *string
	op        kmsg.ACLOperation
	perm      kmsg.ACLPermissionType
}

// check refuses what Kafka's AclBindingFilter refuses: an UNKNOWN anywhere.
func (f *aclFilter) check() error {
	if f.rt == kmsg.ACLResourceTypeUnknown || f.pattern == kmsg.ACLResourcePatternTypeUnknown ||
		f.op == kmsg.ACLOperationUnknown || f.perm == kmsg.ACLPermissionTypeUnknown {
		return fmt.Errorf("%w: the filter has an UNKNOWN element", kerr.InvalidRequest)
	}
	if f.rt > kmsg.ACLResourceTypeUser || f.pattern > kmsg.ACLResourcePatternTypePrefixed ||
		f.op > kmsg.ACLOperationDescribeTokens || f.perm > kmsg.ACLPermissionTypeAllow {
		return fmt.Errorf("%w: the filter has an unknown code", kerr.InvalidRequest)
	}
	return nil
}

func (f *aclFilter) matches(a *metadata.ACL) bool {
	if f.rt != kmsg.ACLResourceTypeAny && kmsg.ACLResourceType(a.ResourceType) != f.rt {
		return false
	}
	pt := kmsg.ACLResourcePatternType(a.PatternType)
	switch f.pattern {
	case kmsg.ACLResourcePatternTypeAny:
		if f.name != nil && *f.name != a.ResourceName {
			return false
		}
	case kmsg.ACLResourcePatternTypeMatch:
		// Every pattern that would apply to the resource named.
		if f.name != nil {
			n := *f.name
			ok := (pt == kmsg.ACLResourcePatternTypeLiteral && (a.ResourceName == n || a.ResourceName == "*")) ||
				(pt == kmsg.ACLResourcePatternTypePrefixed && strings.HasPrefix(n, a.ResourceName))
			if !ok {
				return false
			}
		}
	default:
		if pt != f.pattern || (f.name != nil && *f.name != a.ResourceName) {
			return false
		}
	}
	return (f.principal == nil || *f.principal == a.Principal) &&
		(f.host == nil || *f.host == a.Host) &&
		(f.op == kmsg.ACLOperationAny || kmsg.ACLOperation(a.Operation) == f.op) &&
		(f.perm == kmsg.ACLPermissionTypeAny || kmsg.ACLPermissionType(a.Permission) == f.perm)
}

// checkNewACL refuses what Kafka's AclControlManager refuses in a new ACL.
func checkNewACL(a *metadata.ACL) error {
	rt, pt := kmsg.ACLResourceType(a.ResourceType), kmsg.ACLResourcePatternType(a.PatternType)
	op, perm := kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission)
	switch {
	case rt < kmsg.ACLResourceTypeTopic || rt > kmsg.ACLResourceTypeUser:
		return fmt.Errorf("%w: invalid resource type %d", kerr.InvalidRequest, rt)
	case pt != kmsg.ACLResourcePatternTypeLiteral && pt != kmsg.ACLResourcePatternTypePrefixed:
		return fmt.Errorf("%w: invalid pattern type %d", kerr.InvalidRequest, pt)
	case op < kmsg.ACLOperationAll || op > kmsg.ACLOperationDescribeTokens:
		return fmt.Errorf("%w: invalid operation %d", kerr.InvalidRequest, op)
	case perm != kmsg.ACLPermissionTypeAllow && perm != kmsg.ACLPermissionTypeDeny:
		return fmt.Errorf("%w: invalid permission type %d", kerr.InvalidRequest, perm)
	case a.ResourceName == "":
		return fmt.Errorf("%w: empty resource name", kerr.InvalidRequest)
	case rt == kmsg.ACLResourceTypeCluster && (a.ResourceName != "kafka-cluster" || pt != kmsg.ACLResourcePatternTypeLiteral):
		return fmt.Errorf("%w: the only valid name for the CLUSTER resource is kafka-cluster (LITERAL)", kerr.InvalidRequest)
	case a.Host == "":
		return fmt.Errorf("%w: empty host", kerr.InvalidRequest)
	case !metadata.ValidACLStrings(a.ResourceName, a.Principal, a.Host):
		return fmt.Errorf("%w: NUL in a name", kerr.InvalidRequest)
	}
	if typ, name, ok := strings.Cut(a.Principal, ":"); !ok || typ == "" || name == "" {
		return fmt.Errorf("%w: principal %q: want Type:name (User:alice)", kerr.InvalidRequest, a.Principal)
	}
	return nil
}
