package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestShareGroupFailover: a queue on a three-broker cluster. franz-go share
// consumers (KIP-932) in one group take jobs from a replicated 3-partition
// topic while an acks=all producer writes them; the leader of a partition
// is killed (SIGKILL) mid-way. Every acknowledged job is delivered, at least
// once: what the killed leader had delivered and not yet recorded as
// acknowledged in the metadata log is delivered again by the new leader,
// from the state the old one wrote (the records then in flight); no other
// partition's job twice.
func TestShareGroupFailover(t *testing.T) {
	c := StartCluster(t, 3)
	admin := c.Client(t)
	adm := kadm.NewClient(admin)
	const topic, group, jobs = "jobs", "workers", 3000
	createClusterTopic(t, adm, topic, 3, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")})
	ps := c.WaitFullISR(t, adm, topic, 60*time.Second)

	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if resp, err := req.RequestWith(ctx, admin); err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("share.auto.offset.reset: %v %v", err, resp)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	partOf := map[string]int32{}
	acked := map[string]bool{}
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		cl := c.Client(t, kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.ClientID(fmt.Sprintf("worker-%d", i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++; partOf[string(r.Value)] = r.Partition })
				mu.Unlock()
			}
		}()
	}
	prod := c.Client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(1<<30))
	produce := func(from, to int) {
		var pwg sync.WaitGroup
		for n := from; n < to; n++ {
			v := fmt.Sprintf("job-%d", n)
			pwg.Add(1)
			prod.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(n % 50)), Value: []byte(v)}, func(_ *kgo.Record, err error) {
				defer pwg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					acked[v] = true
				} else if !kerr.IsRetriable(err) {
					t.Errorf("produce %s: %v", v, err)
				}
			})
		}
		pwg.Wait()
	}
	delivered := func(n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) >= n
		}
	}
	// A third, all delivered (and acknowledged on the consumers' next
	// polls); a third more, and the leader of partition 0 is killed while
	// it is being delivered; the last third.
	produce(0, jobs/3)
	waitFor(t, 60*time.Second, "the first third delivered", delivered(jobs/3))
	go produce(jobs/3, 2*jobs/3)
	waitFor(t, 60*time.Second, "half the jobs delivered", delivered(jobs/2))
	// Once the leader of partition 0 has recorded acknowledgements
	// (DescribeShareGroupOffsets: its start offset moved), kill it.
	waitFor(t, 60*time.Second, "a start offset of partition 0 recorded", func() bool {
		req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
		req.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{{GroupID: group,
			Topics: []kmsg.DescribeShareGroupOffsetsRequestGroupTopic{{Topic: topic, Partitions: []int32{0}}}}}
		resp, err := req.RequestWith(ctx, admin)
		return err == nil && len(resp.Groups) == 1 && resp.Groups[0].ErrorCode == 0 && resp.Groups[0].Topics[0].Partitions[0].StartOffset > 0
	})
	victim := c.Broker(ps[0].Leader)
	victim.Kill()
	produce(2*jobs/3, jobs)
	waitFor(t, 120*time.Second, "every acknowledged job delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for v := range acked {
			if seen[v] == 0 {
				return false
			}
		}
		return len(acked) == jobs
	})
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	again := 0
	byPart := map[int32]int{}
	for v, n := range seen {
		if n > 1 {
			again++
			byPart[partOf[v]]++
		}
	}
	led := []int32{}
	for p, st := range ps {
		if st.Leader == ps[0].Leader {
			led = append(led, p)
		}
	}
	t.Logf("%d jobs, %d delivered more than once (by partition %v; broker %d, killed, led %v)", len(acked), again, byPart, victim.NodeID, led)
	// Only what the killed leader had delivered and not yet recorded as
	// acknowledged comes again: on its partitions, nowhere else.
	for p, n := range byPart {
		if !slices.Contains(led, p) {
			t.Errorf("%d jobs of partition %d, which broker %d did not lead, delivered more than once", n, p, victim.NodeID)
		}
	}
	victim.Start()
}
