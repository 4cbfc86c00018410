package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ownership tracks which member owns each partition, from the clients'
// assignment callbacks.
type ownership struct {
	mu      sync.Mutex
	owner   map[int32]int // partition → member index, absent when unowned
	revoked int           // partitions revoked or lost since reset
	changed chan struct{}
}

func (o *ownership) assign(member int, ps []int32) {
	o.mu.Lock()
	for _, p := range ps {
		o.owner[p] = member
	}
	o.mu.Unlock()
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

func (o *ownership) revoke(member int, ps []int32) {
	o.mu.Lock()
	for _, p := range ps {
		if o.owner[p] == member {
			delete(o.owner, p)
			o.revoked++
		}
	}
	o.mu.Unlock()
}

// settled reports whether all partitions are owned and every one of the
// members owns some.
func (o *ownership) settled(partitions, members int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.owner) != partitions {
		return false
	}
	per := make(map[int]int)
	for _, m := range o.owner {
		per[m]++
	}
	return len(per) == members
}

// BenchmarkGroupSettle is the time for a group of 8 franz-go members on 64
// partitions to settle after a ninth joins, for eager (range) and
// cooperative-sticky balancers, and how many partitions stopped being
// consumed (were revoked) during the rebalance. The machine's own figure
// beside it: a Heartbeat round trip to the coordinator.
func BenchmarkGroupSettle(b *testing.B) {
	for _, bc := range []struct {
		name     string
		balancer func() kgo.GroupBalancer
		opts     []kgo.Opt
	}{
		{"eager-range", kgo.RangeBalancer, nil},
		{"cooperative-sticky", kgo.CooperativeStickyBalancer, nil},
		// KIP-848: the broker's uniform assignor, incremental reconciliation.
		{"kip848-uniform", kgo.StickyBalancer, []kgo.Opt{kgo.ServerSideBalancer()}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			br := groupBroker(b, "")
			createTopic(b, br, "settle", 64, nil)
			var total time.Duration
			var revoked int
			for i := 0; i < b.N; i++ {
				d, r := settleOnce(b, br, fmt.Sprintf("settle-%s-%d", bc.name, i), bc.balancer, bc.opts...)
				total += d
				revoked += r
			}
			per := total / time.Duration(b.N)
			rt := heartbeatRoundTrip(b, br)
			b.ReportMetric(float64(per.Milliseconds()), "ms-to-settle")
			b.ReportMetric(float64(revoked)/float64(b.N), "partitions-stopped")
			b.ReportMetric(float64(per)/float64(rt), "ratio-of-heartbeat-rtt")
		})
	}
}

func settleOnce(b *testing.B, br *Broker, groupID string, balancer func() kgo.GroupBalancer, opts ...kgo.Opt) (time.Duration, int) {
	b.StopTimer() // only the ninth member's join is timed
	own := &ownership{owner: map[int32]int{}, changed: make(chan struct{}, 1)}
	start := func(i int) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{
			kgo.SeedBrokers(br.Addr()),
			kgo.ConsumerGroup(groupID),
			kgo.ConsumeTopics("settle"),
			kgo.Balancers(balancer()),
			kgo.HeartbeatInterval(100 * time.Millisecond),
			kgo.SessionTimeout(6 * time.Second),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { own.assign(i, m["settle"]) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { own.revoke(i, m["settle"]) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { own.revoke(i, m["settle"]) }),
		}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		return cl
	}
	var clients []*kgo.Client
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	wait := func(members int) {
		ctx := testCtx(b)
		for !own.settled(64, members) {
			select {
			case <-own.changed:
			case <-time.After(50 * time.Millisecond): // revocations do not signal
			case <-ctx.Done():
				b.Fatalf("group did not settle on %d members", members)
			}
		}
	}
	for i := 0; i < 8; i++ {
		clients = append(clients, start(i))
	}
	wait(8)
	own.mu.Lock()
	own.revoked = 0
	own.mu.Unlock()
	b.StartTimer()
	t0 := time.Now()
	clients = append(clients, start(8))
	wait(9)
	d := time.Since(t0)
	b.StopTimer()
	own.mu.Lock()
	r := own.revoked
	own.mu.Unlock()
	return d, r
}

// heartbeatRoundTrip is the median time of a Heartbeat answered by the
// coordinator (UNKNOWN_MEMBER_ID: no group needed).
func heartbeatRoundTrip(b *testing.B, br *Broker) time.Duration {
	cl := newClient(b, br)
	ctx := testCtx(b)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = "rtt"
	if _, err := fc.RequestWith(ctx, cl); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for i := 0; i < 50; i++ {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID = "rtt", "nobody"
		t0 := time.Now()
		if _, err := req.RequestWith(ctx, cl); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	for i := range ds {
		for j := i + 1; j < len(ds); j++ {
			if ds[j] < ds[i] {
				ds[i], ds[j] = ds[j], ds[i]
			}
		}
	}
	return ds[len(ds)/2]
}
