package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func createTopic(t testing.TB, b *Broker, name string, partitions int32, configs map[string]*string) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, b))
	resp, err := adm.CreateTopic(testCtx(t), partitions, 1, configs, name)
	if err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", name, err, resp.Err)
	}
}

func makeRecords(topic string, n int, tag string) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range out {
		out[i] = &kgo.Record{
			Topic: topic,
			Key:   []byte(fmt.Sprintf("key-%d", i%37)),
			Value: []byte(fmt.Sprintf("%s value %d %s", tag, i, strings.Repeat("x", i%200))),
			Headers: []kgo.RecordHeader{
				{Key: "i", Value: []byte(fmt.Sprint(i))},
				{Key: "tag", Value: []byte(tag)},
			},
		}
	}
	return out
}

// produceAll produces records synchronously and returns them keyed by
// partition in offset order.
func produceAll(t testing.TB, cl *kgo.Client, recs []*kgo.Record) map[int32][]*kgo.Record {
	t.Helper()
	res := cl.ProduceSync(testCtx(t), recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	byPart := map[int32][]*kgo.Record{}
	for _, r := range res {
		byPart[r.Record.Partition] = append(byPart[r.Record.Partition], r.Record)
	}
	return byPart
}

// consumeN reads n records of topic from the start.
func consumeN(t testing.TB, b *Broker, topic string, n int, opts ...kgo.Opt) map[int32][]*kgo.Record {
	t.Helper()
	cl := newClient(t, b, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
	ctx := testCtx(t)
	got := map[int32][]*kgo.Record{}
	total := 0
	for total < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d: %v", total, n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], r)
			total++
		})
	}
	return got
}

func sameRecords(t testing.TB, want, got map[int32][]*kgo.Record) {
	t.Helper()
	for p, ws := range want {
		gs := got[p]
		if len(gs) != len(ws) {
			t.Fatalf("partition %d: got %d records, want %d", p, len(gs), len(ws))
		}
		for i, w := range ws {
			g := gs[i]
			if g.Offset != w.Offset || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) || len(g.Headers) != len(w.Headers) {
				t.Fatalf("partition %d record %d: got offset %d key %q value %q, want offset %d key %q value %q",
					p, i, g.Offset, g.Key, g.Value, w.Offset, w.Key, w.Value)
			}
			for j := range w.Headers {
				if g.Headers[j].Key != w.Headers[j].Key || !bytes.Equal(g.Headers[j].Value, w.Headers[j].Value) {
					t.Fatalf("partition %d record %d header %d differs", p, i, j)
				}
			}
		}
	}
}

func TestProduceConsumeCompressions(t *testing.T) {
	b := startBroker(t, "")
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			topic := "compress-" + name
			createTopic(t, b, topic, 4, nil)
			cl := newClient(t, b, kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(5*time.Millisecond))
			want := produceAll(t, cl, makeRecords(topic, 3000, name))
			if len(want) != 4 {
				t.Fatalf("records landed in %d partitions, want 4", len(want))
			}
			sameRecords(t, want, consumeN(t, b, topic, 3000))
		})
	}
	if n := testutil.ToFloat64(b.metrics.sendfile); n == 0 {
		t.Fatal("no record bytes went out through sendfile")
	}
}

func TestRestartResume(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	createTopic(t, b, "restart", 3, nil)
	cl := newClient(t, b)
	want := produceAll(t, cl, makeRecords("restart", 1500, "before"))
	cl.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The copying path (no sendfile), as TLS listeners will use.
	b2 := startBroker(t, dir, func(c *Config) { c.DisableSendfile = true })
	cl2 := newClient(t, b2)
	more := produceAll(t, cl2, makeRecords("restart", 1500, "after"))
	for p, rs := range more {
		want[p] = append(want[p], rs...)
	}
	sameRecords(t, want, consumeN(t, b2, "restart", 3000))
	if testutil.ToFloat64(b2.metrics.sendfile) != 0 || testutil.ToFloat64(b2.metrics.copied) == 0 {
		t.Fatal("DisableSendfile did not take the copying path")
	}
}

// buildBatch encodes an uncompressed v2 batch of n records.
func buildBatch(producerID int64, epoch int16, seq int32, n int, valueSize int) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.NewRecord()
		r.OffsetDelta = int32(i)
		r.Value = bytes.Repeat([]byte{'v'}, valueSize)
		// Length counts the bytes after itself: encode once with 0 (a
		// one-byte varint) to measure.
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = append(recs, r.AppendTo(nil)...)
	}
	now := time.Now().UnixMilli()
	rb := kmsg.NewRecordBatch()
	rb.Magic = 2
	rb.LastOffsetDelta = int32(n - 1)
	rb.FirstTimestamp, rb.MaxTimestamp = now, now
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = producerID, epoch, seq
	rb.NumRecords = int32(n)
	rb.Records = recs
	raw := rb.AppendTo(nil)
	// Length covers everything after the length field; CRC-32C covers
	// everything after the CRC.
	putU32(raw[8:], uint32(len(raw)-12))
	putU32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

func produceRaw(t testing.TB, nc net.Conn, topic string, batch []byte, acks int16, version int16, corr int32) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version = version
	req.Acks = acks
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := rawRequest(t, nc, req, corr).(*kmsg.ProduceResponse)
	return resp.Topics[0].Partitions[0]
}

func dial(t testing.TB, b *Broker) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// TestProduceIdempotentWithoutSequence: a client's batch with a producer
// id but no sequence (base sequence -1, RecordBatch.NO_SEQUENCE, or any
// other negative one) is refused with INVALID_RECORD and a per-record error
// (v8+), as by Kafka's LogValidator, instead of going in unchecked: it was
// appended past the producer's sequence checks, a retry of it appended
// twice. The producer goes on with its next sequence.
func TestProduceIdempotentWithoutSequence(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "noseq", 1, nil)
	nc := dial(t, b)
	ip := rawRequest(t, nc, kmsg.NewPtrInitProducerIDRequest(), 1).(*kmsg.InitProducerIDResponse)
	if ip.ErrorCode != 0 || ip.ProducerID < 0 {
		t.Fatalf("InitProducerId: %v %d", kerr.ErrorForCode(ip.ErrorCode), ip.ProducerID)
	}
	pid := ip.ProducerID
	if p := produceRaw(t, nc, "noseq", buildBatch(pid, 0, 0, 2, 10), -1, 9, 2); p.ErrorCode != 0 {
		t.Fatalf("first batch: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	for i, seq := range []int32{-1, -1, -7} {
		p := produceRaw(t, nc, "noseq", buildBatch(pid, 0, seq, 1, 10), -1, 9, int32(3+i))
		if p.ErrorCode != kerr.InvalidRecord.Code || len(p.ErrorRecords) == 0 {
			t.Errorf("sequence %d: %v, %d record errors; want INVALID_RECORD with one", seq, kerr.ErrorForCode(p.ErrorCode), len(p.ErrorRecords))
		}
	}
	if p := produceRaw(t, nc, "noseq", buildBatch(pid, 0, 2, 1, 10), -1, 9, 6); p.ErrorCode != 0 || p.BaseOffset != 2 {
		t.Fatalf("next sequence: %v at offset %d, want offset 2", kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
	}
	// Without a producer id a batch carries no sequence: accepted.
	if p := produceRaw(t, nc, "noseq", buildBatch(-1, -1, -1, 1, 10), -1, 9, 7); p.ErrorCode != 0 || p.BaseOffset != 3 {
		t.Fatalf("batch without a producer: %v at offset %d, want offset 3", kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
	}
}

func TestIdempotentProducer(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	createTopic(t, b, "idem", 1, nil)
	nc := dial(t, b)
	ip := rawRequest(t, nc, kmsg.NewPtrInitProducerIDRequest(), 1).(*kmsg.InitProducerIDResponse)
	if ip.ErrorCode != 0 || ip.ProducerID < 0 {
		t.Fatalf("InitProducerId: %v %d", kerr.ErrorForCode(ip.ErrorCode), ip.ProducerID)
	}
	pid := ip.ProducerID
	first := produceRaw(t, nc, "idem", buildBatch(pid, 0, 0, 3, 10), -1, 9, 2)
	second := produceRaw(t, nc, "idem", buildBatch(pid, 0, 3, 2, 10), -1, 9, 3)
	if first.ErrorCode != 0 || second.ErrorCode != 0 || first.BaseOffset != 0 || second.BaseOffset != 3 {
		t.Fatalf("appends: %+v %+v", first, second)
	}
	// A retry of the first batch: same offset, nothing appended.
	retry := produceRaw(t, nc, "idem", buildBatch(pid, 0, 0, 3, 10), -1, 9, 4)
	if retry.ErrorCode != 0 || retry.BaseOffset != 0 {
		t.Fatalf("retry: %v offset %d", kerr.ErrorForCode(retry.ErrorCode), retry.BaseOffset)
	}
	gap := produceRaw(t, nc, "idem", buildBatch(pid, 0, 9, 1, 10), -1, 9, 5)
	if gap.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("gap: %v", kerr.ErrorForCode(gap.ErrorCode))
	}
	// The state survives a restart: the retry is still a duplicate.
	nc.Close()
	b.Close()
	b = startBroker(t, dir)
	nc = dial(t, b)
	retry = produceRaw(t, nc, "idem", buildBatch(pid, 0, 3, 2, 10), -1, 9, 6)
	if retry.ErrorCode != 0 || retry.BaseOffset != 3 {
		t.Fatalf("retry after restart: %v offset %d", kerr.ErrorForCode(retry.ErrorCode), retry.BaseOffset)
	}
	next := produceRaw(t, nc, "idem", buildBatch(pid, 1, 0, 1, 10), -1, 9, 7)
	if next.ErrorCode != 0 || next.BaseOffset != 5 {
		t.Fatalf("new epoch: %v offset %d", kerr.ErrorForCode(next.ErrorCode), next.BaseOffset)
	}
	fenced := produceRaw(t, nc, "idem", buildBatch(pid, 0, 5, 1, 10), -1, 9, 8)
	if fenced.ErrorCode != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("old epoch: %v", kerr.ErrorForCode(fenced.ErrorCode))
	}
	got := consumeN(t, b, "idem", 6)
	if n := len(got[0]); n != 6 {
		t.Fatalf("%d records in the log, want 6", n)
	}
	// kgo's idempotent producer end to end.
	cl := newClient(t, b)
	want := produceAll(t, cl, makeRecords("idem", 500, "kgo"))
	all := consumeN(t, b, "idem", 506)
	if len(all[0]) != 506 || !bytes.Equal(all[0][505].Value, want[0][499].Value) {
		t.Fatalf("kgo idempotent records: %d", len(all[0]))
	}
}

func TestListOffsetsByTime(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "times", 1, nil)
	cl := newClient(t, b, kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1))
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := 0; i < 20; i++ {
		r := &kgo.Record{Topic: "times", Value: []byte{byte(i)}, Timestamp: base.Add(time.Duration(i) * time.Second)}
		if err := cl.ProduceSync(testCtx(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	ctx := testCtx(t)
	check := func(name string, l kadm.ListedOffsets, err error, want int64) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		o, ok := l.Lookup("times", 0)
		if !ok || o.Err != nil || o.Offset != want {
			t.Fatalf("%s: got %+v, want offset %d", name, o, want)
		}
	}
	l, err := adm.ListOffsetsAfterMilli(ctx, base.Add(7500*time.Millisecond).UnixMilli(), "times")
	check("after 7.5s", l, err, 8)
	l, err = adm.ListOffsetsAfterMilli(ctx, base.UnixMilli(), "times")
	check("at base", l, err, 0)
	l, err = adm.ListStartOffsets(ctx, "times")
	check("start", l, err, 0)
	l, err = adm.ListEndOffsets(ctx, "times")
	check("end", l, err, 20)
	l, err = adm.ListOffsetsAfterMilli(ctx, base.Add(time.Hour).UnixMilli(), "times")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := l.Lookup("times", 0); o.Offset != 20 && o.Offset != -1 {
		t.Fatalf("after the last record: %+v", o)
	}
	// Max timestamp (-3).
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "times"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -3
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 19 || p.Timestamp != base.Add(19*time.Second).UnixMilli() {
		t.Fatalf("max timestamp: %+v", p)
	}

	// The other sentinels, each from the version that brought it (Kafka's
	// timestampMinSupportedVersion: UNSUPPORTED_VERSION below it, and for
	// a negative timestamp that is none of them). Without remote storage
	// -4 is the log start, and -5 and -6 (KIP-1023) are -1.
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i, c := range []struct {
		ts      int64
		version int16
		code    int16
		offset  int64
	}{
		{-4, 8, 0, 0}, {-4, 7, kerr.UnsupportedVersion.Code, -1},
		{-5, 9, 0, -1}, {-5, 8, kerr.UnsupportedVersion.Code, -1},
		{-6, 11, 0, -1}, {-6, 10, kerr.UnsupportedVersion.Code, -1},
		{-3, 6, kerr.UnsupportedVersion.Code, -1},
		{-7, 11, kerr.UnsupportedVersion.Code, -1},
		{-1, 1, 0, 20},
	} {
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version = c.version
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "times"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = c.ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		p := rawRequest(t, nc, req, int32(i)).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
		if p.ErrorCode != c.code || p.Offset != c.offset {
			t.Errorf("timestamp %d at v%d: %v offset %d, want %v offset %d", c.ts, c.version,
				kerr.ErrorForCode(p.ErrorCode), p.Offset, kerr.ErrorForCode(c.code), c.offset)
		}
	}

	// v0 (Kafka 3.x's; Burrow before 1.9.4 sends it): old_style_offsets, at
	// most max_num_offsets of them; by time the offset v1 gives, or the
	// high watermark when no record is that recent.
	for i, c := range []struct {
		ts   int64
		max  int32
		code int16
		want []int64
	}{
		{-1, 1, 0, []int64{20}},
		{-2, 1, 0, []int64{0}},
		{-1, 5, 0, []int64{20}},
		{-1, 0, 0, nil},
		{base.Add(7500 * time.Millisecond).UnixMilli(), 1, 0, []int64{8}},
		{base.Add(time.Hour).UnixMilli(), 1, 0, []int64{20}},
		{-3, 1, kerr.UnsupportedVersion.Code, nil},
	} {
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version = 0
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "times"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp, rp.MaxNumOffsets = c.ts, c.max
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		p := rawRequest(t, nc, req, int32(100+i)).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
		if p.ErrorCode != c.code || !slices.Equal(p.OldStyleOffsets, c.want) {
			t.Errorf("v0 timestamp %d max %d: %v offsets %v, want %v offsets %v", c.ts, c.max,
				kerr.ErrorForCode(p.ErrorCode), p.OldStyleOffsets, kerr.ErrorForCode(c.code), c.want)
		}
	}
}

func TestAdminTopics(t *testing.T) {
	b := startBroker(t, "")
	adm := kadm.NewClient(newClient(t, b))
	ctx := testCtx(t)
	bad := "not-a-number"
	for _, tc := range []struct {
		name    string
		configs map[string]*string
		want    error
	}{
		{"bad name!", nil, kerr.InvalidTopicException},
		{"..", nil, kerr.InvalidTopicException},
		{strings.Repeat("a", 250), nil, kerr.InvalidTopicException},
		{"badconfig", map[string]*string{"retention.ms": &bad}, kerr.InvalidConfig},
		{"unknownconfig", map[string]*string{"no.such.config": kadm.StringPtr("1")}, kerr.InvalidConfig},
	} {
		resp, _ := adm.CreateTopic(ctx, 1, 1, tc.configs, tc.name)
		if !errors.Is(resp.Err, tc.want) {
			t.Fatalf("create %q: %v, want %v", tc.name, resp.Err, tc.want)
		}
	}
	vresp, err := adm.ValidateCreateTopics(ctx, 2, 1, nil, "validated")
	if err != nil || vresp.Error() != nil {
		t.Fatalf("validate only: %v %v", err, vresp.Error())
	}
	if l, _ := adm.ListTopics(ctx, "validated"); l.Has("validated") && l["validated"].Err == nil {
		t.Fatal("validate_only created the topic")
	}
	resp, err := adm.CreateTopic(ctx, 2, 1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "admin")
	if err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	resp, _ = adm.CreateTopic(ctx, 2, 1, nil, "admin")
	if !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
		t.Fatalf("second create: %v", resp.Err)
	}
	// Alter and describe configs.
	ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")},
		{Op: kadm.DeleteConfig, Name: "retention.ms"},
	}, "admin")
	if err != nil || ar[0].Err != nil {
		t.Fatalf("alter: %v %v", err, ar[0].Err)
	}
	ar, _ = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("-5")}}, "admin")
	if !errors.Is(ar[0].Err, kerr.InvalidConfig) {
		t.Fatalf("invalid alter: %v", ar[0].Err)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rc.On("admin", nil)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]string{}
	for _, c := range cfg.Configs {
		vals[c.Key] = c.MaybeValue()
	}
	if vals["cleanup.policy"] != "compact" || vals["retention.ms"] != "604800000" {
		t.Fatalf("configs after alter: cleanup.policy=%q retention.ms=%q", vals["cleanup.policy"], vals["retention.ms"])
	}
	// Grow partitions.
	cp, err := adm.CreatePartitions(ctx, 2, "admin")
	if err != nil || cp["admin"].Err != nil {
		t.Fatalf("create partitions: %v %v", err, cp["admin"].Err)
	}
	td, err := adm.ListTopics(ctx, "admin")
	if err != nil || len(td["admin"].Partitions) != 4 {
		t.Fatalf("partitions after growing: %v %d", err, len(td["admin"].Partitions))
	}
	cl := newClient(t, b)
	produceAll(t, cl, makeRecords("admin", 100, "x"))
	// Delete.
	dr, err := adm.DeleteTopics(ctx, "admin")
	if err != nil || dr["admin"].Err != nil {
		t.Fatalf("delete: %v %v", err, dr["admin"].Err)
	}
	// A fresh client: kgo caches metadata responses for a few seconds.
	td, _ = kadm.NewClient(newClient(t, b)).ListTopics(ctx, "admin")
	if td.Has("admin") && td["admin"].Err == nil {
		t.Fatalf("topic still listed after delete: %+v", td["admin"])
	}
	dr, _ = adm.DeleteTopics(ctx, "admin")
	if !errors.Is(dr["admin"].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("second delete: %v", dr["admin"].Err)
	}
	// Cluster and log dirs.
	md, err := adm.BrokerMetadata(ctx)
	if err != nil || len(md.Brokers) != 1 {
		t.Fatalf("metadata: %v %+v", err, md)
	}
	if _, err := adm.DescribeAllLogDirs(ctx, nil); err != nil {
		t.Fatalf("describe log dirs: %v", err)
	}
}

// TestLongPoll: a fetch waiting on an empty partition wakes on an append
// (long before its 30s max wait).
func TestLongPoll(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "poll", 1, nil)
	nc := dial(t, b)
	type result struct {
		resp kmsg.Response
		err  error
		took time.Duration
	}
	// The goroutine hands everything back: t.Fatal there would end it
	// without an answer and leave the test waiting on done.
	done := make(chan result, 1)
	go func() {
		req := kmsg.NewPtrFetchRequest()
		req.Version = 11
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 30000, 1, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "poll"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		start := time.Now()
		// Read past the 30s max wait: an early answer is what is tested,
		// however slow the machine is to park the fetch and produce.
		resp, err := roundTrip(nc, req, 1, time.Minute)
		done <- result{resp, err, time.Since(start)}
	}()
	// Wait until the fetch is parked on the partition.
	p, err := b.store.partition(b.meta.State(), "poll", 0)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		p.mu.Lock()
		n := len(p.mu.waiters)
		p.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fetch never waited on the partition")
		}
		<-tick.C
	}
	prod := newClient(t, b)
	if err := prod.ProduceSync(testCtx(t), &kgo.Record{Topic: "poll", Value: []byte("wake")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("the long-polling fetch: %v", r.err)
	}
	part := r.resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if part.ErrorCode != 0 || len(part.RecordBatches) == 0 || r.took >= 30*time.Second {
		t.Fatalf("fetch: error %d, %d bytes, after %v", part.ErrorCode, len(part.RecordBatches), r.took)
	}
}
