package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareGroupHeartbeat: v1
//
// KIP-932 share groups' membership (share_coordinator.go): join with epoch 0
// and the subscribed topics, heartbeat with the epoch, leave with -1. v1
// only (v0 was Kafka 4.0's early access). Serial on a connection, like the
// other group requests.

func init() {
	e := regKey(76, 1, 1)
	e.handler = handleShareGroupHeartbeat
	e.serial = true
}

func handleShareGroupHeartbeat(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ShareGroupHeartbeatRequest)
	client := groupClient(r)
	return &Reply{Msg: b.shares.coord.heartbeat(req, client.ClientID, client.Host)}, nil
}
