package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/metadata"
)

// setShareGroupConfig sets a share group config through
// IncrementalAlterConfigs of a GROUP resource, as an admin would.
func setShareGroupConfig(t *testing.T, cl *kgo.Client, group, name, value string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = name, kmsg.StringPtr(value)
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Resources[0].ErrorCode); err != nil {
		t.Fatalf("set %s=%s on group %s: %v", name, value, group, err)
	}
}

// newShareQueue makes a 1-partition topic holding n records, read by share
// group from the earliest; it returns an admin client and the topic id.
func newShareQueue(t *testing.T, b *Broker, topic, group string, n int) (*kgo.Client, [16]byte) {
	t.Helper()
	createTopic(t, b, topic, 1, nil)
	admin := newClient(t, b)
	setShareGroupConfig(t, admin, group, cfgShareAutoOffsetReset, "earliest")
	produceAll(t, admin, makeRecords(topic, n, "v"))
	tp, _ := b.meta.State().Topic(topic)
	return admin, [16]byte(tp.ID)
}

// TestShareGroupConsumers: two franz-go share consumers (KIP-932) in one
// group read a 3-partition topic together: every record is delivered once
// (each accepted when the consumer polls again), with its key and value;
// the group is described and listed as a share group; after they close,
// a new member finds nothing left and then reads exactly what is produced
// next, also after a restart of the broker (the start offsets are in the
// metadata log).
func TestShareGroupConsumers(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	const topic, group, n = "shared", "workers", 600
	createTopic(t, b, topic, 3, nil)
	admin := newClient(t, b)
	setShareGroupConfig(t, admin, group, cfgShareAutoOffsetReset, "earliest")
	produceAll(t, admin, makeRecords(topic, n, "v"))

	want := map[string]string{} // value → key: the values are unique
	for _, r := range makeRecords(topic, n, "v") {
		want[string(r.Value)] = string(r.Key)
	}
	var mu sync.Mutex
	got := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	done := make(chan struct{})
	var closeOnce sync.Once
	consumers := make([]*kgo.Client, 2)
	for i := range consumers {
		cl := newClient(t, b, kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.ClientID(fmt.Sprintf("share-%d", i)))
		consumers[i] = cl
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				fs := cl.PollFetches(ctx)
				if ctx.Err() != nil {
					return
				}
				select {
				case <-done:
					return
				default:
				}
				fs.EachError(func(_ string, _ int32, err error) { t.Errorf("share consumer: %v", err) })
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) {
					if k, ok := want[string(r.Value)]; !ok || k != string(r.Key) {
						t.Errorf("record %s = %q: not produced so", r.Key, r.Value)
					}
					got[string(r.Value)]++
				})
				if len(got) == n {
					closeOnce.Do(func() { close(done) })
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("share consumers read %d of %d records", len(got), n)
	}
	// Both members in the group, the partitions shared out. One consumer
	// may have read everything before the other's first heartbeat joined
	// it: the two are in the group soon after, as both keep heartbeating.
	testutil.WaitFor(t, 30*time.Second, "both share consumers in the group, the partitions shared out", func() bool {
		describe := kmsg.NewPtrShareGroupDescribeRequest()
		describe.GroupIDs = []string{group}
		dresp, err := describe.RequestWith(testCtx(t), admin)
		if err != nil {
			t.Fatal(err)
		}
		g := dresp.Groups[0]
		assigned := 0
		for _, m := range g.Members {
			for _, tp := range m.Assignment.TopicPartitions {
				assigned += len(tp.Partitions)
			}
		}
		if g.ErrorCode != 0 || g.Assignor != "simple" {
			t.Fatalf("ShareGroupDescribe: %+v", g)
		}
		return g.GroupState == "Stable" && len(g.Members) == 2 && assigned == 3
	})
	list := kmsg.NewPtrListGroupsRequest()
	list.TypesFilter = []string{"share"}
	lresp, err := list.RequestWith(testCtx(t), admin)
	if err != nil || len(lresp.Groups) != 1 || lresp.Groups[0].Group != group || lresp.Groups[0].GroupType != "share" {
		t.Errorf("ListGroups of type share: %+v, %v", lresp, err)
	}
	cancel()
	wg.Wait()
	for _, cl := range consumers {
		cl.Close() // acknowledges what it polled last
	}
	mu.Lock()
	for k, c := range got {
		if c != 1 {
			t.Errorf("record %s delivered %d times", k, c)
		}
	}
	mu.Unlock()

	// The start offsets reach the metadata log: every partition at its
	// end, as DescribeShareGroupOffsets (all topics) tells, with no lag.
	waitCond(t, func() bool {
		req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
		req.Version = 1
		req.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{{GroupID: group}}
		resp, err := req.RequestWith(testCtx(t), admin)
		if err != nil || len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 || len(resp.Groups[0].Topics) != 1 {
			return false
		}
		rt := resp.Groups[0].Topics[0]
		tp, _ := b.meta.State().Topic(topic)
		if rt.Topic != topic || rt.TopicID != [16]byte(tp.ID) || len(rt.Partitions) != 3 {
			return false
		}
		for _, p := range rt.Partitions {
			part, err := b.store.openLocked(tp, p.Partition)
			if err != nil || p.ErrorCode != 0 || p.StartOffset != part.log.HighWatermark() || p.Lag != 0 {
				return false
			}
		}
		return true
	})
	b.Close()
	b = startBroker(t, dir)
	admin = newClient(t, b)
	produceAll(t, admin, makeRecords(topic, 30, "after"))
	cl := newClient(t, b, kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	seen := map[string]bool{}
	for len(seen) < 30 && ctx2.Err() == nil {
		cl.PollFetches(ctx2).EachRecord(func(r *kgo.Record) {
			if !strings.HasPrefix(string(r.Value), "after") || seen[string(r.Value)] {
				t.Errorf("after the restart: %s=%s delivered (again)", r.Key, r.Value)
			}
			seen[string(r.Value)] = true
		})
	}
	if len(seen) != 30 {
		t.Fatalf("after the restart: %d of 30 new records", len(seen))
	}
}

// shareConn is one share group member speaking the protocol on its own
// connection.
type shareConn struct {
	t      *testing.T
	nc     net.Conn
	corr   int32
	group  string
	member string
	epoch  int32
}

func newShareConn(t *testing.T, b *Broker, group, member string) *shareConn {
	return &shareConn{t: t, nc: dial(t, b), group: group, member: member}
}

func (c *shareConn) do(req kmsg.Request) kmsg.Response {
	c.t.Helper()
	c.corr++
	resp, err := roundTrip(c.nc, req, c.corr, 30*time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// fetch sends a ShareFetch of the topic's partitions (on the session's first
// request) with acks, at the member's session epoch.
func (c *shareConn) fetch(topicID [16]byte, parts []int32, wait time.Duration, acks map[int32][]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) *kmsg.ShareFetchResponse {
	c.t.Helper()
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &c.group, &c.member, c.epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = int32(wait.Milliseconds()), 1, 1<<20, 500, 500
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = topicID
	for _, p := range parts {
		rp := kmsg.NewShareFetchRequestTopicPartition()
		rp.Partition, rp.AcknowledgementBatches = p, acks[p]
		rt.Partitions = append(rt.Partitions, rp)
	}
	if len(rt.Partitions) > 0 {
		req.Topics = append(req.Topics, rt)
	}
	resp := c.do(req).(*kmsg.ShareFetchResponse)
	if resp.ErrorCode == 0 {
		c.epoch = nextShareEpoch(c.epoch)
	}
	return resp
}

func (c *shareConn) ack(topicID [16]byte, part int32, first, last int64, typ int8) *kmsg.ShareAcknowledgeResponse {
	c.t.Helper()
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &c.group, &c.member, c.epoch
	rt := kmsg.NewShareAcknowledgeRequestTopic()
	rt.TopicID = topicID
	rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
	rp.Partition = part
	rp.AcknowledgementBatches = []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{{FirstOffset: first, LastOffset: last, AcknowledgeTypes: []int8{typ}}}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := c.do(req).(*kmsg.ShareAcknowledgeResponse)
	if resp.ErrorCode == 0 {
		c.epoch = nextShareEpoch(c.epoch)
	}
	return resp
}

// acquired flattens a ShareFetch answer's acquired ranges: offset → delivery
// count.
func acquired(resp *kmsg.ShareFetchResponse) map[int64]int16 {
	out := map[int64]int16{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			for _, r := range p.AcquiredRecords {
				for o := r.FirstOffset; o <= r.LastOffset; o++ {
					out[o] = r.DeliveryCount
				}
			}
		}
	}
	return out
}

// TestShareFetchDelivery drives KIP-932's record states through the
// protocol: acquisition with delivery counts, release and redelivery,
// reject, acknowledging what the member does not hold (INVALID_RECORD_STATE),
// session epochs (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH),
// a lock that expires while another member long-polls, a connection that
// closes with records held, and the delivery limit.
func TestShareFetchDelivery(t *testing.T) {
	b := startBroker(t, "")
	const topic, group = "deliveries", "queue"
	createTopic(t, b, topic, 1, nil)
	admin := newClient(t, b)
	setShareGroupConfig(t, admin, group, cfgShareAutoOffsetReset, "earliest")
	setShareGroupConfig(t, admin, group, cfgShareRecordLockDuration, "1000")
	produceAll(t, admin, makeRecords(topic, 20, "v"))
	tp, _ := b.meta.State().Topic(topic)
	id := [16]byte(tp.ID)

	a := newShareConn(t, b, group, "member-a")
	// The broker's session limit (group.share.max.share.sessions).
	b.shares.mu.Lock()
	b.shares.maxSessions = 2
	b.shares.mu.Unlock()
	var fillers []*shareConn
	for i, want := range []int16{0, 0, kerr.ShareSessionLimitReached.Code} {
		c := newShareConn(t, b, "fillers", fmt.Sprintf("filler-%d", i)) // latest: they take nothing
		fillers = append(fillers, c)
		if r := c.fetch(id, []int32{0}, 0, nil); r.ErrorCode != want {
			t.Fatalf("session %d: %v, want %v", i, kerr.ErrorForCode(r.ErrorCode), kerr.ErrorForCode(want))
		}
	}
	fillers[0].epoch = -1 // closed: the limit counts open sessions
	if r := fillers[0].fetch(id, nil, 0, nil); r.ErrorCode != 0 {
		t.Fatalf("closing a session: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := fillers[2].fetch(id, []int32{0}, 0, nil); r.ErrorCode != 0 {
		t.Fatalf("a session after one closed: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	fillers[1].nc.Close() // its connection's sessions go with it
	waitCond(t, func() bool {
		b.shares.mu.Lock()
		defer b.shares.mu.Unlock()
		return len(b.shares.sessions) == 1
	})
	b.shares.mu.Lock()
	b.shares.maxSessions = shareMaxSessions
	b.shares.mu.Unlock()
	if r := a.ack(id, 0, 0, 0, 1); r.ErrorCode != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("ShareAcknowledge at epoch 0: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	a.epoch = 5
	if r := a.fetch(id, []int32{0}, 0, nil); r.ErrorCode != kerr.ShareSessionNotFound.Code {
		t.Fatalf("ShareFetch of no session: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	a.epoch = 0
	got := acquired(a.fetch(id, []int32{0}, time.Second, nil))
	if len(got) != 20 || got[0] != 1 || got[19] != 1 {
		t.Fatalf("first fetch acquired %v", got)
	}
	// Release 0-4, reject 5, accept 6-19.
	if r := a.ack(id, 0, 0, 4, 2); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("release: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	if r := a.ack(id, 0, 5, 5, 3); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatal("reject refused")
	}
	if r := a.ack(id, 0, 6, 19, 1); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatal("accept refused")
	}
	if r := a.ack(id, 0, 6, 6, 1); r.Topics[0].Partitions[0].ErrorCode != kerr.InvalidRecordState.Code {
		t.Fatalf("accepting a record twice: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	saved := a.epoch
	a.epoch = saved + 7
	if r := a.fetch(id, nil, 0, nil); r.ErrorCode != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("a wrong epoch: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	a.epoch = saved
	got = acquired(a.fetch(id, nil, time.Second, nil))
	if len(got) != 5 || got[0] != 2 || got[4] != 2 {
		t.Fatalf("after the release: acquired %v, want 0-4 at delivery 2", got)
	}

	// Member b long-polls; a's locks on 0-4 expire after 1 s and b gets
	// them (delivery 3).
	bm := newShareConn(t, b, group, "member-b")
	start := time.Now()
	got = acquired(bm.fetch(id, []int32{0}, 10*time.Second, nil))
	if len(got) != 5 || got[0] != 3 {
		t.Fatalf("member b after a's locks expired: %v", got)
	}
	if waited := time.Since(start); waited > 8*time.Second {
		t.Errorf("the expired locks were noticed after %v", waited)
	}
	// b's connection closes holding them: a gets them at once (delivery 4).
	bm.nc.Close()
	got = acquired(a.fetch(id, nil, 10*time.Second, nil))
	if len(got) != 5 || got[0] != 4 {
		t.Fatalf("after member b's connection closed: %v", got)
	}
	// Released once more (delivery 4 → 5 on the next), then the limit:
	// released at 5 deliveries they are archived, and the start moves past.
	if r := a.ack(id, 0, 0, 4, 2); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatal("release refused")
	}
	got = acquired(a.fetch(id, nil, time.Second, nil))
	if len(got) != 5 || got[0] != 5 {
		t.Fatalf("fifth delivery: %v", got)
	}
	if r := a.ack(id, 0, 0, 4, 2); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatal("release refused")
	}
	if got = acquired(a.fetch(id, nil, 0, nil)); len(got) != 0 {
		t.Fatalf("records past the delivery limit delivered again: %v", got)
	}
	b.shares.mu.Lock()
	sp := b.shares.parts[sharePartKey{group, id, 0}]
	start0, end0 := sp.start, sp.end
	b.shares.mu.Unlock()
	if start0 != 20 || end0 != 20 {
		t.Errorf("share-partition start/end %d/%d, want 20/20", start0, end0)
	}
	// The share metrics count all of it: 40 deliveries (20, then 0-4
	// four more times), 15 released, 1 rejected, 14 accepted, 5 archived.
	rec := httptest.NewRecorder()
	b.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`sediment_share_records_acquired_total 40`,
		`sediment_share_acknowledgements_total{type="release"} 15`,
		`sediment_share_acknowledgements_total{type="reject"} 1`,
		`sediment_share_acknowledgements_total{type="accept"} 14`,
		`sediment_share_records_archived_total 5`,
		`sediment_share_sessions 2`,
		`sediment_share_partition_start_offset{group="queue",partition="0",topic="deliveries"} 20`,
		`sediment_share_group_lag{group="queue",partition="0",topic="deliveries"} 0`,
		`sediment_share_partition_in_flight_records{group="queue",partition="0",topic="deliveries"} 0`,
	} {
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Five more records delivered, three accepted: two held, lag 2.
	produceAll(t, admin, makeRecords(topic, 5, "w"))
	c := newShareConn(t, b, group, "member-c")
	resp := c.fetch(id, []int32{0}, time.Second, nil)
	if got := acquired(resp); len(got) != 5 {
		t.Fatalf("new records: %v", got)
	}
	if r := c.ack(id, 0, 20, 22, 1); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatal("accept refused")
	}
	rec = httptest.NewRecorder()
	b.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`sediment_share_partition_start_offset{group="queue",partition="0",topic="deliveries"} 23`,
		`sediment_share_group_lag{group="queue",partition="0",topic="deliveries"} 2`,
		`sediment_share_partition_acquired_records{group="queue",partition="0",topic="deliveries"} 2`,
	} {
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// FuzzShareAcks drives a share-partition with arbitrary acquisitions,
// acknowledgements (any range, any type), lock expiries and releases by two
// members over a log of four 5-record batches: no panic, and its invariants
// hold: start ≤ end ≤ the log end, records in flight lie in [start, end)
// with a delivery count within the limit, an acquired record has a holder,
// and a refused acknowledgement changes nothing.
func FuzzShareAcks(f *testing.F) {
	f.Add([]byte{0, 0, 5, 0, 1, 0, 0, 4, 0, 1, 10, 2, 2, 0, 3, 0, 3, 1, 0, 0})
	f.Add([]byte{0, 1, 31, 0, 1, 1, 0, 19, 0, 0, 0, 0, 2, 0, 3, 0})
	f.Fuzz(func(t *testing.T, ops []byte) { runShareOps(t, ops) })
}

var shareFuzzLog = func() []byte {
	var log []byte
	for base := 0; base < 20; base += 5 {
		b := buildBatch(-1, -1, 0, 5, 3)
		binary.BigEndian.PutUint64(b[0:8], uint64(base))
		log = append(log, b...)
	}
	return log
}()

func runShareOps(t *testing.T, ops []byte) {
	log := shareFuzzLog
	from := func(off int64) []byte { // whole batches from the one holding off
		rest := log
		for len(rest) > 0 {
			h, _ := hotlog.ParseBatchHeader(rest)
			if h.LastOffset() >= off {
				return rest
			}
			rest = rest[h.Size():]
		}
		return nil
	}
	{
		s := &shares{dirty: map[sharePartKey]bool{}, kick: make(chan struct{}, 1)}
		sp := &sharePartition{recs: map[int64]*shareRec{}}
		members := []string{"a", "b"}
		now := time.Unix(1000, 0)
		for len(ops) >= 4 {
			op, m, x, y := ops[0]%4, members[ops[1]%2], int64(int8(ops[2])), int64(ops[3])
			ops = ops[4:]
			switch op {
			case 0:
				sp.acquire(m, from(sp.firstAvailable()), nil, int(x&31)+1, y&1 == 1, time.Second, now)
			case 1:
				before := fmt.Sprint(sp.start, sp.end, len(sp.recs))
				var held []string
				for off, r := range sp.recs {
					held = append(held, fmt.Sprint(off, r.acquired, r.member, r.deliveries))
				}
				if code := sp.ack(m, []shareAckBatch{{x, x + int64(y&15), []int8{int8(y>>4) - 1}}}, true, time.Second, now); code != 0 {
					var after []string
					for off, r := range sp.recs {
						after = append(after, fmt.Sprint(off, r.acquired, r.member, r.deliveries))
					}
					if fmt.Sprint(sp.start, sp.end, len(sp.recs)) != before || len(after) != len(held) {
						t.Fatalf("a refused acknowledgement (%d) changed the share-partition", code)
					}
				}
				s.advanceLocked(sp, now, -1)
			case 2:
				now = now.Add(time.Duration(x&3) * time.Second)
				s.advanceLocked(sp, now, -1)
			case 3:
				sp.release(m)
				s.advanceLocked(sp, now, -1)
			}
			if sp.start > sp.end || sp.end > 20 {
				t.Fatalf("start %d, end %d", sp.start, sp.end)
			}
			for off, r := range sp.recs {
				if off < sp.start || off >= sp.end || r.deliveries < 1 || r.deliveries > shareDeliveryLimit || (r.acquired && r.member == "") {
					t.Fatalf("record %d in flight: %+v (start %d, end %d)", off, *r, sp.start, sp.end)
				}
			}
		}
	}
}

// TestShareFetchV2: KIP-1206's record-limit mode splits a batch at
// MaxRecords; KIP-1222's RENEW keeps records with their holder (v2 with
// IsRenewAck; refused in v1 and without IsRenewAck), and a ShareFetch that
// renews fetches nothing.
func TestShareFetchV2(t *testing.T) {
	b := startBroker(t, "")
	const topic, group = "renewals", "queue2"
	createTopic(t, b, topic, 1, nil)
	admin := newClient(t, b)
	setShareGroupConfig(t, admin, group, cfgShareAutoOffsetReset, "earliest")
	// One batch of 10 records.
	produceAll(t, newClient(t, b, kgo.ProducerLinger(time.Second)), makeRecords(topic, 10, "v"))
	tp, _ := b.meta.State().Topic(topic)
	id := [16]byte(tp.ID)

	a := newShareConn(t, b, group, "member-a")
	fetch := func(c *shareConn, mode int8, maxRecords int32, renew bool, acks []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) *kmsg.ShareFetchResponse {
		t.Helper()
		req := kmsg.NewPtrShareFetchRequest()
		req.Version = 2
		req.GroupID, req.MemberID, req.ShareSessionEpoch = &c.group, &c.member, c.epoch
		req.MaxBytes, req.MaxRecords, req.BatchSize, req.ShareAcquireMode, req.IsRenewAck = 1<<20, maxRecords, maxRecords, mode, renew
		if !renew {
			req.MaxWaitMillis, req.MinBytes = 500, 1
		}
		rt := kmsg.NewShareFetchRequestTopic()
		rt.TopicID = id
		rp := kmsg.NewShareFetchRequestTopicPartition()
		rp.Partition, rp.AcknowledgementBatches = 0, acks
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := c.do(req).(*kmsg.ShareFetchResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("ShareFetch v2: %v", kerr.ErrorForCode(resp.ErrorCode))
		}
		c.epoch = nextShareEpoch(c.epoch)
		return resp
	}
	zero := kmsg.NewPtrShareFetchRequest()
	zero.Version = 2
	zero.GroupID, zero.MemberID, zero.ShareSessionEpoch, zero.MaxBytes, zero.MaxRecords = &a.group, &a.member, 0, 0, 500
	zero.Topics = []kmsg.ShareFetchRequestTopic{{TopicID: id, Partitions: []kmsg.ShareFetchRequestTopicPartition{{Partition: 0}}}}
	if r := a.do(zero).(*kmsg.ShareFetchResponse); r.ErrorCode != 0 || len(acquired(r)) != 0 {
		t.Fatalf("max_bytes 0: %v, acquired %v; want nothing", kerr.ErrorForCode(r.ErrorCode), acquired(r))
	}
	a.epoch = 1 // the session it opened
	got := acquired(fetch(a, 1, 3, false, nil))
	if len(got) != 3 || got[0] != 1 || got[2] != 1 {
		t.Fatalf("record-limit mode, 3 of a 10-record batch: acquired %v", got)
	}
	got = acquired(fetch(a, 0, 3, false, nil))
	if len(got) != 7 || got[3] != 1 || got[9] != 1 {
		t.Fatalf("batch mode after it: acquired %v, want 3-9", got)
	}
	renew := []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{{FirstOffset: 0, LastOffset: 9, AcknowledgeTypes: []int8{4}}}
	if r := fetch(a, 0, 500, false, renew); r.Topics[0].Partitions[0].AcknowledgeErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("RENEW without IsRenewAck: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].AcknowledgeErrorCode))
	}
	r := fetch(a, 0, 0, true, renew)
	if p := r.Topics[0].Partitions[0]; p.AcknowledgeErrorCode != 0 || len(p.AcquiredRecords) != 0 {
		t.Fatalf("renewing fetch: ack %v, acquired %v", kerr.ErrorForCode(p.AcknowledgeErrorCode), p.AcquiredRecords)
	}
	if r := a.ack(id, 0, 0, 9, 4); r.Topics[0].Partitions[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("RENEW in ShareAcknowledge v1: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	// Still member a's: it accepts them all.
	if r := a.ack(id, 0, 0, 9, 1); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("accept after the renewal: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
}

// TestShareGroupAdmin: AlterShareGroupOffsets sets a start the leader
// serves from (also over state it holds), DescribeShareGroupOffsets reads it
// back, changes and deletion are refused while the group has members
// (NON_EMPTY_GROUP), DeleteShareGroupOffsets makes the group start again at
// share.auto.offset.reset, and DeleteGroups removes an empty share group.
func TestShareGroupAdmin(t *testing.T) {
	b := startBroker(t, "")
	const topic, group = "admin-shares", "admin-group"
	createTopic(t, b, topic, 1, nil)
	admin := newClient(t, b)
	produceAll(t, admin, makeRecords(topic, 20, "v"))
	tp, _ := b.meta.State().Topic(topic)
	id := [16]byte(tp.ID)
	alter := func(start int64) int16 {
		t.Helper()
		req := kmsg.NewPtrAlterShareGroupOffsetsRequest()
		req.GroupID = group
		req.Topics = []kmsg.AlterShareGroupOffsetsRequestTopic{{Topic: topic, Partitions: []kmsg.AlterShareGroupOffsetsRequestTopicPartition{{Partition: 0, StartOffset: start}}}}
		resp, err := req.RequestWith(testCtx(t), admin)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode == 0 && resp.Topics[0].Partitions[0].ErrorCode != 0 {
			return resp.Topics[0].Partitions[0].ErrorCode
		}
		return resp.ErrorCode
	}
	describe := func() int64 {
		t.Helper()
		req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
		req.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{{GroupID: group}}
		resp, err := req.RequestWith(testCtx(t), admin)
		if err != nil || resp.Groups[0].ErrorCode != 0 {
			t.Fatalf("DescribeShareGroupOffsets: %v %+v", err, resp)
		}
		if len(resp.Groups[0].Topics) == 0 {
			return -1
		}
		return resp.Groups[0].Topics[0].Partitions[0].StartOffset
	}
	if code := alter(8); code != 0 {
		t.Fatalf("AlterShareGroupOffsets of a new group: %v", kerr.ErrorForCode(code))
	}
	if code := alter(-3); code != kerr.InvalidRequest.Code {
		t.Fatalf("a negative start: %v", kerr.ErrorForCode(code))
	}
	if got := describe(); got != 8 {
		t.Fatalf("DescribeShareGroupOffsets: start %d, want 8", got)
	}
	a := newShareConn(t, b, group, "m")
	got := acquired(a.fetch(id, []int32{0}, time.Second, nil))
	if len(got) != 12 || got[8] != 1 || got[19] != 1 {
		t.Fatalf("after the start was set to 8: acquired %v", got)
	}
	if r := a.ack(id, 0, 8, 19, 2); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatal("release refused")
	}

	// A member: no changes.
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.Version = 1
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = group, "m", []string{topic}
	if resp, err := hb.RequestWith(testCtx(t), admin); err != nil || resp.ErrorCode != 0 || resp.Assignment == nil || len(resp.Assignment.TopicPartitions) != 1 {
		t.Fatalf("join: %v %+v", err, resp)
	}
	if code := alter(15); code != kerr.NonEmptyGroup.Code {
		t.Fatalf("AlterShareGroupOffsets with a member: %v", kerr.ErrorForCode(code))
	}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{group}
	if resp, err := del.RequestWith(testCtx(t), admin); err != nil || resp.Groups[0].ErrorCode != kerr.NonEmptyGroup.Code {
		t.Fatalf("DeleteGroups with a member: %v %+v", err, resp)
	}
	hb.MemberEpoch = -1
	if resp, err := hb.RequestWith(testCtx(t), admin); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("leave: %v %+v", err, resp)
	}

	// Set to 15 over the state the leader holds: it serves from 15.
	if code := alter(15); code != 0 {
		t.Fatalf("AlterShareGroupOffsets: %v", kerr.ErrorForCode(code))
	}
	got = acquired(a.fetch(id, nil, time.Second, nil))
	if len(got) != 5 || got[15] != 1 {
		t.Fatalf("after the start was set to 15: acquired %v", got)
	}
	if r := a.ack(id, 0, 15, 19, 1); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatal("accept refused")
	}
	waitCond(t, func() bool { return describe() == 20 })

	// Deleted offsets: the group starts at share.auto.offset.reset (latest).
	dreq := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
	dreq.GroupID, dreq.Topics = group, []kmsg.DeleteShareGroupOffsetsRequestTopic{{Topic: topic}, {Topic: "no-such-topic"}}
	dresp, err := dreq.RequestWith(testCtx(t), admin)
	if err != nil || dresp.ErrorCode != 0 || dresp.Topics[0].ErrorCode != 0 || dresp.Topics[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("DeleteShareGroupOffsets: %v %+v", err, dresp)
	}
	if got := describe(); got != -1 {
		t.Fatalf("after DeleteShareGroupOffsets: start %d", got)
	}
	if got = acquired(a.fetch(id, nil, 0, nil)); len(got) != 0 {
		t.Fatalf("latest after the deletion: acquired %v", got)
	}
	produceAll(t, admin, makeRecords(topic, 1, "new"))
	if got = acquired(a.fetch(id, nil, 5*time.Second, nil)); len(got) != 1 || got[20] != 1 {
		t.Fatalf("the next record: acquired %v", got)
	}
	if r := a.ack(id, 0, 20, 20, 1); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatal("accept refused")
	}
	waitCond(t, func() bool { return describe() == 21 })

	// An empty share group is deleted with its offsets.
	if resp, err := del.RequestWith(testCtx(t), admin); err != nil || resp.Groups[0].ErrorCode != 0 {
		t.Fatalf("DeleteGroups: %v %+v", err, resp)
	}
	sd := kmsg.NewPtrShareGroupDescribeRequest()
	sd.GroupIDs = []string{group}
	if resp, err := sd.RequestWith(testCtx(t), admin); err != nil || resp.Groups[0].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("ShareGroupDescribe after DeleteGroups: %v %+v", err, resp)
	}
	if resp, err := del.RequestWith(testCtx(t), admin); err != nil || resp.Groups[0].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("DeleteGroups again: %v %+v", err, resp)
	}
}

// shareValues maps each acquired offset of a ShareFetch answer to its
// record's value, read from the batches returned (uncompressed).
func shareValues(t *testing.T, resp *kmsg.ShareFetchResponse) map[int64]string {
	t.Helper()
	got := acquired(resp)
	out := map[int64]string{}
	for _, tt := range resp.Topics {
		for _, p := range tt.Partitions {
			data := p.Records
			for len(data) > 0 {
				var rb kmsg.RecordBatch
				if err := rb.ReadFrom(data); err != nil {
					t.Fatalf("batch: %v", err)
				}
				data = data[12+rb.Length:]
				if rb.Attributes&0x07 != 0 {
					t.Fatal("a compressed batch")
				}
				recs := rb.Records
				for i := int32(0); i < rb.NumRecords; i++ {
					l, n := binary.Varint(recs)
					var r kmsg.Record
					if err := r.ReadFrom(recs[:int64(n)+l]); err != nil {
						t.Fatalf("record: %v", err)
					}
					recs = recs[int64(n)+l:]
					if off := rb.FirstOffset + int64(r.OffsetDelta); got[off] > 0 {
						out[off] = string(r.Value)
					}
				}
			}
		}
	}
	if len(out) != len(got) {
		t.Fatalf("acquired %v, records for %v", got, out)
	}
	return out
}

// TestShareReadCommitted: share.isolation.level=read_committed delivers
// only committed records, up to the last stable offset: a committed
// transaction's records and plain ones, never an aborted transaction's
// (interleaved with plain records or not), nothing of an open one until it
// commits; read_uncommitted (the default) delivers them all.
func TestShareReadCommitted(t *testing.T) {
	b := startBroker(t, "")
	const topic = "txns"
	createTopic(t, b, topic, 1, nil)
	admin := newClient(t, b, kgo.ProducerBatchCompression(kgo.NoCompression()))
	for _, g := range []string{"rc", "ru"} {
		setShareGroupConfig(t, admin, g, cfgShareAutoOffsetReset, "earliest")
	}
	setShareGroupConfig(t, admin, "rc", cfgShareIsolationLevel, "read_committed")
	if err := b.alterGroupConfigs(testCtx(t), "x", false, []metadata.ConfigOp{{Key: cfgShareIsolationLevel, Value: "serializable"}}, true); err == nil {
		t.Error("share.isolation.level=serializable accepted")
	}
	tp, _ := b.meta.State().Topic(topic)
	id := [16]byte(tp.ID)
	plain := func(v string) {
		t.Helper()
		if err := admin.ProduceSync(testCtx(t), rec(topic, 0, v)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	pa := txnClient(t, b, "txn-a", kgo.ProducerBatchCompression(kgo.NoCompression()))
	pb := txnClient(t, b, "txn-b", kgo.ProducerBatchCompression(kgo.NoCompression()))
	p, err := b.store.partition(b.meta.State(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	// EndTxn answers before its markers are written: wait for them.
	settled := func() { waitCond(t, func() bool { return p.lastStableOffset() == p.log.HighWatermark() }) }
	produceTxn(t, pa, topic, 0, true, "c1", "c2")
	produceTxn(t, pa, topic, 0, false, "a1", "a2", "a3")
	plain("p1")
	settled()
	if err := pb.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := pb.ProduceSync(testCtx(t), rec(topic, 0, "open1")).FirstErr(); err != nil { // left open
		t.Fatal(err)
	}

	rc, ru := newShareConn(t, b, "rc", "m"), newShareConn(t, b, "ru", "m")
	// want checks the values delivered, in offset order (a marker is
	// written after EndTxn answers, so a plain record produced next may
	// come before it), and accepts them.
	want := func(c *shareConn, w string) {
		t.Helper()
		got := shareValues(t, c.fetch(id, []int32{0}, time.Second, nil))
		offs := slices.Sorted(maps.Keys(got))
		var vals []string
		for _, off := range offs {
			vals = append(vals, got[off])
		}
		if fmt.Sprint(vals) != w {
			t.Fatalf("group %s got %v, want %s", c.group, got, w)
		}
		for _, off := range offs {
			if r := c.ack(id, 0, off, off, 1); r.Topics[0].Partitions[0].ErrorCode != 0 {
				t.Fatalf("accept %d: %v", off, kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
			}
		}
	}
	want(rc, "[c1 c2 p1]")
	want(ru, "[c1 c2 a1 a2 a3 p1 open1]")
	// Nothing more below the last stable offset (open1's): a short poll
	// ends empty, and the aborted records are done (the start moved past
	// them).
	if got := acquired(rc.fetch(id, nil, 50*time.Millisecond, nil)); len(got) != 0 {
		t.Fatalf("read_committed past the open transaction: %v", got)
	}
	b.shares.mu.Lock()
	start := b.shares.parts[sharePartKey{"rc", id, 0}].start
	b.shares.mu.Unlock()
	if lso := p.lastStableOffset(); start != lso || start < 7 {
		t.Errorf("read_committed share-partition start %d, want the last stable offset %d", start, lso)
	}

	// The open transaction commits: its record is delivered (a waiting
	// fetch wakes for the marker).
	done := make(chan map[int64]int16, 1)
	go func() { done <- acquired(rc.fetch(id, nil, 10*time.Second, nil)) }()
	if err := pb.EndTransaction(testCtx(t), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if len(got) != 1 || got[start] != 1 {
		t.Fatalf("after the commit: %v, want %d (open1)", got, start)
	}
	if r := rc.ack(id, 0, start, start, 1); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatal("accept refused")
	}

	// An aborted transaction interleaved with plain records in the same
	// read: only the plain ones.
	if err := pa.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := pa.ProduceSync(testCtx(t), rec(topic, 0, "a4")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	plain("p2")
	if err := pa.ProduceSync(testCtx(t), rec(topic, 0, "a5")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := pa.EndTransaction(testCtx(t), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	plain("p3")
	settled()
	want(rc, "[p2 p3]")
	want(ru, "[a4 p2 a5 p3]")
}

// TestShareResetByDuration: share.auto.offset.reset=by_duration:<d>
// (KIP-1106) starts a new share-partition at the first record no older than
// d; with none that recent, at the end (latest). Bad durations are refused.
func TestShareResetByDuration(t *testing.T) {
	b := startBroker(t, "")
	const topic = "history"
	createTopic(t, b, topic, 1, nil)
	admin := newClient(t, b)
	old := time.Now().Add(-3 * time.Hour)
	var recs []*kgo.Record
	for i := 0; i < 5; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte("old"), Timestamp: old.Add(time.Duration(i) * time.Minute)})
	}
	produceAll(t, admin, recs)
	recs = recs[:0]
	for i := 0; i < 3; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte("new")})
	}
	produceAll(t, admin, recs)
	tp, _ := b.meta.State().Topic(topic)
	id := [16]byte(tp.ID)

	setShareGroupConfig(t, admin, "last-hour", cfgShareAutoOffsetReset, "by_duration:PT1H")
	setShareGroupConfig(t, admin, "last-day", cfgShareAutoOffsetReset, "BY_DURATION:P1D")
	setShareGroupConfig(t, admin, "last-second", cfgShareAutoOffsetReset, "by_duration:PT0.001S")
	for group, want := range map[string]string{"last-hour": "[5 6 7]", "last-day": "[0 1 2 3 4 5 6 7]", "last-second": "[]"} {
		got := acquired(newShareConn(t, b, group, "m").fetch(id, []int32{0}, 0, nil))
		var offs []int64
		for off := range got {
			offs = append(offs, off)
		}
		slices.Sort(offs)
		if fmt.Sprint(offs) != want {
			t.Errorf("group %s acquired %v, want %s", group, offs, want)
		}
	}
	for _, bad := range []string{"by_duration:", "by_duration:-PT1H", "by_duration:P1H", "by_duration:PT", "by_duration:PT1.5H", "by_duration:PT1M1H", "by_duration:1h", "oldest"} {
		if err := b.alterGroupConfigs(testCtx(t), "x", false, []metadata.ConfigOp{{Key: cfgShareAutoOffsetReset, Value: bad}}, true); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestParseByDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"by_duration:PT1H":          time.Hour,
		"by_duration:P2D":           48 * time.Hour,
		"by_duration:P1DT2H30M1.5S": 26*time.Hour + 30*time.Minute + 1500*time.Millisecond,
		"by_duration:pt15m":         15 * time.Minute,
		"by_duration:PT0S":          0,
		"by_duration:+PT10S":        10 * time.Second,
	} {
		if got, ok := parseByDuration(in); !ok || got != want {
			t.Errorf("%s: %v %v, want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "latest", "by_duration:P", "by_duration:T1H", "by_duration:PT1H1H", "by_duration:P1S",
		"by_duration:PT99999999999999999H", "by_duration:PT1.2.3S", "by_duration:PT.S", "by_duration:P1DT"} {
		if d, ok := parseByDuration(in); ok {
			t.Errorf("%q parsed as %v", in, d)
		}
	}
}

// TestShareStateSurvivesRestart: a share-partition's state is in the
// metadata log before an acknowledgement is answered, records acknowledged
// out of order included, with delivery counts: after a restart (a new
// leader) only the records in flight are delivered again, each counted on.
func TestShareStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	const group = "jobs"
	_, id := newShareQueue(t, b, "durable", group, 10)

	a := newShareConn(t, b, group, "a")
	if got := acquired(a.fetch(id, []int32{0}, time.Second, nil)); len(got) != 10 {
		t.Fatalf("first delivery: %v", got)
	}
	for _, ack := range []struct {
		first, last int64
		typ         int8
	}{{0, 2, 1}, {5, 6, 1}, {3, 3, 2}, {8, 8, 3}} { // accept, accept, release, reject
		if r := a.ack(id, 0, ack.first, ack.last, ack.typ); r.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("ack %v: %v", ack, kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
		}
	}
	// 3 is available again: delivered a second time, then released.
	if got := acquired(a.fetch(id, nil, time.Second, nil)); fmt.Sprint(got) != "map[3:2]" {
		t.Fatalf("redelivery: %v", got)
	}
	if r := a.ack(id, 0, 3, 3, 2); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatal("release refused")
	}
	// Answered: so it is in the metadata log, whatever the broker does next.
	stored := b.meta.State().ShareState(group)[sharePartKey{group, id, 0}.stateKey()]
	if want := "3;10;3-3@2,4-4@1,7-7@1,9-9@1"; stored != want {
		t.Errorf("stored state %q, want %q", stored, want)
	}
	a.nc.Close()
	b.Close()

	b = startBroker(t, dir)
	c := newShareConn(t, b, group, "c")
	got := acquired(c.fetch(id, []int32{0}, time.Second, nil))
	if fmt.Sprint(got) != "map[3:3 4:2 7:2 9:2]" {
		t.Fatalf("after the restart: acquired %v, want 3 (3rd delivery), 4, 7, 9 (2nd): no accepted or rejected record again", got)
	}
	// DescribeShareGroupOffsets: the start, and the lag counts only what
	// is not done.
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(testCtx(t), newClient(t, b))
	if err != nil {
		t.Fatal(err)
	}
	rp := resp.Groups[0].Topics[0].Partitions[0]
	if rp.StartOffset != 3 || rp.Lag != 4 {
		t.Errorf("described start %d lag %d, want 3 and 4", rp.StartOffset, rp.Lag)
	}
}

func TestShareStateEncoding(t *testing.T) {
	sp := &sharePartition{start: 5, end: 12, recs: map[int64]*shareRec{
		5: {deliveries: 1}, 6: {deliveries: 1, acquired: true}, 7: {deliveries: 2}, 10: {deliveries: 2}, 11: {deliveries: 2}}}
	v := sp.encodeState()
	if v != "5;12;5-6@1,7-7@2,10-11@2" {
		t.Fatalf("encoded %q", v)
	}
	st, ok := parseShareState(v)
	if !ok || st.start != 5 || st.end != 12 || st.inFlight() != 5 || fmt.Sprint(st.runs) != "[{5 6 1} {7 7 2} {10 11 2}]" {
		t.Fatalf("parsed %+v %v", st, ok)
	}
	for in, want := range map[string]string{
		"42":                    "{42 42 []}",
		"42;50":                 "{42 50 []}",
		"42;41":                 "{42 42 []}", // end before start: the start only
		"42;50;43-44@1":         "{42 50 [{43 44 1}]}",
		"42;50;43-44@0":         "{42 42 []}", // no delivery count 0
		"42;50;45-44@1":         "{42 42 []}",
		"42;50;43-50@1":         "{42 42 []}", // past the end
		"42;50;44-45@1,43-43@1": "{42 42 []}", // out of order
		"42;99999999999;":       "{42 42 []}", // window too large
	} {
		st, ok := parseShareState(in)
		if !ok || fmt.Sprint(st) != want {
			t.Errorf("%q: %v %v, want %s", in, st, ok, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "x;5"} {
		if _, ok := parseShareState(in); ok {
			t.Errorf("%q parsed", in)
		}
	}
	// Too fragmented for one value: the start only.
	big := &sharePartition{start: 0, end: 40000, recs: map[int64]*shareRec{}}
	for off := int64(0); off < 40000; off += 2 {
		big.recs[off] = &shareRec{deliveries: 1}
	}
	if v := big.encodeState(); v != "0" {
		t.Errorf("a fragmented state encoded to %d bytes", len(v))
	}
}

// FuzzShareState: any stored value reads back without a panic, with runs
// inside [start, end), in order, within the window bound; a state encoded
// from what was read reads back the same.
func FuzzShareState(f *testing.F) {
	for _, s := range []string{"0", "5;12;5-6@1,7-7@2,10-11@2", "3;10;3-3@2,4-4@1", "1;2;", "9;9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		st, ok := parseShareState(v)
		if !ok {
			return
		}
		if st.end < st.start || st.end-st.start > shareStateMaxWindow {
			t.Fatalf("%q: window %d-%d", v, st.start, st.end)
		}
		sp := &sharePartition{start: st.start, end: st.end, recs: map[int64]*shareRec{}}
		next := st.start
		for _, r := range st.runs {
			if r.first < next || r.last < r.first || r.last >= st.end || r.deliveries < 1 {
				t.Fatalf("%q: run %+v", v, r)
			}
			next = r.last + 1
			for off := r.first; off <= r.last; off++ {
				sp.recs[off] = &shareRec{deliveries: r.deliveries}
			}
		}
		again, ok := parseShareState(sp.encodeState())
		if !ok || again.start != st.start || (len(again.runs) > 0 && again.inFlight() != st.inFlight()) {
			t.Fatalf("%q: round trip %+v, read %+v", v, again, st)
		}
	})
}

// TestShareAckLostWithLeadership: an acknowledgement applied by a leader
// that stops leading the partition before its state is written is not
// answered as done: NOT_LEADER_OR_FOLLOWER (the new leader's state lacks
// it, as Kafka's share coordinator refuses a fenced leader's write).
func TestShareAckLostWithLeadership(t *testing.T) {
	b := startBroker(t, "")
	const group = "g"
	_, id := newShareQueue(t, b, "moving", group, 3)
	if got := acquired(newShareConn(t, b, group, "a").fetch(id, []int32{0}, time.Second, nil)); len(got) != 3 {
		t.Fatalf("acquired %v", got)
	}
	p, err := b.store.partitionByID(b.meta.State(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	key := shareTP{id, 0}
	for i, moved := range []bool{false, true} {
		code, w := b.shares.acknowledge(testCtx(t), b.meta.State(), group, "a", key, []shareAckBatch{{int64(i), int64(i), []int8{1}}}, false)
		if code != 0 || w == nil {
			t.Fatalf("acknowledge %d: code %d, write %v", i, code, w)
		}
		if moved {
			// Another broker leads now, in a newer epoch; as the last
			// version possible, so no later metadata puts it back.
			topic, _ := b.meta.State().TopicByID(metadata.UUID(id))
			mp := *topic.Partitions[0]
			mp.Leader, mp.LeaderEpoch = b.cfg.NodeID+100, mp.LeaderEpoch+1
			p.applyAssignment(b.cfg.NodeID, &mp, math.MaxUint64)
		}
		lost := b.shares.settle(testCtx(t), map[shareTP]*shareAckWrite{key: w})
		if want := map[bool]int16{false: 0, true: kerr.NotLeaderForPartition.Code}[moved]; lost[key] != want {
			t.Fatalf("leadership moved %v: lost %v, want code %d", moved, lost, want)
		}
	}
}

// TestShareAckNotDurableWithoutQuorum: an acknowledgement whose state the
// metadata log does not take in time (the quorum is gone) is answered
// REQUEST_TIMED_OUT, not as done: it was answered without error after the
// wait, and a leader stopped before the quorum came back lost it, so
// accepted records came again and were accepted twice (a share group
// review: 102 of them).
func TestShareAckNotDurableWithoutQuorum(t *testing.T) {
	brokers := startPair(t, func(c *Config) {
		c.Listeners = []Listener{{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext}}
		c.ControlledShutdownTimeout = time.Second
	})
	const group = "g"
	_, id := newShareQueue(t, brokers[0], "acked", group, 3)
	var lead, other *Broker
	testutil.WaitFor(t, 20*time.Second, "a leader of acked-0", func() bool {
		for i, b := range brokers {
			if p, err := b.store.partitionByID(b.meta.State(), id, 0); err == nil && p.isLeader(-1) {
				lead, other = b, brokers[1-i]
				return true
			}
		}
		return false
	})
	if got := acquired(newShareConn(t, lead, group, "a").fetch(id, []int32{0}, time.Second, nil)); len(got) != 3 {
		t.Fatalf("acquired %v", got)
	}
	other.Close() // one voter of two: no quorum
	key := shareTP{id, 0}
	code, w := lead.shares.acknowledge(testCtx(t), lead.meta.State(), group, "a", key, []shareAckBatch{{0, 2, []int8{1}}}, false)
	if code != 0 || w == nil {
		t.Fatalf("acknowledge: code %d, write %v", code, w)
	}
	if lost := lead.shares.settle(testCtx(t), map[shareTP]*shareAckWrite{key: w}); lost[key] != kerr.RequestTimedOut.Code {
		t.Fatalf("settled without a quorum: %v, want REQUEST_TIMED_OUT", lost)
	}
}

// TestShareGroupDeleteAfterCoordinatorLoad: a coordinator that has just
// loaded a share group with state (a failover, a restart) knows none of its
// members, which live in memory only, until they heartbeat again: within a
// few heartbeat intervals of the load it answers DeleteGroups (and the
// offsets changes) COORDINATOR_LOAD_IN_PROGRESS, which admin clients retry;
// a member back is NON_EMPTY_GROUP; once it has left and the window has
// passed the group is deleted. It
// answered NONE and wiped a group whose consumers were running, which then
// read everything again (a share group review).
func TestShareGroupDeleteAfterCoordinatorLoad(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	const topic, group = "restarted", "survivors"
	_, id := newShareQueue(t, b, topic, group, 5)
	c := newShareConn(t, b, group, "m")
	if got := acquired(c.fetch(id, []int32{0}, time.Second, nil)); len(got) != 5 {
		t.Fatalf("acquired %v", got)
	}
	if r := c.ack(id, 0, 0, 4, 1); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatal("accept refused")
	}
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.Version = 1
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = group, "m", []string{topic}
	if resp, err := hb.RequestWith(testCtx(t), newClient(t, b)); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("join: %v %+v", err, resp)
	}
	b.Close()
	b = startBroker(t, dir)
	waitCond(t, func() bool { b.groups.ensure(group); return b.groups.c.Loaded(b.groups.partitionFor(group)) })
	nc := dial(t, b)
	corr := int32(0)
	deleteGroup := func() int16 {
		t.Helper()
		corr++
		del := kmsg.NewPtrDeleteGroupsRequest()
		del.Version, del.Groups = 2, []string{group}
		return rawRequest(t, nc, del, corr).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode
	}
	if code := deleteGroup(); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("DeleteGroups right after the coordinator loaded the group: %v, want COORDINATOR_LOAD_IN_PROGRESS", kerr.ErrorForCode(code))
	}
	admin := newClient(t, b)
	hb.MemberID, hb.MemberEpoch = "m2", 0
	if resp, err := hb.RequestWith(testCtx(t), admin); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("join: %v %+v", err, resp)
	}
	if code := deleteGroup(); code != kerr.NonEmptyGroup.Code {
		t.Fatalf("DeleteGroups with a member back: %v, want NON_EMPTY_GROUP", kerr.ErrorForCode(code))
	}
	hb.MemberEpoch = -1
	if resp, err := hb.RequestWith(testCtx(t), admin); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("leave: %v %+v", err, resp)
	}
	// Three heartbeat intervals (15 s) after the load, an empty group is
	// deleted.
	testutil.WaitFor(t, 30*time.Second, "DeleteGroups to delete the empty group", func() bool { return deleteGroup() == 0 })
	if len(b.meta.State().ShareState(group)) != 0 {
		t.Fatal("the group's state is still there")
	}
}

// TestShareNewPartitionsStartAtZero: partitions added to a topic a share
// group already consumes start at offset 0, as Kafka's (KAFKA-20742), not at
// share.auto.offset.reset (latest here): the records produced to them
// before a member first fetched there were skipped (a share group review:
// 904 of 2 000 never delivered). The topic's first partition keeps latest.
func TestShareNewPartitionsStartAtZero(t *testing.T) {
	b := startBroker(t, "")
	const topic, group = "growing", "latest-group"
	createTopic(t, b, topic, 1, nil)
	admin := newClient(t, b)
	produceAll(t, admin, makeRecords(topic, 3, "old")) // before the group: latest skips them
	tp, _ := b.meta.State().Topic(topic)
	id := [16]byte(tp.ID)
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.Version = 1
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = group, "m", []string{topic}
	heartbeat := func() *kmsg.ShareGroupHeartbeatResponse {
		t.Helper()
		resp, err := hb.RequestWith(testCtx(t), admin)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("heartbeat: %v %+v", err, resp)
		}
		hb.MemberEpoch = resp.MemberEpoch
		return resp
	}
	heartbeat()
	c := newShareConn(t, b, group, "m")
	if got := acquired(c.fetch(id, []int32{0}, 0, nil)); len(got) != 0 {
		t.Fatalf("latest on the first partition: acquired %v", got)
	}
	if rs, err := kadm.NewClient(admin).CreatePartitions(testCtx(t), 1, topic); err != nil || rs[topic].Err != nil {
		t.Fatalf("add a partition: %v %v", err, rs)
	}
	waitCond(t, func() bool { tp, _ := b.meta.State().Topic(topic); return len(tp.Partitions) == 2 })
	manual := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := manual.ProduceSync(testCtx(t), &kgo.Record{Topic: topic, Partition: 1, Value: []byte("early")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if resp := heartbeat(); resp.Assignment == nil || len(resp.Assignment.TopicPartitions) != 1 || len(resp.Assignment.TopicPartitions[0].Partitions) != 2 {
		t.Fatalf("assignment after the topic grew: %+v", resp.Assignment)
	}
	if got := acquired(c.fetch(id, []int32{1}, time.Second, nil)); len(got) != 1 || got[0] != 1 {
		t.Fatalf("the new partition: acquired %v, want its first record", got)
	}
}

// TestDeleteShareGroupOffsetsUnknownGroup: DeleteShareGroupOffsets of a
// group that does not exist is GROUP_ID_NOT_FOUND, as Kafka answers (it
// answered success for each topic: a share group review).
func TestDeleteShareGroupOffsetsUnknownGroup(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "t", 1, nil)
	admin := newClient(t, b)
	req := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
	req.GroupID, req.Topics = "no-such-group", []kmsg.DeleteShareGroupOffsetsRequestTopic{{Topic: "t"}}
	resp, err := req.RequestWith(testCtx(t), admin)
	if err != nil || resp.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("DeleteShareGroupOffsets of an unknown group: %v %+v, want GROUP_ID_NOT_FOUND", err, resp)
	}
}

// TestShareStateForgottenWithTopic: deleting a topic deletes the state every
// share group kept for it, and a group left without state is no longer
// listed; it stayed for ever (a share group review).
func TestShareStateForgottenWithTopic(t *testing.T) {
	b := startBroker(t, "")
	const group = "short-lived"
	admin, id := newShareQueue(t, b, "doomed", group, 3)
	c := newShareConn(t, b, group, "m")
	if got := acquired(c.fetch(id, []int32{0}, time.Second, nil)); len(got) != 3 {
		t.Fatalf("acquired %v", got)
	}
	waitCond(t, func() bool { return len(b.meta.State().ShareState(group)) == 1 })
	if _, err := kadm.NewClient(admin).DeleteTopics(testCtx(t), "doomed"); err != nil {
		t.Fatal(err)
	}
	if st := b.meta.State().ShareState(group); len(st) != 0 {
		t.Fatalf("share state after the topic's deletion: %v", st)
	}
	if slices.Contains(b.meta.State().ShareGroups(), group) {
		t.Fatal("the group is still listed")
	}
}
