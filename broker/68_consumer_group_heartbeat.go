package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ConsumerGroupHeartbeat: v0-1
//
// KIP-848, served by the group coordinator (broker/group, docs/groups.md):
// server-side assignment (uniform, range), member and group epochs,
// incremental reconciliation, static members (epoch -2 leaves for now).
// v1: the client makes its member id, regex subscriptions. Serial on a
// connection like the classic group requests.

func init() {
	e := regKey(68, 0, 1)
	e.handler = handleConsumerGroupHeartbeat
	e.serial = true
}

func handleConsumerGroupHeartbeat(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ConsumerGroupHeartbeatRequest)
	b.groups.ensure(req.Group)
	resp, err := b.groups.c.ConsumerGroupHeartbeat(ctx, groupClient(r), req)
	return groupReply(req, resp, err)
}
