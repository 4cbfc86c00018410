package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fastCleaner makes the cleaner look for work and apply retention often.
func fastCleaner(c *Config) {
	c.Cleaner.Backoff = 20 * time.Millisecond
	c.Cleaner.RetentionCheckInterval = 50 * time.Millisecond
}

// pollUntil calls cond every few milliseconds until it returns "" or the
// deadline passes; then it fails with cond's last answer.
func pollUntil(t *testing.T, d time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, why)
		}
		<-tick.C
	}
}

// counterValue reads a counter from the broker's metrics registry.
func counterValue(t *testing.T, b *Broker, name string) float64 {
	t.Helper()
	mfs, err := b.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// readUntilKey reads topic's partition 0 from the earliest offset until
// the record with key last.
func readUntilKey(t *testing.T, b *Broker, topic, last string) []*kgo.Record {
	t.Helper()
	cl := newClient(t, b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(100*time.Millisecond))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %d records, never saw key %s", topic, len(out), last)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch %s: %v", topic, err) })
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if !done {
				out = append(out, r)
			}
			done = done || string(r.Key) == last
		})
		if done {
			return out
		}
	}
}

func TestCompactedTopicEndToEnd(t *testing.T) {
	b := startBroker(t, "", fastCleaner)
	const topic = "compacted"
	createTopic(t, b, topic, 1, map[string]*string{
		"cleanup.policy":            kadm.StringPtr("compact"),
		"segment.bytes":             kadm.StringPtr("1024"),
		"delete.retention.ms":       kadm.StringPtr("100"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"),
	})
	cl := newClient(t, b, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := testCtx(t)
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	// Records without a key are refused (INVALID_RECORD), compressed or not.
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.ZstdCompression(), kgo.GzipCompression()} {
		pc := newClient(t, b, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerBatchCompression(codec), kgo.RecordRetries(0))
		err := pc.ProduceSync(ctx, &kgo.Record{Key: []byte("ok"), Value: []byte("x")}, &kgo.Record{Value: []byte("no key")}).FirstErr()
		if !errors.Is(err, kerr.InvalidRecord) {
			t.Fatalf("%v: keyless record in a compacted topic: %v, want INVALID_RECORD", codec, err)
		}
	}
	// The response names the keyless records by their index in the batch
	// (KIP-467), so that clients fail only those (librdkafka's own test
	// 0011_produce_batch counts them) and the rest with a retriable error.
	var recs []byte
	for i := range 5 {
		r := kmsg.NewRecord()
		r.OffsetDelta = int32(i)
		if i != 1 && i != 3 {
			r.Key = []byte(fmt.Sprintf("key-%d", i))
		}
		r.Value = []byte("v")
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = append(recs, r.AppendTo(nil)...)
	}
	rb := kmsg.NewRecordBatch()
	rb.Magic, rb.LastOffsetDelta, rb.NumRecords, rb.Records = 2, 4, 5, recs
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = -1, -1, -1
	raw := rb.AppendTo(nil)
	putU32(raw[8:], uint32(len(raw)-12))
	putU32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	rp := produceRaw(t, dial(t, b), topic, raw, -1, 9, 1)
	var idx []int32
	for _, er := range rp.ErrorRecords {
		idx = append(idx, er.RelativeOffset)
	}
	if rp.ErrorCode != kerr.InvalidRecord.Code || !slices.Equal(idx, []int32{1, 3}) {
		t.Fatalf("keyless records 1 and 3 of a batch: error %d, record errors at %v; want INVALID_RECORD at [1 3]", rp.ErrorCode, idx)
	}
	want := map[string]string{}
	const keys, rounds = 30, 5
	for r := range rounds {
		for k := 0; k < keys; k += 5 {
			var recs []*kgo.Record
			for j := k; j < k+5; j++ {
				key, val := fmt.Sprintf("k%02d", j), fmt.Sprintf("k%02d round %d %s", j, r, strings.Repeat("v", 20))
				recs = append(recs, &kgo.Record{Key: []byte(key), Value: []byte(val)})
				want[key] = val
			}
			produce(recs...)
		}
	}
	// Tombstones for the first ten keys.
	for k := range 10 {
		key := fmt.Sprintf("k%02d", k)
		produce(&kgo.Record{Key: []byte(key)})
		delete(want, key)
	}
	// Unique keys to seal the segments holding the updates and tombstones:
	// the active segment is never cleaned.
	const fillers = 40
	for i := range fillers {
		key := fmt.Sprintf("filler-%02d", i)
		val := key + strings.Repeat("f", 60)
		produce(&kgo.Record{Key: []byte(key), Value: []byte(val)})
		want[key] = val
	}
	last := fmt.Sprintf("filler-%02d", fillers-1)

	pollUntil(t, 30*time.Second, func() string {
		st, ok := b.cleaner.status(topic, 0)
		if !ok {
			return "partition not registered with the cleaner"
		}
		if !st.Policy.Compact || st.Policy.Delete {
			return fmt.Sprintf("policy %v, want compact", st.Policy)
		}
		if st.LastCleaned.IsZero() {
			return fmt.Sprintf("never cleaned (last error %v)", st.LastError)
		}
		recs := readUntilKey(t, b, topic, last)
		seen := map[string]bool{}
		prev := int64(-1)
		for _, r := range recs {
			k := string(r.Key)
			if r.Offset <= prev {
				return fmt.Sprintf("offsets out of order: %d after %d", r.Offset, prev)
			}
			prev = r.Offset
			if seen[k] {
				return fmt.Sprintf("key %s seen twice (%d records)", k, len(recs))
			}
			seen[k] = true
			if w, live := want[k]; !live {
				return fmt.Sprintf("deleted key %s still there (value %q)", k, r.Value)
			} else if string(r.Value) != w {
				return fmt.Sprintf("key %s: value %q, want %q", k, r.Value, w)
			}
		}
		if len(seen) != len(want) {
			return fmt.Sprintf("%d live keys read, want %d", len(seen), len(want))
		}
		return ""
	})

	// __consumer_offsets is compacted too.
	adm := kadm.NewClient(cl)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 1})
	if _, err := adm.CommitOffsets(ctx, "cleaner-group", offs); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range b.allPartitions() {
		if p.topic != "__consumer_offsets" {
			continue
		}
		found = true
		if st, ok := b.cleaner.status(p.topic, p.id); !ok || !st.Policy.Compact {
			t.Fatalf("__consumer_offsets-%d: registered %v, policy %v", p.id, ok, st.Policy)
		}
	}
	if !found {
		t.Fatal("no __consumer_offsets partition open after a commit")
	}
}

func TestRetentionBytesAfterAlterConfigs(t *testing.T) {
	b := startBroker(t, "", fastCleaner)
	const topic = "retained"
	createTopic(t, b, topic, 1, map[string]*string{"segment.bytes": kadm.StringPtr("1024")})
	cl := newClient(t, b, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := testCtx(t)
	const n = 60
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%03d %s", i, strings.Repeat("r", 150)))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	start := func() int64 {
		t.Helper()
		lo, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := lo.Lookup(topic, 0)
		if !ok || o.Err != nil {
			t.Fatalf("list offsets: %v %v", ok, o.Err)
		}
		return o.Offset
	}
	if s := start(); s != 0 {
		t.Fatalf("log start %d before retention.bytes is set", s)
	}
	res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr("2048")}}, topic)
	if err != nil || res[0].Err != nil {
		t.Fatalf("alter: %v %v", err, res)
	}
	var s int64
	pollUntil(t, 30*time.Second, func() string {
		if s = start(); s == 0 {
			return "log start offset still 0"
		}
		// The metric follows the deletion.
		if counterValue(t, b, "sediment_log_cleaner_retention_segments_deleted_total") == 0 {
			return "segments deleted by retention not counted"
		}
		return ""
	})
	// What is left is about retention.bytes (whole segments), and reads
	// from the earliest offset start there.
	if s < n/2 {
		t.Fatalf("log start %d: too little deleted for 2048 bytes kept of %d records of ~220 bytes", s, n)
	}
	if recs := readUntilKey(t, b, topic, ""); recs[0].Offset != s {
		t.Fatalf("first record read from the earliest offset: %d, log start %d", recs[0].Offset, s)
	}
}

// A compacted __consumer_offsets still gives every group its latest
// offsets after a restart.
func TestCompactedConsumerOffsetsRestore(t *testing.T) {
	dir := t.TempDir()
	oneOffsetsPartition := func(c *Config) { c.Groups.Partitions = 1 }
	b := startBroker(t, dir, fastCleaner, oneOffsetsPartition)
	createTopic(t, b, "data", 4, nil)
	ctx := testCtx(t)
	commit := func(b *Broker, group string, round int) {
		t.Helper()
		adm := kadm.NewClient(newClient(t, b))
		defer adm.Close()
		offs := kadm.Offsets{}
		for p := range int32(4) {
			offs.Add(kadm.Offset{Topic: "data", Partition: p, At: int64(round*10) + int64(p), LeaderEpoch: -1})
		}
		resp, err := adm.CommitOffsets(ctx, group, offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("commit %s: %v", group, err)
		}
	}
	commit(b, "g0", 0) // creates __consumer_offsets
	// Small segments for the offsets topic; an open log takes them at the
	// next open, hence the restart.
	adm := kadm.NewClient(newClient(t, b))
	res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "segment.bytes", Value: kadm.StringPtr("1024")},
		{Op: kadm.SetConfig, Name: "min.cleanable.dirty.ratio", Value: kadm.StringPtr("0.01")},
	}, "__consumer_offsets")
	if err != nil || res[0].Err != nil {
		t.Fatalf("alter: %v %v", err, res)
	}
	adm.Close()
	b.Close()
	b = startBroker(t, dir, fastCleaner, oneOffsetsPartition)
	const groups, rounds = 5, 15
	for r := range rounds {
		for g := range groups {
			commit(b, fmt.Sprintf("g%d", g), r)
		}
	}
	pollUntil(t, 30*time.Second, func() string {
		st, ok := b.cleaner.status("__consumer_offsets", 0)
		switch {
		case !ok:
			return "__consumer_offsets-0 not registered"
		case !st.Policy.Compact:
			return fmt.Sprintf("policy %v", st.Policy)
		case st.LastCleaned.IsZero():
			return fmt.Sprintf("never cleaned (last error %v)", st.LastError)
		case counterValue(t, b, "sediment_log_cleaner_records_dropped_total") == 0:
			return "cleaned, but no record dropped yet"
		}
		return ""
	})
	b.Close()
	b = startBroker(t, dir, fastCleaner, oneOffsetsPartition)
	adm = kadm.NewClient(newClient(t, b))
	for g := range groups {
		var offs kadm.OffsetResponses
		pollUntil(t, 30*time.Second, func() string {
			var err error
			offs, err = adm.FetchOffsets(ctx, fmt.Sprintf("g%d", g))
			if err != nil {
				return err.Error()
			}
			return ""
		})
		for p := range int32(4) {
			o, ok := offs.Lookup("data", p)
			if want := int64((rounds-1)*10) + int64(p); !ok || o.Err != nil || o.At != want {
				t.Fatalf("g%d data/%d after compaction and restart: %v %v %d, want %d", g, p, ok, o.Err, o.At, want)
			}
		}
	}
}

// TestFollowerCatchesUpOverCompactionGap: one producer's updates of a few
// keys on a compacted topic with a single replica; the cleaner removes the
// first batches whole (a producer's batches but its last are not kept), so
// the leader's log starts at 0 with its first batch far past it. A replica
// added then fetches at 0 and gets that batch: it must append past the gap
// (as a Kafka follower does) and join the ISR. Before, it refused the batch
// as not continuing its log, truncated and fetched again, ten times a
// second, and never caught up: reassignments of compacted partitions (and
// __consumer_offsets) never finished, a restarted replica stayed out of
// the ISR.
func TestFollowerCatchesUpOverCompactionGap(t *testing.T) {
	brokers := startPair(t, func(c *Config) {
		c.Listeners = []Listener{{Addr: "127.0.0.1:0"}}
		fastCleaner(c)
	})
	ctx := testCtx(t)
	const topic = "gapped"
	mt := createOnBroker1(t, brokers, topic, map[string]string{"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"})
	leader := brokers[0]
	cl := newClient(t, leader, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression())) // latestValues reads the records
	want := map[string]string{}
	for round := range 60 {
		var recs []*kgo.Record
		for k := range 4 {
			key, val := fmt.Sprintf("k%d", k), fmt.Sprintf("k%d round %d %s", k, round, strings.Repeat("v", 30))
			recs = append(recs, &kgo.Record{Key: []byte(key), Value: []byte(val)})
			want[key] = val
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	lp, err := leader.store.partition(leader.meta.State(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 30*time.Second, func() string {
		res, err := lp.log.Read(0, 1, lp.log.LogEndOffset())
		if err != nil {
			return err.Error()
		}
		defer res.Release()
		if res.FirstOffset < 100 {
			return fmt.Sprintf("the leader's first batch at %d, log start %d: not cleaned yet", res.FirstOffset, lp.log.LogStartOffset())
		}
		return ""
	})
	if start := lp.log.LogStartOffset(); start != 0 {
		t.Fatalf("leader's log start %d, want 0 (cleaned, not deleted)", start)
	}
	reassignPartition0(t, leader, topic, 1, 2)
	pollUntil(t, 30*time.Second, func() string {
		p, _ := leader.meta.State().Partition(mt.ID, 0)
		if !slices.Equal(p.Replicas, []int32{1, 2}) || len(p.ISR) != 2 {
			return fmt.Sprintf("replicas %v, ISR %v: the new replica did not catch up", p.Replicas, p.ISR)
		}
		return ""
	})
	mt2, _ := brokers[1].meta.State().Topic(topic)
	fp, err := brokers[1].store.openLocked(mt2, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Each replica cleans its own copy, so their bytes may differ; the
	// latest value of every key, at its offset, may not.
	latest := func(p *partition) map[string]string {
		res, err := p.log.Read(0, 64<<20, p.log.LogEndOffset())
		if err != nil {
			t.Fatal(err)
		}
		defer res.Release()
		var b bytes.Buffer
		if _, err := res.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		return latestValues(t, b.Bytes())
	}
	pollUntil(t, 30*time.Second, func() string {
		if l, f := lp.log.LogEndOffset(), fp.log.LogEndOffset(); l != f {
			return fmt.Sprintf("log ends: leader %d, follower %d", l, f)
		}
		return ""
	})
	lv, fv := latest(lp), latest(fp)
	if len(lv) != len(want) || len(fv) != len(want) {
		t.Fatalf("keys: leader %d, follower %d, produced %d", len(lv), len(fv), len(want))
	}
	for k, v := range want {
		if !strings.HasSuffix(lv[k], " "+v) || lv[k] != fv[k] {
			t.Fatalf("key %s: leader %q, follower %q, want %q", k, lv[k], fv[k], v)
		}
	}
}

// latestValues decodes uncompressed record batches and returns each key's
// last record as "offset value".
func latestValues(t *testing.T, raw []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	for len(raw) >= 61 {
		size := int(binary.BigEndian.Uint32(raw[8:12])) + 12
		if size > len(raw) {
			t.Fatalf("a batch of %d bytes, %d left", size, len(raw))
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(raw[:size]); err != nil {
			t.Fatal(err)
		}
		raw = raw[size:]
		if rb.Attributes&0x20 != 0 || rb.Attributes&0x07 != 0 {
			continue // a control batch (compressed ones are not produced here)
		}
		recs := rb.Records
		for range rb.NumRecords {
			l, n := binary.Varint(recs)
			if n <= 0 || int(l) > len(recs)-n {
				t.Fatalf("bad record length")
			}
			body := recs[n : n+int(l)]
			recs = recs[n+int(l):]
			body = body[1:]            // attributes
			_, n = binary.Varint(body) // timestamp delta
			body = body[n:]
			od, n := binary.Varint(body)
			body = body[n:]
			kl, n := binary.Varint(body)
			body = body[n:]
			key := string(body[:kl])
			body = body[kl:]
			vl, n := binary.Varint(body)
			body = body[n:]
			val := ""
			if vl >= 0 {
				val = string(body[:vl])
			}
			out[key] = fmt.Sprintf("%d %s", rb.FirstOffset+od, val)
		}
	}
	return out
}
