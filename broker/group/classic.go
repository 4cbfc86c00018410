package group

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// JoinGroup serves JoinGroup v0-v9. It returns when the rebalance the join
// takes part in completes (or at once, for an error or MEMBER_ID_REQUIRED).
func (c *Coordinator) JoinGroup(ctx context.Context, client Client, req *kmsg.JoinGroupRequest) (*kmsg.JoinGroupResponse, error) {
	return submit(ctx, c, func(reply func(*kmsg.JoinGroupResponse)) { c.handleJoin(client, req, reply) })
}

// SyncGroup serves SyncGroup v0-v5. A follower waits until the leader's
// assignment is written.
func (c *Coordinator) SyncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) (*kmsg.SyncGroupResponse, error) {
	return submit(ctx, c, func(reply func(*kmsg.SyncGroupResponse)) { c.handleSync(req, reply) })
}

// Heartbeat serves Heartbeat v0-v4.
func (c *Coordinator) Heartbeat(ctx context.Context, req *kmsg.HeartbeatRequest) (*kmsg.HeartbeatResponse, error) {
	return submit(ctx, c, func(reply func(*kmsg.HeartbeatResponse)) { reply(c.handleHeartbeat(req)) })
}

// LeaveGroup serves LeaveGroup v0-v5 (batched members from v3).
func (c *Coordinator) LeaveGroup(ctx context.Context, req *kmsg.LeaveGroupRequest) (*kmsg.LeaveGroupResponse, error) {
	return submit(ctx, c, func(reply func(*kmsg.LeaveGroupResponse)) { c.handleLeave(req, reply) })
}

// rejectLevel is logReject's level.
const rejectLevel = slog.LevelDebug

func joinError(req *kmsg.JoinGroupRequest, code int16) *kmsg.JoinGroupResponse {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.ErrorCode = code
	resp.Generation = -1
	resp.MemberID = req.MemberID
	return resp
}

func (c *Coordinator) handleJoin(client Client, req *kmsg.JoinGroupRequest, reply0 func(*kmsg.JoinGroupResponse)) {
	reply := func(r *kmsg.JoinGroupResponse) {
		c.logReject("JoinGroup", req.Group, req.MemberID, req.InstanceID, -1, r.ErrorCode)
		reply0(r)
	}
	if req.Group == "" {
		reply(joinError(req, kerr.InvalidGroupID.Code))
		return
	}
	p, g, code := c.lookup(req.Group)
	if code != 0 {
		reply(joinError(req, code))
		return
	}
	session := ms(req.SessionTimeoutMillis)
	rebalance := ms(req.RebalanceTimeoutMillis)
	if req.Version == 0 || rebalance <= 0 {
		rebalance = session
	}
	if session < c.cfg.MinSessionTimeout || session > c.cfg.MaxSessionTimeout {
		reply(joinError(req, kerr.InvalidSessionTimeout.Code))
		return
	}
	if g == nil {
		if req.MemberID != "" {
			reply(joinError(req, kerr.UnknownMemberID.Code))
			return
		}
		g = c.newGroup(p, req.Group)
	}
	if g.state == stateDead {
		reply(joinError(req, kerr.CoordinatorNotAvailable.Code))
		return
	}
	if g.cg != nil {
		if len(g.cg.members) > 0 {
			// A classic member in a consumer group (migration.go).
			c.cgClassicJoin(g, client, req, session, rebalance, reply)
			return
		}
		// An empty consumer (KIP-848) group turns classic.
		c.appendRecords(p, []Record{{Key: consumerKey(g.id)}}, func(error) {})
		g.cg = nil
		g.protocolType, g.subscribed = "", nil
	}
	protos := make([]protocol, 0, len(req.Protocols))
	for _, p := range req.Protocols {
		protos = append(protos, protocol{name: p.Name, metadata: p.Metadata})
	}
	if !g.supportsProtocols(req.ProtocolType, protos) {
		reply(joinError(req, kerr.InconsistentGroupProtocol.Code))
		c.maybeDropUnused(g)
		return
	}
	j := joinArgs{
		client: client, req: req, reply: reply, session: session, rebalance: rebalance, protos: protos,
	}
	if req.MemberID == "" {
		c.joinUnknown(g, j)
	} else {
		c.joinKnown(g, j)
	}
}

type joinArgs struct {
	client    Client
	req       *kmsg.JoinGroupRequest
	reply     func(*kmsg.JoinGroupResponse)
	session   time.Duration
	rebalance time.Duration
	protos    []protocol
}

func (g *group) full(max int) bool { return max > 0 && len(g.members) >= max }

func (c *Coordinator) joinUnknown(g *group, j joinArgs) {
	newID := c.cfg.newMemberID(j.client.ClientID)
	if inst := j.req.InstanceID; inst != nil {
		if oldID, ok := g.static[*inst]; ok {
			c.staticRejoin(g, oldID, newID, j)
			return
		}
		if g.full(c.cfg.MaxGroupSize) {
			j.reply(joinError(j.req, kerr.GroupMaxSizeReached.Code))
			return
		}
		c.addMemberAndRebalance(g, newID, j)
		return
	}
	if g.full(c.cfg.MaxGroupSize) {
		j.reply(joinError(j.req, kerr.GroupMaxSizeReached.Code))
		c.maybeDropUnused(g)
		return
	}
	if j.req.Version >= 4 {
		// KIP-394: hand out an id and expect the member to rejoin with it
		// within the session timeout.
		pm := &pendingMember{}
		pm.stop = c.after(j.session, func() {
			if g.pending[newID] != pm {
				return
			}
			delete(g.pending, newID)
			c.tryCompleteJoin(g)
			c.maybeDropUnused(g)
		})
		g.pending[newID] = pm
		resp := joinError(j.req, kerr.MemberIDRequired.Code)
		resp.MemberID = newID
		j.reply(resp)
		return
	}
	c.addMemberAndRebalance(g, newID, j)
}

func (c *Coordinator) joinKnown(g *group, j joinArgs) {
	id := j.req.MemberID
	if pm, ok := g.pending[id]; ok {
		if inst := j.req.InstanceID; inst != nil {
			if cur, ok := g.static[*inst]; ok && cur != id {
				j.reply(joinError(j.req, kerr.FencedInstanceID.Code))
				return
			}
		}
		pm.stop()
		delete(g.pending, id)
		if g.full(c.cfg.MaxGroupSize) {
			j.reply(joinError(j.req, kerr.GroupMaxSizeReached.Code))
			c.tryCompleteJoin(g) // the rebalance no longer waits for this id
			c.maybeDropUnused(g)
			return
		}
		c.addMemberAndRebalance(g, id, j)
		return
	}
	if code := g.validateMember(id, j.req.InstanceID); code != 0 {
		j.reply(joinError(j.req, code))
		return
	}
	m := g.members[id]
	switch g.state {
	case statePreparingRebalance:
		c.updateMemberAndRebalance(g, m, j)
	case stateCompletingRebalance:
		if m.matches(j.protos) {
			// The member lost its JoinGroup response: send it again.
			c.touch(g, m)
			j.reply(c.joinResponse(g, m, j.req.Version, g.leader, false))
			return
		}
		c.updateMemberAndRebalance(g, m, j)
	case stateStable:
		if m.id == g.leader || !m.matches(j.protos) {
			c.updateMemberAndRebalance(g, m, j)
			return
		}
		c.touch(g, m)
		j.reply(c.joinResponse(g, m, j.req.Version, g.leader, false))
	default:
		j.reply(joinError(j.req, kerr.UnknownMemberID.Code))
	}
}

// joinResponse is the successful JoinGroup answer for m in the current
// generation; the leader gets every member's metadata.
func (c *Coordinator) joinResponse(g *group, m *member, version int16, leader string, skip bool) *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Version = version
	resp.Generation = g.generation
	pt, pn := g.protocolType, g.protocol
	resp.ProtocolType = &pt
	resp.Protocol = &pn
	resp.LeaderID = leader
	resp.MemberID = m.id
	resp.SkipAssignment = skip
	if m.id == leader {
		for _, id := range g.memberOrder() {
			o := g.members[id]
			rm := kmsg.NewJoinGroupResponseMember()
			rm.MemberID = o.id
			rm.InstanceID = o.instanceID
			rm.ProtocolMetadata = o.metadataFor(g.protocol)
			resp.Members = append(resp.Members, rm)
		}
	}
	return resp
}

func (c *Coordinator) setJoinReply(m *member, j joinArgs) {
	if m.joinReply != nil {
		// A newer join from the same member supersedes a waiting one.
		old := m.joinReply
		r := kmsg.NewPtrJoinGroupResponse()
		r.Version = m.joinVersion
		r.ErrorCode = kerr.RebalanceInProgress.Code
		r.Generation = -1
		r.MemberID = m.id
		old(r)
	}
	m.joinReply = j.reply
	m.joinVersion = j.req.Version
}

func (c *Coordinator) addMemberAndRebalance(g *group, id string, j joinArgs) {
	g.memberSeq++
	m := &member{
		id:               id,
		instanceID:       j.req.InstanceID,
		clientID:         j.client.ClientID,
		clientHost:       j.client.Host,
		sessionTimeout:   j.session,
		rebalanceTimeout: j.rebalance,
		protocolType:     j.req.ProtocolType,
		protocols:        j.protos,
		seq:              g.memberSeq,
		isNew:            true,
	}
	if len(g.members) == 0 {
		g.protocolType = j.req.ProtocolType
	}
	if g.state == statePreparingRebalance && g.generation == 0 {
		g.newMemberAdded = true
	}
	g.members[id] = m
	if m.instanceID != nil {
		g.static[*m.instanceID] = id
	}
	if g.leader == "" {
		g.leader = id
	}
	c.setJoinReply(m, j)
	c.touch(g, m)
	c.maybePrepareRebalance(g)
	c.tryCompleteJoin(g)
}

func (c *Coordinator) updateMemberAndRebalance(g *group, m *member, j joinArgs) {
	m.protocols = j.protos
	m.rebalanceTimeout = j.rebalance
	m.sessionTimeout = j.session
	m.clientID, m.clientHost = j.client.ClientID, j.client.Host
	c.setJoinReply(m, j)
	c.maybePrepareRebalance(g)
	c.tryCompleteJoin(g)
}

// staticRejoin is KIP-345: a static member joins again with no member id.
// It takes over the old member id's place; in a stable group whose protocol
// does not change, it gets the current generation without a rebalance.
func (c *Coordinator) staticRejoin(g *group, oldID, newID string, j joinArgs) {
	m := g.members[oldID]
	oldLeader := g.leader
	// The previous holder of the instance id is fenced.
	if m.joinReply != nil {
		r := joinError(&kmsg.JoinGroupRequest{Version: m.joinVersion, MemberID: oldID}, kerr.FencedInstanceID.Code)
		m.joinReply(r)
		m.joinReply = nil
	}
	if m.syncReply != nil {
		r := kmsg.NewPtrSyncGroupResponse()
		r.Version = m.syncVersion
		r.ErrorCode = kerr.FencedInstanceID.Code
		m.syncReply(r)
		m.syncReply = nil
	}
	c.renameMember(g, m, oldID, newID)
	old := *m
	m.protocols = j.protos
	m.rebalanceTimeout = j.rebalance
	m.sessionTimeout = j.session
	m.clientID, m.clientHost = j.client.ClientID, j.client.Host
	c.touch(g, m)

	switch g.state {
	case stateStable:
		if g.selectProtocol() != g.protocol {
			c.setJoinReply(m, j)
			c.maybePrepareRebalance(g)
			return
		}
		gen := g.generation
		value := groupValue(g, c.nowMs())
		c.appendRecords(g.part, []Record{{Key: groupKey(g.id), Value: value}}, func(err error) {
			if err != nil {
				if g.members[newID] == m && g.generation == gen {
					// Put the old member id back: the new one was never durable.
					m.protocols, m.rebalanceTimeout, m.sessionTimeout = old.protocols, old.rebalanceTimeout, old.sessionTimeout
					m.clientID, m.clientHost = old.clientID, old.clientHost
					c.renameMember(g, m, newID, oldID)
					c.touch(g, m)
				}
				r := joinError(j.req, appendErrCode(err))
				r.MemberID = ""
				j.reply(r)
				return
			}
			if g.members[newID] != m {
				j.reply(joinError(j.req, kerr.UnknownMemberID.Code))
				return
			}
			if j.req.Version >= 9 {
				// The leader learns it leads but skips the assignor.
				isLeader := g.leader == newID
				j.reply(c.joinResponse(g, m, j.req.Version, g.leader, isLeader))
				return
			}
			// Older clients get the old leader id so that a restarted
			// leader does not compute an assignment nobody would get.
			r := c.joinResponse(g, m, j.req.Version, oldLeader, false)
			r.Members = nil
			j.reply(r)
		})
	case stateCompletingRebalance:
		c.setJoinReply(m, j)
		c.maybePrepareRebalance(g)
	case statePreparingRebalance:
		c.setJoinReply(m, j)
		c.tryCompleteJoin(g)
	default:
		c.setJoinReply(m, j)
		c.maybePrepareRebalance(g)
		c.tryCompleteJoin(g)
	}
}

func (c *Coordinator) renameMember(g *group, m *member, from, to string) {
	delete(g.members, from)
	m.id = to
	g.members[to] = m
	if m.instanceID != nil {
		g.static[*m.instanceID] = to
	}
	if g.leader == from {
		g.leader = to
	}
	if _, ok := g.pendingSync[from]; ok {
		delete(g.pendingSync, from)
		g.pendingSync[to] = struct{}{}
	}
}

func (c *Coordinator) maybePrepareRebalance(g *group) {
	switch g.state {
	case stateStable, stateCompletingRebalance, stateEmpty:
		c.prepareRebalance(g)
	}
}

func (c *Coordinator) prepareRebalance(g *group) {
	if g.state == stateCompletingRebalance {
		c.failSyncs(g, kerr.RebalanceInProgress.Code)
	}
	c.stopSyncTimer(g)
	g.pendingSync = make(map[string]struct{})
	c.stopJoinTimer(g)
	wasEmpty := g.state == stateEmpty
	c.logger.Info("group: preparing to rebalance", "group", g.id, "state", g.state, "generation", g.generation, "members", len(g.members))
	c.transition(g, statePreparingRebalance)
	g.joinSeq++
	seq := g.joinSeq
	if wasEmpty && c.cfg.InitialRebalanceDelay > 0 {
		g.initialDelayActive = true
		g.newMemberAdded = false
		delay := c.cfg.InitialRebalanceDelay
		remaining := g.rebalanceTimeout() - delay
		if remaining < 0 {
			remaining = 0
		}
		c.scheduleInitialJoin(g, seq, delay, remaining)
		return
	}
	g.joinStop = c.after(g.rebalanceTimeout(), func() {
		if g.joinSeq == seq && g.state == statePreparingRebalance {
			c.completeJoin(g)
		}
	})
	c.tryCompleteJoin(g)
}

// scheduleInitialJoin is Kafka's InitialDelayedJoin: the first rebalance of
// an empty group waits group.initial.rebalance.delay.ms, and again as long
// as members keep arriving, up to the rebalance timeout.
func (c *Coordinator) scheduleInitialJoin(g *group, seq uint64, delay, remaining time.Duration) {
	g.joinStop = c.after(delay, func() {
		if g.joinSeq != seq || g.state != statePreparingRebalance {
			return
		}
		if g.newMemberAdded && remaining > 0 {
			g.newMemberAdded = false
			d := min(c.cfg.InitialRebalanceDelay, remaining)
			c.scheduleInitialJoin(g, seq, d, max(remaining-d, 0))
			return
		}
		g.initialDelayActive = false
		c.completeJoin(g)
	})
}

func (c *Coordinator) stopJoinTimer(g *group) {
	if g.joinStop != nil {
		g.joinStop()
		g.joinStop = nil
	}
	g.initialDelayActive = false
}

func (c *Coordinator) stopSyncTimer(g *group) {
	if g.syncStop != nil {
		g.syncStop()
		g.syncStop = nil
	}
}

func (c *Coordinator) tryCompleteJoin(g *group) {
	if g.state == statePreparingRebalance && !g.initialDelayActive && g.allJoined() {
		c.completeJoin(g)
	}
}

// completeJoin is Kafka's onCompleteJoin: dynamic members that did not
// rejoin are removed, the next generation starts, and every joined member
// gets its JoinGroup response.
func (c *Coordinator) completeJoin(g *group) {
	c.stopJoinTimer(g)
	for _, id := range g.memberOrder() {
		m := g.members[id]
		if m.joinReply == nil && m.instanceID == nil {
			c.removeMember(g, m, kerr.UnknownMemberID.Code)
		}
	}
	if g.state == stateDead {
		return
	}
	if len(g.members) > 0 && !g.electJoinedLeader() {
		// Nobody rejoined (only static members that did not come back):
		// wait another rebalance timeout.
		g.joinSeq++
		seq := g.joinSeq
		g.joinStop = c.after(g.rebalanceTimeout(), func() {
			if g.joinSeq == seq && g.state == statePreparingRebalance {
				c.completeJoin(g)
			}
		})
		return
	}
	g.generation++
	if len(g.members) == 0 {
		g.protocol = ""
		g.subscribed = nil
		c.transition(g, stateEmpty)
		gen := g.generation
		c.appendRecords(g.part, []Record{{Key: groupKey(g.id), Value: groupValue(g, c.nowMs())}}, func(err error) {
			switch {
			case isNotLeader(err):
				// A coordinator that lost its offsets partition (a pause,
				// a failover) expiring its members: the write is fenced,
				// and the new coordinator has the group.
				c.logger.Info("group: empty group metadata not written: no longer the coordinator", "group", g.id, "generation", gen, "err", err)
			case err != nil:
				c.logger.Warn("group: writing empty group metadata failed", "group", g.id, "generation", gen, "err", err)
			}
		})
		return
	}
	g.protocol = g.selectProtocol()
	g.computeSubscribed()
	c.transition(g, stateCompletingRebalance)
	c.logger.Info("group: join complete, waiting for the leader's assignment", "group", g.id, "generation", g.generation, "members", len(g.members), "leader", g.leader)
	for _, id := range g.memberOrder() {
		m := g.members[id]
		if m.joinReply != nil {
			r := c.joinResponse(g, m, m.joinVersion, g.leader, false)
			m.joinReply(r)
			m.joinReply = nil
		}
		m.isNew = false
		c.touch(g, m)
		g.pendingSync[id] = struct{}{}
	}
	gen := g.generation
	g.syncStop = c.after(g.rebalanceTimeout(), func() {
		if g.generation != gen || len(g.pendingSync) == 0 {
			return
		}
		if g.state != stateCompletingRebalance && g.state != stateStable {
			return
		}
		// Members that did not sync within the rebalance timeout are removed.
		for id := range g.pendingSync {
			if m := g.members[id]; m != nil {
				c.removeMember(g, m, kerr.UnknownMemberID.Code)
			}
		}
		c.prepareRebalance(g)
	})
}

func (g *group) electJoinedLeader() bool {
	if l := g.members[g.leader]; l != nil && l.joinReply != nil {
		return true
	}
	for _, id := range g.memberOrder() {
		if g.members[id].joinReply != nil {
			g.leader = id
			return true
		}
	}
	return false
}

// removeMember takes m out of the group, answering a waiting JoinGroup or
// SyncGroup with code. It does not start a rebalance.
func (c *Coordinator) removeMember(g *group, m *member, code int16) {
	if m.joinReply != nil {
		m.joinReply(joinError(&kmsg.JoinGroupRequest{Version: m.joinVersion, MemberID: m.id}, code))
		m.joinReply = nil
	}
	if m.syncReply != nil {
		r := kmsg.NewPtrSyncGroupResponse()
		r.Version = m.syncVersion
		r.ErrorCode = code
		m.syncReply(r)
		m.syncReply = nil
	}
	if m.hbStop != nil {
		m.hbStop()
		m.hbStop = nil
	}
	delete(g.members, m.id)
	delete(g.pendingSync, m.id)
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
	if g.leader == m.id {
		g.leader = ""
		if ids := g.memberOrder(); len(ids) > 0 {
			g.leader = ids[0]
		}
	}
}

// removeMemberAndUpdateGroup removes m and moves the group on: a rebalance
// if it was stable or completing, completion of the join if it was
// preparing one.
func (c *Coordinator) removeMemberAndUpdateGroup(g *group, m *member) {
	c.removeMember(g, m, kerr.UnknownMemberID.Code)
	switch g.state {
	case stateStable, stateCompletingRebalance:
		c.maybePrepareRebalance(g)
	case statePreparingRebalance:
		c.tryCompleteJoin(g)
	}
}

// touch records a sign of life from m and schedules its expiry: the session
// timeout, or for a new member waiting in its first join, Kafka's 5 minute
// new-member join timeout.
func (c *Coordinator) touch(g *group, m *member) {
	m.lastHeartbeat = c.now()
	c.scheduleExpiry(g, m, c.expiryDelay(m))
}

func (c *Coordinator) expiryDelay(m *member) time.Duration {
	if m.isNew && m.joinReply != nil {
		return newMemberJoinTimeout
	}
	return m.sessionTimeout
}

func (c *Coordinator) scheduleExpiry(g *group, m *member, d time.Duration) {
	if m.hbStop != nil {
		m.hbStop()
	}
	m.hbSeq++
	seq := m.hbSeq
	m.hbStop = c.after(d, func() {
		if g.members[m.id] != m || m.hbSeq != seq {
			return
		}
		m.hbStop = nil
		now := c.now()
		switch {
		case m.joinReply != nil && !m.isNew:
			return // waiting in JoinGroup: the rebalance timeout decides
		case m.joinReply != nil:
			if left := m.lastHeartbeat.Add(newMemberJoinTimeout).Sub(now); left > 0 {
				c.scheduleExpiry(g, m, left)
				return
			}
		case m.syncReply != nil:
			return // waiting in SyncGroup: the sync timeout decides
		default:
			if left := m.lastHeartbeat.Add(m.sessionTimeout).Sub(now); left > 0 {
				c.scheduleExpiry(g, m, left)
				return
			}
		}
		c.logger.Info("group: member session expired", "group", g.id, "member", m.id)
		c.removeMemberAndUpdateGroup(g, m)
	})
}

// failSyncs answers every waiting SyncGroup with code. Each answered
// member's session starts again, as Kafka's propagateAssignment
// reschedules its heartbeat: an expiry that fired while it waited was
// ignored and scheduled nothing, so without this a static member whose
// client died there would never be removed.
func (c *Coordinator) failSyncs(g *group, code int16) {
	for _, id := range g.memberOrder() {
		m := g.members[id]
		if m.syncReply != nil {
			r := kmsg.NewPtrSyncGroupResponse()
			r.Version = m.syncVersion
			r.ErrorCode = code
			m.syncReply(r)
			m.syncReply = nil
			c.touch(g, m)
		}
	}
}

func syncError(req *kmsg.SyncGroupRequest, code int16) *kmsg.SyncGroupResponse {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	resp.ErrorCode = code
	return resp
}

func (c *Coordinator) handleSync(req *kmsg.SyncGroupRequest, reply0 func(*kmsg.SyncGroupResponse)) {
	reply := func(r *kmsg.SyncGroupResponse) {
		c.logReject("SyncGroup", req.Group, req.MemberID, req.InstanceID, req.Generation, r.ErrorCode)
		reply0(r)
	}
	if req.Group == "" {
		reply(syncError(req, kerr.InvalidGroupID.Code))
		return
	}
	_, g, code := c.lookup(req.Group)
	if code != 0 {
		reply(syncError(req, code))
		return
	}
	if g == nil {
		reply(syncError(req, kerr.UnknownMemberID.Code))
		return
	}
	if g.state == stateDead {
		reply(syncError(req, kerr.CoordinatorNotAvailable.Code))
		return
	}
	if g.cg != nil {
		reply(c.cgClassicSync(g, req))
		return
	}
	if code := g.validateMember(req.MemberID, req.InstanceID); code != 0 {
		reply(syncError(req, code))
		return
	}
	if req.Generation != g.generation {
		reply(syncError(req, kerr.IllegalGeneration.Code))
		return
	}
	if (req.ProtocolType != nil && *req.ProtocolType != g.protocolType) || (req.Protocol != nil && *req.Protocol != g.protocol) {
		reply(syncError(req, kerr.InconsistentGroupProtocol.Code))
		return
	}
	m := g.members[req.MemberID]
	switch g.state {
	case stateEmpty:
		reply(syncError(req, kerr.UnknownMemberID.Code))
	case statePreparingRebalance:
		reply(syncError(req, kerr.RebalanceInProgress.Code))
	case stateCompletingRebalance:
		if m.syncReply != nil {
			m.syncReply(syncError(&kmsg.SyncGroupRequest{Version: m.syncVersion}, kerr.RebalanceInProgress.Code))
		}
		m.syncReply = reply
		m.syncVersion = req.Version
		c.syncDone(g, m.id)
		c.touch(g, m)
		if m.id != g.leader {
			return
		}
		assignments := make(map[string][]byte, len(g.members))
		for _, a := range req.GroupAssignment {
			if _, ok := g.members[a.MemberID]; ok {
				assignments[a.MemberID] = a.MemberAssignment
			}
		}
		value := func() []byte {
			saved := make(map[string][]byte, len(g.members))
			for id, m := range g.members {
				saved[id] = m.assignment
				m.assignment = assignments[id]
			}
			defer func() {
				for id, m := range g.members {
					m.assignment = saved[id]
				}
			}()
			return groupValue(g, c.nowMs())
		}()
		gen := g.generation
		c.appendRecords(g.part, []Record{{Key: groupKey(g.id), Value: value}}, func(err error) {
			if g.state != stateCompletingRebalance || g.generation != gen {
				return
			}
			if err != nil {
				c.failSyncs(g, appendErrCode(err))
				c.maybePrepareRebalance(g)
				return
			}
			for id, m := range g.members {
				m.assignment = assignments[id]
			}
			c.transition(g, stateStable)
			c.logger.Info("group: stabilized", "group", g.id, "generation", g.generation, "members", len(g.members))
			for _, id := range g.memberOrder() {
				m := g.members[id]
				if m.syncReply != nil {
					m.syncReply(c.syncResponse(g, m, m.syncVersion))
					m.syncReply = nil
					c.touch(g, m)
				}
			}
		})
	case stateStable:
		c.syncDone(g, m.id)
		c.touch(g, m)
		reply(c.syncResponse(g, m, req.Version))
	}
}

func (c *Coordinator) syncDone(g *group, id string) {
	delete(g.pendingSync, id)
	if len(g.pendingSync) == 0 {
		c.stopSyncTimer(g)
	}
}

func (c *Coordinator) syncResponse(g *group, m *member, version int16) *kmsg.SyncGroupResponse {
	r := kmsg.NewPtrSyncGroupResponse()
	r.Version = version
	pt, pn := g.protocolType, g.protocol
	r.ProtocolType = &pt
	r.Protocol = &pn
	r.MemberAssignment = m.assignment
	if r.MemberAssignment == nil {
		r.MemberAssignment = []byte{}
	}
	return r
}

func (c *Coordinator) handleHeartbeat(req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	resp.ErrorCode = func() int16 {
		if req.Group == "" {
			return kerr.InvalidGroupID.Code
		}
		_, g, code := c.lookup(req.Group)
		if code != 0 {
			return code
		}
		if g == nil {
			return kerr.UnknownMemberID.Code
		}
		if g.state == stateDead {
			return kerr.CoordinatorNotAvailable.Code
		}
		if g.cg != nil {
			return c.cgClassicHeartbeat(g, req)
		}
		if code := g.validateMember(req.MemberID, req.InstanceID); code != 0 {
			return code
		}
		if req.Generation != g.generation {
			return kerr.IllegalGeneration.Code
		}
		m := g.members[req.MemberID]
		switch g.state {
		case stateEmpty:
			return kerr.UnknownMemberID.Code
		case statePreparingRebalance:
			c.touch(g, m)
			return kerr.RebalanceInProgress.Code
		default:
			c.touch(g, m)
			return 0
		}
	}()
	c.logReject("Heartbeat", req.Group, req.MemberID, req.InstanceID, req.Generation, resp.ErrorCode)
	return resp
}

// logReject logs, at debug, a member request refused for its member id or
// generation, with the group's state as this coordinator sees it.
func (c *Coordinator) logReject(api, groupID, memberID string, instanceID *string, gen int32, code int16) {
	switch code {
	case kerr.IllegalGeneration.Code, kerr.UnknownMemberID.Code, kerr.FencedInstanceID.Code:
	default:
		return
	}
	if !c.logger.Enabled(context.Background(), rejectLevel) {
		return
	}
	attrs := []any{"api", api, "group", groupID, "member", memberID, "request_generation", gen, "err", kerr.ErrorForCode(code)}
	if instanceID != nil {
		attrs = append(attrs, "instance", *instanceID)
	}
	if p := c.partitions[c.PartitionFor(groupID)]; p != nil && !p.loading {
		if g := p.groups[groupID]; g != nil {
			attrs = append(attrs, "state", g.state, "generation", g.generation, "members", len(g.members))
		}
	}
	c.logger.Log(context.Background(), rejectLevel, "group: request refused", attrs...)
}

func (c *Coordinator) handleLeave(req *kmsg.LeaveGroupRequest, reply func(*kmsg.LeaveGroupResponse)) {
	leaving := req.Members
	if req.Version < 3 {
		leaving = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	if req.Group == "" {
		reply(leaveResponse(req, kerr.InvalidGroupID.Code, nil))
		return
	}
	_, g, code := c.lookup(req.Group)
	if code != 0 {
		reply(leaveResponse(req, code, nil))
		return
	}
	if g != nil && g.state == stateDead {
		reply(leaveResponse(req, kerr.CoordinatorNotAvailable.Code, nil))
		return
	}
	if g != nil && g.cg != nil {
		c.cgClassicLeave(g, req, leaving, reply) // migration.go
		return
	}
	var members []kmsg.LeaveGroupResponseMember
	for _, lm := range leaving {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID = lm.MemberID
		rm.InstanceID = lm.InstanceID
		if g == nil {
			rm.ErrorCode = kerr.UnknownMemberID.Code
		} else {
			rm.ErrorCode = c.leaveOne(g, lm)
		}
		members = append(members, rm)
	}
	reply(leaveResponse(req, 0, members))
}

// leaveResponse is the LeaveGroup answer: before v3 one error code (the
// group's, else the one member's), from v3 the group's code and, when it
// is zero, a code per member.
func leaveResponse(req *kmsg.LeaveGroupRequest, top int16, members []kmsg.LeaveGroupResponseMember) *kmsg.LeaveGroupResponse {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	if req.Version < 3 {
		resp.ErrorCode = top
		if top == 0 && len(members) > 0 {
			resp.ErrorCode = members[0].ErrorCode
		}
		return resp
	}
	resp.ErrorCode = top
	if top == 0 {
		resp.Members = members
	}
	return resp
}

func (c *Coordinator) leaveOne(g *group, lm kmsg.LeaveGroupRequestMember) int16 {
	if lm.InstanceID != nil {
		cur, ok := g.static[*lm.InstanceID]
		if !ok {
			return kerr.UnknownMemberID.Code
		}
		if lm.MemberID != "" && lm.MemberID != cur {
			return kerr.FencedInstanceID.Code
		}
		c.removeMemberAndUpdateGroup(g, g.members[cur])
		return 0
	}
	if pm, ok := g.pending[lm.MemberID]; ok {
		pm.stop()
		delete(g.pending, lm.MemberID)
		c.tryCompleteJoin(g)
		c.maybeDropUnused(g)
		return 0
	}
	m := g.members[lm.MemberID]
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	c.removeMemberAndUpdateGroup(g, m)
	return 0
}

// shutdownGroup stops a group's timers and answers its waiting requests
// with NOT_COORDINATOR (the partition moved or the coordinator closed).
func (c *Coordinator) shutdownGroup(g *group) {
	c.cgShutdown(g)
	c.stopJoinTimer(g)
	c.stopSyncTimer(g)
	for _, pm := range g.pending {
		pm.stop()
	}
	for _, id := range g.memberOrder() {
		m := g.members[id]
		if m.hbStop != nil {
			m.hbStop()
			m.hbStop = nil
		}
		if m.joinReply != nil {
			m.joinReply(joinError(&kmsg.JoinGroupRequest{Version: m.joinVersion, MemberID: m.id}, kerr.NotCoordinator.Code))
			m.joinReply = nil
		}
		if m.syncReply != nil {
			m.syncReply(syncError(&kmsg.SyncGroupRequest{Version: m.syncVersion}, kerr.NotCoordinator.Code))
			m.syncReply = nil
		}
	}
	g.state = stateDead
}
