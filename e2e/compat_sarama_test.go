package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

// saramaConfig is sarama's configuration at version v with short timeouts.
func saramaConfig(v sarama.KafkaVersion) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = v
	cfg.ClientID = "sediment-e2e-sarama"
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	cfg.Net.DialTimeout = 5 * time.Second
	return cfg
}

func testSarama(t *testing.T, b *Broker) {
	versions := []sarama.KafkaVersion{sarama.DefaultVersion, sarama.MaxVersion}
	t.Run("admin", func(t *testing.T) { testSaramaAdmin(t, b) })
	t.Run("acks0", func(t *testing.T) { testSaramaAcksZero(t, b) })
	t.Run("transactions", func(t *testing.T) { testSaramaTxn(t, b) })
	t.Run("auto-create", func(t *testing.T) {
		cfg := saramaConfig(sarama.MaxVersion)
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		p, err := sarama.NewSyncProducer([]string{b.Addr}, cfg)
		if err != nil {
			t.Fatalf("sarama producer: %v", err)
		}
		recs := compatRecords("sa", 50)
		for _, k := range sortedKeys(recs) {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "sarama-auto-created", Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(recs[k])}); err != nil {
				t.Fatalf("SendMessage to a new topic: %v", err)
			}
		}
		p.Close()
		consumeFranz(t, b, "sarama-auto-created", len(recs)).check(t, "sarama-auto-created", recs)
	})
	for _, v := range versions {
		for _, codec := range []sarama.CompressionCodec{sarama.CompressionNone, sarama.CompressionGZIP,
			sarama.CompressionSnappy, sarama.CompressionLZ4, sarama.CompressionZSTD} {
			name := fmt.Sprintf("idempotent-producer/%s/%s", v, codec)
			t.Run(name, func(t *testing.T) { testSaramaProducer(t, b, v, codec) })
		}
	}
	for _, strategy := range []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange(), sarama.NewBalanceStrategySticky(),
		sarama.NewBalanceStrategyCooperativeSticky()} {
		t.Run("group/"+strategy.Name(), func(t *testing.T) { testSaramaGroup(t, b, sarama.MaxVersion, strategy, false) })
	}
	t.Run("group/range/static", func(t *testing.T) {
		testSaramaGroup(t, b, sarama.MaxVersion, sarama.NewBalanceStrategyRange(), true)
	})
	t.Run("group/range/"+sarama.DefaultVersion.String(), func(t *testing.T) {
		testSaramaGroup(t, b, sarama.DefaultVersion, sarama.NewBalanceStrategyRange(), false)
	})
	// Old protocol versions that applications still pin (Produce v3/v5,
	// Fetch v5/v6, OffsetCommit v3, JoinGroup v1/v2, …).
	for _, v := range []sarama.KafkaVersion{sarama.V0_11_0_2, sarama.V1_0_0_0} {
		t.Run("old/"+v.String(), func(t *testing.T) {
			testSaramaProducer(t, b, v, sarama.CompressionGZIP)
			testSaramaGroup(t, b, v, sarama.NewBalanceStrategyRange(), false)
		})
	}
}

// testSaramaAdmin creates a topic with configs, describes it and its
// configs, and alters a config, with sarama's ClusterAdmin.
func testSaramaAdmin(t *testing.T, b *Broker) {
	adm, err := sarama.NewClusterAdmin([]string{b.Addr}, saramaConfig(sarama.MaxVersion))
	if err != nil {
		t.Fatalf("sarama admin: %v", err)
	}
	defer adm.Close()
	retention := "3600000"
	err = adm.CreateTopic("sarama-admin", &sarama.TopicDetail{
		NumPartitions: 3, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": &retention},
	}, false)
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	err = adm.CreateTopic("sarama-admin", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false)
	if !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.Errorf("CreateTopic of an existing topic: %v, want %v", err, sarama.ErrTopicAlreadyExists)
	}
	bad := "not-a-number"
	err = adm.CreateTopic("sarama-bad-config", &sarama.TopicDetail{
		NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: map[string]*string{"retention.ms": &bad},
	}, false)
	if !errors.Is(err, sarama.ErrInvalidConfig) {
		t.Errorf("CreateTopic with a bad config: %v, want %v", err, sarama.ErrInvalidConfig)
	}
	mds, err := adm.DescribeTopics([]string{"sarama-admin"})
	if err != nil {
		t.Fatalf("DescribeTopics: %v", err)
	}
	if len(mds) != 1 || mds[0].Err != sarama.ErrNoError || len(mds[0].Partitions) != 3 {
		t.Fatalf("DescribeTopics = %+v, want sarama-admin with 3 partitions", mds)
	}
	for _, p := range mds[0].Partitions {
		if p.Leader != int32(b.NodeID) {
			t.Errorf("partition %d: leader %d, want %d", p.ID, p.Leader, b.NodeID)
		}
	}
	topics, err := adm.ListTopics()
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	if d, ok := topics["sarama-admin"]; !ok || d.NumPartitions != 3 {
		t.Errorf("ListTopics: sarama-admin = %+v (present %v), want 3 partitions", d, ok)
	}
	describe := func() map[string]string {
		res, err := adm.DescribeConfigs([]*sarama.ConfigResource{{Type: sarama.TopicResource, Name: "sarama-admin"}},
			sarama.DescribeConfigsOptions{IncludeSynonyms: true, IncludeDocumentation: true})
		if err != nil || len(res) != 1 || res[0].ErrorCode != sarama.ErrNoError {
			t.Fatalf("DescribeConfigs: %v, %+v", err, res)
		}
		m := map[string]string{}
		for _, e := range res[0].Configs {
			m[e.Name] = e.Value
		}
		return m
	}
	if got := describe()["retention.ms"]; got != retention {
		t.Errorf("retention.ms = %q, want %q", got, retention)
	}
	week := "604800000"
	if err := adm.AlterConfig(sarama.TopicResource, "sarama-admin", map[string]*string{"retention.ms": &week}, false); err != nil {
		t.Fatalf("AlterConfig: %v", err)
	}
	if got := describe()["retention.ms"]; got != week {
		t.Errorf("retention.ms after AlterConfig = %q, want %q", got, week)
	}
	if err := adm.CreatePartitions("sarama-admin", 4, nil, false); err != nil {
		t.Errorf("CreatePartitions: %v", err)
	}
	if err := adm.DeleteTopic("sarama-admin"); err != nil {
		t.Errorf("DeleteTopic: %v", err)
	}
}

// testSaramaProducer sends keyed records with sarama's idempotent sync
// producer and reads them back with franz-go.
func testSaramaProducer(t *testing.T, b *Broker, v sarama.KafkaVersion, codec sarama.CompressionCodec) {
	topic := fmt.Sprintf("sarama-p-%s-%s", v, codec)
	b.CreateTopic(t, topic, 3, nil)
	cfg := saramaConfig(v)
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 5
	cfg.Producer.Compression = codec
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer([]string{b.Addr}, cfg)
	if err != nil {
		t.Fatalf("sarama producer: %v", err)
	}
	recs := compatRecords("sp", 300)
	var msgs []*sarama.ProducerMessage
	for _, k := range sortedKeys(recs) {
		msgs = append(msgs, &sarama.ProducerMessage{
			Topic: topic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(recs[k]),
			Headers: []sarama.RecordHeader{{Key: []byte("h"), Value: []byte("x")}},
		})
	}
	// Half one by one, half as one batch.
	for _, m := range msgs[:10] {
		if _, _, err := p.SendMessage(m); err != nil {
			t.Fatalf("SendMessage: %v", err)
		}
	}
	if err := p.SendMessages(msgs[10:]); err != nil {
		t.Fatalf("SendMessages: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("producer close: %v", err)
	}
	c := consumeFranz(t, b, topic, len(recs))
	c.check(t, topic, recs)
}

// saramaHandler collects claimed messages and marks them.
type saramaHandler struct {
	c       *collector
	setups  chan struct{}
	mu      sync.Mutex
	claimed map[int32]bool
}

func (h *saramaHandler) Setup(s sarama.ConsumerGroupSession) error {
	select {
	case h.setups <- struct{}{}:
	default:
	}
	return nil
}
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	h.mu.Lock()
	h.claimed[claim.Partition()] = true
	h.mu.Unlock()
	for m := range claim.Messages() {
		h.c.add(m.Partition, m.Offset, string(m.Key), string(m.Value))
		s.MarkMessage(m, "")
	}
	return nil
}

// testSaramaGroup consumes a 6-partition topic with two sarama group
// members, checks that every record arrives exactly once, that both members
// got partitions, and that the committed offsets are the log end offsets.
func testSaramaGroup(t *testing.T, b *Broker, v sarama.KafkaVersion, strategy sarama.BalanceStrategy, static bool) {
	topic := fmt.Sprintf("sarama-g-%s-%s-static-%v", strategy.Name(), v, static)
	group := topic + "-group"
	b.CreateTopic(t, topic, 6, nil)
	recs := compatRecords("sg", 600)

	cfg := saramaConfig(v)
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{strategy}
	cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 10 * time.Second
	c := newCollector()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var handlers []*saramaHandler
	errs := make(chan error, 8)
	var groups []sarama.ConsumerGroup
	for i := 0; i < 2; i++ {
		cfg := *cfg
		if static {
			// KIP-345 static membership: group.instance.id per member.
			cfg.Consumer.Group.InstanceId = fmt.Sprintf("sarama-static-%d", i)
		}
		g, err := sarama.NewConsumerGroup([]string{b.Addr}, group, &cfg)
		if err != nil {
			t.Fatalf("sarama consumer group: %v", err)
		}
		groups = append(groups, g)
		h := &saramaHandler{c: c, setups: make(chan struct{}, 1), claimed: map[int32]bool{}}
		handlers = append(handlers, h)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := g.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
		}()
	}
	deadline := time.After(90 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	both := func() bool {
		for _, h := range handlers {
			h.mu.Lock()
			n := len(h.claimed)
			h.mu.Unlock()
			if n == 0 {
				return false
			}
		}
		return true
	}
	// Produce once both members hold partitions: the group is stable then,
	// so every record must be consumed exactly once.
	waitFor(t, 60*time.Second, "both sarama members to be assigned partitions", both)
	produceFranz(t, b, topic, recs)
wait:
	for c.len() < len(recs) {
		select {
		case err := <-errs:
			t.Fatalf("Consume: %v", err)
		case <-deadline:
			t.Errorf("group %s: consumed %d of %d records; both members assigned: %v", group, c.len(), len(recs), both())
			break wait
		case <-tick.C:
		}
	}
	cancel()
	for _, g := range groups {
		if err := g.Close(); err != nil {
			t.Errorf("consumer group close: %v", err)
		}
	}
	wg.Wait()
	c.check(t, group, recs)
	checkCommitted(t, b, group, topic)

	// Offsets through sarama's admin: the same committed offsets.
	adm, err := sarama.NewClusterAdmin([]string{b.Addr}, saramaConfig(v))
	if err != nil {
		t.Fatalf("sarama admin: %v", err)
	}
	defer adm.Close()
	resp, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2, 3, 4, 5}})
	if err != nil {
		t.Fatalf("ListConsumerGroupOffsets: %v", err)
	}
	var sum int64
	for p := int32(0); p < 6; p++ {
		blk := resp.GetBlock(topic, p)
		if blk == nil || blk.Err != sarama.ErrNoError {
			t.Fatalf("offset of %s/%d: %+v", topic, p, blk)
		}
		if blk.Offset > 0 {
			sum += blk.Offset
		}
	}
	if sum != int64(len(recs)) {
		t.Errorf("committed offsets add up to %d, want %d", sum, len(recs))
	}
	// An unknown group answers offset -1 without error.
	resp, err = adm.ListConsumerGroupOffsets("sarama-no-such-group", map[string][]int32{topic: {0}})
	if err != nil {
		t.Fatalf("ListConsumerGroupOffsets of an unknown group: %v", err)
	}
	if blk := resp.GetBlock(topic, 0); blk == nil || blk.Offset != -1 || blk.Err != sarama.ErrNoError {
		t.Errorf("unknown group's offset: %+v, want -1 and no error", blk)
	}
}

// testSaramaAcksZero sends with acks=0 (no answer from the broker; the
// connection must stay usable and in order) and a record of nearly 1 MB.
func testSaramaAcksZero(t *testing.T, b *Broker) {
	topic := "sarama-acks0"
	b.CreateTopic(t, topic, 2, nil)
	cfg := saramaConfig(sarama.MaxVersion)
	cfg.Producer.RequiredAcks = sarama.NoResponse
	cfg.Producer.Return.Successes = true
	cfg.Producer.Compression = sarama.CompressionSnappy
	p, err := sarama.NewSyncProducer([]string{b.Addr}, cfg)
	if err != nil {
		t.Fatalf("sarama producer: %v", err)
	}
	recs := compatRecords("s0", 200)
	recs["s0-big"] = strings.Repeat("0123456789", 90_000)
	for _, k := range sortedKeys(recs) {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(recs[k])}); err != nil {
			t.Fatalf("SendMessage: %v", err)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("producer close: %v", err)
	}
	consumeFranz(t, b, topic, len(recs)).check(t, topic, recs)
}

// testSaramaTxn commits, aborts and commits again with sarama's
// transactional producer; a read_committed franz-go consumer sees exactly the
// committed records.
func testSaramaTxn(t *testing.T, b *Broker) {
	topic := "sarama-txn"
	b.CreateTopic(t, topic, 3, nil)
	cfg := saramaConfig(sarama.MaxVersion)
	cfg.Producer.Idempotent = true
	cfg.Producer.Transaction.ID = "sarama-txn-producer"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Compression = sarama.CompressionZSTD
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer([]string{b.Addr}, cfg)
	if err != nil {
		t.Fatalf("sarama transactional producer: %v", err)
	}
	defer p.Close()
	committed := compatRecords("stc", 200)
	keys := sortedKeys(committed)
	send := func(keys []string, values map[string]string) {
		t.Helper()
		var msgs []*sarama.ProducerMessage
		for _, k := range keys {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(values[k])})
		}
		if err := p.SendMessages(msgs); err != nil {
			t.Fatalf("SendMessages in a transaction: %v", err)
		}
	}
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("BeginTxn: %v", err)
	}
	send(keys[:100], committed)
	if err := p.CommitTxn(); err != nil {
		t.Fatalf("CommitTxn: %v", err)
	}
	aborted := compatRecords("sta", 50)
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("BeginTxn: %v", err)
	}
	send(sortedKeys(aborted), aborted)
	if err := p.AbortTxn(); err != nil {
		t.Fatalf("AbortTxn: %v", err)
	}
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("BeginTxn: %v", err)
	}
	send(keys[100:], committed)
	// A consumer group's offset inside the transaction (AddOffsetsToTxn,
	// TxnOffsetCommit).
	offsets := map[string][]*sarama.PartitionOffsetMetadata{topic: {{Partition: 1, Offset: 7}}}
	if err := p.AddOffsetsToTxn(offsets, "sarama-txn-group"); err != nil {
		t.Fatalf("AddOffsetsToTxn: %v", err)
	}
	if err := p.CommitTxn(); err != nil {
		t.Fatalf("CommitTxn: %v", err)
	}
	c := consumeFranz(t, b, topic, len(committed), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	c.check(t, topic+" read_committed", committed)
	// read_uncommitted sees the aborted records too.
	all := map[string]string{}
	for k, v := range committed {
		all[k] = v
	}
	for k, v := range aborted {
		all[k] = v
	}
	consumeFranz(t, b, topic, len(all)).check(t, topic+" read_uncommitted", all)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := b.Admin(t).FetchOffsets(ctx, "sarama-txn-group")
	if err != nil {
		t.Fatalf("fetch offsets of sarama-txn-group: %v", err)
	}
	if o, ok := offs.Lookup(topic, 1); !ok || o.At != 7 {
		t.Errorf("sarama AddOffsetsToTxn: %s/1 at %d (found %v), want 7", topic, o.At, ok)
	}
}
