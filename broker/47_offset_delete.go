package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetDelete: v0
//
// Served by the group coordinator (broker/group): offsets of an empty group,
// or of topics a consumer group does not subscribe to
// (GROUP_SUBSCRIBED_TO_TOPIC otherwise).

func init() { regKey(47, 0, 0).handler = handleOffsetDelete }

func handleOffsetDelete(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.OffsetDeleteRequest)
	// A partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION, as
	// Kafka's KafkaApis.handleOffsetDeleteRequest answers before asking
	// the coordinator (it answered no error, or GROUP_SUBSCRIBED_TO_TOPIC
	// for a partition the topic does not have; an admin review).
	st := b.meta.State()
	known := *req
	known.Topics = nil
	var unknown []kmsg.OffsetDeleteResponseTopic
	for _, t := range req.Topics {
		mt, ok := st.Topic(t.Topic)
		kt, ut := t, kmsg.NewOffsetDeleteResponseTopic()
		kt.Partitions, ut.Topic = nil, t.Topic
		for _, p := range t.Partitions {
			if ok && p.Partition >= 0 && int(p.Partition) < len(mt.Partitions) {
				kt.Partitions = append(kt.Partitions, p)
				continue
			}
			up := kmsg.NewOffsetDeleteResponseTopicPartition()
			up.Partition, up.ErrorCode = p.Partition, kerr.UnknownTopicOrPartition.Code
			ut.Partitions = append(ut.Partitions, up)
		}
		if len(kt.Partitions) > 0 {
			known.Topics = append(known.Topics, kt)
		}
		if len(ut.Partitions) > 0 {
			unknown = append(unknown, ut)
		}
	}
	b.groups.ensure(req.Group)
	resp, err := b.groups.c.OffsetDelete(ctx, &known)
	if err == nil && resp.ErrorCode == 0 {
		resp.Topics = append(resp.Topics, unknown...)
	}
	return groupReply(req, resp, err)
}
