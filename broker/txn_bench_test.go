package broker

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Transaction benchmarks: throughput of transactions of 10, 100 and 1,000
// records beside non-transactional idempotent produce measured in the same
// run (ratio-of-idempotent), and the time from a commit to the record
// reaching a read_committed consumer.
//
//	go test -run '^$' -bench Txn -benchtime 3x ./broker/

const txnBenchRecords = 20000

// produceRecords produces n records of benchRecordSize, in transactions of
// txnSize (0: plain idempotent produce), and returns how long it took.
func produceRecords(b *testing.B, cl *kgo.Client, topic string, n, txnSize int) time.Duration {
	value := make([]byte, benchRecordSize)
	ctx := context.Background()
	start := time.Now()
	for done := 0; done < n; {
		size := n - done
		if txnSize > 0 {
			size = min(size, txnSize)
			if err := cl.BeginTransaction(); err != nil {
				b.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		wg.Add(size)
		for j := 0; j < size; j++ {
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: value}, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
		}
		// kgo's EndTransaction does not flush: every record of the
		// transaction must be acknowledged before it ends.
		wg.Wait()
		if txnSize > 0 {
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				b.Fatal(err)
			}
		}
		done += size
	}
	return time.Since(start)
}

func BenchmarkTxnProduce(b *testing.B) {
	measureLimits(b)
	br := startBroker(b, "", func(c *Config) { c.MessageMaxBytes = 2 << 20 })
	createTopic(b, br, "idem", 4, nil)
	createTopic(b, br, "txn", 4, nil)
	opts := []kgo.Opt{kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}
	idem := newClient(b, br, opts...)
	// The baseline, measured once in this run.
	base := produceRecords(b, idem, "idem", txnBenchRecords, 0)
	baseRate := float64(txnBenchRecords) / base.Seconds()
	b.Logf("idempotent produce: %.0f records/s", baseRate)
	for _, size := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("records-per-txn=%d", size), func(b *testing.B) {
			cl := newClient(b, br, append(opts, kgo.TransactionalID(fmt.Sprintf("bench-%d", size)))...)
			b.SetBytes(txnBenchRecords * benchRecordSize)
			b.ResetTimer()
			var total time.Duration
			for i := 0; i < b.N; i++ {
				total += produceRecords(b, cl, "txn", txnBenchRecords, size)
			}
			b.StopTimer()
			rate := float64(txnBenchRecords) * float64(b.N) / total.Seconds()
			mbs := rate * benchRecordSize / 1e6
			b.ReportMetric(rate, "records/s")
			b.ReportMetric(mbs, "MB/s")
			b.ReportMetric(rate/baseRate, "ratio-of-idempotent")
			b.ReportMetric(mbs/diskMBs, "ratio-of-disk")
		})
	}
}

func BenchmarkTxnEndToEnd(b *testing.B) {
	measureLimits(b)
	br := startBroker(b, "")
	createTopic(b, br, "e2e", 1, nil)
	prod := newClient(b, br, kgo.TransactionalID("bench-e2e"), kgo.DefaultProduceTopic("e2e"))
	cons := newClient(b, br, kgo.ConsumeTopics("e2e"), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(time.Second))
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := prod.BeginTransaction(); err != nil {
			b.Fatal(err)
		}
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < 1; {
			fs := cons.PollFetches(ctx)
			fs.EachError(func(_ string, _ int32, err error) { b.Fatal(err) })
			got += fs.NumRecords()
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	// The limit: one group-committed fsync per marker and per state record.
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000/(1000*1/diskMBs), "ratio-of-1MB-write")
}
