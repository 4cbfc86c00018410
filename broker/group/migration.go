package group

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Online migration between the classic protocol and KIP-848, as Kafka 4.0
// does it (group.consumer.migration.policy). A rolling upgrade of a group's
// consumers from the classic protocol to the consumer protocol, or back,
// needs no downtime:
//
//   - Upgrade: a ConsumerGroupHeartbeat joining a classic group that has
//     members turns it into a consumer group. Every classic member becomes a
//     member of it with its classic assignment (epoch = the generation) and
//     keeps talking the classic protocol: the coordinator answers its
//     JoinGroup, SyncGroup, Heartbeat and LeaveGroup from the consumer
//     group's server-side assignment, and a heartbeat tells it to rejoin
//     (REBALANCE_IN_PROGRESS) whenever it must give up partitions, has an
//     older epoch than the group, or may take partitions that became free.
//   - Classic members join a consumer group the same way.
//   - Downgrade: when the last consumer-protocol member leaves (or is
//     removed) and classic members remain, the group turns classic again,
//     with the consumer group's target assignment as the members'
//     assignments, and rebalances.

// MigrationPolicy is group.consumer.migration.policy.
type MigrationPolicy int8

const (
	// MigrationBidirectional allows both (Kafka 4.0's default; the zero value).
	MigrationBidirectional MigrationPolicy = iota
	// MigrationUpgrade allows classic → consumer only.
	MigrationUpgrade
	// MigrationDowngrade allows consumer → classic only.
	MigrationDowngrade
	// MigrationDisabled allows neither: a group switches protocol only
	// when empty, and a group with members refuses the other protocol.
	MigrationDisabled
)

var migrationPolicyNames = [...]string{"bidirectional", "upgrade", "downgrade", "disabled"}

func (p MigrationPolicy) String() string {
	if p < 0 || int(p) >= len(migrationPolicyNames) {
		return fmt.Sprintf("MigrationPolicy(%d)", int8(p))
	}
	return migrationPolicyNames[p]
}

// ParseMigrationPolicy reads a group.consumer.migration.policy value
// (case-insensitive, as Kafka's).
func ParseMigrationPolicy(s string) (MigrationPolicy, error) {
	for i, n := range migrationPolicyNames {
		if strings.EqualFold(strings.TrimSpace(s), n) {
			return MigrationPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("group.consumer.migration.policy %q: want one of %s", s, strings.Join(migrationPolicyNames[:], ", "))
}

func (p MigrationPolicy) upgrade() bool { return p == MigrationBidirectional || p == MigrationUpgrade }
func (p MigrationPolicy) downgrade() bool {
	return p == MigrationBidirectional || p == MigrationDowngrade
}

// classicMember is what a consumer-group member that talks the classic
// protocol adds: Kafka's ClassicMemberMetadata.
type classicMember struct {
	sessionTimeout time.Duration
	protocols      []protocol // as its last JoinGroup listed them
}

// version is the ConsumerProtocol version of the member's first protocol's
// subscription; its assignment is written at the same version (0 to 3).
func (cm *classicMember) version() int16 {
	if len(cm.protocols) == 0 {
		return 0
	}
	return protocolVersion(cm.protocols[0].metadata)
}

func protocolVersion(md []byte) int16 {
	if len(md) < 2 {
		return 0
	}
	v := int16(binary.BigEndian.Uint16(md))
	return min(max(v, 0), 3)
}

func (cm *classicMember) protocolName() string {
	if len(cm.protocols) == 0 {
		return ""
	}
	return cm.protocols[0].name
}

// encodeAssignment is a ConsumerProtocol assignment of set at version.
func encodeAssignment[V any](version int16, set map[topicPartition]V) []byte {
	a := kmsg.NewConsumerMemberAssignment()
	a.Version = version
	a.Topics = []kmsg.ConsumerMemberAssignmentTopic{}
	for _, t := range byTopic(set) {
		a.Topics = append(a.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t.topic, Partitions: t.partitions})
	}
	return a.AppendTo(nil)
}

// sortedTopics is a sorted copy of topics without duplicates.
func sortedTopics(topics []string) []string {
	out := append([]string{}, topics...)
	sort.Strings(out)
	return compactStrings(out)
}

// cgUpgrade turns the classic group g, which has members, into a consumer
// group (Kafka's convertToConsumerGroup). Members waiting in JoinGroup or
// SyncGroup are told to rejoin. It returns the records that end the classic
// group (the consumer group's record is written by the caller), or false if
// the group cannot be upgraded: the policy forbids it, it does not use the
// consumer protocol, it is larger than group.max.size, a member's
// subscription or assignment does not parse, or its record would be too
// large.
func (c *Coordinator) cgUpgrade(g *group) ([]Record, bool) {
	if !c.cfg.MigrationPolicy.upgrade() || g.protocolType != "consumer" {
		return nil, false
	}
	if c.cfg.MaxGroupSize > 0 && len(g.members) > c.cfg.MaxGroupSize {
		return nil, false
	}
	type conv struct {
		m   *member
		sub kmsg.ConsumerMemberMetadata
		asg kmsg.ConsumerMemberAssignment
	}
	ids := g.memberOrder()
	convs := make([]conv, 0, len(ids))
	for _, id := range ids {
		m := g.members[id]
		name := g.protocol
		if name == "" && len(m.protocols) > 0 {
			name = m.protocols[0].name // the first rebalance has not picked one
		}
		cv := conv{m: m}
		if err := cv.sub.ReadFrom(m.metadataFor(name)); err != nil {
			c.logger.Info("group: cannot upgrade a classic group: a subscription does not parse", "group", g.id, "member", id, "err", err)
			return nil, false
		}
		if len(m.assignment) > 0 {
			if err := cv.asg.ReadFrom(m.assignment); err != nil {
				c.logger.Info("group: cannot upgrade a classic group: an assignment does not parse", "group", g.id, "member", id, "err", err)
				return nil, false
			}
		}
		convs = append(convs, cv)
	}
	// The consumer group's record keeps every member's protocols (base64 in
	// JSON) and partitions: one a load would refuse is never made.
	size := 512
	for _, cv := range convs {
		for _, p := range cv.m.protocols {
			size += len(p.name) + (len(p.metadata)+2)/3*4 + 32
		}
		size += 256 + 2*len(cv.m.assignment)
	}
	if size > maxConsumerValueBytes {
		c.logger.Info("group: cannot upgrade a classic group: its consumer group record would be too large", "group", g.id, "bytes", size)
		return nil, false
	}
	for _, id := range ids {
		m := g.members[id]
		if m.joinReply != nil {
			m.joinReply(joinError(&kmsg.JoinGroupRequest{Version: m.joinVersion, MemberID: m.id}, kerr.RebalanceInProgress.Code))
			m.joinReply = nil
		}
		if m.syncReply != nil {
			m.syncReply(syncError(&kmsg.SyncGroupRequest{Version: m.syncVersion}, kerr.RebalanceInProgress.Code))
			m.syncReply = nil
		}
		if m.hbStop != nil {
			m.hbStop()
			m.hbStop = nil
		}
	}
	for _, pm := range g.pending {
		pm.stop()
	}
	c.stopJoinTimer(g)
	c.stopSyncTimer(g)

	gen := g.generation
	cg := newConsumerGroup()
	cg.epoch, cg.targetEpoch = gen, gen
	for _, cv := range convs {
		m := cv.m
		cm := &cmember{
			id: m.id, instanceID: m.instanceID, rackID: cv.sub.Rack, clientID: m.clientID, clientHost: m.clientHost,
			rebalanceTimeout: m.rebalanceTimeout, topics: sortedTopics(cv.sub.Topics),
			epoch: gen, prevEpoch: gen, assigned: make(map[topicPartition]int32), revoking: make(partSet),
			classic: &classicMember{sessionTimeout: m.sessionTimeout, protocols: m.protocols},
		}
		target := make(partSet)
		for _, t := range cv.asg.Topics {
			for _, p := range t.Partitions {
				tp := topicPartition{t.Topic, p}
				if _, taken := cg.owner[tp]; taken {
					continue // a stale assignment overlapping another: the first keeps it
				}
				cg.owner[tp] = cm.id
				cm.assigned[tp] = gen
				target[tp] = struct{}{}
			}
		}
		cg.target[cm.id] = target
		cg.members[cm.id] = cm
		if cm.instanceID != nil {
			cg.static[*cm.instanceID] = cm.id
		}
	}
	g.members = make(map[string]*member)
	g.static = make(map[string]string)
	g.pending = make(map[string]*pendingMember)
	g.pendingSync = make(map[string]struct{})
	g.cg = cg
	g.protocolType, g.protocol, g.leader, g.generation = "consumer", "", "", 0
	cg.topicParts, cg.topicIDs, cg.regexTopics = c.cgTopics(g)
	cg.assignor = groupAssignor(cg)
	c.transition(g, stateStable)
	c.cgSubscribed(g)
	for _, cm := range cg.members {
		c.cgTouch(g, cm)
	}
	c.logger.Info("group: classic group upgraded to a consumer group", "group", g.id, "generation", gen, "members", len(cg.members))
	return []Record{{Key: groupKey(g.id)}}, true
}

// cgDowngradable reports whether leaving, a consumer-protocol member about
// to go, is the last one, with classic members staying (Kafka's
// validateOnlineDowngradeWithFencedMember).
func (c *Coordinator) cgDowngradable(g *group, leaving *cmember) bool {
	if leaving.classic != nil || !c.cfg.MigrationPolicy.downgrade() {
		return false
	}
	n := 0
	for _, m := range g.cg.members {
		if m == leaving {
			continue
		}
		if m.classic == nil {
			return false
		}
		n++
	}
	return n > 0 && (c.cfg.MaxGroupSize <= 0 || n <= c.cfg.MaxGroupSize)
}

// cgDowngrade turns the consumer group g into a classic group without
// leaving (Kafka's convertToClassicGroup): the classic members keep their
// ids, their assignments are the consumer group's target, the generation is
// the group epoch, and a rebalance starts. done runs with the result of
// writing records and then the conversion.
func (c *Coordinator) cgDowngrade(g *group, leaving *cmember, records []Record, done func(error)) {
	cg := g.cg
	for _, m := range cg.members {
		c.cgStopTimers(m)
	}
	g.cg = nil
	g.members = make(map[string]*member)
	g.static = make(map[string]string)
	g.pending = make(map[string]*pendingMember)
	g.pendingSync = make(map[string]struct{})
	g.protocolType = "consumer"
	g.generation = cg.epoch
	now := c.now()
	for _, id := range cg.memberOrder() {
		cm := cg.members[id]
		if cm == leaving {
			continue
		}
		g.memberSeq++
		m := &member{
			id: cm.id, instanceID: cm.instanceID, clientID: cm.clientID, clientHost: cm.clientHost,
			sessionTimeout: cm.classic.sessionTimeout, rebalanceTimeout: cm.rebalanceTimeout,
			protocolType: "consumer", protocols: cm.classic.protocols, seq: g.memberSeq, lastHeartbeat: now,
		}
		if m.rebalanceTimeout <= 0 {
			m.rebalanceTimeout = m.sessionTimeout
		}
		g.members[m.id] = m
		if m.instanceID != nil {
			g.static[*m.instanceID] = m.id
		}
	}
	g.protocol = g.selectProtocol()
	g.leader = ""
	if ids := g.memberOrder(); len(ids) > 0 {
		g.leader = ids[0]
	}
	for id, m := range g.members {
		m.assignment = encodeAssignment(protocolVersion(m.metadataFor(g.protocol)), cg.target[id])
	}
	g.computeSubscribed()
	c.transition(g, stateStable)
	records = append(records, Record{Key: consumerKey(g.id)}, Record{Key: groupKey(g.id), Value: groupValue(g, c.nowMs())})
	for _, m := range g.members {
		c.touch(g, m)
	}
	c.logger.Info("group: consumer group downgraded to a classic group", "group", g.id, "generation", g.generation, "members", len(g.members))
	c.prepareRebalance(g)
	c.appendRecords(g.part, records, done)
}

// classicMember finds the member a classic request names in a consumer
// group (Kafka's validateConsumerGroupMember and
// throwIfMemberDoesNotUseClassicProtocol).
func (cg *consumerGroup) classicMember(memberID string, instanceID *string) (*cmember, int16) {
	id := memberID
	if instanceID != nil {
		cur, ok := cg.static[*instanceID]
		if !ok {
			return nil, kerr.UnknownMemberID.Code
		}
		if cur != memberID {
			return nil, kerr.FencedInstanceID.Code
		}
		id = cur
	}
	m := cg.members[id]
	if m == nil || m.classic == nil {
		return nil, kerr.UnknownMemberID.Code
	}
	return m, 0
}

// onlyClassicBesides reports whether every member but m talks the classic
// protocol.
func (cg *consumerGroup) onlyClassicBesides(m *cmember) bool {
	for _, o := range cg.members {
		if o != m && o.classic == nil {
			return false
		}
	}
	return true
}

// classicSupports is Kafka's supportsClassicProtocols for a consumer group:
// the joining member must share a protocol name with every other classic
// member.
func (cg *consumerGroup) classicSupports(protos []protocol, self string) bool {
	for _, p := range protos {
		all := true
		for id, m := range cg.members {
			if id == self || m.classic == nil {
				continue
			}
			found := false
			for _, q := range m.classic.protocols {
				if q.name == p.name {
					found = true
					break
				}
			}
			if !found {
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

// cgClassicJoin is a JoinGroup to a consumer group with members (Kafka's
// classicGroupJoinToConsumerGroup): the member's subscription and owned
// partitions come from its consumer-protocol metadata, the group's
// assignor computes its assignment, and the answer makes it a follower
// (no leader runs an assignment) at its member epoch as the generation.
func (c *Coordinator) cgClassicJoin(g *group, client Client, req *kmsg.JoinGroupRequest, session, rebalance time.Duration, reply func(*kmsg.JoinGroupResponse)) {
	cg := g.cg
	if c.cfg.MigrationPolicy == MigrationDisabled || req.ProtocolType != "consumer" || len(req.Protocols) == 0 {
		reply(joinError(req, kerr.InconsistentGroupProtocol.Code))
		return
	}
	protos := make([]protocol, 0, len(req.Protocols))
	for _, p := range req.Protocols {
		protos = append(protos, protocol{name: p.Name, metadata: p.Metadata})
	}
	if !cg.classicSupports(protos, req.MemberID) {
		reply(joinError(req, kerr.InconsistentGroupProtocol.Code))
		return
	}
	var sub kmsg.ConsumerMemberMetadata
	if err := sub.ReadFrom(protos[0].metadata); err != nil {
		reply(joinError(req, kerr.InconsistentGroupProtocol.Code))
		return
	}
	// The group's record keeps the member's protocols (base64 in JSON): a
	// join that would make it larger than a load accepts is refused, as
	// Kafka refuses a group record too large for its offsets topic.
	added := 0
	for _, p := range protos {
		added += len(p.name) + (len(p.metadata)+2)/3*4 + 32
	}
	if len(consumerValue(g))+added+512 > maxConsumerValueBytes {
		reply(joinError(req, kerr.UnknownServerError.Code))
		return
	}
	unknown := req.MemberID == ""
	id := req.MemberID
	if unknown {
		id = c.cfg.newMemberID(client.ClientID)
	}
	var m *cmember
	if inst := req.InstanceID; inst != nil {
		if cur, ok := cg.static[*inst]; ok {
			switch {
			case unknown:
				old := cg.members[cur]
				if c.cfg.MigrationPolicy.downgrade() && old.classic == nil && cg.onlyClassicBesides(old) {
					// The last consumer-protocol member is replaced by a
					// classic one (a rollback of static members): the group
					// turns classic and this join takes part in its
					// rebalance (Kafka's validateOnlineDowngradeWithReplacedMemberId).
					logErr := func(err error) {
						if err != nil {
							c.logger.Warn("group: writing the downgraded group failed", "group", g.id, "err", err)
						}
					}
					c.logger.Info("group: static member replaced by a classic member", "group", g.id, "member", old.id, "instance", *inst)
					if len(cg.members) == 1 {
						c.cgRemove(g, old) // an empty consumer group turns classic on the join below
						c.cgWrite(g, nil, logErr)
					} else {
						c.cgDowngrade(g, old, nil, logErr)
					}
					c.handleJoin(client, req, reply)
					return
				}
				// KIP-345 in a consumer group: the new member id takes the
				// old one's place, epoch and assignment.
				c.cgRename(g, old, id)
				if old.epoch == staticLeaveEpoch {
					old.epoch = old.prevEpoch
				}
				m = old
			case cur != id:
				reply(joinError(req, kerr.FencedInstanceID.Code))
				return
			default:
				m = cg.members[cur]
			}
		}
	} else if unknown && req.Version >= 4 {
		resp := joinError(req, kerr.MemberIDRequired.Code)
		resp.MemberID = id
		reply(resp)
		return
	}
	if m == nil {
		m = cg.members[id]
	}
	if m != nil && m.classic == nil && !unknown {
		reply(joinError(req, kerr.UnknownMemberID.Code)) // a consumer-protocol member's id
		return
	}
	bumped := false
	if m == nil {
		if c.cfg.MaxGroupSize > 0 && len(cg.members) >= c.cfg.MaxGroupSize {
			reply(joinError(req, kerr.GroupMaxSizeReached.Code))
			return
		}
		m = &cmember{id: id, assigned: make(map[topicPartition]int32), revoking: make(partSet)}
		cg.members[id] = m
		bumped = true
	}
	m.classic = &classicMember{sessionTimeout: session, protocols: protos}
	m.clientID, m.clientHost = client.ClientID, client.Host
	if req.InstanceID != nil {
		cg.setInstance(m, req.InstanceID)
	}
	if sub.Rack != nil {
		m.rackID = sub.Rack
	}
	m.rebalanceTimeout = rebalance
	if topics := sortedTopics(sub.Topics); !equalStrings(topics, m.topics) {
		m.topics = topics
		bumped = true
	}
	if m.regex != "" {
		m.regex, m.re = "", nil
		bumped = true
	}
	if !bumped && c.cgMetadataChanged(g) {
		bumped = true
	}
	if bumped {
		c.cgBump(g)
	}
	c.cgStopJoinDeadline(m)
	c.cgTouch(g, m)
	owned := make(partSet)
	for _, t := range sub.OwnedPartitions {
		for _, p := range t.Partitions {
			owned[topicPartition{t.Topic, p}] = struct{}{}
		}
	}
	c.cgReconcile(g, m, owned)
	// The answer is the state being written, built now (as Kafka builds
	// it with the records): a static replacement while the write is in
	// flight leaves this member its own id (its next request is fenced),
	// and a downgrade leaves it a member of the classic group, which its
	// next request joins.
	r := kmsg.NewPtrJoinGroupResponse()
	r.Version = req.Version
	r.MemberID = m.id
	r.Generation = m.epoch
	pt, pn := "consumer", m.classic.protocolName()
	r.ProtocolType, r.Protocol = &pt, &pn
	c.cgWrite(g, nil, func(err error) {
		if err != nil {
			reply(joinError(req, appendErrCode(err)))
			return
		}
		if g.cg == cg && cg.members[r.MemberID] == m {
			c.cgSyncDeadline(g, m)
		}
		reply(r)
	})
}

// cgClassicSync is a SyncGroup to a consumer group (Kafka's
// classicGroupSyncToConsumerGroup): the member gets the partitions it owns
// in the consumer group.
func (c *Coordinator) cgClassicSync(g *group, req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	cg := g.cg
	m, code := cg.classicMember(req.MemberID, req.InstanceID)
	switch {
	case code != 0:
		return syncError(req, code)
	case req.Generation != m.epoch:
		return syncError(req, kerr.IllegalGeneration.Code)
	case (req.ProtocolType != nil && *req.ProtocolType != "consumer") || (req.Protocol != nil && *req.Protocol != m.classic.protocolName()):
		return syncError(req, kerr.InconsistentGroupProtocol.Code)
	case cg.epoch > m.epoch && len(m.revoking) == 0:
		// A newer rebalance started since the member joined.
		c.cgJoinDeadline(g, m)
		return syncError(req, kerr.RebalanceInProgress.Code)
	}
	c.cgStopSyncDeadline(m)
	c.cgTouch(g, m)
	r := syncError(req, 0)
	pt, pn := "consumer", m.classic.protocolName()
	r.ProtocolType, r.Protocol = &pt, &pn
	r.MemberAssignment = encodeAssignment(m.classic.version(), m.assigned)
	return r
}

// cgClassicHeartbeat is a Heartbeat to a consumer group (Kafka's
// classicGroupHeartbeatToConsumerGroup): REBALANCE_IN_PROGRESS when the
// member must rejoin to move on.
func (c *Coordinator) cgClassicHeartbeat(g *group, req *kmsg.HeartbeatRequest) int16 {
	cg := g.cg
	m, code := cg.classicMember(req.MemberID, req.InstanceID)
	if code != 0 {
		return code
	}
	if req.Generation != m.epoch {
		return kerr.IllegalGeneration.Code
	}
	c.cgTouch(g, m)
	if m.epoch < cg.epoch || len(m.revoking) > 0 || cg.releasedForClassic(m) {
		c.cgJoinDeadline(g, m)
		return kerr.RebalanceInProgress.Code
	}
	return 0
}

// releasedForClassic reports whether m waits for partitions of its target
// and every one of them is free now, so a rejoin would get them.
func (cg *consumerGroup) releasedForClassic(m *cmember) bool {
	if m.epoch != cg.targetEpoch {
		return false
	}
	pending := false
	for tp := range cg.target[m.id] {
		if _, ok := m.assigned[tp]; ok {
			continue
		}
		if o, ok := cg.owner[tp]; ok && o != m.id {
			return false
		}
		pending = true
	}
	return pending
}

// cgClassicLeave is a LeaveGroup to a consumer group (Kafka's
// classicGroupLeaveToConsumerGroup); it answers once the group is written.
func (c *Coordinator) cgClassicLeave(g *group, req *kmsg.LeaveGroupRequest, leaving []kmsg.LeaveGroupRequestMember, reply func(*kmsg.LeaveGroupResponse)) {
	cg := g.cg
	members := make([]kmsg.LeaveGroupResponseMember, 0, len(leaving))
	removed := false
	for _, lm := range leaving {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID = lm.MemberID, lm.InstanceID
		var m *cmember
		if lm.InstanceID != nil {
			if id, ok := cg.static[*lm.InstanceID]; !ok {
				rm.ErrorCode = kerr.UnknownMemberID.Code
			} else if lm.MemberID != "" && lm.MemberID != id {
				rm.ErrorCode = kerr.FencedInstanceID.Code
			} else {
				m = cg.members[id]
			}
		} else {
			m = cg.members[lm.MemberID]
		}
		if rm.ErrorCode == 0 && (m == nil || m.classic == nil) {
			rm.ErrorCode = kerr.UnknownMemberID.Code
		}
		if rm.ErrorCode == 0 {
			c.logger.Info("group: classic member left a consumer group", "group", g.id, "member", m.id)
			c.cgRemove(g, m)
			removed = true
		}
		members = append(members, rm)
	}
	if !removed {
		reply(leaveResponse(req, 0, members))
		return
	}
	c.cgWrite(g, nil, func(err error) {
		if err != nil {
			reply(leaveResponse(req, appendErrCode(err), nil))
			return
		}
		reply(leaveResponse(req, 0, members))
	})
}

// cgJoinDeadline gives a classic member that was told to rejoin its
// rebalance timeout to do so, unless it already has one; then it is removed.
func (c *Coordinator) cgJoinDeadline(g *group, m *cmember) {
	if m.joinStop != nil {
		return
	}
	m.joinStop = c.cgDeadline(g, m, true, "did not rejoin within the rebalance timeout")
}

func (c *Coordinator) cgStopJoinDeadline(m *cmember) {
	if m.joinStop != nil {
		m.joinStop()
		m.joinStop = nil
	}
}

// cgSyncDeadline gives a classic member that joined its rebalance timeout
// to send SyncGroup.
func (c *Coordinator) cgSyncDeadline(g *group, m *cmember) {
	c.cgStopSyncDeadline(m)
	m.syncStop = c.cgDeadline(g, m, false, "did not sync within the rebalance timeout")
}

func (c *Coordinator) cgStopSyncDeadline(m *cmember) {
	if m.syncStop != nil {
		m.syncStop()
		m.syncStop = nil
	}
}

func (c *Coordinator) cgDeadline(g *group, m *cmember, join bool, why string) func() bool {
	seq := &m.syncSeq
	if join {
		seq = &m.joinSeq
	}
	*seq++
	want := *seq
	d := m.rebalanceTimeout
	if d <= 0 && m.classic != nil {
		d = m.classic.sessionTimeout
	}
	return c.after(d, func() {
		if g.cg == nil || g.cg.members[m.id] != m || *seq != want {
			return
		}
		if join {
			m.joinStop = nil
		} else {
			m.syncStop = nil
		}
		c.cgExpire(g, m, why)
	})
}
