package e2e

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkReplication produces 1 KiB records on loopback to a three-broker
// cluster of real processes: acks=all to a topic with replication factor 3
// beside acks=1 to one with factor 1, in the same run and on the same
// brokers. Each reports MB/s and the p50/p99 produce latency; the acks=all
// figure also as a ratio of the acks=1 one (the machine's own limit here).
//
//	go test -run '^$' -bench Replication -benchtime 3x ./e2e/
func BenchmarkReplication(b *testing.B) {
	c := StartCluster(b, 3)
	adm := kadm.NewClient(c.Client(b))
	create := func(name string, rf int16) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := adm.CreateTopic(ctx, 3, rf, nil, name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			b.Fatal(err)
		}
		c.WaitFullISR(b, adm, name, 30*time.Second)
	}
	create("rf1", 1)
	create("rf3", 3)
	const records = 20000
	var rf1MBs float64
	run := func(b *testing.B, topic string, acks kgo.Acks, idempotent bool) float64 {
		opts := []kgo.Opt{kgo.RequiredAcks(acks), kgo.ProducerLinger(time.Millisecond)}
		if !idempotent {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl := c.Client(b, opts...)
		value := make([]byte, 1024)
		var lat []time.Duration
		var mu sync.Mutex
		var total time.Duration
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			var wg sync.WaitGroup
			for i := range records {
				wg.Add(1)
				sent := time.Now()
				cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i % 100)), Value: value}, func(_ *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						b.Error(err)
					}
					mu.Lock()
					lat = append(lat, time.Since(sent))
					mu.Unlock()
				})
			}
			wg.Wait()
			total += time.Since(start)
		}
		b.StopTimer()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		mbs := float64(b.N*records*1024) / total.Seconds() / 1e6
		b.ReportMetric(mbs, "MB/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		return mbs
	}
	b.Run("acks=1/rf=1", func(b *testing.B) { rf1MBs = run(b, "rf1", kgo.LeaderAck(), false) })
	b.Run("acks=all/rf=3", func(b *testing.B) {
		mbs := run(b, "rf3", kgo.AllISRAcks(), true)
		if rf1MBs > 0 {
			b.ReportMetric(mbs/rf1MBs, "ratio-of-acks1-rf1")
		}
	})
}

// BenchmarkLeaderFailover measures, per iteration, the time from SIGKILL of
// a partition's leader (not restarted meanwhile) to the next acks=all write
// acknowledged on that partition: the controller fencing the dead broker
// (its liveness probe finds its Raft address refusing connections; the
// session timeout, 9s, is the bound when it cannot tell), the election, the
// client's metadata refresh. It is reported beside the goal, session
// timeout + 1s. The leader is also the controller (the Raft leader) in some
// iterations: each is logged.
func BenchmarkLeaderFailover(b *testing.B) {
	c := StartCluster(b, 3)
	adm := kadm.NewClient(c.Client(b))
	const topic = "failover"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, 1, 3, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		b.Fatal(err)
	}
	cl := c.Client(b, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(1<<30),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.RecordDeliveryTimeout(60*time.Second))
	produce := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr()
	}
	const goal = 10 * time.Second // session timeout 9s + 1s
	var total time.Duration
	for range b.N {
		b.StopTimer()
		c.WaitFullISR(b, adm, topic, 60*time.Second)
		leader := c.WaitAgreedLeader(b, topic, 60*time.Second)
		if err := produce(); err != nil {
			b.Fatal(err)
		}
		victim := c.Broker(leader)
		controller := int32(-1)
		if md, err := adm.BrokerMetadata(ctx); err == nil {
			controller = md.Controller
		}
		b.StartTimer()
		start := time.Now()
		victim.Kill()
		if err := produce(); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		total += d
		b.StopTimer()
		b.Logf("leader %d killed (controller: %d): acks=all write acknowledged again after %v", victim.NodeID, controller, d)
		victim.Start()
		b.StartTimer()
	}
	mean := total / time.Duration(b.N)
	b.ReportMetric(mean.Seconds(), "failover-s")
	b.ReportMetric(mean.Seconds()/goal.Seconds(), "ratio-of-goal")
}
