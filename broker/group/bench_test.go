package group

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// loopRoundTrip measures the machine's limit for this design: an empty
// closure sent to the coordinator's loop and waited for.
func loopRoundTrip(c *Coordinator, n int) time.Duration {
	start := time.Now()
	for i := 0; i < n; i++ {
		c.inLoop(func() {})
	}
	return time.Since(start) / time.Duration(n)
}

// BenchmarkOffsetCommit is offset commits per second against one
// coordinator (in-memory log, 8 committers), beside the loop's own
// round-trip rate.
func BenchmarkOffsetCommit(b *testing.B) {
	c := New(Config{Logger: quiet, Partitions: 1})
	defer c.Close()
	if err := <-c.Load(0, &memLog{}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const workers = 8
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := (b.N + workers - 1) / workers
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := c.OffsetCommit(ctx, commitReq("g", "t", int32(w), int64(i))); err != nil {
					b.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	perCommit := elapsed / time.Duration(per*workers)
	rt := loopRoundTrip(c, 10000)
	b.ReportMetric(float64(time.Second)/float64(perCommit), "commits/s")
	b.ReportMetric(float64(rt)/float64(perCommit), "ratio-of-loop")
}

// BenchmarkRebalance is the coordinator's share of a rebalance: a group of
// 8 eager members on 64 partitions settles after a ninth joins (all rejoin,
// the leader assigns, everyone syncs), beside the loop's round-trip time.
func BenchmarkRebalance(b *testing.B) {
	clock := newFakeClock()
	ids := 0
	c := New(Config{Logger: quiet, Partitions: 1, Clock: clock, InitialRebalanceDelay: time.Second, MinSessionTimeout: time.Second,
		newMemberID: func(client string) string { ids++; return fmt.Sprintf("%s-%d", client, ids) }})
	defer c.Close()
	if err := <-c.Load(0, &memLog{}); err != nil {
		b.Fatal(err)
	}

	join := func(members []string, advance bool) []*kmsg.JoinGroupResponse {
		out := make([]*kmsg.JoinGroupResponse, len(members))
		got := make(chan struct{}, len(members))
		for i, m := range members {
			i, m := i, m
			c.inLoop(func() {
				c.handleJoin(Client{ClientID: "c"}, joinReq("g", m, 3), func(r *kmsg.JoinGroupResponse) { out[i] = r; got <- struct{}{} })
			})
		}
		if advance {
			clock.Advance(5 * time.Second) // the first rebalance's initial delay
		}
		for range members {
			<-got
		}
		return out
	}
	syncAll := func(joined []*kmsg.JoinGroupResponse) {
		got := make(chan struct{}, len(joined))
		for _, j := range joined {
			req := kmsg.NewPtrSyncGroupRequest()
			req.Group, req.MemberID, req.Generation = "g", j.MemberID, j.Generation
			if j.MemberID == j.LeaderID {
				for i, m := range j.Members {
					var a kmsg.ConsumerMemberAssignment
					for p := i; p < 64; p += len(j.Members) {
						a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: append([]int32(nil), int32(p))}}
					}
					req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: m.MemberID, MemberAssignment: a.AppendTo(nil)})
				}
			}
			c.inLoop(func() { c.handleSync(req, func(*kmsg.SyncGroupResponse) { got <- struct{}{} }) })
		}
		for range joined {
			<-got
		}
	}
	var members []string
	for i := 0; i < 8; i++ {
		members = append(members, "")
	}
	syncAll(join(members, true))
	c.inLoop(func() {
		members = members[:0]
		for id := range c.partitions[0].groups["g"].members {
			members = append(members, id)
		}
	})
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		// A ninth member joins; everyone rejoins; all sync; then it leaves
		// (not timed as a separate rebalance: the next round absorbs it).
		joined := join(append([]string{""}, members...), false) // the newcomer first: it starts the rebalance
		syncAll(joined)
		var newest string
		for _, j := range joined {
			if !contains(members, j.MemberID) {
				newest = j.MemberID
			}
		}
		if _, err := c.LeaveGroup(context.Background(), &kmsg.LeaveGroupRequest{Version: 5, Group: "g", Members: []kmsg.LeaveGroupRequestMember{{MemberID: newest}}}); err != nil {
			b.Fatal(err)
		}
		syncAll(join(members, false))
	}
	per := time.Since(start) / time.Duration(b.N)
	b.StopTimer()
	rt := loopRoundTrip(c, 10000)
	b.ReportMetric(float64(per.Microseconds()), "µs/rebalance-pair")
	b.ReportMetric(float64(per)/float64(rt), "ratio-of-loop")
}

// BenchmarkConsumerGroupReconcile is the coordinator's share of a KIP-848
// rebalance: 8 members on 64 partitions, a ninth joins and every member
// heartbeats (revocations, acknowledgements, the new owner's pick-up)
// until the group is Stable; then it leaves and the group settles again.
// Beside it, the loop's round-trip time.
func BenchmarkConsumerGroupReconcile(b *testing.B) {
	topics := newTestTopics([]string{"t:64"})
	c := New(Config{Logger: quiet, Partitions: 1, Clock: newFakeClock(), Topics: topics})
	defer c.Close()
	if err := <-c.Load(0, &memLog{}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	epochs := map[string]int32{}
	owned := map[string][]int32{}
	hb := func(id string, epoch int32) *kmsg.ConsumerGroupHeartbeatResponse {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version, req.Group, req.MemberID, req.MemberEpoch = 1, "g", id, epoch
		req.RebalanceTimeoutMillis = 60000
		req.SubscribedTopicNames = []string{"t"}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		if ps := owned[id]; len(ps) > 0 {
			req.Topics = append(req.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: topicIDOf("t"), Partitions: ps})
		}
		r, err := c.ConsumerGroupHeartbeat(ctx, Client{ClientID: "c"}, req)
		if err != nil || r.ErrorCode != 0 {
			b.Fatalf("heartbeat of %s: %v %v", id, err, r)
		}
		epochs[id] = r.MemberEpoch
		if r.Assignment != nil {
			owned[id] = nil
			for _, t := range r.Assignment.Topics {
				owned[id] = append(owned[id], t.Partitions...)
			}
		}
		return r
	}
	stable := func() bool {
		var ok bool
		c.inLoop(func() { ok = c.partitions[0].groups["g"].cg.state() == cgStable })
		return ok
	}
	settle := func(ids []string) {
		for n := 0; !stable(); n++ {
			if n > 20 {
				b.Fatal("group does not settle")
			}
			for _, id := range ids {
				hb(id, epochs[id])
			}
		}
	}
	var ids []string
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("m%d", i)
		ids = append(ids, id)
		hb(id, 0)
	}
	settle(ids)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		hb("new", 0)
		settle(append(ids, "new"))
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version, req.Group, req.MemberID, req.MemberEpoch = 1, "g", "new", -1
		if _, err := c.ConsumerGroupHeartbeat(ctx, Client{}, req); err != nil {
			b.Fatal(err)
		}
		delete(owned, "new")
		settle(ids)
	}
	per := time.Since(start) / time.Duration(b.N)
	b.StopTimer()
	rt := loopRoundTrip(c, 10000)
	b.ReportMetric(float64(per.Microseconds()), "µs/rebalance-pair")
	b.ReportMetric(float64(per)/float64(rt), "ratio-of-loop")
}

// BenchmarkConsumerGroupSteadyHeartbeat is one heartbeat of a stable
// KIP-848 group that nothing changes: 200 members, each subscribing to the
// same 100 topics by name, half of them also to a regex over the cluster's
// 2000 topics. A member's heartbeat must not cost work in the group's
// size times its subscriptions. Beside it, the loop's round-trip time.
func BenchmarkConsumerGroupSteadyHeartbeat(b *testing.B) {
	const members, named, all = 200, 100, 2000
	var specs, names []string
	for i := 0; i < all; i++ {
		specs = append(specs, fmt.Sprintf("t%04d:1", i))
		if i < named {
			names = append(names, fmt.Sprintf("t%04d", i))
		}
	}
	topics := newTestTopics(specs)
	c := New(Config{Logger: quiet, Partitions: 1, Clock: newFakeClock(), Topics: topics})
	defer c.Close()
	if err := <-c.Load(0, &memLog{}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	epochs := map[string]int32{}
	owned := map[string][]kmsg.ConsumerGroupHeartbeatRequestTopic{}
	hb := func(id string, i int, full bool) {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version, req.Group, req.MemberID, req.MemberEpoch = 1, "g", id, epochs[id]
		if full {
			req.RebalanceTimeoutMillis = 60000
			req.SubscribedTopicNames = names
			if i%2 == 1 {
				req.Version, req.SubscribedTopicRegex = 1, kmsg.StringPtr("t1.*")
			}
			req.Topics = owned[id]
			if req.Topics == nil {
				req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			}
		} else {
			req.RebalanceTimeoutMillis = -1
		}
		r, err := c.ConsumerGroupHeartbeat(ctx, Client{ClientID: "c"}, req)
		if err != nil || r.ErrorCode != 0 {
			b.Fatalf("heartbeat of %s: %v %+v", id, err, r)
		}
		epochs[id] = r.MemberEpoch
		if r.Assignment != nil {
			owned[id] = nil
			for _, t := range r.Assignment.Topics {
				owned[id] = append(owned[id], kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: t.TopicID, Partitions: t.Partitions})
			}
		}
	}
	var ids []string
	for i := 0; i < members; i++ {
		ids = append(ids, fmt.Sprintf("m%03d", i))
		hb(ids[i], i, true)
	}
	stable := func() bool {
		var ok bool
		c.inLoop(func() { ok = c.partitions[0].groups["g"].cg.state() == cgStable })
		return ok
	}
	for n := 0; !stable(); n++ {
		if n > 20 {
			b.Fatal("group does not settle")
		}
		for i, id := range ids {
			hb(id, i, true)
		}
	}
	epoch := func() (e int32) {
		c.inLoop(func() { e = c.partitions[0].groups["g"].cg.epoch })
		return e
	}
	before := epoch()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		hb(ids[i%members], i%members, false)
	}
	per := time.Since(start) / time.Duration(b.N)
	b.StopTimer()
	if !stable() || epoch() != before {
		b.Fatalf("heartbeats changed the group: epoch %d -> %d", before, epoch())
	}
	rt := loopRoundTrip(c, 10000)
	b.ReportMetric(float64(per.Nanoseconds())/1e3, "µs/heartbeat")
	b.ReportMetric(float64(per)/float64(rt), "ratio-of-loop")
}
