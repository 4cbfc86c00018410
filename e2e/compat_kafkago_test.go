package e2e

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
)

func testKafkaGo(t *testing.T, b *Broker) {
	t.Run("admin", func(t *testing.T) {
		conn, err := kafka.Dial("tcp", b.Addr)
		if err != nil {
			t.Fatalf("kafka-go dial: %v", err)
		}
		defer conn.Close()
		if err := conn.CreateTopics(kafka.TopicConfig{Topic: "kafkago-admin", NumPartitions: 2, ReplicationFactor: 1}); err != nil {
			t.Fatalf("CreateTopics: %v", err)
		}
		parts, err := conn.ReadPartitions("kafkago-admin")
		if err != nil {
			t.Fatalf("ReadPartitions: %v", err)
		}
		if len(parts) != 2 {
			t.Errorf("ReadPartitions: %d partitions, want 2", len(parts))
		}
		if err := conn.DeleteTopics("kafkago-admin"); err != nil {
			t.Errorf("DeleteTopics: %v", err)
		}
	})
	for _, codec := range []compress.Codec{nil, kafka.Gzip.Codec(), kafka.Snappy.Codec(), kafka.Lz4.Codec(), kafka.Zstd.Codec()} {
		name := "none"
		if codec != nil {
			name = codec.Name()
		}
		t.Run("writer/"+name, func(t *testing.T) {
			topic := "kafkago-w-" + name
			b.CreateTopic(t, topic, 3, nil)
			recs := compatRecords("kw", 300)
			// A transport of its own: kafka-go caches metadata per transport
			// (6 s), and the shared default one predates this topic.
			w := &kafka.Writer{Transport: &kafka.Transport{},
				Addr: kafka.TCP(b.Addr), Topic: topic, Balancer: &kafka.Hash{},
				RequiredAcks: kafka.RequireAll, Compression: compressionOf(codec),
				BatchTimeout: 10 * time.Millisecond, WriteTimeout: 30 * time.Second,
			}
			var msgs []kafka.Message
			for _, k := range sortedKeys(recs) {
				msgs = append(msgs, kafka.Message{Key: []byte(k), Value: []byte(recs[k]),
					Headers: []kafka.Header{{Key: "h", Value: []byte("x")}}})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				t.Fatalf("WriteMessages: %v", err)
			}
			if err := w.Close(); err != nil {
				t.Errorf("writer close: %v", err)
			}
			c := consumeFranz(t, b, topic, len(recs))
			c.check(t, topic, recs)
		})
	}
	t.Run("writer/auto-create", func(t *testing.T) {
		// A topic that does not exist: the broker creates it (auto.create.
		// topics.enable, on by default) when kafka-go's Metadata allows it.
		topic := "kafkago-auto-created"
		recs := compatRecords("ka", 50)
		w := &kafka.Writer{Transport: &kafka.Transport{}, Addr: kafka.TCP(b.Addr), Topic: topic, Balancer: &kafka.Hash{},
			AllowAutoTopicCreation: true, BatchTimeout: 10 * time.Millisecond, WriteTimeout: 30 * time.Second}
		var msgs []kafka.Message
		for _, k := range sortedKeys(recs) {
			msgs = append(msgs, kafka.Message{Key: []byte(k), Value: []byte(recs[k])})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var err error
		// kafka-go returns the first LEADER_NOT_AVAILABLE/UNKNOWN_TOPIC of a
		// topic being created to the caller; retrying is its documented use.
		for attempt := 0; attempt < 20; attempt++ {
			if err = w.WriteMessages(ctx, msgs...); err == nil {
				break
			}
			if !errors.Is(err, kafka.LeaderNotAvailable) && !errors.Is(err, kafka.UnknownTopicOrPartition) {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err != nil {
			t.Fatalf("WriteMessages to a new topic: %v", err)
		}
		w.Close()
		consumeFranz(t, b, topic, len(recs)).check(t, topic, recs)
	})
	t.Run("writer/acks0", func(t *testing.T) {
		topic := "kafkago-acks0"
		b.CreateTopic(t, topic, 2, nil)
		recs := compatRecords("k0", 200)
		w := &kafka.Writer{Transport: &kafka.Transport{}, Addr: kafka.TCP(b.Addr), Topic: topic, Balancer: &kafka.Hash{},
			RequiredAcks: kafka.RequireNone, BatchTimeout: 10 * time.Millisecond, WriteTimeout: 30 * time.Second}
		var msgs []kafka.Message
		for _, k := range sortedKeys(recs) {
			msgs = append(msgs, kafka.Message{Key: []byte(k), Value: []byte(recs[k])})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for i := 0; i < len(msgs); i += 50 {
			if err := w.WriteMessages(ctx, msgs[i:i+50]...); err != nil {
				t.Fatalf("WriteMessages: %v", err)
			}
		}
		if err := w.Close(); err != nil {
			t.Errorf("writer close: %v", err)
		}
		consumeFranz(t, b, topic, len(recs)).check(t, topic, recs)
	})
	t.Run("reader-group", func(t *testing.T) {
		testKafkaGoGroup(t, b)
		testKafkaGoClient(t, b, "kafkago-group", "kafkago-group-g", 4, 400)
	})
	t.Run("reader-partition", func(t *testing.T) {
		topic := "kafkago-r-part"
		b.CreateTopic(t, topic, 1, nil)
		recs := compatRecords("kp", 100)
		produceFranz(t, b, topic, recs)
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr}, Topic: topic, Partition: 0, MaxWait: 200 * time.Millisecond})
		defer r.Close()
		c := newCollector()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for c.len() < len(recs) {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("ReadMessage after %d records: %v", c.len(), err)
			}
			c.add(int32(m.Partition), m.Offset, string(m.Key), string(m.Value))
		}
		c.check(t, topic, recs)
		// ListOffsets v1 through a partition connection.
		conn, err := kafka.DialLeader(ctx, "tcp", b.Addr, topic, 0)
		if err != nil {
			t.Fatalf("DialLeader: %v", err)
		}
		defer conn.Close()
		first, last, err := conn.ReadOffsets()
		if err != nil {
			t.Fatalf("ReadOffsets: %v", err)
		}
		if first != 0 || last != int64(len(recs)) {
			t.Errorf("ReadOffsets = %d, %d, want 0, %d", first, last, len(recs))
		}
	})
}

func compressionOf(c compress.Codec) kafka.Compression {
	if c == nil {
		return 0
	}
	return kafka.Compression(c.Code())
}

// testKafkaGoGroup consumes a 4-partition topic with two kafka-go readers in
// one group (its fixed old group API versions), committing synchronously.
func testKafkaGoGroup(t *testing.T, b *Broker) {
	topic, group := "kafkago-group", "kafkago-group-g"
	b.CreateTopic(t, topic, 4, nil)
	recs := compatRecords("kg", 400)
	produceFranz(t, b, topic, recs)
	// kafka-go tells nothing about assignments, so the second reader may
	// join after the first has fetched: records fetched but not committed
	// before that rebalance are read again (at least once).
	c := newCollector()
	c.allowDups = true
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	readCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	readers := make([]*kafka.Reader, 2)
	for i := range readers {
		readers[i] = kafka.NewReader(kafka.ReaderConfig{
			Brokers: []string{b.Addr}, GroupID: group, Topic: topic,
			StartOffset: kafka.FirstOffset, MaxWait: 200 * time.Millisecond,
			HeartbeatInterval: 500 * time.Millisecond, SessionTimeout: 10 * time.Second,
			RebalanceTimeout: 10 * time.Second, JoinGroupBackoff: 100 * time.Millisecond,
			Dialer: &kafka.Dialer{Timeout: 5 * time.Second, ClientID: "sediment-e2e-kafkago-" + strconv.Itoa(i)},
		})
		r := readers[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := r.FetchMessage(readCtx)
				if err != nil {
					if readCtx.Err() == nil {
						errs <- err
					}
					return
				}
				c.add(int32(m.Partition), m.Offset, string(m.Key), string(m.Value))
				if err := r.CommitMessages(readCtx, m); err != nil && readCtx.Err() == nil && !errors.Is(err, kafka.RebalanceInProgress) {
					errs <- err
					return
				}
			}
		}()
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for c.len() < len(recs) {
		select {
		case err := <-errs:
			t.Errorf("kafka-go reader: %v", err)
			break wait
		case <-ctx.Done():
			t.Errorf("kafka-go group: consumed %d of %d records", c.len(), len(recs))
			break wait
		case <-tick.C:
		}
	}
	stop()
	wg.Wait()
	for _, r := range readers {
		if err := r.Close(); err != nil {
			t.Errorf("reader close: %v", err)
		}
	}
	c.check(t, group, recs)
	checkCommitted(t, b, group, topic)
}

// testKafkaGoClient looks at a topic and the group that consumed it through
// kafka-go's Client (its own request versions): ApiVersions, Metadata,
// ListOffsets, OffsetFetch, DescribeGroups, ListGroups, DescribeConfigs.
func testKafkaGoClient(t *testing.T, b *Broker, topic, group string, partitions, records int) {
	cl := &kafka.Client{Addr: kafka.TCP(b.Addr), Timeout: 30 * time.Second, Transport: &kafka.Transport{}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	av, err := cl.ApiVersions(ctx, &kafka.ApiVersionsRequest{})
	if err != nil || av.Error != nil || len(av.ApiKeys) == 0 {
		t.Fatalf("ApiVersions: %v, %+v", err, av)
	}
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 || md.Topics[0].Error != nil || len(md.Topics[0].Partitions) != partitions {
		t.Fatalf("Metadata: %v, %+v", err, md)
	}
	var reqs []kafka.OffsetRequest
	parts := make([]int, partitions)
	for p := range parts {
		parts[p] = p
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	lo, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		t.Fatalf("ListOffsets: %v", err)
	}
	ends := map[int]int64{}
	var total int64
	for _, po := range lo.Topics[topic] {
		if po.Error != nil || po.FirstOffset != 0 {
			t.Errorf("ListOffsets %s/%d: %+v", topic, po.Partition, po)
		}
		ends[po.Partition] = po.LastOffset
		total += po.LastOffset
	}
	if total != int64(records) {
		t.Errorf("ListOffsets: last offsets add up to %d, want %d", total, records)
	}
	of, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil || of.Error != nil {
		t.Fatalf("OffsetFetch: %v, %+v", err, of)
	}
	for _, p := range of.Topics[topic] {
		if p.Error != nil || p.CommittedOffset != ends[p.Partition] {
			t.Errorf("OffsetFetch %s/%d: %+v, want committed %d", topic, p.Partition, p, ends[p.Partition])
		}
	}
	dg, err := cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil || len(dg.Groups) != 1 || dg.Groups[0].Error != nil || dg.Groups[0].GroupState != "Empty" {
		t.Errorf("DescribeGroups: %v, %+v; want %s Empty", err, dg, group)
	}
	lg, err := cl.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err != nil || lg.Error != nil {
		t.Fatalf("ListGroups: %v, %+v", err, lg)
	}
	found := false
	for _, g := range lg.Groups {
		found = found || (g.GroupID == group && g.ProtocolType == "consumer")
	}
	if !found {
		t.Errorf("ListGroups = %+v, want %s (consumer)", lg.Groups, group)
	}
	dc, err := cl.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{
		{ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{"retention.ms", "cleanup.policy"}}}})
	if err != nil || len(dc.Resources) != 1 || dc.Resources[0].Error != nil {
		t.Fatalf("DescribeConfigs: %v, %+v", err, dc)
	}
	got := map[string]string{}
	for _, e := range dc.Resources[0].ConfigEntries {
		got[e.ConfigName] = e.ConfigValue
	}
	if got["cleanup.policy"] != "delete" || got["retention.ms"] == "" || len(got) != 2 {
		t.Errorf("DescribeConfigs of two names = %v, want cleanup.policy=delete and retention.ms", got)
	}
}
