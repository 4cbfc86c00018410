package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Heartbeat: v0-4
//
// Served by the group coordinator (broker/group): v1+ throttle, v3+ static
// instance id, v4+ flexible. Serial on a connection.

func init() {
	e := regKey(12, 0, 4)
	e.handler = handleHeartbeat
	e.serial = true
}

func handleHeartbeat(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.HeartbeatRequest)
	b.groups.ensure(req.Group)
	resp, err := b.groups.c.Heartbeat(ctx, req)
	return groupReply(req, resp, err)
}
