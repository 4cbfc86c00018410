package group

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Log is one partition of __consumer_offsets, as the coordinator sees it. The
// broker implements it on the partition's replicated log.
type Log interface {
	// Append writes the records, in order, as one batch (all or nothing),
	// and returns once they are committed (acks=all: below the high
	// watermark). It is called from one goroutine per partition at a time.
	// A Value of nil is a tombstone. An error wrapping ErrNotLeader means
	// the broker lost leadership of the partition.
	Append(ctx context.Context, records []Record) error
	// Replay calls fn for every record from the log start to the log end
	// as of the call, in offset order, with nil values for tombstones. fn's
	// slices are only valid during the call. An error from fn stops the
	// replay and is returned.
	Replay(ctx context.Context, fn func(key, value []byte) error) error
}

// Record is one key/value of __consumer_offsets.
type Record struct {
	Key, Value []byte
}

// Key versions of __consumer_offsets records, as in Apache Kafka.
const (
	keyOffsetCommitV0 = 0
	keyOffsetCommitV1 = 1
	keyGroupMetadata  = 2
)

// Value versions written. Readers accept every version kmsg decodes.
const (
	offsetValueVersion        = 3 // leader epoch, no expire timestamp
	offsetValueVersionExpires = 1 // carries an explicit expire timestamp (commit v2-v4 retention)
	groupValueVersion         = 3 // instance ids, current state timestamp
)

func offsetKey(group, topic string, partition int32) []byte {
	k := kmsg.OffsetCommitKey{Version: keyOffsetCommitV1, Group: group, Topic: topic, Partition: partition}
	return k.AppendTo(nil)
}

func groupKey(group string) []byte {
	k := kmsg.GroupMetadataKey{Version: keyGroupMetadata, Group: group}
	return k.AppendTo(nil)
}

func offsetValue(o offset) []byte {
	v := kmsg.NewOffsetCommitValue()
	v.Version = offsetValueVersion
	v.Offset = o.offset
	v.LeaderEpoch = o.leaderEpoch
	v.Metadata = o.metadata
	v.CommitTimestamp = o.commitTime
	if o.expireTime >= 0 {
		v.Version = offsetValueVersionExpires
		v.ExpireTimestamp = o.expireTime
	}
	return v.AppendTo(nil)
}

// decodedRecord is one record of __consumer_offsets, decoded.
type decodedRecord struct {
	kind      int // keyOffsetCommitV1 (for both offset key versions), keyGroupMetadata, or -1 (ignored)
	group     string
	topic     string
	partition int32
	offset    *offset                  // nil: tombstone
	meta      *kmsg.GroupMetadataValue // nil: tombstone
	consumer  *cgRecord                // nil: tombstone
}

// decodeRecord decodes a key and value of __consumer_offsets. Key versions
// other than 0, 1 and 2 (Kafka's newer coordinator writes 3 and up for
// KIP-848 groups) are returned with kind -1 and ignored.
func decodeRecord(key, value []byte) (decodedRecord, error) {
	if len(key) < 2 {
		return decodedRecord{}, fmt.Errorf("%w: key of %d bytes", ErrCorruptRecord, len(key))
	}
	switch kv := int16(binary.BigEndian.Uint16(key)); kv {
	case keyOffsetCommitV0, keyOffsetCommitV1:
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(key); err != nil {
			return decodedRecord{}, fmt.Errorf("%w: offset commit key: %v", ErrCorruptRecord, err)
		}
		r := decodedRecord{kind: keyOffsetCommitV1, group: k.Group, topic: k.Topic, partition: k.Partition}
		if value == nil {
			return r, nil
		}
		var v kmsg.OffsetCommitValue
		if err := v.ReadFrom(value); err != nil {
			return decodedRecord{}, fmt.Errorf("%w: offset commit value: %v", ErrCorruptRecord, err)
		}
		if v.Version < 0 || v.Version > 4 {
			return decodedRecord{}, fmt.Errorf("%w: offset commit value version %d", ErrCorruptRecord, v.Version)
		}
		o := offset{offset: v.Offset, leaderEpoch: -1, metadata: v.Metadata, commitTime: v.CommitTimestamp, expireTime: -1}
		if v.Version >= 3 {
			o.leaderEpoch = v.LeaderEpoch
		}
		if v.Version == 1 && v.ExpireTimestamp >= 0 {
			o.expireTime = v.ExpireTimestamp
		}
		r.offset = &o
		return r, nil
	case keyGroupMetadata:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(key); err != nil {
			return decodedRecord{}, fmt.Errorf("%w: group metadata key: %v", ErrCorruptRecord, err)
		}
		r := decodedRecord{kind: keyGroupMetadata, group: k.Group}
		if value == nil {
			return r, nil
		}
		v := new(kmsg.GroupMetadataValue)
		if err := v.ReadFrom(value); err != nil {
			return decodedRecord{}, fmt.Errorf("%w: group metadata value: %v", ErrCorruptRecord, err)
		}
		if v.Version < 0 || v.Version > 4 {
			return decodedRecord{}, fmt.Errorf("%w: group metadata value version %d", ErrCorruptRecord, v.Version)
		}
		r.meta = v
		return r, nil
	case keyConsumerGroup:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(key); err != nil {
			return decodedRecord{}, fmt.Errorf("%w: consumer group key: %v", ErrCorruptRecord, err)
		}
		r := decodedRecord{kind: keyConsumerGroup, group: k.Group}
		if value == nil {
			return r, nil
		}
		cv, err := decodeConsumerValue(value)
		if err != nil {
			return decodedRecord{}, err
		}
		r.consumer = cv
		return r, nil
	default:
		return decodedRecord{kind: -1}, nil
	}
}

// loadState accumulates a replay: the last value of every key wins and a
// tombstone removes the key, which is what compaction would leave.
type loadState struct {
	groups    map[string]*kmsg.GroupMetadataValue
	consumers map[string]*cgRecord
	offsets   map[string]map[topicPartition]offset
}

func newLoadState() *loadState {
	return &loadState{
		groups:    make(map[string]*kmsg.GroupMetadataValue),
		consumers: make(map[string]*cgRecord),
		offsets:   make(map[string]map[topicPartition]offset),
	}
}

func (s *loadState) apply(key, value []byte) error {
	r, err := decodeRecord(key, value)
	if err != nil {
		return err
	}
	switch r.kind {
	case keyOffsetCommitV1:
		tp := topicPartition{r.topic, r.partition}
		if r.offset == nil {
			if m := s.offsets[r.group]; m != nil {
				delete(m, tp)
				if len(m) == 0 {
					delete(s.offsets, r.group)
				}
			}
			return nil
		}
		m := s.offsets[r.group]
		if m == nil {
			m = make(map[topicPartition]offset)
			s.offsets[r.group] = m
		}
		m[tp] = *r.offset
	case keyGroupMetadata:
		if r.meta == nil {
			delete(s.groups, r.group)
			return nil
		}
		s.groups[r.group] = r.meta
		delete(s.consumers, r.group) // the group became classic
	case keyConsumerGroup:
		if r.consumer == nil {
			delete(s.consumers, r.group)
			return nil
		}
		s.consumers[r.group] = r.consumer
		delete(s.groups, r.group) // the group became a consumer group
	}
	return nil
}

// groupValue is the group metadata record of g as it stands, with the
// given assignment per member id.
func groupValue(g *group, now int64) []byte {
	v := kmsg.NewGroupMetadataValue()
	v.Version = groupValueVersion
	v.ProtocolType = g.protocolType
	v.Generation = g.generation
	if g.protocol != "" {
		p := g.protocol
		v.Protocol = &p
	}
	if g.leader != "" {
		l := g.leader
		v.Leader = &l
	}
	v.CurrentStateTimestamp = g.stateTime
	if v.CurrentStateTimestamp < 0 {
		v.CurrentStateTimestamp = now
	}
	for _, id := range g.memberOrder() {
		m := g.members[id]
		mv := kmsg.NewGroupMetadataValueMember()
		mv.MemberID = m.id
		mv.InstanceID = m.instanceID
		mv.ClientID = m.clientID
		mv.ClientHost = m.clientHost
		mv.RebalanceTimeoutMillis = int32(m.rebalanceTimeout.Milliseconds())
		mv.SessionTimeoutMillis = int32(m.sessionTimeout.Milliseconds())
		mv.Subscription = m.metadataFor(g.protocol)
		mv.Assignment = m.assignment
		if mv.Subscription == nil {
			mv.Subscription = []byte{}
		}
		if mv.Assignment == nil {
			mv.Assignment = []byte{}
		}
		v.Members = append(v.Members, mv)
	}
	return v.AppendTo(nil)
}
