package group

import (
	"container/heap"
	"context"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KIP-848 consumer groups: ConsumerGroupHeartbeat and ConsumerGroupDescribe.
// The coordinator computes the target assignment (uniform or range) when
// the group epoch moves, and reconciles each member towards it one
// heartbeat at a time: a member first gives up the partitions it must lose
// (its epoch stays), and once a later heartbeat shows it no longer owns
// them it moves to the target epoch and gets the partitions that are free.
// A partition is handed to its new owner only after its previous owner
// acknowledged the revocation.

// Kafka's defaults for the consumer protocol.
const (
	DefaultConsumerSessionTimeout    = 45 * time.Second // group.consumer.session.timeout.ms
	DefaultConsumerHeartbeatInterval = 5 * time.Second  // group.consumer.heartbeat.interval.ms
	leaveEpoch                       = -1               // dynamic member leaves
	staticLeaveEpoch                 = -2               // static member leaves for now
)

// consumerState is Kafka's ConsumerGroup.ConsumerGroupState.
type consumerState int8

const (
	cgEmpty consumerState = iota
	cgAssigning
	cgReconciling
	cgStable
)

func (s consumerState) String() string {
	return [...]string{"Empty", "Assigning", "Reconciling", "Stable"}[s]
}

type partSet map[topicPartition]struct{}

// cmember is a member of a consumer (KIP-848) group.
type cmember struct {
	id               string
	instanceID       *string
	rackID           *string
	clientID         string
	clientHost       string
	rebalanceTimeout time.Duration
	topics           []string // subscribed topic names, sorted
	regex            string   // subscribed regex ("" none)
	re               *regexp.Regexp
	assignor         string
	epoch, prevEpoch int32
	// assigned maps each owned partition to the member epoch at which it
	// was given; revoking holds partitions the member must give up (they
	// still belong to it until it acknowledges).
	assigned map[topicPartition]int32
	revoking partSet

	lastSeen   time.Time
	hbStop     func() bool
	hbSeq      uint64
	revokeStop func() bool
	revokeSeq  uint64

	// classic is set for a member that talks the classic protocol (online
	// migration, migration.go); joinStop and syncStop are its deadlines to
	// rejoin and to sync.
	classic          *classicMember
	joinStop         func() bool
	syncStop         func() bool
	joinSeq, syncSeq uint64
}

// consumerGroup is the KIP-848 part of a group (group.cg).
type consumerGroup struct {
	epoch       int32 // group epoch
	targetEpoch int32 // epoch of target
	target      map[string]partSet
	members     map[string]*cmember
	static      map[string]string              // instance id → member id
	owner       map[topicPartition]string      // assigned or revoking, by member id
	topicParts  map[string]int32               // partition counts the target was computed with
	topicIDs    map[string][16]byte            // and the topics' ids
	regexTopics map[string]map[string]struct{} // regex → matched topics at the last computation
	// topicsSeen is Topics' version plus one when topicParts, topicIDs
	// and regexTopics were last computed or found current (0: unknown):
	// while it stands, a heartbeat need not resolve the subscriptions
	// again (cgMetadataChanged).
	topicsSeen uint64
	assignor   string
	// dirty is set when writing the group's record failed: memory is ahead
	// of the log, so the next heartbeat writes the record again.
	dirty bool
	// writing counts this group's record writes in flight.
	writing int
}

func newConsumerGroup() *consumerGroup {
	return &consumerGroup{
		target:      make(map[string]partSet),
		members:     make(map[string]*cmember),
		static:      make(map[string]string),
		owner:       make(map[topicPartition]string),
		topicParts:  make(map[string]int32),
		topicIDs:    make(map[string][16]byte),
		regexTopics: make(map[string]map[string]struct{}),
	}
}

func (cg *consumerGroup) state() consumerState {
	if len(cg.members) == 0 {
		return cgEmpty
	}
	if cg.targetEpoch != cg.epoch {
		return cgAssigning
	}
	for id, m := range cg.members {
		if m.epoch != cg.targetEpoch || len(m.revoking) > 0 || len(m.assigned) != len(cg.target[id]) {
			return cgReconciling
		}
	}
	return cgStable
}

func (cg *consumerGroup) memberOrder() []string {
	ids := make([]string, 0, len(cg.members))
	for id := range cg.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// rangeOrder is the members in the range assignor's order, Kafka's
// RangeAssignor.sortMemberIds: static members first, by instance id, so a
// static member that restarts under a new member id keeps its ranges; then
// the others by member id.
func (cg *consumerGroup) rangeOrder() []string {
	ids := cg.memberOrder()
	sort.SliceStable(ids, func(i, j int) bool {
		a, b := cg.members[ids[i]].instanceID, cg.members[ids[j]].instanceID
		switch {
		case a != nil && b != nil:
			return *a < *b
		default:
			return a != nil && b == nil
		}
	})
	return ids
}

// ConsumerGroupHeartbeat serves ConsumerGroupHeartbeat v0-v1 (KIP-848).
func (c *Coordinator) ConsumerGroupHeartbeat(ctx context.Context, client Client, req *kmsg.ConsumerGroupHeartbeatRequest) (*kmsg.ConsumerGroupHeartbeatResponse, error) {
	// Topic ids of the owned partitions are resolved outside the loop.
	var owned partSet
	if req.Topics != nil {
		owned = make(partSet)
		for _, t := range req.Topics {
			name, ok := c.topicName(t.TopicID)
			if !ok {
				continue // a deleted topic: the member no longer owns it
			}
			for _, p := range t.Partitions {
				owned[topicPartition{name, p}] = struct{}{}
			}
		}
	}
	var re *regexp.Regexp
	if req.SubscribedTopicRegex != nil && *req.SubscribedTopicRegex != "" {
		var err error
		if re, err = compileSubscription(*req.SubscribedTopicRegex); err != nil {
			r := cgError(req, kerr.InvalidRegularExpression.Code)
			return r, nil
		}
	}
	return submit(ctx, c, func(reply func(*kmsg.ConsumerGroupHeartbeatResponse)) {
		c.handleCGHeartbeat(client, req, owned, re, reply)
	})
}

func cgError(req *kmsg.ConsumerGroupHeartbeatRequest, code int16) *kmsg.ConsumerGroupHeartbeatResponse {
	return cgErrorMsg(req, code, "")
}

// cgErrorMsg is cgError with the reason (Kafka's exception message); without
// one the error's name alone (clients know its description).
func cgErrorMsg(req *kmsg.ConsumerGroupHeartbeatRequest, code int16, msg string) *kmsg.ConsumerGroupHeartbeatResponse {
	r := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	r.ErrorCode = code
	if code != 0 {
		if msg == "" {
			if e, ok := kerr.ErrorForCode(code).(*kerr.Error); ok {
				msg = e.Message
			}
		}
		r.ErrorMessage = &msg
	}
	return r
}

// validCGRequest is Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid,
// with its messages (an invalid request answered only kerr's generic text,
// which hid, e.g., a static member's leave sent without its instance id; a
// consumer group review).
func validCGRequest(req *kmsg.ConsumerGroupHeartbeatRequest) (int16, string) {
	invalid := kerr.InvalidRequest.Code
	switch {
	case req.Group == "":
		return invalid, "GroupId can't be empty."
	case req.InstanceID != nil && *req.InstanceID == "":
		return invalid, "InstanceId can't be empty."
	case req.RackID != nil && *req.RackID == "":
		return invalid, "RackId can't be empty."
	case req.Version >= 1 && req.MemberID == "":
		return invalid, "MemberId can't be empty."
	case req.MemberEpoch == 0 && req.RebalanceTimeoutMillis == -1:
		return invalid, "RebalanceTimeoutMs must be provided in first request."
	case req.MemberEpoch == 0 && len(req.Topics) != 0:
		return invalid, "TopicPartitions must be empty when (re-)joining."
	case req.MemberEpoch == 0 && req.SubscribedTopicNames == nil && req.SubscribedTopicRegex == nil:
		return invalid, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
	case req.MemberEpoch == staticLeaveEpoch && req.InstanceID == nil:
		return invalid, "InstanceId can't be null."
	case req.MemberEpoch < staticLeaveEpoch:
		return invalid, "MemberEpoch is invalid."
	}
	if req.ServerAssignor != nil && *req.ServerAssignor != "uniform" && *req.ServerAssignor != "range" {
		return kerr.UnsupportedAssignor.Code, "ServerAssignor " + *req.ServerAssignor + " is not supported. Supported assignors: uniform, range."
	}
	return 0, ""
}

func (c *Coordinator) handleCGHeartbeat(client Client, req *kmsg.ConsumerGroupHeartbeatRequest, owned partSet, re *regexp.Regexp, reply func(*kmsg.ConsumerGroupHeartbeatResponse)) {
	if code, msg := validCGRequest(req); code != 0 {
		reply(cgErrorMsg(req, code, msg))
		return
	}
	if req.Version == 0 && req.MemberEpoch == 0 && req.MemberID == "" {
		req.MemberID = c.cfg.newMemberID(client.ClientID) // v0: the coordinator names the member
	}
	p, g, code := c.lookup(req.Group)
	if code != 0 {
		reply(cgError(req, code))
		return
	}
	var records []Record
	if g == nil || g.state == stateDead {
		if req.MemberEpoch != 0 {
			reply(cgError(req, kerr.GroupIDNotFound.Code))
			return
		}
		g = c.newGroup(p, req.Group)
	}
	if g.cg == nil {
		notConsumer := func() {
			r := cgError(req, kerr.GroupIDNotFound.Code)
			msg := "group " + g.id + " is not a consumer group"
			r.ErrorMessage = &msg
			reply(r)
		}
		if req.MemberEpoch != 0 {
			notConsumer()
			return
		}
		if len(g.members) > 0 || g.state != stateEmpty {
			// A classic group with members is upgraded online, if the
			// policy allows it (migration.go). A heartbeat that will be
			// refused does not upgrade it (Kafka's conversion lives only
			// in the records of a heartbeat that succeeds): the upgraded
			// group would take every member it has plus this one.
			if c.cfg.MaxGroupSize > 0 && len(g.members) == c.cfg.MaxGroupSize && !g.hasMember(req.MemberID, req.InstanceID) {
				reply(cgError(req, kerr.GroupMaxSizeReached.Code))
				return
			}
			recs, ok := c.cgUpgrade(g)
			if !ok {
				notConsumer()
				return
			}
			records = append(records, recs...)
		} else {
			// Empty, or with members that only asked for an id
			// (MEMBER_ID_REQUIRED): their next JoinGroup comes to the
			// consumer group as a classic member (Kafka deletes an empty
			// classic group the same way).
			for _, pm := range g.pending {
				pm.stop()
			}
			g.pending = make(map[string]*pendingMember)
			c.stopJoinTimer(g)
			if g.generation > 0 || g.protocolType != "" {
				records = append(records, Record{Key: groupKey(g.id)}) // the classic record goes
			}
			g.cg = newConsumerGroup()
			g.protocolType, g.protocol, g.leader, g.generation = "consumer", "", "", 0
		}
	}
	cg := g.cg
	if req.MemberEpoch < 0 {
		c.cgLeave(g, req, records, reply)
		return
	}
	m := cg.members[req.MemberID]
	bumped := false
	if req.MemberEpoch == 0 {
		if inst := req.InstanceID; inst != nil {
			if oldID, ok := cg.static[*inst]; ok && oldID != req.MemberID && cg.members[oldID] == nil {
				delete(cg.static, *inst) // no member holds it any more
			} else if ok && oldID != req.MemberID {
				old := cg.members[oldID]
				if old.classic == nil && old.epoch != staticLeaveEpoch {
					// Two consumer-protocol members: only one that left
					// with epoch -2 is replaced. A classic member sends no
					// such leave and is always replaced (Kafka's
					// getOrMaybeSubscribeStaticConsumerGroupMember).
					reply(cgError(req, kerr.UnreleasedInstanceID.Code))
					return
				}
				// KIP-848 static rejoin: the new member id takes the old
				// one's place, epoch and assignment; no rebalance.
				c.cgRename(g, old, req.MemberID)
				if old.epoch == staticLeaveEpoch {
					old.epoch = old.prevEpoch
				}
				m = old
			}
		}
		if m == nil {
			if c.cfg.MaxGroupSize > 0 && len(cg.members) >= c.cfg.MaxGroupSize {
				reply(cgError(req, kerr.GroupMaxSizeReached.Code))
				return
			}
			m = &cmember{id: req.MemberID, assigned: make(map[topicPartition]int32), revoking: make(partSet)}
			cg.members[m.id] = m
			bumped = true
		}
	} else {
		if inst := req.InstanceID; inst != nil {
			// A static member past its first heartbeat must still hold
			// its instance id (Kafka's throwIfStaticMemberIsUnknown and
			// throwIfInstanceIdIsFenced): an id no member holds is
			// unknown; an id another member took over fences this one.
			switch id, ok := cg.static[*inst]; {
			case !ok:
				reply(cgError(req, kerr.UnknownMemberID.Code))
				return
			case id != req.MemberID:
				reply(cgError(req, kerr.FencedInstanceID.Code))
				return
			}
		}
		if m == nil {
			reply(cgError(req, kerr.UnknownMemberID.Code))
			return
		}
		if req.MemberEpoch > m.epoch {
			reply(cgError(req, kerr.FencedMemberEpoch.Code))
			return
		}
		if req.MemberEpoch < m.epoch {
			// A lost response: the previous epoch is fine if the member
			// owns nothing it should not.
			ok := req.MemberEpoch == m.prevEpoch && owned != nil
			for tp := range owned {
				if _, a := m.assigned[tp]; !a {
					if _, r := m.revoking[tp]; !r {
						ok = false
					}
				}
			}
			if !ok {
				reply(cgError(req, kerr.FencedMemberEpoch.Code))
				return
			}
		}
	}
	if m.classic != nil {
		// A classic member's place taken by this consumer-protocol
		// heartbeat (Kafka clears its classic metadata).
		c.cgStopJoinDeadline(m)
		c.cgStopSyncDeadline(m)
		m.classic = nil
	}
	// Member fields; nil and -1 mean "unchanged".
	m.clientID, m.clientHost = client.ClientID, client.Host
	if req.InstanceID != nil {
		cg.setInstance(m, req.InstanceID)
	}
	if req.RackID != nil {
		m.rackID = req.RackID
	}
	if req.RebalanceTimeoutMillis > 0 {
		m.rebalanceTimeout = ms(req.RebalanceTimeoutMillis)
	}
	if req.SubscribedTopicNames != nil {
		topics := append([]string(nil), req.SubscribedTopicNames...)
		sort.Strings(topics)
		topics = compactStrings(topics)
		if !equalStrings(topics, m.topics) {
			m.topics = topics
			bumped = true
		}
	}
	if req.SubscribedTopicRegex != nil && *req.SubscribedTopicRegex != m.regex {
		m.regex, m.re = *req.SubscribedTopicRegex, re
		bumped = true
	}
	if req.ServerAssignor != nil && *req.ServerAssignor != m.assignor {
		m.assignor = *req.ServerAssignor
		bumped = true
	}
	if !bumped && c.cgMetadataChanged(g) {
		bumped = true
	}
	if bumped {
		c.cgBump(g)
	}
	c.cgTouch(g, m)
	before := m.epoch
	beforeAssigned := len(m.assigned)
	changed := c.cgReconcile(g, m, owned) || bumped || before != m.epoch || beforeAssigned != len(m.assigned)
	full := req.MemberEpoch == 0 || (req.RebalanceTimeoutMillis != -1 && (req.SubscribedTopicNames != nil || req.SubscribedTopicRegex != nil) && req.Topics != nil)
	// The answer is the state being written, built now (as Kafka builds
	// it with the records): a static replacement while the write is in
	// flight must not hand this member the new id.
	r := cgError(req, 0)
	id := m.id
	r.MemberID = &id
	r.MemberEpoch = m.epoch
	r.HeartbeatIntervalMillis = int32(c.groupDuration(g.id, GroupConsumerHeartbeatInterval, c.cfg.ConsumerHeartbeatInterval).Milliseconds())
	if full || changed {
		r.Assignment = c.cgAssignment(m)
	}
	if !changed && len(records) == 0 && !cg.dirty && cg.writing == 0 {
		reply(r)
		return
	}
	// Something to write, or a write of this group still in flight: the
	// answer waits for a write of the state it shows (a retried heartbeat
	// must not be told an epoch or partitions that a failover could lose,
	// as Kafka answers once its last write is committed).
	c.cgWrite(g, records, func(err error) {
		if err != nil {
			reply(cgError(req, appendErrCode(err)))
			return
		}
		reply(r)
	})
}

// cgLeave is a heartbeat with epoch -1 (leave) or -2 (a static member
// leaves for now and keeps its assignment until its session expires).
func (c *Coordinator) cgLeave(g *group, req *kmsg.ConsumerGroupHeartbeatRequest, records []Record, reply func(*kmsg.ConsumerGroupHeartbeatResponse)) {
	cg := g.cg
	m := cg.members[req.MemberID]
	if req.InstanceID != nil {
		if id, ok := cg.static[*req.InstanceID]; ok {
			if id != req.MemberID {
				reply(cgError(req, kerr.FencedInstanceID.Code))
				return
			}
			m = cg.members[id]
		}
	}
	if m == nil {
		reply(cgError(req, kerr.UnknownMemberID.Code))
		return
	}
	done := func(err error) {
		if err != nil {
			reply(cgError(req, appendErrCode(err)))
			return
		}
		r := cgError(req, 0)
		id := req.MemberID
		r.MemberID = &id
		r.MemberEpoch = req.MemberEpoch
		reply(r)
	}
	if req.MemberEpoch == staticLeaveEpoch {
		if m.epoch != staticLeaveEpoch {
			m.prevEpoch = m.epoch
		}
		m.epoch = staticLeaveEpoch
		// What it was giving up is free at once; it keeps the rest until
		// its session ends (Kafka writes it with nothing pending
		// revocation, so no rebalance timeout fences it).
		cg.releaseRevoking(m)
		c.cgTouch(g, m)
	} else if c.cgDowngradable(g, m) {
		// The last consumer-protocol member leaves classic members behind.
		c.logger.Info("group: consumer group member left", "group", g.id, "member", m.id)
		c.cgDowngrade(g, m, records, done)
		return
	} else {
		c.cgRemove(g, m)
	}
	c.cgWrite(g, records, done)
}

func (c *Coordinator) cgRename(g *group, m *cmember, to string) {
	cg := g.cg
	from := m.id
	delete(cg.members, from)
	m.id = to
	cg.members[to] = m
	if t, ok := cg.target[from]; ok {
		delete(cg.target, from)
		cg.target[to] = t
	}
	for tp, o := range cg.owner {
		if o == from {
			cg.owner[tp] = to
		}
	}
	if m.instanceID != nil {
		cg.static[*m.instanceID] = to
	}
}

// setInstance gives m the instance id inst. An instance id m went by before
// is free again: left mapped to m, it outlived m, and the next member to
// claim it found no member behind it (a nil dereference that killed the
// broker, found by broker.FuzzHandlersPair).
func (cg *consumerGroup) setInstance(m *cmember, inst *string) {
	if prev := m.instanceID; prev != nil && *prev != *inst && cg.static[*prev] == m.id {
		delete(cg.static, *prev)
	}
	m.instanceID = inst
	cg.static[*inst] = m.id
}

// cgRemove takes a member out (leave, session expiry, revocation timeout):
// its partitions are free, the group epoch goes up.
func (c *Coordinator) cgRemove(g *group, m *cmember) {
	cg := g.cg
	c.cgStopTimers(m)
	for tp := range m.assigned {
		if cg.owner[tp] == m.id {
			delete(cg.owner, tp)
		}
	}
	for tp := range m.revoking {
		if cg.owner[tp] == m.id {
			delete(cg.owner, tp)
		}
	}
	delete(cg.members, m.id)
	delete(cg.target, m.id)
	if m.instanceID != nil && cg.static[*m.instanceID] == m.id {
		delete(cg.static, *m.instanceID)
	}
	c.cgBump(g)
}

func (c *Coordinator) cgStopTimers(m *cmember) {
	if m.hbStop != nil {
		m.hbStop()
		m.hbStop = nil
	}
	if m.revokeStop != nil {
		m.revokeStop()
		m.revokeStop = nil
	}
	c.cgStopJoinDeadline(m)
	c.cgStopSyncDeadline(m)
}

// cgExpire removes a member whose session or revocation deadline passed and
// writes the group.
func (c *Coordinator) cgExpire(g *group, m *cmember, why string) {
	c.logger.Info("group: consumer group member removed", "group", g.id, "member", m.id, "reason", why)
	done := func(err error) {
		switch {
		case isNotLeader(err):
			// As in the classic protocol (completeJoin): a coordinator
			// that lost its offsets partition, its write fenced.
			c.logger.Info("group: consumer group not written: no longer the coordinator", "group", g.id, "err", err)
		case err != nil:
			c.logger.Warn("group: writing consumer group failed", "group", g.id, "err", err)
		}
	}
	if c.cgDowngradable(g, m) {
		c.cgDowngrade(g, m, nil, done)
		return
	}
	c.cgRemove(g, m)
	c.cgWrite(g, nil, done)
}

// cgWrite appends records and then the group's record as it stands; done
// runs on the loop with the result. A failure marks the group dirty so the
// next heartbeat writes it again.
func (c *Coordinator) cgWrite(g *group, records []Record, done func(error)) {
	cg := g.cg
	value := consumerValue(g)
	if len(value) > maxConsumerValueBytes {
		// A load refuses a larger record (and with it the partition's
		// other groups): it is never written.
		c.logger.Error("group: consumer group record too large to write", "group", g.id, "bytes", len(value), "max", maxConsumerValueBytes, "members", len(cg.members))
		cg.dirty = true
		done(errGroupRecordTooLarge)
		return
	}
	cg.dirty = false
	cg.writing++
	records = append(records, Record{Key: consumerKey(g.id), Value: value})
	c.appendRecords(g.part, records, func(err error) {
		cg.writing--
		if err != nil && g.cg == cg {
			cg.dirty = true
		}
		done(err)
	})
}

// The group configs a KIP-848 group may set (Kafka 4.0), in milliseconds.
const (
	GroupConsumerSessionTimeout    = "consumer.session.timeout.ms"
	GroupConsumerHeartbeatInterval = "consumer.heartbeat.interval.ms"
)

// groupDuration is a group's config name (milliseconds) if set, else def.
func (c *Coordinator) groupDuration(group, name string, def time.Duration) time.Duration {
	if c.cfg.GroupConfigs == nil {
		return def
	}
	if v, ok := c.cfg.GroupConfigs(group)[name]; ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			return time.Duration(ms) * time.Millisecond
		}
	}
	return def
}

func (c *Coordinator) cgTouch(g *group, m *cmember) {
	m.lastSeen = c.now()
	if m.hbStop != nil {
		m.hbStop()
	}
	m.hbSeq++
	seq := m.hbSeq
	session := c.groupDuration(g.id, GroupConsumerSessionTimeout, c.cfg.ConsumerSessionTimeout)
	if m.classic != nil {
		session = m.classic.sessionTimeout // a classic member's own, from its JoinGroup
	}
	m.hbStop = c.after(session, func() {
		if g.cg == nil || g.cg.members[m.id] != m || m.hbSeq != seq {
			return
		}
		m.hbStop = nil
		c.cgExpire(g, m, "session timeout")
	})
}

// cgBump moves the group epoch on and computes the new target assignment.
func (c *Coordinator) cgBump(g *group) {
	cg := g.cg
	cg.epoch++
	c.cgComputeTarget(g)
	g.state = stateEmpty
	if len(cg.members) > 0 {
		g.state = stateStable
	}
	g.stateTime = c.nowMs()
	c.cgSubscribed(g)
}

// cgSubscribed keeps g.subscribed (offset expiry, OffsetDelete) to the
// topics the members subscribe to.
func (c *Coordinator) cgSubscribed(g *group) {
	set := make(map[string]struct{})
	for t := range g.cg.topicParts {
		set[t] = struct{}{}
	}
	for _, m := range g.cg.members {
		for _, t := range m.topics {
			set[t] = struct{}{}
		}
	}
	g.subscribed = set
}

// cgTopics resolves the topics the members subscribe to (names and
// regexes) with their partition counts.
func (c *Coordinator) cgTopics(g *group) (parts map[string]int32, ids map[string][16]byte, regexes map[string]map[string]struct{}) {
	parts = make(map[string]int32)
	ids = make(map[string][16]byte)
	regexes = make(map[string]map[string]struct{})
	if c.cfg.Topics == nil {
		return parts, ids, regexes
	}
	for _, m := range g.cg.members {
		for _, t := range m.topics {
			if _, ok := parts[t]; ok {
				continue
			}
			if id, n, ok := c.cfg.Topics.Partitions(t); ok {
				parts[t], ids[t] = n, id
			}
		}
		if m.regex == "" {
			continue
		}
		if _, ok := regexes[m.regex]; ok {
			continue
		}
		matched := make(map[string]struct{})
		regexes[m.regex] = matched
		lister, ok := c.cfg.Topics.(TopicLister)
		if !ok || m.re == nil {
			continue
		}
		for _, t := range lister.TopicNames() {
			if m.re.MatchString(t) {
				if id, n, ok := c.cfg.Topics.Partitions(t); ok {
					matched[t] = struct{}{}
					parts[t], ids[t] = n, id
				}
			}
		}
	}
	return parts, ids, regexes
}

// compileSubscription compiles a KIP-848 regex subscription: it must match
// a whole topic name, as Kafka's RE2/J matches() does.
func compileSubscription(s string) (*regexp.Regexp, error) {
	return regexp.Compile("^(?:" + s + ")$")
}

// TopicLister is implemented by a Topics that can list topic names; regex
// subscriptions need it.
type TopicLister interface {
	TopicNames() []string
}

// TopicsVersioner is implemented by a Topics whose answers (names, ids,
// partition counts) change only when its version does. A heartbeat then
// resolves the group's subscriptions (every member's topics, every regex
// over every topic: work in the group's size) only after a change, as
// Kafka's coordinator refreshes a group's subscription metadata when the
// metadata image changes.
type TopicsVersioner interface {
	TopicsVersion() uint64
}

// topicsVersion is Topics' version plus one, 0 if it has none.
func (c *Coordinator) topicsVersion() uint64 {
	if v, ok := c.cfg.Topics.(TopicsVersioner); ok {
		return v.TopicsVersion() + 1
	}
	return 0
}

func (c *Coordinator) cgMetadataChanged(g *group) bool {
	// The version is read before the topics: a change in between is seen
	// at the next heartbeat.
	v := c.topicsVersion()
	if v != 0 && v == g.cg.topicsSeen {
		return false
	}
	if c.cgTopicsChanged(g) {
		return true
	}
	g.cg.topicsSeen = v
	return false
}

func (c *Coordinator) cgTopicsChanged(g *group) bool {
	parts, ids, regexes := c.cgTopics(g)
	if len(parts) != len(g.cg.topicParts) {
		return true
	}
	for t, n := range parts {
		if g.cg.topicParts[t] != n {
			return true
		}
		// A topic deleted and created again under its name: the members
		// must learn the new id (Kafka's subscription metadata holds ids).
		if old, ok := g.cg.topicIDs[t]; ok && old != ids[t] {
			return true
		}
	}
	for r, set := range regexes {
		if len(set) != len(g.cg.regexTopics[r]) {
			return true
		}
	}
	return false
}

// subscribes reports whether a member subscribes to topic (by name, or by
// a regex that matched it at the last computation).
func (cg *consumerGroup) subscribes(topic string) bool {
	for _, m := range cg.members {
		if m.subscribes(topic, cg.regexTopics) {
			return true
		}
	}
	return false
}

func (m *cmember) subscribes(topic string, regexes map[string]map[string]struct{}) bool {
	i := sort.SearchStrings(m.topics, topic)
	if i < len(m.topics) && m.topics[i] == topic {
		return true
	}
	if m.regex != "" {
		_, ok := regexes[m.regex][topic]
		return ok
	}
	return false
}

// cgComputeTarget runs the group's assignor over the current members and
// topics.
func (c *Coordinator) cgComputeTarget(g *group) {
	cg := g.cg
	v := c.topicsVersion()
	parts, topicIDs, regexes := c.cgTopics(g)
	cg.topicParts, cg.topicIDs, cg.regexTopics, cg.topicsSeen = parts, topicIDs, regexes, v
	cg.assignor = groupAssignor(cg)
	ids := cg.memberOrder()
	if cg.assignor == "range" {
		ids = cg.rangeOrder()
	}
	var topics []string
	for t := range parts {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	subs := func(topic string) []string {
		var out []string
		for _, id := range ids {
			if cg.members[id].subscribes(topic, regexes) {
				out = append(out, id)
			}
		}
		return out
	}
	var target map[string]partSet
	if cg.assignor == "range" {
		target = assignRange(ids, topics, parts, subs)
	} else {
		target = assignUniform(ids, topics, parts, subs, cg.target)
	}
	cg.target = target
	cg.targetEpoch = cg.epoch
}

// groupAssignor is the assignor most members ask for (ties: "uniform",
// then by name), as Kafka picks the group's server assignor. Classic
// members ask for none.
func groupAssignor(cg *consumerGroup) string {
	votes := map[string]int{}
	for _, m := range cg.members {
		if m.assignor != "" {
			votes[m.assignor]++
		}
	}
	best := "uniform"
	for a, n := range votes {
		if n > votes[best] || (n == votes[best] && a < best && best != "uniform") {
			best = a
		}
	}
	return best
}

// assignRange gives each member subscribed to a topic a contiguous range
// of its partitions (members in id order; the first ones get one more).
func assignRange(ids, topics []string, parts map[string]int32, subs func(string) []string) map[string]partSet {
	out := make(map[string]partSet, len(ids))
	for _, id := range ids {
		out[id] = make(partSet)
	}
	for _, t := range topics {
		ms := subs(t)
		if len(ms) == 0 {
			continue
		}
		n := int(parts[t])
		per, extra := n/len(ms), n%len(ms)
		p := 0
		for i, id := range ms {
			k := per
			if i < extra {
				k++
			}
			for j := 0; j < k; j++ {
				out[id][topicPartition{t, int32(p)}] = struct{}{}
				p++
			}
		}
	}
	return out
}

// assignUniform spreads all partitions evenly over the members that
// subscribe to them, keeping each partition where the previous target had
// it when balance allows (sticky), so only the partitions that must move
// are revoked.
func assignUniform(ids, topics []string, parts map[string]int32, subs func(string) []string, prev map[string]partSet) map[string]partSet {
	out := make(map[string]partSet, len(ids))
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		out[id] = make(partSet)
		index[id] = i
	}
	eligible := make(map[string]map[string]bool) // topic → member → subscribed
	// members: topic → the indexes in ids of its subscribers, ascending,
	// so that a scan over them visits members in ids order as a scan of ids
	// would, without the members that cannot take the topic.
	members := make(map[string][]int)
	var all []topicPartition
	for _, t := range topics {
		e := make(map[string]bool)
		var ms []int
		for _, id := range subs(t) {
			if i, ok := index[id]; ok && !e[id] {
				ms = append(ms, i)
			}
			e[id] = true
		}
		eligible[t] = e
		if len(e) == 0 {
			continue
		}
		sort.Ints(ms)
		members[t] = ms
		for p := int32(0); p < parts[t]; p++ {
			all = append(all, topicPartition{t, p})
		}
	}
	if len(ids) == 0 {
		return out
	}
	// Even quota per member (homogeneous subscriptions are the common case;
	// the balancing pass below evens out the rest).
	quota := (len(all) + len(ids) - 1) / len(ids)
	owner := make(map[topicPartition]string)
	for _, id := range ids {
		var kept []topicPartition
		for tp := range prev[id] {
			if tp.partition < parts[tp.topic] && eligible[tp.topic][id] {
				kept = append(kept, tp)
			}
		}
		sortTPs(kept)
		for _, tp := range kept {
			if len(out[id]) >= quota {
				break
			}
			if _, taken := owner[tp]; !taken {
				out[id][tp] = struct{}{}
				owner[tp] = id
			}
		}
	}
	// least is the subscriber of tp's topic other than except with the
	// fewest partitions, fewer than below (the first in ids order among
	// equals), or "".
	least := func(tp topicPartition, except string, below int) string {
		best, bestN := "", below
		for _, i := range members[tp.topic] {
			id := ids[i]
			if n := len(out[id]); n < bestN && id != except {
				best, bestN = id, n
			}
		}
		return best
	}
	// Each partition nobody kept goes to the subscriber with the fewest
	// (the first in ids order among equals). all holds each topic's
	// partitions together, and while a topic's are handed out only its
	// subscribers' counts change: a heap of them per topic gives each
	// partition's member in log time, not a scan of every member (a group
	// of 1000 members and 10000 partitions took a second per assignment).
	var h memberHeap
	heapTopic := ""
	for _, tp := range all {
		if _, ok := owner[tp]; ok {
			continue
		}
		if tp.topic != heapTopic {
			heapTopic = tp.topic
			h = h[:0]
			for _, i := range members[tp.topic] {
				h = append(h, memberCount{len(out[ids[i]]), i})
			}
			heap.Init(&h)
		}
		if len(h) == 0 {
			continue
		}
		id := ids[h[0].index]
		out[id][tp] = struct{}{}
		owner[tp] = id
		h[0].count++
		heap.Fix(&h, 0)
	}
	// Balance: move one partition at a time from the fullest member that
	// can give one to the emptiest eligible member with at least two
	// fewer. Every move lowers the sum of squared counts, so this ends;
	// taking from the fullest first moves only what must move. A member
	// whose count is at most one above the fewest any member has cannot
	// give (nor can the members after it, which have no more), so the pass
	// that finds nothing to move ends there instead of trying every
	// partition of every member.
	order := append([]string(nil), ids...)
	for {
		sort.SliceStable(order, func(i, j int) bool {
			if a, b := len(out[order[i]]), len(out[order[j]]); a != b {
				return a > b
			}
			return index[order[i]] < index[order[j]]
		})
		fewest := len(out[order[len(order)-1]])
		moved := false
		for _, from := range order {
			if len(out[from])-1 <= fewest {
				break
			}
			tps := make([]topicPartition, 0, len(out[from]))
			for tp := range out[from] {
				tps = append(tps, tp)
			}
			sortTPs(tps)
			for i := len(tps) - 1; i >= 0 && !moved; i-- {
				tp := tps[i]
				if to := least(tp, from, len(out[from])-1); to != "" {
					delete(out[from], tp)
					out[to][tp] = struct{}{}
					moved = true
				}
			}
			if moved {
				break
			}
		}
		if !moved {
			break
		}
	}
	return out
}

// memberCount and memberHeap order members by partition count, then by
// their index in the member list (assignUniform).
type memberCount struct{ count, index int }

type memberHeap []memberCount

func (h memberHeap) Len() int { return len(h) }
func (h memberHeap) Less(i, j int) bool {
	return h[i].count < h[j].count || (h[i].count == h[j].count && h[i].index < h[j].index)
}
func (h memberHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *memberHeap) Push(x any)   { *h = append(*h, x.(memberCount)) }
func (h *memberHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func sortTPs(tps []topicPartition) {
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].topic != tps[j].topic {
			return tps[i].topic < tps[j].topic
		}
		return tps[i].partition < tps[j].partition
	})
}

// releaseRevoking frees the partitions m was giving up, and stops its
// revocation timeout.
func (cg *consumerGroup) releaseRevoking(m *cmember) {
	for tp := range m.revoking {
		if cg.owner[tp] == m.id {
			delete(cg.owner, tp)
		}
	}
	m.revoking = make(partSet)
	if m.revokeStop != nil {
		m.revokeStop()
		m.revokeStop = nil
	}
}

// cgRevokeDeadline gives m, which must give partitions up, its rebalance
// timeout to do so; then it is removed (Kafka's consumer group rebalance
// timeout). A loaded partition arms it again for every member revoking.
func (c *Coordinator) cgRevokeDeadline(g *group, m *cmember) {
	if m.revokeStop != nil {
		m.revokeStop()
	}
	m.revokeSeq++
	seq := m.revokeSeq
	d := m.rebalanceTimeout
	if d <= 0 {
		d = c.groupDuration(g.id, GroupConsumerSessionTimeout, c.cfg.ConsumerSessionTimeout)
	}
	m.revokeStop = c.after(d, func() {
		if g.cg == nil || g.cg.members[m.id] != m || m.revokeSeq != seq || len(m.revoking) == 0 {
			return
		}
		m.revokeStop = nil
		c.cgExpire(g, m, "revocation not acknowledged within the rebalance timeout")
	})
}

// cgReconcile moves m towards its target assignment (Kafka's
// CurrentAssignmentBuilder). owned is what the member reported owning (nil:
// not reported). It reports whether the member changed.
func (c *Coordinator) cgReconcile(g *group, m *cmember, owned partSet) bool {
	cg := g.cg
	changed := false
	if len(m.revoking) > 0 && owned != nil {
		done := true
		for tp := range m.revoking {
			if _, still := owned[tp]; still {
				done = false
				break
			}
		}
		if done {
			cg.releaseRevoking(m)
			changed = true
		}
	}
	if len(m.revoking) > 0 {
		return changed
	}
	target := cg.target[m.id]
	var revoke []topicPartition
	for tp := range m.assigned {
		if _, ok := target[tp]; !ok {
			revoke = append(revoke, tp)
		}
	}
	if len(revoke) > 0 && !ownsAny(owned, revoke) {
		// The member reported owning none of them (a classic member that
		// revoked before rejoining, say): they are free at once.
		for _, tp := range revoke {
			delete(m.assigned, tp)
			if cg.owner[tp] == m.id {
				delete(cg.owner, tp)
			}
		}
		revoke, changed = nil, true
	}
	if len(revoke) > 0 {
		for _, tp := range revoke {
			delete(m.assigned, tp)
			m.revoking[tp] = struct{}{}
		}
		c.cgRevokeDeadline(g, m)
		return true
	}
	if m.epoch != cg.targetEpoch {
		m.prevEpoch = m.epoch
		m.epoch = cg.targetEpoch
		changed = true
	}
	var add []topicPartition
	for tp := range target {
		if _, ok := m.assigned[tp]; ok {
			continue
		}
		if o, ok := cg.owner[tp]; ok && o != m.id {
			continue // not released yet by its previous owner
		}
		add = append(add, tp)
	}
	for _, tp := range add {
		cg.owner[tp] = m.id
		m.assigned[tp] = m.epoch
		changed = true
	}
	return changed
}

// ownsAny is Kafka's CurrentAssignmentBuilder.ownsRevokedPartitions: a
// member that did not report what it owns (nil) owns everything it was
// given.
func ownsAny(owned partSet, tps []topicPartition) bool {
	if owned == nil {
		return true
	}
	for _, tp := range tps {
		if _, ok := owned[tp]; ok {
			return true
		}
	}
	return false
}

func (c *Coordinator) cgAssignment(m *cmember) *kmsg.ConsumerGroupHeartbeatResponseAssignment {
	a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
	a.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
	for _, t := range byTopic(m.assigned) {
		at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
		at.TopicID = c.topicID(t.topic)
		at.Partitions = t.partitions
		a.Topics = append(a.Topics, at)
	}
	return &a
}

func (c *Coordinator) topicID(name string) [16]byte {
	if c.cfg.Topics == nil {
		return [16]byte{}
	}
	id, _, _ := c.cfg.Topics.Partitions(name)
	return id
}

type topicParts struct {
	topic      string
	partitions []int32
}

func byTopic[V any](set map[topicPartition]V) []topicParts {
	m := make(map[string][]int32)
	for tp := range set {
		m[tp.topic] = append(m[tp.topic], tp.partition)
	}
	var out []topicParts
	for t, ps := range m {
		sortInt32s(ps)
		out = append(out, topicParts{t, ps})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].topic < out[j].topic })
	return out
}

// ConsumerGroupDescribe serves ConsumerGroupDescribe v0-v1.
func (c *Coordinator) ConsumerGroupDescribe(ctx context.Context, req *kmsg.ConsumerGroupDescribeRequest) (*kmsg.ConsumerGroupDescribeResponse, error) {
	return submit(ctx, c, func(reply func(*kmsg.ConsumerGroupDescribeResponse)) {
		resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
		for _, id := range req.Groups {
			resp.Groups = append(resp.Groups, c.cgDescribe(id, req))
		}
		reply(resp)
	})
}

func (c *Coordinator) cgDescribe(id string, req *kmsg.ConsumerGroupDescribeRequest) kmsg.ConsumerGroupDescribeResponseGroup {
	d := kmsg.NewConsumerGroupDescribeResponseGroup()
	d.Group = id
	if req.IncludeAuthorizedOperations {
		d.AuthorizedOperations = groupOperations
	}
	_, g, code := c.lookup(id)
	if code != 0 {
		d.ErrorCode = code
		return d
	}
	if g == nil || g.state == stateDead || g.cg == nil {
		d.ErrorCode = kerr.GroupIDNotFound.Code
		msg := "group " + id + " not found"
		if g != nil && g.state != stateDead {
			msg = "group " + id + " is not a consumer group"
		}
		d.ErrorMessage = &msg
		return d
	}
	cg := g.cg
	d.State = cg.state().String()
	d.Epoch = cg.epoch
	d.AssignmentEpoch = cg.targetEpoch
	d.AssignorName = groupAssignor(cg)
	for _, mid := range cg.memberOrder() {
		m := cg.members[mid]
		dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
		dm.MemberID = m.id
		dm.InstanceID = m.instanceID
		dm.RackID = m.rackID
		dm.MemberEpoch = m.epoch
		dm.ClientID = m.clientID
		dm.ClientHost = m.clientHost
		dm.SubscribedTopics = append([]string{}, m.topics...)
		if m.regex != "" {
			r := m.regex
			dm.SubscribedTopicRegex = &r
		}
		dm.Assignment = c.describeAssignment(m.assigned)
		dm.TargetAssignment = c.describeAssignment(cg.target[mid])
		if req.Version >= 1 {
			dm.MemberType = 1 // consumer protocol
			if m.classic != nil {
				dm.MemberType = 0 // classic protocol (online migration)
			}
		}
		d.Members = append(d.Members, dm)
	}
	return d
}

func (c *Coordinator) describeAssignment(set any) kmsg.Assignment {
	a := kmsg.Assignment{TopicPartitions: []kmsg.AssignmentTopicPartition{}}
	var tps []topicParts
	switch s := set.(type) {
	case map[topicPartition]int32:
		tps = byTopic(s)
	case partSet:
		tps = byTopic(s)
	}
	for _, t := range tps {
		a.TopicPartitions = append(a.TopicPartitions, kmsg.AssignmentTopicPartition{TopicID: c.topicID(t.topic), Topic: t.topic, Partitions: t.partitions})
	}
	return a
}

// cgValidateCommit is Kafka's ConsumerGroup.validateOffsetCommit, with
// KIP-1251's relaxation: a commit at an older member epoch is accepted for
// partitions the member has owned since that epoch or before (a member
// committing while it reconciles is not fenced).
func (g *group) cgValidateCommit(req *kmsg.OffsetCommitRequest, names []string, pre [][]int16) int16 {
	cg := g.cg
	if req.Generation < 0 && req.MemberID == "" && req.InstanceID == nil {
		if len(cg.members) == 0 {
			return 0
		}
		return kerr.UnknownMemberID.Code
	}
	m := cg.members[req.MemberID]
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	if m.classic != nil {
		// A classic member commits at exactly its generation (any version).
		if req.Generation != m.epoch {
			return kerr.IllegalGeneration.Code
		}
		return 0
	}
	if req.Version < 9 {
		return kerr.UnsupportedVersion.Code
	}
	if req.Generation > m.epoch {
		// KIP-1251: assignment epoch <= client epoch <= member epoch,
		// else STALE_MEMBER_EPOCH (which the client retries after its
		// next heartbeat).
		return kerr.StaleMemberEpoch.Code
	}
	if req.Generation < m.epoch {
		for i, t := range req.Topics {
			for j, p := range t.Partitions {
				if pre[i][j] != 0 {
					continue
				}
				if !m.ownedSince(topicPartition{names[i], p.Partition}, req.Generation) {
					return kerr.StaleMemberEpoch.Code
				}
			}
		}
	}
	return 0
}

// cgValidateFetch is Kafka's ConsumerGroup.validateOffsetFetch (OffsetFetch
// v9+): a fetch that names no member (nil id, epoch -1: an admin client or
// a consumer outside group management) is served; else the member must be
// in the group (UNKNOWN_MEMBER_ID) at exactly its member epoch:
// STALE_MEMBER_EPOCH for a consumer-protocol member, ILLEGAL_GENERATION for
// a classic member of the group (its generation). Unlike a commit there is
// no relaxation for an older epoch (KIP-1251 is about commits).
func (g *group) cgValidateFetch(memberID *string, epoch int32) int16 {
	if memberID == nil && epoch < 0 {
		return 0
	}
	var m *cmember
	if memberID != nil {
		m = g.cg.members[*memberID]
	}
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	if epoch != m.epoch {
		if m.classic != nil {
			return kerr.IllegalGeneration.Code
		}
		return kerr.StaleMemberEpoch.Code
	}
	return 0
}

// ownedSince tells whether the member has owned tp since member epoch
// epoch or before (a partition being revoked counts as owned since ever).
func (m *cmember) ownedSince(tp topicPartition, epoch int32) bool {
	if _, r := m.revoking[tp]; r {
		return true
	}
	e, ok := m.assigned[tp]
	return ok && e <= epoch
}

// cgValidateTxnCommit is cgValidateCommit for TxnOffsetCommit (Kafka's
// OffsetMetadataManager.validateTransactionalOffsetCommit): no version
// floor, the instance id is not checked, and a stale member epoch answers
// ILLEGAL_GENERATION, which transactional clients take as "abort and
// retry after the rejoin".
func (g *group) cgValidateTxnCommit(req *kmsg.TxnOffsetCommitRequest, names []string) int16 {
	cg := g.cg
	if req.Generation < 0 && len(cg.members) == 0 {
		return 0
	}
	m := cg.members[req.MemberID]
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	if m.classic != nil {
		if req.Generation != m.epoch {
			return kerr.IllegalGeneration.Code
		}
		return 0
	}
	if req.Generation > m.epoch {
		return kerr.IllegalGeneration.Code
	}
	if req.Generation < m.epoch {
		for i, t := range req.Topics {
			for _, p := range t.Partitions {
				if !m.ownedSince(topicPartition{names[i], p.Partition}, req.Generation) {
					return kerr.IllegalGeneration.Code
				}
			}
		}
	}
	return 0
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// cgShutdown stops a consumer group's timers.
func (c *Coordinator) cgShutdown(g *group) {
	if g.cg == nil {
		return
	}
	for _, m := range g.cg.members {
		c.cgStopTimers(m)
	}
}
