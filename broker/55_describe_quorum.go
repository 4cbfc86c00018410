package broker

import (
	"context"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeQuorum: v0-2
//
// The metadata quorum (KIP-595/KIP-836) as the topic-partition
// __cluster_metadata-0: the Raft leader and the voters. Sediment's quorum is
// hashicorp/raft: the leader epoch is the Raft term and the high watermark the
// commit index, both as this broker sees them; the log end offset is known for
// this broker's own voter only (hashicorp/raft does not expose the leader's
// view of its followers), -1 for the others, as are the fetch timestamps.
// Observers are the brokers that receive the log without a vote (Raft
// non-voters). v2 adds the voters' Raft endpoints as nodes.

func init() { regKey(55, 0, 2).handler = handleDescribeQuorum }

func handleDescribeQuorum(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeQuorumRequest)
	resp := req.ResponseKind().(*kmsg.DescribeQuorumResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewDescribeQuorumResponseTopic()
		rt.Topic = t.Topic
		for _, pt := range t.Partitions {
			rp := kmsg.NewDescribeQuorumResponseTopicPartition()
			rp.Partition = pt.Partition
			rp.LeaderID, rp.LeaderEpoch, rp.HighWatermark = -1, -1, -1
			if t.Topic != "__cluster_metadata" || pt.Partition != 0 {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			if l, ok := b.meta.Leader(); ok {
				rp.LeaderID = l.ID
			}
			term, commit, last := b.meta.RaftStatus()
			rp.LeaderEpoch = int32(min(term, math.MaxInt32))
			rp.HighWatermark = int64(min(commit, math.MaxInt64))
			voters, err := b.meta.Voters()
			if err != nil {
				rp.ErrorCode = kerr.NotLeaderForPartition.Code
			}
			// replica is what this broker knows of a node's copy of the
			// log: its own log end offset only.
			replica := func(id int32) kmsg.DescribeQuorumResponseTopicPartitionReplicaState {
				rs := kmsg.NewDescribeQuorumResponseTopicPartitionReplicaState()
				rs.ReplicaID, rs.LogEndOffset, rs.LastFetchTimestamp, rs.LastCaughtUpTimestamp = id, -1, -1, -1
				if id == b.meta.ID() {
					rs.LogEndOffset = int64(min(last, math.MaxInt64))
				}
				return rs
			}
			for _, v := range voters {
				rp.CurrentVoters = append(rp.CurrentVoters, replica(v.ID))
				if r.Version >= 2 {
					n := kmsg.NewDescribeQuorumResponseNode()
					n.NodeID = v.ID
					if host, port, ok := splitHostPort(v.Addr); ok {
						l := kmsg.NewDescribeQuorumResponseNodeListener()
						l.Name, l.Host, l.Port = "RAFT", host, port
						n.Listeners = append(n.Listeners, l)
					}
					resp.Nodes = append(resp.Nodes, n)
				}
			}
			observers, _ := b.meta.Observers()
			for _, o := range observers {
				rp.Observers = append(rp.Observers, replica(o.ID))
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}
