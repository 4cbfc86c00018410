package broker

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RemoveRaftVoter: v0
//
// KIP-853: removes a voter from the metadata quorum (`sediment cluster voters
// remove`, `kafka-metadata-quorum.sh remove-controller`). Any broker takes it;
// the change is forwarded to the Raft leader and the reply waits until it is
// committed (at most 15 s: the request has no timeout field). Removing the
// leader makes it step down once the change commits. A voter not in the quorum
// is VOTER_NOT_FOUND; the last voter cannot be removed (INVALID_REQUEST). A
// removed voter that still answers at its Raft address stays an observer
// (it receives the metadata log and votes in nothing, as Kafka's removed
// controllers keep fetching): the broker goes on serving. One that does not
// answer leaves the Raft configuration.

func init() { regKey(81, 0, 0).handler = handleRemoveRaftVoter }

func handleRemoveRaftVoter(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.RemoveRaftVoterRequest)
	resp := req.ResponseKind().(*kmsg.RemoveRaftVoterResponse)
	fail := func(code *kerr.Error, msg string) (*Reply, error) {
		resp.ErrorCode, resp.ErrorMessage = code.Code, kmsg.StringPtr(msg)
		return &Reply{Msg: resp}, nil
	}
	if code, msg := checkVoterClusterID(b, req.ClusterID); code != nil {
		return fail(code, msg)
	}
	voters, err := b.meta.Voters()
	if err != nil {
		return fail(kerr.NotController, err.Error())
	}
	found := false
	for _, v := range voters {
		found = found || v.ID == req.VoterID
	}
	if !found {
		return fail(kerr.VoterNotFound, "voter "+strconv.Itoa(int(req.VoterID))+" is not in the quorum")
	}
	if len(voters) == 1 {
		return fail(kerr.InvalidRequest, "the last voter of the quorum cannot be removed")
	}
	ctx, cancel := context.WithTimeout(ctx, voterChangeTimeout)
	defer cancel()
	if err := b.meta.RemoveVoter(ctx, req.VoterID); err != nil {
		return fail(voterChangeCode(err), err.Error())
	}
	b.log.Info("metadata voter removed", "voter", req.VoterID)
	return &Reply{Msg: resp}, nil
}
