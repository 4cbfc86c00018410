package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// JoinGroup: v0-9
//
// Served by the group coordinator (broker/group, docs/groups.md): v1+
// rebalance timeout, v4+ KIP-394 MEMBER_ID_REQUIRED, v5+ static members,
// v6+ flexible, v7+ protocol type in the answer, v8+ reason, v9 skip
// assignment. The request waits until the rebalance completes. Group
// requests are serial on a connection, as Kafka processes one request of a
// connection at a time (a commit then a leave must arrive in that order).

func init() {
	e := regKey(11, 0, 9)
	e.handler = handleJoinGroup
	e.serial = true
}

func handleJoinGroup(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.JoinGroupRequest)
	b.groups.ensure(req.Group)
	resp, err := b.groups.c.JoinGroup(ctx, groupClient(r), req)
	return groupReply(req, resp, err)
}
