package group

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// keyConsumerGroup is the key version of Sediment's own KIP-848 group
// record. kmsg has no encoder for Kafka's KIP-848 records (key versions 3
// to 8), so a consumer group is one record of its own under a key version
// Kafka does not use; Kafka's records are still skipped on replay.
const (
	keyConsumerGroup          = 100
	consumerValueVersion      = 0
	consumerGroupRecordFormat = "sediment consumer group"
)

// maxConsumerValueBytes bounds a consumer group record, written and read
// (a variable for tests).
var maxConsumerValueBytes = 64 << 20

// errGroupRecordTooLarge fails a change whose group record would be larger
// than maxConsumerValueBytes.
var errGroupRecordTooLarge = errors.New("group: consumer group record too large")

func consumerKey(group string) []byte {
	// Same layout as the group metadata key: int16 version | string group.
	k := kmsg.GroupMetadataKey{Version: keyConsumerGroup, Group: group}
	return k.AppendTo(nil)
}

type cgRecord struct {
	Format      string             `json:"format"`
	Epoch       int32              `json:"epoch"`
	TargetEpoch int32              `json:"target_epoch"`
	Members     []cgRecordMember   `json:"members"`
	Target      map[string][]tpRec `json:"target"`
	TopicParts  map[string]int32   `json:"topic_partitions"`
	TopicIDs    map[string]string  `json:"topic_ids,omitempty"` // hex; absent in records before it was added
}

type cgRecordMember struct {
	ID               string   `json:"id"`
	InstanceID       *string  `json:"instance_id,omitempty"`
	RackID           *string  `json:"rack_id,omitempty"`
	ClientID         string   `json:"client_id"`
	ClientHost       string   `json:"client_host"`
	RebalanceTimeout int64    `json:"rebalance_timeout_ms"`
	Topics           []string `json:"topics"`
	Regex            string   `json:"regex,omitempty"`
	Assignor         string   `json:"assignor"`
	Epoch            int32    `json:"epoch"`
	PrevEpoch        int32    `json:"previous_epoch"`
	Assigned         []tpRec  `json:"assigned"`
	Revoking         []tpRec  `json:"revoking"`
	// Classic is set for a member that talks the classic protocol.
	Classic *cgRecordClassic `json:"classic,omitempty"`
}

// cgRecordClassic is a classic member's session timeout and the protocols
// of its last JoinGroup (Kafka's ClassicMemberMetadata).
type cgRecordClassic struct {
	SessionTimeout int64              `json:"session_timeout_ms"`
	Protocols      []cgRecordProtocol `json:"protocols"`
}

type cgRecordProtocol struct {
	Name     string `json:"name"`
	Metadata []byte `json:"metadata"`
}

// tpRec is one partition, with the epoch it was assigned at (assigned only).
type tpRec struct {
	Topic     string `json:"t"`
	Partition int32  `json:"p"`
	Epoch     int32  `json:"e,omitempty"`
}

// consumerValue is: int16 version=0 | JSON document (see doc.go).
func consumerValue(g *group) []byte {
	cg := g.cg
	r := cgRecord{Format: consumerGroupRecordFormat, Epoch: cg.epoch, TargetEpoch: cg.targetEpoch, Target: map[string][]tpRec{}, TopicParts: cg.topicParts}
	if len(cg.topicIDs) > 0 {
		r.TopicIDs = make(map[string]string, len(cg.topicIDs))
		for t, id := range cg.topicIDs {
			r.TopicIDs[t] = hex.EncodeToString(id[:])
		}
	}
	for _, id := range cg.memberOrder() {
		m := cg.members[id]
		rm := cgRecordMember{
			ID: m.id, InstanceID: m.instanceID, RackID: m.rackID, ClientID: m.clientID, ClientHost: m.clientHost,
			RebalanceTimeout: m.rebalanceTimeout.Milliseconds(), Topics: m.topics, Regex: m.regex, Assignor: m.assignor,
			Epoch: m.epoch, PrevEpoch: m.prevEpoch,
		}
		if m.classic != nil {
			rc := &cgRecordClassic{SessionTimeout: m.classic.sessionTimeout.Milliseconds(), Protocols: []cgRecordProtocol{}}
			for _, p := range m.classic.protocols {
				rc.Protocols = append(rc.Protocols, cgRecordProtocol{Name: p.name, Metadata: p.metadata})
			}
			rm.Classic = rc
		}
		for tp, e := range m.assigned {
			rm.Assigned = append(rm.Assigned, tpRec{tp.topic, tp.partition, e})
		}
		for tp := range m.revoking {
			rm.Revoking = append(rm.Revoking, tpRec{Topic: tp.topic, Partition: tp.partition})
		}
		sortTPRecs(rm.Assigned)
		sortTPRecs(rm.Revoking)
		r.Members = append(r.Members, rm)
	}
	for id, set := range cg.target {
		var l []tpRec
		for tp := range set {
			l = append(l, tpRec{Topic: tp.topic, Partition: tp.partition})
		}
		sortTPRecs(l)
		r.Target[id] = l
	}
	body, _ := json.Marshal(r) // plain structs: cannot fail
	out := binary.BigEndian.AppendUint16(nil, consumerValueVersion)
	return append(out, body...)
}

func sortTPRecs(l []tpRec) {
	sort.Slice(l, func(i, j int) bool {
		if l[i].Topic != l[j].Topic {
			return l[i].Topic < l[j].Topic
		}
		return l[i].Partition < l[j].Partition
	})
}

func decodeConsumerValue(value []byte) (*cgRecord, error) {
	if len(value) < 2 || len(value) > maxConsumerValueBytes {
		return nil, fmt.Errorf("%w: consumer group value of %d bytes", ErrCorruptRecord, len(value))
	}
	if v := binary.BigEndian.Uint16(value); v != consumerValueVersion {
		return nil, fmt.Errorf("%w: consumer group value version %d", ErrCorruptRecord, v)
	}
	r := new(cgRecord)
	if err := json.Unmarshal(value[2:], r); err != nil {
		return nil, fmt.Errorf("%w: consumer group value: %v", ErrCorruptRecord, err)
	}
	if r.Format != consumerGroupRecordFormat {
		return nil, fmt.Errorf("%w: consumer group value format %q", ErrCorruptRecord, r.Format)
	}
	return r, nil
}

// loadConsumer rebuilds a consumer group from its record.
func (c *Coordinator) loadConsumer(g *group, r *cgRecord, now time.Time) {
	cg := newConsumerGroup()
	cg.epoch, cg.targetEpoch = r.Epoch, r.TargetEpoch
	if r.TopicParts != nil {
		cg.topicParts = r.TopicParts
	}
	for id, l := range r.Target {
		set := make(partSet, len(l))
		for _, tp := range l {
			set[topicPartition{tp.Topic, tp.Partition}] = struct{}{}
		}
		cg.target[id] = set
	}
	for _, rm := range r.Members {
		m := &cmember{
			id: rm.ID, instanceID: rm.InstanceID, rackID: rm.RackID, clientID: rm.ClientID, clientHost: rm.ClientHost,
			rebalanceTimeout: time.Duration(rm.RebalanceTimeout) * time.Millisecond, topics: rm.Topics, regex: rm.Regex,
			assignor: rm.Assignor, epoch: rm.Epoch, prevEpoch: rm.PrevEpoch,
			assigned: make(map[topicPartition]int32), revoking: make(partSet), lastSeen: now,
		}
		if rc := rm.Classic; rc != nil {
			m.classic = &classicMember{sessionTimeout: time.Duration(rc.SessionTimeout) * time.Millisecond}
			for _, p := range rc.Protocols {
				m.classic.protocols = append(m.classic.protocols, protocol{name: p.Name, metadata: p.Metadata})
			}
		}
		for _, tp := range rm.Assigned {
			k := topicPartition{tp.Topic, tp.Partition}
			m.assigned[k] = tp.Epoch
			cg.owner[k] = m.id
		}
		for _, tp := range rm.Revoking {
			k := topicPartition{tp.Topic, tp.Partition}
			m.revoking[k] = struct{}{}
			cg.owner[k] = m.id
		}
		if m.regex != "" {
			m.re, _ = compileSubscription(m.regex) // nil if it no longer compiles: matches nothing
		}
		cg.members[m.id] = m
		if m.instanceID != nil {
			cg.static[*m.instanceID] = m.id
		}
	}
	// The topics' ids the target was computed with; a record written
	// before they were kept takes today's.
	for t := range cg.topicParts {
		var id [16]byte
		if h, ok := r.TopicIDs[t]; ok {
			if b, err := hex.DecodeString(h); err == nil && len(b) == len(id) {
				copy(id[:], b)
				cg.topicIDs[t] = id
			}
			continue
		}
		if c.cfg.Topics != nil {
			if id, _, ok := c.cfg.Topics.Partitions(t); ok {
				cg.topicIDs[t] = id
			}
		}
	}
	// What each regex matched then: every topic of the computation that
	// it matches (they all existed, so all were matched).
	for _, m := range cg.members {
		if m.regex == "" || m.re == nil {
			continue
		}
		if _, ok := cg.regexTopics[m.regex]; ok {
			continue
		}
		matched := make(map[string]struct{})
		for t := range cg.topicParts {
			if m.re.MatchString(t) {
				matched[t] = struct{}{}
			}
		}
		cg.regexTopics[m.regex] = matched
	}
	g.cg = cg
	g.protocolType = "consumer"
	g.state = stateEmpty
	if len(cg.members) > 0 {
		g.state = stateStable
	}
	c.cgSubscribed(g)
}
