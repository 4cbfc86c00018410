package group

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/sediment-io/sediment/internal/testutil"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// blockingLog replays its records only once release is closed.
type blockingLog struct {
	memLog
	release chan struct{}
}

func (l *blockingLog) Replay(ctx context.Context, fn func(key, value []byte) error) error {
	select {
	case <-l.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return l.memLog.Replay(ctx, fn)
}

func joinReq(group, member string, version int16) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = version
	req.Group = group
	req.MemberID = member
	req.SessionTimeoutMillis = 10000
	req.RebalanceTimeoutMillis = 10000
	req.ProtocolType = "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name = "range"
	p.Metadata = []byte("md")
	req.Protocols = append(req.Protocols, p)
	return req
}

func commitReq(group string, topic string, partition int32, offset int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 8
	req.Group = group
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition = partition
	rp.Offset = offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func fetchReq(group string, version int16, topic string, partitions ...int32) *kmsg.OffsetFetchRequest {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = version
	if version >= 8 {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = group
		rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: partitions}}
		req.Groups = append(req.Groups, rg)
		return req
	}
	req.Group = group
	req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: topic, Partitions: partitions}}
	return req
}

func TestLoadInProgress(t *testing.T) {
	ctx := testCtx(t)
	log := &blockingLog{release: make(chan struct{})}
	if err := log.Append(ctx, []Record{{Key: offsetKey("g", "t", 0), Value: offsetValue(offset{offset: 42, leaderEpoch: 3, expireTime: -1})}}); err != nil {
		t.Fatal(err)
	}
	c := New(Config{Logger: quiet, Partitions: 1, Clock: newFakeClock()})
	defer c.Close()
	loaded := c.Load(0, log)

	jr, err := c.JoinGroup(ctx, Client{ClientID: "a"}, joinReq("g", "", 9))
	if err != nil || jr.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("join while loading: %v %v", jr, err)
	}
	fr, err := c.OffsetFetch(ctx, fetchReq("g", 5, "t", 0))
	if err != nil || fr.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("fetch while loading: %+v %v", fr, err)
	}
	lr, err := c.ListGroups(ctx, kmsg.NewPtrListGroupsRequest())
	if err != nil || lr.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("list while loading: %+v %v", lr, err)
	}
	if c.Loaded(0) {
		t.Fatal("Loaded before the replay finished")
	}
	close(log.release)
	if err := <-loaded; err != nil {
		t.Fatalf("load: %v", err)
	}
	if !c.Loaded(0) {
		t.Fatal("not Loaded after the replay")
	}
	fr, err = c.OffsetFetch(ctx, fetchReq("g", 8, "t", 0))
	if err != nil {
		t.Fatal(err)
	}
	if p := fr.Groups[0].Topics[0].Partitions[0]; p.Offset != 42 || p.LeaderEpoch != 3 || p.ErrorCode != 0 {
		t.Fatalf("fetch after load: %+v", p)
	}
}

func TestUnloadAndCloseAnswerWaitingRequests(t *testing.T) {
	ctx := testCtx(t)
	clock := newFakeClock()
	c := New(Config{Logger: quiet, Partitions: 1, Clock: clock, InitialRebalanceDelay: time.Minute})
	defer c.Close()
	if err := <-c.Load(0, &memLog{}); err != nil {
		t.Fatal(err)
	}
	// JoinGroup v3 gets an id at once and waits out the initial delay.
	type result struct {
		r   *kmsg.JoinGroupResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.JoinGroup(ctx, Client{ClientID: "a"}, joinReq("g", "", 3))
		done <- result{r, err}
	}()
	waitFor(t, func() bool {
		var n int
		c.inLoop(func() {
			if g := c.partitions[0].groups["g"]; g != nil {
				n = len(g.members)
			}
		})
		return n == 1
	})
	c.Unload(0)
	res := <-done
	if res.err != nil || res.r.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("waiting join after unload: %+v %v", res.r, res.err)
	}
	hr, err := c.Heartbeat(ctx, &kmsg.HeartbeatRequest{Version: 4, Group: "g", MemberID: res.r.MemberID})
	if err != nil || hr.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("heartbeat after unload: %+v %v", hr, err)
	}

	// Load again, start a waiting join, and close: the caller gets ErrClosed.
	if err := <-c.Load(0, &memLog{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		r, err := c.JoinGroup(ctx, Client{ClientID: "a"}, joinReq("g", "", 3))
		done <- result{r, err}
	}()
	waitFor(t, func() bool {
		var n int
		c.inLoop(func() {
			if p := c.partitions[0]; p != nil && p.groups["g"] != nil {
				n = len(p.groups["g"].members)
			}
		})
		return n == 1
	})
	c.Close()
	res = <-done
	if res.err == nil && res.r.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("waiting join after close: %+v", res.r)
	}
	if _, err := c.Heartbeat(ctx, &kmsg.HeartbeatRequest{Group: "g"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("heartbeat after close: %v", err)
	}
	if err := <-c.Load(1, &memLog{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("load after close: %v", err)
	}
}

// waitFor polls cond until it holds or the test's deadline passes.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, "condition", cond)
}

func TestLoadRecords(t *testing.T) {
	ctx := testCtx(t)
	t.Run("corrupt", func(t *testing.T) {
		log := &memLog{}
		_ = log.Append(ctx, []Record{{Key: groupKey("g"), Value: []byte{0, 3, 0xff}}})
		c := New(Config{Logger: quiet, Partitions: 1, Clock: newFakeClock()})
		defer c.Close()
		if err := <-c.Load(0, log); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("load of a corrupt record: %v", err)
		}
		if c.Loaded(0) {
			t.Fatal("partition served after a failed load")
		}
		hr, _ := c.Heartbeat(ctx, &kmsg.HeartbeatRequest{Version: 4, Group: "g", MemberID: "m"})
		if hr.ErrorCode != kerr.NotCoordinator.Code {
			t.Fatalf("heartbeat: %s", errName(hr.ErrorCode))
		}
	})
	t.Run("unknown key versions and tombstones", func(t *testing.T) {
		log := &memLog{}
		_ = log.Append(ctx, []Record{
			{Key: []byte{0, 5, 'x'}, Value: []byte("a KIP-848 record")},
			{Key: offsetKey("g", "t", 0), Value: offsetValue(offset{offset: 1, leaderEpoch: -1, expireTime: -1})},
			{Key: offsetKey("g", "t", 1), Value: offsetValue(offset{offset: 2, leaderEpoch: -1, expireTime: -1})},
			{Key: offsetKey("g", "t", 0)}, // tombstone
			{Key: offsetKey("gone", "t", 0), Value: offsetValue(offset{offset: 3, leaderEpoch: -1, expireTime: -1})},
			{Key: offsetKey("gone", "t", 0)},
			{Key: groupKey("gone")},
		})
		c := New(Config{Logger: quiet, Partitions: 1, Clock: newFakeClock()})
		defer c.Close()
		if err := <-c.Load(0, log); err != nil {
			t.Fatal(err)
		}
		fr, _ := c.OffsetFetch(ctx, fetchReq("g", 8, "t", 0, 1))
		ps := fr.Groups[0].Topics[0].Partitions
		if ps[0].Offset != -1 || ps[1].Offset != 2 {
			t.Fatalf("offsets after replay: %+v", ps)
		}
		lr, _ := c.ListGroups(ctx, kmsg.NewPtrListGroupsRequest())
		if len(lr.Groups) != 1 || lr.Groups[0].Group != "g" {
			t.Fatalf("groups after replay: %+v", lr.Groups)
		}
	})
}

// TestRealClock drives two members through the public API with the wall
// clock, as the broker will: KIP-394 ids, a delayed first rebalance, sync,
// commit and fetch.
func TestRealClock(t *testing.T) {
	ctx := testCtx(t)
	c := New(Config{Logger: quiet, Partitions: 50, InitialRebalanceDelay: time.Second, MinSessionTimeout: time.Second})
	defer c.Close()
	log := &memLog{}
	p := PartitionFor("real", 50)
	if err := <-c.Load(p, log); err != nil {
		t.Fatal(err)
	}
	// Member ids first (KIP-394), then the two joins: the second arrives
	// while the first waits out the initial rebalance delay (1s, extended
	// once because a member arrived during it).
	ids := make([]string, 2)
	clients := make([]Client, 2)
	for i := range ids {
		clients[i] = Client{ClientID: fmt.Sprintf("c%d", i), Host: "/127.0.0.1"}
		r, err := c.JoinGroup(ctx, clients[i], joinReq("real", "", 9))
		if err != nil || r.ErrorCode != kerr.MemberIDRequired.Code {
			t.Fatalf("first join: %v %v", r, err)
		}
		ids[i] = r.MemberID
	}
	joined := make([]*kmsg.JoinGroupResponse, 2)
	var wg sync.WaitGroup
	for i := range ids {
		if i > 0 {
			waitFor(t, func() bool {
				var ok bool
				c.inLoop(func() {
					g := c.partitions[p].groups["real"]
					ok = g != nil && g.members[ids[i-1]] != nil
				})
				return ok
			})
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := c.JoinGroup(ctx, clients[i], joinReq("real", ids[i], 9))
			if err != nil || r.ErrorCode != 0 {
				t.Errorf("second join: %v %v", r, err)
				return
			}
			joined[i] = r
		}(i)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if joined[0].Generation != joined[1].Generation {
		t.Fatalf("members joined different generations (%d, %d)", joined[0].Generation, joined[1].Generation)
	}
	gen := joined[0].Generation
	leader := joined[0]
	if leader.MemberID != leader.LeaderID {
		leader = joined[1]
	}
	if len(leader.Members) != 2 {
		t.Fatalf("leader sees %d members", len(leader.Members))
	}
	syncs := make(chan *kmsg.SyncGroupResponse, 2)
	for _, j := range joined {
		go func(j *kmsg.JoinGroupResponse) {
			req := kmsg.NewPtrSyncGroupRequest()
			req.Version = 5
			req.Group, req.MemberID, req.Generation = "real", j.MemberID, gen
			if j.MemberID == j.LeaderID {
				for _, m := range j.Members {
					req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: m.MemberID, MemberAssignment: []byte("for " + m.MemberID)})
				}
			}
			r, err := c.SyncGroup(ctx, req)
			if err != nil {
				t.Error(err)
			}
			syncs <- r
		}(j)
	}
	for range joined {
		r := <-syncs
		if r == nil || r.ErrorCode != 0 || !bytes.HasPrefix(r.MemberAssignment, []byte("for ")) {
			t.Fatalf("sync: %+v", r)
		}
	}
	cr := commitReq("real", "t", 3, 77)
	cr.MemberID, cr.Generation = joined[0].MemberID, gen
	if r, err := c.OffsetCommit(ctx, cr); err != nil || r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("commit: %+v %v", r, err)
	}
	fr, err := c.OffsetFetch(ctx, fetchReq("real", 5, "t", 3))
	if err != nil || fr.Topics[0].Partitions[0].Offset != 77 {
		t.Fatalf("fetch: %+v %v", fr, err)
	}
	resp, err := c.Handle(ctx, Client{}, &kmsg.DescribeGroupsRequest{Version: 5, Groups: []string{"real"}})
	if err != nil || resp.(*kmsg.DescribeGroupsResponse).Groups[0].State != "Stable" {
		t.Fatalf("describe: %+v %v", resp, err)
	}
	if resp, err := c.Handle(ctx, Client{}, kmsg.NewPtrProduceRequest()); resp != nil || err != nil {
		t.Fatalf("Handle of a non-group request: %v %v", resp, err)
	}
}

type fakeTopics map[string]struct {
	id    [16]byte
	parts int32
}

func (f fakeTopics) Partitions(topic string) ([16]byte, int32, bool) {
	t, ok := f[topic]
	return t.id, t.parts, ok
}

func (f fakeTopics) Name(id [16]byte) (string, bool) {
	for n, t := range f {
		if t.id == id {
			return n, true
		}
	}
	return "", false
}

func TestTopicIDsAndUnknownPartitions(t *testing.T) {
	ctx := testCtx(t)
	topics := fakeTopics{"t": {id: [16]byte{1}, parts: 2}}
	c := New(Config{Logger: quiet, Partitions: 1, Clock: newFakeClock(), Topics: topics})
	defer c.Close()
	if err := <-c.Load(0, &memLog{}); err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 10
	req.Group = "g"
	for _, id := range [][16]byte{{1}, {9}} {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.TopicID = id
		for _, p := range []int32{1, 5} {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, 10+int64(p)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	r, err := c.OffsetCommit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int16{{0, kerr.UnknownTopicOrPartition.Code}, {kerr.UnknownTopicID.Code, kerr.UnknownTopicID.Code}}
	for i, rt := range r.Topics {
		if rt.TopicID != req.Topics[i].TopicID {
			t.Errorf("topic %d: id %x", i, rt.TopicID)
		}
		for j, p := range rt.Partitions {
			if p.ErrorCode != want[i][j] {
				t.Errorf("topic %d partition %d: %s, want %s", i, p.Partition, errName(p.ErrorCode), errName(want[i][j]))
			}
		}
	}
	// v8 by name: unknown topic.
	if r, _ := c.OffsetCommit(ctx, commitReq("g", "nope", 0, 1)); r.Topics[0].Partitions[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("commit to unknown topic: %s", errName(r.Topics[0].Partitions[0].ErrorCode))
	}
	// Fetch v10: all topics come back with their ids.
	freq := kmsg.NewPtrOffsetFetchRequest()
	freq.Version = 10
	freq.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g"}}
	fr, err := c.OffsetFetch(ctx, freq)
	if err != nil {
		t.Fatal(err)
	}
	if ts := fr.Groups[0].Topics; len(ts) != 1 || ts[0].TopicID != ([16]byte{1}) || ts[0].Partitions[0].Offset != 11 {
		t.Fatalf("fetch v10: %+v", ts)
	}
	freq.Groups[0].Topics = []kmsg.OffsetFetchRequestGroupTopic{{TopicID: [16]byte{7}, Partitions: []int32{0}}}
	fr, _ = c.OffsetFetch(ctx, freq)
	if p := fr.Groups[0].Topics[0].Partitions[0]; p.ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("fetch v10 of an unknown id: %s", errName(p.ErrorCode))
	}
}

// TestConcurrentCommits commits from many goroutines (the appender batches
// them) and checks that the last commit of every partition wins, in memory
// and after a reload.
func TestConcurrentCommits(t *testing.T) {
	ctx := testCtx(t)
	log := &memLog{}
	c := New(Config{Logger: quiet, Partitions: 1})
	if err := <-c.Load(0, log); err != nil {
		t.Fatal(err)
	}
	const workers, commits = 8, 50
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 1; i <= commits; i++ {
				r, err := c.OffsetCommit(ctx, commitReq("g", "t", int32(w), int64(i)))
				if err != nil || r.Topics[0].Partitions[0].ErrorCode != 0 {
					t.Errorf("commit: %v %v", r, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	check := func(c *Coordinator) {
		parts := make([]int32, workers)
		for i := range parts {
			parts[i] = int32(i)
		}
		fr, err := c.OffsetFetch(ctx, fetchReq("g", 8, "t", parts...))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range fr.Groups[0].Topics[0].Partitions {
			if p.Offset != commits {
				t.Errorf("partition %d: offset %d, want %d", p.Partition, p.Offset, commits)
			}
		}
	}
	check(c)
	c.Close()
	c = New(Config{Logger: quiet, Partitions: 1})
	defer c.Close()
	if err := <-c.Load(0, log); err != nil {
		t.Fatal(err)
	}
	check(c)
}

func TestRecordLayout(t *testing.T) {
	// Key version 1: int16 1, string group, string topic, int32 partition.
	want := []byte{0, 1, 0, 1, 'g', 0, 1, 't', 0, 0, 0, 7}
	if got := offsetKey("g", "t", 7); !bytes.Equal(got, want) {
		t.Fatalf("offset key %x, want %x", got, want)
	}
	if got := groupKey("g"); !bytes.Equal(got, []byte{0, 2, 0, 1, 'g'}) {
		t.Fatalf("group key %x", got)
	}
	// Value version 3: int16 3, int64 offset, int32 leader epoch, string
	// metadata, int64 commit timestamp.
	v := offsetValue(offset{offset: 5, leaderEpoch: 2, metadata: "m", commitTime: 9, expireTime: -1})
	wantV := []byte{0, 3, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 2, 0, 1, 'm', 0, 0, 0, 0, 0, 0, 0, 9}
	if !bytes.Equal(v, wantV) {
		t.Fatalf("offset value %x, want %x", v, wantV)
	}
	d, err := decodeRecord(offsetKey("g", "t", 7), v)
	if err != nil || d.group != "g" || d.topic != "t" || d.partition != 7 || *d.offset != (offset{offset: 5, leaderEpoch: 2, metadata: "m", commitTime: 9, expireTime: -1}) {
		t.Fatalf("decode: %+v %v", d, err)
	}
}

// gatedLog holds every Append until a value arrives on gate.
type gatedLog struct {
	memLog
	gate chan error
}

func (l *gatedLog) Append(ctx context.Context, records []Record) error {
	select {
	case err := <-l.gate:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return l.memLog.Append(ctx, records)
}

// TestRequireStable: while a commit is being written, OffsetFetch with
// RequireStable answers UNSTABLE_OFFSET_COMMIT for its partitions; without
// it, the last written offset.
func TestRequireStable(t *testing.T) {
	ctx := testCtx(t)
	c, log, done := commitInFlight(t)
	defer c.Close()
	stable := fetchReq("g", 7, "t", 0, 1)
	stable.RequireStable = true
	fr, _ := c.OffsetFetch(ctx, stable)
	if p := fr.Topics[0].Partitions; p[0].ErrorCode != kerr.UnstableOffsetCommit.Code || p[1].ErrorCode != 0 {
		t.Fatalf("require stable during a commit: %s %s", errName(p[0].ErrorCode), errName(p[1].ErrorCode))
	}
	fr, _ = c.OffsetFetch(ctx, fetchReq("g", 7, "t", 0))
	if p := fr.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != -1 {
		t.Fatalf("fetch during a commit: %+v", p)
	}
	log.gate <- nil
	if r := <-done; r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("commit: %s", errName(r.Topics[0].Partitions[0].ErrorCode))
	}
	fr, _ = c.OffsetFetch(ctx, stable)
	if p := fr.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 9 {
		t.Fatalf("fetch after the commit: %+v", p)
	}
}

// TestDeleteGroupWithCommitInFlight: a group deleted while its first commit
// (a standalone consumer's, on the empty group) is still being written stays
// deleted after a reload: the deletion writes a tombstone for the commit's
// partition too, after the commit in the log. Without it the replay brought
// the group back with the offset.
func TestDeleteGroupWithCommitInFlight(t *testing.T) {
	ctx := testCtx(t)
	c, log, committed := commitInFlight(t)
	deleted := make(chan *kmsg.DeleteGroupsResponse, 1)
	go func() {
		req := kmsg.NewPtrDeleteGroupsRequest()
		req.Groups = []string{"g"}
		r, err := c.DeleteGroups(ctx, req)
		if err != nil {
			t.Error(err)
		}
		deleted <- r
	}()
	log.gate <- nil // the commit
	log.gate <- nil // the deletion
	if r := <-committed; r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("commit: %s", errName(r.Topics[0].Partitions[0].ErrorCode))
	}
	if r := <-deleted; r.Groups[0].ErrorCode != 0 {
		t.Fatalf("delete: %s", errName(r.Groups[0].ErrorCode))
	}
	c.Close()

	// Another coordinator replays the log.
	c2 := New(Config{Logger: quiet, Partitions: 1, Clock: newFakeClock()})
	defer c2.Close()
	if err := <-c2.Load(0, &log.memLog); err != nil {
		t.Fatal(err)
	}
	fr, err := c2.OffsetFetch(ctx, fetchReq("g", 7, "t", 0))
	if err != nil {
		t.Fatal(err)
	}
	if p := fr.Topics[0].Partitions[0]; p.Offset != -1 {
		t.Fatalf("after the reload the deleted group has offset %d for t-0", p.Offset)
	}
	lr, err := c2.ListGroups(ctx, kmsg.NewPtrListGroupsRequest())
	if err != nil {
		t.Fatal(err)
	}
	if len(lr.Groups) != 0 {
		t.Fatalf("after the reload the groups are %+v", lr.Groups)
	}
}

// commitInFlight loads a coordinator of one partition on a gatedLog and
// starts a commit of offset 9 for t-0 by group g (generation -1), which it
// returns once the commit is being written (held at the gate); the commit's
// answer comes on the channel after the test opens the gate.
func commitInFlight(t *testing.T) (*Coordinator, *gatedLog, <-chan *kmsg.OffsetCommitResponse) {
	t.Helper()
	log := &gatedLog{gate: make(chan error)}
	c := New(Config{Logger: quiet, Partitions: 1, Clock: newFakeClock()})
	if err := <-c.Load(0, log); err != nil {
		t.Fatal(err)
	}
	done := make(chan *kmsg.OffsetCommitResponse, 1)
	go func() {
		r, err := c.OffsetCommit(testCtx(t), commitReq("g", "t", 0, 9))
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	waitFor(t, func() bool {
		var n int
		c.inLoop(func() {
			if g := c.partitions[0].groups["g"]; g != nil {
				n = g.pendingCommits[topicPartition{"t", 0}]
			}
		})
		return n == 1
	})
	return c, log, done
}
