package broker

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// AddRaftVoter: v0-1
//
// KIP-853: adds a voter to the metadata quorum (`sediment cluster voters add`,
// `kafka-metadata-quorum.sh add-controller`). Any broker takes it; the
// metadata node forwards the change to the Raft leader and the reply waits
// until the new configuration is committed (v1's AckWhenCommitted=false is
// answered the same way: later, never earlier). The voter's Raft address is
// its first listener (Kafka sends the controller listeners; Sediment's voters
// have one Raft address). The directory id is not used: hashicorp/raft has no
// notion of it. A cluster id that is not ours is INCONSISTENT_CLUSTER_ID; a
// voter already in the quorum at that address is DUPLICATE_VOTER (at another
// address: the address is updated, as hashicorp/raft's AddVoter does). The
// Raft leader first asks the node at the address who it is: nobody answering
// is REQUEST_TIMED_OUT (Kafka's answer for a new voter that is not fetching),
// another node id or cluster INVALID_REQUEST, and the quorum is unchanged
// (metadata.Node.checkNewVoter: a voter that never answers would stall a
// quorum of one or two for good).

func init() { regKey(80, 0, 1).handler = handleAddRaftVoter }

// voterChangeTimeout bounds a voter change when the request gives no
// timeout (RemoveRaftVoter has none).
const voterChangeTimeout = 15 * time.Second

func handleAddRaftVoter(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.AddRaftVoterRequest)
	resp := req.ResponseKind().(*kmsg.AddRaftVoterResponse)
	fail := func(code *kerr.Error, msg string) (*Reply, error) {
		resp.ErrorCode, resp.ErrorMessage = code.Code, kmsg.StringPtr(msg)
		return &Reply{Msg: resp}, nil
	}
	if code, msg := checkVoterClusterID(b, req.ClusterID); code != nil {
		return fail(code, msg)
	}
	if req.VoterID < 0 {
		return fail(kerr.InvalidRequest, "voter id must not be negative")
	}
	if len(req.Listeners) == 0 || req.Listeners[0].Host == "" || req.Listeners[0].Port == 0 {
		return fail(kerr.InvalidRequest, "the voter's Raft address (a listener with host and port) is required")
	}
	addr := net.JoinHostPort(req.Listeners[0].Host, strconv.Itoa(int(req.Listeners[0].Port)))
	voters, err := b.meta.Voters()
	if err != nil {
		return fail(kerr.NotController, err.Error())
	}
	for _, v := range voters {
		if v.ID == req.VoterID && v.Addr == addr {
			return fail(kerr.DuplicateVoter, "voter "+strconv.Itoa(int(v.ID))+" is already in the quorum at "+addr)
		}
	}
	timeout := voterChangeTimeout
	if req.TimeoutMillis > 0 {
		timeout = time.Duration(req.TimeoutMillis) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := b.meta.AddVoter(ctx, metadata.Peer{ID: req.VoterID, Addr: addr}); err != nil {
		return fail(voterChangeCode(err), err.Error())
	}
	b.log.Info("metadata voter added", "voter", req.VoterID, "raft_address", addr)
	return &Reply{Msg: resp}, nil
}

// checkVoterClusterID: a request naming another cluster is refused.
func checkVoterClusterID(b *Broker, id *string) (*kerr.Error, string) {
	if id == nil {
		return nil, ""
	}
	if ours := b.meta.State().ClusterID; *id != ours {
		return kerr.InconsistentClusterID, "this is cluster " + ours + ", not " + *id
	}
	return nil, ""
}

// voterChangeCode maps a failed voter change to its code: no quorum before
// the deadline is REQUEST_TIMED_OUT (the change may still commit), anything
// else from the metadata node goes through the broker's error table.
func voterChangeCode(err error) *kerr.Error {
	if errors.Is(err, metadata.ErrNoQuorum) || errors.Is(err, context.DeadlineExceeded) {
		return kerr.RequestTimedOut
	}
	if code := kerr.ErrorForCode(errCode(err)); code != nil {
		if ke, ok := code.(*kerr.Error); ok {
			return ke
		}
	}
	return kerr.UnknownServerError
}
