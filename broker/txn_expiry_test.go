package broker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/broker/txn"
	"github.com/sediment-io/sediment/internal/testutil"
)

// Expiry of transactional ids (transactional.id.expiration.ms) and of idle
// idempotent producers (producer.id.expiration.ms), with franz-go clients.

func expiryTxnConfig(idExpiration time.Duration) func(*Config) {
	return func(c *Config) {
		c.Groups = group.Config{Partitions: 4, InitialRebalanceDelay: 100 * time.Millisecond, MinSessionTimeout: time.Second}
		c.Transactions = txn.Config{Partitions: 4, AbortInterval: 100 * time.Millisecond, IDExpiration: idExpiration, ExpireInterval: 50 * time.Millisecond}
	}
}

func TestTransactionalIDExpiration(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, expiryTxnConfig(500*time.Millisecond))
	ctx := testCtx(t)
	createTopic(t, b, "texp", 1, nil)
	createTopic(t, b, "texp-open", 1, nil) // its LSO stays at the open transaction

	// Two ids in one __transaction_state partition, so that once it is
	// loaded after the restart both answers are settled.
	const openID = "exp-open"
	doneID := ""
	for i := 0; doneID == ""; i++ {
		if id := fmt.Sprintf("exp-done-%d", i); txn.PartitionFor(id, 4) == txn.PartitionFor(openID, 4) {
			doneID = id
		}
	}
	// A transaction left open (its timeout is far away) never expires.
	open := txnClient(t, b, openID, kgo.TransactionTimeout(time.Minute))
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := open.ProduceSync(ctx, rec("texp-open", 0, "open")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A committed one expires once idle for 500ms.
	done := txnClient(t, b, doneID)
	produceTxn(t, done, "texp", 0, true, values("done", 3)...)
	oldPID, _, err := done.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}

	adm := kadm.NewClient(newClient(t, b))
	testutil.WaitFor(t, 10*time.Second, doneID+" gone from ListTransactions", func() bool {
		ls, err := adm.ListTransactions(ctx, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := ls[doneID]
		return !ok
	})
	if n := b.txns.c.Stats().Expired; n < 1 {
		t.Fatalf("expired %d ids", n)
	}
	ls, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := ls[openID]; !ok || l.State != "Ongoing" {
		t.Fatalf("the open transaction: %+v (%v)", l, ok)
	}
	ds, err := adm.DescribeTransactions(ctx, doneID)
	if err != nil || !errors.Is(ds[doneID].Err, kerr.TransactionalIDNotFound) {
		t.Fatalf("describe of the expired id: %+v %v", ds[doneID], err)
	}

	// After a restart (with an expiration that would not remove it
	// again) the id stays gone: its tombstone is in the log.
	b.Close()
	b = startBroker(t, dir, expiryTxnConfig(24*time.Hour))
	adm = kadm.NewClient(newClient(t, b))
	testutil.WaitFor(t, 10*time.Second, "the open transaction reloaded", func() bool {
		ds, _ := adm.DescribeTransactions(ctx, openID)
		return ds[openID].State == "Ongoing"
	})
	ds, err = adm.DescribeTransactions(ctx, doneID)
	if err != nil || !errors.Is(ds[doneID].Err, kerr.TransactionalIDNotFound) {
		t.Fatalf("describe of the expired id after the restart: %+v %v", ds[doneID], err)
	}
	if ls, err = adm.ListTransactions(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := ls[doneID]; ok || len(ls) != 1 {
		t.Fatalf("list after the restart: %+v", ls)
	}
	// The id starts afresh: a new producer id at epoch 0, and it works.
	again := txnClient(t, b, doneID)
	pid, epoch, err := again.ProducerID(ctx)
	if err != nil || pid == oldPID || epoch != 0 {
		t.Fatalf("producer after expiry: %d/%d %v (before %d)", pid, epoch, err, oldPID)
	}
	produceTxn(t, again, "texp", 0, true, "again")
	got := readValues(t, b, "texp", 4, true)
	if strings.Join(got, ",") != "done-0,done-1,done-2,again" {
		t.Fatalf("read_committed got %v", got)
	}
}

// describeProducers returns the producers of partition 0 of topic.
func describeProducers(t testing.TB, adm *kadm.Client, topic string) kadm.DescribedProducers {
	t.Helper()
	dp, err := adm.DescribeProducers(testCtx(t), kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	p := dp[topic].Partitions[0]
	if p.Err != nil {
		t.Fatal(p.Err)
	}
	return p.ActiveProducers
}

func TestProducerIDExpiration(t *testing.T) {
	dir := t.TempDir()
	expiring := func(c *Config) {
		c.ProducerIDExpiration = 300 * time.Millisecond
		c.ProducerIDExpirationCheckInterval = 50 * time.Millisecond
	}
	b := startBroker(t, dir, expiring)
	ctx := testCtx(t)
	createTopic(t, b, "pexp", 1, nil)
	// Idempotent (kgo's default); data loss (an OUT_OF_ORDER_SEQUENCE_NUMBER
	// or UNKNOWN_PRODUCER_ID answer) fails the produce instead of a
	// silent producer reset.
	cl := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.StopProducerOnDataLossDetected())
	produce := func(prefix string) {
		t.Helper()
		for _, v := range values(prefix, 5) {
			if err := cl.ProduceSync(ctx, rec("pexp", 0, v)).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
		}
	}
	produce("a")
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(newClient(t, b))
	if ps := describeProducers(t, adm, "pexp"); len(ps) != 1 || ps[pid].LastSequence != 4 {
		t.Fatalf("producers before expiry: %+v", ps)
	}
	testutil.WaitFor(t, 10*time.Second, "the idle producer expired", func() bool {
		return len(describeProducers(t, adm, "pexp")) == 0
	})
	// The expired producer goes on with its next sequence: accepted, with
	// the same producer id and epoch (no reset), nothing lost or doubled.
	produce("b")
	if p2, e2, err := cl.ProducerID(ctx); err != nil || p2 != pid || e2 != epoch {
		t.Fatalf("producer after resuming: %d/%d %v, was %d/%d", p2, e2, err, pid, epoch)
	}
	ps := describeProducers(t, adm, "pexp")
	if p, ok := ps[pid]; !ok || len(ps) != 1 || p.LastSequence != 9 || p.ProducerEpoch != epoch {
		t.Fatalf("producers after resuming: %+v", ps)
	}
	got := readValues(t, b, "pexp", 10, false)
	if want := append(values("a", 5), values("b", 5)...); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("read %v, want %v", got, want)
	}

	// Once expired again, a restart (with the default 24h expiration,
	// which would keep anything the snapshot or replay brought back)
	// does not bring it back.
	testutil.WaitFor(t, 10*time.Second, "the idle producer expired again", func() bool {
		return len(describeProducers(t, adm, "pexp")) == 0
	})
	b.Close()
	b = startBroker(t, dir)
	adm = kadm.NewClient(newClient(t, b))
	if ps := describeProducers(t, adm, "pexp"); len(ps) != 0 {
		t.Fatalf("producers after the restart: %+v", ps)
	}
}

// TestProducerIDExpirationAtOpen: producers loaded from a partition's
// producer snapshot that are already past producer.id.expiration.ms are
// dropped on open (Kafka's loadFromSnapshot), not at the first periodic
// check (an hour away here); one with an open transaction stays.
func TestProducerIDExpirationAtOpen(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	ctx := testCtx(t)
	createTopic(t, b, "pexp-open", 1, nil)
	idem := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for _, v := range values("i", 3) {
		if err := idem.ProduceSync(ctx, rec("pexp-open", 0, v)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	idemPID, _, err := idem.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := txnClient(t, b, "pexp-open-txn", kgo.TransactionTimeout(time.Minute))
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := open.ProduceSync(ctx, rec("pexp-open", 0, "open")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txnPID, _, err := open.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(newClient(t, b))
	if ps := describeProducers(t, adm, "pexp-open"); len(ps) != 2 {
		t.Fatalf("producers before the restart: %+v", ps)
	}
	const expiration = 100 * time.Millisecond
	last := time.Now() // after every batch's timestamp
	testutil.WaitFor(t, 10*time.Second, "the producers idle past the expiration", func() bool {
		return time.Since(last) > 2*expiration
	})
	b.Close()
	b = startBroker(t, dir, func(c *Config) {
		c.ProducerIDExpiration = expiration
		c.ProducerIDExpirationCheckInterval = time.Hour
	})
	adm = kadm.NewClient(newClient(t, b))
	ps := describeProducers(t, adm, "pexp-open")
	if _, ok := ps[idemPID]; ok {
		t.Fatalf("idle idempotent producer %d kept after the restart: %+v", idemPID, ps)
	}
	if p, ok := ps[txnPID]; !ok || len(ps) != 1 || p.CurrentTxnStartOffset != 3 {
		t.Fatalf("producer %d with an open transaction: %+v", txnPID, ps)
	}
}
