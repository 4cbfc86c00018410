package metadata

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ACLs (Kafka's access control lists, KIP-140 and KIP-290) live in the map
// of non-topic configs (brokerConfigs), so the snapshot format stays as it
// is: one entry per resource pattern, keyed
//
//	"acl:" <resource type> ":" <pattern type> ":" <resource name>
//
// (the types as Kafka's decimal codes), whose config keys are the pattern's
// entries, principal NUL host NUL operation NUL permission, each with the
// empty value. The broker changes them with AlterConfigs of ResourceACL,
// ResourceName the pattern's key without the "acl:" prefix and one op per
// entry; it validates the entries first (an entry that does not parse is
// skipped here, never applied). State keeps the parsed set beside the map,
// rebuilt only when an ACL changes, so that the broker's authorizer can tell
// a change by the pointer (State.ACLs).

// ResourceACL is internal (no Kafka config resource): one ACL resource
// pattern's entries.
const ResourceACL ResourceType = 67

const aclConfigKeyPrefix = "acl:"

// ACL is one access control entry on one resource pattern. The codes are
// Kafka's (kmsg.ACLResourceType, ACLResourcePatternType, ACLOperation,
// ACLPermissionType).
type ACL struct {
	ResourceType int8
	ResourceName string
	PatternType  int8
	Principal    string // "User:alice", "User:*"
	Host         string // an IP address or "*"
	Operation    int8
	Permission   int8
}

// ACLPatternName is the ResourceName of the AlterConfigs command that
// changes a's resource pattern.
func (a ACL) ACLPatternName() string {
	return fmt.Sprintf("%d:%d:%s", a.ResourceType, a.PatternType, a.ResourceName)
}

// ACLEntryKey is the config key of a's entry within its pattern.
func (a ACL) ACLEntryKey() string {
	return a.Principal + "\x00" + a.Host + "\x00" + strconv.Itoa(int(a.Operation)) + "\x00" + strconv.Itoa(int(a.Permission))
}

// ValidACLStrings reports whether s may be stored as a principal, host or
// resource name: the key encoding uses NUL as its separator.
func ValidACLStrings(s ...string) bool {
	for _, x := range s {
		if strings.IndexByte(x, 0) >= 0 {
			return false
		}
	}
	return true
}

func parseACLPattern(name string) (rt, pt int8, res string, ok bool) {
	parts := strings.SplitN(name, ":", 3)
	if len(parts) != 3 {
		return 0, 0, "", false
	}
	r, err1 := strconv.ParseInt(parts[0], 10, 8)
	p, err2 := strconv.ParseInt(parts[1], 10, 8)
	if err1 != nil || err2 != nil {
		return 0, 0, "", false
	}
	return int8(r), int8(p), parts[2], true
}

func parseACLEntry(key string) (principal, host string, op, perm int8, ok bool) {
	parts := strings.Split(key, "\x00")
	if len(parts) != 4 {
		return "", "", 0, 0, false
	}
	o, err1 := strconv.ParseInt(parts[2], 10, 8)
	p, err2 := strconv.ParseInt(parts[3], 10, 8)
	if err1 != nil || err2 != nil {
		return "", "", 0, 0, false
	}
	return parts[0], parts[1], int8(o), int8(p), true
}

// ACLSet is the cluster's ACLs, immutable. A new set is built whenever an
// ACL changes; an unchanged State keeps the same pointer.
type ACLSet struct {
	all []ACL // sorted by (type, pattern, name, principal, host, op, permission)
}

// All returns every ACL, sorted. The slice must not be modified.
func (a *ACLSet) All() []ACL {
	if a == nil {
		return nil
	}
	return a.all
}

// Len is the number of ACLs.
func (a *ACLSet) Len() int {
	if a == nil {
		return 0
	}
	return len(a.all)
}

func compareACL(x, y ACL) int {
	return cmp.Or(
		cmp.Compare(x.ResourceType, y.ResourceType),
		cmp.Compare(x.PatternType, y.PatternType),
		cmp.Compare(x.ResourceName, y.ResourceName),
		cmp.Compare(x.Principal, y.Principal),
		cmp.Compare(x.Host, y.Host),
		cmp.Compare(x.Operation, y.Operation),
		cmp.Compare(x.Permission, y.Permission),
	)
}

// buildACLSet parses the ACL entries of brokerConfigs.
func buildACLSet(configs map[string]map[string]string) *ACLSet {
	set := &ACLSet{}
	for k, m := range configs {
		name, ok := strings.CutPrefix(k, aclConfigKeyPrefix)
		if !ok {
			continue
		}
		rt, pt, res, ok := parseACLPattern(name)
		if !ok {
			continue
		}
		for e := range m {
			principal, host, op, perm, ok := parseACLEntry(e)
			if !ok {
				continue
			}
			set.all = append(set.all, ACL{ResourceType: rt, ResourceName: res, PatternType: pt, Principal: principal, Host: host, Operation: op, Permission: perm})
		}
	}
	slices.SortFunc(set.all, compareACL)
	return set
}

// ACLs returns the cluster's ACLs. The pointer changes only when an ACL
// is created or deleted.
func (s *State) ACLs() *ACLSet { return s.acls }
