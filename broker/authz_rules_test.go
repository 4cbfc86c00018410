package broker

import (
	"context"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// TestAuthzTable: every API the broker serves has an authorization rule,
// and every rule is for an API it serves.
func TestAuthzTable(t *testing.T) {
	for key := range apis {
		if authzRules[key] == nil {
			t.Errorf("API %d (%s) has no rule in authz.go", key, kmsg.NameForKey(key))
		}
	}
	for key := range authzRules {
		if apis[key] == nil {
			t.Errorf("authz.go has a rule for API %d, which is not served", key)
		}
	}
}

func acl(rt kmsg.ACLResourceType, pt kmsg.ACLResourcePatternType, name, principal, host string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) metadata.ACL {
	return aclFromKafka(rt, name, pt, principal, host, op, perm)
}

// TestAuthorizerRules: the StandardAuthorizer semantics of subject.allowed
// and writeAnyTopic over one set of ACLs.
func TestAuthorizerRules(t *testing.T) {
	const (
		topic   = kmsg.ACLResourceTypeTopic
		group   = kmsg.ACLResourceTypeGroup
		cluster = kmsg.ACLResourceTypeCluster
		lit     = kmsg.ACLResourcePatternTypeLiteral
		pre     = kmsg.ACLResourcePatternTypePrefixed
		allow   = kmsg.ACLPermissionTypeAllow
		deny    = kmsg.ACLPermissionTypeDeny
		read    = kmsg.ACLOperationRead
		write   = kmsg.ACLOperationWrite
		desc    = kmsg.ACLOperationDescribe
		all     = kmsg.ACLOperationAll
	)
	acls := []metadata.ACL{
		acl(topic, lit, "orders", "User:alice", "*", read, allow),
		acl(topic, pre, "logs-", "User:*", "*", read, allow),
		acl(topic, lit, "logs-secret", "User:bob", "*", read, deny),
		acl(topic, lit, "*", "User:carol", "*", write, allow),
		acl(topic, lit, "pinned", "User:dave", "10.0.0.1", all, allow),
		acl(topic, pre, "x", "User:erin", "*", kmsg.ACLOperationAlterConfigs, allow),
		acl(group, pre, "app-", "User:alice", "*", read, allow),
		acl(cluster, lit, "kafka-cluster", "User:admin", "*", kmsg.ACLOperationAlter, allow),
		acl(topic, lit, "audit", "User:frank", "*", write, allow),
		acl(topic, pre, "aud", "User:frank", "*", all, deny),
	}
	a := newAuthorizer(AuthorizerConfig{Enabled: true, SuperUsers: []string{"User:root"}})
	ix := buildACLIndex(nil, acls)
	who := func(principal, host string) *subject {
		return &subject{a: a, ix: ix, principal: principal, host: host, super: a.super[principal]}
	}
	for _, c := range []struct {
		principal, host string
		op              kmsg.ACLOperation
		rt              kmsg.ACLResourceType
		name            string
		want            bool
	}{
		{"User:alice", "127.0.0.1", read, topic, "orders", true},
		{"User:alice", "127.0.0.1", desc, topic, "orders", true}, // READ implies DESCRIBE
		{"User:alice", "127.0.0.1", write, topic, "orders", false},
		{"User:alice", "127.0.0.1", read, topic, "orders2", false}, // literal is exact
		{"User:bob", "127.0.0.1", read, topic, "orders", false},
		{"User:bob", "127.0.0.1", read, topic, "logs-app", true},     // prefixed, User:*
		{"User:bob", "127.0.0.1", read, topic, "logs-secret", false}, // deny wins
		{"User:alice", "127.0.0.1", read, topic, "logs-secret", true},
		{"User:carol", "127.0.0.1", write, topic, "anything", true}, // "*" literal
		{"User:carol", "127.0.0.1", read, topic, "anything", false},
		{"User:carol", "127.0.0.1", desc, topic, "anything", true}, // WRITE implies DESCRIBE
		{"User:dave", "10.0.0.1", read, topic, "pinned", true},
		{"User:dave", "10.0.0.2", read, topic, "pinned", false},                        // other host
		{"User:erin", "127.0.0.1", kmsg.ACLOperationDescribeConfigs, topic, "x", true}, // ALTER_CONFIGS implies DESCRIBE_CONFIGS
		{"User:erin", "127.0.0.1", desc, topic, "x", false},
		{"User:alice", "127.0.0.1", read, group, "app-1", true},
		{"User:alice", "127.0.0.1", read, group, "other", false},
		{"User:alice", "127.0.0.1", read, topic, "app-1", false}, // resource types apart
		{"User:admin", "127.0.0.1", kmsg.ACLOperationAlter, cluster, "kafka-cluster", true},
		{"User:admin", "127.0.0.1", desc, cluster, "kafka-cluster", true},
		{"User:admin", "127.0.0.1", kmsg.ACLOperationClusterAction, cluster, "kafka-cluster", false},
		{"User:root", "127.0.0.1", kmsg.ACLOperationClusterAction, cluster, "kafka-cluster", true}, // super user
		{"User:frank", "127.0.0.1", write, topic, "audit", false},                                  // denied by the prefix
	} {
		if got := who(c.principal, c.host).allowed(c.op, c.rt, c.name); got != c.want {
			t.Errorf("%s@%s %v %v %q: %v, want %v", c.principal, c.host, c.op, c.rt, c.name, got, c.want)
		}
	}

	// allow.everyone.if.no.acl.found: only resources without any ACL.
	a2 := newAuthorizer(AuthorizerConfig{Enabled: true, AllowEveryoneIfNoACLFound: true})
	s2 := &subject{a: a2, ix: ix, principal: "User:zed", host: "127.0.0.1"}
	if s2.allowed(read, group, "free") != true {
		t.Error("no ACL on group free: want allowed")
	}
	if s2.allowed(read, topic, "orders") {
		t.Error("orders has ACLs (and topic \"*\" has one): want denied")
	}

	// KIP-679: WRITE on some topic is enough for an idempotent producer.
	for _, c := range []struct {
		principal string
		want      bool
	}{
		{"User:alice", false}, // READ only
		{"User:carol", true},  // WRITE on "*"
		{"User:dave", false},  // ALL, but only from 10.0.0.1
		{"User:frank", false}, // WRITE on audit, denied by prefix "aud"
		{"User:root", true},
	} {
		if got := who(c.principal, "127.0.0.1").writeAnyTopic(); got != c.want {
			t.Errorf("writeAnyTopic %s: %v, want %v", c.principal, got, c.want)
		}
	}
	if !who("User:dave", "10.0.0.1").writeAnyTopic() {
		t.Error("writeAnyTopic dave@10.0.0.1: want true")
	}

	// Authorized operations: alice on orders may READ and DESCRIBE.
	if got, want := who("User:alice", "127.0.0.1").authorizedOps(topic, "orders", topicOps...), int32(1<<read|1<<desc); got != want {
		t.Errorf("alice's ops on orders: %b, want %b", got, want)
	}
}

// TestAuthzRulesDenyEveryVersion: every rule, at every version served,
// for a subject with no ACLs, on a request with one of each repeated
// element: no panic, and an answer of the API's own response type (or no
// answer for acks=0) whether or not the handler was called.
func TestAuthzRulesDenyEveryVersion(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.Authorizer = AuthorizerConfig{Enabled: true} })
	s := &subject{a: b.authz, ix: b.authz.index(b.meta.State()), principal: "User:nobody", host: "127.0.0.1"}
	for key, e := range apis {
		for v := e.min; v <= e.max; v++ {
			req := kmsg.RequestForKey(key)
			req.SetVersion(v)
			fillOne(reflect.ValueOf(req).Elem(), 0)
			switch m := req.(type) { // consumers, not followers
			case *kmsg.FetchRequest:
				m.ReplicaID, m.ReplicaState.ID = -1, -1
			case *kmsg.OffsetForLeaderEpochRequest:
				m.ReplicaID = -1
			}
			r := &Request{Conn: &ConnInfo{}, Key: key, Version: v, Msg: req}
			next := func(context.Context, *Broker, *Request) (*Reply, error) {
				resp := req.ResponseKind()
				resp.SetVersion(v)
				return &Reply{Msg: resp}, nil
			}
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s v%d: panic %v", kmsg.NameForKey(key), v, p)
					}
				}()
				rep, err := authzRules[key](context.Background(), b, s, r, next)
				switch {
				case err != nil:
					t.Errorf("%s v%d: %v", kmsg.NameForKey(key), v, err)
				case rep == nil || (rep.Msg == nil && !rep.NoResponse):
					t.Errorf("%s v%d: no reply", kmsg.NameForKey(key), v)
				case rep.Msg != nil && reflect.TypeOf(rep.Msg) != reflect.TypeOf(req.ResponseKind()):
					t.Errorf("%s v%d: reply %T", kmsg.NameForKey(key), v, rep.Msg)
				}
				if rep != nil && rep.Msg != nil {
					rep.Msg.AppendTo(nil) // encodes at its version
				}
			}()
		}
	}
}

// fillOne gives every slice of v one zero element (recursively) and every
// string pointer a value, so that rules have something to deny.
func fillOne(v reflect.Value, depth int) {
	if depth > 4 {
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillOne(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillOne(v.Index(0), depth+1)
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.String {
			s := "x"
			v.Set(reflect.ValueOf(&s))
		}
	case reflect.String:
		v.SetString("x")
	}
}
