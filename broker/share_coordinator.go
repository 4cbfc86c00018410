package broker

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// Share groups (KIP-932, "queues for Kafka"): the coordinator side.
//
// A share group's coordinator is the broker that coordinates a consumer group
// of the same id (the leader of its __consumer_offsets partition). It keeps
// the members, their subscriptions and the assignment in memory: a member
// heartbeats (ShareGroupHeartbeat), is told its partitions, and fetches them
// from their leaders (ShareFetch, share_partition.go), where the records'
// delivery state lives. Members of a share group may share a partition, so an
// assignment change needs no revocation: the group epoch grows and each
// member is given the new assignment on its next heartbeat. The assignor is
// Kafka's "simple" one in spirit: partitions (topic, then index order) are
// dealt to the members (id order) round-robin, and when there are more members
// than partitions each member gets partition i mod P, so that every partition
// has a consumer and the load spreads.
//
// If the coordinator moves (or restarts), the new one knows no member: each
// member's next heartbeat gets UNKNOWN_MEMBER_ID and it joins again with
// epoch 0. Nothing of the records' state is lost by this: that is on the
// partitions' leaders and in the metadata log.

const (
	shareSessionTimeoutDefault    = 45 * time.Second
	shareHeartbeatIntervalDefault = 5 * time.Second
	shareAssignorName             = "simple"
)

type shareMember struct {
	id         string
	epoch      int32
	rack       *string
	clientID   string
	clientHost string
	topics     []string // sorted
	lastSeen   time.Time
	assigned   map[[16]byte][]int32
}

type shareGroup struct {
	id      string
	epoch   int32
	members map[string]*shareMember
	// parts is what the assignment was computed from (topic → its id
	// and partition count), to notice new partitions and topics, and a
	// topic deleted and created again under its name.
	parts map[string]shareTopicShape
	// assignment by member, for the current epoch.
	assignment map[string]map[[16]byte][]int32
}

type shareCoordinator struct {
	b      *Broker
	mu     sync.Mutex
	groups map[string]*shareGroup
	// created holds the groups whose state this coordinator started (an
	// admin change of a group without state), with the load of their
	// partition it did so under: no member can be unknown to it (mayChange).
	created map[string]time.Time
}

func newShareCoordinator(b *Broker) *shareCoordinator {
	return &shareCoordinator{b: b, groups: map[string]*shareGroup{}, created: map[string]time.Time{}}
}

// coordinates reports whether this broker coordinates group now (it leads
// and has loaded the group's __consumer_offsets partition).
func (sc *shareCoordinator) coordinates(group string) bool {
	if sc.b.groups == nil {
		return false
	}
	sc.b.groups.ensure(group)
	return sc.b.groups.c.Loaded(sc.b.groups.partitionFor(group))
}

// forget drops the groups this broker no longer coordinates (called with
// mu held, lazily, on each request).
func (sc *shareCoordinator) forgetMoved() {
	for id := range sc.groups {
		if !sc.b.groups.c.Loaded(sc.b.groups.partitionFor(id)) {
			delete(sc.groups, id)
		}
	}
	for id := range sc.created {
		if !sc.b.groups.c.Loaded(sc.b.groups.partitionFor(id)) {
			delete(sc.created, id)
		}
	}
}

func (sc *shareCoordinator) sessionTimeout(group string) time.Duration {
	return sc.b.shareGroupDuration(group, cfgShareSessionTimeout)
}

func (sc *shareCoordinator) heartbeatInterval(group string) time.Duration {
	return sc.b.shareGroupDuration(group, cfgShareHeartbeatInterval)
}

func shareHBError(req *kmsg.ShareGroupHeartbeatRequest, code int16, msg string) *kmsg.ShareGroupHeartbeatResponse {
	r := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
	r.ErrorCode = code
	if code != 0 {
		if msg == "" {
			msg = kerr.ErrorForCode(code).Error()
		}
		r.ErrorMessage = &msg
	}
	return r
}

func (sc *shareCoordinator) heartbeat(req *kmsg.ShareGroupHeartbeatRequest, clientID, host string) *kmsg.ShareGroupHeartbeatResponse {
	switch {
	case req.GroupID == "":
		return shareHBError(req, kerr.InvalidRequest.Code, "GroupId can't be empty.")
	case req.MemberID == "":
		return shareHBError(req, kerr.InvalidRequest.Code, "MemberId can't be empty.")
	case req.MemberEpoch < -1:
		return shareHBError(req, kerr.InvalidRequest.Code, "MemberEpoch is invalid.")
	case req.MemberEpoch == 0 && len(req.SubscribedTopicNames) == 0:
		return shareHBError(req, kerr.InvalidRequest.Code, "SubscribedTopicNames must be set in first request.")
	}
	if !sc.coordinates(req.GroupID) {
		return shareHBError(req, kerr.NotCoordinator.Code, "")
	}
	st := sc.b.meta.State()
	now := time.Now()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.forgetMoved()
	g := sc.groups[req.GroupID]
	if g != nil {
		sc.expire(g, now)
	}
	if req.MemberEpoch == -1 {
		if g != nil && g.members[req.MemberID] != nil {
			delete(g.members, req.MemberID)
			sc.bump(st, g)
		}
		r := shareHBError(req, 0, "")
		r.MemberID, r.MemberEpoch = kmsg.StringPtr(req.MemberID), -1
		return r
	}
	if g == nil {
		if req.MemberEpoch != 0 {
			return shareHBError(req, kerr.UnknownMemberID.Code, "")
		}
		if sc.b.groups.c.Exists(req.GroupID) {
			return shareHBError(req, kerr.InconsistentGroupProtocol.Code, "group "+req.GroupID+" is not a share group")
		}
		g = &shareGroup{id: req.GroupID, members: map[string]*shareMember{}}
		sc.groups[g.id] = g
	}
	m := g.members[req.MemberID]
	changed := false
	switch {
	case req.MemberEpoch == 0:
		if m == nil {
			if max := sc.b.cfg.Groups.MaxGroupSize; max > 0 && len(g.members) >= max {
				return shareHBError(req, kerr.GroupMaxSizeReached.Code, "")
			}
			m = &shareMember{id: req.MemberID}
			g.members[m.id] = m
			changed = true
		}
		m.epoch = 0 // a rejoin is given the assignment again
	case m == nil:
		return shareHBError(req, kerr.UnknownMemberID.Code, "")
	case req.MemberEpoch != m.epoch:
		return shareHBError(req, kerr.FencedMemberEpoch.Code, "")
	}
	m.lastSeen, m.clientID, m.clientHost = now, clientID, host
	if req.RackID != nil {
		m.rack = req.RackID
	}
	if req.SubscribedTopicNames != nil {
		topics := slices.Clone(req.SubscribedTopicNames)
		sort.Strings(topics)
		topics = slices.Compact(topics)
		if !slices.Equal(topics, m.topics) {
			m.topics, changed = topics, true
		}
	}
	if changed || sc.partitionsChanged(st, g) {
		if err := sc.initGrown(st, g); err != nil {
			// Not assigned until their start is written: the members
			// keep their assignment, the next heartbeat tries again.
			sc.b.log.Warn("share group: the start of new partitions not written; not assigning them yet", "group", g.id, "err", err)
		} else {
			sc.bump(st, g)
		}
	}
	r := shareHBError(req, 0, "")
	r.MemberID = kmsg.StringPtr(m.id)
	r.HeartbeatIntervalMillis = int32(sc.heartbeatInterval(g.id).Milliseconds())
	if m.epoch != g.epoch {
		m.epoch = g.epoch
		m.assigned = g.assignment[m.id]
		a := &kmsg.ShareGroupHeartbeatResponseAssignment{}
		for _, id := range sortedTopicIDs(m.assigned) {
			tp := kmsg.NewShareGroupHeartbeatResponseAssignmentTopicPartition()
			tp.TopicID, tp.Partitions = id, slices.Clone(m.assigned[id])
			a.TopicPartitions = append(a.TopicPartitions, tp)
		}
		r.Assignment = a
	}
	r.MemberEpoch = m.epoch
	return r
}

func sortedTopicIDs(m map[[16]byte][]int32) [][16]byte {
	ids := make([][16]byte, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b [16]byte) int { return slices.Compare(a[:], b[:]) })
	return ids
}

// expire removes members whose session ran out (lazily, on the group's
// requests: the other members' heartbeats come at least every interval).
func (sc *shareCoordinator) expire(g *shareGroup, now time.Time) {
	timeout := sc.sessionTimeout(g.id)
	gone := false
	for id, m := range g.members {
		if now.Sub(m.lastSeen) > timeout {
			delete(g.members, id)
			gone = true
			sc.b.log.Info("share group member session expired", "group", g.id, "member", id)
		}
	}
	if gone {
		sc.bump(sc.b.meta.State(), g)
	}
}

type shareTopicShape struct {
	id metadata.UUID
	n  int
}

func (sc *shareCoordinator) subscribed(st *metadata.State, g *shareGroup) map[string]shareTopicShape {
	parts := map[string]shareTopicShape{}
	for _, m := range g.members {
		for _, t := range m.topics {
			if topic, ok := st.Topic(t); ok {
				parts[t] = shareTopicShape{topic.ID, len(topic.Partitions)}
			}
		}
	}
	return parts
}

func (sc *shareCoordinator) partitionsChanged(st *metadata.State, g *shareGroup) bool {
	now := sc.subscribed(st, g)
	if len(now) != len(g.parts) {
		return true
	}
	for t, n := range now {
		if g.parts[t] != n {
			return true
		}
	}
	return false
}

// initGrown writes the start of the partitions added to topics the group
// already consumes, before they are assigned: offset 0 (the log start), as
// Kafka does (KAFKA-20742), not share.auto.offset.reset, whose latest
// skipped every record produced to them before a member first fetched
// there (a share group review: 904 records of 2 000 never delivered). The
// partitions of a topic new to the group keep share.auto.offset.reset.
func (sc *shareCoordinator) initGrown(st *metadata.State, g *shareGroup) error {
	stored := st.ShareState(g.id)
	var ops []metadata.ConfigOp
	for t, now := range sc.subscribed(st, g) {
		was, ok := g.parts[t]
		if !ok || was.id != now.id {
			continue
		}
		for p := int32(was.n); p < int32(now.n); p++ {
			key := sharePartKey{group: g.id, topicID: [16]byte(now.id), part: p}.stateKey()
			if _, ok := stored[key]; !ok {
				ops = append(ops, metadata.ConfigOp{Key: key, Value: "0"})
			}
		}
	}
	if len(ops) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := sc.b.store.propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceShareState, ResourceName: g.id, Ops: ops})
	return err
}

// bump starts a new group epoch with a new assignment.
func (sc *shareCoordinator) bump(st *metadata.State, g *shareGroup) {
	g.epoch++
	g.parts = sc.subscribed(st, g)
	g.assignment = map[string]map[[16]byte][]int32{}
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
		g.assignment[id] = map[[16]byte][]int32{}
	}
	sort.Strings(ids)
	topics := make([]string, 0, len(g.parts))
	for t := range g.parts {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		topic, _ := st.Topic(t)
		var subs []string // the members subscribed to t, in id order
		for _, id := range ids {
			if slices.Contains(g.members[id].topics, t) {
				subs = append(subs, id)
			}
		}
		n := g.parts[t].n
		if len(subs) == 0 || n == 0 {
			continue
		}
		give := func(id string, p int) {
			g.assignment[id][topic.ID] = append(g.assignment[id][topic.ID], int32(p))
		}
		if n >= len(subs) {
			for p := 0; p < n; p++ {
				give(subs[p%len(subs)], p)
			}
		} else {
			for i, id := range subs {
				give(id, i%n)
			}
		}
	}
}

// describe answers ShareGroupDescribe for the groups this broker
// coordinates.
func (sc *shareCoordinator) describe(req *kmsg.ShareGroupDescribeRequest) *kmsg.ShareGroupDescribeResponse {
	resp := req.ResponseKind().(*kmsg.ShareGroupDescribeResponse)
	st := sc.b.meta.State()
	now := time.Now()
	for _, id := range req.GroupIDs {
		rg := kmsg.NewShareGroupDescribeResponseGroup()
		rg.GroupID = id
		rg.AuthorizedOperations = -2147483648
		if !sc.coordinates(id) {
			rg.ErrorCode = kerr.NotCoordinator.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		sc.mu.Lock()
		g := sc.groups[id]
		if g != nil {
			sc.expire(g, now)
		}
		if g == nil && len(st.ShareState(id)) > 0 {
			// Known by its start offsets only (no member since this
			// broker became its coordinator).
			g = &shareGroup{id: id, members: map[string]*shareMember{}}
		}
		if g == nil {
			sc.mu.Unlock()
			rg.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "group " + id + " is not a share group"
			rg.ErrorMessage = &msg
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.GroupState = g.state()
		rg.GroupEpoch, rg.AssignmentEpoch, rg.Assignor = g.epoch, g.epoch, shareAssignorName
		for _, mid := range sortedMemberIDs(g.members) {
			m := g.members[mid]
			rm := kmsg.NewShareGroupDescribeResponseGroupMember()
			rm.MemberID, rm.RackID, rm.MemberEpoch, rm.ClientID, rm.ClientHost = m.id, m.rack, m.epoch, m.clientID, m.clientHost
			rm.SubscribedTopicNames = slices.Clone(m.topics)
			// The group's assignment for the member (what its next
			// heartbeat is given, if it does not have it yet).
			target := g.assignment[m.id]
			for _, tid := range sortedTopicIDs(target) {
				tp := kmsg.NewShareGroupDescribeResponseGroupMemberAssignmentTopicPartition()
				tp.TopicID, tp.Partitions = tid, slices.Clone(target[tid])
				if t, ok := st.TopicByID(metadata.UUID(tid)); ok {
					tp.Topic = t.Name
				}
				rm.Assignment.TopicPartitions = append(rm.Assignment.TopicPartitions, tp)
			}
			rg.Members = append(rg.Members, rm)
		}
		sc.mu.Unlock()
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (g *shareGroup) state() string {
	if len(g.members) == 0 {
		return "Empty"
	}
	return "Stable"
}

func sortedMemberIDs(m map[string]*shareMember) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// list adds this broker's share groups to a ListGroups answer, with v4's
// state filter and v5's type filter.
func (sc *shareCoordinator) list(req *kmsg.ListGroupsRequest, resp *kmsg.ListGroupsResponse) {
	if len(req.TypesFilter) > 0 && !slices.ContainsFunc(req.TypesFilter, func(t string) bool { return equalFoldASCII(t, "share") }) {
		return
	}
	now := time.Now()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.forgetMoved()
	ids := make([]string, 0, len(sc.groups))
	for id := range sc.groups {
		ids = append(ids, id)
	}
	// And the groups known by their start offsets only.
	for _, id := range sc.b.meta.State().ShareGroups() {
		if sc.groups[id] == nil && sc.b.groups.c.Loaded(sc.b.groups.partitionFor(id)) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		g := sc.groups[id]
		if g == nil {
			g = &shareGroup{id: id, members: map[string]*shareMember{}}
		}
		sc.expire(g, now)
		state := g.state()
		if len(req.StatesFilter) > 0 && !slices.ContainsFunc(req.StatesFilter, func(s string) bool { return equalFoldASCII(s, state) }) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = id, "share", state, "share"
		resp.Groups = append(resp.Groups, lg)
	}
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// isShareGroup reports whether group is a share group this broker
// coordinates (with members, or start offsets).
func (sc *shareCoordinator) isShareGroup(group string) bool {
	sc.mu.Lock()
	_, ok := sc.groups[group]
	sc.mu.Unlock()
	return ok || len(sc.b.meta.State().ShareState(group)) > 0
}

// emptyOrUnknown answers whether group may have its offsets changed or be
// deleted: 0, or NON_EMPTY_GROUP while it has members (expired members are
// removed first), or NOT_COORDINATOR.
func (sc *shareCoordinator) mayChange(group string) int16 {
	if !sc.coordinates(group) {
		return kerr.NotCoordinator.Code
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	now := time.Now()
	if g := sc.groups[group]; g != nil {
		sc.expire(g, now)
		if len(g.members) > 0 {
			return kerr.NonEmptyGroup.Code
		}
	}
	// Members live in this coordinator's memory only: one that took the
	// group over (a failover, a restart) knows none until they heartbeat
	// again, every heartbeat interval. Until three intervals have passed
	// (at most a session timeout) a group with state may still have
	// members: COORDINATOR_LOAD_IN_PROGRESS, which admin clients retry. Answered as empty, a DeleteGroups 2 s after a
	// failover wiped a group whose consumers were running, and they read
	// again from share.auto.offset.reset (a share group review: 1 971 of
	// 2 000 records accepted twice). Kafka keeps share groups' members in
	// __consumer_offsets.
	since, loaded := sc.b.groups.c.LoadedSince(sc.b.groups.partitionFor(group))
	if len(sc.b.meta.State().ShareState(group)) == 0 {
		if loaded {
			sc.created[group] = since
		}
		return 0
	}
	window := min(sc.sessionTimeout(group), 3*sc.heartbeatInterval(group))
	if loaded && now.Sub(since) < window && !sc.created[group].Equal(since) {
		return kerr.CoordinatorLoadInProgress.Code
	}
	return 0
}

// delete removes an empty share group: its members' record and its start
// offsets.
func (sc *shareCoordinator) delete(ctx context.Context, group string) int16 {
	if code := sc.mayChange(group); code != 0 {
		return code
	}
	if _, _, err := sc.b.store.propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceShareState, ResourceName: group, Replace: true}); err != nil {
		return errCode(err)
	}
	sc.mu.Lock()
	delete(sc.groups, group)
	delete(sc.created, group)
	sc.mu.Unlock()
	return 0
}

// checkAdmin is the group-level check of AlterShareGroupOffsets and
// DeleteShareGroupOffsets: an id that is not empty, not taken by a classic
// or consumer group, coordinated here, without members.
func (sc *shareCoordinator) checkAdmin(group string) int16 {
	if group == "" {
		return kerr.InvalidGroupID.Code
	}
	if code := sc.mayChange(group); code != 0 {
		return code
	}
	if sc.b.groups.c.Exists(group) {
		return kerr.GroupIDNotFound.Code // not a share group
	}
	return 0
}
