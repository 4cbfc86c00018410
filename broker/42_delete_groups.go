package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteGroups: v0-3
//
// Served by the group coordinator (broker/group): empty groups are deleted
// with their offsets (tombstones in __consumer_offsets); groups with
// members get NON_EMPTY_GROUP. v2+ flexible, v3+ error messages (none set).

func init() { regKey(42, 0, 3).handler = handleDeleteGroups }

func handleDeleteGroups(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DeleteGroupsRequest)
	b.groups.ensure(req.Groups...)
	resp, err := b.groups.c.DeleteGroups(ctx, req)
	return groupReply(req, resp, err)
}
