package broker

import (
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Regression tests for what real clients other than franz-go send (see
// docs/compatibility.md and e2e/compat_*_test.go).

// TestCreateTopicsDefaultsAtOldVersions: kafkajs 2.2.4 sends CreateTopics v3
// with replication factor -1 (and partitions -1 unless told); Kafka's broker
// takes the defaults at every version, so must we.
func TestCreateTopicsDefaultsAtOldVersions(t *testing.T) {
	b := startBroker(t, "")
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i, v := range []int16{2, 3} {
		r := kmsg.NewPtrCreateTopicsRequest()
		r.SetVersion(v)
		r.TimeoutMillis = 5000
		tp := kmsg.NewCreateTopicsRequestTopic()
		tp.Topic = []string{"kafkajs-like-v2", "kafkajs-like-v3"}[i]
		tp.NumPartitions, tp.ReplicationFactor = 3, -1
		tp2 := kmsg.NewCreateTopicsRequestTopic()
		tp2.Topic = tp.Topic + "-all-defaults"
		tp2.NumPartitions, tp2.ReplicationFactor = -1, -1
		r.Topics = append(r.Topics, tp, tp2)
		resp := rawRequest(t, nc, r, int32(i+1)).(*kmsg.CreateTopicsResponse)
		for _, rt := range resp.Topics {
			if rt.ErrorCode != 0 {
				t.Errorf("CreateTopics v%d %s: error %d (%v)", v, rt.Topic, rt.ErrorCode, rt.ErrorMessage)
			}
		}
		mt, ok := b.meta.State().Topic(tp.Topic)
		if !ok || len(mt.Partitions) != 3 {
			t.Errorf("v%d: %s not created with 3 partitions", v, tp.Topic)
		}
	}
}
