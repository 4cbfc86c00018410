package broker

import (
	"context"
	"fmt"
	"reflect"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// Per-API authorization: which operation each request needs on which
// resource, in one table, applied by one middleware (b.chain) around the
// handlers, which know nothing of it. The rules follow Kafka's KafkaApis:
// a request that names several resources is answered per resource (the
// denied ones get TOPIC_, GROUP_, TRANSACTIONAL_ID_ or
// CLUSTER_AUTHORIZATION_FAILED and are taken out of the request the handler
// sees; the others are handled as usual); a request about one resource is
// answered with the error alone. Lists (Metadata for all topics, ListGroups,
// ListTransactions, OffsetFetch for all topics) leave out what the client
// may not DESCRIBE, so that a denied resource's existence does not leak.
//
// Requests from inside the broker (r.Conn nil) and from super users pass.
// Inter-broker requests (replica Fetch and OffsetForLeaderEpoch,
// WriteTxnMarkers, AddPartitionsToTxn v4) need CLUSTER_ACTION: the
// brokers' principal on the first listener must be a super user or hold it.
//
// Fetch sessions (KIP-227) work as without the authorizer: a consumer
// Fetch hands the handler a topic filter (fetchAuthzKey), which it applies
// to the partitions the fetch reads once the session has resolved them, so
// every fetch is authorized against the ACLs current then.

// authzRule authorizes one request for s and calls next with what is
// allowed.
type authzRule func(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error)

// authzRules: every API the registry serves has an entry (TestAuthzTable).
var authzRules = map[int16]authzRule{
	0:  authzProduce,
	1:  authzFetch,
	2:  authzListOffsets,
	3:  authzMetadata,
	8:  authzOffsetCommit,
	9:  authzOffsetFetch,
	10: authzFindCoordinator,
	11: groupRule(kmsg.ACLOperationRead, func(m kmsg.Request) string { return m.(*kmsg.JoinGroupRequest).Group }),
	12: groupRule(kmsg.ACLOperationRead, func(m kmsg.Request) string { return m.(*kmsg.HeartbeatRequest).Group }),
	13: groupRule(kmsg.ACLOperationRead, func(m kmsg.Request) string { return m.(*kmsg.LeaveGroupRequest).Group }),
	14: groupRule(kmsg.ACLOperationRead, func(m kmsg.Request) string { return m.(*kmsg.SyncGroupRequest).Group }),
	15: authzDescribeGroups,
	16: authzListGroups,
	17: authzNone, // SaslHandshake
	18: authzNone, // ApiVersions
	19: authzCreateTopics,
	20: authzDeleteTopics,
	21: authzDeleteRecords,
	22: authzInitProducerID,
	23: authzOffsetForLeaderEpoch,
	24: authzAddPartitionsToTxn,
	25: authzAddOffsetsToTxn,
	26: txnRule(func(m kmsg.Request) string { return m.(*kmsg.EndTxnRequest).TransactionalID }),
	27: authzWriteTxnMarkers,
	28: authzTxnOffsetCommit,
	29: clusterRule(kmsg.ACLOperationDescribe),
	30: authzCreateACLs,
	31: authzDeleteACLs,
	32: authzDescribeConfigs,
	33: authzAlterConfigs,
	35: clusterRule(kmsg.ACLOperationDescribe), // DescribeLogDirs
	36: authzNone,                              // SaslAuthenticate
	37: authzCreatePartitions,
	42: authzDeleteGroups,
	43: authzElectLeaders,
	44: authzIncrementalAlterConfigs,
	45: clusterRule(kmsg.ACLOperationAlter),           // AlterPartitionAssignments
	46: clusterRule(kmsg.ACLOperationDescribe),        // ListPartitionReassignments
	47: authzOffsetDelete,                             //
	48: clusterRule(kmsg.ACLOperationDescribeConfigs), // DescribeClientQuotas
	49: authzAlterClientQuotas,
	// The token APIs check their own: CREATE_TOKENS on another owner,
	// DESCRIBE / DESCRIBE_TOKENS per token (delegation_tokens.go).
	38: authzNone,                              // CreateDelegationToken
	39: authzNone,                              // RenewDelegationToken: owner or renewer
	40: authzNone,                              // ExpireDelegationToken: owner or renewer
	41: authzNone,                              // DescribeDelegationToken
	50: clusterRule(kmsg.ACLOperationDescribe), // DescribeUserScramCredentials
	51: authzAlterUserSCRAM,
	55: clusterRule(kmsg.ACLOperationDescribe), // DescribeQuorum
	57: clusterRule(kmsg.ACLOperationAlter),    // UpdateFeatures
	64: clusterRule(kmsg.ACLOperationAlter),    // UnregisterBroker
	60: authzDescribeCluster,
	61: authzDescribeProducers,
	65: authzDescribeTransactions,
	66: authzListTransactions,
	75: authzDescribeTopicPartitions,
	68: authzConsumerGroupHeartbeat,
	69: authzConsumerGroupDescribe,
	76: authzShareGroupHeartbeat,
	77: authzShareGroupDescribe,
	78: authzShareFetch,
	79: authzShareAcknowledge,
	90: authzDescribeShareGroupOffsets,
	91: authzAlterShareGroupOffsets,
	92: authzDeleteShareGroupOffsets,
	74: clusterRule(kmsg.ACLOperationDescribeConfigs), // ListConfigResources
	80: clusterRule(kmsg.ACLOperationAlter),           // AddRaftVoter
	81: clusterRule(kmsg.ACLOperationAlter),           // RemoveRaftVoter
}

// authzMiddleware applies the API's rule; nil when the authorizer is off.
func (b *Broker) authzMiddleware(key int16) Middleware {
	if b.authz == nil {
		return nil
	}
	rule, ok := authzRules[key]
	if !ok {
		panic(fmt.Sprintf("broker: API %d has no authorization rule (authz.go)", key))
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
			if r.Conn == nil {
				return next(ctx, b, r)
			}
			s := b.authz.subject(b.meta.State(), r.Conn)
			if s.super {
				return next(ctx, b, r)
			}
			return rule(ctx, b, s, r, next)
		}
	}
}

var (
	errTopicAuth   = kerr.TopicAuthorizationFailed.Code
	errGroupAuth   = kerr.GroupAuthorizationFailed.Code
	errClusterAuth = kerr.ClusterAuthorizationFailed.Code
	errTxnAuth     = kerr.TransactionalIDAuthorizationFailed.Code
)

func authzNone(ctx context.Context, b *Broker, _ *subject, r *Request, next Handler) (*Reply, error) {
	return next(ctx, b, r)
}

// topError answers the request with code in its top-level ErrorCode (every
// API whose rule uses it has one at the versions served).
func topError(r *Request, code int16) *Reply {
	resp := r.Msg.ResponseKind()
	resp.SetVersion(r.Version)
	f := reflect.ValueOf(resp).Elem().FieldByName("ErrorCode")
	if !f.IsValid() {
		panic(fmt.Sprintf("broker: %T has no ErrorCode", resp))
	}
	f.SetInt(int64(code))
	return &Reply{Msg: resp}
}

func clusterRule(op kmsg.ACLOperation) authzRule {
	return func(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
		if !s.cluster(op) {
			return topError(r, errClusterAuth), nil
		}
		return next(ctx, b, r)
	}
}

func groupRule(op kmsg.ACLOperation, group func(kmsg.Request) string) authzRule {
	return func(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
		if !s.group(op, group(r.Msg)) {
			return topError(r, errGroupAuth), nil
		}
		return next(ctx, b, r)
	}
}

func txnRule(id func(kmsg.Request) string) authzRule {
	return func(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
		if !s.txnID(kmsg.ACLOperationWrite, id(r.Msg)) {
			return topError(r, errTxnAuth), nil
		}
		return next(ctx, b, r)
	}
}

// nextIf calls next if run, and otherwise answers an empty response (every
// resource of the request was denied) for the rule to fill.
func nextIf(run bool, ctx context.Context, b *Broker, r *Request, next Handler) (*Reply, error) {
	if run {
		return next(ctx, b, r)
	}
	resp := r.Msg.ResponseKind()
	resp.SetVersion(r.Version)
	return &Reply{Msg: resp}, nil
}

// perResource is the common rule: the items of a request that allow
// refuses are taken out of it and answered by denied, appended to the
// response's items (out); the handler runs if anything is left.
func perResource[In, Out any](ctx context.Context, b *Broker, r *Request, next Handler, in *[]In, allow func(*In) bool, denied func(*In) Out, out func(kmsg.Response) *[]Out) (*Reply, error) {
	var refused []Out
	*in, _ = split(*in, func(x *In) bool {
		if allow(x) {
			return true
		}
		refused = append(refused, denied(x))
		return false
	})
	if len(refused) == 0 {
		return next(ctx, b, r)
	}
	rep, err := nextIf(len(*in) > 0, ctx, b, r, next)
	if err != nil {
		return nil, err
	}
	o := out(rep.Msg)
	*o = append(*o, refused...)
	return rep, nil
}

// topicName is the name of a topic a request names by name or, at newer
// versions, by ID ("" for an unknown ID: the handler answers that).
func topicName(st *metadata.State, name string, id [16]byte) string {
	if id == ([16]byte{}) {
		return name
	}
	if t, ok := st.TopicByID(metadata.UUID(id)); ok {
		return t.Name
	}
	return ""
}

// split keeps in place the elements of xs that ok allows and returns the
// others.
func split[T any](xs []T, ok func(*T) bool) (kept, denied []T) {
	kept = xs[:0:0]
	for i := range xs {
		if ok(&xs[i]) {
			kept = append(kept, xs[i])
		} else {
			denied = append(denied, xs[i])
		}
	}
	return kept, denied
}

// topicAllowed is a filter for split over topics named by name or ID: an
// unknown ID passes (the handler answers UNKNOWN_TOPIC_ID).
func topicAllowed(st *metadata.State, s *subject, op kmsg.ACLOperation) func(name string, id [16]byte) bool {
	return func(name string, id [16]byte) bool {
		n := topicName(st, name, id)
		return (n == "" && id != ([16]byte{})) || s.topic(op, n)
	}
}

// ---- Produce, Fetch, ListOffsets, Metadata ----

func authzProduce(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.ProduceRequest)
	collapseProducePartitions(req) // a partition listed twice is answered once (00_produce.go)
	code := errTopicAuth
	var denied []kmsg.ProduceRequestTopic
	if req.TransactionID != nil && !s.txnID(kmsg.ACLOperationWrite, *req.TransactionID) {
		denied, req.Topics = req.Topics, nil
		code = errTxnAuth
	} else {
		ok := topicAllowed(b.meta.State(), s, kmsg.ACLOperationWrite)
		req.Topics, denied = split(req.Topics, func(t *kmsg.ProduceRequestTopic) bool { return ok(t.Topic, t.TopicID) })
	}
	if len(denied) == 0 {
		return next(ctx, b, r)
	}
	rep, err := nextIf(len(req.Topics) > 0, ctx, b, r, next)
	if err != nil {
		return nil, err
	}
	if req.Acks == 0 {
		// As the handler on a failed acks=0 produce, and Kafka: no
		// answer, and the connection is closed so that the client
		// notices.
		return &Reply{NoResponse: true, Close: true}, nil
	}
	resp := rep.Msg.(*kmsg.ProduceResponse)
	for _, t := range denied {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = p.Partition, code, -1, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return rep, nil
}

// fetchReplicaID is the replica id of a fetch (-1 for a consumer).
func fetchReplicaID(req *kmsg.FetchRequest) int32 {
	if req.Version >= 15 {
		return req.ReplicaState.ID
	}
	return req.ReplicaID
}

func authzFetch(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.FetchRequest)
	if fetchReplicaID(req) >= 0 {
		if s.cluster(kmsg.ACLOperationClusterAction) {
			return next(ctx, b, r)
		}
		if r.Version >= 7 {
			return topError(r, errClusterAuth), nil
		}
		return &Reply{Msg: fetchErrors(req, req.Topics, errClusterAuth)}, nil
	}
	// A consumer: READ on each topic of the partitions the fetch reads,
	// which its fetch session may name rather than the request; the
	// handler applies the filter once the session has resolved them.
	return next(context.WithValue(ctx, fetchAuthzKey{}, topicAllowed(b.meta.State(), s, kmsg.ACLOperationRead)), b, r)
}

// fetchAuthzKey carries a consumer Fetch's topic filter (a func(name
// string, id [16]byte) bool) from authzFetch to the Fetch handler.
type fetchAuthzKey struct{}

// fetchTopicFilter is the Fetch's topic filter; nil when every topic may be
// read (no authorizer, a super user, a follower).
func fetchTopicFilter(ctx context.Context) func(name string, id [16]byte) bool {
	f, _ := ctx.Value(fetchAuthzKey{}).(func(name string, id [16]byte) bool)
	return f
}

// fetchErrors is a response with code for every partition of topics.
func fetchErrors(req *kmsg.FetchRequest, topics []kmsg.FetchRequestTopic, code int16) *kmsg.FetchResponse {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	for _, t := range topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			rp.RecordBatches = []byte{} // empty, not null: librdkafka cannot parse a null record set
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func authzListOffsets(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.ListOffsetsRequest)
	return perResource(ctx, b, r, next, &req.Topics,
		func(t *kmsg.ListOffsetsRequestTopic) bool { return s.topic(kmsg.ACLOperationDescribe, t.Topic) },
		func(t *kmsg.ListOffsetsRequestTopic) kmsg.ListOffsetsResponseTopic {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.Timestamp, rp.Offset, rp.LeaderEpoch = p.Partition, errTopicAuth, -1, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			return rt
		},
		func(m kmsg.Response) *[]kmsg.ListOffsetsResponseTopic { return &m.(*kmsg.ListOffsetsResponse).Topics })
}

// canCreateTopic: CREATE on the cluster or on the topic.
func (s *subject) canCreateTopic(name string) bool {
	return s.cluster(kmsg.ACLOperationCreate) || s.topic(kmsg.ACLOperationCreate, name)
}

func authzMetadata(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.MetadataRequest)
	st := b.meta.State()
	all := req.Topics == nil || (r.Version == 0 && len(req.Topics) == 0)
	var extra []kmsg.MetadataResponseTopic
	if !all {
		kept := req.Topics[:0:0]
		for _, t := range req.Topics {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			var id [16]byte
			if t.Topic == nil {
				id = t.TopicID
				if name = topicName(st, "", t.TopicID); name == "" {
					kept = append(kept, t) // unknown ID: the handler's answer
					continue
				}
			}
			mt := kmsg.NewMetadataResponseTopic()
			mt.TopicID = id
			if id == ([16]byte{}) {
				mt.Topic = kmsg.StringPtr(name)
			}
			_, exists := st.Topic(name)
			switch {
			case !s.topic(kmsg.ACLOperationDescribe, name):
				mt.ErrorCode = errTopicAuth
			case !exists && !s.canCreateTopic(name):
				// Kafka's KafkaApis: a topic the request would
				// auto-create but the principal may not create is
				// TOPIC_AUTHORIZATION_FAILED (the client says why),
				// else it does not exist.
				mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
				if validTopicName(name) != nil {
					mt.ErrorCode = kerr.InvalidTopicException.Code
				} else if b.cfg.AutoCreateTopics && (r.Version < 4 || req.AllowAutoTopicCreation) {
					mt.ErrorCode = errTopicAuth
				}
			default:
				kept = append(kept, t)
				continue
			}
			extra = append(extra, mt)
		}
		req.Topics = kept
	}
	emptied := r.Version == 0 && !all && len(req.Topics) == 0 // v0: empty means all
	rep, err := next(ctx, b, r)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.MetadataResponse)
	if emptied {
		resp.Topics = nil
	} else if all {
		resp.Topics, _ = split(resp.Topics, func(t *kmsg.MetadataResponseTopic) bool {
			return t.Topic == nil || s.topic(kmsg.ACLOperationDescribe, *t.Topic)
		})
	}
	if req.IncludeTopicAuthorizedOperations {
		for i := range resp.Topics {
			if t := &resp.Topics[i]; t.ErrorCode == 0 && t.Topic != nil {
				t.AuthorizedOperations = s.authorizedOps(kmsg.ACLResourceTypeTopic, *t.Topic, topicOps...)
			}
		}
	}
	if req.IncludeClusterAuthorizedOperations {
		resp.AuthorizedOperations = s.authorizedOps(kmsg.ACLResourceTypeCluster, "kafka-cluster", clusterOps...)
	}
	resp.Topics = append(resp.Topics, extra...)
	return rep, nil
}

// authzDescribeTopicPartitions: DESCRIBE on each topic. The handler leaves
// out the topics the client may not describe before it cuts the page
// (Request.topicVisible); the authorized operations are the subject's.
func authzDescribeTopicPartitions(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	r.topicVisible = func(name string) bool { return s.topic(kmsg.ACLOperationDescribe, name) }
	rep, err := next(ctx, b, r)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.DescribeTopicPartitionsResponse)
	for i := range resp.Topics {
		if t := &resp.Topics[i]; t.ErrorCode == 0 && t.Topic != nil {
			t.AuthorizedOperations = s.authorizedOps(kmsg.ACLResourceTypeTopic, *t.Topic, topicOps...)
		}
	}
	return rep, nil
}

// ---- consumer groups ----

func authzOffsetCommit(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.OffsetCommitRequest)
	ok := topicAllowed(b.meta.State(), s, kmsg.ACLOperationRead)
	allow, code := func(t *kmsg.OffsetCommitRequestTopic) bool { return ok(t.Topic, t.TopicID) }, errTopicAuth
	if !s.group(kmsg.ACLOperationRead, req.Group) {
		allow, code = func(*kmsg.OffsetCommitRequestTopic) bool { return false }, errGroupAuth
	}
	return perResource(ctx, b, r, next, &req.Topics, allow,
		func(t *kmsg.OffsetCommitRequestTopic) kmsg.OffsetCommitResponseTopic {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			return rt
		},
		func(m kmsg.Response) *[]kmsg.OffsetCommitResponseTopic { return &m.(*kmsg.OffsetCommitResponse).Topics })
}

func authzOffsetFetch(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.OffsetFetchRequest)
	st := b.meta.State()
	describe := topicAllowed(st, s, kmsg.ACLOperationDescribe)
	if r.Version < 8 {
		if !s.group(kmsg.ACLOperationDescribe, req.Group) {
			resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
			resp.ErrorCode = errGroupAuth
			if r.Version < 2 { // no top-level error: per partition
				for _, t := range req.Topics {
					rt := kmsg.NewOffsetFetchResponseTopic()
					rt.Topic = t.Topic
					for _, p := range t.Partitions {
						rp := kmsg.NewOffsetFetchResponseTopicPartition()
						rp.Partition, rp.Offset, rp.ErrorCode = p, -1, errGroupAuth
						rt.Partitions = append(rt.Partitions, rp)
					}
					resp.Topics = append(resp.Topics, rt)
				}
			}
			return &Reply{Msg: resp}, nil
		}
		var denied []kmsg.OffsetFetchRequestTopic
		if req.Topics != nil {
			req.Topics, denied = split(req.Topics, func(t *kmsg.OffsetFetchRequestTopic) bool { return describe(t.Topic, [16]byte{}) })
		}
		rep, err := next(ctx, b, r)
		if err != nil {
			return nil, err
		}
		resp := rep.Msg.(*kmsg.OffsetFetchResponse)
		if req.Topics == nil {
			resp.Topics, _ = split(resp.Topics, func(t *kmsg.OffsetFetchResponseTopic) bool { return describe(t.Topic, [16]byte{}) })
		}
		for _, t := range denied {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, errTopicAuth
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return rep, nil
	}
	// v8+: groups, each answered on its own.
	var deniedGroups []string
	deniedTopics := map[string][]kmsg.OffsetFetchRequestGroupTopic{}
	req.Groups, _ = split(req.Groups, func(g *kmsg.OffsetFetchRequestGroup) bool {
		if !s.group(kmsg.ACLOperationDescribe, g.Group) {
			deniedGroups = append(deniedGroups, g.Group)
			return false
		}
		if g.Topics != nil {
			var d []kmsg.OffsetFetchRequestGroupTopic
			g.Topics, d = split(g.Topics, func(t *kmsg.OffsetFetchRequestGroupTopic) bool { return describe(t.Topic, t.TopicID) })
			if len(d) > 0 {
				deniedTopics[g.Group] = d
			}
		}
		return true
	})
	allTopics := map[string]bool{}
	for _, g := range req.Groups {
		if g.Topics == nil {
			allTopics[g.Group] = true
		}
	}
	rep, err := nextIf(len(req.Groups) > 0, ctx, b, r, next)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.OffsetFetchResponse)
	for i := range resp.Groups {
		g := &resp.Groups[i]
		if allTopics[g.Group] {
			g.Topics, _ = split(g.Topics, func(t *kmsg.OffsetFetchResponseGroupTopic) bool { return describe(t.Topic, t.TopicID) })
		}
		for _, t := range deniedTopics[g.Group] {
			rt := kmsg.NewOffsetFetchResponseGroupTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, errTopicAuth
				rt.Partitions = append(rt.Partitions, rp)
			}
			g.Topics = append(g.Topics, rt)
		}
	}
	for _, name := range deniedGroups {
		g := kmsg.NewOffsetFetchResponseGroup()
		g.Group, g.ErrorCode = name, errGroupAuth
		resp.Groups = append(resp.Groups, g)
	}
	return rep, nil
}

// coordinatorAllowed: DESCRIBE on the group or transactional id.
func (s *subject) coordinatorAllowed(typ int8, key string) (bool, int16) {
	if typ == 1 {
		return s.txnID(kmsg.ACLOperationDescribe, key), errTxnAuth
	}
	return s.group(kmsg.ACLOperationDescribe, key), errGroupAuth
}

func authzFindCoordinator(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.FindCoordinatorRequest)
	if r.Version < 4 {
		if ok, code := s.coordinatorAllowed(req.CoordinatorType, req.CoordinatorKey); !ok {
			resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
			resp.ErrorCode, resp.NodeID, resp.Port = code, -1, -1
			return &Reply{Msg: resp}, nil
		}
		return next(ctx, b, r)
	}
	var denied []kmsg.FindCoordinatorResponseCoordinator
	req.CoordinatorKeys, _ = split(req.CoordinatorKeys, func(k *string) bool {
		ok, code := s.coordinatorAllowed(req.CoordinatorType, *k)
		if !ok {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.NodeID, c.Port, c.ErrorCode = *k, -1, -1, code
			denied = append(denied, c)
		}
		return ok
	})
	if len(denied) == 0 {
		return next(ctx, b, r)
	}
	rep, err := nextIf(len(req.CoordinatorKeys) > 0, ctx, b, r, next)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.FindCoordinatorResponse)
	resp.Coordinators = append(resp.Coordinators, denied...)
	return rep, nil
}

func authzDescribeGroups(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeGroupsRequest)
	var denied []string
	req.Groups, denied = split(req.Groups, func(g *string) bool { return s.group(kmsg.ACLOperationDescribe, *g) })
	rep, err := nextIf(len(req.Groups) > 0, ctx, b, r, next)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.DescribeGroupsResponse)
	if req.IncludeAuthorizedOperations {
		for i := range resp.Groups {
			if g := &resp.Groups[i]; g.ErrorCode == 0 {
				g.AuthorizedOperations = s.authorizedOps(kmsg.ACLResourceTypeGroup, g.Group, groupOps...)
			}
		}
	}
	for _, name := range denied {
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group, g.ErrorCode = name, errGroupAuth
		resp.Groups = append(resp.Groups, g)
	}
	return rep, nil
}

func authzListGroups(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	rep, err := next(ctx, b, r)
	if err != nil || s.cluster(kmsg.ACLOperationDescribe) {
		return rep, err
	}
	resp := rep.Msg.(*kmsg.ListGroupsResponse)
	resp.Groups, _ = split(resp.Groups, func(g *kmsg.ListGroupsResponseGroup) bool { return s.group(kmsg.ACLOperationDescribe, g.Group) })
	return rep, nil
}

func authzDeleteGroups(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.DeleteGroupsRequest)
	return perResource(ctx, b, r, next, &req.Groups,
		func(g *string) bool { return s.group(kmsg.ACLOperationDelete, *g) },
		func(g *string) kmsg.DeleteGroupsResponseGroup {
			rg := kmsg.NewDeleteGroupsResponseGroup()
			rg.Group, rg.ErrorCode = *g, errGroupAuth
			return rg
		},
		func(m kmsg.Response) *[]kmsg.DeleteGroupsResponseGroup { return &m.(*kmsg.DeleteGroupsResponse).Groups })
}

func authzOffsetDelete(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.OffsetDeleteRequest)
	if !s.group(kmsg.ACLOperationDelete, req.Group) {
		return topError(r, errGroupAuth), nil
	}
	return perResource(ctx, b, r, next, &req.Topics,
		func(t *kmsg.OffsetDeleteRequestTopic) bool { return s.topic(kmsg.ACLOperationRead, t.Topic) },
		func(t *kmsg.OffsetDeleteRequestTopic) kmsg.OffsetDeleteResponseTopic {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, errTopicAuth
				rt.Partitions = append(rt.Partitions, rp)
			}
			return rt
		},
		func(m kmsg.Response) *[]kmsg.OffsetDeleteResponseTopic { return &m.(*kmsg.OffsetDeleteResponse).Topics })
}

func authzConsumerGroupHeartbeat(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.ConsumerGroupHeartbeatRequest)
	if !s.group(kmsg.ACLOperationRead, req.Group) {
		return topError(r, errGroupAuth), nil
	}
	for _, t := range req.SubscribedTopicNames {
		if !s.topic(kmsg.ACLOperationDescribe, t) {
			rep := topError(r, errTopicAuth)
			msg := fmt.Sprintf("not authorized to describe topic %q", t)
			rep.Msg.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorMessage = &msg
			return rep, nil
		}
	}
	return next(ctx, b, r)
}

// errGroupHasHiddenTopics is Kafka's message for a described group
// assigned a topic the client may not DESCRIBE (KAFKA-18813, KAFKA-18817).
const errGroupHasHiddenTopics = "The group has described topic(s) that the client is not authorized to describe."

// authzConsumerGroupDescribe: DESCRIBE on each group; a group whose
// members are assigned (or to be assigned) a topic the client may not
// DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED alone, so that no topic
// name leaks (Kafka 4.0, KAFKA-18813).
func authzConsumerGroupDescribe(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.ConsumerGroupDescribeRequest)
	var denied []string
	req.Groups, denied = split(req.Groups, func(g *string) bool { return s.group(kmsg.ACLOperationDescribe, *g) })
	rep, err := nextIf(len(req.Groups) > 0, ctx, b, r, next)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.ConsumerGroupDescribeResponse)
	for i := range resp.Groups {
		g := &resp.Groups[i]
		if g.ErrorCode != 0 {
			continue
		}
		hidden := false
		for _, m := range g.Members {
			for _, a := range []kmsg.Assignment{m.Assignment, m.TargetAssignment} {
				for _, tp := range a.TopicPartitions {
					hidden = hidden || !s.topic(kmsg.ACLOperationDescribe, tp.Topic)
				}
			}
		}
		if hidden {
			d := kmsg.NewConsumerGroupDescribeResponseGroup()
			d.Group, d.ErrorCode, d.ErrorMessage = g.Group, errTopicAuth, kmsg.StringPtr(errGroupHasHiddenTopics)
			*g = d
		}
	}
	if req.IncludeAuthorizedOperations {
		for i := range resp.Groups {
			if g := &resp.Groups[i]; g.ErrorCode == 0 {
				g.AuthorizedOperations = s.authorizedOps(kmsg.ACLResourceTypeGroup, g.Group, groupOps...)
			}
		}
	}
	for _, name := range denied {
		g := kmsg.NewConsumerGroupDescribeResponseGroup()
		g.Group, g.ErrorCode = name, errGroupAuth
		resp.Groups = append(resp.Groups, g)
	}
	return rep, nil
}

// ---- share groups (KIP-932): READ on the group, READ on the topics ----

func authzShareGroupHeartbeat(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.ShareGroupHeartbeatRequest)
	if !s.group(kmsg.ACLOperationRead, req.GroupID) {
		return topError(r, errGroupAuth), nil
	}
	for _, t := range req.SubscribedTopicNames {
		if !s.topic(kmsg.ACLOperationDescribe, t) {
			rep := topError(r, errTopicAuth)
			msg := fmt.Sprintf("not authorized to describe topic %q", t)
			rep.Msg.(*kmsg.ShareGroupHeartbeatResponse).ErrorMessage = &msg
			return rep, nil
		}
	}
	return next(ctx, b, r)
}

// authzShareGroupDescribe: as authzConsumerGroupDescribe, over the
// members' assignments (KAFKA-18817).
func authzShareGroupDescribe(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.ShareGroupDescribeRequest)
	var denied []string
	req.GroupIDs, denied = split(req.GroupIDs, func(g *string) bool { return s.group(kmsg.ACLOperationDescribe, *g) })
	rep, err := nextIf(len(req.GroupIDs) > 0, ctx, b, r, next)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.ShareGroupDescribeResponse)
	for i := range resp.Groups {
		g := &resp.Groups[i]
		if g.ErrorCode != 0 {
			continue
		}
		hidden := false
		for _, m := range g.Members {
			for _, tp := range m.Assignment.TopicPartitions {
				hidden = hidden || !s.topic(kmsg.ACLOperationDescribe, tp.Topic)
			}
		}
		if hidden {
			d := kmsg.NewShareGroupDescribeResponseGroup()
			d.GroupID, d.ErrorCode, d.ErrorMessage = g.GroupID, errTopicAuth, kmsg.StringPtr(errGroupHasHiddenTopics)
			*g = d
		}
	}
	if req.IncludeAuthorizedOperations {
		for i := range resp.Groups {
			if g := &resp.Groups[i]; g.ErrorCode == 0 {
				g.AuthorizedOperations = s.authorizedOps(kmsg.ACLResourceTypeGroup, g.GroupID, groupOps...)
			}
		}
	}
	for _, name := range denied {
		g := kmsg.NewShareGroupDescribeResponseGroup()
		g.GroupID, g.ErrorCode = name, errGroupAuth
		resp.Groups = append(resp.Groups, g)
	}
	return rep, nil
}

// shareTopicAllowed: READ on the topic of id (an unknown id is left to the
// handler, which answers UNKNOWN_TOPIC_ID).
func shareTopicAllowed(b *Broker, s *subject, id [16]byte) bool {
	t, ok := b.meta.State().TopicByID(metadata.UUID(id))
	return !ok || s.topic(kmsg.ACLOperationRead, t.Name)
}

func authzShareFetch(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.ShareFetchRequest)
	if req.GroupID == nil || !s.group(kmsg.ACLOperationRead, *req.GroupID) {
		return topError(r, errGroupAuth), nil
	}
	var denied []kmsg.ShareFetchRequestTopic
	req.Topics, denied = split(req.Topics, func(t *kmsg.ShareFetchRequestTopic) bool { return shareTopicAllowed(b, s, t.TopicID) })
	rep, err := next(ctx, b, r)
	if err != nil || len(denied) == 0 {
		return rep, err
	}
	resp := rep.Msg.(*kmsg.ShareFetchResponse)
	for _, t := range denied {
		rt := kmsg.NewShareFetchResponseTopic()
		rt.TopicID = t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewShareFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.Records = p.Partition, errTopicAuth, []byte{}
			if len(p.AcknowledgementBatches) > 0 {
				rp.AcknowledgeErrorCode = errTopicAuth
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return rep, nil
}

func authzShareAcknowledge(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.ShareAcknowledgeRequest)
	if req.GroupID == nil || !s.group(kmsg.ACLOperationRead, *req.GroupID) {
		return topError(r, errGroupAuth), nil
	}
	var denied []kmsg.ShareAcknowledgeRequestTopic
	req.Topics, denied = split(req.Topics, func(t *kmsg.ShareAcknowledgeRequestTopic) bool { return shareTopicAllowed(b, s, t.TopicID) })
	rep, err := next(ctx, b, r)
	if err != nil || len(denied) == 0 {
		return rep, err
	}
	resp := rep.Msg.(*kmsg.ShareAcknowledgeResponse)
	for _, t := range denied {
		rt := kmsg.NewShareAcknowledgeResponseTopic()
		rt.TopicID = t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, errTopicAuth
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return rep, nil
}

func authzDescribeShareGroupOffsets(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeShareGroupOffsetsRequest)
	var denied []kmsg.DescribeShareGroupOffsetsRequestGroup
	req.Groups, denied = split(req.Groups, func(g *kmsg.DescribeShareGroupOffsetsRequestGroup) bool {
		return s.group(kmsg.ACLOperationDescribe, g.GroupID)
	})
	rep, err := nextIf(len(req.Groups) > 0, ctx, b, r, next)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.DescribeShareGroupOffsetsResponse)
	for i := range resp.Groups {
		g := &resp.Groups[i]
		// Topics the principal may not describe are left out (names do
		// not leak) or, when asked for by name, refused.
		kept := g.Topics[:0]
		for _, t := range g.Topics {
			if s.topic(kmsg.ACLOperationDescribe, t.Topic) {
				kept = append(kept, t)
				continue
			}
			if req.Groups[i].Topics != nil {
				for j := range t.Partitions {
					t.Partitions[j].ErrorCode, t.Partitions[j].StartOffset, t.Partitions[j].Lag = errTopicAuth, -1, -1
				}
				t.TopicID = [16]byte{}
				kept = append(kept, t)
			}
		}
		g.Topics = kept
	}
	for _, d := range denied {
		g := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		g.GroupID, g.ErrorCode = d.GroupID, errGroupAuth
		resp.Groups = append(resp.Groups, g)
	}
	return rep, nil
}

// AlterShareGroupOffsets: READ on the group and on each topic (Kafka's).
func authzAlterShareGroupOffsets(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.AlterShareGroupOffsetsRequest)
	if !s.group(kmsg.ACLOperationRead, req.GroupID) {
		return topError(r, errGroupAuth), nil
	}
	var denied []kmsg.AlterShareGroupOffsetsRequestTopic
	req.Topics, denied = split(req.Topics, func(t *kmsg.AlterShareGroupOffsetsRequestTopic) bool { return s.topic(kmsg.ACLOperationRead, t.Topic) })
	rep, err := next(ctx, b, r)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.AlterShareGroupOffsetsResponse)
	for _, t := range denied {
		rt := kmsg.NewAlterShareGroupOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, errTopicAuth
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return rep, nil
}

// DeleteShareGroupOffsets: DELETE on the group, READ on each topic (Kafka's).
func authzDeleteShareGroupOffsets(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.DeleteShareGroupOffsetsRequest)
	if !s.group(kmsg.ACLOperationDelete, req.GroupID) {
		return topError(r, errGroupAuth), nil
	}
	var denied []kmsg.DeleteShareGroupOffsetsRequestTopic
	req.Topics, denied = split(req.Topics, func(t *kmsg.DeleteShareGroupOffsetsRequestTopic) bool { return s.topic(kmsg.ACLOperationRead, t.Topic) })
	rep, err := next(ctx, b, r)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.DeleteShareGroupOffsetsResponse)
	for _, t := range denied {
		rt := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
		rt.Topic, rt.ErrorCode = t.Topic, errTopicAuth
		resp.Topics = append(resp.Topics, rt)
	}
	return rep, nil
}

// ---- topics ----

func authzCreateTopics(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.CreateTopicsRequest)
	var denied []kmsg.CreateTopicsRequestTopic
	req.Topics, denied = split(req.Topics, func(t *kmsg.CreateTopicsRequestTopic) bool { return s.canCreateTopic(t.Topic) })
	rep, err := nextIf(len(req.Topics) > 0, ctx, b, r, next)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.CreateTopicsResponse)
	// The configs of a created topic only with DESCRIBE_CONFIGS on it.
	for i := range resp.Topics {
		if t := &resp.Topics[i]; t.ErrorCode == 0 && !s.topic(kmsg.ACLOperationDescribeConfigs, t.Topic) {
			t.ConfigErrorCode, t.Configs, t.NumPartitions, t.ReplicationFactor = errTopicAuth, nil, -1, -1
		}
	}
	for _, t := range denied {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.ErrorCode, rt.NumPartitions, rt.ReplicationFactor = t.Topic, errTopicAuth, -1, -1
		resp.Topics = append(resp.Topics, rt)
	}
	return rep, nil
}

func authzDeleteTopics(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.DeleteTopicsRequest)
	var denied []kmsg.DeleteTopicsResponseTopic
	deny := func(name *string, id [16]byte) {
		t := kmsg.NewDeleteTopicsResponseTopic()
		t.Topic, t.TopicID, t.ErrorCode = name, id, errTopicAuth
		denied = append(denied, t)
	}
	if r.Version < 6 {
		req.TopicNames, _ = split(req.TopicNames, func(n *string) bool {
			ok := s.topic(kmsg.ACLOperationDelete, *n)
			if !ok {
				deny(kmsg.StringPtr(*n), [16]byte{})
			}
			return ok
		})
	} else {
		st := b.meta.State()
		req.Topics, _ = split(req.Topics, func(t *kmsg.DeleteTopicsRequestTopic) bool {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			} else if name = topicName(st, "", t.TopicID); name == "" {
				return true // unknown ID: the handler's answer
			}
			ok := s.topic(kmsg.ACLOperationDelete, name)
			if !ok {
				if t.Topic != nil {
					deny(t.Topic, [16]byte{})
				} else {
					deny(nil, t.TopicID)
				}
			}
			return ok
		})
	}
	if len(denied) == 0 {
		return next(ctx, b, r)
	}
	rep, err := nextIf(len(req.TopicNames)+len(req.Topics) > 0, ctx, b, r, next)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.DeleteTopicsResponse)
	resp.Topics = append(resp.Topics, denied...)
	return rep, nil
}

func authzDeleteRecords(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.DeleteRecordsRequest)
	return perResource(ctx, b, r, next, &req.Topics,
		func(t *kmsg.DeleteRecordsRequestTopic) bool { return s.topic(kmsg.ACLOperationDelete, t.Topic) },
		func(t *kmsg.DeleteRecordsRequestTopic) kmsg.DeleteRecordsResponseTopic {
			rt := kmsg.NewDeleteRecordsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewDeleteRecordsResponseTopicPartition()
				rp.Partition, rp.LowWatermark, rp.ErrorCode = p.Partition, -1, errTopicAuth
				rt.Partitions = append(rt.Partitions, rp)
			}
			return rt
		},
		func(m kmsg.Response) *[]kmsg.DeleteRecordsResponseTopic {
			return &m.(*kmsg.DeleteRecordsResponse).Topics
		})
}

func authzCreatePartitions(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.CreatePartitionsRequest)
	return perResource(ctx, b, r, next, &req.Topics,
		func(t *kmsg.CreatePartitionsRequestTopic) bool { return s.topic(kmsg.ACLOperationAlter, t.Topic) },
		func(t *kmsg.CreatePartitionsRequestTopic) kmsg.CreatePartitionsResponseTopic {
			rt := kmsg.NewCreatePartitionsResponseTopic()
			rt.Topic, rt.ErrorCode = t.Topic, errTopicAuth
			return rt
		},
		func(m kmsg.Response) *[]kmsg.CreatePartitionsResponseTopic {
			return &m.(*kmsg.CreatePartitionsResponse).Topics
		})
}

func authzOffsetForLeaderEpoch(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.OffsetForLeaderEpochRequest)
	allow, code := func(t *kmsg.OffsetForLeaderEpochRequestTopic) bool {
		return s.topic(kmsg.ACLOperationDescribe, t.Topic)
	}, errTopicAuth
	if r.Version >= 3 && req.ReplicaID >= 0 { // a follower: all or nothing
		ok := s.cluster(kmsg.ACLOperationClusterAction)
		allow, code = func(*kmsg.OffsetForLeaderEpochRequestTopic) bool { return ok }, errClusterAuth
	}
	return perResource(ctx, b, r, next, &req.Topics, allow,
		func(t *kmsg.OffsetForLeaderEpochRequestTopic) kmsg.OffsetForLeaderEpochResponseTopic {
			rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.LeaderEpoch, rp.EndOffset = p.Partition, code, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			return rt
		},
		func(m kmsg.Response) *[]kmsg.OffsetForLeaderEpochResponseTopic {
			return &m.(*kmsg.OffsetForLeaderEpochResponse).Topics
		})
}

func authzDescribeProducers(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeProducersRequest)
	return perResource(ctx, b, r, next, &req.Topics,
		func(t *kmsg.DescribeProducersRequestTopic) bool { return s.topic(kmsg.ACLOperationRead, t.Topic) },
		func(t *kmsg.DescribeProducersRequestTopic) kmsg.DescribeProducersResponseTopic {
			rt := kmsg.NewDescribeProducersResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewDescribeProducersResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, errTopicAuth
				rt.Partitions = append(rt.Partitions, rp)
			}
			return rt
		},
		func(m kmsg.Response) *[]kmsg.DescribeProducersResponseTopic {
			return &m.(*kmsg.DescribeProducersResponse).Topics
		})
}

func authzElectLeaders(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	if s.cluster(kmsg.ACLOperationAlter) {
		return next(ctx, b, r)
	}
	req := r.Msg.(*kmsg.ElectLeadersRequest)
	resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
	resp.ErrorCode = errClusterAuth
	for _, t := range req.Topics { // v0 has no top-level error
		rt := kmsg.NewElectLeadersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewElectLeadersResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, errClusterAuth
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}

// ---- transactions and idempotence ----

func authzInitProducerID(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.InitProducerIDRequest)
	if req.TransactionalID != nil {
		if !s.txnID(kmsg.ACLOperationWrite, *req.TransactionalID) {
			return topError(r, errTxnAuth), nil
		}
	} else if !s.cluster(kmsg.ACLOperationIdempotentWrite) && !s.writeAnyTopic() {
		return topError(r, errClusterAuth), nil
	}
	return next(ctx, b, r)
}

func authzAddPartitionsToTxn(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.AddPartitionsToTxnRequest)
	if r.Version >= 4 { // from brokers (KIP-890 verification)
		if !s.cluster(kmsg.ACLOperationClusterAction) {
			return topError(r, errClusterAuth), nil
		}
		return next(ctx, b, r)
	}
	txnOK := s.txnID(kmsg.ACLOperationWrite, req.TransactionalID)
	anyDenied := false
	for _, t := range req.Topics {
		if !s.topic(kmsg.ACLOperationWrite, t.Topic) {
			anyDenied = true
		}
	}
	if txnOK && !anyDenied {
		return next(ctx, b, r)
	}
	// As Kafka: nothing is added; the denied partitions say why, the
	// others OPERATION_NOT_ATTEMPTED.
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	for _, t := range req.Topics {
		code := errTxnAuth
		if txnOK {
			code = kerr.OperationNotAttempted.Code
			if !s.topic(kmsg.ACLOperationWrite, t.Topic) {
				code = errTopicAuth
			}
		}
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}

func authzAddOffsetsToTxn(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.AddOffsetsToTxnRequest)
	if !s.txnID(kmsg.ACLOperationWrite, req.TransactionalID) {
		return topError(r, errTxnAuth), nil
	}
	if !s.group(kmsg.ACLOperationRead, req.Group) {
		return topError(r, errGroupAuth), nil
	}
	return next(ctx, b, r)
}

func authzWriteTxnMarkers(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	if s.cluster(kmsg.ACLOperationClusterAction) {
		return next(ctx, b, r)
	}
	req := r.Msg.(*kmsg.WriteTxnMarkersRequest)
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	for _, m := range req.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		for _, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition, rp.ErrorCode = p, errClusterAuth
				rt.Partitions = append(rt.Partitions, rp)
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	return &Reply{Msg: resp}, nil
}

func authzTxnOffsetCommit(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.TxnOffsetCommitRequest)
	ok := topicAllowed(b.meta.State(), s, kmsg.ACLOperationRead)
	allow, code := func(t *kmsg.TxnOffsetCommitRequestTopic) bool { return ok(t.Topic, t.TopicID) }, errTopicAuth
	switch none := func(*kmsg.TxnOffsetCommitRequestTopic) bool { return false }; {
	case !s.txnID(kmsg.ACLOperationWrite, req.TransactionalID):
		allow, code = none, errTxnAuth
	case !s.group(kmsg.ACLOperationRead, req.Group):
		allow, code = none, errGroupAuth
	}
	return perResource(ctx, b, r, next, &req.Topics, allow,
		func(t *kmsg.TxnOffsetCommitRequestTopic) kmsg.TxnOffsetCommitResponseTopic {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			return rt
		},
		func(m kmsg.Response) *[]kmsg.TxnOffsetCommitResponseTopic {
			return &m.(*kmsg.TxnOffsetCommitResponse).Topics
		})
}

func authzDescribeTransactions(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeTransactionsRequest)
	var denied []string
	req.TransactionalIDs, denied = split(req.TransactionalIDs, func(id *string) bool { return s.txnID(kmsg.ACLOperationDescribe, *id) })
	rep, err := nextIf(len(req.TransactionalIDs) > 0, ctx, b, r, next)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.DescribeTransactionsResponse)
	for i := range resp.TransactionStates {
		ts := &resp.TransactionStates[i]
		ts.Topics, _ = split(ts.Topics, func(t *kmsg.DescribeTransactionsResponseTransactionStateTopic) bool {
			return s.topic(kmsg.ACLOperationDescribe, t.Topic)
		})
	}
	for _, id := range denied {
		ts := kmsg.NewDescribeTransactionsResponseTransactionState()
		ts.TransactionalID, ts.ErrorCode, ts.ProducerID, ts.ProducerEpoch = id, errTxnAuth, -1, -1
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return rep, nil
}

func authzListTransactions(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	rep, err := next(ctx, b, r)
	if err != nil {
		return nil, err
	}
	resp := rep.Msg.(*kmsg.ListTransactionsResponse)
	resp.TransactionStates, _ = split(resp.TransactionStates, func(ts *kmsg.ListTransactionsResponseTransactionState) bool {
		return s.txnID(kmsg.ACLOperationDescribe, ts.TransactionalID)
	})
	return rep, nil
}

// ---- cluster, configs, ACLs ----

func authzDescribeCluster(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	rep, err := next(ctx, b, r)
	if err != nil {
		return nil, err
	}
	if r.Msg.(*kmsg.DescribeClusterRequest).IncludeClusterAuthorizedOperations {
		rep.Msg.(*kmsg.DescribeClusterResponse).ClusterAuthorizedOperations = s.authorizedOps(kmsg.ACLResourceTypeCluster, "kafka-cluster", clusterOps...)
	}
	return rep, nil
}

func authzCreateACLs(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	if s.cluster(kmsg.ACLOperationAlter) {
		return next(ctx, b, r)
	}
	req := r.Msg.(*kmsg.CreateACLsRequest)
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	for range req.Creations {
		res := kmsg.NewCreateACLsResponseResult()
		res.ErrorCode = errClusterAuth
		resp.Results = append(resp.Results, res)
	}
	return &Reply{Msg: resp}, nil
}

func authzDeleteACLs(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	if s.cluster(kmsg.ACLOperationAlter) {
		return next(ctx, b, r)
	}
	req := r.Msg.(*kmsg.DeleteACLsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	for range req.Filters {
		res := kmsg.NewDeleteACLsResponseResult()
		res.ErrorCode = errClusterAuth
		resp.Results = append(resp.Results, res)
	}
	return &Reply{Msg: resp}, nil
}

func authzAlterClientQuotas(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	if s.cluster(kmsg.ACLOperationAlterConfigs) {
		return next(ctx, b, r)
	}
	req := r.Msg.(*kmsg.AlterClientQuotasRequest)
	resp := req.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	for _, e := range req.Entries {
		re := kmsg.NewAlterClientQuotasResponseEntry()
		re.ErrorCode = errClusterAuth
		for _, en := range e.Entity {
			ren := kmsg.NewAlterClientQuotasResponseEntryEntity()
			ren.Type, ren.Name = en.Type, en.Name
			re.Entity = append(re.Entity, ren)
		}
		resp.Entries = append(resp.Entries, re)
	}
	return &Reply{Msg: resp}, nil
}

func authzAlterUserSCRAM(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	if s.cluster(kmsg.ACLOperationAlter) {
		return next(ctx, b, r)
	}
	req := r.Msg.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	seen := map[string]bool{}
	add := func(user string) {
		if seen[user] {
			return
		}
		seen[user] = true
		res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		res.User, res.ErrorCode = user, errClusterAuth
		resp.Results = append(resp.Results, res)
	}
	for _, d := range req.Deletions {
		add(d.Name)
	}
	for _, u := range req.Upsertions {
		add(u.Name)
	}
	return &Reply{Msg: resp}, nil
}

// configAllowed: op (DESCRIBE_CONFIGS or ALTER_CONFIGS) on a config
// resource: a topic, a group, or the cluster for brokers and loggers.
func (s *subject) configAllowed(op kmsg.ACLOperation, rt kmsg.ConfigResourceType, name string) bool {
	switch rt {
	case kmsg.ConfigResourceTypeTopic:
		return s.topic(op, name)
	case kmsg.ConfigResourceTypeGroupConfig:
		return s.group(op, name)
	default:
		return s.cluster(op)
	}
}

// configAuthCode is the error of a denied config resource.
func configAuthCode(rt kmsg.ConfigResourceType) int16 {
	switch rt {
	case kmsg.ConfigResourceTypeTopic:
		return errTopicAuth
	case kmsg.ConfigResourceTypeGroupConfig:
		return errGroupAuth
	}
	return errClusterAuth
}

func authzDescribeConfigs(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeConfigsRequest)
	return perResource(ctx, b, r, next, &req.Resources,
		func(x *kmsg.DescribeConfigsRequestResource) bool {
			return s.configAllowed(kmsg.ACLOperationDescribeConfigs, x.ResourceType, x.ResourceName)
		},
		func(x *kmsg.DescribeConfigsRequestResource) kmsg.DescribeConfigsResponseResource {
			d := kmsg.NewDescribeConfigsResponseResource()
			d.ResourceType, d.ResourceName, d.ErrorCode = x.ResourceType, x.ResourceName, configAuthCode(x.ResourceType)
			return d
		},
		func(m kmsg.Response) *[]kmsg.DescribeConfigsResponseResource {
			return &m.(*kmsg.DescribeConfigsResponse).Resources
		})
}

func authzAlterConfigs(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.AlterConfigsRequest)
	return perResource(ctx, b, r, next, &req.Resources,
		func(x *kmsg.AlterConfigsRequestResource) bool {
			return s.configAllowed(kmsg.ACLOperationAlterConfigs, x.ResourceType, x.ResourceName)
		},
		func(x *kmsg.AlterConfigsRequestResource) kmsg.AlterConfigsResponseResource {
			d := kmsg.NewAlterConfigsResponseResource()
			d.ResourceType, d.ResourceName, d.ErrorCode = x.ResourceType, x.ResourceName, configAuthCode(x.ResourceType)
			return d
		},
		func(m kmsg.Response) *[]kmsg.AlterConfigsResponseResource {
			return &m.(*kmsg.AlterConfigsResponse).Resources
		})
}

func authzIncrementalAlterConfigs(ctx context.Context, b *Broker, s *subject, r *Request, next Handler) (*Reply, error) {
	req := r.Msg.(*kmsg.IncrementalAlterConfigsRequest)
	return perResource(ctx, b, r, next, &req.Resources,
		func(x *kmsg.IncrementalAlterConfigsRequestResource) bool {
			return s.configAllowed(kmsg.ACLOperationAlterConfigs, x.ResourceType, x.ResourceName)
		},
		func(x *kmsg.IncrementalAlterConfigsRequestResource) kmsg.IncrementalAlterConfigsResponseResource {
			d := kmsg.NewIncrementalAlterConfigsResponseResource()
			d.ResourceType, d.ResourceName, d.ErrorCode = x.ResourceType, x.ResourceName, configAuthCode(x.ResourceType)
			return d
		},
		func(m kmsg.Response) *[]kmsg.IncrementalAlterConfigsResponseResource {
			return &m.(*kmsg.IncrementalAlterConfigsResponse).Resources
		})
}
