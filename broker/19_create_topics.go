package broker

import (
	"context"
	"errors"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// CreateTopics: v2-7
//
// v2 is Kafka 4's minimum. Names follow Kafka's rules
// (INVALID_TOPIC_EXCEPTION), configs are checked against the topic config
// table (INVALID_CONFIG), an existing name answers TOPIC_ALREADY_EXISTS,
// validate_only checks without creating. -1 for partitions and replication
// factor means the broker defaults at every version (KIP-464 documents it for
// v4+, but Kafka's broker does not check the version and kafkajs sends -1
// replication factor at v3), v5+ returns the topic's
// effective configs, v5+ flexible, v7 the topic id.

func init() { regKey(19, 2, 7).handler = handleCreateTopics }

// maxPartitionsPerRequest bounds the partitions one CreateTopics or
// CreatePartitions request may create, all its topics together, as Kafka's
// controller does (MAX_PARTITIONS_PER_BATCH, KAFKA-17870 and KAFKA-19673):
// the whole request is refused with POLICY_VIOLATION past it. Without it
// one request made 100 000 partitions, which the broker then opened, a
// file descriptor each (an admin review).
const maxPartitionsPerRequest = 10000

var errTooManyPartitionsPerRequest error = &codedError{errPolicyViolation, "Excessively large number of partitions per request."}

func handleCreateTopics(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	seen := make(map[string]int)
	var total int64
	for _, t := range req.Topics {
		seen[t.Topic]++
		switch {
		case len(t.ReplicaAssignment) > 0:
			total += int64(len(t.ReplicaAssignment))
		case t.NumPartitions == -1:
			total += int64(b.cfg.NumPartitions)
		default:
			total += int64(max(t.NumPartitions, 0))
		}
	}
	for _, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		rt.NumPartitions, rt.ReplicationFactor = -1, -1
		spec := createTopicSpec{name: t.Topic, partitions: t.NumPartitions, replicationFactor: t.ReplicationFactor, configs: map[string]string{}}
		var err error
		switch {
		case total > maxPartitionsPerRequest:
			err = errTooManyPartitionsPerRequest
		case seen[t.Topic] > 1:
			err = errors.Join(metadata.ErrInvalidRequest, errors.New("topic listed more than once"))
		}
		for _, c := range t.Configs {
			if err == nil {
				if err = validateTopicConfig(c.Name, c.Value); err == nil {
					spec.configs[c.Name] = canonicalTopicConfig(c.Name, *c.Value)
				}
			}
		}
		if err == nil && len(t.ReplicaAssignment) > 0 {
			if t.NumPartitions != -1 || t.ReplicationFactor != -1 {
				err = errors.Join(metadata.ErrInvalidRequest, errors.New("both a replica assignment and counts given"))
			} else {
				sort.Slice(t.ReplicaAssignment, func(i, j int) bool { return t.ReplicaAssignment[i].Partition < t.ReplicaAssignment[j].Partition })
				for i, a := range t.ReplicaAssignment {
					if a.Partition != int32(i) {
						err = errors.Join(metadata.ErrInvalidReplicaAssignment, errors.New("partitions must be numbered from 0 without gaps"))
						break
					}
					spec.assignment = append(spec.assignment, a.Replicas)
				}
			}
		}
		if err == nil {
			if req.ValidateOnly {
				err = b.validateTopic(&spec)
				if err == nil {
					if _, exists := b.meta.State().Topic(t.Topic); exists {
						err = metadata.ErrTopicExists
					}
				}
				if err == nil {
					rt.NumPartitions, rt.ReplicationFactor = spec.partitions, spec.replicationFactor
					rt.Configs = createdConfigs(b, spec.configs)
				}
			} else {
				var st *metadata.State
				st, err = b.createTopic(ctx, spec)
				if err == nil {
					if mt, ok := st.Topic(t.Topic); ok {
						rt.TopicID = mt.ID
						rt.NumPartitions = int32(len(mt.Partitions))
						if len(mt.Partitions) > 0 {
							rt.ReplicationFactor = int16(len(mt.Partitions[0].Replicas))
						}
						rt.Configs = createdConfigs(b, mt.Configs)
					}
				}
			}
		}
		if err != nil {
			rt.ErrorCode = errCode(err)
			rt.ErrorMessage = errMessage(err)
			rt.Configs = nil
			rt.NumPartitions, rt.ReplicationFactor = -1, -1
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}

func createdConfigs(b *Broker, set map[string]string) []kmsg.CreateTopicsResponseTopicConfig {
	var out []kmsg.CreateTopicsResponseTopicConfig
	for _, name := range sortedConfigNames() {
		v, src := b.topicConfigValue(set, name)
		c := kmsg.NewCreateTopicsResponseTopicConfig()
		c.Name, c.Value, c.Source = name, kmsg.StringPtr(v), int8(src)
		out = append(out, c)
	}
	return out
}
