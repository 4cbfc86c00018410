package group

import (
	"bytes"
	"testing"

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
