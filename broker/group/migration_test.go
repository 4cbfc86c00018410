package group

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// newMigrationCoordinator is a coordinator of one loaded partition with
// topic a of four partitions, and member ids client-1, client-2, ...
func newMigrationCoordinator(t *testing.T) *Coordinator {
	t.Helper()
	ids := 0
	c := New(Config{Logger: quiet, Partitions: 1, Clock: newFakeClock(), InitialRebalanceDelay: -1,
		MinSessionTimeout: time.Second, MaxSessionTimeout: time.Minute, ConsumerSessionTimeout: 45 * time.Second,
		Topics: newTestTopics([]string{"a:4"}), MigrationPolicy: MigrationBidirectional,
		newMemberID: func(client string) string { ids++; return fmt.Sprintf("%s-%d", client, ids) }})
	t.Cleanup(func() { c.Close() })
	if err := <-c.Load(0, &memLog{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func migrationCGHB(member string, epoch int32, instance *string) *kmsg.ConsumerGroupHeartbeatRequest {
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.Version, r.Group, r.MemberID, r.MemberEpoch, r.InstanceID = 1, "g", member, epoch, instance
	if epoch == 0 {
		r.RebalanceTimeoutMillis = 10000
		r.SubscribedTopicNames, r.Topics = []string{"a"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	return r
}

func migrationJoin(member string, instance *string) *kmsg.JoinGroupRequest {
	md := kmsg.NewConsumerMemberMetadata()
	md.Topics = []string{"a"}
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version, r.Group, r.MemberID, r.InstanceID = 5, "g", member, instance
	r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = 10000, 20000, "consumer"
	r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: md.AppendTo(nil)}}
	return r
}

// TestClassicJoinAnswerDuringStaticReplacement: a static classic member's
// old process (a zombie) rejoins, and the new process with the same
// instance id joins before the zombie's write completes. The zombie keeps
// its own id and is fenced; it is never handed the new process's id.
func TestClassicJoinAnswerDuringStaticReplacement(t *testing.T) {
	c := newMigrationCoordinator(t)
	ctx := context.Background()
	if r, _ := c.ConsumerGroupHeartbeat(ctx, Client{ClientID: "m"}, migrationCGHB("m1", 0, nil)); r.ErrorCode != 0 {
		t.Fatalf("consumer-protocol member: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	inst := "i1"
	r0, _ := c.JoinGroup(ctx, Client{ClientID: "s"}, migrationJoin("", &inst))
	if r0.ErrorCode != 0 {
		t.Fatalf("static classic member: %v", kerr.ErrorForCode(r0.ErrorCode))
	}
	zombie, fresh := make(chan *kmsg.JoinGroupResponse, 1), make(chan *kmsg.JoinGroupResponse, 1)
	c.inLoop(func() {
		c.handleJoin(Client{ClientID: "s"}, migrationJoin(r0.MemberID, &inst), func(r *kmsg.JoinGroupResponse) { zombie <- r })
		c.handleJoin(Client{ClientID: "s"}, migrationJoin("", &inst), func(r *kmsg.JoinGroupResponse) { fresh <- r })
	})
	rz, rf := <-zombie, <-fresh
	if rf.ErrorCode != 0 || rf.MemberID == r0.MemberID {
		t.Fatalf("the new process: %v member %q", kerr.ErrorForCode(rf.ErrorCode), rf.MemberID)
	}
	if rz.ErrorCode == 0 && rz.MemberID != r0.MemberID {
		t.Fatalf("the old process %s was handed member id %s", r0.MemberID, rz.MemberID)
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID, hb.InstanceID, hb.Generation = 4, "g", rz.MemberID, &inst, rz.Generation
	if r, _ := c.Heartbeat(ctx, hb); r.ErrorCode != kerr.FencedInstanceID.Code {
		t.Fatalf("the old process's heartbeat: %v, want FENCED_INSTANCE_ID", kerr.ErrorForCode(r.ErrorCode))
	}
}

// TestClassicJoinAnswerDuringDowngrade: a classic member rejoins, and the
// last consumer-protocol member leaves before the join's write completes,
// so the group turns classic. The join still succeeds (the member is in
// the classic group), and the member's next heartbeat leads it into the
// classic group's rebalance, which completes without waiting for a session
// to expire.
func TestClassicJoinAnswerDuringDowngrade(t *testing.T) {
	c := newMigrationCoordinator(t)
	ctx := context.Background()
	if r, _ := c.ConsumerGroupHeartbeat(ctx, Client{ClientID: "m"}, migrationCGHB("m1", 0, nil)); r.ErrorCode != 0 {
		t.Fatalf("consumer-protocol member: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	j, _ := c.JoinGroup(ctx, Client{ClientID: "c"}, migrationJoin("", nil))
	if j.ErrorCode == kerr.MemberIDRequired.Code {
		j, _ = c.JoinGroup(ctx, Client{ClientID: "c"}, migrationJoin(j.MemberID, nil))
	}
	if j.ErrorCode != 0 {
		t.Fatalf("classic member: %v", kerr.ErrorForCode(j.ErrorCode))
	}
	joined, left := make(chan *kmsg.JoinGroupResponse, 1), make(chan *kmsg.ConsumerGroupHeartbeatResponse, 1)
	c.inLoop(func() {
		c.handleJoin(Client{ClientID: "c"}, migrationJoin(j.MemberID, nil), func(r *kmsg.JoinGroupResponse) { joined <- r })
		c.handleCGHeartbeat(Client{ClientID: "m"}, migrationCGHB("m1", -1, nil), nil, nil, func(r *kmsg.ConsumerGroupHeartbeatResponse) { left <- r })
	})
	if r := <-left; r.ErrorCode != 0 {
		t.Fatalf("the last consumer-protocol member's leave: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	rj := <-joined
	if rj.ErrorCode != 0 || rj.MemberID != j.MemberID {
		t.Fatalf("the rejoin in flight during the downgrade: %v member %q, want NONE %q", kerr.ErrorForCode(rj.ErrorCode), rj.MemberID, j.MemberID)
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID, hb.Generation = 4, "g", j.MemberID, rj.Generation
	if r, _ := c.Heartbeat(ctx, hb); r.ErrorCode != kerr.RebalanceInProgress.Code {
		t.Fatalf("heartbeat after the downgrade: %v, want REBALANCE_IN_PROGRESS", kerr.ErrorForCode(r.ErrorCode))
	}
	// The member is the classic group's only one: its rejoin completes
	// the rebalance at once, and it syncs its assignment.
	rj2, _ := c.JoinGroup(ctx, Client{ClientID: "c"}, migrationJoin(j.MemberID, nil))
	if rj2.ErrorCode != 0 || rj2.LeaderID != j.MemberID {
		t.Fatalf("rejoin of the classic group: %v leader %q", kerr.ErrorForCode(rj2.ErrorCode), rj2.LeaderID)
	}
	sy := kmsg.NewPtrSyncGroupRequest()
	sy.Version, sy.Group, sy.MemberID, sy.Generation = 5, "g", j.MemberID, rj2.Generation
	if r, _ := c.SyncGroup(ctx, sy); r.ErrorCode != 0 {
		t.Fatalf("sync of the classic group: %v", kerr.ErrorForCode(r.ErrorCode))
	}
}
