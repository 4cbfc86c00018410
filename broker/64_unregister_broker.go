package broker

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// UnregisterBroker: v0
//
// KIP-631's decommissioning (`kafka-cluster.sh unregister --id N`, the Java
// Admin's unregisterBroker, `sediment cluster unregister`): forgets a broker
// shut down for good, so that it no longer counts as registered (it blocks
// no feature upgrade, DescribeCluster and Metadata no longer list it). It is
// fenced first if it is not. Its partitions' replica lists are unchanged:
// move them off it with a reassignment. A live broker unregistered by
// mistake is out of the cluster until its next start. An observer of the
// metadata quorum (a broker that is not a voter) also leaves the Raft
// configuration. ALTER on CLUSTER; an id that is not registered is
// BROKER_ID_NOT_REGISTERED.

func init() { regKey(64, 0, 0).handler = handleUnregisterBroker }

func handleUnregisterBroker(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.UnregisterBrokerRequest)
	resp := req.ResponseKind().(*kmsg.UnregisterBrokerResponse)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, _, err := b.store.propose(pctx, &metadata.UnregisterBroker{BrokerID: req.BrokerID})
	switch {
	case errors.Is(err, metadata.ErrUnknownBroker):
		resp.ErrorCode, resp.ErrorMessage = kerr.BrokerIDNotRegistered.Code, errMessage(err)
	case err != nil:
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
	default:
		b.log.Info("broker unregistered", "broker", req.BrokerID)
		// An observer of the metadata quorum leaves the Raft
		// configuration too, so the leader stops sending the log to a
		// broker gone for good (a voter is removed with RemoveRaftVoter).
		if err := b.meta.RemoveObserver(pctx, req.BrokerID); err != nil {
			b.log.Warn("unregistered broker still an observer of the metadata quorum", "broker", req.BrokerID, "err", err)
		}
	}
	return &Reply{Msg: resp}, nil
}
