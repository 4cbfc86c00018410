package broker

import (
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch semantics checked against Kafka's KafkaApis.handleFetchRequest,
// ReplicaManager.fetchMessages/readFromLog, DelayedFetch and FetchSession
// (from a review of the Fetch path).

// reviewPart is one partition of a reviewFetch: partition, fetch offset,
// partition_max_bytes and current leader epoch (-1: none).
type reviewPart struct {
	p       int32
	off     int64
	partMax int32
	epoch   int32
}

// reviewFetcher sends Fetch v12 requests for one topic's partitions on one
// connection, with client id client ("": none).
type reviewFetcher struct {
	t      *testing.T
	nc     net.Conn
	corr   int32
	topic  string
	client string
}

// fetch sends one fetch and returns the answer and how long it took.
func (f *reviewFetcher) fetch(id, sessEpoch, maxBytes, minBytes, maxWait int32, parts ...reviewPart) (*kmsg.FetchResponse, time.Duration) {
	f.t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.MaxBytes, req.MinBytes, req.MaxWaitMillis = maxBytes, minBytes, maxWait
	req.SessionID, req.SessionEpoch = id, sessEpoch
	if len(parts) > 0 {
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = f.topic
		for _, rp := range parts {
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = rp.p, rp.off, rp.partMax, rp.epoch
			ft.Partitions = append(ft.Partitions, fp)
		}
		req.Topics = append(req.Topics, ft)
	}
	f.corr++
	start := time.Now()
	resp, err := roundTripAs(f.nc, f.client, req, f.corr, 20*time.Second)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.(*kmsg.FetchResponse), time.Since(start)
}

// A partition that fails at lookup (here UNKNOWN_LEADER_EPOCH: the client
// knows a newer epoch; the same path serves FENCED_LEADER_EPOCH and
// NOT_LEADER_OR_FOLLOWER) ends the long poll at once, as in Kafka's
// ReplicaManager.fetchMessages (errorReadingData), although the other
// partition has no data. A partition the metadata does not know does not:
// Kafka answers those (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID,
// TOPIC_AUTHORIZATION_FAILED) beside the read and waits for the others.
func TestFetchLongPollEndsOnLookupError(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "lp", 2, nil)
	f := &reviewFetcher{t: t, nc: dial(t, b), topic: "lp"}
	r, _ := f.fetch(0, -1, 1<<20, 0, 0, reviewPart{0, 0, 1 << 20, -1})
	if r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("probe: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	tp, _ := b.meta.State().Topic("lp")
	le := tp.Partitions[0].LeaderEpoch
	r, took := f.fetch(0, -1, 1<<20, 1, 3000, reviewPart{0, 0, 1 << 20, le + 1}, reviewPart{1, 0, 1 << 20, -1})
	if code := r.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownLeaderEpoch.Code {
		t.Fatalf("partition 0: %v, want UNKNOWN_LEADER_EPOCH", kerr.ErrorForCode(code))
	}
	if took > time.Second {
		t.Errorf("the UNKNOWN_LEADER_EPOCH answer waited %v (max_wait 3s); Kafka answers an error at once", took)
	}
	// An unknown partition waits for the known one, to max_wait.
	r, took = f.fetch(0, -1, 1<<20, 1, 500, reviewPart{7, 0, 1 << 20, -1}, reviewPart{1, 0, 1 << 20, -1})
	if code := r.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("partition 7: %v, want UNKNOWN_TOPIC_OR_PARTITION", kerr.ErrorForCode(code))
	}
	if took < 400*time.Millisecond {
		t.Errorf("an unknown partition ended the long poll after %v (max_wait 500ms); Kafka waits for the others", took)
	}
}

// min_bytes is met in Kafka by the bytes a read finds up to each
// partition's limit: readFromLog slices the log at the limit, a partial
// last batch included (and DelayedFetch.tryComplete counts
// min(partition_max_bytes, bytes available)); and min_bytes is capped at
// the fetch's max_bytes (KafkaApis.handleFetchRequest: fetchMinBytes =
// min(minBytes, fetchMaxBytes)). Counting only the whole batches that fit,
// a consumer with fetch.min.bytes = max.partition.fetch.bytes would wait
// max_wait on every fetch although far more is ready.
func TestFetchMinBytesCountsBytesReady(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "mb", 1, nil)
	produceBig(t, b, "mb", 1, 10) // ten batches of ~20 KB
	f := &reviewFetcher{t: t, nc: dial(t, b), topic: "mb"}
	for _, c := range []struct {
		name                        string
		maxBytes, minBytes, partMax int32
		wantBatches                 int
	}{
		// Two batches (~40 KB) fit partition_max_bytes 50000; 200 KB
		// are ready.
		{"min_bytes = partition_max_bytes", 50 << 20, 50000, 50000, 2},
		// The same under max_bytes, min_bytes above it.
		{"min_bytes > max_bytes", 50000, 100000, 1 << 20, 2},
		// The first batch alone (over max_bytes) meets the capped min_bytes.
		{"min_bytes > max_bytes, one batch", 10000, 100000, 1 << 20, 1},
	} {
		r, took := f.fetch(0, -1, c.maxBytes, c.minBytes, 3000, reviewPart{0, 0, c.partMax, -1})
		p := r.Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			t.Fatalf("%s: %v", c.name, kerr.ErrorForCode(p.ErrorCode))
		}
		if n := len(p.RecordBatches); n < c.wantBatches*20000 || n > (c.wantBatches+1)*20000 {
			t.Errorf("%s: %d bytes, want %d batches", c.name, n, c.wantBatches)
		}
		if took > time.Second {
			t.Errorf("%s: waited %v with 200 KB ready (Kafka answers at once)", c.name, took)
		}
	}
	// Not enough: the whole log (~200 KB) is below min_bytes; it waits.
	r, took := f.fetch(0, -1, 50<<20, 1<<20, 500, reviewPart{0, 0, 1 << 20, -1})
	if n := len(r.Topics[0].Partitions[0].RecordBatches); n < 200000 || took < 400*time.Millisecond {
		t.Errorf("min_bytes over what is ready: %d bytes after %v, want all after max_wait", n, took)
	}
}

// min_bytes is capped at max_bytes as lowered to the client's fetch quota
// (boundFetch; Kafka's fetchMaxBytes includes getMaxValueInQuotaWindow):
// a quota of 5000 B/s over 10 windows lets 50000 bytes through, so
// min_bytes 1 MiB is met by what fits 50000.
func TestFetchMinBytesCappedAtQuota(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "mq", 1, nil)
	produceBig(t, b, "mq", 1, 10)
	slow := "slow"
	res, err := kadm.NewClient(newClient(t, b)).AlterClientQuotas(testCtx(t), []kadm.AlterClientQuotaEntry{
		quotaEntry(nil, &slow, kadm.AlterClientQuotaOp{Key: "consumer_byte_rate", Value: 5000}),
	})
	if err != nil || res[0].Err != nil {
		t.Fatalf("alter: %v %+v", err, res)
	}
	waitCond(t, func() bool { return b.quotas.currentTable().any[quotaTypeFetch] })
	f := &reviewFetcher{t: t, nc: dial(t, b), topic: "mq", client: slow}
	r, took := f.fetch(0, -1, 50<<20, 1<<20, 3000, reviewPart{0, 0, 1 << 20, -1})
	if code := r.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("fetch: %v", kerr.ErrorForCode(code))
	}
	if n := len(r.Topics[0].Partitions[0].RecordBatches); n > 50000 {
		t.Errorf("%d bytes over the quota's 50000", n)
	}
	if took > time.Second {
		t.Errorf("waited %v with 200 KB ready and max_bytes lowered to 50000 by the quota", took)
	}
}

// Kafka's CachedPartition.maybeUpdateResponseData sets the cached high
// watermark to -1 when it answers an error, so that an incremental fetch
// sends the partition again once the error clears. OFFSET_OUT_OF_RANGE
// carries the real high watermark here: without that, the partition's
// first good answer (same high watermark, no records) was left out.
func TestFetchSessionResendsClearedError(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "ec", 1, nil)
	produceBig(t, b, "ec", 1, 1)
	f := &reviewFetcher{t: t, nc: dial(t, b), topic: "ec"}
	full, _ := f.fetch(0, 0, 1<<20, 0, 0, reviewPart{0, 1, 1 << 20, -1})
	if full.ErrorCode != 0 || full.SessionID == 0 {
		t.Fatalf("full: %+v", full)
	}
	id := full.SessionID
	// Out of range: offset 5 past the log end 1.
	r, _ := f.fetch(id, 1, 1<<20, 0, 0, reviewPart{0, 5, 1 << 20, -1})
	if len(r.Topics) != 1 || r.Topics[0].Partitions[0].ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Fatalf("want OFFSET_OUT_OF_RANGE, got %+v", r.Topics)
	}
	// The client resets to the log end: the error is gone.
	r, _ = f.fetch(id, 2, 1<<20, 0, 0, reviewPart{0, 1, 1 << 20, -1})
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
		t.Fatalf("the partition whose error cleared was left out of the incremental answer (Kafka sends it): %+v", r.Topics)
	}
	if p := r.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.HighWatermark != 1 {
		t.Fatalf("after the reset: %v, high watermark %d", kerr.ErrorForCode(p.ErrorCode), p.HighWatermark)
	}
	// And then nothing new: left out again.
	if r, _ = f.fetch(id, 3, 1<<20, 0, 0); len(r.Topics) != 0 {
		t.Fatalf("nothing new, yet %+v", r.Topics)
	}
}

// max_bytes 0 (or negative) is no limit of 0 bytes: Kafka's fetchMaxBytes
// is min(max_bytes, fetch.max.bytes, the quota's bound), and with 0 only
// the first batch comes (KIP-74's minOneMessage). It was read as no limit.
func TestFetchMaxBytesZero(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "mz", 2, nil)
	produceBig(t, b, "mz", 2, 5)
	f := &reviewFetcher{t: t, nc: dial(t, b), topic: "mz"}
	for _, maxBytes := range []int32{0, -1} {
		r, _ := f.fetch(0, -1, maxBytes, 0, 0, reviewPart{0, 0, 1 << 20, -1}, reviewPart{1, 0, 1 << 20, -1})
		p0, p1 := r.Topics[0].Partitions[0], r.Topics[0].Partitions[1]
		if p0.ErrorCode != 0 || p1.ErrorCode != 0 {
			t.Fatalf("max_bytes %d: %v, %v", maxBytes, kerr.ErrorForCode(p0.ErrorCode), kerr.ErrorForCode(p1.ErrorCode))
		}
		if n0, n1 := len(p0.RecordBatches), len(p1.RecordBatches); n0 < 20000 || n0 > 25000 || n1 != 0 {
			t.Errorf("max_bytes %d: %d and %d bytes, want the first batch of the first partition only", maxBytes, n0, n1)
		}
	}
}

// fetch.max.bytes bounds every Fetch answer, as Kafka's broker setting
// (default 55 MiB), whatever max_bytes asks; the first batch still comes
// whole.
func TestFetchBrokerMaxBytes(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.FetchMaxBytes = 50000 })
	createTopic(t, b, "bm", 1, nil)
	produceBig(t, b, "bm", 1, 5)
	f := &reviewFetcher{t: t, nc: dial(t, b), topic: "bm"}
	for _, maxBytes := range []int32{1 << 30, 0} {
		r, _ := f.fetch(0, -1, maxBytes, 0, 0, reviewPart{0, 0, 1 << 30, -1})
		wantMin, wantMax := 40000, 50000 // two batches of ~20 KB fit 50000
		if maxBytes == 0 {
			wantMin, wantMax = 20000, 25000
		}
		if n := len(r.Topics[0].Partitions[0].RecordBatches); n < wantMin || n > wantMax {
			t.Errorf("max_bytes %d under fetch.max.bytes 50000: %d bytes, want %d to %d", maxBytes, n, wantMin, wantMax)
		}
	}
	// DescribeConfigs shows it, read-only.
	rc, err := kadm.NewClient(newClient(t, b)).DescribeBrokerConfigs(testCtx(t), b.cfg.NodeID)
	if err != nil || rc[0].Err != nil {
		t.Fatalf("describe: %v %v", err, rc)
	}
	found := false
	for _, c := range rc[0].Configs {
		if c.Key == "fetch.max.bytes" {
			found = true
			if c.Value == nil || *c.Value != "50000" || c.Source != kmsg.ConfigSourceStaticBrokerConfig {
				t.Errorf("fetch.max.bytes %+v, want the static 50000", c)
			}
		}
	}
	if !found {
		t.Errorf("fetch.max.bytes not described")
	}
	if d := startBroker(t, ""); d.cfg.FetchMaxBytes != 55<<20 {
		t.Errorf("default fetch.max.bytes %d, want Kafka's 55 MiB", d.cfg.FetchMaxBytes)
	}
}

// partition_max_bytes 0 (or negative) gives the first partition with data
// its first batch (Kafka's minOneMessage: a read of at most 0 bytes that
// returns the first batch whole) and the others nothing; it returned
// nothing at all, so a client sending 0 never progressed.
func TestFetchPartitionMaxBytesZero(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "pz", 2, nil)
	produceBig(t, b, "pz", 2, 3)
	f := &reviewFetcher{t: t, nc: dial(t, b), topic: "pz"}
	for _, partMax := range []int32{0, -1} {
		r, _ := f.fetch(0, -1, 1<<20, 0, 0, reviewPart{0, 0, partMax, -1}, reviewPart{1, 0, partMax, -1})
		p0, p1 := r.Topics[0].Partitions[0], r.Topics[0].Partitions[1]
		if p0.ErrorCode != 0 || p1.ErrorCode != 0 || p0.HighWatermark != 3 || p1.HighWatermark != 3 {
			t.Fatalf("partition_max_bytes %d: %+v", partMax, r.Topics)
		}
		if n0, n1 := len(p0.RecordBatches), len(p1.RecordBatches); n0 < 20000 || n0 > 25000 || n1 != 0 {
			t.Errorf("partition_max_bytes %d: %d and %d bytes, want the first batch of the first partition only", partMax, n0, n1)
		}
	}
}

// A session opened with topic names (Fetch v12 and below) answers an
// incremental fetch with topic ids (v13+) FETCH_SESSION_TOPIC_ID_ERROR, and
// the other way round, as Kafka's FetchManager.newContext: the session's
// partitions are keyed by one or the other. It used to mix both.
func TestFetchSessionTopicIDError(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "ti", 1, nil)
	tp, _ := b.meta.State().Topic("ti")
	nc := dial(t, b)
	var corr int32
	fetch := func(version int16, id, epoch int32, withTopic bool) *kmsg.FetchResponse {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version = version
		req.MaxBytes = 1 << 20
		req.SessionID, req.SessionEpoch = id, epoch
		if withTopic {
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic, ft.TopicID = "ti", tp.ID
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.PartitionMaxBytes = 1 << 20
			ft.Partitions = append(ft.Partitions, fp)
			req.Topics = append(req.Topics, ft)
		}
		corr++
		return rawRequest(t, nc, req, corr).(*kmsg.FetchResponse)
	}
	for _, c := range []struct{ open, next int16 }{{12, 13}, {13, 12}} {
		full := fetch(c.open, 0, 0, true)
		if full.ErrorCode != 0 || full.SessionID == 0 || len(full.Topics) != 1 || full.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("v%d full: %+v", c.open, full)
		}
		if r := fetch(c.next, full.SessionID, 1, false); r.ErrorCode != kerr.FetchSessionTopicIDError.Code {
			t.Errorf("session opened with v%d, incremental v%d: %v, want FETCH_SESSION_TOPIC_ID_ERROR", c.open, c.next, kerr.ErrorForCode(r.ErrorCode))
		}
		// The session is still there for its own kind of request.
		if r := fetch(c.open, full.SessionID, 1, false); r.ErrorCode != 0 {
			t.Errorf("v%d session, incremental v%d: %v", c.open, c.open, kerr.ErrorForCode(r.ErrorCode))
		}
	}
}
