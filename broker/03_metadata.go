package broker

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/txn"
	"github.com/sediment-io/sediment/metadata"
)

// Metadata: v0-13
//
// v0: an empty topic list means all topics; v1+: null means all. v1+
// controller id and internal flag, v2+ cluster id, v4+ the client's
// allow_auto_topic_creation, v5+ offline replicas, v7+ leader epoch, v8+
// authorized operations (not computed: reported as unknown, -2^31), v9+
// flexible, v10+ topic ids (v12+ may look topics up by id), v13 a top-level
// error code. Unknown topics are created when auto.create.topics.enable is
// on and the client allows it, with num.partitions partitions; as on Kafka,
// the request that creates a topic gets LEADER_NOT_AVAILABLE for it, without
// partitions (kafka-go's own tests rely on it: a Metadata request that
// re-creates a topic just deleted must not list its partitions).
// Brokers are reported with their address on the listener the client
// connected through.

func init() { regKey(3, 0, 13).handler = handleMetadata }

const authorizedOpsUnknown = -2147483648

// With no authorizer every operation a resource supports is allowed, and
// Kafka reports them all when asked (AuthHelper.authorizedOperations): the
// bits are ACL operation codes.
const (
	// topicOperations: READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE,
	// DESCRIBE_CONFIGS, ALTER_CONFIGS.
	topicOperations = 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<8 | 1<<10 | 1<<11
	// clusterOperations: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION,
	// DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
	clusterOperations = 1<<5 | 1<<7 | 1<<8 | 1<<9 | 1<<10 | 1<<11 | 1<<12
)

func handleMetadata(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	st := b.meta.State()
	all := req.Topics == nil || (r.Version == 0 && len(req.Topics) == 0)
	autoCreate := b.cfg.AutoCreateTopics && (r.Version < 4 || req.AllowAutoTopicCreation)

	var topics []kmsg.MetadataResponseTopic
	if all {
		for _, t := range st.Topics() {
			topics = append(topics, topicMetadata(r, st, t))
		}
	} else {
		for _, rt := range req.Topics {
			var t *metadata.Topic
			var ok bool
			name := ""
			if rt.Topic != nil {
				name = *rt.Topic
				t, ok = st.Topic(name)
			} else if rt.TopicID != ([16]byte{}) {
				t, ok = st.TopicByID(metadata.UUID(rt.TopicID))
				if !ok {
					mt := kmsg.NewMetadataResponseTopic()
					mt.TopicID = rt.TopicID
					mt.ErrorCode = kerr.UnknownTopicID.Code
					topics = append(topics, mt)
					continue
				}
			}
			if !ok && autoCreate && name != "" {
				nst, err := b.createTopic(ctx, createTopicSpec{name: name, partitions: -1, replicationFactor: -1})
				if err == nil {
					// As Kafka's broker: the request that creates the
					// topic is answered LEADER_NOT_AVAILABLE without
					// partitions; the client asks again.
					mt := kmsg.NewMetadataResponseTopic()
					mt.Topic = kmsg.StringPtr(name)
					mt.ErrorCode = kerr.LeaderNotAvailable.Code
					topics = append(topics, mt)
					continue
				} else if errors.Is(err, metadata.ErrTopicExists) {
					if nst == nil {
						nst = b.meta.State()
					}
					st = nst
					t, ok = st.Topic(name)
				} else {
					mt := kmsg.NewMetadataResponseTopic()
					mt.Topic = kmsg.StringPtr(name)
					mt.ErrorCode = errCode(err)
					topics = append(topics, mt)
					continue
				}
			}
			if !ok {
				mt := kmsg.NewMetadataResponseTopic()
				mt.Topic = kmsg.StringPtr(name)
				mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
				if validTopicName(name) != nil {
					mt.ErrorCode = kerr.InvalidTopicException.Code
				}
				topics = append(topics, mt)
				continue
			}
			topics = append(topics, topicMetadata(r, st, t))
		}
	}
	resp.Topics = topics
	resp.Brokers = brokerList(b, st, r.Conn.Listener)
	if st.ClusterID != "" {
		// Null until the controller has recorded it, as Kafka's: a
		// client that kept an empty id would name it in ApiVersions v5
		// and be told to rebootstrap once the id is set (KIP-1242).
		resp.ClusterID = kmsg.StringPtr(st.ClusterID)
	}
	resp.ControllerID = b.controllerID(st)
	resp.AuthorizedOperations = authorizedOpsUnknown
	if req.IncludeClusterAuthorizedOperations {
		resp.AuthorizedOperations = clusterOperations
	}
	return &Reply{Msg: resp}, nil
}

func topicMetadata(r *Request, st *metadata.State, t *metadata.Topic) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	mt.Topic = kmsg.StringPtr(t.Name)
	mt.TopicID = t.ID
	mt.IsInternal = isInternalTopic(t.Name)
	mt.AuthorizedOperations = authorizedOpsUnknown
	if req, ok := r.Msg.(*kmsg.MetadataRequest); ok && req.IncludeTopicAuthorizedOperations {
		mt.AuthorizedOperations = topicOperations
	}
	for _, p := range t.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = p.Index
		mp.Leader = p.Leader
		mp.LeaderEpoch = p.LeaderEpoch
		mp.Replicas = p.Replicas
		mp.ISR = p.ISR
		mp.OfflineReplicas = offlineReplicas(st, p.Replicas)
		if p.Leader == metadata.NoLeader {
			mp.ErrorCode = kerr.LeaderNotAvailable.Code
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

// offlineReplicas are the replicas on brokers that are fenced or not
// registered (decommissioned), as Kafka's KRaft metadata cache reports them.
func offlineReplicas(st *metadata.State, replicas []int32) []int32 {
	out := []int32{}
	for _, id := range replicas {
		if br, ok := st.Broker(id); !ok || br.Fenced {
			out = append(out, id)
		}
	}
	return out
}

// isInternalTopic: the coordinators' topics, as Kafka's Topic.isInternal.
func isInternalTopic(name string) bool {
	return name == offsetsTopic || name == txn.StateTopic
}

// brokerList reports unfenced brokers at their address on the named listener
// (or their first listener).
func brokerList(b *Broker, st *metadata.State, listener string) []kmsg.MetadataResponseBroker {
	var out []kmsg.MetadataResponseBroker
	for _, br := range st.Brokers() {
		if br.Fenced || len(br.Listeners) == 0 {
			continue
		}
		l := br.Listeners[0]
		for _, bl := range br.Listeners {
			if bl.Name == listener {
				l = bl
			}
		}
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port = br.ID, l.Host, l.Port
		if br.Rack != "" {
			mb.Rack = kmsg.StringPtr(br.Rack)
		}
		out = append(out, mb)
	}
	return out
}

// controllerID is the broker Metadata and DescribeCluster name as the
// controller, where clients send the requests Kafka routes to it (any
// Sediment broker serves them, through the metadata quorum): the quorum's
// leader when clients can reach it (registered and unfenced, so listed),
// else this broker or another listed one, as Kafka's KRaft brokers name an
// alive broker. A leader that is fenced (shutting down) or unregistered is
// in no broker list, and a client told to use it would wait for an address
// it never learns.
func (b *Broker) controllerID(st *metadata.State) int32 {
	listed := func(id int32) bool {
		br, ok := st.Broker(id)
		return ok && !br.Fenced && len(br.Listeners) > 0
	}
	l, hasLeader := b.meta.Leader()
	switch {
	case hasLeader && listed(l.ID):
		return l.ID
	case listed(b.cfg.NodeID):
		return b.cfg.NodeID
	}
	for _, br := range st.Brokers() {
		if listed(br.ID) {
			return br.ID
		}
	}
	if hasLeader {
		return l.ID
	}
	return b.cfg.NodeID
}
