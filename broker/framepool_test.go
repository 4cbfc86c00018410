package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/broker/txn"
)

func TestFrameClasses(t *testing.T) {
	prevClass, prevSize := -1, 0
	for n := minPooledFrame; n <= maxPooledFrame; n++ {
		c := frameClassOf(n)
		size := frameClassSize(c)
		if c < 0 || c >= frameClassCount {
			t.Fatalf("%d bytes: class %d outside [0, %d)", n, c, frameClassCount)
		}
		if size < n || size > n+n/4+1 {
			t.Fatalf("%d bytes: class %d of %d bytes", n, c, size)
		}
		if c < prevClass || (c == prevClass && size != prevSize) {
			t.Fatalf("%d bytes: class %d (%d bytes) after class %d (%d bytes)", n, c, size, prevClass, prevSize)
		}
		if c != prevClass && n > minPooledFrame && n-1 != prevSize {
			t.Fatalf("class %d starts at %d bytes, the previous class ends at %d", c, n, prevSize)
		}
		prevClass, prevSize = c, size
		if n > 1<<20 && n < size-98 {
			// Large classes at a stride, then byte by byte across
			// each class's end.
			n += 97
		}
	}
	for _, n := range []int{8, minPooledFrame - 1, maxPooledFrame + 1} {
		f := newRequestFrame(n)
		if len(f.b) != n || f.class != -1 {
			t.Fatalf("%d bytes: frame of %d bytes in class %d, want unpooled", n, len(f.b), f.class)
		}
		f.release()
	}
	// A frame takes a free buffer of its class or up to four above (at
	// most twice its size), and a buffer keeps its class.
	framePool.mu.Lock() // earlier tests' buffers out of the way
	clear(framePool.free)
	framePool.idle = 0
	framePool.mu.Unlock()
	n := 1<<20 + 100
	f := newRequestFrame(n)
	if len(f.b) != n || cap(f.b) < n || cap(f.b) > 2*n {
		t.Fatalf("%d bytes: len %d cap %d", n, len(f.b), cap(f.b))
	}
	big := newRequestFrame(2 << 20)
	bigBuf := &big.b[:1][0]
	big.release()
	g := newRequestFrame(1<<20 + 1)
	if &g.b[:1][0] != bigBuf || g.class != frameClassOf(2<<20) || len(g.b) != 1<<20+1 {
		t.Fatalf("a 1 MiB+1 frame did not take the free 2 MiB buffer (class %d)", g.class)
	}
	f.release()
	g.release()
	if raceEnabled {
		defer func() {
			if recover() == nil {
				t.Fatal("a second release did not panic")
			}
		}()
		g.release()
	}
}

// reuseValue is record i of producer p: its own name, then bytes derived
// from (p, i), 1-3 KiB.
func reuseValue(p, i int) []byte {
	v := fmt.Appendf(nil, "producer %d record %d:", p, i)
	x := uint64(p)<<32 | uint64(i) | 1
	for len(v) < 1024+(i*97)%2048 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v = binary.LittleEndian.AppendUint64(v, x)
	}
	return v
}

// TestProduceFrameReuse: Produce frames go back to a pool when the handler
// returns (framepool.go). Many producers at once (idempotent, acks=1 with
// five requests in flight, acks=0, transactions committed and aborted), on
// a compacted topic (the key check reads the records too), with batches
// large enough to take pooled frames; every record is read back with its
// exact contents, once, and in each idempotent producer's order. Under the
// race detector a released frame is overwritten at once, so a batch still
// referenced after its handler returned reads back corrupted (and the
// detector reports the overwrite as a race).
func TestProduceFrameReuse(t *testing.T) {
	var pooled atomic.Int64
	count := func(next Handler) Handler {
		return func(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
			if r.Key == 0 && r.Size >= minPooledFrame {
				pooled.Add(1)
			}
			return next(ctx, b, r)
		}
	}
	b := startBroker(t, "", func(c *Config) {
		c.Middleware = []Middleware{count}
		c.Groups = group.Config{Partitions: 4, InitialRebalanceDelay: 100 * time.Millisecond, MinSessionTimeout: time.Second}
		c.Transactions = txn.Config{Partitions: 4, AbortInterval: 100 * time.Millisecond}
	})
	const topic = "reuse"
	createTopic(t, b, topic, 4, map[string]*string{"cleanup.policy": ptr("compact")})

	type producer struct {
		name   string
		opts   []kgo.Opt
		txn    bool
		commit bool
		order  bool // idempotent: each partition holds its records in order
	}
	base := []kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(20 * time.Millisecond), kgo.ProducerBatchMaxBytes(512 << 10)}
	fast := []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(5)}
	producers := []producer{
		{name: "idempotent", order: true},
		{name: "idempotent", order: true},
		{name: "idempotent", order: true},
		{name: "acks1", opts: append([]kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck())}, fast...)},
		{name: "acks1", opts: append([]kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck())}, fast...)},
		{name: "acks0", opts: append([]kgo.Opt{kgo.RequiredAcks(kgo.NoAck())}, fast...)},
		{name: "txn", txn: true, commit: true, order: true},
		{name: "txn", txn: true, commit: false, order: true},
	}
	const perProducer = 300
	clients := make([]*kgo.Client, len(producers))
	for p, pr := range producers {
		opts := append(append([]kgo.Opt{}, base...), pr.opts...)
		if pr.txn {
			opts = append(opts, kgo.TransactionalID(fmt.Sprintf("reuse-%d", p)))
		}
		clients[p] = newClient(t, b, opts...)
	}
	ctx := testCtx(t)
	errs := make(chan error, len(producers))
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func(p int, pr producer, cl *kgo.Client) {
			defer wg.Done()
			errs <- func() error {
				if pr.txn {
					if err := cl.BeginTransaction(); err != nil {
						return err
					}
				}
				recs := make([]*kgo.Record, perProducer)
				for i := range recs {
					recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "%d-%d", p, i), Value: reuseValue(p, i)}
				}
				if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					return fmt.Errorf("producer %d (%s): %w", p, pr.name, err)
				}
				if pr.txn {
					if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(pr.commit)); err != nil {
						return fmt.Errorf("producer %d: end transaction: %w", p, err)
					}
				}
				return nil
			}()
		}(p, producers[p], clients[p])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := pooled.Load(); n < 8 {
		t.Fatalf("only %d produce requests of %d bytes or more: the test did not use pooled frames", n, minPooledFrame)
	}

	// Read uncommitted: every data record, aborted ones too.
	got := consumeN(t, b, topic, perProducer*len(producers))
	seen := make(map[string]bool)
	for part, rs := range got {
		last := make(map[int]int)
		for _, r := range rs {
			var p, i int
			if _, err := fmt.Sscanf(string(r.Key), "%d-%d", &p, &i); err != nil || p < 0 || p >= len(producers) || i < 0 || i >= perProducer {
				t.Fatalf("partition %d offset %d: key %q", part, r.Offset, r.Key)
			}
			if seen[string(r.Key)] {
				t.Fatalf("partition %d offset %d: record %q read twice", part, r.Offset, r.Key)
			}
			seen[string(r.Key)] = true
			if want := reuseValue(p, i); !bytes.Equal(r.Value, want) {
				t.Fatalf("partition %d offset %d: record %q differs (%d bytes, want %d; starts %q)", part, r.Offset, r.Key, len(r.Value), len(want), r.Value[:min(len(r.Value), 40)])
			}
			if prev, ok := last[p]; ok && producers[p].order && i <= prev {
				t.Fatalf("partition %d: producer %d's record %d after its record %d", part, p, i, prev)
			}
			last[p] = i
		}
	}
	if len(seen) != perProducer*len(producers) {
		t.Fatalf("read %d distinct records, want %d", len(seen), perProducer*len(producers))
	}
	// Read committed: the aborted transaction's records are not there.
	committed := perProducer * (len(producers) - 1)
	for _, rs := range consumeN(t, b, topic, committed, kgo.FetchIsolationLevel(kgo.ReadCommitted())) {
		for _, r := range rs {
			var p, i int
			fmt.Sscanf(string(r.Key), "%d-%d", &p, &i)
			if producers[p].txn && !producers[p].commit {
				t.Fatalf("read committed returned aborted record %q", r.Key)
			}
		}
	}
}
