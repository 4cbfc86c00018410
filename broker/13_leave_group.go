package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// LeaveGroup: v0-5
//
// Served by the group coordinator (broker/group): v0-2 one member and a
// top-level error, v3+ batched members by member or instance id, v4+
// flexible, v5+ reason. Serial on a connection.

func init() {
	e := regKey(13, 0, 5)
	e.handler = handleLeaveGroup
	e.serial = true
}

func handleLeaveGroup(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.LeaveGroupRequest)
	b.groups.ensure(req.Group)
	resp, err := b.groups.c.LeaveGroup(ctx, req)
	return groupReply(req, resp, err)
}
