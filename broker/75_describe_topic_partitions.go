package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// DescribeTopicPartitions: v0 (flexible)
//
// KIP-966's paged topic description, which the Java admin client (3.7+)
// uses for describeTopics: the requested topics (none: every topic the
// client may describe), sorted by name, from the cursor's topic and
// partition on, at most ResponsePartitionLimit partitions (capped at
// maxDescribePartitions, at least 1); when the limit stops it, NextCursor
// names where the next page starts. As Kafka's handler: a cursor whose topic
// is not among the requested ones, or with a negative partition, makes every
// requested topic INVALID_REQUEST; an unknown named topic is
// UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for a bad name); a
// named topic the client may not describe is TOPIC_AUTHORIZATION_FAILED,
// listed after the page, without its id; with the authorizer the topics a
// client may not describe are left out before the page is cut, so neither
// a page nor a cursor reveals them. Authorized operations are always set.
// There are no eligible leader replicas (KIP-966's ELR): both lists are
// empty; offline replicas are not computed (as Metadata).

func init() { regKey(75, 0, 0).handler = handleDescribeTopicPartitions }

// maxDescribePartitions is Kafka's max.request.partition.size.limit default.
const maxDescribePartitions = 2000

func handleDescribeTopicPartitions(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeTopicPartitionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTopicPartitionsResponse)
	st := b.meta.State()
	all := len(req.Topics) == 0
	cursorTopic := ""
	if req.Cursor != nil {
		cursorTopic = req.Cursor.Topic
	}
	var names []string
	if all {
		for _, t := range st.Topics() { // sorted by name
			if t.Name >= cursorTopic {
				names = append(names, t.Name)
			}
		}
	} else {
		for _, t := range req.Topics {
			if t.Topic >= cursorTopic {
				names = append(names, t.Topic)
			}
		}
		slices.Sort(names)
		names = slices.Compact(names) // a name asked twice is listed once
	}
	if req.Cursor != nil && ((!all && !slices.Contains(names, req.Cursor.Topic)) || req.Cursor.Partition < 0) {
		for _, t := range req.Topics {
			rt := kmsg.NewDescribeTopicPartitionsResponseTopic()
			rt.Topic, rt.ErrorCode = kmsg.StringPtr(t.Topic), kerr.InvalidRequest.Code
			resp.Topics = append(resp.Topics, rt)
		}
		return &Reply{Msg: resp}, nil
	}
	var denied []kmsg.DescribeTopicPartitionsResponseTopic
	if r.topicVisible != nil {
		names = slices.DeleteFunc(names, func(n string) bool {
			if r.topicVisible(n) {
				return false
			}
			if !all {
				rt := kmsg.NewDescribeTopicPartitionsResponseTopic()
				rt.Topic, rt.ErrorCode = kmsg.StringPtr(n), errTopicAuth
				denied = append(denied, rt)
			}
			return true
		})
	}
	remaining := int(max(min(req.ResponsePartitionLimit, maxDescribePartitions), 1))
	for _, name := range names {
		if remaining == 0 {
			// The page ended with the previous topic: the next one starts
			// the next page.
			resp.NextCursor = &kmsg.DescribeTopicPartitionsResponseNextCursor{Topic: name}
			break
		}
		rt := kmsg.NewDescribeTopicPartitionsResponseTopic()
		rt.Topic, rt.IsInternal = kmsg.StringPtr(name), isInternalTopic(name)
		rt.AuthorizedOperations = topicOperations
		t, ok := st.Topic(name)
		if !ok {
			if all {
				continue
			}
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			if validTopicName(name) != nil {
				rt.ErrorCode = kerr.InvalidTopicException.Code
			}
			rt.AuthorizedOperations = authorizedOpsUnknown
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		rt.TopicID = t.ID
		start := 0
		if req.Cursor != nil && name == req.Cursor.Topic {
			start = int(req.Cursor.Partition)
		}
		for i := start; i < len(t.Partitions); i++ {
			if remaining == 0 {
				resp.NextCursor = &kmsg.DescribeTopicPartitionsResponseNextCursor{Topic: name, Partition: int32(i)}
				break
			}
			rt.Partitions = append(rt.Partitions, describedPartition(st, t.Partitions[i]))
			remaining--
		}
		resp.Topics = append(resp.Topics, rt)
		if resp.NextCursor != nil {
			break
		}
	}
	resp.Topics = append(resp.Topics, denied...)
	return &Reply{Msg: resp}, nil
}

func describedPartition(st *metadata.State, p *metadata.Partition) kmsg.DescribeTopicPartitionsResponseTopicPartition {
	dp := kmsg.NewDescribeTopicPartitionsResponseTopicPartition()
	dp.Partition, dp.LeaderID, dp.LeaderEpoch = p.Index, p.Leader, p.LeaderEpoch
	dp.Replicas, dp.ISR = p.Replicas, p.ISR
	dp.EligibleLeaderReplicas, dp.LastKnownELR = []int32{}, []int32{}
	dp.OfflineReplicas = offlineReplicas(st, p.Replicas)
	if p.Leader == metadata.NoLeader {
		dp.ErrorCode = kerr.LeaderNotAvailable.Code
	}
	return dp
}
