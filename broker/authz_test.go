package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// authzBroker is a broker with the authorizer on: a PLAINTEXT listener
// (first: inter-broker) whose ANONYMOUS principal is a super user, as an
// operator's internal listener, and a SASL_PLAINTEXT listener for users.
type authzBroker struct {
	t   *testing.T
	b   *Broker
	cl  *kgo.Client // ANONYMOUS on PLAINTEXT: a super user
	adm *kadm.Client
}

func startAuthzBroker(t *testing.T, allowIfNoACL bool) *authzBroker {
	t.Helper()
	b := startBroker(t, "", func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
		}
		c.Authorizer = AuthorizerConfig{Enabled: true, SuperUsers: []string{"User:ANONYMOUS", "User:admin"}, AllowEveryoneIfNoACLFound: allowIfNoACL}
	})
	cl := newClient(t, b)
	return &authzBroker{t: t, b: b, cl: cl, adm: kadm.NewClient(cl)}
}

// user adds a SCRAM user and returns a client logged in as it.
func (z *authzBroker) user(name string, opts ...kgo.Opt) *kgo.Client {
	z.t.Helper()
	setUser(z.t, z.b, name, name+"-pw", kadm.ScramSha256)
	return secureClient(z.t, z.b, nil, "SASL_PLAINTEXT", scram.Auth{User: name, Pass: name + "-pw"}.AsSha256Mechanism(), opts...)
}

func (z *authzBroker) grant(bl *kadm.ACLBuilder) { z.grantPattern(bl, kadm.ACLPatternLiteral) }

func (z *authzBroker) grantPrefixed(bl *kadm.ACLBuilder) { z.grantPattern(bl, kadm.ACLPatternPrefixed) }

func (z *authzBroker) grantPattern(bl *kadm.ACLBuilder, pattern kadm.ACLPattern) {
	z.t.Helper()
	res, err := z.adm.CreateACLs(context.Background(), bl.ResourcePatternType(pattern))
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		z.t.Fatal(err)
	}
}

func (z *authzBroker) createTopics(names ...string) {
	z.t.Helper()
	res, err := z.adm.CreateTopics(context.Background(), 1, 1, nil, names...)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		z.t.Fatal(err)
	}
}

func produceOne(cl *kgo.Client, topic, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr()
}

// consumeOne polls until a record or an error arrives.
func consumeOne(cl *kgo.Client) (*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, e := range fs.Errors() {
			return nil, e.Err
		}
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0], nil
		}
	}
}

// TestAuthorizerClients: real clients against the authorizer: produce,
// consume, groups, topic creation, metadata visibility, transactions, ACL
// administration, and changes that take effect on open connections.
func TestAuthorizerClients(t *testing.T) {
	z := startAuthzBroker(t, false)
	z.createTopics("orders", "secret", "logs-app", "logs-secret")

	// No ACL: nothing, not even the topics' existence.
	alice := z.user("alice", kgo.DisableIdempotentWrite())
	if err := produceOne(alice, "orders", "x"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("produce without ACL: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	aliceAdm := kadm.NewClient(alice)
	md, err := aliceAdm.Metadata(context.Background())
	if err != nil || len(md.Topics) != 0 {
		t.Fatalf("metadata of all topics without ACL: %v %v, want none", err, md.Topics.Names())
	}

	// WRITE on orders: produce works, and metadata shows orders alone.
	z.grant(kadm.NewACLs().Topics("orders").Allow("User:alice").Operations(kadm.OpWrite))
	if err := produceOne(alice, "orders", "v1"); err != nil {
		t.Fatalf("produce with WRITE: %v", err)
	}
	md, err = aliceAdm.Metadata(context.Background())
	if err != nil || len(md.Topics) != 1 || md.Topics["orders"].Err != nil {
		t.Fatalf("metadata with WRITE on orders: %v %v", err, md.Topics.Names())
	}
	named := kmsg.NewPtrMetadataRequest()
	for _, n := range []string{"secret", "orders", "nonexistent"} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(n)
		named.Topics = append(named.Topics, mt)
	}
	nresp, err := named.RequestWith(context.Background(), alice)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int16{}
	for _, mt := range nresp.Topics {
		codes[*mt.Topic] = mt.ErrorCode
	}
	// A topic alice may not describe fails the same whether it exists.
	if want := map[string]int16{"secret": errTopicAuth, "orders": 0, "nonexistent": errTopicAuth}; !maps.Equal(codes, want) {
		t.Fatalf("metadata for secret, orders, nonexistent: %v, want %v", codes, want)
	}

	// An idempotent producer: WRITE on some topic is enough (KIP-679).
	aliceIdem := secureClient(t, z.b, nil, "SASL_PLAINTEXT", scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism())
	if err := produceOne(aliceIdem, "orders", "v2"); err != nil {
		t.Fatalf("idempotent produce with WRITE on orders: %v", err)
	}
	// bob has nothing: InitProducerId is refused.
	bob := z.user("bob")
	if err := produceOne(bob, "orders", "x"); !errors.Is(err, kerr.ClusterAuthorizationFailed) && !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("bob's idempotent produce: %v, want an authorization failure", err)
	}

	// Consuming needs READ on the topic, and on the group.
	aliceConsumer := z.user("alice", kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("app-orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if _, err := consumeOne(aliceConsumer); !errors.Is(err, kerr.GroupAuthorizationFailed) && !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("consume without READ: %v", err)
	}
	aliceConsumer.Close()
	z.grant(kadm.NewACLs().Topics("orders").Allow("User:alice").Operations(kadm.OpRead))
	z.grantPrefixed(kadm.NewACLs().Groups("app-").Allow("User:alice").Operations(kadm.OpRead))
	aliceConsumer = z.user("alice", kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("app-orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	rec, err := consumeOne(aliceConsumer)
	if err != nil || string(rec.Value) != "v1" {
		t.Fatalf("consume with READ: %v %v", rec, err)
	}
	if err := aliceConsumer.CommitUncommittedOffsets(context.Background()); err != nil {
		t.Fatalf("commit with READ on the group: %v", err)
	}
	aliceConsumer.Close()
	otherGroup := z.user("alice", kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("other"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if _, err := consumeOne(otherGroup); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("consume in a group without READ: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}
	otherGroup.Close()

	// A removed ACL takes effect on an open fetch loop: each consumer fetch
	// is authorized (no fetch sessions while the authorizer is on).
	reader := z.user("alice", kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {0: kgo.NewOffset().AtStart()}}))
	if _, err := consumeOne(reader); err != nil {
		t.Fatal(err)
	}
	if _, err := z.adm.DeleteACLs(context.Background(), kadm.NewACLs().Topics("orders").Allow("User:alice").AllowHosts().Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	if err := produceOne(z.cl, "orders", "v3"); err != nil {
		t.Fatal(err)
	}
	// A long poll that started before the removal may still answer (v3);
	// the next fetch is refused.
	for i := 0; ; i++ {
		_, err := consumeOne(reader)
		if err != nil {
			if !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Fatalf("fetch after READ was removed: %v, want TOPIC_AUTHORIZATION_FAILED", err)
			}
			break
		}
		if i == 2 {
			t.Fatal("fetches after READ was removed still succeed")
		}
	}

	// Prefixed ALLOW for everyone, with a literal DENY for bob: deny wins.
	z.grantPrefixed(kadm.NewACLs().Topics("logs-").Allow("User:*").Operations(kadm.OpRead))
	_, err = z.adm.CreateACLs(context.Background(), kadm.NewACLs().Topics("logs-secret").Deny("User:bob").Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user, topic string
		ok          bool
	}{{"bob", "logs-app", true}, {"bob", "logs-secret", false}, {"carol", "logs-secret", true}} {
		if c.user == "carol" {
			setUser(t, z.b, "carol", "carol-pw", kadm.ScramSha256)
		}
		cl := secureClient(t, z.b, nil, "SASL_PLAINTEXT", scram.Auth{User: c.user, Pass: c.user + "-pw"}.AsSha256Mechanism(),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.topic: {0: kgo.NewOffset().AtStart()}}), kgo.FetchMaxWait(100*time.Millisecond))
		if err := produceOne(z.cl, c.topic, "l"); err != nil {
			t.Fatal(err)
		}
		_, err := consumeOne(cl)
		if c.ok != (err == nil) {
			t.Errorf("%s reads %s: %v, want allowed=%v", c.user, c.topic, err, c.ok)
		}
		cl.Close()
	}

	// Creating topics needs CREATE (cluster or topic); auto-creation too.
	if _, err := aliceAdm.CreateTopic(context.Background(), 1, 1, nil, "alice-new"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("create without CREATE: %v", err)
	}
	var mreq kmsg.MetadataRequest
	mreq.SetVersion(12)
	mreq.AllowAutoTopicCreation = true
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("alice-auto")
	mreq.Topics = append(mreq.Topics, mt)
	z.grantPrefixed(kadm.NewACLs().Topics("alice-").Allow("User:alice").Operations(kadm.OpDescribe))
	// As Kafka's KafkaApis: TOPIC_AUTHORIZATION_FAILED when the request
	// would auto-create the topic (the client then says why), else
	// UNKNOWN_TOPIC_OR_PARTITION (it used to be that in both cases).
	mresp, err := mreq.RequestWith(context.Background(), alice)
	if err != nil || len(mresp.Topics) != 1 || mresp.Topics[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("auto-create without CREATE: %v %+v", err, mresp)
	}
	mreq.AllowAutoTopicCreation = false
	mresp, err = mreq.RequestWith(context.Background(), alice)
	if err != nil || len(mresp.Topics) != 1 || mresp.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("a missing topic without auto-creation: %v %+v", err, mresp)
	}
	mreq.AllowAutoTopicCreation = true
	if md, _ := z.adm.Metadata(context.Background(), "alice-auto"); md.Topics["alice-auto"].Err == nil {
		t.Fatal("alice-auto was created without CREATE")
	}
	z.grantPrefixed(kadm.NewACLs().Topics("alice-").Allow("User:alice").Operations(kadm.OpCreate))
	if _, err := aliceAdm.CreateTopic(context.Background(), 1, 1, nil, "alice-new"); err != nil {
		t.Fatalf("create with CREATE on the prefix: %v", err)
	}

	// Authorized operations in Metadata (KIP-430).
	mreq.Topics[0].Topic = kmsg.StringPtr("orders")
	mreq.IncludeTopicAuthorizedOperations = true
	mreq.IncludeClusterAuthorizedOperations = true
	mreq.SetVersion(10)
	mresp, err = mreq.RequestWith(context.Background(), alice)
	if err != nil || len(mresp.Topics) != 1 {
		t.Fatal(err, mresp)
	}
	if got, want := mresp.Topics[0].AuthorizedOperations, int32(1<<kmsg.ACLOperationWrite|1<<kmsg.ACLOperationDescribe); got != want {
		t.Errorf("alice's operations on orders: %v, want %v", kadm.DecodeACLOperations(got), kadm.DecodeACLOperations(want))
	}
	dc := kmsg.NewPtrDescribeClusterRequest()
	dc.IncludeClusterAuthorizedOperations = true
	if dresp, err := dc.RequestWith(context.Background(), alice); err != nil || dresp.ClusterAuthorizedOperations != 0 {
		t.Errorf("alice's cluster operations: %v %v, want none", err, dresp)
	}
	if dresp, err := dc.RequestWith(context.Background(), z.user("admin")); err != nil || dresp.ClusterAuthorizedOperations != clusterOperations {
		t.Errorf("admin's cluster operations: %v %v, want all", err, dresp)
	}

	// Transactions: WRITE on the transactional id.
	txn := z.user("alice", kgo.TransactionalID("tx-alice"))
	err = txn.BeginTransaction() // kgo may init the producer id here
	if err == nil {
		err = produceOne(txn, "orders", "t")
	}
	if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("transactional produce without WRITE on the id: %v", err)
	}
	txn.Close()
	z.grant(kadm.NewACLs().TransactionalIDs("tx-alice").Allow("User:alice").Operations(kadm.OpWrite))
	txn = z.user("alice", kgo.TransactionalID("tx-alice"))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := produceOne(txn, "orders", "t"); err != nil {
		t.Fatalf("transactional produce with WRITE: %v", err)
	}
	if err := txn.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}

	// ACL administration needs ALTER on the cluster; admin is a super user.
	res, err := aliceAdm.CreateACLs(context.Background(), kadm.NewACLs().Topics("secret").Allow("User:alice").Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil || len(res) != 1 || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice creates an ACL: %v %+v", err, res)
	}
	if dres, err := aliceAdm.DescribeACLs(context.Background(), kadm.NewACLs().AnyResource().Allow().AllowHosts().Operations().ResourcePatternType(kadm.ACLPatternAny)); err != nil || len(dres) == 0 || !errors.Is(dres[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice describes ACLs: %v %+v", err, dres)
	}
	admin := z.user("admin")
	if err := produceOne(admin, "secret", "s"); err != nil {
		t.Fatalf("super user produces: %v", err)
	}
	// Configs: DESCRIBE_CONFIGS per topic.
	if _, err := aliceAdm.DescribeTopicConfigs(context.Background(), "orders"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice describes orders' configs: %v", err)
	}
	z.grant(kadm.NewACLs().Topics("orders").Allow("User:alice").Operations(kadm.OpAlterConfigs))
	if rc, err := aliceAdm.DescribeTopicConfigs(context.Background(), "orders"); err != nil || len(rc) != 1 || rc[0].Err != nil {
		t.Fatalf("alice describes orders' configs with ALTER_CONFIGS: %v %+v", err, rc)
	}
}

// TestAuthorizerAllowIfNoACL: with allow.everyone.if.no.acl.found a topic
// without ACLs is open; one with an ACL for someone else is not.
func TestAuthorizerAllowIfNoACL(t *testing.T) {
	z := startAuthzBroker(t, true)
	z.createTopics("open", "guarded")
	z.grant(kadm.NewACLs().Topics("guarded").Allow("User:bob").Operations(kadm.OpWrite))
	alice := z.user("alice")
	if err := produceOne(alice, "open", "x"); err != nil {
		t.Fatalf("produce to a topic without ACLs: %v", err)
	}
	if err := produceOne(alice, "guarded", "x"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("produce to a topic with another's ACL: %v", err)
	}
	bob := z.user("bob")
	for i := range 3 {
		if err := produceOne(bob, "guarded", fmt.Sprint(i)); err != nil {
			t.Fatalf("bob produces: %v", err)
		}
	}
}

// TestAuthorizerFetchMixed: one consumer Fetch naming a topic it may read
// and one it may not: records for the first (zero-copy on PLAINTEXT-based
// SASL), TOPIC_AUTHORIZATION_FAILED for the second; the fetch session it
// opens keeps authorizing its partitions on every incremental fetch.
func TestAuthorizerFetchMixed(t *testing.T) {
	z := startAuthzBroker(t, false)
	z.createTopics("open", "closed")
	for _, topic := range []string{"open", "closed"} {
		if err := produceOne(z.cl, topic, "r-"+topic); err != nil {
			t.Fatal(err)
		}
	}
	z.grant(kadm.NewACLs().Topics("open").Allow("User:alice").Operations(kadm.OpRead))
	alice := z.user("alice", kgo.MaxVersions(kversion.V3_0_0())) // Fetch v12: topics by name
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.SessionEpoch = -1, 100, 1<<20, 0 // asks for a session
	for _, topic := range []string{"closed", "open"} {
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = topic
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
	}
	resp, err := req.RequestWith(context.Background(), alice)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != 0 || resp.SessionID == 0 {
		t.Fatalf("fetch: error %d, session %d (want a session)", resp.ErrorCode, resp.SessionID)
	}
	got := map[string]string{}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if p.ErrorCode != 0 {
				got[rt.Topic] = kerr.ErrorForCode(p.ErrorCode).Error()
				continue
			}
			fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: rt.Topic, Partition: p.Partition}, &p, kgo.DefaultDecompressor(), nil)
			if fp.Err != nil || len(fp.Records) != 1 {
				t.Fatalf("%s: %v, %d records", rt.Topic, fp.Err, len(fp.Records))
			}
			got[rt.Topic] = string(fp.Records[0].Value)
		}
	}
	want := map[string]string{"open": "r-open", "closed": kerr.TopicAuthorizationFailed.Error()}
	if !maps.Equal(got, want) {
		t.Fatalf("fetch: %v, want %v", got, want)
	}

	// An incremental fetch of the session names no partition: the denied
	// one is reported again; once READ on open is removed, open too.
	incr := kmsg.NewPtrFetchRequest()
	incr.ReplicaID, incr.MaxWaitMillis, incr.MaxBytes = -1, 100, 1<<20
	incr.SessionID, incr.SessionEpoch = resp.SessionID, 1
	codes := func() map[string]int16 {
		t.Helper()
		iresp, err := incr.RequestWith(context.Background(), alice)
		if err != nil || iresp.ErrorCode != 0 {
			t.Fatalf("incremental fetch: %v %+v", err, iresp)
		}
		incr.SessionEpoch++
		out := map[string]int16{}
		for _, rt := range iresp.Topics {
			for _, p := range rt.Partitions {
				out[rt.Topic] = p.ErrorCode
			}
		}
		return out
	}
	if got := codes(); got["closed"] != errTopicAuth || got["open"] != 0 {
		t.Fatalf("incremental fetch: %v", got)
	}
	if _, err := z.adm.DeleteACLs(context.Background(), kadm.NewACLs().Topics("open").Allow("User:alice").AllowHosts().Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	if got := codes(); got["closed"] != errTopicAuth || got["open"] != errTopicAuth {
		t.Fatalf("incremental fetch after READ on open was removed: %v", got)
	}
	z.grant(kadm.NewACLs().Topics("open").Allow("User:alice").Operations(kadm.OpRead))

	// Only a denied topic, with a long max_wait: answered at once (the
	// request's context would end first otherwise).
	only := *req
	only.Topics, only.MaxWaitMillis = req.Topics[:1], 60000 // closed
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	oresp, err := only.RequestWith(ctx, alice)
	if err != nil || len(oresp.Topics) != 1 || oresp.Topics[0].Partitions[0].ErrorCode != errTopicAuth {
		t.Fatalf("fetch of a denied topic alone: %v %+v", err, oresp)
	}

	// The same by topic id (Fetch v13+).
	md, err := z.adm.Metadata(context.Background(), "open", "closed")
	if err != nil {
		t.Fatal(err)
	}
	names := map[[16]byte]string{}
	for i := range req.Topics {
		id := md.Topics[req.Topics[i].Topic].ID
		req.Topics[i].TopicID, names[id] = id, req.Topics[i].Topic
	}
	resp, err = req.RequestWith(context.Background(), z.user("alice"))
	if err != nil {
		t.Fatalf("fetch by id: %v", err)
	}
	if resp.Version < 13 {
		t.Fatalf("fetch by id: version %d", resp.Version)
	}
	clear(got)
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if p.ErrorCode != 0 {
				got[names[rt.TopicID]] = kerr.ErrorForCode(p.ErrorCode).Error()
			} else {
				got[names[rt.TopicID]] = fmt.Sprint(len(p.RecordBatches) > 0)
			}
		}
	}
	if want := map[string]string{"open": "true", "closed": kerr.TopicAuthorizationFailed.Error()}; !maps.Equal(got, want) {
		t.Fatalf("fetch by id: %v, want %v", got, want)
	}
}

// TestAuthorizerGroupDescribeHidesTopics: ConsumerGroupDescribe and
// ShareGroupDescribe answer a group assigned a topic the client may not
// DESCRIBE with TOPIC_AUTHORIZATION_FAILED and nothing else, so that the
// assignments do not leak the topic's name (Kafka 4.0: KAFKA-18813,
// KAFKA-18817); with DESCRIBE on the topic the group is described.
func TestAuthorizerGroupDescribeHidesTopics(t *testing.T) {
	z := startAuthzBroker(t, false)
	z.createTopics("hidden")
	ctx := testCtx(t)

	// A consumer group and a share group, each with a member assigned
	// "hidden", joined by the super user.
	waitCond(t, func() bool {
		hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		hb.Group, hb.MemberID, hb.RebalanceTimeoutMillis = "cg", "m1", 10000
		hb.SubscribedTopicNames, hb.Topics = []string{"hidden"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		resp, err := hb.RequestWith(ctx, z.cl)
		return err == nil && resp.ErrorCode == 0 && resp.Assignment != nil && len(resp.Assignment.Topics) == 1
	})
	waitCond(t, func() bool {
		hb := kmsg.NewPtrShareGroupHeartbeatRequest()
		hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = "sg", "m1", []string{"hidden"}
		resp, err := hb.RequestWith(ctx, z.cl)
		return err == nil && resp.ErrorCode == 0 && resp.Assignment != nil && len(resp.Assignment.TopicPartitions) == 1
	})

	eve := z.user("eve")
	for _, g := range []string{"cg", "sg"} {
		z.grant(kadm.NewACLs().Allow("User:eve").Groups(g).Operations(kadm.OpDescribe))
	}
	describe := func() (*kmsg.ConsumerGroupDescribeResponseGroup, *kmsg.ShareGroupDescribeResponseGroup) {
		t.Helper()
		cd := kmsg.NewPtrConsumerGroupDescribeRequest()
		cd.Groups = []string{"cg"}
		cr, err := cd.RequestWith(ctx, eve)
		if err != nil || len(cr.Groups) != 1 {
			t.Fatalf("ConsumerGroupDescribe: %v %+v", err, cr)
		}
		sd := kmsg.NewPtrShareGroupDescribeRequest()
		sd.GroupIDs = []string{"sg"}
		sr, err := sd.RequestWith(ctx, eve)
		if err != nil || len(sr.Groups) != 1 {
			t.Fatalf("ShareGroupDescribe: %v %+v", err, sr)
		}
		return &cr.Groups[0], &sr.Groups[0]
	}
	cg, sg := describe()
	if cg.ErrorCode != kerr.TopicAuthorizationFailed.Code || len(cg.Members) != 0 || cg.State != "" {
		t.Errorf("ConsumerGroupDescribe without DESCRIBE on the assigned topic: %+v", cg)
	}
	if sg.ErrorCode != kerr.TopicAuthorizationFailed.Code || len(sg.Members) != 0 || sg.GroupState != "" {
		t.Errorf("ShareGroupDescribe without DESCRIBE on the assigned topic: %+v", sg)
	}

	z.grant(kadm.NewACLs().Allow("User:eve").Topics("hidden").Operations(kadm.OpDescribe))
	cg, sg = describe()
	if cg.ErrorCode != 0 || len(cg.Members) != 1 || cg.Members[0].Assignment.TopicPartitions[0].Topic != "hidden" {
		t.Errorf("ConsumerGroupDescribe with DESCRIBE on the topic: %+v", cg)
	}
	if sg.ErrorCode != 0 || len(sg.Members) != 1 || sg.Members[0].Assignment.TopicPartitions[0].Topic != "hidden" {
		t.Errorf("ShareGroupDescribe with DESCRIBE on the topic: %+v", sg)
	}
}
