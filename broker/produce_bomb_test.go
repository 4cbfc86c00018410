package broker

import (
	"bytes"
	"hash/crc32"
	"runtime"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// zstdRecordBatch is a v2 batch of one record (key "k", value) compressed
// with zstd by klauspost at level, as a producer writes it (one frame, with
// its content size).
func zstdRecordBatch(t testing.TB, value []byte, level zstd.EncoderLevel) []byte {
	t.Helper()
	rec := kmsg.NewRecord()
	rec.Key, rec.Value = []byte("k"), value
	rec.Length = int32(len(rec.AppendTo(nil)) - 1) // the body's length: measured with a one-byte Length
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	now := time.Now().UnixMilli()
	rb := kmsg.NewRecordBatch()
	rb.Magic, rb.Attributes = 2, 4
	rb.FirstTimestamp, rb.MaxTimestamp = now, now
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = -1, -1, -1
	rb.NumRecords = 1
	rb.Records = enc.EncodeAll(rec.AppendTo(nil), nil)
	raw := rb.AppendTo(nil)
	putU32(raw[8:], uint32(len(raw)-12))
	putU32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// produceListing is a Produce v9 naming partition 0 of topic once for each
// batch, in order.
func produceListing(topic string, batches ...[]byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for _, b := range batches {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = b
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// TestProduceCompressionBomb is the review's request: one zstd batch of 2 KB
// holding one record of 60 MiB, listed 24 times in one Produce of 47 KiB. It
// decompressed the batch whole 24 times at once (1.5 GiB, 37 s; listed 64
// times, the broker ran out of memory) and appended it 24 times. Now the
// partition is appended once and answered once, its records are read as
// they decompress, and the whole request allocates a fraction of one
// record. A record of 65 MiB (over the 64 MiB bound of a batch's records)
// is MESSAGE_TOO_LARGE.
func TestProduceCompressionBomb(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "bomb", 1, nil)
	nc := dial(t, b)
	if resp := rawRequest(t, nc, kmsg.NewPtrApiVersionsRequest(), 1).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	batch := zstdRecordBatch(t, make([]byte, 60<<20), zstd.SpeedBestCompression)
	copies := make([][]byte, 24)
	for i := range copies {
		copies[i] = batch
	}
	req := produceListing("bomb", copies...)
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	r, err := roundTrip(nc, req, 2, 5*time.Minute) // it took minutes under the race detector
	if err != nil {
		t.Fatal(err)
	}
	resp := r.(*kmsg.ProduceResponse)
	took := time.Since(start)
	runtime.ReadMemStats(&m1)
	alloc := m1.TotalAlloc - m0.TotalAlloc
	t.Logf("a %d-byte zstd batch of a 60 MiB record listed 24 times: answered in %v, %.1f MiB allocated in all", len(batch), took.Round(time.Millisecond), float64(alloc)/(1<<20))
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("response: %+v, want partition 0 once", resp.Topics)
	}
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("partition 0: %v, base offset %d", kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
	}
	p, err := b.store.partition(b.meta.State(), "bomb", 0)
	if err != nil {
		t.Fatal(err)
	}
	if end := p.log.LogEndOffset(); end != 1 {
		t.Fatalf("log end offset %d: the batch appended %d times", end, end)
	}
	if alloc > 32<<20 {
		t.Fatalf("%d MiB allocated for a Produce of %d bytes", alloc>>20, len(batch)*24)
	}

	over := zstdRecordBatch(t, make([]byte, 65<<20), zstd.SpeedDefault)
	resp = rawRequest(t, nc, produceListing("bomb", over), 3).(*kmsg.ProduceResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.MessageTooLarge.Code {
		t.Fatalf("a %d-byte batch of a 65 MiB record: %v, want MESSAGE_TOO_LARGE", len(over), kerr.ErrorForCode(p.ErrorCode))
	}
	if end := p.log.LogEndOffset(); end != 1 {
		t.Fatalf("log end offset %d after a refused batch", end)
	}
}

// TestProduceDuplicatePartitions: a Produce naming a partition more than
// once (which no client sends) is handled as Kafka's handleProduceRequest
// does, which keys the records by partition: the partition is appended once,
// with its last listing's records, and answered once; a topic listed twice
// is answered as one. It was appended once per listing. By name (v9) and by
// topic id (v13).
func TestProduceDuplicatePartitions(t *testing.T) {
	b := startBroker(t, "")
	nc := dial(t, b)
	for i, version := range []int16{9, 13} {
		topic := []string{"dup-v9", "dup-v13"}[i]
		createTopic(t, b, topic, 2, nil)
		tp, ok := b.meta.State().Topic(topic)
		if !ok {
			t.Fatalf("topic %s not in the metadata", topic)
		}
		batch := func(v string) []byte { // one record, value v
			rec := kmsg.NewRecord()
			rec.Value = []byte(v)
			rec.Length = int32(len(rec.AppendTo(nil)) - 1)
			now := time.Now().UnixMilli()
			rb := kmsg.NewRecordBatch()
			rb.Magic, rb.NumRecords = 2, 1
			rb.FirstTimestamp, rb.MaxTimestamp = now, now
			rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = -1, -1, -1
			rb.Records = rec.AppendTo(nil)
			out := rb.AppendTo(nil)
			putU32(out[8:], uint32(len(out)-12))
			putU32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
			return out
		}
		req := produceListing(topic, batch("first"), batch("second"), batch("third"))
		req.Version = version
		second := kmsg.NewProduceRequestTopic()
		second.Topic = topic
		p0, p1 := kmsg.NewProduceRequestTopicPartition(), kmsg.NewProduceRequestTopicPartition()
		p0.Records = batch("last")
		p1.Partition, p1.Records = 1, batch("one")
		second.Partitions = append(second.Partitions, p1, p0)
		req.Topics = append(req.Topics, second)
		if version >= 13 {
			for j := range req.Topics {
				req.Topics[j].Topic, req.Topics[j].TopicID = "", tp.ID
			}
		}
		resp := rawRequest(t, nc, req, int32(10+i)).(*kmsg.ProduceResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
			t.Fatalf("v%d response: %+v, want one topic with partitions 0 and 1", version, resp.Topics)
		}
		for j, rp := range resp.Topics[0].Partitions {
			if rp.Partition != int32(j) || rp.ErrorCode != 0 || rp.BaseOffset != 0 {
				t.Fatalf("v%d response partition %d: %d %v base offset %d", version, j, rp.Partition, kerr.ErrorForCode(rp.ErrorCode), rp.BaseOffset)
			}
		}
		for part, want := range []string{"last", "one"} {
			p, err := b.store.partition(b.meta.State(), topic, int32(part))
			if err != nil {
				t.Fatal(err)
			}
			if end := p.log.LogEndOffset(); end != 1 {
				t.Fatalf("v%d partition %d: log end offset %d, want 1", version, part, end)
			}
			data, err := p.log.ReadBytes(0, 1<<20, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(data, []byte(want)) || bytes.Contains(data, []byte("first")) || bytes.Contains(data, []byte("third")) {
				t.Fatalf("v%d partition %d: stored %q, want the record %q", version, part, data, want)
			}
		}
	}
}

// TestProduceDuplicatePartitionsAuthorizer: with the authorizer on, a
// partition of a topic the principal may not write, listed three times, is
// refused once (the refusals were answered per listing), and one it may
// write, listed twice, is appended once.
func TestProduceDuplicatePartitionsAuthorizer(t *testing.T) {
	z := startAuthzBroker(t, false)
	z.createTopics("allowed", "denied")
	z.grant(kadm.NewACLs().Topics("allowed").Allow("User:alice").Operations(kadm.OpWrite))
	alice := z.user("alice")
	one := buildBatch(-1, -1, -1, 1, 10)
	req := produceListing("denied", one, one, one)
	allowed := produceListing("allowed", one, one)
	req.Topics = append(req.Topics, allowed.Topics...)
	ids := map[[16]byte]string{}
	for i := range req.Topics { // franz-go sends the version both sides know: v13, by topic id
		tp, _ := z.b.meta.State().Topic(req.Topics[i].Topic)
		req.Topics[i].TopicID = tp.ID
		ids[tp.ID] = tp.Name
	}
	resp, err := req.RequestWith(testCtx(t), alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 2 {
		t.Fatalf("response: %+v, want the two topics once each", resp.Topics)
	}
	for _, rt := range resp.Topics {
		name := ids[rt.TopicID]
		want := kerr.TopicAuthorizationFailed.Code
		if name == "allowed" {
			want = 0
		}
		if len(rt.Partitions) != 1 || rt.Partitions[0].ErrorCode != want {
			t.Fatalf("topic %q: %+v, want partition 0 once with %v", name, rt.Partitions, kerr.ErrorForCode(want))
		}
	}
	p, err := z.b.store.partition(z.b.meta.State(), "allowed", 0)
	if err != nil {
		t.Fatal(err)
	}
	if end := p.log.LogEndOffset(); end != 1 {
		t.Fatalf("log end offset %d, want 1", end)
	}
}
