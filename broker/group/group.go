package group

import (
	"errors"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupState is the classic protocol's group state (Kafka's ClassicGroupState).
type groupState int8

const (
	stateEmpty groupState = iota
	statePreparingRebalance
	stateCompletingRebalance
	stateStable
	stateDead
)

func (s groupState) String() string {
	switch s {
	case stateEmpty:
		return "Empty"
	case statePreparingRebalance:
		return "PreparingRebalance"
	case stateCompletingRebalance:
		return "CompletingRebalance"
	case stateStable:
		return "Stable"
	default:
		return "Dead"
	}
}

type topicPartition struct {
	topic     string
	partition int32
}

// offset is a committed offset. Times are Unix milliseconds; expireTime is
// -1 unless the commit asked for its own retention (OffsetCommit v2-v4).
type offset struct {
	offset      int64
	leaderEpoch int32
	metadata    string
	commitTime  int64
	expireTime  int64
}

type protocol struct {
	name     string
	metadata []byte
}

type member struct {
	id               string
	instanceID       *string
	clientID         string
	clientHost       string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocolType     string
	protocols        []protocol
	assignment       []byte
	seq              uint64 // join order, for a stable member order

	// joinReply is set while the member waits in JoinGroup, syncReply
	// while it waits in SyncGroup.
	joinReply   func(*kmsg.JoinGroupResponse)
	joinVersion int16
	syncReply   func(*kmsg.SyncGroupResponse)
	syncVersion int16

	isNew         bool
	lastHeartbeat time.Time
	hbStop        func() bool
	hbSeq         uint64
}

func (m *member) metadataFor(name string) []byte {
	for _, p := range m.protocols {
		if p.name == name {
			return p.metadata
		}
	}
	return nil
}

// matches reports whether a rejoin carries the same protocols, in the same
// order, with the same metadata.
func (m *member) matches(protos []protocol) bool {
	if len(protos) != len(m.protocols) {
		return false
	}
	for i := range protos {
		if protos[i].name != m.protocols[i].name || string(protos[i].metadata) != string(m.protocols[i].metadata) {
			return false
		}
	}
	return true
}

type pendingMember struct {
	stop func() bool
}

// group is one group's state. Owned by the coordinator's loop.
type group struct {
	id   string
	part *partition

	state        groupState
	stateTime    int64 // ms; when the group entered its state, -1 unknown
	protocolType string
	protocol     string
	generation   int32
	leader       string
	members      map[string]*member
	memberSeq    uint64
	static       map[string]string         // instance id → member id
	pending      map[string]*pendingMember // KIP-394: ids handed out with MEMBER_ID_REQUIRED
	pendingSync  map[string]struct{}       // members that have not synced this generation
	subscribed   map[string]struct{}       // topics of "consumer" members; nil if unknown

	newMemberAdded     bool
	initialDelayActive bool
	joinStop           func() bool
	joinSeq            uint64
	syncStop           func() bool

	// cg is set for a KIP-848 consumer group (then members, static and
	// pending stay empty and state is Empty or Stable).
	cg *consumerGroup

	offsets        map[topicPartition]offset
	pendingCommits map[topicPartition]int // appends in flight per partition
}

func (c *Coordinator) newGroup(p *partition, id string) *group {
	g := &group{
		id:             id,
		part:           p,
		state:          stateEmpty,
		stateTime:      c.nowMs(),
		members:        make(map[string]*member),
		static:         make(map[string]string),
		pending:        make(map[string]*pendingMember),
		pendingSync:    make(map[string]struct{}),
		offsets:        make(map[topicPartition]offset),
		pendingCommits: make(map[topicPartition]int),
	}
	p.groups[id] = g
	return g
}

func (c *Coordinator) now() time.Time { return c.clock.Now() }
func (c *Coordinator) nowMs() int64   { return c.clock.Now().UnixMilli() }

func (c *Coordinator) transition(g *group, s groupState) {
	g.state = s
	g.stateTime = c.nowMs()
}

// hasMember reports whether a classic group has the member with this id,
// or a static member with this instance id.
func (g *group) hasMember(id string, instanceID *string) bool {
	if _, ok := g.members[id]; ok {
		return true
	}
	if instanceID != nil {
		if _, ok := g.static[*instanceID]; ok {
			return true
		}
	}
	return false
}

func (g *group) memberOrder() []string {
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return g.members[ids[i]].seq < g.members[ids[j]].seq })
	return ids
}

func (g *group) loadMetadata(v *kmsg.GroupMetadataValue, now time.Time) {
	g.protocolType = v.ProtocolType
	g.generation = v.Generation
	if v.Protocol != nil {
		g.protocol = *v.Protocol
	}
	if v.Leader != nil {
		g.leader = *v.Leader
	}
	g.stateTime = v.CurrentStateTimestamp
	for _, mv := range v.Members {
		g.memberSeq++
		m := &member{
			id:               mv.MemberID,
			instanceID:       mv.InstanceID,
			clientID:         mv.ClientID,
			clientHost:       mv.ClientHost,
			sessionTimeout:   time.Duration(mv.SessionTimeoutMillis) * time.Millisecond,
			rebalanceTimeout: time.Duration(mv.RebalanceTimeoutMillis) * time.Millisecond,
			protocolType:     v.ProtocolType,
			protocols:        []protocol{{name: g.protocol, metadata: mv.Subscription}},
			assignment:       mv.Assignment,
			seq:              g.memberSeq,
			lastHeartbeat:    now,
		}
		if m.rebalanceTimeout <= 0 {
			m.rebalanceTimeout = m.sessionTimeout
		}
		g.members[m.id] = m
		if m.instanceID != nil {
			g.static[*m.instanceID] = m.id
		}
	}
	if _, ok := g.members[g.leader]; !ok {
		g.leader = ""
		if ids := g.memberOrder(); len(ids) > 0 {
			g.leader = ids[0]
		}
	}
	if len(g.members) == 0 {
		g.state = stateEmpty
	} else {
		g.state = stateStable
	}
	g.computeSubscribed()
}

// rebalanceTimeout is the longest rebalance timeout among the members.
func (g *group) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		if m.rebalanceTimeout > d {
			d = m.rebalanceTimeout
		}
	}
	return d
}

func (g *group) allJoined() bool {
	if len(g.pending) > 0 {
		return false
	}
	for _, m := range g.members {
		if m.joinReply == nil {
			return false
		}
	}
	return true
}

// supportsProtocols is Kafka's check for INCONSISTENT_GROUP_PROTOCOL.
func (g *group) supportsProtocols(protocolType string, protos []protocol) bool {
	if len(g.members) == 0 {
		return protocolType != "" && len(protos) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range protos {
		all := true
		for _, m := range g.members {
			if !m.hasProtocol(p.name) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func (m *member) hasProtocol(name string) bool {
	for _, p := range m.protocols {
		if p.name == name {
			return true
		}
	}
	return false
}

// selectProtocol picks, among the protocols every member supports, the one
// most members list first; ties go to the order of the first member's list.
func (g *group) selectProtocol() string {
	ids := g.memberOrder()
	if len(ids) == 0 {
		return ""
	}
	var candidates []string
	for _, p := range g.members[ids[0]].protocols {
		all := true
		for _, id := range ids[1:] {
			if !g.members[id].hasProtocol(p.name) {
				all = false
				break
			}
		}
		if all {
			candidates = append(candidates, p.name)
		}
	}
	votes := make(map[string]int)
	for _, id := range ids {
		for _, p := range g.members[id].protocols {
			if contains(candidates, p.name) {
				votes[p.name]++
				break
			}
		}
	}
	best := ""
	for _, cand := range candidates {
		if best == "" || votes[cand] > votes[best] {
			best = cand
		}
	}
	return best
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// computeSubscribed parses the consumer subscriptions of the selected
// protocol; the set is nil when the group is not a consumer group or a
// subscription does not parse (then every topic counts as subscribed).
func (g *group) computeSubscribed() {
	g.subscribed = nil
	if g.protocolType != "consumer" || len(g.members) == 0 {
		return
	}
	set := make(map[string]struct{})
	for _, m := range g.members {
		var md kmsg.ConsumerMemberMetadata
		if err := md.ReadFrom(m.metadataFor(g.protocol)); err != nil {
			return
		}
		for _, t := range md.Topics {
			set[t] = struct{}{}
		}
	}
	g.subscribed = set
}

func (g *group) isSubscribed(topic string) bool {
	if g.subscribed == nil {
		return true
	}
	_, ok := g.subscribed[topic]
	return ok
}

// validateMember is Kafka's validateCurrentMember: a static member must be
// the current holder of its instance id, and the member must exist.
func (g *group) validateMember(memberID string, instanceID *string) int16 {
	if instanceID != nil {
		cur, ok := g.static[*instanceID]
		if !ok {
			return kerr.UnknownMemberID.Code
		}
		if cur != memberID {
			return kerr.FencedInstanceID.Code
		}
		return 0
	}
	if _, ok := g.members[memberID]; !ok {
		return kerr.UnknownMemberID.Code
	}
	return 0
}

// lookup finds the partition and group of a group id. code is
// NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS when this coordinator
// cannot serve the group now; g is nil if the group does not exist.
func (c *Coordinator) lookup(groupID string) (p *partition, g *group, code int16) {
	p = c.partitions[c.PartitionFor(groupID)]
	if p == nil {
		return nil, nil, kerr.NotCoordinator.Code
	}
	if p.loading {
		return p, nil, kerr.CoordinatorLoadInProgress.Code
	}
	return p, p.groups[groupID], 0
}

// maybeDropUnused forgets a group that holds nothing: no members, no
// pending members, no offsets and never a generation.
func (c *Coordinator) maybeDropUnused(g *group) {
	if g.cg == nil && g.state == stateEmpty && len(g.members) == 0 && len(g.pending) == 0 && len(g.offsets) == 0 &&
		len(g.pendingCommits) == 0 && g.generation == 0 && g.part.groups[g.id] == g {
		delete(g.part.groups, g.id)
		g.state = stateDead
	}
}

// appendErrCode maps an Append failure to the code Kafka's coordinator
// gives for a failed write to the offsets topic.
func appendErrCode(err error) int16 {
	if isNotLeader(err) {
		return kerr.NotCoordinator.Code
	}
	if errors.Is(err, errGroupRecordTooLarge) {
		return kerr.UnknownServerError.Code // Kafka's answer to RECORD_TOO_LARGE
	}
	return kerr.CoordinatorNotAvailable.Code
}

func ms(v int32) time.Duration { return time.Duration(v) * time.Millisecond }
