package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListGroups: v0-5
//
// The groups of the __consumer_offsets partitions this broker leads (admin
// clients ask every broker). v3+ flexible, v4+ state filter, v5+ type
// filter (all groups are "classic").

func init() { regKey(16, 0, 5).handler = handleListGroups }

func handleListGroups(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ListGroupsRequest)
	b.groups.ensureAll()
	resp, err := b.groups.c.ListGroups(ctx, req)
	return groupReply(req, resp, err)
}
