package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareAcknowledge: v1
//
// KIP-932 (share_partition.go): a member's acknowledgements outside a fetch,
// in its share session (the epoch moves on as with ShareFetch; -1 closes the
// session after applying them). v2: RENEW acknowledgements with IsRenewAck
// (KIP-1222). Serial on a connection, as ShareFetch.

func init() {
	e := regKey(79, 1, 2)
	e.handler = handleShareAcknowledge
	e.serial = true
}

func handleShareAcknowledge(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ShareAcknowledgeRequest)
	resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
	s := b.shares
	if req.GroupID == nil || *req.GroupID == "" || req.MemberID == nil || *req.MemberID == "" {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return &Reply{Msg: resp}, nil
	}
	group, member := *req.GroupID, *req.MemberID
	if req.ShareSessionEpoch == 0 {
		resp.ErrorCode = kerr.InvalidShareSessionEpoch.Code // acknowledgements need an open session
		return &Reply{Msg: resp}, nil
	}
	s.mu.Lock()
	ss, code := s.sessionLocked(group, member, req.ShareSessionEpoch, r.Conn.ID, nil)
	s.mu.Unlock()
	if code != 0 {
		resp.ErrorCode = code
		return &Reply{Msg: resp}, nil
	}
	st := b.meta.State()
	writes := map[shareTP]*shareAckWrite{}
	for _, t := range req.Topics {
		rt := kmsg.NewShareAcknowledgeResponseTopic()
		rt.TopicID = t.TopicID
		for _, p := range t.Partitions {
			var batches []shareAckBatch
			for _, a := range p.AcknowledgementBatches {
				batches = append(batches, shareAckBatch{a.FirstOffset, a.LastOffset, a.AcknowledgeTypes})
			}
			rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
			rp.Partition = p.Partition
			tp := shareTP{t.TopicID, p.Partition}
			rp.ErrorCode, writes[tp] = s.acknowledge(ctx, st, group, member, tp, batches, req.IsRenewAck)
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
			if rp.ErrorCode != 0 && rp.ErrorCode != kerr.InvalidRecordState.Code && rp.ErrorCode != kerr.InvalidRequest.Code {
				rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leaderHint(st, "", t.TopicID, true, p.Partition, rp.ErrorCode)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		slices.SortFunc(rt.Partitions, func(a, b kmsg.ShareAcknowledgeResponseTopicPartition) int { return int(a.Partition - b.Partition) })
		resp.Topics = append(resp.Topics, rt)
	}
	// Answered once written, as Kafka's share coordinator answers.
	if lost := s.settle(ctx, writes); len(lost) > 0 {
		for i := range resp.Topics {
			rt := &resp.Topics[i]
			for j := range rt.Partitions {
				rp := &rt.Partitions[j]
				if code := lost[shareTP{rt.TopicID, rp.Partition}]; code != 0 {
					rp.ErrorCode = code
					if code == kerr.NotLeaderForPartition.Code {
						rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leaderHint(st, "", rt.TopicID, true, rp.Partition, rp.ErrorCode)
					}
				}
			}
		}
	}
	if req.ShareSessionEpoch == -1 {
		s.mu.Lock()
		s.closeSessionLocked(ss)
		s.mu.Unlock()
	}
	return &Reply{Msg: resp}, nil
}
