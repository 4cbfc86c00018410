package group

import (
	"bytes"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzRecords feeds arbitrary keys and values of __consumer_offsets to the
// decoder and the replay state: no panic, no unbounded allocation, and a
// record that decodes re-encodes to a record that decodes the same.
func FuzzRecords(f *testing.F) {
	f.Add(offsetKey("g", "t", 1), offsetValue(offset{offset: 5, leaderEpoch: 2, metadata: "m", commitTime: 9, expireTime: -1}))
	f.Add(offsetKey("g", "t", 1), offsetValue(offset{offset: 5, leaderEpoch: -1, commitTime: 9, expireTime: 99}))
	f.Add(offsetKey("g", "t", 1), []byte(nil))
	f.Add(groupKey("g"), []byte(nil))
	inst := "i"
	gv := kmsg.NewGroupMetadataValue()
	gv.Version = 3
	gv.ProtocolType = "consumer"
	gv.Generation = 4
	gv.Protocol = kmsg.StringPtr("range")
	gv.Leader = kmsg.StringPtr("m")
	gv.Members = []kmsg.GroupMetadataValueMember{{MemberID: "m", InstanceID: &inst, ClientID: "c", ClientHost: "h", RebalanceTimeoutMillis: 1, SessionTimeoutMillis: 2, Subscription: []byte("s"), Assignment: []byte("a")}}
	f.Add(groupKey("g"), gv.AppendTo(nil))
	gv.Version = 4
	f.Add(groupKey("g"), gv.AppendTo(nil))
	cv := append([]byte{0, 0}, `{"format":"sediment consumer group","epoch":3,"target_epoch":3,"members":[{"id":"m","instance_id":"i","client_id":"c","client_host":"h","rebalance_timeout_ms":5,"topics":["t"],"assignor":"uniform","epoch":3,"previous_epoch":2,"assigned":[{"t":"t","p":0,"e":3}],"revoking":[{"t":"t","p":1}]}],"target":{"m":[{"t":"t","p":0}]},"topic_partitions":{"t":2}}`...)
	f.Add(consumerKey("g"), cv)
	f.Add(consumerKey("g"), []byte(nil))
	f.Add([]byte{0, 9, 1, 2}, []byte{3})
	f.Add([]byte{0}, []byte{})

	f.Fuzz(func(t *testing.T, key, value []byte) {
		st := newLoadState()
		_ = st.apply(key, value)
		d, err := decodeRecord(key, value)
		if err != nil {
			return
		}
		switch d.kind {
		case keyOffsetCommitV1:
			if d.offset == nil {
				return
			}
			d2, err := decodeRecord(offsetKey(d.group, d.topic, d.partition), offsetValue(*d.offset))
			if err != nil || d2.group != d.group || d2.topic != d.topic || d2.partition != d.partition || *d2.offset != *d.offset {
				t.Fatalf("offset record does not round-trip: %+v %+v %v", d, d2, err)
			}
		case keyConsumerGroup:
			if d.consumer == nil {
				return
			}
			// A decoded consumer group loads and re-encodes to a record
			// that decodes.
			g := &group{id: d.group}
			c := &Coordinator{}
			c.loadConsumer(g, d.consumer, time.Time{})
			if _, err := decodeRecord(consumerKey(d.group), consumerValue(g)); err != nil {
				t.Fatalf("consumer group record does not round-trip: %v", err)
			}
		case keyGroupMetadata:
			if d.meta == nil {
				return
			}
			again := d.meta.AppendTo(nil)
			d2, err := decodeRecord(groupKey(d.group), again)
			if err != nil || !bytes.Equal(d2.meta.AppendTo(nil), again) {
				t.Fatalf("group record does not round-trip: %v", err)
			}
		}
	})
}
