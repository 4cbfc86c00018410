package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// batchesByBroker counts, per broker, the record batches a consumer read
// (kgo's HookFetchBatchRead).
type batchesByBroker struct {
	mu sync.Mutex
	n  map[int32]int
}

func (h *batchesByBroker) OnFetchBatchRead(meta kgo.BrokerMetadata, _ string, _ int32, _ kgo.FetchBatchMetrics) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[meta.NodeID]++
}

func (h *batchesByBroker) get() map[int32]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[int32]int{}
	for k, v := range h.n {
		out[k] = v
	}
	return out
}

// TestReplicationFollowerFetch (KIP-392): brokers in racks rack-1..3; a
// consumer with kgo.Rack set to a follower's rack is sent there by the
// leader (PreferredReadReplica) and reads every record from that follower,
// up to the high watermark the follower knows, including records written
// while it consumes; a consumer without a rack reads from the leader. A
// read_committed consumer in the follower's rack reads there too, and sees
// committed transactions only.
func TestReplicationFollowerFetch(t *testing.T) {
	c := NewCluster(t, 3)
	for _, b := range c.Brokers {
		b.extra = append(b.extra, "--broker-rack", fmt.Sprintf("rack-%d", b.NodeID))
	}
	c.StartAll()
	adm := kadm.NewClient(c.Client(t))
	const topic = "nearby"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createClusterTopic(t, adm, topic, 1, 3, nil)
	ps := c.WaitFullISR(t, adm, topic, 30*time.Second)
	leader := ps[0].Leader
	var follower int32 = -1
	for _, r := range ps[0].Replicas {
		if r != leader {
			follower = r
		}
	}
	prod := c.Client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))
	produce := func(from, to int) {
		t.Helper()
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, &kgo.Record{Value: []byte(strconv.Itoa(i))})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 500)

	consume := func(rack string, n int, during func()) map[int32]int {
		t.Helper()
		hooks := &batchesByBroker{n: map[int32]int{}}
		opts := []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(hooks)}
		if rack != "" {
			opts = append(opts, kgo.Rack(rack))
		}
		cl := c.Client(t, opts...)
		next := 0
		for next < n && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil && ctx.Err() == nil {
				t.Logf("fetch error: %v", err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if string(r.Value) != strconv.Itoa(next) {
					t.Fatalf("record %d has value %s", next, r.Value)
				}
				next++
				if next == 500 && during != nil {
					during()
				}
			})
		}
		if next != n {
			t.Fatalf("read %d records, want %d", next, n)
		}
		cl.Close()
		return hooks.get()
	}

	near := consume(fmt.Sprintf("rack-%d", follower), 1000, func() { produce(500, 1000) })
	t.Logf("consumer in rack-%d (leader %d, follower %d): batches by broker %v", follower, leader, follower, near)
	if near[follower] == 0 || near[leader] != 0 {
		t.Errorf("a consumer in the follower's rack read batches %v; want all from broker %d", near, follower)
	}
	far := consume("", 1000, nil)
	t.Logf("consumer without a rack: batches by broker %v", far)
	if far[leader] == 0 || far[follower] != 0 {
		t.Errorf("a consumer without a rack read batches %v; want all from the leader %d", far, leader)
	}

	// read_committed from the follower: transactions committed, aborted,
	// committed; the consumer in the follower's rack reads the committed
	// records only, in order, every batch from the follower.
	txp := c.Client(t, kgo.TransactionalID("nearby-txn"), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))
	txn := func(prefix string, commit kgo.TransactionEndTry) {
		t.Helper()
		if err := txp.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for i := range 100 {
			recs = append(recs, &kgo.Record{Value: []byte(prefix + strconv.Itoa(i))})
		}
		if err := txp.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txp.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	txn("c", kgo.TryCommit)
	txn("a", kgo.TryAbort)
	txn("d", kgo.TryCommit)
	var want []string
	for i := range 1000 {
		want = append(want, strconv.Itoa(i))
	}
	for _, prefix := range []string{"c", "d"} {
		for i := range 100 {
			want = append(want, prefix+strconv.Itoa(i))
		}
	}
	hooks := &batchesByBroker{n: map[int32]int{}}
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(hooks),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.Rack(fmt.Sprintf("rack-%d", follower)))
	var got []string
	for len(got) < len(want) && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil && ctx.Err() == nil {
			t.Logf("fetch error: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	cl.Close()
	if len(got) != len(want) {
		t.Fatalf("read_committed from the follower's rack read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("read_committed record %d is %q, want %q (aborted records must not show)", i, got[i], want[i])
		}
	}
	committed := hooks.get()
	t.Logf("read_committed consumer in rack-%d: batches by broker %v", follower, committed)
	if committed[follower] == 0 || committed[leader] != 0 {
		t.Errorf("a read_committed consumer in the follower's rack read batches %v; want all from broker %d", committed, follower)
	}
}
