package broker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/txn"
	"github.com/sediment-io/sediment/internal/testutil"
)

// txnCoordinatorEpoch is the leader epoch of id's __transaction_state
// partition: the coordinator epoch its markers carry.
func txnCoordinatorEpoch(t testing.TB, b *Broker, id string) int32 {
	t.Helper()
	top, ok := b.meta.State().Topic(txn.StateTopic)
	if !ok {
		t.Fatalf("no %s", txn.StateTopic)
	}
	return top.Partitions[b.txns.c.PartitionFor(id)].LeaderEpoch
}

// describeProducer returns the one producer DescribeProducers lists for
// topic's partition 0.
func describeProducer(t testing.TB, b *Broker, topic string) (kadm.DescribedProducer, bool) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, b))
	defer adm.Close()
	ds, err := adm.DescribeProducers(testCtx(t), kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	dp := ds[topic].Partitions[0]
	if dp.Err != nil {
		t.Fatal(dp.Err)
	}
	if len(dp.ActiveProducers) != 1 {
		return kadm.DescribedProducer{}, false
	}
	for _, p := range dp.ActiveProducers {
		return p, true
	}
	return kadm.DescribedProducer{}, false
}

// writeMarker sends one WriteTxnMarkers for topic's partition 0 and returns
// the partition's error.
func writeMarker(t testing.TB, b *Broker, topic string, producerID int64, producerEpoch int16, coordinatorEpoch int32, commit bool) error {
	t.Helper()
	adm := kadm.NewClient(newClient(t, b))
	defer adm.Close()
	res, err := adm.WriteTxnMarkers(testCtx(t), kadm.TxnMarkers{ProducerID: producerID, ProducerEpoch: producerEpoch,
		CoordinatorEpoch: coordinatorEpoch, Commit: commit, Topics: kadm.TopicsSet{topic: {0: {}}}})
	if err != nil {
		t.Fatal(err)
	}
	var perr error
	n := 0
	for _, r := range res {
		r.Topics.EachPartition(func(p kadm.TxnMarkersPartitionResponse) {
			n++
			perr = p.Err
		})
	}
	if n != 1 {
		t.Fatalf("%d marker results", n)
	}
	return perr
}

// TestTxnCoordinatorEpoch: DescribeProducers answers the coordinator epoch
// of a producer's last marker (-1 before any), which survives restarts
// (from the producer snapshot, and from the log when every snapshot is
// lost); a marker from an older coordinator epoch is fenced with
// TRANSACTION_COORDINATOR_FENCED and changes nothing, a retry at the same
// epoch is written, and the coordinator after a restart is not fenced.
func TestTxnCoordinatorEpoch(t *testing.T) {
	dir := t.TempDir()
	b := txnTestBroker(t, dir)
	createTopic(t, b, "ce", 1, nil)
	const id = "ce-id"
	cl := txnClient(t, b, id)

	// A transaction not yet ended: no marker, coordinator epoch -1.
	ctx := testCtx(t)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec("ce", 0, "a")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if p, ok := describeProducer(t, b, "ce"); !ok || p.CoordinatorEpoch != -1 || p.CurrentTxnStartOffset != 0 {
		t.Fatalf("open transaction, no marker yet: %+v", p)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// The markers follow EndTxn's answer.
	epoch := txnCoordinatorEpoch(t, b, id)
	var p kadm.DescribedProducer
	testutil.WaitFor(t, 10*time.Second, "the commit marker", func() bool {
		var ok bool
		p, ok = describeProducer(t, b, "ce")
		return ok && p.CurrentTxnStartOffset == -1
	})
	if p.CoordinatorEpoch != epoch {
		t.Fatalf("coordinator epoch %d after the commit, want %d (the %s leader epoch)", p.CoordinatorEpoch, epoch, txn.StateTopic)
	}
	// "a" at offset 0, the commit marker at 1.
	part, err := b.store.partition(b.meta.State(), "ce", 0)
	if err != nil {
		t.Fatal(err)
	}
	if end := part.log.LogEndOffset(); end != 2 {
		t.Fatalf("log end %d after the commit, want 2", end)
	}

	// A marker of an older coordinator is fenced and not written.
	err = writeMarker(t, b, "ce", p.ProducerID, p.ProducerEpoch, epoch-1, false)
	if !errors.Is(err, kerr.TransactionCoordinatorFenced) {
		t.Fatalf("marker at coordinator epoch %d: %v, want TRANSACTION_COORDINATOR_FENCED", epoch-1, err)
	}
	if end := part.log.LogEndOffset(); end != 2 {
		t.Fatalf("a fenced marker was appended: log end %d, want 2", end)
	}
	// A retry of the commit marker at the same epoch is written again
	// (idempotent: nothing is open, nothing changes).
	if err := writeMarker(t, b, "ce", p.ProducerID, p.ProducerEpoch, epoch, true); err != nil {
		t.Fatalf("retried marker: %v", err)
	}
	if again, _ := describeProducer(t, b, "ce"); again.CoordinatorEpoch != epoch || again.CurrentTxnStartOffset != -1 {
		t.Fatalf("after the retry: %+v", again)
	}
	if end := part.log.LogEndOffset(); end != 3 {
		t.Fatalf("the retried marker: log end %d, want 3", end)
	}
	var fp kmsg.FetchResponseTopicPartition
	testutil.WaitFor(t, 10*time.Second, "the high watermark past the retried marker", func() bool {
		fp = rawFetch(t, b, "ce", 1)
		return fp.HighWatermark == 3
	})
	if fp.LastStableOffset != fp.HighWatermark || len(fp.AbortedTransactions) != 0 {
		t.Fatalf("after the retry: LSO %d HW %d aborted %+v", fp.LastStableOffset, fp.HighWatermark, fp.AbortedTransactions)
	}
	if got := readValues(t, b, "ce", 1, true); len(got) != 1 || got[0] != "a" {
		t.Fatalf("read_committed got %v", got)
	}

	// A restart keeps it (producer snapshot written at close).
	cl.Close()
	b.Close()
	b = txnTestBroker(t, dir)
	if p2, ok := describeProducer(t, b, "ce"); !ok || p2.ProducerID != p.ProducerID || p2.CoordinatorEpoch != epoch {
		t.Fatalf("after a restart: %+v, want coordinator epoch %d", p2, epoch)
	}
	// So does one with every producer snapshot lost (replayed from the
	// markers in the log).
	b.Close()
	pdir := filepath.Join(dir, "logs", "ce-0")
	names, err := os.ReadDir(pdir)
	if err != nil {
		t.Fatal(err)
	}
	removed := 0
	for _, n := range names {
		if strings.HasSuffix(n.Name(), ".snapshot") {
			if err := os.Remove(filepath.Join(pdir, n.Name())); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed == 0 {
		t.Fatal("no producer snapshot to remove")
	}
	b = txnTestBroker(t, dir)
	if p2, ok := describeProducer(t, b, "ce"); !ok || p2.CoordinatorEpoch != epoch {
		t.Fatalf("after a restart without snapshots: %+v, want coordinator epoch %d", p2, epoch)
	}

	// The coordinator after the restarts (its epoch is the partition's
	// leader epoch, never lower) is not fenced: the same id commits again.
	cl = txnClient(t, b, id)
	produceTxn(t, cl, "ce", 0, true, "b")
	epoch2 := txnCoordinatorEpoch(t, b, id)
	if epoch2 < epoch {
		t.Fatalf("coordinator epoch went down across restarts: %d -> %d", epoch, epoch2)
	}
	testutil.WaitFor(t, 10*time.Second, "the second commit marker", func() bool {
		var ok bool
		p, ok = describeProducer(t, b, "ce")
		return ok && p.CurrentTxnStartOffset == -1 && p.CoordinatorEpoch == epoch2
	})
	if got := readValues(t, b, "ce", 2, true); len(got) != 2 || got[1] != "b" {
		t.Fatalf("read_committed after the restarts got %v", got)
	}
	// Restarts move the coordinator (the broker is fenced and unfenced);
	// a marker from the epoch before is fenced now.
	if epoch2 > epoch {
		if err := writeMarker(t, b, "ce", p.ProducerID, p.ProducerEpoch, epoch2-1, false); !errors.Is(err, kerr.TransactionCoordinatorFenced) {
			t.Fatalf("marker at coordinator epoch %d after %d: %v, want TRANSACTION_COORDINATOR_FENCED", epoch2-1, epoch2, err)
		}
	}
	t.Logf("coordinator epoch %d, after two restarts %d", epoch, epoch2)
}
