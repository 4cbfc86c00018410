package group

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// testTopics is a Topics the datadriven scripts change (topic command).
type testTopics struct {
	mu    sync.Mutex
	parts map[string]int32
	// version counts changes to parts (TopicsVersioner): a change made
	// without bumping it would go unseen by the groups, as in the broker.
	version uint64
}

func (t *testTopics) TopicsVersion() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.version
}

func newTestTopics(specs []string) *testTopics {
	t := &testTopics{parts: make(map[string]int32)}
	for _, s := range specs {
		name, n, _ := strings.Cut(s, ":")
		v, _ := strconv.Atoi(n)
		t.parts[name] = int32(v)
	}
	return t
}

func topicIDOf(name string) [16]byte {
	var id [16]byte
	copy(id[:], "id:"+name)
	return id
}

func (t *testTopics) Partitions(name string) ([16]byte, int32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.parts[name]
	return topicIDOf(name), n, ok
}

func (t *testTopics) Name(id [16]byte) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for n := range t.parts {
		if topicIDOf(n) == id {
			return n, true
		}
	}
	return "", false
}

func (t *testTopics) TopicNames() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for n := range t.parts {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// parseTPs reads "a/0" items into topic → partitions, in order.
func parseTPs(items []string) (topics []string, parts map[string][]int32) {
	parts = map[string][]int32{}
	for _, tp := range items {
		topic, part, _ := strings.Cut(tp, "/")
		pn, _ := strconv.Atoi(part)
		if _, ok := parts[topic]; !ok {
			topics = append(topics, topic)
		}
		parts[topic] = append(parts[topic], int32(pn))
	}
	return topics, parts
}

// consumerAssignment encodes "a/0+a/1" as a ConsumerProtocol assignment.
func consumerAssignment(spec string) []byte {
	var items []string
	if spec != "" {
		items = strings.Split(spec, "+")
	}
	topics, parts := parseTPs(items)
	a := kmsg.NewConsumerMemberAssignment()
	a.Topics = []kmsg.ConsumerMemberAssignmentTopic{}
	for _, t := range topics {
		a.Topics = append(a.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t, Partitions: parts[t]})
	}
	return a.AppendTo(nil)
}

// fmtConsumerAssignment prints a ConsumerProtocol assignment.
func fmtConsumerAssignment(b []byte) string {
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(b); err != nil {
		return fmt.Sprintf("unparsable(%q)", b)
	}
	set := map[string][]int32{}
	for _, t := range a.Topics {
		set[t.Topic] = append(set[t.Topic], t.Partitions...)
	}
	return fmt.Sprintf("v%d%s", a.Version, fmtParts(set))
}

func fmtParts(set map[string][]int32) string {
	var names []string
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		ps := append([]int32(nil), set[n]...)
		sortInt32s(ps)
		for _, p := range ps {
			parts = append(parts, fmt.Sprintf("%s/%d", n, p))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func (e *env) runConsumer(td *datadriven.TestData, a args) (string, bool) {
	t := e.t
	switch td.Cmd {
	case "topic":
		e.topics.mu.Lock()
		e.topics.parts[a.str("name", "")] = int32(a.num(t, "partitions", 1))
		e.topics.version++
		e.topics.mu.Unlock()
		return "ok\n", true

	case "cg":
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version = int16(a.num(t, "v", 1))
		req.Group = a.str("group", "g")
		req.MemberID = a.str("member", "")
		req.MemberEpoch = int32(a.num(t, "epoch", 0))
		req.InstanceID = a.ptr("instance")
		req.RebalanceTimeoutMillis = -1
		if _, keep := a["keepalive"]; !keep {
			req.RebalanceTimeoutMillis = int32(a.dur(t, "rebalance", 10*time.Second).Milliseconds())
			req.SubscribedTopicNames = append([]string{}, a["topics"]...)
			req.SubscribedTopicRegex = a.ptr("regex")
			if req.SubscribedTopicRegex != nil {
				req.SubscribedTopicNames = nil
			}
			assignor := a.str("assignor", "uniform")
			req.ServerAssignor = &assignor
		}
		if owned, ok := a["owned"]; ok || req.MemberEpoch == 0 {
			req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			idx := map[string]int{}
			for _, tp := range owned {
				topic, part, _ := strings.Cut(tp, "/")
				pn, _ := strconv.Atoi(part)
				i, ok := idx[topic]
				if !ok {
					req.Topics = append(req.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: topicIDOf(topic)})
					i = len(req.Topics) - 1
					idx[topic] = i
				}
				req.Topics[i].Partitions = append(req.Topics[i].Partitions, int32(pn))
			}
		}
		r, err := e.c.ConsumerGroupHeartbeat(context.Background(), Client{ClientID: a.str("client", "c"), Host: "/127.0.0.1"}, req)
		if err != nil {
			return err.Error() + "\n", true
		}
		s := fmt.Sprintf("err=%s epoch=%d", errName(r.ErrorCode), r.MemberEpoch)
		if r.Assignment != nil {
			set := map[string][]int32{}
			for _, at := range r.Assignment.Topics {
				name, _ := e.topics.Name(at.TopicID)
				set[name] = append(set[name], at.Partitions...)
			}
			s += " assignment=" + fmtParts(set)
		}
		return s + "\n", true

	case "cg-describe":
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Version = 1
		req.Groups = a["groups"]
		if req.Groups == nil {
			req.Groups = []string{"g"}
		}
		r, err := e.c.ConsumerGroupDescribe(context.Background(), req)
		if err != nil {
			return err.Error() + "\n", true
		}
		var b strings.Builder
		for _, g := range r.Groups {
			fmt.Fprintf(&b, "%s: err=%s state=%s epoch=%d assignment-epoch=%d assignor=%s\n", g.Group, errName(g.ErrorCode), g.State, g.Epoch, g.AssignmentEpoch, g.AssignorName)
			for _, m := range g.Members {
				as, ts := map[string][]int32{}, map[string][]int32{}
				for _, x := range m.Assignment.TopicPartitions {
					as[x.Topic] = x.Partitions
				}
				for _, x := range m.TargetAssignment.TopicPartitions {
					ts[x.Topic] = x.Partitions
				}
				inst := ""
				if m.InstanceID != nil {
					inst = "(" + *m.InstanceID + ")"
				}
				if m.MemberType == 0 {
					inst += " classic"
				}
				fmt.Fprintf(&b, "  %s%s epoch=%d topics=%v assigned=%s target=%s\n", m.MemberID, inst, m.MemberEpoch, m.SubscribedTopics, fmtParts(as), fmtParts(ts))
			}
		}
		return b.String(), true
	}
	return "", false
}

// TestRecreatedTopicReachesMember: a topic deleted and created again under
// its name (a new id, the same partition count) must reach the members:
// Kafka's subscription metadata holds topic ids, so the group epoch moves
// and the member is sent an assignment naming the new id. Also when the
// topic was recreated while no coordinator had the group loaded (the ids
// the target was computed with come from the group's record).
func TestRecreatedTopicReachesMember(t *testing.T) {
	for _, failover := range []bool{false, true} {
		t.Run(fmt.Sprintf("failover=%v", failover), func(t *testing.T) {
			ctx := testCtx(t)
			topics := fakeTopics{"t": {id: [16]byte{1}, parts: 2}}
			log := &memLog{}
			start := func() *Coordinator {
				c := New(Config{Logger: quiet, Partitions: 1, Clock: newFakeClock(), Topics: topics})
				if err := <-c.Load(0, log); err != nil {
					t.Fatal(err)
				}
				return c
			}
			c := start()
			defer func() { c.Close() }()
			hb := func(epoch int32, owned [16]byte, parts ...int32) *kmsg.ConsumerGroupHeartbeatResponse {
				req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
				req.Version, req.Group, req.MemberID, req.MemberEpoch = 1, "g", "m1", epoch
				req.RebalanceTimeoutMillis = -1
				if epoch == 0 {
					req.RebalanceTimeoutMillis = 60000
					req.SubscribedTopicNames = []string{"t"}
				}
				req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
				if len(parts) > 0 {
					req.Topics = append(req.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: owned, Partitions: parts})
				}
				r, err := c.ConsumerGroupHeartbeat(ctx, Client{ClientID: "c"}, req)
				if err != nil || r.ErrorCode != 0 {
					t.Fatalf("heartbeat: %v %+v", err, r)
				}
				return r
			}
			r := hb(0, [16]byte{})
			if r.Assignment == nil || len(r.Assignment.Topics) != 1 || r.Assignment.Topics[0].TopicID != [16]byte{1} {
				t.Fatalf("join: %+v", r.Assignment)
			}
			epoch := r.MemberEpoch
			hb(epoch, [16]byte{1}, 0, 1)
			if failover {
				c.Close()
			}
			// Deleted and created again: a new id, the same count. The
			// client cannot resolve id 1 any more and drops its partitions.
			topics["t"] = struct {
				id    [16]byte
				parts int32
			}{id: [16]byte{2}, parts: 2}
			if failover {
				c = start()
			}
			for range 3 {
				r = hb(epoch, [16]byte{}) // owns nothing now
				if r.Assignment != nil {
					for _, at := range r.Assignment.Topics {
						if at.TopicID == [16]byte{2} {
							return
						}
					}
				}
				epoch = r.MemberEpoch
			}
			t.Fatalf("the member was never told about the recreated topic (epoch %d, last assignment %+v)", r.MemberEpoch, r.Assignment)
		})
	}
}

// TestHeartbeatWaitsForWriteInFlight: a retried heartbeat that changes
// nothing, arriving while the write of the change it retries is in flight,
// is not answered before a write of that state: if the first write fails,
// the retry is never told of a membership that is not in the log.
func TestHeartbeatWaitsForWriteInFlight(t *testing.T) {
	log := &memLog{failNext: fmt.Errorf("injected: %w", ErrNotLeader)}
	c := New(Config{Logger: quiet, Partitions: 1, Clock: newFakeClock(), Topics: newTestTopics([]string{"a:4"})})
	defer c.Close()
	if err := <-c.Load(0, log); err != nil {
		t.Fatal(err)
	}
	join := func() *kmsg.ConsumerGroupHeartbeatRequest {
		r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		r.Version, r.Group, r.MemberID, r.RebalanceTimeoutMillis = 1, "g", "m1", 10000
		r.SubscribedTopicNames, r.Topics = []string{"a"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		return r
	}
	first, retry := make(chan *kmsg.ConsumerGroupHeartbeatResponse, 1), make(chan *kmsg.ConsumerGroupHeartbeatResponse, 1)
	c.inLoop(func() {
		c.handleCGHeartbeat(Client{ClientID: "c"}, join(), nil, nil, func(r *kmsg.ConsumerGroupHeartbeatResponse) { first <- r })
		c.handleCGHeartbeat(Client{ClientID: "c"}, join(), nil, nil, func(r *kmsg.ConsumerGroupHeartbeatResponse) { retry <- r })
	})
	if r := <-first; r.ErrorCode == 0 {
		t.Fatal("the first write was made to fail, yet the join succeeded")
	}
	r := <-retry
	if err := c.barrier(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	written := len(log.records)
	log.mu.Unlock()
	if r.ErrorCode == 0 && written == 0 {
		t.Fatalf("the retry was answered NONE at epoch %d with nothing of the group in the log", r.MemberEpoch)
	}
}

// TestHeartbeatEmptyInstanceOrRack: an empty instance id or rack id, or a
// static member's leave (epoch -2) without its instance id, is
// INVALID_REQUEST with Kafka's message, as its
// throwIfConsumerGroupHeartbeatRequestIsInvalid (the message was kerr's
// generic text, which hid why franz-go's static leave was refused).
func TestHeartbeatEmptyInstanceOrRack(t *testing.T) {
	empty := ""
	for _, c := range []struct {
		set  func(*kmsg.ConsumerGroupHeartbeatRequest)
		want string
	}{
		{func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.InstanceID = &empty }, "InstanceId can't be empty."},
		{func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RackID = &empty }, "RackId can't be empty."},
		{func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = staticLeaveEpoch }, "InstanceId can't be null."},
		{func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -3 }, "MemberEpoch is invalid."},
	} {
		r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		r.Version, r.Group, r.MemberID, r.RebalanceTimeoutMillis = 1, "g", "m1", 10000
		r.SubscribedTopicNames, r.Topics = []string{"a"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		c.set(r)
		code, msg := validCGRequest(r)
		if code != kerr.InvalidRequest.Code || msg != c.want {
			t.Errorf("instance %v rack %v epoch %d: %v %q, want INVALID_REQUEST %q", r.InstanceID, r.RackID, r.MemberEpoch, kerr.ErrorForCode(code), msg, c.want)
		}
		if m := cgErrorMsg(r, code, msg).ErrorMessage; m == nil || *m != c.want {
			t.Errorf("response message %v, want %q", m, c.want)
		}
	}
}
