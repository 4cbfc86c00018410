package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The group side of transactional offset commits (KIP-98, KIP-447), the
// hook the broker's transaction code uses. The broker writes the records
// TxnOffsetCommit returns as a transactional batch of the producer to the
// group's __consumer_offsets partition; when it later writes the commit or
// abort marker there, it calls EndTxnOffsets, and only a commit makes the
// offsets the group's. Until then each partition counts as having a pending
// commit, so OffsetFetch with RequireStable answers UNSTABLE_OFFSET_COMMIT.

// TxnOffsetCommit validates a TxnOffsetCommit (v0-v5 names topics; names
// holds each topic's name, resolved by the caller for v6+ topic ids) and
// returns the response, with per-partition codes, and the offset records to
// write for the partitions that passed.
func (c *Coordinator) TxnOffsetCommit(ctx context.Context, req *kmsg.TxnOffsetCommitRequest, names []string) (*kmsg.TxnOffsetCommitResponse, []Record, error) {
	type result struct {
		resp    *kmsg.TxnOffsetCommitResponse
		records []Record
	}
	r, err := submit(ctx, c, func(reply func(result)) {
		resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		fill := func(code int16) {
			for _, t := range req.Topics {
				rt := kmsg.NewTxnOffsetCommitResponseTopic()
				rt.Topic, rt.TopicID = t.Topic, t.TopicID
				for _, p := range t.Partitions {
					rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
					rp.Partition, rp.ErrorCode = p.Partition, code
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
		}
		p, g, code := c.lookup(req.Group)
		if code == 0 && g != nil {
			// Kafka's GroupCoordinator.handleTxnCommitOffsets.
			switch {
			case g.state == stateDead:
				code = kerr.CoordinatorNotAvailable.Code
			case g.cg != nil:
				code = g.cgValidateTxnCommit(req, names)
			case req.Generation >= 0 && req.MemberID != "" && g.validateMember(req.MemberID, req.InstanceID) != 0:
				code = g.validateMember(req.MemberID, req.InstanceID)
			case req.Generation >= 0 && req.Generation != g.generation:
				code = kerr.IllegalGeneration.Code
			}
		} else if code == 0 && req.Generation >= 0 {
			code = kerr.UnknownMemberID.Code
		}
		fill(code)
		if code != 0 {
			reply(result{resp: resp})
			return
		}
		if g == nil {
			g = c.newGroup(p, req.Group)
		}
		now := c.nowMs()
		var records []Record
		for i, t := range req.Topics {
			for j, rp := range t.Partitions {
				md := ""
				if rp.Metadata != nil {
					md = *rp.Metadata
				}
				if len(md) > c.cfg.MaxMetadataBytes {
					resp.Topics[i].Partitions[j].ErrorCode = kerr.OffsetMetadataTooLarge.Code
					continue
				}
				leaderEpoch := rp.LeaderEpoch
				if req.Version < 2 {
					leaderEpoch = -1
				}
				tp := topicPartition{names[i], rp.Partition}
				g.pendingCommits[tp]++
				records = append(records, Record{
					Key:   offsetKey(g.id, tp.topic, tp.partition),
					Value: offsetValue(offset{offset: rp.Offset, leaderEpoch: leaderEpoch, metadata: md, commitTime: now, expireTime: -1}),
				})
			}
		}
		reply(result{resp: resp, records: records})
	})
	return r.resp, r.records, err
}

// EndTxnOffsets ends transactional offset records of a partition (returned
// by TxnOffsetCommit, or found pending by a replay): with commit they become
// their groups' offsets, as a replay of them would; without, they are
// dropped. Either way their pending counts are released.
func (c *Coordinator) EndTxnOffsets(ctx context.Context, partitionID int32, records []Record, commit bool) error {
	_, err := submit(ctx, c, func(reply func(struct{})) {
		defer reply(struct{}{})
		p := c.partitions[partitionID]
		if p == nil {
			return // a later load replays the log, marker included
		}
		if p.loading {
			// The replay may have read past the marker or not: apply
			// once loaded (applying a commit twice changes nothing).
			p.txnEnds = append(p.txnEnds, txnEnd{records: records, commit: commit})
			return
		}
		c.endTxnOffsets(p, records, commit)
	})
	return err
}

type txnEnd struct {
	records []Record
	commit  bool
	pending bool // from PendingTxnOffsets, not an end
}

// PendingTxnOffsets marks transactional offset records that a replay found
// without their marker as pending commits (so OffsetFetch with
// RequireStable answers UNSTABLE_OFFSET_COMMIT for them until
// EndTxnOffsets). The broker calls it while the partition loads.
func (c *Coordinator) PendingTxnOffsets(ctx context.Context, partitionID int32, records []Record) error {
	_, err := submit(ctx, c, func(reply func(struct{})) {
		defer reply(struct{}{})
		p := c.partitions[partitionID]
		if p == nil {
			return
		}
		if p.loading {
			p.txnEnds = append(p.txnEnds, txnEnd{records: records, pending: true})
			return
		}
		c.pendTxnOffsets(p, records)
	})
	return err
}

func (c *Coordinator) pendTxnOffsets(p *partition, records []Record) {
	for _, rec := range records {
		r, err := decodeRecord(rec.Key, rec.Value)
		if err != nil || r.kind != keyOffsetCommitV1 || r.offset == nil {
			continue
		}
		g := p.groups[r.group]
		if g == nil {
			g = c.newGroup(p, r.group)
		}
		g.pendingCommits[topicPartition{r.topic, r.partition}]++
	}
}

// applyTxnEnds applies, in order, what PendingTxnOffsets and EndTxnOffsets
// kept during the load. It must run on the loop.
func (c *Coordinator) applyTxnEnds(p *partition) {
	for _, e := range p.txnEnds {
		if e.pending {
			c.pendTxnOffsets(p, e.records)
		} else {
			c.endTxnOffsets(p, e.records, e.commit)
		}
	}
	p.txnEnds = nil
}

func (c *Coordinator) endTxnOffsets(p *partition, records []Record, commit bool) {
	for _, rec := range records {
		r, err := decodeRecord(rec.Key, rec.Value)
		if err != nil || r.kind != keyOffsetCommitV1 || r.offset == nil {
			continue
		}
		tp := topicPartition{r.topic, r.partition}
		g := p.groups[r.group]
		if g != nil && g.pendingCommits[tp] > 0 {
			if g.pendingCommits[tp]--; g.pendingCommits[tp] == 0 {
				delete(g.pendingCommits, tp)
			}
		}
		if !commit {
			continue
		}
		if g == nil {
			g = c.newGroup(p, r.group)
		}
		g.offsets[tp] = *r.offset
	}
}
