package broker

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"runtime"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// TestShareAckOverlapUnit: two acknowledgement batches naming the same
// held record (ACCEPT 5-5 then RELEASE 5-5) are INVALID_REQUEST, not applied
// one after the other (the second would find the record the first deleted).
func TestShareAckOverlapUnit(t *testing.T) {
	sp := &sharePartition{recs: map[int64]*shareRec{}, start: 0, end: 10}
	now := time.Unix(1000, 0)
	for off := int64(0); off < 10; off++ {
		sp.recs[off] = &shareRec{acquired: true, deliveries: 1, member: "m", deadline: now.Add(time.Minute)}
	}
	var code int16
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("ack panicked (in a handler this kills the broker: no recover): %v", p)
			}
		}()
		code = sp.ack("m", []shareAckBatch{{5, 5, []int8{1}}, {5, 5, []int8{2}}}, false, time.Second, now)
	}()
	if code != kerr.InvalidRequest.Code {
		t.Fatalf("overlapping batches: code %d, want INVALID_REQUEST (Kafka's validateAcknowledgementBatches)", code)
	}
}

// TestShareAckOverlapCrash: the same through ShareAcknowledge on a
// running broker, which once panicked on it.
func TestShareAckOverlapCrash(t *testing.T) {
	b := startBroker(t, "")
	const topic, group = "overlap", "q"
	_, id := newShareQueue(t, b, topic, group, 10)
	c := newShareConn(t, b, group, "m1")
	if got := acquired(c.fetch(id, []int32{0}, time.Second, nil)); len(got) != 10 {
		t.Fatalf("acquired %v", got)
	}
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &c.group, &c.member, c.epoch
	rt := kmsg.NewShareAcknowledgeRequestTopic()
	rt.TopicID = id
	rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
	rp.AcknowledgementBatches = []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{
		{FirstOffset: 5, LastOffset: 5, AcknowledgeTypes: []int8{1}},
		{FirstOffset: 5, LastOffset: 5, AcknowledgeTypes: []int8{2}},
	}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := c.do(req).(*kmsg.ShareAcknowledgeResponse)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidRequest.Code {
		t.Fatalf("code %v, want INVALID_REQUEST", kerr.ErrorForCode(code))
	}
}

// TestShareFetchStarvesLaterPartitions: one member of a 2-partition
// topic, partition 0 with a backlog of 3000 records in 300 batches,
// partition 1 with 10. Each ShareFetch (MaxRecords 500) accepts what the
// previous one got, as a consumer does. Partition 1 must be served by the
// second fetch: each request starts at another partition of the session.
func TestShareFetchStarvesLaterPartitions(t *testing.T) {
	b := startBroker(t, "")
	const topic, group = "starve", "sq"
	createTopic(t, b, topic, 2, nil)
	admin := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	setShareGroupConfig(t, admin, group, cfgShareAutoOffsetReset, "earliest")
	for i := 0; i < 300; i++ {
		recs := makeRecords(topic, 10, "p0")
		for _, r := range recs {
			r.Partition = 0
		}
		produceAll(t, admin, recs)
	}
	recs := makeRecords(topic, 10, "p1")
	for _, r := range recs {
		r.Partition = 1
	}
	produceAll(t, admin, recs)
	tp, _ := b.meta.State().Topic(topic)
	id := [16]byte(tp.ID)

	c := newShareConn(t, b, group, "m")
	var acks map[int32][]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch
	parts := []int32{0, 1}
	for i := 1; i <= 8; i++ {
		resp := c.fetch(id, parts, time.Second, acks)
		parts = nil // the session has them
		acks = map[int32][]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{}
		got := map[int32]int{}
		for _, tr := range resp.Topics {
			for _, p := range tr.Partitions {
				for _, r := range p.AcquiredRecords {
					got[p.Partition] += int(r.LastOffset - r.FirstOffset + 1)
					acks[p.Partition] = append(acks[p.Partition], kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{FirstOffset: r.FirstOffset, LastOffset: r.LastOffset, AcknowledgeTypes: []int8{1}})
				}
			}
		}
		t.Logf("fetch %d: acquired per partition %v", i, got)
		parts = nil
		for p := range acks {
			parts = append(parts, p) // named again to carry their acknowledgements
		}
		if got[1] > 0 {
			if i > 2 {
				t.Fatalf("partition 1's records first delivered by fetch %d: starved while partition 0 had a backlog", i)
			}
			return
		}
	}
	t.Fatal("partition 1 never delivered in 8 fetches")
}

// TestShareForgetWithAcks: the Java share consumer (4.x,
// ShareSessionHandler.addPartitionToAcknowledgeOnly) acknowledges the
// records of a partition it is no longer assigned in the ShareFetch that
// forgets it: the partition is in Topics with its acknowledgement batches
// and in ForgottenTopicsData. Kafka updates the session (adds, then
// forgets: ShareSession.update) and applies the acknowledgements; the
// records stay acquired until then. A forget that released first failed
// the acknowledgement (the records were delivered again), and the
// partition was added back to the session.
func TestShareForgetWithAcks(t *testing.T) {
	b := startBroker(t, "")
	const topic, group = "forget", "fq"
	_, id := newShareQueue(t, b, topic, group, 10)
	c := newShareConn(t, b, group, "m")
	if got := acquired(c.fetch(id, []int32{0}, time.Second, nil)); len(got) != 10 {
		t.Fatalf("acquired %v", got)
	}
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &c.group, &c.member, c.epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = 0, 1, 1<<20, 500, 500
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = id
	rp := kmsg.NewShareFetchRequestTopicPartition()
	rp.Partition = 0
	rp.AcknowledgementBatches = []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{{FirstOffset: 0, LastOffset: 9, AcknowledgeTypes: []int8{1}}}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ft := kmsg.NewShareFetchRequestForgottenTopicsData()
	ft.TopicID, ft.Partitions = id, []int32{0}
	req.ForgottenTopicsData = append(req.ForgottenTopicsData, ft)
	resp := c.do(req).(*kmsg.ShareFetchResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("ShareFetch: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	c.epoch = nextShareEpoch(c.epoch)
	for _, tr := range resp.Topics {
		for _, p := range tr.Partitions {
			if p.AcknowledgeErrorCode != 0 {
				t.Errorf("acknowledgement in the forgetting ShareFetch: %v", kerr.ErrorForCode(p.AcknowledgeErrorCode))
			}
			if len(p.AcquiredRecords) > 0 {
				t.Errorf("the forgotten partition was fetched: %v", p.AcquiredRecords)
			}
		}
	}
	b.shares.mu.Lock()
	ss := b.shares.sessions[shareSessionKey{group, "m"}]
	inSession := len(ss.parts)
	b.shares.mu.Unlock()
	if inSession != 0 {
		t.Errorf("the session still has %d partitions after forgetting its only one", inSession)
	}
	// Another member finds nothing: the 10 were accepted.
	d := newShareConn(t, b, group, "other")
	if got := acquired(d.fetch(id, []int32{0}, 200*time.Millisecond, nil)); len(got) != 0 {
		t.Errorf("accepted records delivered again: %v", got)
	}
}

// TestShareDeliveryLimitAfterFailover: a record stored in flight with
// 5 deliveries (the 5th acquisition is written within 20 ms) is taken by a
// new leader as available with 5; it must be archived, not delivered a 6th
// time past group.share.delivery.count.limit.
func TestShareDeliveryLimitAfterFailover(t *testing.T) {
	b := startBroker(t, "")
	const topic, group = "limit", "lq"
	_, id := newShareQueue(t, b, topic, group, 3)
	key := sharePartKey{group, id, 0}
	op := metadata.ConfigOp{Key: key.stateKey(), Value: "0;3;0-0@5,1-2@1"}
	if _, _, err := b.store.propose(testCtx(t), &metadata.AlterConfigs{ResourceType: metadata.ResourceShareState, ResourceName: group, Ops: []metadata.ConfigOp{op}}); err != nil {
		t.Fatal(err)
	}
	c := newShareConn(t, b, group, "m")
	got := acquired(c.fetch(id, []int32{0}, time.Second, nil))
	if got[0] > shareDeliveryLimit {
		t.Fatalf("record 0 delivered with count %d, past the limit %d (all: %v)", got[0], shareDeliveryLimit, got)
	}
}

// TestShareHugeBatchBypassesWindow: a ShareFetch acquires the offsets of a
// batch one map entry each, up to the 2000-record in-flight window, which
// must hold inside a batch too: a compressed batch of tiny records is
// small on the wire whatever its count (here 300,000 records in a few KiB
// of gzip), and acquiring it whole would allocate an entry per record.
func TestShareHugeBatchBypassesWindow(t *testing.T) {
	b := startBroker(t, "")
	const topic, group, n = "huge", "hq", 300_000
	createTopic(t, b, topic, 1, nil)
	admin := newClient(t, b)
	setShareGroupConfig(t, admin, group, cfgShareAutoOffsetReset, "earliest")
	raw := gzipBatchOfEmptyRecords(t, n)
	nc := dial(t, b)
	if r := produceRaw(t, nc, topic, raw, -1, 9, 1); r.ErrorCode != 0 {
		t.Fatalf("produce of a %d-byte batch of %d records: %v", len(raw), n, kerr.ErrorForCode(r.ErrorCode))
	}
	tp, _ := b.meta.State().Topic(topic)
	id := [16]byte(tp.ID)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	c := newShareConn(t, b, group, "m")
	got := c.fetch(id, []int32{0}, time.Second, nil)
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	b.shares.mu.Lock()
	inFlight := len(b.shares.parts[sharePartKey{group, id, 0}].recs)
	b.shares.mu.Unlock()
	t.Logf("acquired ranges %v; records in flight %d; heap %d MiB -> %d MiB", got.Topics[0].Partitions[0].AcquiredRecords, inFlight, ms0.HeapAlloc>>20, ms1.HeapAlloc>>20)
	if inFlight > shareMaxRecordLocks {
		t.Fatalf("%d records in flight on one share-partition from one %d-byte batch (limit %d)", inFlight, len(raw), shareMaxRecordLocks)
	}
}

// TestProduceCompressedCountChecked: a compressed batch whose header claims
// records its payload does not hold (an empty gzip stream claiming 300,000)
// is refused with CORRUPT_MESSAGE, as Kafka's LogValidator refuses it: else
// everything that trusts the count (share groups' acquisition) is misled.
func TestProduceCompressedCountChecked(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "claims", 1, nil)
	raw := gzipBatch(t, 300_000, []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // an empty gzip stream
	nc := dial(t, b)
	if r := produceRaw(t, nc, "claims", raw, -1, 9, 1); r.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("produce of an empty payload claiming 300000 records: %v, want CORRUPT_MESSAGE", kerr.ErrorForCode(r.ErrorCode))
	}
	// The same count, really there, is accepted.
	if r := produceRaw(t, nc, "claims", gzipBatchOfEmptyRecords(t, 300_000), -1, 9, 2); r.ErrorCode != 0 {
		t.Fatalf("produce of 300000 records: %v", kerr.ErrorForCode(r.ErrorCode))
	}
}

// gzipBatchOfEmptyRecords is a v2 batch of n records with a null key and
// value, gzipped.
func gzipBatchOfEmptyRecords(t testing.TB, n int) []byte {
	t.Helper()
	var recs []byte
	for i := 0; i < n; i++ {
		body := []byte{0, 0} // attributes, timestamp delta
		body = binary.AppendVarint(body, int64(i))
		body = append(body, 1, 1, 0) // null key, null value, no headers
		recs = binary.AppendVarint(recs, int64(len(body)))
		recs = append(recs, body...)
	}
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(recs)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return gzipBatch(t, n, z.Bytes())
}

// gzipBatch is a v2 gzip batch whose header says n records, over payload.
func gzipBatch(t testing.TB, n int, payload []byte) []byte {
	t.Helper()
	now := time.Now().UnixMilli()
	rb := kmsg.NewRecordBatch()
	rb.Magic, rb.Attributes = 2, 1
	rb.LastOffsetDelta, rb.NumRecords = int32(n-1), int32(n)
	rb.FirstTimestamp, rb.MaxTimestamp = now, now
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = -1, -1, -1
	rb.Records = payload
	raw := rb.AppendTo(nil)
	putU32(raw[8:], uint32(len(raw)-12))
	putU32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// TestShareAssignmentFollowsRecreatedTopic: a subscribed topic deleted and
// created again under its name, with as many partitions, has a new id; the
// next heartbeat assigns the new one (a member kept on the old id would
// fetch UNKNOWN_TOPIC_ID forever).
func TestShareAssignmentFollowsRecreatedTopic(t *testing.T) {
	b := startBroker(t, "")
	const topic, group = "again", "rq"
	createTopic(t, b, topic, 1, nil)
	admin := newClient(t, b)
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.Version = 1
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = group, "m", []string{topic}
	assigned := func() [16]byte {
		t.Helper()
		resp, err := hb.RequestWith(testCtx(t), admin)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("heartbeat: %v %+v", err, resp)
		}
		hb.MemberEpoch = resp.MemberEpoch
		hb.SubscribedTopicNames = nil
		if resp.Assignment == nil || len(resp.Assignment.TopicPartitions) != 1 {
			return [16]byte{}
		}
		return resp.Assignment.TopicPartitions[0].TopicID
	}
	tp, _ := b.meta.State().Topic(topic)
	if got := assigned(); got != [16]byte(tp.ID) {
		t.Fatalf("assigned %x, want %x", got, tp.ID)
	}
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.TimeoutMillis = 5000
	del.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr(topic)}}
	if resp, err := del.RequestWith(testCtx(t), admin); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("delete: %v %+v", err, resp)
	}
	createTopic(t, b, topic, 1, nil)
	tp2, _ := b.meta.State().Topic(topic)
	if tp2.ID == tp.ID {
		t.Fatal("same id after recreation")
	}
	waitCond(t, func() bool { return assigned() == [16]byte(tp2.ID) })
}

// TestShareFetchBoundedByFetchMaxBytes: the broker's fetch.max.bytes bounds
// a ShareFetch answer whatever its max_bytes and partition_max_bytes ask, as
// it bounds a Fetch's (the first batch still comes whole). Each partition
// was read up to its own limit, so a session of many partitions could make
// one answer of gigabytes.
func TestShareFetchBoundedByFetchMaxBytes(t *testing.T) {
	const limit = 8 << 10
	b := startBroker(t, "", func(c *Config) { c.FetchMaxBytes = limit })
	const topic, group = "sharecap", "sc"
	createTopic(t, b, topic, 4, nil)
	admin := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(2048))
	setShareGroupConfig(t, admin, group, cfgShareAutoOffsetReset, "earliest")
	var recs []*kgo.Record
	for p := range int32(4) {
		for i := range 60 {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: bytes.Repeat([]byte{byte('a' + i%26)}, 1000)})
		}
	}
	produceAll(t, admin, recs)
	tp, _ := b.meta.State().Topic(topic)

	c := newShareConn(t, b, group, "m")
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &c.group, &c.member, 0
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = 5000, 1, 1<<30, 10000, 10000
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = tp.ID
	for p := range int32(4) {
		rp := kmsg.NewShareFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes = p, 1<<30
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp := c.do(req).(*kmsg.ShareFetchResponse)
	if resp.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(resp.ErrorCode))
	}
	total, parts := 0, 0
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if p.ErrorCode != 0 {
				t.Fatalf("partition %d: %v", p.Partition, kerr.ErrorForCode(p.ErrorCode))
			}
			if len(p.Records) > 0 {
				parts++
			}
			total += len(p.Records)
		}
	}
	if total == 0 {
		t.Fatal("no records")
	}
	// One batch is at most 2 KiB of records plus its header.
	if total > limit+4096 {
		t.Fatalf("ShareFetch answered %d record bytes from %d partitions; fetch.max.bytes is %d", total, parts, limit)
	}
}
