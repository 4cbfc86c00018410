package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// SyncGroup: v0-5
//
// Served by the group coordinator (broker/group): the leader's assignment is
// written to __consumer_offsets before any member gets its part. v3+
// instance id, v4+ flexible, v5+ protocol type and name. Serial on a
// connection.

func init() {
	e := regKey(14, 0, 5)
	e.handler = handleSyncGroup
	e.serial = true
}

func handleSyncGroup(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.SyncGroupRequest)
	b.groups.ensure(req.Group)
	resp, err := b.groups.c.SyncGroup(ctx, req)
	return groupReply(req, resp, err)
}
