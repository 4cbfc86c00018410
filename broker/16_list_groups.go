package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListGroups: v0-5
//
// The groups of the __consumer_offsets partitions this broker leads (admin
// clients ask every broker). v3+ flexible, v4+ state filter, v5+ type
// filter ("classic", "consumer", "share").

func init() { regKey(16, 0, 5).handler = handleListGroups }

func handleListGroups(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ListGroupsRequest)
	b.groups.ensureAll()
	resp, err := b.groups.c.ListGroups(ctx, req)
	if err == nil && resp != nil && b.shares != nil {
		b.shares.coord.list(req, resp) // and the share groups (share_coordinator.go)
	}
	return groupReply(req, resp, err)
}
