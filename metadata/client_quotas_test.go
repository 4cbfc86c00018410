package metadata

import (
	"reflect"
	"testing"
)

// TestClientQuotaConfigs: ResourceClientQuota entries live beside broker
// and group configs without showing in BrokerConfigs or GroupConfigs, go
// away with their last key, and survive a snapshot (whose format does not
// change).
func TestClientQuotaConfigs(t *testing.T) {
	st := newState()
	apply := func(c *AlterConfigs) {
		t.Helper()
		next := st.clone()
		if _, err := c.apply(next, 1); err != nil {
			t.Fatal(err)
		}
		st = next
	}
	apply(&AlterConfigs{ResourceType: ResourceBroker, Ops: []ConfigOp{{Key: "leader.replication.throttled.rate", Value: "10"}}})
	apply(&AlterConfigs{ResourceType: ResourceClientQuota, ResourceName: "user=alice", Ops: []ConfigOp{{Key: "producer_byte_rate", Value: "1024"}}})
	apply(&AlterConfigs{ResourceType: ResourceClientQuota, ResourceName: "client-id", Ops: []ConfigOp{{Key: "consumer_byte_rate", Value: "2048"}}})
	want := map[string]map[string]string{"user=alice": {"producer_byte_rate": "1024"}, "client-id": {"consumer_byte_rate": "2048"}}
	if got := st.ClientQuotas(); !reflect.DeepEqual(got, want) {
		t.Fatalf("ClientQuotas = %v, want %v", got, want)
	}
	if got := st.BrokerConfigs(""); len(got) != 1 {
		t.Fatalf("cluster broker configs = %v", got)
	}
	back, err := DecodeSnapshot(EncodeSnapshot(st))
	if err != nil {
		t.Fatal(err)
	}
	if got := back.ClientQuotas(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after snapshot ClientQuotas = %v, want %v", got, want)
	}
	apply(&AlterConfigs{ResourceType: ResourceClientQuota, ResourceName: "user=alice", Ops: []ConfigOp{{Key: "producer_byte_rate", Delete: true}}})
	if _, ok := st.ClientQuotas()["user=alice"]; ok {
		t.Fatal("entity with no quota left is still listed")
	}
	if _, err := (&AlterConfigs{ResourceType: ResourceClientQuota, Ops: []ConfigOp{{Key: "producer_byte_rate", Value: "1"}}}).apply(st.clone(), 1); err == nil {
		t.Fatal("empty entity accepted")
	}
}
