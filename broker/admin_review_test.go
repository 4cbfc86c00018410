package broker

import (
	"crypto/rand"
	"errors"
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/txn"
)

// TestTopicConfigValueSpacesApplied: a topic config value with spaces
// around it (or a boolean in upper case) is valid in Kafka, whose ConfigDef
// trims before it parses, and takes effect. It must not be accepted and
// then ignored: max.message.bytes " 2000 " set by CreateTopics, by
// IncrementalAlterConfigs and by AlterConfigs refuses a 4000-byte record,
// and DescribeConfigs reports the value as parsed.
func TestTopicConfigValueSpacesApplied(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	cl := newClient(t, b, kgo.RecordRetries(0))
	adm := kadm.NewClient(cl)
	produce := func(topic string) error {
		v := make([]byte, 4000)
		rand.Read(v) // incompressible
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: v}).FirstErr()
	}
	describe := func(topic, name string) string {
		t.Helper()
		rc, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil || rc[0].Err != nil {
			t.Fatalf("describe %s: %v %v", topic, err, rc)
		}
		for _, c := range rc[0].Configs {
			if c.Key == name && c.Value != nil {
				return *c.Value
			}
		}
		t.Fatalf("%s: no %s", topic, name)
		return ""
	}
	spaced, upper := " 2000 ", "TRUE"
	createTopic(t, b, "spaced-create", 1, map[string]*string{"max.message.bytes": &spaced, "preallocate": &upper})
	if err := produce("spaced-create"); !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("created with max.message.bytes %q: a 4000-byte record: %v, want MESSAGE_TOO_LARGE", spaced, err)
	}
	if v := describe("spaced-create", "max.message.bytes"); v != "2000" {
		t.Errorf("max.message.bytes described as %q, want 2000", v)
	}
	if v := describe("spaced-create", "preallocate"); v != "true" {
		t.Errorf("preallocate described as %q, want true", v)
	}

	createTopic(t, b, "spaced-incr", 1, nil)
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &spaced}}, "spaced-incr")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("incremental alter: %v %v", err, rs)
	}
	if err := produce("spaced-incr"); !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("altered (incremental) to max.message.bytes %q: a 4000-byte record: %v, want MESSAGE_TOO_LARGE", spaced, err)
	}

	createTopic(t, b, "spaced-legacy", 1, nil)
	rs, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &spaced}}, "spaced-legacy")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("alter: %v %v", err, rs)
	}
	if err := produce("spaced-legacy"); !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("altered (legacy) to max.message.bytes %q: a 4000-byte record: %v, want MESSAGE_TOO_LARGE", spaced, err)
	}
}

// TestAlterConfigsDuplicates: as Kafka's ConfigAdminManager.preprocess, a
// resource listed twice in one AlterConfigs or IncrementalAlterConfigs is
// INVALID_REQUEST for every copy and none is applied; a config named twice
// in one resource, or a null value (but for an incremental DELETE), is
// INVALID_REQUEST for that resource.
func TestAlterConfigsDuplicates(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	cl := newClient(t, b)
	adm := kadm.NewClient(cl)
	createTopic(t, b, "dup", 1, nil)
	createTopic(t, b, "other", 1, nil)
	retention := func(topic string) string {
		t.Helper()
		rc, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil || rc[0].Err != nil {
			t.Fatalf("describe %s: %v %v", topic, err, rc)
		}
		for _, c := range rc[0].Configs {
			if c.Key == "retention.ms" && c.Value != nil {
				return *c.Value
			}
		}
		return ""
	}
	before := retention("dup")

	incr := func(i int, name string, value *string, op kmsg.IncrementalAlterConfigOp) kmsg.IncrementalAlterConfigsRequestResource {
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, []string{"dup", "other"}[i]
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value, c.Op = name, value, op
		r.Configs = append(r.Configs, c)
		return r
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Resources = append(req.Resources,
		incr(0, "retention.ms", kmsg.StringPtr("1000"), kmsg.IncrementalAlterConfigOpSet),
		incr(0, "retention.ms", kmsg.StringPtr("2000"), kmsg.IncrementalAlterConfigOpSet))
	twice := incr(1, "retention.ms", kmsg.StringPtr("1000"), kmsg.IncrementalAlterConfigOpSet)
	twice.Configs = append(twice.Configs, twice.Configs[0])
	req.Resources = append(req.Resources, twice)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Resources) != 3 {
		t.Fatalf("%d resources answered, want 3", len(resp.Resources))
	}
	for i, r := range resp.Resources {
		if r.ErrorCode != kerr.InvalidRequest.Code {
			t.Errorf("incremental resource %d (%s): %v, want INVALID_REQUEST", i, r.ResourceName, kerr.ErrorForCode(r.ErrorCode))
		}
	}
	if got := retention("dup"); got != before {
		t.Errorf("retention.ms %s after a rejected duplicate, want %s", got, before)
	}
	if got := retention("other"); got != before {
		t.Errorf("other retention.ms %s after a config named twice, want %s", got, before)
	}

	req = kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Resources = append(req.Resources, incr(0, "retention.ms", nil, kmsg.IncrementalAlterConfigOpSet))
	if resp, err = req.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if code := resp.Resources[0].ErrorCode; code != kerr.InvalidRequest.Code {
		t.Errorf("incremental SET of a null value: %v, want INVALID_REQUEST", kerr.ErrorForCode(code))
	}

	legacy := func(name string, configs ...string) kmsg.AlterConfigsRequestResource {
		r := kmsg.NewAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, name
		for i := 0; i < len(configs); i += 2 {
			c := kmsg.NewAlterConfigsRequestResourceConfig()
			c.Name, c.Value = configs[i], kmsg.StringPtr(configs[i+1])
			r.Configs = append(r.Configs, c)
		}
		return r
	}
	lreq := kmsg.NewPtrAlterConfigsRequest()
	lreq.Resources = append(lreq.Resources, legacy("dup", "retention.ms", "1000"), legacy("dup", "retention.ms", "2000"),
		legacy("other", "retention.ms", "1000", "retention.ms", "2000"))
	lresp, err := lreq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range lresp.Resources {
		if r.ErrorCode != kerr.InvalidRequest.Code {
			t.Errorf("legacy resource %d (%s): %v, want INVALID_REQUEST", i, r.ResourceName, kerr.ErrorForCode(r.ErrorCode))
		}
	}
	if got := retention("dup"); got != before {
		t.Errorf("retention.ms %s after a rejected legacy duplicate, want %s", got, before)
	}
	if got := retention("other"); got != before {
		t.Errorf("other retention.ms %s after a legacy config named twice, want %s", got, before)
	}
}

// TestDescribeBrokerConfigsHidesPasswords: a dynamic broker config that
// Kafka types PASSWORD (sasl.jaas.config, ssl.keystore.password, also under
// a listener's prefix) is stored, but DescribeConfigs, of the broker and
// of the cluster default, reports it sensitive and without its value, as
// Kafka does; other stored names keep their values.
func TestDescribeBrokerConfigsHidesPasswords(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	id := b.cfg.NodeID
	jaas := `org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="hunter2";`
	secret, relogin := "hunter2", "58000"
	for _, brokers := range [][]int32{{id}, nil} {
		rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{
			{Op: kadm.SetConfig, Name: "listener.name.sasl_plaintext.plain.sasl.jaas.config", Value: &jaas},
			{Op: kadm.SetConfig, Name: "listener.name.ssl.ssl.keystore.password", Value: &secret},
			{Op: kadm.SetConfig, Name: "sasl.kerberos.min.time.before.relogin", Value: &relogin},
		}, brokers...)
		if err != nil || rs[0].Err != nil {
			t.Fatalf("alter %v: %v %v", brokers, err, rs)
		}
	}
	for _, brokers := range [][]int32{{id}, nil} {
		rc, err := adm.DescribeBrokerConfigs(ctx, brokers...)
		if err != nil || rc[0].Err != nil {
			t.Fatalf("describe %v: %v %v", brokers, err, rc)
		}
		seen := 0
		for _, c := range rc[0].Configs {
			switch c.Key {
			case "listener.name.sasl_plaintext.plain.sasl.jaas.config", "listener.name.ssl.ssl.keystore.password":
				seen++
				if c.Value != nil || !c.Sensitive {
					t.Errorf("broker %v %s = %q (sensitive %v), want no value, sensitive", brokers, c.Key, c.MaybeValue(), c.Sensitive)
				}
				for _, s := range c.Synonyms {
					if s.Value != nil {
						t.Errorf("broker %v %s synonym %s = %q, want no value", brokers, c.Key, s.Key, *s.Value)
					}
				}
			case "sasl.kerberos.min.time.before.relogin":
				seen++
				if c.Value == nil || *c.Value != relogin || c.Sensitive {
					t.Errorf("broker %v %s = %q (sensitive %v), want %s", brokers, c.Key, c.MaybeValue(), c.Sensitive, relogin)
				}
			}
		}
		if seen != 3 {
			t.Errorf("broker %v: %d of the 3 stored configs listed", brokers, seen)
		}
	}
}

// TestValidateOnlyReplicaAssignment: validate_only answers what the real
// request would, as Kafka's controller runs the whole validation: a manual
// replica assignment naming an unregistered broker, a broker twice or an
// empty replica list is INVALID_REPLICA_ASSIGNMENT for CreateTopics and
// CreatePartitions alike, and a valid one reports the assignment's
// partition count and replication factor.
func TestValidateOnlyReplicaAssignment(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	cl := newClient(t, b)
	id := b.cfg.NodeID
	createTopic(t, b, "grow", 1, nil)

	create := func(validateOnly bool, assignment ...[]int32) kmsg.CreateTopicsResponseTopic {
		t.Helper()
		req := kmsg.NewPtrCreateTopicsRequest()
		req.ValidateOnly = validateOnly
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "manual", -1, -1
		for i, replicas := range assignment {
			a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			a.Partition, a.Replicas = int32(i), replicas
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0]
	}
	for _, bad := range [][][]int32{{{99}}, {{id, id}}, {{id}, {}}} {
		for _, validateOnly := range []bool{true, false} {
			if got := create(validateOnly, bad...); got.ErrorCode != kerr.InvalidReplicaAssignment.Code {
				t.Errorf("create (validate_only %v) with assignment %v: %v, want INVALID_REPLICA_ASSIGNMENT", validateOnly, bad, kerr.ErrorForCode(got.ErrorCode))
			}
		}
	}
	if got := create(true, []int32{id}, []int32{id}, []int32{id}); got.ErrorCode != 0 || got.NumPartitions != 3 || got.ReplicationFactor != 1 {
		t.Errorf("validate_only with 3 partitions on broker %d: %v, %d partitions, replication factor %d; want 3, 1",
			id, kerr.ErrorForCode(got.ErrorCode), got.NumPartitions, got.ReplicationFactor)
	}

	grow := func(validateOnly bool, replicas []int32) int16 {
		t.Helper()
		req := kmsg.NewPtrCreatePartitionsRequest()
		req.ValidateOnly, req.TimeoutMillis = validateOnly, 10000
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = "grow", 2
		a := kmsg.NewCreatePartitionsRequestTopicAssignment()
		a.Replicas = replicas
		rt.Assignment = append(rt.Assignment, a)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].ErrorCode
	}
	for _, bad := range [][]int32{{99}, {id, id}, {}} {
		for _, validateOnly := range []bool{true, false} {
			if code := grow(validateOnly, bad); code != kerr.InvalidReplicaAssignment.Code {
				t.Errorf("create partitions (validate_only %v) with assignment %v: %v, want INVALID_REPLICA_ASSIGNMENT", validateOnly, bad, kerr.ErrorForCode(code))
			}
		}
	}
	if code := grow(true, []int32{id}); code != 0 {
		t.Errorf("validate_only growth onto broker %d: %v", id, kerr.ErrorForCode(code))
	}
}

// TestDescribeLogDirsListsFollowerReplicas: DescribeLogDirs lists every
// replica in the broker's log directory, the ones it follows as well as the
// ones it leads, as Kafka does (tools that balance disks read each
// broker's replica sizes from it).
func TestDescribeLogDirsListsFollowerReplicas(t *testing.T) {
	brokers := startPair(t, func(c *Config) { c.Listeners = []Listener{{Addr: "127.0.0.1:0"}} })
	cl := newClient(t, brokers[0], kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createPairTopic(t, kadm.NewClient(cl), "dirs", nil)
	ctx := testCtx(t)
	for p := int32(0); p < 2; p++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "dirs", Partition: p, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range brokers {
		// acks=all: each follower has the record when the produce
		// returns, so its replica is open.
		nc, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		req := kmsg.NewPtrDescribeLogDirsRequest()
		req.SetVersion(4)
		resp := rawRequest(t, nc, req, 1).(*kmsg.DescribeLogDirsResponse)
		sizes := map[int32]int64{}
		for _, d := range resp.Dirs {
			for _, dt := range d.Topics {
				if dt.Topic != "dirs" {
					continue
				}
				for _, dp := range dt.Partitions {
					sizes[dp.Partition] = dp.Size
					// Kafka's getLogEndOffsetLag of a current replica:
					// max(0, high watermark − log end), 0 on every
					// replica here (a follower's high watermark trails
					// its log end; Sediment answered that difference).
					if dp.OffsetLag != 0 {
						t.Errorf("broker %d: OffsetLag %d of dirs-%d, want 0", b.cfg.NodeID, dp.OffsetLag, dp.Partition)
					}
				}
			}
		}
		if len(sizes) != 2 || sizes[0] == 0 || sizes[1] == 0 {
			t.Errorf("broker %d lists replica sizes %v of dirs, want both partitions with data", b.cfg.NodeID, sizes)
		}
	}
}

// TestDeleteTopicsDuplicates: as Kafka's ControllerApis.deleteTopics, a
// topic named twice, or given twice by id, is INVALID_REQUEST and is not
// deleted; a topic given by both name and id is INVALID_REQUEST.
func TestDeleteTopicsDuplicates(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "twice", 1, nil)
	createTopic(t, b, "both", 1, nil)
	mt, _ := b.meta.State().Topic("both")
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, v := range []int16{5, 6} {
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.SetVersion(v)
		req.TimeoutMillis = 10000
		if v < 6 {
			req.TopicNames = []string{"twice", "twice"}
		} else {
			for _, n := range []string{"twice", "twice"} {
				rt := kmsg.NewDeleteTopicsRequestTopic()
				rt.Topic = kmsg.StringPtr(n)
				req.Topics = append(req.Topics, rt)
			}
			rt := kmsg.NewDeleteTopicsRequestTopic()
			rt.Topic, rt.TopicID = kmsg.StringPtr("both"), mt.ID
			req.Topics = append(req.Topics, rt)
		}
		resp := rawRequest(t, nc, req, int32(v)).(*kmsg.DeleteTopicsResponse)
		if len(resp.Topics) != 2+int(v-5) {
			t.Errorf("v%d: %d topics answered", v, len(resp.Topics))
		}
		for _, r := range resp.Topics {
			if r.ErrorCode != kerr.InvalidRequest.Code {
				name := ""
				if r.Topic != nil {
					name = *r.Topic
				}
				t.Errorf("v%d %q %x: %v, want INVALID_REQUEST", v, name, r.TopicID, kerr.ErrorForCode(r.ErrorCode))
			}
		}
		for _, n := range []string{"twice", "both"} {
			if _, ok := b.meta.State().Topic(n); !ok {
				t.Fatalf("v%d: %s deleted", v, n)
			}
		}
	}
}

// TestDescribeConfigsInvalidTopicName: DescribeConfigs of a topic whose name
// breaks the naming rules answers INVALID_TOPIC_EXCEPTION, as Kafka's
// ConfigHelper validates the name before looking the topic up; a valid
// name of no topic stays UNKNOWN_TOPIC_OR_PARTITION.
func TestDescribeConfigsInvalidTopicName(t *testing.T) {
	b := startBroker(t, "")
	cl := newClient(t, b)
	for name, want := range map[string]int16{
		"bad/name":   kerr.InvalidTopicException.Code,
		"..":         kerr.InvalidTopicException.Code,
		"no-such-tp": kerr.UnknownTopicOrPartition.Code,
	} {
		req := kmsg.NewPtrDescribeConfigsRequest()
		res := kmsg.NewDescribeConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, name
		req.Resources = append(req.Resources, res)
		resp, err := req.RequestWith(testCtx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Resources[0].ErrorCode; got != want {
			t.Errorf("DescribeConfigs of topic %q: %v, want %v", name, kerr.ErrorForCode(got), kerr.ErrorForCode(want))
		}
	}
}

// TestCreateTopicNameCollision: a topic whose name is an existing one's but
// for '.' and '_' swapped is INVALID_TOPIC_EXCEPTION, with validate_only
// too, as Kafka's controller answers ("collides with existing topic"); the
// same name is TOPIC_ALREADY_EXISTS, other names are created.
func TestCreateTopicNameCollision(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	cl := newClient(t, b)
	createTopic(t, b, "orders_eu.v1", 1, nil)
	create := func(name string, validateOnly bool) int16 {
		t.Helper()
		req := kmsg.NewPtrCreateTopicsRequest()
		req.ValidateOnly, req.TimeoutMillis = validateOnly, 10000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].ErrorCode
	}
	for _, name := range []string{"orders.eu.v1", "orders_eu_v1", "orders.eu_v1"} {
		for _, vo := range []bool{true, false} {
			if code := create(name, vo); code != kerr.InvalidTopicException.Code {
				t.Errorf("%s (validate_only %v) beside orders_eu.v1: %v, want INVALID_TOPIC_EXCEPTION", name, vo, kerr.ErrorForCode(code))
			}
		}
	}
	if code := create("orders_eu.v1", false); code != kerr.TopicAlreadyExists.Code {
		t.Errorf("orders_eu.v1 again: %v, want TOPIC_ALREADY_EXISTS", kerr.ErrorForCode(code))
	}
	for _, name := range []string{"orders-eu.v1", "orders_eu.v2", "orders_eu.v1x"} {
		if code := create(name, false); code != 0 {
			t.Errorf("%s: %v", name, kerr.ErrorForCode(code))
		}
	}
}

// TestInternalTopicReplicationFactor: __consumer_offsets and
// __transaction_state are created with offsets.topic.replication.factor and
// transaction.state.log.replication.factor replicas (3 by default, as
// Kafka), or as many as there are brokers up when fewer; __transaction_state
// with transaction.state.log.min.isr (2) as its min.insync.replicas, at most
// its replication factor. They used to take default.replication.factor (1
// by default): a three-broker cluster kept every group's offsets on one
// broker.
func TestInternalTopicReplicationFactor(t *testing.T) {
	check := func(t *testing.T, b *Broker, rf int, minISR string) {
		t.Helper()
		ctx := testCtx(t)
		if _, err := b.createOffsetsTopic(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.createTxnStateTopic(ctx); err != nil {
			t.Fatal(err)
		}
		st := b.meta.State()
		for _, name := range []string{offsetsTopic, txn.StateTopic} {
			topic, ok := st.Topic(name)
			if !ok {
				t.Fatalf("%s not created", name)
			}
			for _, p := range topic.Partitions {
				if len(p.Replicas) != rf {
					t.Fatalf("%s-%d has replicas %v, want %d", name, p.Index, p.Replicas, rf)
				}
			}
		}
		topic, _ := st.Topic(txn.StateTopic)
		if got := topic.Configs["min.insync.replicas"]; got != minISR {
			t.Errorf("min.insync.replicas of %s: %q, want %q", txn.StateTopic, got, minISR)
		}
	}
	t.Run("pair", func(t *testing.T) {
		brokers := startPair(t, func(c *Config) {
			c.Listeners = []Listener{{Addr: "127.0.0.1:0"}}
			c.Groups.Partitions, c.Transactions.Partitions = 3, 3
		})
		// Both brokers registered: a topic of two replicas can be made.
		createPairTopic(t, kadm.NewClient(newClient(t, brokers[0])), "wait-for-both", nil)
		check(t, brokers[0], 2, "2")
	})
	t.Run("single", func(t *testing.T) {
		b := startBroker(t, "", func(c *Config) { c.Groups.Partitions, c.Transactions.Partitions = 3, 3 })
		check(t, b, 1, "1")
	})
}
