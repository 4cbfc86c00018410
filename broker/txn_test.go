package broker

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/broker/txn"
	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/metadata"
)

// Transactions with real franz-go clients against a real broker.

func txnTestBroker(t testing.TB, dir string) *Broker {
	return startBroker(t, dir, func(c *Config) {
		c.Groups = group.Config{Partitions: 4, InitialRebalanceDelay: 100 * time.Millisecond, MinSessionTimeout: time.Second}
		c.Transactions = txn.Config{Partitions: 4, AbortInterval: 100 * time.Millisecond}
	})
}

func txnClient(t testing.TB, b *Broker, id string, opts ...kgo.Opt) *kgo.Client {
	return newClient(t, b, append([]kgo.Opt{kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
}

func rec(topic string, p int32, v string) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)}
}

// produceTxn runs one transaction of values on partition p and ends it.
func produceTxn(t testing.TB, cl *kgo.Client, topic string, p int32, commit bool, values ...string) {
	t.Helper()
	ctx := testCtx(t)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, rec(topic, p, v))
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// readValues consumes topic from the start with the isolation level until
// it has n records, and returns their values in order.
func readValues(t testing.TB, b *Broker, topic string, n int, committed bool) []string {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	got := consumeN(t, b, topic, n, kgo.FetchIsolationLevel(iso))
	var out []string
	for p := int32(0); p < int32(len(got)+8); p++ {
		for _, r := range got[p] {
			out = append(out, string(r.Value))
		}
	}
	return out
}

// rawFetch fetches partition 0 from offset 0 at an isolation level.
func rawFetch(t testing.TB, b *Broker, topic string, isolation int8) kmsg.FetchResponseTopicPartition {
	t.Helper()
	// Fetch up to v12 names topics (v13+ uses ids).
	cl := newClient(t, b, kgo.MaxVersions(kversion.V3_0_0()))
	req := kmsg.NewPtrFetchRequest()
	req.Version = 11
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.IsolationLevel = 0, 0, 1<<20, isolation
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = 0, 0, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("fetch: %v %v", kerr.ErrorForCode(resp.ErrorCode), kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
	}
	return resp.Topics[0].Partitions[0]
}

func TestTxnCommitAndAbortVisibility(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "tx", 2, nil)
	cl := txnClient(t, b, "visibility")
	produceTxn(t, cl, "tx", 0, true, values("c1", 10)...)
	produceTxn(t, cl, "tx", 0, false, values("a1", 10)...)
	produceTxn(t, cl, "tx", 0, true, values("c2", 5)...)

	// read_committed: the aborted records never show, and what follows
	// them does (so the reader got past them).
	got := readValues(t, b, "tx", 15, true)
	want := append(values("c1", 10), values("c2", 5)...)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("read_committed got %v, want %v", got, want)
	}
	// read_uncommitted sees the aborted records too.
	got = readValues(t, b, "tx", 25, false)
	want = append(append(values("c1", 10), values("a1", 10)...), values("c2", 5)...)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("read_uncommitted got %v, want %v", got, want)
	}
	// The fetch lists the aborted transaction: it starts at offset 11
	// (10 records and a commit marker). EndTxn answers once the decision
	// is logged; the last commit marker (offset 27) is written after, so
	// wait for the high watermark to pass it.
	var fp kmsg.FetchResponseTopicPartition
	testutil.WaitFor(t, 10*time.Second, "the last commit marker under the high watermark", func() bool {
		fp = rawFetch(t, b, "tx", 1)
		return fp.HighWatermark >= 28
	})
	if len(fp.AbortedTransactions) != 1 || fp.AbortedTransactions[0].FirstOffset != 11 {
		t.Fatalf("aborted transactions %+v", fp.AbortedTransactions)
	}
	if fp.LastStableOffset != fp.HighWatermark || fp.HighWatermark != 28 {
		t.Fatalf("LSO %d HW %d, want both 28", fp.LastStableOffset, fp.HighWatermark)
	}
	if fp := rawFetch(t, b, "tx", 0); fp.AbortedTransactions != nil {
		t.Fatalf("read_uncommitted got aborted transactions %+v", fp.AbortedTransactions)
	}

	// After a restart (producer state from its snapshot) the same holds.
	dir := b.cfg.DataDir
	b.Close()
	b = txnTestBroker(t, dir)
	fp = rawFetch(t, b, "tx", 1)
	if len(fp.AbortedTransactions) != 1 || fp.AbortedTransactions[0].FirstOffset != 11 || fp.LastStableOffset != 28 {
		t.Fatalf("after restart: LSO %d aborted %+v", fp.LastStableOffset, fp.AbortedTransactions)
	}
	got = readValues(t, b, "tx", 15, true)
	if len(got) != 15 || got[10] != "c2-0" {
		t.Fatalf("after restart read_committed got %v", got)
	}

	// The abort is in the segment's transaction index on disk. Lost with
	// every producer snapshot, it is rebuilt from the log on open.
	pdir := filepath.Join(dir, "logs", "tx-0")
	idx, err := os.ReadFile(filepath.Join(pdir, "00000000000000000000.txnindex"))
	if err != nil {
		t.Fatal(err)
	}
	if entries, err := hotlog.DecodeTxnIndex(idx); err != nil || len(entries) != 1 || entries[0] != (hotlog.AbortedTxn{ProducerID: entries[0].ProducerID, FirstOffset: 11, LastOffset: 21, LastStableOffset: 22}) {
		t.Fatalf(".txnindex holds %+v (%v)", entries, err)
	}
	b.Close()
	names, _ := os.ReadDir(pdir)
	for _, n := range names {
		if strings.HasSuffix(n.Name(), ".txnindex") || strings.HasSuffix(n.Name(), ".snapshot") {
			os.Remove(filepath.Join(pdir, n.Name()))
		}
	}
	b = txnTestBroker(t, dir)
	fp = rawFetch(t, b, "tx", 1)
	if len(fp.AbortedTransactions) != 1 || fp.AbortedTransactions[0].FirstOffset != 11 {
		t.Fatalf("after losing the index: aborted %+v", fp.AbortedTransactions)
	}
	if _, err := os.Stat(filepath.Join(pdir, "00000000000000000000.txnindex")); err != nil {
		t.Fatalf("index not rebuilt: %v", err)
	}
}

func TestTxnLSOHoldsAtOpenTransaction(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "lso", 1, nil)
	plain := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceAll(t, plain, []*kgo.Record{rec("lso", 0, "before")})
	cl := txnClient(t, b, "lso")
	ctx := testCtx(t)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec("lso", 0, "open-1"), rec("lso", 0, "open-2")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produceAll(t, plain, []*kgo.Record{rec("lso", 0, "after")})

	adm := kadm.NewClient(newClient(t, b))
	check := func(wantLSO, wantHW int64, wantRecords int) {
		t.Helper()
		fp := rawFetch(t, b, "lso", 1)
		if fp.LastStableOffset != wantLSO || fp.HighWatermark != wantHW {
			t.Fatalf("LSO %d HW %d, want %d %d", fp.LastStableOffset, fp.HighWatermark, wantLSO, wantHW)
		}
		var n int
		for _, r := range fetchRecords(t, fp.RecordBatches) {
			if r >= wantLSO {
				t.Fatalf("read_committed returned offset %d at or past the LSO %d", r, wantLSO)
			}
			n++
		}
		if n != wantRecords {
			t.Fatalf("read_committed returned %d records below LSO %d, want %d", n, wantLSO, wantRecords)
		}
		ends, err := adm.ListCommittedOffsets(testCtx(t), "lso")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := ends.Lookup("lso", 0); o.Offset != wantLSO {
			t.Fatalf("ListOffsets read_committed latest %d, want %d", o.Offset, wantLSO)
		}
	}
	check(1, 4, 1) // the open transaction starts at 1
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// The marker is written after EndTxn returns: wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for rawFetch(t, b, "lso", 1).LastStableOffset != 5 {
		if time.Now().After(deadline) {
			t.Fatal("LSO did not move past the committed transaction")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	check(5, 5, 4) // and its marker is at 4
}

// fetchRecords returns the offsets of the data records in raw batches.
func fetchRecords(t testing.TB, raw []byte) []int64 {
	t.Helper()
	var out []int64
	for len(raw) >= 61 {
		var rb kmsg.RecordBatch
		size := int(int32(uint32(raw[8])<<24|uint32(raw[9])<<16|uint32(raw[10])<<8|uint32(raw[11]))) + 12
		if size > len(raw) {
			break
		}
		if err := rb.ReadFrom(raw[:size]); err != nil {
			t.Fatal(err)
		}
		raw = raw[size:]
		if rb.Attributes&0x20 != 0 {
			continue
		}
		for i := int32(0); i < rb.NumRecords; i++ {
			out = append(out, rb.FirstOffset+int64(i))
		}
	}
	return out
}

func TestTxnFencing(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "fence", 1, nil)
	ctx := testCtx(t)
	old := txnClient(t, b, "fenced")
	if err := old.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := old.ProduceSync(ctx, rec("fence", 0, "zombie-1")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A second instance with the same id fences the first and aborts
	// what it left open.
	nw := txnClient(t, b, "fenced")
	produceTxn(t, nw, "fence", 0, true, "new-1", "new-2")

	err := old.ProduceSync(ctx, rec("fence", 0, "zombie-2")).FirstErr()
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("zombie produce: %v, want PRODUCER_FENCED", err)
	}
	if err := old.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("zombie commit succeeded")
	}
	// The new instance carries on; readers see only its records.
	produceTxn(t, nw, "fence", 0, true, "new-3")
	got := readValues(t, b, "fence", 3, true)
	if strings.Join(got, ",") != "new-1,new-2,new-3" {
		t.Fatalf("read_committed got %v", got)
	}
	// The zombie's first record is in the log, aborted.
	got = readValues(t, b, "fence", 4, false)
	if got[0] != "zombie-1" {
		t.Fatalf("read_uncommitted got %v", got)
	}
}

func TestTxnTimeoutAborts(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "timeout", 1, nil)
	ctx := testCtx(t)
	stalled := txnClient(t, b, "stalls", kgo.TransactionTimeout(time.Second))
	if err := stalled.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := stalled.ProduceSync(ctx, rec("timeout", 0, "stalled-1")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	plain := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceAll(t, plain, []*kgo.Record{rec("timeout", 0, "later-1"), rec("timeout", 0, "later-2")})
	// The producer stopped: the coordinator aborts after the timeout and
	// read_committed readers move on past it.
	got := readValues(t, b, "timeout", 2, true)
	if strings.Join(got, ",") != "later-1,later-2" {
		t.Fatalf("read_committed got %v", got)
	}
	// The markers are out; the completion is logged right after.
	adm := kadm.NewClient(newClient(t, b))
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, err := adm.DescribeTransactions(ctx, "stalls")
		if err != nil {
			t.Fatal(err)
		}
		d := ds["stalls"]
		if d.State == "CompleteAbort" && d.ProducerEpoch == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("describe: %+v", d)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	// The stalled producer was fenced.
	if err := stalled.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("the timed-out producer committed")
	}
	ls, err := adm.ListTransactions(ctx, nil, []string{"CompleteAbort"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ls["stalls"]; !ok || len(ls) != 1 {
		t.Fatalf("list: %+v", ls)
	}
	// v2's pattern (KIP-1152) must match the whole id; a pattern that
	// does not compile is INVALID_REGULAR_EXPRESSION.
	for _, c := range []struct {
		pattern string
		code    int16
		ids     int
	}{
		{"st.*s", 0, 1}, {"stall", 0, 0}, {"", 0, 1}, {"(st", kerr.InvalidRegularExpression.Code, 0},
	} {
		req := kmsg.NewPtrListTransactionsRequest()
		req.Version = 2
		req.StateFilters = []string{"CompleteAbort"}
		req.TransactionalIDPattern = kmsg.StringPtr(c.pattern)
		resp, err := req.RequestWith(ctx, newClient(t, b))
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode != c.code || len(resp.TransactionStates) != c.ids {
			t.Errorf("pattern %q: %v with %d transactions, want %v with %d", c.pattern,
				kerr.ErrorForCode(resp.ErrorCode), len(resp.TransactionStates), kerr.ErrorForCode(c.code), c.ids)
		}
	}
}

// TestTxnConsumeTransformProduce copies a topic with two GroupTransactSession
// instances (one leaves midway, forcing a rebalance) and checks that a
// read_committed reader of the output sees every input record exactly once,
// in order per partition.
func TestTxnConsumeTransformProduce(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "in", 2, nil)
	createTopic(t, b, "out", 2, nil)
	const n = 2000
	plain := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var in []*kgo.Record
	for i := 0; i < n; i++ {
		in = append(in, rec("in", int32(i%2), fmt.Sprintf("%d/%05d", i%2, i)))
	}
	produceAll(t, plain, in)

	var copied sync.Map
	var total sync.WaitGroup
	ctx, cancel := context.WithCancel(testCtx(t))
	// Stop and wait for the copiers however the test ends: they log
	// through t, which must not outlive the test.
	defer func() { cancel(); total.Wait() }()
	run := func(name string, stopAfter int) {
		defer total.Done()
		s, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(b.Addr()),
			kgo.TransactionalID(name),
			kgo.ConsumerGroup("copy"),
			kgo.ConsumeTopics("in"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.FetchMaxWait(100*time.Millisecond),
			kgo.SessionTimeout(3*time.Second),
		)
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		done := 0
		for ctx.Err() == nil {
			fs := s.PollRecords(ctx, 100)
			if ctx.Err() != nil {
				return
			}
			if err := s.Begin(); err != nil {
				t.Errorf("%s: begin: %v", name, err)
				return
			}
			var out []*kgo.Record
			fs.EachRecord(func(r *kgo.Record) {
				out = append(out, rec("out", r.Partition, string(r.Value)))
			})
			if len(out) > 0 {
				if err := s.ProduceSync(ctx, out...).FirstErr(); err != nil {
					t.Logf("%s: produce: %v (the transaction aborts)", name, err)
				}
			}
			committed, err := s.End(ctx, kgo.TryCommit)
			if err != nil && ctx.Err() == nil {
				t.Logf("%s: end: %v", name, err)
			}
			if committed {
				for _, r := range out {
					copied.Store(string(r.Value), true)
				}
				done += len(out)
			}
			if stopAfter > 0 && done >= stopAfter {
				return // leave the group: the other instance takes over
			}
		}
	}
	total.Add(2)
	go run("copier-a", n/4)
	go run("copier-b", 0)

	// The output, read_committed, must be the input exactly once.
	got := consumeN(t, b, "out", n, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	for p := int32(0); p < 2; p++ {
		prev := ""
		for _, r := range got[p] {
			v := string(r.Value)
			if !strings.HasPrefix(v, fmt.Sprintf("%d/", p)) || v <= prev {
				t.Fatalf("partition %d: %q after %q (duplicate or out of order)", p, v, prev)
			}
			prev = v
		}
		if len(got[p]) != n/2 {
			t.Fatalf("partition %d: %d records, want %d", p, len(got[p]), n/2)
		}
	}
	// Nothing more arrives (no duplicate after the n-th record).
	extra := rawFetch(t, b, "out", 1)
	if recs := fetchRecords(t, extra.RecordBatches); len(recs) != len(got[0]) {
		t.Fatalf("partition 0 holds %d committed records, want %d", len(recs), len(got[0]))
	}
	cancel()
	total.Wait()
}

// TestTxnAbortHanging: an admin finds a hanging transaction with
// DescribeProducers and aborts it with WriteTxnMarkers, as
// kafka-transactions.sh does; read_committed readers move past it.
func TestTxnAbortHanging(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "hang", 1, nil)
	ctx := testCtx(t)
	cl := txnClient(t, b, "hangs")
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec("hang", 0, "h1"), rec("hang", 0, "h2")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(newClient(t, b))
	ds, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"hang": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	var hanging kadm.DescribedProducer
	for _, p := range ds["hang"].Partitions[0].ActiveProducers {
		hanging = p
	}
	if hanging.CurrentTxnStartOffset != 0 {
		t.Fatalf("described producer %+v, want a transaction from offset 0", hanging)
	}
	if fp := rawFetch(t, b, "hang", 1); fp.LastStableOffset != 0 {
		t.Fatalf("LSO %d before the abort", fp.LastStableOffset)
	}
	res, err := adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{ProducerID: hanging.ProducerID, ProducerEpoch: hanging.ProducerEpoch, Topics: kadm.TopicsSet{"hang": {0: {}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		r.Topics.EachPartition(func(p kadm.TxnMarkersPartitionResponse) {
			if p.Err != nil {
				t.Fatalf("marker: %v", p.Err)
			}
		})
	}
	fp := rawFetch(t, b, "hang", 1)
	if fp.LastStableOffset != 3 || len(fp.AbortedTransactions) != 1 || len(fetchRecords(t, fp.RecordBatches)) != 2 {
		t.Fatalf("after abort: LSO %d aborted %+v", fp.LastStableOffset, fp.AbortedTransactions)
	}
	plain := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceAll(t, plain, []*kgo.Record{rec("hang", 0, "after")})
	if got := readValues(t, b, "hang", 1, true); len(got) != 1 || got[0] != "after" {
		t.Fatalf("read_committed got %v", got)
	}
}

// TestTxnLateWriteRefused: a transactional write that arrives after its
// transaction committed (a delayed retry, KAFKA-17754's shape) is refused
// and does not hold the LSO back.
func TestTxnLateWriteRefused(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "late", 1, nil)
	cl := txnClient(t, b, "late", kgo.ProducerBatchCompression(kgo.NoCompression()))
	produceTxn(t, cl, "late", 0, true, "a", "b")
	ctx := testCtx(t)
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the commit marker (the LSO reaches the end).
	deadline := time.Now().Add(10 * time.Second)
	for fp := rawFetch(t, b, "late", 1); fp.LastStableOffset != 3; fp = rawFetch(t, b, "late", 1) {
		if time.Now().After(deadline) {
			t.Fatalf("LSO %d", fp.LastStableOffset)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	batch := txnBatch(pid, epoch, 2, "late")
	id := "late"
	req := kmsg.NewPtrProduceRequest()
	req.TransactionID, req.Acks, req.TimeoutMillis = &id, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "late"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, newClient(t, b, kgo.MaxVersions(kversion.V3_0_0())))
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidTxnState.Code {
		t.Fatalf("late write: %v, want INVALID_TXN_STATE", kerr.ErrorForCode(code))
	}
	if fp := rawFetch(t, b, "late", 1); fp.LastStableOffset != 3 || fp.HighWatermark != 3 {
		t.Fatalf("LSO %d HW %d after the late write", fp.LastStableOffset, fp.HighWatermark)
	}
	// The producer's next transaction works.
	produceTxn(t, cl, "late", 0, true, "c")
	if got := readValues(t, b, "late", 3, true); strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("read_committed got %v", got)
	}
}

// TestTxnV2DelayedEndTxn is KAFKA-17754's shape under transaction.version
// 2, with franz-go's KIP-890 part 2 flow (Produce v12+ without
// AddPartitionsToTxn, EndTxn v5): every commit bumps the producer epoch, so
// a delayed EndTxn (or write) of a finished transaction, arriving while the
// next one is open, is fenced instead of ending it; the next transaction
// commits intact. A retry of the last EndTxn, before the next transaction
// began, gets the same answer.
func TestTxnV2DelayedEndTxn(t *testing.T) {
	b := txnTestBroker(t, "")
	createTopic(t, b, "v2", 1, nil)
	cl := txnClient(t, b, "v2-delayed")
	ctx := testCtx(t)
	// franz-go opts in to KIP-890 part 2 once it has seen the feature: its
	// first transaction (begun before any ApiVersions answer) is classic,
	// and it reloads its producer id after it.
	produceTxn(t, cl, "v2", 0, true, "zero")
	_, e0, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	produceTxn(t, cl, "v2", 0, true, "one")
	pid, e1, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e1 != e0+1 {
		t.Fatalf("epoch %d after a commit at %d: the client did not use EndTxn v5", e1, e0)
	}
	raw := newClient(t, b)
	endTxn := func(epoch int16, commit bool) int16 {
		t.Helper()
		req := kmsg.NewPtrEndTxnRequest()
		req.Version = 5
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = "v2-delayed", pid, epoch, commit
		resp, err := req.RequestWith(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode == 0 && (resp.ProducerID != pid || resp.ProducerEpoch != e1) {
			t.Fatalf("retry answered producer %d epoch %d, want %d %d", resp.ProducerID, resp.ProducerEpoch, pid, e1)
		}
		return resp.ErrorCode
	}
	// The commit's retry (its answer lost) is answered the same.
	if code := endTxn(e0, true); code != 0 {
		t.Fatalf("retried commit: %v", kerr.ErrorForCode(code))
	}
	// Transaction two is open: a delayed abort and a delayed commit of
	// transaction one are fenced.
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec("v2", 0, "two")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, commit := range []bool{false, true} {
		if code := endTxn(e0, commit); code != kerr.ProducerFenced.Code {
			t.Fatalf("delayed EndTxn(commit=%v) of the last transaction: %v, want PRODUCER_FENCED", commit, kerr.ErrorForCode(code))
		}
	}
	// A delayed write of transaction one is fenced at the partition too.
	old := encodeBatch([]group.Record{{Value: []byte("late")}}, pid, e0, attrTransactional, time.Now().UnixMilli())
	// Kafka (2.7+) answers INVALID_PRODUCER_EPOCH on Produce; librdkafka
	// raises its fatal _FENCED only on that code (its own test 0103).
	if code := rawProduce(t, b, raw, "v2", "v2-delayed", old); code != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("delayed write of the last transaction: %v, want INVALID_PRODUCER_EPOCH", kerr.ErrorForCode(code))
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit of transaction two: %v", err)
	}
	if got := readValues(t, b, "v2", 3, true); strings.Join(got, ",") != "zero,one,two" {
		t.Fatalf("read_committed got %v", got)
	}
	if _, e, _ := cl.ProducerID(ctx); e != e1+1 {
		t.Fatalf("epoch %d after the second commit", e)
	}
}

// rawProduce sends one batch with Produce v12+ and returns the partition's
// error code.
func rawProduce(t *testing.T, b *Broker, cl *kgo.Client, topic, txnID string, batch []byte) int16 {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version = 12
	req.TransactionID = &txnID
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID(t, b, topic) // v13 names topics by id
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0].ErrorCode
}

// TestTxnClassicOnly: with Transactions.ClassicOnly the broker finalizes
// transaction.version 0, and franz-go keeps the classic flow (no epoch bump
// per transaction).
func TestTxnClassicOnly(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.Transactions = txn.Config{Partitions: 4, AbortInterval: 100 * time.Millisecond, ClassicOnly: true}
	})
	createTopic(t, b, "classic", 1, nil)
	cl := txnClient(t, b, "classic")
	ctx := testCtx(t)
	for i := range 3 {
		produceTxn(t, cl, "classic", 0, true, fmt.Sprint(i))
	}
	_, e0, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	produceTxn(t, cl, "classic", 0, true, "3")
	if _, e1, _ := cl.ProducerID(ctx); e1 != e0 {
		t.Fatalf("epoch %d -> %d under the classic flow", e0, e1)
	}
	if got := readValues(t, b, "classic", 4, true); strings.Join(got, ",") != "0,1,2,3" {
		t.Fatalf("read_committed got %v", got)
	}
}

// txnBatch is a valid transactional batch of one record with value v, of
// producer id pid at epoch and sequence seq.
func txnBatch(pid int64, epoch int16, seq int32, v string) []byte {
	r := kmsg.Record{Value: []byte(v)}
	r.Length = int32(len(r.AppendTo(nil)) - 1) // what follows the one-byte length
	rb := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: 0x10, FirstTimestamp: 1, MaxTimestamp: 1,
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq, NumRecords: 1, Records: r.AppendTo(nil)}
	batch := rb.AppendTo(nil)
	putU32(batch[8:], uint32(len(batch)-12))
	putU32(batch[17:], crc32.Checksum(batch[21:], castagnoli))
	return batch
}

// DeleteRecords past the first offset of a transaction still open must not
// leave the last stable offset below the log start (Kafka clamps it in
// UnifiedLog.maybeIncrementFirstUnstableOffset): a read_committed
// ListOffsets(LATEST) would answer an offset out of range.
func TestLastStableOffsetNotBelowLogStart(t *testing.T) {
	l, err := hotlog.Open(hotlog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p := newTestPartition(t, l, &metadata.Partition{Leader: 1, LeaderEpoch: 3, PartitionEpoch: 5,
		Replicas: []int32{1}, ISR: []int32{1}})
	// Producer 7's transaction opens at offset 0; producer 8's records follow.
	if _, err := p.appendBatch(txnBatch(7, 0, 0, "a"), 1<<20, 3, false, false, func() {}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := p.appendBatch(txnBatch(8, 0, int32(i), "b"), 1<<20, 3, false, false, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("hw %d lso %d", l.HighWatermark(), p.lastStableOffset())
	if err := l.DeleteBefore(2); err != nil { // DeleteRecords(2) <= HW
		t.Fatal(err)
	}
	if lso, start := p.lastStableOffset(), l.LogStartOffset(); lso < start {
		t.Fatalf("last stable offset %d below the log start %d", lso, start)
	}
}
