package broker

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRaftVoterRefusals: DescribeQuorum on a quorum of one, and the
// AddRaftVoter/RemoveRaftVoter requests that must be refused with Kafka's
// codes before anything reaches Raft. (Adding and removing a voter for real is
// e2e's TestClusterVoters, with processes.)
func TestRaftVoterRefusals(t *testing.T) {
	b := startBroker(t, "")
	cl := newClient(t, b)
	ctx := testCtx(t)

	dq := kmsg.NewPtrDescribeQuorumRequest()
	qt := kmsg.NewDescribeQuorumRequestTopic()
	qt.Topic = "__cluster_metadata"
	qt.Partitions = append(qt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
	dq.Topics = append(dq.Topics, qt)
	q, err := dq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	p := q.Topics[0].Partitions[0]
	if p.ErrorCode != 0 || p.LeaderID != b.cfg.NodeID || len(p.CurrentVoters) != 1 || len(q.Nodes) != 1 {
		t.Fatalf("describe quorum: %+v nodes %+v", p, q.Nodes)
	}
	// The broker has registered and created nothing yet, but Raft has its
	// bootstrap configuration and the broker's registration committed.
	if p.LeaderEpoch < 1 || p.HighWatermark < 1 || p.CurrentVoters[0].LogEndOffset < p.HighWatermark {
		t.Fatalf("describe quorum: term %d, high watermark %d, log end %d", p.LeaderEpoch, p.HighWatermark, p.CurrentVoters[0].LogEndOffset)
	}
	self := q.Nodes[0].Listeners[0]

	add := func(mod func(*kmsg.AddRaftVoterRequest)) int16 {
		t.Helper()
		req := kmsg.NewPtrAddRaftVoterRequest()
		req.VoterID = 7
		l := kmsg.NewAddRaftVoterRequestListener()
		l.Name, l.Host, l.Port = "RAFT", "127.0.0.1", 1
		req.Listeners = append(req.Listeners, l)
		mod(req)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ErrorCode
	}
	remove := func(id int32, cluster *string) int16 {
		t.Helper()
		req := kmsg.NewPtrRemoveRaftVoterRequest()
		req.VoterID, req.ClusterID = id, cluster
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ErrorCode
	}
	for _, c := range []struct {
		name string
		got  int16
		want *kerr.Error
	}{
		{"negative id", add(func(r *kmsg.AddRaftVoterRequest) { r.VoterID = -1 }), kerr.InvalidRequest},
		{"no listener", add(func(r *kmsg.AddRaftVoterRequest) { r.Listeners = nil }), kerr.InvalidRequest},
		{"port 0", add(func(r *kmsg.AddRaftVoterRequest) { r.Listeners[0].Port = 0 }), kerr.InvalidRequest},
		{"other cluster", add(func(r *kmsg.AddRaftVoterRequest) { r.ClusterID = kmsg.StringPtr("elsewhere") }), kerr.InconsistentClusterID},
		{"self again", add(func(r *kmsg.AddRaftVoterRequest) {
			r.VoterID, r.Listeners[0].Host, r.Listeners[0].Port = b.cfg.NodeID, self.Host, self.Port
		}), kerr.DuplicateVoter},
		{"remove unknown", remove(9, nil), kerr.VoterNotFound},
		{"remove the last voter", remove(b.cfg.NodeID, nil), kerr.InvalidRequest},
		{"remove, other cluster", remove(b.cfg.NodeID, kmsg.StringPtr("elsewhere")), kerr.InconsistentClusterID},
	} {
		if c.got != c.want.Code {
			t.Errorf("%s: error code %d (%v), want %s", c.name, c.got, kerr.ErrorForCode(c.got), c.want.Message)
		}
	}
}
