package metadata

import (
	"reflect"
	"testing"
)

// TestACLConfigs: ACL entries are stored per resource pattern in the
// non-topic configs, parsed into State.ACLs (a new pointer only when an
// ACL changes), survive a snapshot, and what the stored form cannot hold is
// refused.
func TestACLConfigs(t *testing.T) {
	st := newState()
	apply := func(c *AlterConfigs) {
		t.Helper()
		next := st.clone()
		if _, err := c.apply(next, 1); err != nil {
			t.Fatal(err)
		}
		st = next
	}
	read := ACL{ResourceType: 2, ResourceName: "orders:eu", PatternType: 3, Principal: "User:alice", Host: "*", Operation: 3, Permission: 3}
	deny := ACL{ResourceType: 2, ResourceName: "orders:eu", PatternType: 3, Principal: "User:bob", Host: "10.0.0.1", Operation: 4, Permission: 2}
	group := ACL{ResourceType: 3, ResourceName: "app", PatternType: 4, Principal: "User:*", Host: "*", Operation: 2, Permission: 3}
	set := func(as ...ACL) *AlterConfigs {
		c := &AlterConfigs{ResourceType: ResourceACL, ResourceName: as[0].ACLPatternName()}
		for _, a := range as {
			c.Ops = append(c.Ops, ConfigOp{Key: a.ACLEntryKey()})
		}
		return c
	}
	apply(set(read, deny))
	apply(set(group))
	want := []ACL{read, deny, group}
	if got := st.ACLs().All(); !reflect.DeepEqual(got, want) {
		t.Fatalf("ACLs = %+v, want %+v", got, want)
	}
	before := st.ACLs()
	apply(&AlterConfigs{ResourceType: ResourceBroker, Ops: []ConfigOp{{Key: "x", Value: "1"}}})
	if st.ACLs() != before {
		t.Fatal("a broker config change rebuilt the ACL set")
	}
	if len(st.BrokerConfigs("")) != 1 || len(st.ClientQuotas()) != 0 || len(st.Users()) != 0 {
		t.Fatal("ACL entries show among other resources")
	}
	back, err := DecodeSnapshot(EncodeSnapshot(st))
	if err != nil {
		t.Fatal(err)
	}
	if got := back.ACLs().All(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after snapshot ACLs = %+v, want %+v", got, want)
	}
	apply(&AlterConfigs{ResourceType: ResourceACL, ResourceName: deny.ACLPatternName(), Ops: []ConfigOp{{Key: deny.ACLEntryKey(), Delete: true}}})
	if got := st.ACLs().All(); !reflect.DeepEqual(got, []ACL{read, group}) {
		t.Fatalf("after delete ACLs = %+v", got)
	}
	for _, bad := range []*AlterConfigs{
		{ResourceType: ResourceACL, ResourceName: "2:3", Ops: []ConfigOp{{Key: read.ACLEntryKey()}}},
		{ResourceType: ResourceACL, ResourceName: "x:3:t", Ops: []ConfigOp{{Key: read.ACLEntryKey()}}},
		{ResourceType: ResourceACL, ResourceName: read.ACLPatternName(), Ops: []ConfigOp{{Key: "User:a\x00*\x003"}}},
		{ResourceType: ResourceACL, ResourceName: read.ACLPatternName(), Ops: []ConfigOp{{Key: read.ACLEntryKey(), Value: "v"}}},
	} {
		if _, err := bad.apply(st.clone(), 1); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}
