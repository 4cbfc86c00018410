package broker

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Transactional offset commits: visible only when their transaction
// commits, never when it aborts, and still pending across a restart.

func fetchOffset(t testing.TB, cl *kgo.Client, groupID string, stable bool) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = groupID
	req.RequireStable = stable
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "src", []int32{0}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Groups) > 0 { // v8+: batched groups
		g := resp.Groups[0]
		if g.ErrorCode != 0 {
			return -1, g.ErrorCode
		}
		p := g.Topics[0].Partitions[0]
		return p.Offset, p.ErrorCode
	}
	if resp.ErrorCode != 0 {
		return -1, resp.ErrorCode
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, p.ErrorCode
}

// txnCommitOffset adds the group to the client's open transaction and
// commits offset for src/0 in it, by hand (as kafkajs does, v1 shape).
func txnCommitOffset(t testing.TB, cl *kgo.Client, id, groupID string, offset int64) {
	t.Helper()
	ctx := testCtx(t)
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = id, pid, epoch, groupID
	aresp, err := add.RequestWith(ctx, cl)
	if err != nil || aresp.ErrorCode != 0 {
		t.Fatalf("AddOffsetsToTxn: %v %v", err, kerr.ErrorForCode(aresp.ErrorCode))
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = id, groupID, pid, epoch
	req.Generation = -1
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = "src"
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = 0, offset, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("TxnOffsetCommit: %v", kerr.ErrorForCode(code))
	}
}

func waitOffset(t testing.TB, cl *kgo.Client, groupID string, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		off, code := fetchOffset(t, cl, groupID, true)
		if code == 0 && off == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("offset %d (%v), want %d", off, kerr.ErrorForCode(code), want)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
}

func TestTxnOffsetCommitVisibleOnCommit(t *testing.T) {
	dir := t.TempDir()
	b := txnTestBroker(t, dir)
	createTopic(t, b, "src", 1, nil)
	createTopic(t, b, "dst", 1, nil)
	ctx := testCtx(t)
	cl := txnClient(t, b, "offsets")
	reader := newClient(t, b)

	begin := func() {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, rec("dst", 0, "x")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	begin()
	txnCommitOffset(t, cl, "offsets", "g", 42)
	if off, code := fetchOffset(t, reader, "g", false); off != -1 || code != 0 {
		t.Fatalf("before commit: offset %d code %v", off, kerr.ErrorForCode(code))
	}
	if _, code := fetchOffset(t, reader, "g", true); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("require stable before commit: %v", kerr.ErrorForCode(code))
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	waitOffset(t, reader, "g", 42)

	// Aborted: the offset stays.
	begin()
	txnCommitOffset(t, cl, "offsets", "g", 50)
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	waitOffset(t, reader, "g", 42)

	// Pending across a restart: the replay keeps the transactional
	// records aside until the commit marker comes.
	begin()
	txnCommitOffset(t, cl, "offsets", "g", 60)
	cl.Close()
	reader.Close()
	b.Close()
	b = txnTestBroker(t, dir)
	reader = newClient(t, b)
	if off, code := fetchOffset(t, reader, "g", false); off != 42 || code != 0 {
		t.Fatalf("after restart, before commit: offset %d code %v", off, kerr.ErrorForCode(code))
	}
	if _, code := fetchOffset(t, reader, "g", true); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("after restart, require stable before commit: %v", kerr.ErrorForCode(code))
	}
	// The producer is gone; end its transaction through the coordinator
	// as its own client would (EndTxn with its id and epoch).
	pid, epoch := transactionalProducer(t, b, "offsets")
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "offsets", pid, epoch, true
	resp, err := end.RequestWith(testCtx(t), reader)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("EndTxn after restart: %v %v", err, kerr.ErrorForCode(resp.ErrorCode))
	}
	waitOffset(t, reader, "g", 60)
	// And once more after another restart (the marker is replayed).
	reader.Close()
	b.Close()
	b = txnTestBroker(t, dir)
	waitOffset(t, newClient(t, b), "g", 60)
}

func transactionalProducer(t testing.TB, b *Broker, id string) (int64, int16) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.txns.ensure(id)
	for {
		s, err := b.txns.c.Describe(ctx, []string{id})
		if err != nil {
			t.Fatal(err)
		}
		if s[0].ErrorCode == 0 {
			return s[0].ProducerID, s[0].Epoch
		}
		if ctx.Err() != nil {
			t.Fatalf("describe %s: %v", id, kerr.ErrorForCode(s[0].ErrorCode))
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
}

// TestTxnOffsetCommitRacingAbort: the transaction is aborted (a new
// instance's fence, a timeout, an admin) right after a TxnOffsetCommit's
// batch reached the log and before its handler went on (the hook makes
// the race happen every time; both wait for the same high watermark). The
// abort marker must find the offsets: the group's pending count is
// released (a RequireStable OffsetFetch is not UNSTABLE_OFFSET_COMMIT for
// ever) and the aborted offsets are not kept for the producer's next
// commit marker to apply.
func TestTxnOffsetCommitRacingAbort(t *testing.T) {
	b := txnTestBroker(t, t.TempDir())
	createTopic(t, b, "src", 1, nil)
	createTopic(t, b, "dst", 1, nil)
	ctx := testCtx(t)
	b.testHooks.txnOffsetsAppended = func() {
		if code, err := b.txns.c.Abort(ctx, "offsets"); err != nil || code != 0 {
			t.Errorf("abort: %v %v", err, kerr.ErrorForCode(code))
			return
		}
		// On the handler's goroutine: no t.Fatal here.
		tick := time.NewTicker(5 * time.Millisecond) // polling a condition
		defer tick.Stop()
		for {
			s, err := b.txns.c.Describe(ctx, []string{"offsets"})
			if err == nil && len(s) == 1 && s[0].State == "CompleteAbort" {
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				t.Errorf("the abort did not complete: %v", ctx.Err())
				return
			}
		}
	}
	cl := txnClient(t, b, "offsets")
	reader := newClient(t, b)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec("dst", 0, "x")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pid, epoch, _ := cl.ProducerID(ctx)
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = "offsets", pid, epoch, "g"
	if r, err := add.RequestWith(ctx, cl); err != nil || r.ErrorCode != 0 {
		t.Fatalf("AddOffsetsToTxn: %v %v", err, r)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch, req.Generation = "offsets", "g", pid, epoch, -1
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = "src"
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = 0, 99, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	if _, err := req.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	b.txns.mu.Lock()
	left := len(b.txns.mu.offsets[b.groups.partitionFor("g")][pid])
	b.txns.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d batches of aborted offsets kept for producer %d's next marker", left, pid)
	}
	if off, code := fetchOffset(t, reader, "g", true); code != 0 || off != -1 {
		t.Fatalf("RequireStable OffsetFetch after the abort: offset %d, %v; want -1, none", off, kerr.ErrorForCode(code))
	}
}
