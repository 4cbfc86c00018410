package group

import (
	"context"
	"math"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupOperations is the AuthorizedOperations bit set of a group with no
// ACLs: READ (3), DELETE (6), DESCRIBE (8).
const groupOperations = 1<<3 | 1<<6 | 1<<8

// DescribeGroups serves DescribeGroups v0-v6. A group that does not exist is
// Dead, with GROUP_ID_NOT_FOUND from v6 (Kafka 4.0).
func (c *Coordinator) DescribeGroups(ctx context.Context, req *kmsg.DescribeGroupsRequest) (*kmsg.DescribeGroupsResponse, error) {
	return submit(ctx, c, func(reply func(*kmsg.DescribeGroupsResponse)) {
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, id := range req.Groups {
			resp.Groups = append(resp.Groups, c.describe(id, req))
		}
		reply(resp)
	})
}

func (c *Coordinator) describe(id string, req *kmsg.DescribeGroupsRequest) kmsg.DescribeGroupsResponseGroup {
	d := kmsg.NewDescribeGroupsResponseGroup()
	d.Group = id
	// Authorized operations go only with a group answered without an
	// error, as Kafka's: a group not found carried every operation, READ
	// included, to a user allowed only to delete it (an admin review).
	d.AuthorizedOperations = math.MinInt32
	_, g, code := c.lookup(id)
	if code != 0 {
		d.ErrorCode = code
		return d
	}
	if req.IncludeAuthorizedOperations {
		d.AuthorizedOperations = groupOperations
	}
	if g == nil || g.state == stateDead || g.cg != nil {
		d.State = stateDead.String()
		if req.Version >= 6 {
			d.ErrorCode = kerr.GroupIDNotFound.Code
			d.AuthorizedOperations = math.MinInt32
			msg := "group " + id + " not found"
			if g != nil && g.cg != nil {
				msg = "group " + id + " is not a classic group"
			}
			d.ErrorMessage = &msg
		}
		return d
	}
	d.State = g.state.String()
	d.ProtocolType = g.protocolType
	stable := g.state == stateStable
	if stable {
		d.Protocol = g.protocol
	}
	for _, mid := range g.memberOrder() {
		m := g.members[mid]
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID = m.id
		dm.InstanceID = m.instanceID
		dm.ClientID = m.clientID
		dm.ClientHost = m.clientHost
		dm.ProtocolMetadata = []byte{}
		dm.MemberAssignment = []byte{}
		if stable {
			if md := m.metadataFor(g.protocol); md != nil {
				dm.ProtocolMetadata = md
			}
			if m.assignment != nil {
				dm.MemberAssignment = m.assignment
			}
		}
		d.Members = append(d.Members, dm)
	}
	return d
}

// ListGroups serves ListGroups v0-v5: every group of the loaded partitions,
// filtered by state (v4+, case-insensitive) and type (v5+; all groups here
// are "classic"). While a partition loads the answer carries
// COORDINATOR_LOAD_IN_PROGRESS, as Kafka's does.
func (c *Coordinator) ListGroups(ctx context.Context, req *kmsg.ListGroupsRequest) (*kmsg.ListGroupsResponse, error) {
	return submit(ctx, c, func(reply func(*kmsg.ListGroupsResponse)) {
		resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
		states := make(map[string]bool)
		for _, s := range req.StatesFilter {
			states[strings.ToLower(s)] = true
		}
		types := make(map[string]bool)
		for _, t := range req.TypesFilter {
			types[strings.ToLower(t)] = true
		}
		var ids []int32
		for id := range c.partitions {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, pid := range ids {
			p := c.partitions[pid]
			if p.loading {
				resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
				continue
			}
			var gids []string
			for gid := range p.groups {
				gids = append(gids, gid)
			}
			sortStrings(gids)
			for _, gid := range gids {
				g := p.groups[gid]
				if g.state == stateDead {
					continue
				}
				state, typ := g.state.String(), "classic"
				if g.cg != nil {
					state, typ = g.cg.state().String(), "consumer"
				}
				if len(states) > 0 && !states[strings.ToLower(state)] {
					continue
				}
				if len(types) > 0 && !types[typ] {
					continue
				}
				lg := kmsg.NewListGroupsResponseGroup()
				lg.Group = g.id
				lg.ProtocolType = g.protocolType
				lg.GroupState = state
				lg.GroupType = typ
				resp.Groups = append(resp.Groups, lg)
			}
		}
		reply(resp)
	})
}

// DeleteGroups serves DeleteGroups v0-v3: an empty group is deleted with its
// offsets (tombstones for the group and every offset); a group with members
// gets NON_EMPTY_GROUP.
func (c *Coordinator) DeleteGroups(ctx context.Context, req *kmsg.DeleteGroupsRequest) (*kmsg.DeleteGroupsResponse, error) {
	return submit(ctx, c, func(reply func(*kmsg.DeleteGroupsResponse)) {
		resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
		waiting := 1 // released after the loop below
		done := func() {
			if waiting--; waiting == 0 {
				reply(resp)
			}
		}
		for i, id := range req.Groups {
			rg := kmsg.NewDeleteGroupsResponseGroup()
			rg.Group = id
			resp.Groups = append(resp.Groups, rg)
			p, g, code := c.lookup(id)
			switch {
			case code != 0:
				resp.Groups[i].ErrorCode = code
				continue
			case g == nil || g.state == stateDead:
				resp.Groups[i].ErrorCode = kerr.GroupIDNotFound.Code
				continue
			case g.state != stateEmpty:
				resp.Groups[i].ErrorCode = kerr.NonEmptyGroup.Code
				continue
			}
			var records []Record
			for _, tp := range g.sortedOffsets() {
				records = append(records, Record{Key: offsetKey(g.id, tp.topic, tp.partition)})
			}
			// A commit still being written (an admin or standalone
			// consumer's, on the empty group) lands in the log before
			// these records: its partition gets a tombstone too, or a
			// reload would bring the deleted group back with its offset.
			for _, tp := range sortedTPs(g.pendingCommits) {
				if _, ok := g.offsets[tp]; !ok {
					records = append(records, Record{Key: offsetKey(g.id, tp.topic, tp.partition)})
				}
			}
			records = append(records, Record{Key: groupKey(g.id)})
			if g.cg != nil {
				records = append(records, Record{Key: consumerKey(g.id)})
			}
			delete(p.groups, g.id)
			c.shutdownGroup(g)
			waiting++
			i := i
			c.appendRecords(p, records, func(err error) {
				if err != nil {
					resp.Groups[i].ErrorCode = appendErrCode(err)
				}
				done()
			})
		}
		done()
	})
}

func (g *group) sortedOffsets() []topicPartition { return sortedTPs(g.offsets) }

// sortedTPs returns the keys of m by topic, then partition.
func sortedTPs[V any](m map[topicPartition]V) []topicPartition {
	tps := make([]topicPartition, 0, len(m))
	for tp := range m {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].topic != tps[j].topic {
			return tps[i].topic < tps[j].topic
		}
		return tps[i].partition < tps[j].partition
	})
	return tps
}

func sortStrings(s []string) { sort.Strings(s) }

func sortInt32s(s []int32) { sort.Slice(s, func(i, j int) bool { return s[i] < s[j] }) }

// CommittedOffset is one committed offset of a group, for lag reporting.
type CommittedOffset struct {
	Group     string
	Topic     string
	Partition int32
	Offset    int64
}

// CommittedOffsets returns every committed offset of the groups in the
// loaded partitions, sorted by group, topic and partition (a snapshot, for
// metrics and admin tools).
func (c *Coordinator) CommittedOffsets(ctx context.Context) ([]CommittedOffset, error) {
	return submit(ctx, c, func(reply func([]CommittedOffset)) {
		var out []CommittedOffset
		for _, p := range c.partitions {
			if p.loading {
				continue
			}
			for _, g := range p.groups {
				for _, tp := range g.sortedOffsets() {
					out = append(out, CommittedOffset{Group: g.id, Topic: tp.topic, Partition: tp.partition, Offset: g.offsets[tp].offset})
				}
			}
		}
		sort.Slice(out, func(i, j int) bool {
			a, b := out[i], out[j]
			if a.Group != b.Group {
				return a.Group < b.Group
			}
			if a.Topic != b.Topic {
				return a.Topic < b.Topic
			}
			return a.Partition < b.Partition
		})
		reply(out)
	})
}

// Exists reports whether a classic or consumer group of that id is known to
// this coordinator (members, or offsets of a simple group). A share group
// (kept by the broker) may not take its id.
func (c *Coordinator) Exists(groupID string) bool {
	var ok bool
	c.inLoop(func() {
		_, g, _ := c.lookup(groupID)
		ok = g != nil && g.state != stateDead
	})
	return ok
}
