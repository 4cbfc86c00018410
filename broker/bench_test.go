package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
)

// Benchmarks through the real protocol with franz-go on loopback, each
// reported beside the machine's own limits measured in the same run:
// loopback TCP throughput of a plain Go socket copy (1 MiB writes and
// reads) and the disk's sequential write bandwidth (1 MiB writes, one fsync
// at the end). The build machine is shared and its load moves by 2-3x within
// a minute, so the limits are measured between the iterations of each
// benchmark (outside the timer) rather than once per run: figure and limit
// see the same load.
//
//	go test -run '^$' -bench . -benchtime 3x ./broker/

const (
	benchRecordSize = 1 << 10
	benchVolume     = 128 << 20 // bytes produced or consumed per iteration
)

var (
	limitsOnce           sync.Once
	loopbackMBs, diskMBs float64
)

// measureLimits measures both limits once per run (for benchmarks that do
// not interleave their own).
func measureLimits(b *testing.B) {
	limitsOnce.Do(func() {
		loopbackMBs = measureLoopback(b, 512<<20)
		diskMBs = measureDisk(b, 256<<20)
		b.Logf("limits: loopback %.0f MB/s, disk sequential write %.0f MB/s", loopbackMBs, diskMBs)
	})
}

// limits accumulates the limit measurements taken beside one benchmark.
type limits struct {
	loopBytes, diskBytes int64
	loopTime, diskTime   time.Duration
	loopCPU              time.Duration // process CPU time of the loopback copies
}

func (l *limits) measureLoopback(b *testing.B, n int64) {
	cpu0 := processCPU()
	start := time.Now()
	measureLoopback(b, n)
	l.loopBytes += n
	l.loopTime += time.Since(start)
	l.loopCPU += processCPU() - cpu0
}

// processCPU is the process's user+system CPU time so far. On the shared
// build machine wall-clock figures move with other jobs' load; CPU time per
// byte much less, so the consume benchmarks also report their CPU cost
// against the loopback copy's (both ends of each run in this process).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports MB per CPU-second of the benchmark beside the loopback
// copy's, and their ratio.
func (l *limits) reportCPU(b *testing.B, bytes int64, cpu time.Duration) {
	mbPerCPU := float64(bytes) / 1e6 / cpu.Seconds()
	loop := float64(l.loopBytes) / 1e6 / l.loopCPU.Seconds()
	b.ReportMetric(mbPerCPU, "MB/cpu-s")
	b.ReportMetric(mbPerCPU/loop, "cpu-ratio-of-loopback")
}

func (l *limits) measureDisk(b *testing.B, n int64) {
	start := time.Now()
	measureDisk(b, n)
	l.diskBytes += n
	l.diskTime += time.Since(start)
}

func (l *limits) loopbackMBs() float64 { return float64(l.loopBytes) / 1e6 / l.loopTime.Seconds() }
func (l *limits) diskMBs() float64     { return float64(l.diskBytes) / 1e6 / l.diskTime.Seconds() }

// measureLoopback copies n bytes over a loopback TCP connection with 1 MiB
// writes and 1 MiB reads and returns MB/s.
func measureLoopback(b *testing.B, n int64) float64 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, 1<<20)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		c.Close()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	start := time.Now()
	for sent := int64(0); sent < n; sent += int64(len(buf)) {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
	<-done
	return float64(n) / 1e6 / time.Since(start).Seconds()
}

func measureDisk(b *testing.B, n int64) float64 {
	f, err := os.Create(filepath.Join(b.TempDir(), "seq"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	start := time.Now()
	for w := int64(0); w < n; w += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return float64(n) / 1e6 / time.Since(start).Seconds()
}

func benchBroker(b *testing.B) *Broker {
	return startBroker(b, "", func(c *Config) { c.MessageMaxBytes = 2 << 20 })
}

func BenchmarkProduce(b *testing.B) {
	for _, parts := range []int32{1, 8} {
		for _, acks := range []string{"1", "all"} {
			b.Run(fmt.Sprintf("partitions=%d/acks=%s", parts, acks), func(b *testing.B) {
				br := benchBroker(b)
				topic := "bench"
				createTopic(b, br, topic, parts, map[string]*string{"max.message.bytes": ptr("2097152")})
				opts := []kgo.Opt{kgo.ProducerBatchMaxBytes(1 << 20), kgo.MaxBufferedBytes(16 << 20), kgo.ProducerLinger(time.Millisecond),
					kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}
				// Five requests in flight, as the Java client's default.
				// (kgo's idempotent producer allows only one per broker,
				// which would measure the client, not the broker.)
				opts = append(opts, kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(5))
				if acks == "1" {
					opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
				} else {
					opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
				}
				cl := newClient(b, br, opts...)
				value := make([]byte, benchRecordSize)
				n := benchVolume / benchRecordSize
				lat := make([]time.Duration, 0, n*b.N)
				var mu sync.Mutex
				var lim limits
				var elapsed, cpu time.Duration
				b.SetBytes(benchVolume)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					lim.measureDisk(b, benchVolume)
					lim.measureLoopback(b, benchVolume)
					b.StartTimer()
					cpu0 := processCPU()
					start := time.Now()
					var wg sync.WaitGroup
					wg.Add(n)
					for j := 0; j < n; j++ {
						t0 := time.Now()
						cl.Produce(context.Background(), &kgo.Record{Topic: topic, Value: value}, func(_ *kgo.Record, err error) {
							if err != nil {
								b.Error(err)
							}
							d := time.Since(t0)
							mu.Lock()
							lat = append(lat, d)
							mu.Unlock()
							wg.Done()
						})
					}
					wg.Wait()
					elapsed += time.Since(start)
					cpu += processCPU() - cpu0
				}
				b.StopTimer()
				mbs := float64(benchVolume) * float64(b.N) / 1e6 / elapsed.Seconds()
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(mbs, "MB/s")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(mbs/min(lim.loopbackMBs(), lim.diskMBs()), "ratio-of-limit")
				b.ReportMetric(mbs/lim.diskMBs(), "ratio-of-disk")
				b.ReportMetric(lim.diskMBs(), "disk-MB/s")
				b.ReportMetric(lim.loopbackMBs(), "loopback-MB/s")
				// Client and broker together (one process): at acks=1 the
				// producer is bound by CPU, not the disk, so on the shared
				// machine its ratio moves with the CPU left to it.
				b.ReportMetric(float64(benchVolume)*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
			})
		}
	}
}

// BenchmarkConsume reads 128 MiB from the page cache with a kgo consumer
// at the client's defaults, as a real consumer runs (fetch.max.bytes 50
// MiB, max.partition.fetch.bytes 1 MiB, like the Java client's).
func BenchmarkConsume(b *testing.B) {
	for _, parts := range []int32{1, 8} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			br := benchBroker(b)
			topic := "bench"
			createTopic(b, br, topic, parts, map[string]*string{"max.message.bytes": ptr("2097152")})
			prod := newClient(b, br, kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedBytes(64<<20), kgo.ProducerLinger(time.Millisecond),
				kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
			value := make([]byte, benchRecordSize)
			n := benchVolume / benchRecordSize
			var wg sync.WaitGroup
			wg.Add(n)
			for j := 0; j < n; j++ {
				prod.Produce(context.Background(), &kgo.Record{Topic: topic, Value: value}, func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
					wg.Done()
				})
			}
			wg.Wait()
			var lim limits
			var elapsed, cpu time.Duration
			var ft fetchTimes
			b.SetBytes(benchVolume)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				lim.measureLoopback(b, benchVolume)
				b.StartTimer()
				cpu0 := processCPU()
				start := time.Now()
				cl := newClient(b, br, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(&ft))
				got := 0
				for got < n {
					fs := cl.PollFetches(context.Background())
					fs.EachError(func(_ string, _ int32, err error) { b.Fatal(err) })
					got += fs.NumRecords()
				}
				cl.Close()
				elapsed += time.Since(start)
				cpu += processCPU() - cpu0
			}
			b.StopTimer()
			mbs := float64(benchVolume) * float64(b.N) / 1e6 / elapsed.Seconds()
			b.ReportMetric(mbs, "MB/s")
			b.ReportMetric(mbs/lim.loopbackMBs(), "ratio-of-loopback")
			b.ReportMetric(lim.loopbackMBs(), "loopback-MB/s")
			lim.reportCPU(b, benchVolume*int64(b.N), cpu)
			ft.report(b, elapsed)
		})
	}
}

// fetchTimes splits a consumer's wall time between waiting on its Fetch
// requests and everything else, from franz-go's broker read hook: wait-share
// is the time from a Fetch request written to its response read whole (the
// broker's handling, sendfile and the socket copy), client-share the rest
// (decoding the batches, handing records to PollFetches, the gap before the
// next request: franz-go sends a broker's next Fetch only once the previous
// one's records were polled).
type fetchTimes struct {
	mu             sync.Mutex
	wait           time.Duration
	fetches, bytes int64
}

func (f *fetchTimes) OnBrokerRead(_ kgo.BrokerMetadata, key int16, n int, readWait, timeToRead time.Duration, err error) {
	if key != 1 || err != nil {
		return
	}
	f.mu.Lock()
	f.wait += readWait + timeToRead
	f.fetches++
	f.bytes += int64(n)
	f.mu.Unlock()
}

func (f *fetchTimes) report(b *testing.B, elapsed time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fetches == 0 || elapsed <= 0 {
		return
	}
	b.ReportMetric(f.wait.Seconds()/elapsed.Seconds(), "wait-share")
	b.ReportMetric(1-f.wait.Seconds()/elapsed.Seconds(), "client-share")
	b.ReportMetric(float64(f.bytes)/float64(f.fetches)/(1<<10), "KiB/fetch")
}

func ptr(s string) *string { return &s }

// BenchmarkFetchRaw reads the produced log with plain Fetch requests over
// one connection and does not decode records: the broker's serving speed
// (sendfile from the page cache) against the loopback copy, without the
// client's record decoding that BenchmarkConsume includes. Its requests are
// shaped as a consumer's at the defaults (1 MiB per partition). With
// buffer=reused it reads every response into one reused buffer, as the
// loopback copy's reader does; with buffer=per-response into a new one each
// time, as franz-go does (its records point into the response, so it cannot
// reuse it): the difference is the client's memory, not the broker.
func BenchmarkFetchRaw(b *testing.B) {
	for _, fresh := range []bool{false, true} {
		name := "buffer=reused"
		if fresh {
			name = "buffer=per-response"
		}
		b.Run(name, func(b *testing.B) { benchFetchRaw(b, fresh) })
	}
}

func benchFetchRaw(b *testing.B, fresh bool) {
	br := benchBroker(b)
	topic := "bench"
	createTopic(b, br, topic, 1, map[string]*string{"max.message.bytes": ptr("2097152")})
	prod := newClient(b, br, kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedBytes(64<<20), kgo.ProducerLinger(time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	value := make([]byte, benchRecordSize)
	n := benchVolume / benchRecordSize
	var wg sync.WaitGroup
	wg.Add(n)
	for j := 0; j < n; j++ {
		prod.Produce(context.Background(), &kgo.Record{Topic: topic, Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	nc := dial(b, br)
	b.SetBytes(benchVolume)
	var lim limits
	var elapsed, cpu time.Duration
	var buf []byte
	var f kmsg.RequestFormatter
	corr := int32(0)
	b.ResetTimer()
	var total int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		lim.measureLoopback(b, benchVolume)
		b.StartTimer()
		cpu0 := processCPU()
		start := time.Now()
		offset := int64(0)
		for offset < int64(n) {
			req := kmsg.NewPtrFetchRequest()
			req.Version = 12
			req.MaxBytes, req.MaxWaitMillis = 50<<20, 100
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = topic
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.FetchOffset, fp.PartitionMaxBytes = offset, 1<<20
			ft.Partitions = append(ft.Partitions, fp)
			req.Topics = append(req.Topics, ft)
			corr++
			var body []byte
			if fresh {
				buf = nil
			}
			body, buf = fetchInto(b, nc, &f, req, corr, buf)
			resp := req.ResponseKind().(*kmsg.FetchResponse)
			if err := resp.ReadFrom(body); err != nil {
				b.Fatal(err)
			}
			recs := resp.Topics[0].Partitions[0].RecordBatches
			total += int64(len(recs))
			for len(recs) >= hotlog.BatchHeaderSize {
				h, err := hotlog.ParseBatchHeader(recs)
				if err != nil || int64(len(recs)) < h.Size() {
					break
				}
				offset = h.LastOffset() + 1
				recs = recs[h.Size():]
			}
		}
		elapsed += time.Since(start)
		cpu += processCPU() - cpu0
	}
	b.StopTimer()
	mbs := float64(total) / 1e6 / elapsed.Seconds()
	b.ReportMetric(mbs, "MB/s")
	b.ReportMetric(lim.loopbackMBs(), "loopback-MB/s")
	b.ReportMetric(mbs/lim.loopbackMBs(), "ratio-of-loopback")
	lim.reportCPU(b, total, cpu)
}

// fetchInto sends a flexible Fetch request and reads its response into buf
// (grown when too small), returning the body after the response header.
func fetchInto(b *testing.B, nc net.Conn, f *kmsg.RequestFormatter, req kmsg.Request, corr int32, buf []byte) ([]byte, []byte) {
	if _, err := nc.Write(f.AppendRequest(nil, req, corr)); err != nil {
		b.Fatal(err)
	}
	var sz [4]byte
	if _, err := io.ReadFull(nc, sz[:]); err != nil {
		b.Fatal(err)
	}
	size := int(binary.BigEndian.Uint32(sz[:]))
	if size < 5 {
		b.Fatalf("response of %d bytes", size)
	}
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	body := buf[:size]
	if _, err := io.ReadFull(nc, body); err != nil {
		b.Fatal(err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corr {
		b.Fatalf("correlation id %d, want %d", got, corr)
	}
	return body[5:], buf // correlation id, empty header tags
}
