package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTxnClusterV2 runs transactions on a three-broker cluster whose
// partition leaders are spread over the brokers, so that most partitions
// are led by a broker other than the transaction coordinator: under
// transaction.version 2 each leader adds its partition to the transaction
// with AddPartitionsToTxn v4 to the coordinator's broker, and the
// coordinator writes markers with WriteTxnMarkers to the leaders. Committed
// transactions are visible to read_committed readers, aborted ones not, and
// the producer's epoch grows by one per transaction (EndTxn v5).
func TestTxnClusterV2(t *testing.T) {
	c := StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.Client(t))
	resp, err := adm.CreateTopic(ctx, 6, 1, nil, "ctx")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	parts := c.WaitFullISR(t, adm, "ctx", 30*time.Second)
	leaders := map[int32]bool{}
	for _, p := range parts {
		leaders[p.Leader] = true
	}
	if len(leaders) < 2 {
		t.Fatalf("all partitions led by one broker: %+v", parts)
	}
	cl := c.Client(t, kgo.TransactionalID("cluster-v2"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	var want []string
	var epochs []int16
	for i := 0; i < 8; i++ {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for p := int32(0); p < 6; p++ {
			recs = append(recs, &kgo.Record{Topic: "ctx", Partition: p, Value: []byte(fmt.Sprintf("t%d-p%d", i, p))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("transaction %d: produce: %v", i, err)
		}
		commit := i%3 != 2
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("transaction %d: end: %v", i, err)
		}
		if commit {
			for _, r := range recs {
				want = append(want, string(r.Value))
			}
		}
		_, e, err := cl.ProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		epochs = append(epochs, e)
	}
	// From the second transaction on, franz-go uses KIP-890 part 2.
	for i := 2; i < len(epochs); i++ {
		if epochs[i] != epochs[i-1]+1 {
			t.Fatalf("producer epochs %v: not one bump per transaction", epochs)
		}
	}
	consumer := c.Client(t, kgo.ConsumeTopics("ctx"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	got := map[string]bool{}
	for len(got) < len(want) {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d committed records", len(got), len(want))
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if got[v] {
				t.Fatalf("%s read twice", v)
			}
			got[v] = true
		})
	}
	for v := range got {
		var i int
		fmt.Sscanf(v, "t%d-", &i)
		if i%3 == 2 || !strings.HasPrefix(v, "t") {
			t.Fatalf("read_committed returned %s of an aborted transaction", v)
		}
	}
}
