package broker

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// TestGroupBadInput sends the group requests a broken or confused client
// might, over a real connection, and checks the Kafka error codes clients
// expect: a join with an unknown or empty protocol type, commits from a
// stale generation and from an unknown member, a SyncGroup whose
// assignment names a topic that does not exist (opaque to the coordinator,
// as in Kafka: the sync succeeds and commits to that topic fail), and the
// KIP-848 equivalents.
func TestGroupBadInput(t *testing.T) {
	b := groupBroker(t, "")
	createTopic(t, b, "real", 2, nil)
	v := kversion.Stable()
	v.SetMaxKeyVersion(8, 8) // OffsetCommit by topic name
	cl := newClient(t, b, kgo.MaxVersions(v))
	ctx := testCtx(t)

	join := func(group, memberID, protocolType string) *kmsg.JoinGroupResponse {
		t.Helper()
		req := kmsg.NewPtrJoinGroupRequest()
		req.Version = 9
		req.Group = group
		req.MemberID = memberID
		req.SessionTimeoutMillis = 10000
		req.RebalanceTimeoutMillis = 10000
		req.ProtocolType = protocolType
		md := kmsg.NewConsumerMemberMetadata()
		md.Topics = []string{"real"}
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: md.AppendTo(nil)}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	code := func(c int16) string {
		if c == 0 {
			return "NONE"
		}
		return kerr.ErrorForCode(c).Error()
	}

	// An empty protocol type is refused.
	if r := join("g-bad", "", ""); r.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("join with an empty protocol type: %s", code(r.ErrorCode))
	}
	// A consumer group forms...
	r := join("g-bad", "", "consumer")
	if r.ErrorCode != kerr.MemberIDRequired.Code {
		t.Fatalf("first join: %s", code(r.ErrorCode))
	}
	member := r.MemberID
	r = join("g-bad", member, "consumer")
	if r.ErrorCode != 0 || r.LeaderID != member {
		t.Fatalf("second join: %s leader %q", code(r.ErrorCode), r.LeaderID)
	}
	gen := r.Generation
	// ...and a member of an unknown protocol type cannot join it.
	if r := join("g-bad", "", "not-a-known-type"); r.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("join with an unknown protocol type: %s", code(r.ErrorCode))
	}

	// SyncGroup: the leader assigns a topic that does not exist.
	a := kmsg.NewConsumerMemberAssignment()
	a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "no-such-topic", Partitions: []int32{0}}}
	sreq := kmsg.NewPtrSyncGroupRequest()
	sreq.Version = 5
	sreq.Group, sreq.MemberID, sreq.Generation = "g-bad", member, gen
	pt, pn := "consumer", "range"
	sreq.ProtocolType, sreq.Protocol = &pt, &pn
	sreq.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: member, MemberAssignment: a.AppendTo(nil)}}
	sresp, err := sreq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if sresp.ErrorCode != 0 || string(sresp.MemberAssignment) != string(a.AppendTo(nil)) {
		t.Fatalf("sync with an unknown topic: %s", code(sresp.ErrorCode))
	}

	commit := func(memberID string, generation int32, topic string) int16 {
		t.Helper()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version = 8
		req.Group, req.MemberID, req.Generation = "g-bad", memberID, generation
		req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	for _, tc := range []struct {
		name     string
		member   string
		gen      int32
		topic    string
		expected int16
	}{
		{"current generation", member, gen, "real", 0},
		{"stale generation", member, gen - 1, "real", kerr.IllegalGeneration.Code},
		{"future generation", member, gen + 1, "real", kerr.IllegalGeneration.Code},
		{"unknown member", "who-" + member, gen, "real", kerr.UnknownMemberID.Code},
		{"no member, generation -1, non-empty group", "", -1, "real", kerr.UnknownMemberID.Code},
		{"unknown topic", member, gen, "no-such-topic", kerr.UnknownTopicOrPartition.Code},
	} {
		if got := commit(tc.member, tc.gen, tc.topic); got != tc.expected {
			t.Errorf("commit, %s: %s, want %s", tc.name, code(got), code(tc.expected))
		}
	}

	// A KIP-848 heartbeat past its join (epoch > 0) to the live classic
	// group names a consumer group that does not exist. (Joining, epoch 0,
	// upgrades the group online: TestConsumerGroupMigration.)
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Version = 1
	hb.Group, hb.MemberID, hb.MemberEpoch = "g-bad", "m848", 3
	hb.RebalanceTimeoutMillis = 10000
	hb.SubscribedTopicNames = []string{"real"}
	hb.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	hresp, err := hb.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if hresp.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("KIP-848 heartbeat at epoch 3 to a classic group: %s", code(hresp.ErrorCode))
	}
	hb.MemberEpoch = 0
	// KIP-848: a subscription to a topic that does not exist gets an empty
	// assignment; bad epochs and assignors get their codes.
	hb.Group = "g848-bad"
	hb.SubscribedTopicNames = []string{"no-such-topic"}
	if hresp, err = hb.RequestWith(ctx, cl); err != nil || hresp.ErrorCode != 0 || hresp.Assignment == nil || len(hresp.Assignment.Topics) != 0 {
		t.Fatalf("KIP-848 join on an unknown topic: %v %+v", err, hresp)
	}
	for _, tc := range []struct {
		name     string
		mod      func(r *kmsg.ConsumerGroupHeartbeatRequest)
		expected int16
	}{
		{"future epoch", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = 99 }, kerr.FencedMemberEpoch.Code},
		{"unknown member", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID, r.MemberEpoch = "nobody", 1 }, kerr.UnknownMemberID.Code},
		{"unknown assignor", func(r *kmsg.ConsumerGroupHeartbeatRequest) { s := "sticky"; r.ServerAssignor = &s }, kerr.UnsupportedAssignor.Code},
		{"bad regex", func(r *kmsg.ConsumerGroupHeartbeatRequest) { s := "(["; r.SubscribedTopicRegex = &s }, kerr.InvalidRegularExpression.Code},
		{"no member id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "" }, kerr.InvalidRequest.Code},
	} {
		req := *hb
		tc.mod(&req)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode != tc.expected {
			t.Errorf("KIP-848 %s: %s, want %s", tc.name, code(resp.ErrorCode), code(tc.expected))
		}
	}
}

// TestConsumerGroupAPIVersions sends ConsumerGroupHeartbeat and
// ConsumerGroupDescribe at every advertised version over a raw connection:
// v0 joins get a member id from the coordinator, v1 joins keep their own.
func TestConsumerGroupAPIVersions(t *testing.T) {
	b := groupBroker(t, "")
	createTopic(t, b, "cgv", 2, nil)
	// FindCoordinator creates __consumer_offsets and loads the partition.
	if _, err := kadm.NewClient(newClient(t, b)).FetchOffsets(testCtx(t), "cgv-group"); err != nil {
		t.Fatal(err)
	}
	nc := dial(t, b)
	defer nc.Close()
	corr := int32(0)
	for v := int16(0); v <= 1; v++ {
		hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		hb.Version = v
		hb.Group = "cgv-group"
		if v == 1 {
			hb.MemberID = "client-made-id"
		}
		hb.RebalanceTimeoutMillis = 10000
		hb.SubscribedTopicNames = []string{"cgv"}
		hb.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		var resp *kmsg.ConsumerGroupHeartbeatResponse
		waitCond(t, func() bool {
			corr++
			resp = rawRequest(t, nc, hb, corr).(*kmsg.ConsumerGroupHeartbeatResponse)
			return resp.ErrorCode != kerr.CoordinatorLoadInProgress.Code && resp.ErrorCode != kerr.NotCoordinator.Code
		})
		if resp.ErrorCode != 0 || resp.MemberID == nil || *resp.MemberID == "" || resp.MemberEpoch <= 0 || resp.Assignment == nil {
			t.Fatalf("v%d join: %+v", v, resp)
		}
		if v == 1 && *resp.MemberID != "client-made-id" {
			t.Fatalf("v1 member id %q", *resp.MemberID)
		}
		d := kmsg.NewPtrConsumerGroupDescribeRequest()
		d.Version = v
		d.Groups = []string{"cgv-group"}
		corr++
		dr := rawRequest(t, nc, d, corr).(*kmsg.ConsumerGroupDescribeResponse)
		if len(dr.Groups) != 1 || dr.Groups[0].ErrorCode != 0 || len(dr.Groups[0].Members) != int(v)+1 {
			t.Fatalf("v%d describe: %+v", v, dr)
		}
	}
}
