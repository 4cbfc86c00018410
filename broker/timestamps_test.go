package broker

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// listAfter is ListOffsets by timestamp for partition 0 of topic.
func listAfter(ctx context.Context, t *testing.T, adm *kadm.Client, topic string, ts time.Time) kadm.ListedOffset {
	t.Helper()
	l, err := adm.ListOffsetsAfterMilli(ctx, ts.UnixMilli(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := l.Lookup(topic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("%s: %+v", topic, o)
	}
	return o
}

// TestListOffsetsByTimeMarkers: a transaction's commit marker is a record
// for ListOffsets by timestamp, as in Kafka's searchForTimestamp, which
// walks every record of the first batch whose max timestamp qualifies. The
// marker carries the time of the commit, so it is the answer for a time
// between the transaction's records and the commit. Sediment used to skip
// control batches and answer -1 (the log end to a client): a consumer
// seeking by time jumped past everything written after the marker.
func TestListOffsetsByTimeMarkers(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	createTopic(t, b, "marked", 1, nil)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	txn := newClient(t, b, kgo.TransactionalID("ts-txn"), kgo.DefaultProduceTopic("marked"))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Value: []byte("in txn"), Timestamp: base}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	beforeCommit := time.Now()
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// Offset 0 the record, 1 the marker, 2 a later record.
	cl := newClient(t, b)
	produceAll(t, cl, []*kgo.Record{{Topic: "marked", Value: []byte("after"), Timestamp: base.Add(50 * time.Minute)}})
	adm := kadm.NewClient(cl)

	if o := listAfter(ctx, t, adm, "marked", base.Add(30*time.Minute)); o.Offset != 1 || o.Timestamp < beforeCommit.UnixMilli() {
		t.Fatalf("between the record and its commit: offset %d timestamp %d, want the marker (offset 1, at the commit)", o.Offset, o.Timestamp)
	}
	if o := listAfter(ctx, t, adm, "marked", base); o.Offset != 0 || o.Timestamp != base.UnixMilli() {
		t.Fatalf("at the first record: %+v", o)
	}
}

// TestListOffsetsByTimeAfterDeleteRecords: DeleteRecords moves the log
// start into a batch whose records are out of time order; when the only
// record of that batch at or past the target time is below the start, the
// answer is in a later batch (Kafka applies both conditions to one record
// and goes on to the next batch). Sediment used to answer -1 for a
// compressed batch and for an uncompressed one alike.
func TestListOffsetsByTimeAfterDeleteRecords(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for name, codec := range map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "zstd": kgo.ZstdCompression()} {
		topic := "trimmed-" + name
		t.Run(topic, func(t *testing.T) {
			createTopic(t, b, topic, 1, nil)
			cl := newClient(t, b, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec),
				kgo.ProducerLinger(time.Minute))
			// One batch, offsets 0-2, at +10 s, +1 s and +2 s.
			errs := make(chan error, 3)
			for _, d := range []time.Duration{10, 1, 2} {
				cl.Produce(ctx, &kgo.Record{Value: []byte("v"), Timestamp: base.Add(d * time.Second)}, func(_ *kgo.Record, err error) {
					errs <- err
				})
			}
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			// Offset 3 at +20 s, in its own batch.
			produceAll(t, cl, []*kgo.Record{{Value: []byte("later"), Timestamp: base.Add(20 * time.Second)}})
			adm := kadm.NewClient(cl)
			var os kadm.Offsets
			os.AddOffset(topic, 0, 1, -1)
			if dr, err := adm.DeleteRecords(ctx, os); err != nil {
				t.Fatal(err)
			} else if r, _ := dr.Lookup(topic, 0); r.Err != nil || r.LowWatermark != 1 {
				t.Fatalf("delete records: %+v", r)
			}
			if o := listAfter(ctx, t, adm, topic, base.Add(5*time.Second)); o.Offset != 3 || o.Timestamp != base.Add(20*time.Second).UnixMilli() {
				t.Fatalf("after +5 s: offset %d timestamp %d, want offset 3 at +20 s", o.Offset, o.Timestamp)
			}
			if o := listAfter(ctx, t, adm, topic, base.Add(1500*time.Millisecond)); o.Offset != 2 {
				t.Fatalf("after +1.5 s: offset %d, want 2", o.Offset)
			}
		})
	}
}

// TestListOffsetsByTimeReadCommitted: by timestamp and by max timestamp, a
// read_committed request gets no offset at or past the last stable offset,
// as Kafka's fetchOffsetForTimestamp bounds the answer by what that reader
// can fetch; read_uncommitted gets the record of the open transaction.
// Sediment used to ignore the isolation level but for the latest offset.
func TestListOffsetsByTimeReadCommitted(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	createTopic(t, b, "open", 1, nil)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	cl := newClient(t, b, kgo.DefaultProduceTopic("open"))
	produceAll(t, cl, []*kgo.Record{{Topic: "open", Value: []byte("committed"), Timestamp: base}})
	txn := newClient(t, b, kgo.TransactionalID("ts-open"), kgo.DefaultProduceTopic("open"))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Value: []byte("open"), Timestamp: base.Add(10 * time.Second)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	list := func(ts int64, isolation int8) (int64, int64) {
		t.Helper()
		req := kmsg.NewPtrListOffsetsRequest()
		req.IsolationLevel = isolation
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "open"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			t.Fatalf("timestamp %d isolation %d: %v", ts, isolation, kerr.ErrorForCode(p.ErrorCode))
		}
		return p.Offset, p.Timestamp
	}
	at5 := base.Add(5 * time.Second).UnixMilli()
	if off, _ := list(at5, 0); off != 1 {
		t.Errorf("read_uncommitted after +5 s: offset %d, want 1 (the open transaction's record)", off)
	}
	if off, ts := list(at5, 1); off != -1 || ts != -1 {
		t.Errorf("read_committed after +5 s: offset %d timestamp %d, want -1 -1", off, ts)
	}
	if off, _ := list(-3, 0); off != 1 {
		t.Errorf("read_uncommitted max timestamp: offset %d, want 1", off)
	}
	if off, _ := list(-3, 1); off != -1 {
		t.Errorf("read_committed max timestamp: offset %d, want -1", off)
	}
	if off, _ := list(base.UnixMilli(), 1); off != 0 {
		t.Errorf("read_committed at the committed record: offset %d, want 0", off)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if off, _ := list(at5, 1); off != 1 {
		t.Errorf("read_committed after +5 s, once committed: offset %d, want 1", off)
	}
}

// TestListOffsetsDuplicatePartitions: a partition asked twice in one
// ListOffsets is INVALID_REQUEST at both places, as Kafka answers; the
// others are answered (it was answered twice).
func TestListOffsetsDuplicatePartitions(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "dup", 2, nil)
	cl := newClient(t, b)
	req := kmsg.NewPtrListOffsetsRequest()
	for _, parts := range [][]int32{{0, 1}, {0}} {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "dup"
		for _, p := range parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			want := int16(0)
			if rp.Partition == 0 {
				want = kerr.InvalidRequest.Code
			}
			if rp.ErrorCode != want {
				t.Errorf("partition %d: %v, want %v", rp.Partition, kerr.ErrorForCode(rp.ErrorCode), kerr.ErrorForCode(want))
			}
		}
	}
}
