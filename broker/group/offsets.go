package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetCommit serves OffsetCommit v0-v10. v10 names topics by ID and needs
// Config.Topics. v0 and v1 are stored like v2 (Kafka kept v0 commits in
// ZooKeeper; the v1 per-partition timestamp is ignored).
func (c *Coordinator) OffsetCommit(ctx context.Context, req *kmsg.OffsetCommitRequest) (*kmsg.OffsetCommitResponse, error) {
	// Resolve names and check partitions outside the loop.
	names := make([]string, len(req.Topics))
	pre := make([][]int16, len(req.Topics))
	for i, t := range req.Topics {
		pre[i] = make([]int16, len(t.Partitions))
		var code int16
		name := t.Topic
		if req.Version >= 10 {
			if n, ok := c.topicName(t.TopicID); ok {
				name = n
			} else {
				code = kerr.UnknownTopicID.Code
			}
		}
		names[i] = name
		var parts int32 = -1
		if code == 0 && c.cfg.Topics != nil {
			if _, n, ok := c.cfg.Topics.Partitions(name); ok {
				parts = n
			} else {
				code = kerr.UnknownTopicOrPartition.Code
			}
		}
		for j, p := range t.Partitions {
			pre[i][j] = code
			if code == 0 && parts >= 0 && (p.Partition < 0 || p.Partition >= parts) {
				pre[i][j] = kerr.UnknownTopicOrPartition.Code
			}
		}
	}
	return submit(ctx, c, func(reply func(*kmsg.OffsetCommitResponse)) { c.handleCommit(req, names, pre, reply) })
}

func (c *Coordinator) topicName(id [16]byte) (string, bool) {
	if c.cfg.Topics == nil || id == [16]byte{} {
		return "", false
	}
	return c.cfg.Topics.Name(id)
}

func commitResponse(req *kmsg.OffsetCommitRequest, pre [][]int16, code int16) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	for i, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		rt.TopicID = t.TopicID
		for j, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = pre[i][j]
			if rp.ErrorCode == 0 {
				rp.ErrorCode = code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// validateCommit is the classic group's check of a commit (Kafka's
// ClassicGroup.validateOffsetCommit).
func (g *group) validateCommit(req *kmsg.OffsetCommitRequest) int16 {
	if g.state == stateDead {
		return kerr.CoordinatorNotAvailable.Code
	}
	if req.Generation < 0 && g.state == stateEmpty {
		return 0 // a simple (admin or manual-assignment) commit
	}
	if req.Generation >= 0 || req.MemberID != "" || req.InstanceID != nil {
		if code := g.validateMember(req.MemberID, req.InstanceID); code != 0 {
			return code
		}
		if req.Generation != g.generation {
			return kerr.IllegalGeneration.Code
		}
	} else if g.state != stateEmpty {
		return kerr.UnknownMemberID.Code
	}
	if g.state == stateCompletingRebalance {
		return kerr.RebalanceInProgress.Code
	}
	return 0
}

func (c *Coordinator) handleCommit(req *kmsg.OffsetCommitRequest, names []string, pre [][]int16, reply func(*kmsg.OffsetCommitResponse)) {
	p, g, code := c.lookup(req.Group)
	if code != 0 {
		reply(commitResponse(req, pre, code))
		return
	}
	if g == nil {
		if req.Generation >= 0 {
			if req.Version >= 9 {
				reply(commitResponse(req, pre, kerr.GroupIDNotFound.Code))
			} else {
				reply(commitResponse(req, pre, kerr.IllegalGeneration.Code))
			}
			return
		}
		g = c.newGroup(p, req.Group)
	}
	validate := func() int16 {
		if g.cg != nil {
			return g.cgValidateCommit(req, names, pre)
		}
		return g.validateCommit(req)
	}
	if code := validate(); code != 0 {
		c.logReject("OffsetCommit", req.Group, req.MemberID, req.InstanceID, req.Generation, code)
		reply(commitResponse(req, pre, code))
		c.maybeDropUnused(g)
		return
	}
	if m := g.members[req.MemberID]; m != nil {
		c.touch(g, m)
	}
	now := c.nowMs()
	expire := int64(-1)
	if req.Version >= 2 && req.Version <= 4 && req.RetentionTimeMillis >= 0 {
		expire = now + req.RetentionTimeMillis
	}
	resp := commitResponse(req, pre, 0)
	type write struct {
		tp  topicPartition
		off offset
	}
	var (
		writes  []write
		records []Record
	)
	for i, t := range req.Topics {
		for j, rp := range t.Partitions {
			if pre[i][j] != 0 {
				continue
			}
			md := ""
			if rp.Metadata != nil {
				md = *rp.Metadata
			}
			if len(md) > c.cfg.MaxMetadataBytes {
				resp.Topics[i].Partitions[j].ErrorCode = kerr.OffsetMetadataTooLarge.Code
				continue
			}
			leaderEpoch := rp.LeaderEpoch
			if req.Version < 6 {
				leaderEpoch = -1
			}
			w := write{
				tp:  topicPartition{names[i], rp.Partition},
				off: offset{offset: rp.Offset, leaderEpoch: leaderEpoch, metadata: md, commitTime: now, expireTime: expire},
			}
			writes = append(writes, w)
			records = append(records, Record{Key: offsetKey(g.id, w.tp.topic, w.tp.partition), Value: offsetValue(w.off)})
		}
	}
	if len(records) == 0 {
		reply(resp)
		c.maybeDropUnused(g)
		return
	}
	for _, w := range writes {
		g.pendingCommits[w.tp]++
	}
	c.appendRecords(p, records, func(err error) {
		for _, w := range writes {
			if g.pendingCommits[w.tp]--; g.pendingCommits[w.tp] <= 0 {
				delete(g.pendingCommits, w.tp)
			}
		}
		if err != nil {
			code := appendErrCode(err)
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					if pre[i][j] == 0 && resp.Topics[i].Partitions[j].ErrorCode == 0 {
						resp.Topics[i].Partitions[j].ErrorCode = code
					}
				}
			}
			reply(resp)
			c.maybeDropUnused(g)
			return
		}
		// The records are in the log: memory follows, even if the group
		// was deleted meanwhile (a replay would bring the offsets back).
		target := g
		if p.groups[g.id] != g {
			if target = p.groups[g.id]; target == nil {
				target = c.newGroup(p, g.id)
			}
		}
		for _, w := range writes {
			target.offsets[w.tp] = w.off
		}
		reply(resp)
	})
}

// OffsetFetch serves OffsetFetch v0-v10, batched groups from v8. A group or
// partition with no commit answers offset -1 and no error. v10 names topics
// by ID and needs Config.Topics.
func (c *Coordinator) OffsetFetch(ctx context.Context, req *kmsg.OffsetFetchRequest) (*kmsg.OffsetFetchResponse, error) {
	var groups []fetchGroup
	if req.Version >= 8 {
		for _, rg := range req.Groups {
			fg := fetchGroup{group: rg.Group, all: rg.Topics == nil}
			if req.Version >= 9 {
				fg.member, fg.memberID, fg.memberEpoch = true, rg.MemberID, rg.MemberEpoch
			}
			for _, t := range rg.Topics {
				ft := fetchTopic{name: t.Topic, id: t.TopicID, partitions: t.Partitions}
				if req.Version >= 10 {
					if n, ok := c.topicName(t.TopicID); ok {
						ft.name = n
					} else {
						ft.unknownID = true
					}
				}
				fg.topics = append(fg.topics, ft)
			}
			groups = append(groups, fg)
		}
	} else {
		fg := fetchGroup{group: req.Group, all: req.Topics == nil && req.Version >= 2}
		for _, t := range req.Topics {
			fg.topics = append(fg.topics, fetchTopic{name: t.Topic, partitions: t.Partitions})
		}
		groups = append(groups, fg)
	}
	results, err := submit(ctx, c, func(reply func([]fetchResult)) {
		out := make([]fetchResult, len(groups))
		for i := range groups {
			out[i] = c.fetchOffsets(groups[i], req.RequireStable)
		}
		reply(out)
	})
	if err != nil {
		return nil, err
	}
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	if req.Version >= 8 {
		for _, r := range results {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group = r.group
			rg.ErrorCode = r.code
			if r.code != 0 {
				r.topics = nil // Kafka answers a failed group with no topics
			}
			for _, t := range r.topics {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = t.name
				rt.TopicID = t.id
				if req.Version >= 10 && t.id == ([16]byte{}) && c.cfg.Topics != nil {
					if id, _, ok := c.cfg.Topics.Partitions(t.name); ok {
						rt.TopicID = id
					}
				}
				for _, p := range t.partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.partition, p.offset, p.leaderEpoch, strPtr(p.metadata), p.code
					rt.Partitions = append(rt.Partitions, rp)
				}
				rg.Topics = append(rg.Topics, rt)
			}
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil
	}
	r := results[0]
	if req.Version >= 2 {
		resp.ErrorCode = r.code
		if r.code != 0 {
			r.topics = nil // v2+: the top-level error alone, as Kafka does
		}
	}
	for _, t := range r.topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.name
		for _, p := range t.partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.partition, p.offset, p.leaderEpoch, strPtr(p.metadata), p.code
			if req.Version < 2 && r.code != 0 {
				rp.ErrorCode = r.code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func strPtr(s string) *string { return &s }

type fetchGroup struct {
	group  string
	all    bool
	topics []fetchTopic
	// member is set for v9+, which names the fetching member (memberID
	// nil and memberEpoch -1: an admin client or a consumer outside group
	// management).
	member      bool
	memberID    *string
	memberEpoch int32
}

type fetchTopic struct {
	name       string
	id         [16]byte
	unknownID  bool
	partitions []int32
}

type fetchResult struct {
	group  string
	code   int16
	topics []fetchTopicResult
}

type fetchTopicResult struct {
	name       string
	id         [16]byte
	partitions []fetchPartitionResult
}

type fetchPartitionResult struct {
	partition   int32
	offset      int64
	leaderEpoch int32
	metadata    string
	code        int16
}

func (c *Coordinator) fetchOffsets(fg fetchGroup, requireStable bool) fetchResult {
	res := fetchResult{group: fg.group}
	_, g, code := c.lookup(fg.group)
	if code != 0 {
		res.code = code
		// v0-v1 carry the error per partition: keep the partitions.
		for _, t := range fg.topics {
			tr := fetchTopicResult{name: t.name, id: t.id}
			for _, p := range t.partitions {
				tr.partitions = append(tr.partitions, fetchPartitionResult{partition: p, offset: -1, leaderEpoch: -1})
			}
			res.topics = append(res.topics, tr)
		}
		return res
	}
	if fg.member && g != nil && g.cg != nil {
		if code := g.cgValidateFetch(fg.memberID, fg.memberEpoch); code != 0 {
			res.code = code
			return res
		}
	}
	one := func(tp topicPartition) fetchPartitionResult {
		r := fetchPartitionResult{partition: tp.partition, offset: -1, leaderEpoch: -1}
		if g == nil {
			return r
		}
		if requireStable && g.pendingCommits[tp] > 0 {
			r.code = kerr.UnstableOffsetCommit.Code
			return r
		}
		if o, ok := g.offsets[tp]; ok {
			r.offset, r.leaderEpoch, r.metadata = o.offset, o.leaderEpoch, o.metadata
		}
		return r
	}
	if fg.all {
		if g == nil {
			return res
		}
		byTopic := make(map[string][]int32)
		var order []string
		for tp := range g.offsets {
			if _, ok := byTopic[tp.topic]; !ok {
				order = append(order, tp.topic)
			}
			byTopic[tp.topic] = append(byTopic[tp.topic], tp.partition)
		}
		sortStrings(order)
		for _, t := range order {
			parts := byTopic[t]
			sortInt32s(parts)
			tr := fetchTopicResult{name: t}
			for _, p := range parts {
				tr.partitions = append(tr.partitions, one(topicPartition{t, p}))
			}
			res.topics = append(res.topics, tr)
		}
		return res
	}
	for _, t := range fg.topics {
		tr := fetchTopicResult{name: t.name, id: t.id}
		for _, p := range t.partitions {
			if t.unknownID {
				tr.partitions = append(tr.partitions, fetchPartitionResult{partition: p, offset: -1, leaderEpoch: -1, code: kerr.UnknownTopicID.Code})
				continue
			}
			tr.partitions = append(tr.partitions, one(topicPartition{t.name, p}))
		}
		res.topics = append(res.topics, tr)
	}
	return res
}

// OffsetDelete serves OffsetDelete v0: an empty group's offsets go; a
// consumer group's offsets of topics it still subscribes to stay
// (GROUP_SUBSCRIBED_TO_TOPIC).
func (c *Coordinator) OffsetDelete(ctx context.Context, req *kmsg.OffsetDeleteRequest) (*kmsg.OffsetDeleteResponse, error) {
	return submit(ctx, c, func(reply func(*kmsg.OffsetDeleteResponse)) { c.handleOffsetDelete(req, reply) })
}

func (c *Coordinator) handleOffsetDelete(req *kmsg.OffsetDeleteRequest, reply func(*kmsg.OffsetDeleteResponse)) {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	fail := func(code int16) {
		resp.ErrorCode = code
		reply(resp)
	}
	if req.Group == "" {
		fail(kerr.InvalidGroupID.Code)
		return
	}
	p, g, code := c.lookup(req.Group)
	if code != 0 {
		fail(code)
		return
	}
	if g == nil || g.state == stateDead {
		fail(kerr.GroupIDNotFound.Code)
		return
	}
	if g.state != stateEmpty && g.protocolType != "consumer" {
		fail(kerr.NonEmptyGroup.Code)
		return
	}
	var records []Record
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		subscribed := g.state != stateEmpty && g.isSubscribed(t.Topic)
		for _, pp := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = pp.Partition
			tp := topicPartition{t.Topic, pp.Partition}
			if subscribed {
				rp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			} else if _, ok := g.offsets[tp]; ok {
				delete(g.offsets, tp)
				records = append(records, Record{Key: offsetKey(g.id, tp.topic, tp.partition)})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(records) == 0 {
		reply(resp)
		return
	}
	c.appendRecords(p, records, func(err error) {
		if err != nil {
			resp.ErrorCode = appendErrCode(err)
		}
		reply(resp)
	})
}

// expireOffsetsTick is the offsets.retention.check.interval.ms task:
// offsets of groups empty past offsets.retention.minutes (and of simple
// groups, by commit time) are tombstoned; a group left with nothing dies.
func (c *Coordinator) expireOffsetsTick() {
	c.expireOffsets()
	c.expiryStop = c.after(c.cfg.RetentionCheckInterval, c.expireOffsetsTick)
}

func (c *Coordinator) expireOffsets() {
	now := c.nowMs()
	retention := c.cfg.OffsetsRetention.Milliseconds()
	for _, p := range c.partitions {
		if p.loading {
			continue
		}
		var gids []string
		for gid := range p.groups {
			gids = append(gids, gid)
		}
		sortStrings(gids)
		for _, gid := range gids {
			g := p.groups[gid]
			var records []Record
			expired := func(o offset, base int64) bool {
				if o.expireTime >= 0 {
					return now >= o.expireTime
				}
				return now-base >= retention
			}
			for _, tp := range g.sortedOffsets() {
				o := g.offsets[tp]
				if g.pendingCommits[tp] > 0 {
					continue
				}
				var dead bool
				switch {
				case g.cg != nil:
					// A consumer group: an offset of a topic no member
					// subscribes to expires by its commit time (Kafka's
					// ConsumerGroup.offsetExpirationCondition), whether
					// or not the group has members.
					dead = !g.cg.subscribes(tp.topic) && expired(o, o.commitTime)
				case g.protocolType != "" && g.state == stateEmpty:
					base := g.stateTime
					if base < 0 {
						base = o.commitTime
					}
					dead = expired(o, base)
				case g.protocolType == "consumer" && g.subscribed != nil && g.state == stateStable:
					dead = !g.isSubscribed(tp.topic) && expired(o, o.commitTime)
				case g.protocolType == "":
					dead = expired(o, o.commitTime)
				}
				if dead {
					delete(g.offsets, tp)
					records = append(records, Record{Key: offsetKey(g.id, tp.topic, tp.partition)})
				}
			}
			if g.state == stateEmpty && len(g.offsets) == 0 && len(g.pendingCommits) == 0 && len(g.pending) == 0 {
				delete(p.groups, g.id)
				g.state = stateDead
				records = append(records, Record{Key: groupKey(g.id)})
				if g.cg != nil {
					records = append(records, Record{Key: consumerKey(g.id)})
				}
			}
			if len(records) > 0 {
				gid := g.id
				c.appendRecords(p, records, func(err error) {
					if err != nil {
						c.logger.Warn("group: writing expired offsets failed", "group", gid, "err", err)
					}
				})
			}
		}
	}
}

// TopicsDeleted removes every committed offset of the named topics from
// the groups of the loaded partitions and writes their tombstones (Kafka's
// onPartitionsDeleted): a topic created again under the same name starts
// with no committed offsets, so a group reads it by its auto.offset.reset
// and does not skip records at the old topic's offsets. Partitions being
// loaded are skipped; the broker calls it on every metadata change that
// deletes a topic.
func (c *Coordinator) TopicsDeleted(names []string) {
	if len(names) == 0 {
		return
	}
	deleted := make(map[string]bool, len(names))
	for _, n := range names {
		deleted[n] = true
	}
	c.inLoop(func() {
		for _, p := range c.partitions {
			if p.loading {
				continue
			}
			var records []Record
			gids := make([]string, 0, len(p.groups))
			for gid := range p.groups {
				gids = append(gids, gid)
			}
			sortStrings(gids)
			for _, gid := range gids {
				g := p.groups[gid]
				for _, tp := range g.sortedOffsets() {
					if deleted[tp.topic] {
						delete(g.offsets, tp)
						records = append(records, Record{Key: offsetKey(g.id, tp.topic, tp.partition)})
					}
				}
			}
			if len(records) == 0 {
				continue
			}
			n, pid := len(records), p.id
			c.appendRecords(p, records, func(err error) {
				if err != nil {
					c.logger.Warn("group: writing the deletion of a deleted topic's offsets failed", "partition", pid, "offsets", n, "err", err)
					return
				}
				c.logger.Info("group: offsets of deleted topics removed", "partition", pid, "offsets", n)
			})
		}
	})
}
