package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeGroups: v0-6
//
// Served by the group coordinator (broker/group): members with client id,
// host, metadata and assignment (for a Stable group). v3+ authorized
// operations (all group operations: there are no ACLs yet), v4+ instance
// ids, v5+ flexible, v6 GROUP_ID_NOT_FOUND for an unknown group.

func init() { regKey(15, 0, 6).handler = handleDescribeGroups }

func handleDescribeGroups(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeGroupsRequest)
	b.groups.ensure(req.Groups...)
	resp, err := b.groups.c.DescribeGroups(ctx, req)
	return groupReply(req, resp, err)
}
