package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker"
	"github.com/sediment-io/sediment/internal/testutil"
)

func runTxnCmd(t *testing.T, args ...string) string {
	t.Helper()
	cmd := newTxnCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("sediment txn %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

// TestTxnCommands: list, describe and abort against a real broker with a
// transaction left open.
func TestTxnCommands(t *testing.T) {
	b := startCLITestBroker(t, broker.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("copier-0"), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// A first transaction commits; then a marker at coordinator epoch 7
	// (as a newer coordinator would write) is recorded for the producer,
	// so that abort must send that epoch (an older one is fenced).
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("c")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	set := kadm.TopicsSet{"orders": {0: {}}}
	var committed kadm.DescribedProducer
	testutil.WaitFor(t, 10*time.Second, "the commit marker", func() bool {
		ds, err := adm.DescribeProducers(ctx, set)
		if err != nil {
			return false
		}
		found := false
		for _, p := range ds["orders"].Partitions[0].ActiveProducers {
			committed, found = p, true
		}
		return found && committed.CurrentTxnStartOffset == -1
	})
	res, err := adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{ProducerID: committed.ProducerID, ProducerEpoch: committed.ProducerEpoch, CoordinatorEpoch: 7, Commit: true, Topics: set})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		r.Topics.EachPartition(func(p kadm.TxnMarkersPartitionResponse) {
			if p.Err != nil {
				t.Fatalf("marker at coordinator epoch 7: %v", p.Err)
			}
		})
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out := runTxnCmd(t, "list", "--brokers", b.Addr(), "--state", "Ongoing")
	if !strings.Contains(out, "copier-0") || !strings.Contains(out, "Ongoing") || !strings.Contains(out, "orders/0") {
		t.Fatalf("list:\n%s", out)
	}
	// A state in any case is Kafka's name; an unknown one is refused
	// (a broker lists nothing for it).
	if out := runTxnCmd(t, "list", "--brokers", b.Addr(), "--state", "completeCommit,ONGOING"); !strings.Contains(out, "copier-0") {
		t.Fatalf("list --state completeCommit,ONGOING:\n%s", out)
	}
	cmd := newTxnCmd()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"list", "--brokers", b.Addr(), "--state", "Ongoing,Bogus"})
	if err := cmd.Execute(); err == nil || err.Error() != `unknown --state "Bogus" (want one of Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, PrepareEpochFence, Dead)` {
		t.Fatalf("list --state Ongoing,Bogus: %v, want it refused", err)
	}
	out = runTxnCmd(t, "describe", "--brokers", b.Addr(), "copier-0")
	if !strings.Contains(out, "copier-0") || !strings.Contains(out, "40s") {
		t.Fatalf("describe:\n%s", out)
	}
	out = runTxnCmd(t, "abort", "--brokers", b.Addr(), "--topic", "orders", "--partition", "0")
	if !strings.Contains(out, "aborted the transaction of producer") || !strings.Contains(out, "from offset 3") {
		t.Fatalf("abort:\n%s", out)
	}
	out = runTxnCmd(t, "abort", "--brokers", b.Addr(), "--topic", "orders", "--partition", "0")
	if !strings.Contains(out, "no open transaction") {
		t.Fatalf("second abort:\n%s", out)
	}
}
