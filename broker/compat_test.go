package broker

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sediment-io/sediment/metadata"
)

// Regression tests for what real clients other than franz-go send (see
// docs/compatibility.md and e2e/compat_*_test.go).

// TestCreateTopicsDefaultsAtOldVersions: kafkajs 2.2.4 sends CreateTopics v3
// with replication factor -1 (and partitions -1 unless told); Kafka's broker
// takes the defaults at every version, so must we.
func TestCreateTopicsDefaultsAtOldVersions(t *testing.T) {
	b := startBroker(t, "")
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i, v := range []int16{2, 3} {
		r := kmsg.NewPtrCreateTopicsRequest()
		r.SetVersion(v)
		r.TimeoutMillis = 5000
		tp := kmsg.NewCreateTopicsRequestTopic()
		tp.Topic = []string{"kafkajs-like-v2", "kafkajs-like-v3"}[i]
		tp.NumPartitions, tp.ReplicationFactor = 3, -1
		tp2 := kmsg.NewCreateTopicsRequestTopic()
		tp2.Topic = tp.Topic + "-all-defaults"
		tp2.NumPartitions, tp2.ReplicationFactor = -1, -1
		r.Topics = append(r.Topics, tp, tp2)
		resp := rawRequest(t, nc, r, int32(i+1)).(*kmsg.CreateTopicsResponse)
		for _, rt := range resp.Topics {
			if rt.ErrorCode != 0 {
				t.Errorf("CreateTopics v%d %s: error %d (%v)", v, rt.Topic, rt.ErrorCode, rt.ErrorMessage)
			}
		}
		mt, ok := b.meta.State().Topic(tp.Topic)
		if !ok || len(mt.Partitions) != 3 {
			t.Errorf("v%d: %s not created with 3 partitions", v, tp.Topic)
		}
	}
}

// TestElectLeaders: kafka-go 0.4.51's TestClientElectLeaders (v2) and
// sarama 1.61.1's TestFuncAdminElectLeadersV1 (v1) call ElectLeaders, which
// the broker did not serve (the connection closed). Every version decodes
// and answers per partition; a preferred replica that is fenced and out of
// the ISR is PREFERRED_LEADER_NOT_AVAILABLE, one in the ISR is made leader
// at once (the controller's own return of leadership waits for its leader
// imbalance check, 300 s after it saw the imbalance by default, so the
// election here is the request's).
func TestElectLeaders(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	cl := newClient(t, b)
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	propose := func(cmd metadata.Command) metadata.Result { t.Helper(); return mustPropose(t, b, cmd) }
	self := b.cfg.NodeID
	// This broker registers and is unfenced by its first heartbeat.
	waitUnfenced(t, b)
	// Broker self+1 is registered and fenced (it never heartbeats): a topic
	// whose preferred replica it is gets this broker as its leader.
	reg := propose(&metadata.RegisterBroker{BrokerID: self + 1, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1,
		Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 1}}})
	id := propose(&metadata.CreateTopic{Name: "elect-pref", Assignment: [][]int32{{self + 1, self}}}).TopicID
	propose(&metadata.CreateTopic{Name: "elect-self", Assignment: [][]int32{{self}, {self}}})

	elect := func(v int16, typ int8, topics map[string][]int32, corr int32) *kmsg.ElectLeadersResponse {
		t.Helper()
		req := kmsg.NewPtrElectLeadersRequest()
		req.SetVersion(v)
		req.ElectionType, req.TimeoutMillis = typ, 10000
		if topics == nil {
			req.Topics = nil
		}
		for name, parts := range topics {
			rt := kmsg.NewElectLeadersRequestTopic()
			rt.Topic, rt.Partitions = name, parts
			req.Topics = append(req.Topics, rt)
		}
		resp := rawRequest(t, nc, req, corr).(*kmsg.ElectLeadersResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("v%d: top-level error %d", v, resp.ErrorCode)
		}
		return resp
	}
	codes := func(resp *kmsg.ElectLeadersResponse) map[string][]int16 {
		out := map[string][]int16{}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				out[rt.Topic] = append(out[rt.Topic], rp.ErrorCode)
			}
		}
		return out
	}
	notNeeded, prefNA, unknown := kerr.ElectionNotNeeded.Code, kerr.PreferredLeaderNotAvailable.Code, kerr.UnknownTopicOrPartition.Code
	for v := int16(0); v <= 2; v++ {
		got := codes(elect(v, 0, map[string][]int32{"elect-self": {0, 1}, "elect-pref": {0}, "nope": {0}}, int32(10+v)))
		want := map[string][]int16{"elect-self": {notNeeded, notNeeded}, "elect-pref": {prefNA}, "nope": {unknown}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("preferred election v%d: %v, want %v", v, got, want)
		}
	}
	if got := codes(elect(2, 1, map[string][]int32{"elect-self": {0}}, 20)); !reflect.DeepEqual(got, map[string][]int16{"elect-self": {notNeeded}}) {
		t.Errorf("unclean election of a partition with a leader: %v", got)
	}
	// Every partition (null topics): those that need no election are left out.
	for _, v := range []int16{1, 2} {
		if got := codes(elect(v, 0, nil, int32(30+v))); !reflect.DeepEqual(got, map[string][]int16{"elect-pref": {prefNA}}) {
			t.Errorf("v%d all partitions: %v", v, got)
		}
	}
	// An unknown election type is INVALID_REQUEST.
	req := kmsg.NewPtrElectLeadersRequest()
	req.SetVersion(2)
	req.ElectionType = 5
	if resp := rawRequest(t, nc, req, 40).(*kmsg.ElectLeadersResponse); resp.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("election type 5: error %d, want INVALID_REQUEST", resp.ErrorCode)
	}

	// Broker self+1 comes back and catches up: in the ISR, it is elected.
	propose(&metadata.BrokerHeartbeat{BrokerID: self + 1, BrokerEpoch: reg.BrokerEpoch})
	p, _ := b.meta.State().Partition(id, 0)
	propose(&metadata.ChangeLeaderAndISR{TopicID: id, Partition: 0, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
		Leader: p.Leader, ISR: []int32{self, self + 1}})
	got := codes(elect(2, 0, map[string][]int32{"elect-pref": {0}}, 50))["elect-pref"]
	if len(got) != 1 || got[0] != 0 {
		t.Errorf("preferred replica in the ISR: %v, want no error", got)
	}
	if p, _ := b.meta.State().Partition(id, 0); p.Leader != self+1 {
		t.Errorf("leader %d after the election, want %d", p.Leader, self+1)
	}
	// And through a client: kadm's ElectLeaders.
	res, err := kadm.NewClient(cl).ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"elect-self": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res["elect-self"][0]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
		t.Errorf("kadm ElectLeaders: %+v", r)
	}
}

// TestElectLeadersUnclean: an unclean election (type 1, kadm's
// ElectLiveReplica, kafka-leader-election.sh --election-type unclean) of a
// partition without a leader elects an eligible replica from outside the
// ISR, unclean.leader.election.enable being off, and the ISR becomes that
// replica alone, as in Kafka; it was always ELIGIBLE_LEADERS_NOT_AVAILABLE.
// With no eligible replica it still is; with a leader, ELECTION_NOT_NEEDED.
func TestElectLeadersUnclean(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	propose := func(cmd metadata.Command) metadata.Result { t.Helper(); return mustPropose(t, b, cmd) }
	self := b.cfg.NodeID
	waitUnfenced(t, b)
	// Broker self+1 leads both topics with itself the only ISR member,
	// then is fenced: they have no leader, and this broker, a replica of
	// "unclean-one" outside its ISR, is not elected (the topic does not
	// allow unclean election).
	other := self + 1
	reg := propose(&metadata.RegisterBroker{BrokerID: other, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1,
		Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 1}}})
	propose(&metadata.BrokerHeartbeat{BrokerID: other, BrokerEpoch: reg.BrokerEpoch})
	one := propose(&metadata.CreateTopic{Name: "unclean-one", Assignment: [][]int32{{other, self}}}).TopicID
	none := propose(&metadata.CreateTopic{Name: "unclean-none", Assignment: [][]int32{{other}}}).TopicID
	p, _ := b.meta.State().Partition(one, 0)
	propose(&metadata.ChangeLeaderAndISR{TopicID: one, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, Leader: other, ISR: []int32{other}})
	propose(&metadata.FenceBroker{BrokerID: other, BrokerEpoch: -1})
	before, _ := b.meta.State().Partition(one, 0)
	if before.Leader != metadata.NoLeader || !slices.Equal(before.ISR, []int32{other}) {
		t.Fatalf("before the election: leader %d ISR %v, want none and [%d]", before.Leader, before.ISR, other)
	}

	res, err := adm.ElectLeaders(ctx, kadm.ElectLiveReplica, kadm.TopicsSet{"unclean-one": {0: {}}, "unclean-none": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res["unclean-one"][0]; r.Err != nil {
		t.Errorf("unclean election with an eligible replica outside the ISR: %v %s", r.Err, r.ErrMessage)
	}
	if r := res["unclean-none"][0]; !errors.Is(r.Err, kerr.EligibleLeadersNotAvailable) {
		t.Errorf("unclean election with no eligible replica: %v, want ELIGIBLE_LEADERS_NOT_AVAILABLE", r.Err)
	}
	// Committed before the answer.
	after, _ := b.meta.State().Partition(one, 0)
	if after.Leader != self || !slices.Equal(after.ISR, []int32{self}) || after.LeaderEpoch != before.LeaderEpoch+1 {
		t.Errorf("after the election: leader %d ISR %v leader epoch %d, want %d [%d] %d",
			after.Leader, after.ISR, after.LeaderEpoch, self, self, before.LeaderEpoch+1)
	}
	if p, _ := b.meta.State().Partition(none, 0); p.Leader != metadata.NoLeader {
		t.Errorf("unclean-none elected %d with no eligible replica", p.Leader)
	}
	// Now led: ELECTION_NOT_NEEDED.
	res, err = adm.ElectLeaders(ctx, kadm.ElectLiveReplica, kadm.TopicsSet{"unclean-one": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res["unclean-one"][0]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
		t.Errorf("unclean election of a led partition: %v, want ELECTION_NOT_NEEDED", r.Err)
	}
}

// TestDescribeBrokerConfigsDocumented: sarama 1.61.1's TestFuncAdminDescribeConfig
// asks for broker 1's configs with IncludeDocumentation (v3+) and wants at
// least one typed, documented entry; every broker config had neither.
func TestDescribeBrokerConfigsDocumented(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.NodeID = 1 })
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i, v := range []int16{3, 4} {
		req := kmsg.NewPtrDescribeConfigsRequest()
		req.SetVersion(v)
		req.IncludeDocumentation = true
		res := kmsg.NewDescribeConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeBroker, "1"
		req.Resources = append(req.Resources, res)
		resp := rawRequest(t, nc, req, int32(i+1)).(*kmsg.DescribeConfigsResponse)
		if len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 || len(resp.Resources[0].Configs) == 0 {
			t.Fatalf("v%d: %+v", v, resp.Resources)
		}
		types := map[string]kmsg.ConfigType{}
		for _, c := range resp.Resources[0].Configs {
			if c.Documentation == nil || *c.Documentation == "" {
				t.Errorf("v%d: %s has no documentation", v, c.Name)
			}
			types[c.Name] = c.ConfigType
		}
		if types["auto.create.topics.enable"] != kmsg.ConfigTypeBoolean || types["num.partitions"] != kmsg.ConfigTypeInt ||
			types["log.retention.ms"] != kmsg.ConfigTypeLong || types["log.dirs"] != kmsg.ConfigTypeString {
			t.Errorf("v%d: config types %v", v, types)
		}
	}
}

// TestDescribeTopicConfigSynonyms: the synonyms of a topic config at its
// default are Kafka's: the broker setting with its default where that
// setting has one (compression.type), none where Kafka defines the broker
// setting without a default and takes the value from a coarser one
// (retention.ms: log.retention.ms unset, log.retention.hours 168; the same
// for segment.ms, segment.jitter.ms, flush.ms). kafkajs 2.2.4's own
// describeConfigs test expects them so. A topic override comes first.
func TestDescribeTopicConfigSynonyms(t *testing.T) {
	b := startBroker(t, "")
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cr := kmsg.NewPtrCreateTopicsRequest()
	cr.SetVersion(4)
	cr.TimeoutMillis = 5000
	tp := kmsg.NewCreateTopicsRequestTopic()
	tp.Topic, tp.NumPartitions, tp.ReplicationFactor = "synonyms", 1, 1
	cfg := kmsg.NewCreateTopicsRequestTopicConfig()
	cfg.Name, cfg.Value = "segment.ms", kmsg.StringPtr("3600000")
	tp.Configs = append(tp.Configs, cfg)
	cr.Topics = append(cr.Topics, tp)
	if resp := rawRequest(t, nc, cr, 1).(*kmsg.CreateTopicsResponse); resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %+v", resp.Topics[0])
	}
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.SetVersion(1)
	req.IncludeSynonyms = true
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "synonyms"
	res.ConfigNames = []string{"compression.type", "retention.ms", "segment.ms", "segment.jitter.ms", "flush.ms"}
	req.Resources = append(req.Resources, res)
	resp := rawRequest(t, nc, req, 2).(*kmsg.DescribeConfigsResponse)
	got := map[string]string{}
	for _, c := range resp.Resources[0].Configs {
		var syns []string
		for _, s := range c.ConfigSynonyms {
			syns = append(syns, fmt.Sprintf("%s=%s/%d", s.Name, *s.Value, s.Source))
		}
		got[c.Name] = fmt.Sprintf("%d %v", c.Source, syns)
	}
	want := map[string]string{
		"compression.type":  "5 [compression.type=producer/5]",
		"retention.ms":      "5 []",
		"segment.ms":        "1 [segment.ms=3600000/1]",
		"segment.jitter.ms": "5 []",
		"flush.ms":          "5 []",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sources and synonyms:\n got %v\nwant %v", got, want)
	}
}

// TestMetadataAutoCreateAnswersLeaderNotAvailable: Kafka answers the
// Metadata request that auto-creates a topic LEADER_NOT_AVAILABLE, without
// partitions, and lists them from the next request on. kafka-go 0.4.51's
// TestConn/test_delete_topics relies on it: it deletes a topic and reads
// its partitions with Metadata v1 (auto-creation implied), expecting none.
func TestMetadataAutoCreateAnswersLeaderNotAvailable(t *testing.T) {
	b := startBroker(t, "")
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	corr := int32(0)
	metadataOf := func(v int16, topic string) kmsg.MetadataResponseTopic {
		t.Helper()
		corr++
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(v)
		req.AllowAutoTopicCreation = true
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp := rawRequest(t, nc, req, corr).(*kmsg.MetadataResponse)
		if len(resp.Topics) != 1 {
			t.Fatalf("v%d %s: %d topics", v, topic, len(resp.Topics))
		}
		return resp.Topics[0]
	}
	for _, v := range []int16{1, 4, 12} {
		topic := fmt.Sprintf("auto-created-v%d", v)
		if mt := metadataOf(v, topic); mt.ErrorCode != kerr.LeaderNotAvailable.Code || len(mt.Partitions) != 0 {
			t.Errorf("v%d, the creating request: error %d, %d partitions; want LEADER_NOT_AVAILABLE and none", v, mt.ErrorCode, len(mt.Partitions))
		}
		if mt := metadataOf(v, topic); mt.ErrorCode != 0 || len(mt.Partitions) != 1 || mt.Partitions[0].Leader != b.cfg.NodeID {
			t.Errorf("v%d, the next request: error %d, partitions %+v", v, mt.ErrorCode, mt.Partitions)
		}
	}
	// kafka-go's sequence: delete, then read the partitions with v1.
	corr++
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.SetVersion(1)
	del.TimeoutMillis = 5000
	del.TopicNames = []string{"auto-created-v1"}
	if resp := rawRequest(t, nc, del, corr).(*kmsg.DeleteTopicsResponse); resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("delete: error %d", resp.Topics[0].ErrorCode)
	}
	if mt := metadataOf(1, "auto-created-v1"); len(mt.Partitions) != 0 {
		t.Errorf("partitions of a topic just deleted (and re-created by this request): %+v", mt.Partitions)
	}
}

// TestTxnOffsetCommitVerifiedAtTheCoordinator: TxnOffsetCommit before v5
// is checked at the transactional id's coordinator wherever it is (KIP-890
// part 1, as Kafka 3.6+ verifies it): a producer id the coordinator does
// not have for the id is INVALID_PRODUCER_ID_MAPPING whether or not the
// group's coordinator is on the same broker. It was checked only when both
// were on one broker, so kafkajs 2.2.4's own "ignores invalid transaction
// fields" got NO_ERROR or the error by where its random group landed. A
// producer whose AddOffsetsToTxn added the group commits.
func TestTxnOffsetCommitVerifiedAtTheCoordinator(t *testing.T) {
	brokers := startPair(t, func(c *Config) { c.Listeners = []Listener{{Addr: "127.0.0.1:0"}} })
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers[0].Addr(), brokers[1].Addr()), kgo.RequestRetries(50))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := testCtx(t)
	coordinator := func(key string, typ int8) int32 {
		t.Helper()
		node := int32(-1)
		waitCond(t, func() bool {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.CoordinatorKey, req.CoordinatorKeys, req.CoordinatorType = key, []string{key}, typ
			resp, err := req.RequestWith(ctx, cl)
			switch {
			case err != nil:
				return false
			case len(resp.Coordinators) == 1:
				node = resp.Coordinators[0].NodeID
				return resp.Coordinators[0].ErrorCode == 0
			default:
				node = resp.NodeID
				return resp.ErrorCode == 0
			}
		})
		return node
	}
	initProducer := func(id string) (int64, int16) {
		t.Helper()
		var pid int64
		var epoch int16
		waitCond(t, func() bool {
			req := kmsg.NewPtrInitProducerIDRequest()
			req.TransactionalID, req.TransactionTimeoutMillis = kmsg.StringPtr(id), 60000
			resp, err := req.RequestWith(ctx, cl)
			pid, epoch = resp.ProducerID, resp.ProducerEpoch
			return err == nil && resp.ErrorCode == 0
		})
		return pid, epoch
	}
	// commitAt sends the TxnOffsetCommit to broker node until the group's
	// partition is loaded there.
	commitAt := func(group, id string, pid int64, epoch int16, node int32) int16 {
		t.Helper()
		nc, err := net.Dial("tcp", brokers[node-1].Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		for corr := int32(1); ; corr++ {
			req := kmsg.NewPtrTxnOffsetCommitRequest()
			req.SetVersion(3)
			req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = id, group, pid, epoch
			rt := kmsg.NewTxnOffsetCommitRequestTopic()
			rt.Topic = "committed"
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = 0, 1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp := rawRequest(t, nc, req, corr).(*kmsg.TxnOffsetCommitResponse)
			code := resp.Topics[0].Partitions[0].ErrorCode
			if code != kerr.CoordinatorLoadInProgress.Code || corr > 500 {
				return code
			}
			time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
		}
	}
	// commit sends it to the group's coordinator. NOT_COORDINATOR (the
	// broker FindCoordinator named has not yet taken the partition up, on
	// a loaded machine) is what a client meets too: it finds the
	// coordinator again and retries.
	commit := func(group, id string, pid int64, epoch int16) int16 {
		t.Helper()
		for try := 0; ; try++ {
			code := commitAt(group, id, pid, epoch, coordinator(group, 0))
			if code != kerr.NotCoordinator.Code || try == 50 {
				return code
			}
			time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
		}
	}
	initProducer("foo") // the id is known, with a producer id that is not 999
	pid, epoch := initProducer("good")
	fooAt := coordinator("foo", 1)
	remote := 0
	for i := range 8 {
		group := fmt.Sprintf("group-%d", i)
		if coordinator(group, 0) != fooAt {
			remote++
		}
		if code := commit(group, "foo", 999, 999); code != kerr.InvalidProducerIDMapping.Code {
			t.Errorf("%s (coordinator %d, foo's %d): producer 999 of foo committed offsets: %v, want INVALID_PRODUCER_ID_MAPPING",
				group, coordinator(group, 0), fooAt, kerr.ErrorForCode(code))
		}
		add := kmsg.NewPtrAddOffsetsToTxnRequest()
		add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = "good", pid, epoch, group
		if resp, err := add.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 {
			t.Fatalf("AddOffsetsToTxn %s: %v %v", group, err, resp)
		}
		if code := commit(group, "good", pid, epoch); code != 0 {
			t.Errorf("%s: the transaction's offsets: %v", group, kerr.ErrorForCode(code))
		}
	}
	if remote == 0 {
		t.Fatal("no group had its coordinator on the other broker than foo's")
	}
}

// TestCreateTopicExistsSeesTheTopic: a CreateTopic refused because the
// topic exists (the quorum's leader has it) returns a state that holds the
// topic, on a broker that has not yet applied the creation itself. The
// internal topics' creators (AddOffsetsToTxn, FindCoordinator, ...) use that
// state at once: with the local one, which lags the leader by up to a
// heartbeat, AddOffsetsToTxn on the other broker answered
// UNKNOWN_TOPIC_OR_PARTITION for a __consumer_offsets just created there.
func TestCreateTopicExistsSeesTheTopic(t *testing.T) {
	brokers := startPair(t, func(c *Config) { c.Listeners = []Listener{{Addr: "127.0.0.1:0"}} })
	ctx := testCtx(t)
	for i := range 20 {
		name := fmt.Sprintf("raced-%d", i)
		spec := func() createTopicSpec { return createTopicSpec{name: name, partitions: 1, replicationFactor: -1} }
		if _, err := brokers[i%2].createTopic(ctx, spec()); err != nil {
			t.Fatal(err)
		}
		st, err := brokers[1-i%2].createTopic(ctx, spec())
		if !errors.Is(err, metadata.ErrTopicExists) {
			t.Fatalf("%s created twice: %v", name, err)
		}
		if st == nil {
			t.Fatalf("%s: no state with the refusal", name)
		}
		if _, ok := st.Topic(name); !ok {
			t.Fatalf("%s: the state returned with TOPIC_ALREADY_EXISTS does not hold the topic", name)
		}
	}
}

// TestTxnLateWriteRefusedRemoteCoordinator: a classic-flow (Produce < v12)
// transactional write arriving after its transaction committed is refused
// (INVALID_TXN_STATE) also when the transactional id's coordinator is on
// another broker than the partition's leader: verified with
// AddPartitionsToTxn v4 VerifyOnly at the coordinator (KIP-890 part 1,
// Kafka's AddPartitionsToTxnManager). It was accepted unverified, opening a
// transaction that no marker ends (the LSO stuck).
func TestTxnLateWriteRefusedRemoteCoordinator(t *testing.T) {
	brokers := startPair(t, func(c *Config) { c.Listeners = []Listener{{Addr: "127.0.0.1:0"}} })
	seeds := kgo.SeedBrokers(brokers[0].Addr(), brokers[1].Addr())
	kcl := newClient(t, brokers[0], seeds)
	adm := kadm.NewClient(kcl)
	createPairTopic(t, adm, "late-remote", nil)
	ctx := testCtx(t)
	var leader int32
	waitCond(t, func() bool {
		st := brokers[0].meta.State()
		tp, ok := st.Topic("late-remote")
		if !ok || tp.Partitions[0].Leader < 1 {
			return false
		}
		leader = tp.Partitions[0].Leader
		return true
	})
	// A transactional id whose coordinator is the other broker.
	id := ""
	for i := 0; id == ""; i++ {
		cand := fmt.Sprintf("late-remote-%d", i)
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey, req.CoordinatorKeys, req.CoordinatorType = cand, []string{cand}, 1
		waitCond(t, func() bool {
			resp, err := req.RequestWith(ctx, kcl)
			if err != nil || len(resp.Coordinators) != 1 || resp.Coordinators[0].ErrorCode != 0 {
				return false
			}
			if resp.Coordinators[0].NodeID != leader {
				id = cand
			}
			return true
		})
	}
	cl := newClient(t, brokers[0], seeds, kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.MaxVersions(kversion.V3_0_0()))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "late-remote", Partition: 0, Value: []byte("a")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lb := brokers[leader-1]
	waitCond(t, func() bool { return rawFetch(t, lb, "late-remote", 1).LastStableOffset == 2 })
	batch := txnBatch(pid, epoch, 1, "late")
	req := kmsg.NewPtrProduceRequest()
	req.TransactionID, req.Acks, req.TimeoutMillis = &id, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "late-remote"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, newClient(t, lb, kgo.MaxVersions(kversion.V3_0_0())))
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidTxnState.Code {
		t.Fatalf("late write with the coordinator on broker %d, leader %d: %v, want INVALID_TXN_STATE", 3-leader, leader, kerr.ErrorForCode(code))
	}
	if fp := rawFetch(t, lb, "late-remote", 1); fp.LastStableOffset != fp.HighWatermark {
		t.Fatalf("LSO %d HW %d after the late write", fp.LastStableOffset, fp.HighWatermark)
	}
}

// mustPropose commits cmd through b's metadata quorum, failing the test on
// an error.
func mustPropose(t testing.TB, b *Broker, cmd metadata.Command) metadata.Result {
	t.Helper()
	res, _, err := b.store.propose(testCtx(t), cmd)
	if err != nil {
		t.Fatalf("%T: %v", cmd, err)
	}
	return res
}

// waitUnfenced waits until b is registered and unfenced (its first
// heartbeat).
func waitUnfenced(t testing.TB, b *Broker) {
	t.Helper()
	for st := b.meta.State(); ; {
		if br, ok := st.Broker(b.cfg.NodeID); ok && !br.Fenced {
			return
		}
		var err error
		if st, err = b.meta.WaitForVersion(testCtx(t), st.Version+1); err != nil {
			t.Fatal(err)
		}
	}
}
