package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/metadata"
)

// The glue between the broker and its group coordinator (broker/group):
// the __consumer_offsets topic, which of its partitions this broker leads
// (and so loads into the coordinator), and the group.Log on a partition.
// The handler files 08, 09, 10-16, 42 and 47 call into it.

const offsetsTopic = "__consumer_offsets"

// groups owns the coordinator and follows leadership of
// __consumer_offsets for it (leadership.go).
type groups struct {
	b      *Broker
	c      *group.Coordinator
	parts  *coordinatorPartitions
	cancel context.CancelFunc
	done   chan struct{}
}

func newGroups(b *Broker) *groups {
	cfg := b.cfg.Groups
	if cfg.Partitions <= 0 {
		cfg.Partitions = group.DefaultPartitions
	}
	cfg.Topics = groupTopics{b}
	cfg.PartitionCount = func() int32 {
		if t, ok := b.meta.State().Topic(offsetsTopic); ok {
			return int32(len(t.Partitions))
		}
		return 0
	}
	cfg.GroupConfigs = func(id string) map[string]string { return b.meta.State().GroupConfigs(id) }
	if cfg.Logger == nil {
		cfg.Logger = b.log
	}
	g := &groups{b: b, c: group.New(cfg)}
	g.parts = newCoordinatorPartitions(b, offsetsTopic, "offsets", groupLoader{g})
	if b.metrics != nil {
		b.metrics.reg.MustRegister(&groupCollector{b})
	}
	return g
}

// groupLoader is partitionLoader for the group coordinator.
type groupLoader struct{ g *groups }

func (l groupLoader) load(p, _ int32) <-chan error {
	return l.g.c.Load(p, &offsetsLog{b: l.g.b, part: p})
}
func (l groupLoader) unload(p int32)                  { l.g.c.Unload(p) }
func (l groupLoader) partitionFor(group string) int32 { return l.g.c.PartitionFor(group) }

// start begins following leadership of __consumer_offsets. New calls it
// once both coordinators exist, since loading a partition replays pending
// transactional offsets through b.txns.
func (g *groups) start() {
	g.parts.start()
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.done = cancel, make(chan struct{})
	go func() {
		defer close(g.done)
		g.watchDeletedTopics(ctx)
	}()
}

func (g *groups) close() {
	if g.cancel != nil {
		g.cancel()
		<-g.done
	}
	g.parts.stop()
	g.c.Close()
}

// watchDeletedTopics tells the coordinator of every topic deleted (or
// deleted and created again under its name, a new id) so that it drops
// their committed offsets, as Kafka's coordinator does on a metadata
// image that deletes partitions.
func (g *groups) watchDeletedTopics(ctx context.Context) {
	st := g.b.meta.State()
	known := topicIDs(st)
	ch := g.b.meta.Watch(ctx, st.Version)
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-ch:
			if !ok {
				return
			}
			if c.Command != nil && c.Command.Type() != metadata.TypeDeleteTopic && c.Command.Type() != metadata.TypeCreateTopic {
				continue // only these, or a state replaced whole, change the topics
			}
		}
		now := topicIDs(g.b.meta.State())
		var gone []string
		for name, id := range known {
			if now[name] != id {
				gone = append(gone, name)
			}
		}
		known = now
		if len(gone) > 0 {
			g.c.TopicsDeleted(gone)
		}
	}
}

func topicIDs(st *metadata.State) map[string]metadata.UUID {
	m := make(map[string]metadata.UUID, st.NumTopics())
	for _, t := range st.Topics() {
		m[t.Name] = t.ID
	}
	return m
}

// ensure loads or unloads the offsets partition of each group according to
// the current leadership.
func (g *groups) ensure(groupIDs ...string) { g.parts.ensure(groupIDs...) }

// ensureWait is ensure, then waits (at most d) for the group's partition to
// finish loading.
func (g *groups) ensureWait(ctx context.Context, groupID string, d time.Duration) {
	g.parts.ensureWait(ctx, groupID, d)
}

func (g *groups) partitionFor(groupID string) int32 { return g.c.PartitionFor(groupID) }

// ensureAll does ensure for every offsets partition (ListGroups).
func (g *groups) ensureAll() { g.parts.ensureAll() }

// createOffsetsTopic creates __consumer_offsets on first use, as Kafka does
// on the first FindCoordinator.
func (b *Broker) createOffsetsTopic(ctx context.Context) (*metadata.State, error) {
	st := b.meta.State()
	if _, ok := st.Topic(offsetsTopic); ok {
		return st, nil
	}
	nst, err := b.createTopic(ctx, createTopicSpec{
		name:              offsetsTopic,
		partitions:        b.groups.c.Partitions(),
		replicationFactor: b.internalReplicationFactor(offsetsTopic, "offsets.topic.replication.factor", b.cfg.OffsetsTopicReplicationFactor),
		// Kafka's settings for the topic: compacted, 100 MiB segments.
		configs: map[string]string{"cleanup.policy": "compact", "segment.bytes": "104857600"},
	})
	if errors.Is(err, metadata.ErrTopicExists) {
		if nst == nil { // not caught up with the quorum
			nst = b.meta.State()
		}
		return nst, nil
	}
	return nst, err
}

// groupClient is what DescribeGroups shows of a member's connection.
func groupClient(r *Request) group.Client {
	c := group.Client{}
	if r.ClientID != nil {
		c.ClientID = *r.ClientID
	}
	if r.Conn != nil && r.Conn.Remote != nil {
		host := r.Conn.Remote.String()
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		c.Host = "/" + host
	}
	return c
}

// groupReply turns the coordinator's answer into a Reply. ErrClosed (the
// broker is stopping) answers with a NOT_COORDINATOR response so the client
// looks elsewhere; a cancelled request closes the connection.
func groupReply(req kmsg.Request, resp kmsg.Response, err error) (*Reply, error) {
	if errors.Is(err, group.ErrClosed) {
		return &Reply{Msg: groupErrorResponse(req, kerr.NotCoordinator.Code)}, nil
	}
	if err != nil {
		return nil, err
	}
	return &Reply{Msg: resp}, nil
}

// groupErrorResponse fills a whole-request error into the response of a
// group request.
func groupErrorResponse(req kmsg.Request, code int16) kmsg.Response {
	resp := req.ResponseKind()
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		r.ErrorCode, r.Generation = code, -1
	case *kmsg.SyncGroupResponse:
		r.ErrorCode = code
	case *kmsg.HeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.LeaveGroupResponse:
		r.ErrorCode = code
	case *kmsg.OffsetCommitResponse:
		q := req.(*kmsg.OffsetCommitRequest)
		for _, t := range q.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: code})
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.OffsetFetchResponse:
		q := req.(*kmsg.OffsetFetchRequest)
		r.ErrorCode = code
		for _, g := range q.Groups {
			r.Groups = append(r.Groups, kmsg.OffsetFetchResponseGroup{Group: g.Group, ErrorCode: code})
		}
	case *kmsg.DescribeGroupsResponse:
		for _, g := range req.(*kmsg.DescribeGroupsRequest).Groups {
			d := kmsg.NewDescribeGroupsResponseGroup()
			d.Group, d.ErrorCode = g, code
			r.Groups = append(r.Groups, d)
		}
	case *kmsg.ListGroupsResponse:
		r.ErrorCode = code
	case *kmsg.DeleteGroupsResponse:
		for _, g := range req.(*kmsg.DeleteGroupsRequest).Groups {
			r.Groups = append(r.Groups, kmsg.DeleteGroupsResponseGroup{Group: g, ErrorCode: code})
		}
	case *kmsg.OffsetDeleteResponse:
		r.ErrorCode = code
	case *kmsg.ConsumerGroupHeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.ConsumerGroupDescribeResponse:
		for _, g := range req.(*kmsg.ConsumerGroupDescribeRequest).Groups {
			d := kmsg.NewConsumerGroupDescribeResponseGroup()
			d.Group, d.ErrorCode = g, code
			r.Groups = append(r.Groups, d)
		}
	}
	return resp
}

// groupTopics lets the coordinator resolve topic ids and check partitions.
type groupTopics struct{ b *Broker }

func (t groupTopics) Partitions(name string) ([16]byte, int32, bool) {
	tp, ok := t.b.meta.State().Topic(name)
	if !ok {
		return [16]byte{}, 0, false
	}
	return [16]byte(tp.ID), int32(len(tp.Partitions)), true
}

// TopicNames lists the topics (KIP-848 regex subscriptions).
func (t groupTopics) TopicNames() []string {
	var out []string
	for _, tp := range t.b.meta.State().Topics() {
		out = append(out, tp.Name)
	}
	return out
}

// TopicsVersion is the metadata's Raft index: topics change only with it.
func (t groupTopics) TopicsVersion() uint64 { return t.b.meta.State().Version }

func (t groupTopics) Name(id [16]byte) (string, bool) {
	tp, ok := t.b.meta.State().TopicByID(metadata.UUID(id))
	if !ok {
		return "", false
	}
	return tp.Name, true
}

// offsetsLog is group.Log on one partition of __consumer_offsets.
type offsetsLog struct {
	b    *Broker
	part int32
}

func (l *offsetsLog) partition() (*partition, error) {
	p, err := l.b.store.partition(l.b.meta.State(), offsetsTopic, l.part)
	if errors.Is(err, errNotLeader) || errors.Is(err, errUnknownTopicOrPartition) {
		return nil, fmt.Errorf("%w: %v", group.ErrNotLeader, err)
	}
	return p, err
}

// Append writes the records as one uncompressed batch.
func (l *offsetsLog) Append(ctx context.Context, records []group.Record) error {
	p, err := l.partition()
	if err != nil {
		return err
	}
	// Answered once the ISR has it (acks=-1, replication.go).
	err = p.appendInternal(ctx, encodeOffsetsBatch(records, time.Now().UnixMilli()), l.b.stopping)
	if errors.Is(err, hotlog.ErrClosed) || errors.Is(err, errNotLeader) {
		return fmt.Errorf("%w: %v", group.ErrNotLeader, err)
	}
	return err
}

// Replay reads the partition from its start to its log end (replayLog).
func (l *offsetsLog) Replay(ctx context.Context, fn func(key, value []byte) error) error {
	p, err := l.partition()
	if err != nil {
		return err
	}
	// Transactional offsets wait for their marker (txns.go).
	return l.b.txns.replayOffsets(ctx, p, l.part, fn)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeOffsetsBatch encodes records as one uncompressed v2 batch with
// kmsg's types (the CRC covers everything after the CRC field).
func encodeOffsetsBatch(records []group.Record, now int64) []byte {
	var body []byte
	for i, r := range records {
		rec := kmsg.Record{OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
		enc := rec.AppendTo(nil) // with Length 0, which encodes as one byte
		rec.Length = int32(len(enc) - 1)
		body = rec.AppendTo(body)
	}
	rb := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                2,
		LastOffsetDelta:      int32(len(records) - 1),
		FirstTimestamp:       now,
		MaxTimestamp:         now,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(len(records)),
		Records:              body,
	}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

// replayBatches calls fn for every record of the whole batches in data and
// returns the offset after the last batch.
func replayBatches(data []byte, off int64, fn func(key, value []byte) error) (int64, error) {
	next := off
	for len(data) > 0 {
		h, err := hotlog.ParseBatchHeader(data)
		if err != nil {
			return next, err
		}
		size := h.Size()
		if size > int64(len(data)) {
			break // a partial batch at the end of the read
		}
		batch := data[:size]
		data = data[size:]
		next = h.LastOffset() + 1
		if h.IsControl() {
			continue
		}
		if h.Compression() != 0 {
			return next, fmt.Errorf("broker: compressed batch at offset %d in %s", h.BaseOffset, offsetsTopic)
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(batch); err != nil {
			return next, err
		}
		recs := rb.Records
		for i := int32(0); i < rb.NumRecords; i++ {
			l, n := binary.Varint(recs)
			if n <= 0 || l < 0 || int64(n)+l > int64(len(recs)) {
				return next, fmt.Errorf("broker: bad record length in batch at offset %d", h.BaseOffset)
			}
			var rec kmsg.Record
			if err := rec.ReadFrom(recs[:int64(n)+l]); err != nil {
				return next, err
			}
			recs = recs[int64(n)+l:]
			if err := fn(rec.Key, rec.Value); err != nil {
				return next, err
			}
		}
	}
	return next, nil
}

var (
	groupCommittedDesc = prometheus.NewDesc("sediment_consumer_group_committed_offset",
		"Committed offset per group and partition (groups this broker coordinates).", []string{"group", "topic", "partition"}, nil)
	groupLagDesc = prometheus.NewDesc("sediment_consumer_group_lag",
		"High watermark minus committed offset, per group and partition (partitions this broker leads).", []string{"group", "topic", "partition"}, nil)
	groupTotalLagDesc = prometheus.NewDesc("sediment_consumer_group_total_lag",
		"Sum of sediment_consumer_group_lag per group.", []string{"group"}, nil)
)

// groupCollector reports committed offsets and lag at scrape time.
type groupCollector struct{ b *Broker }

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- groupCommittedDesc
	ch <- groupLagDesc
	ch <- groupTotalLagDesc
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offs, err := c.b.groups.c.CommittedOffsets(ctx)
	if err != nil {
		return
	}
	type tp struct {
		topic string
		part  int32
	}
	hws := make(map[tp]int64)
	for _, p := range c.b.allPartitions() {
		hws[tp{p.topic, p.id}] = p.log.HighWatermark()
	}
	totals := make(map[string]int64)
	for _, o := range offs {
		part := strconv.Itoa(int(o.Partition))
		ch <- prometheus.MustNewConstMetric(groupCommittedDesc, prometheus.GaugeValue, float64(o.Offset), labelValue(o.Group), o.Topic, part)
		hw, ok := hws[tp{o.Topic, o.Partition}]
		if !ok || o.Offset < 0 {
			continue
		}
		lag := max(hw-o.Offset, 0)
		totals[o.Group] += lag
		ch <- prometheus.MustNewConstMetric(groupLagDesc, prometheus.GaugeValue, float64(lag), labelValue(o.Group), o.Topic, part)
	}
	for g, lag := range totals {
		ch <- prometheus.MustNewConstMetric(groupTotalLagDesc, prometheus.GaugeValue, float64(lag), labelValue(g))
	}
}
