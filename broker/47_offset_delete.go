package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetDelete: v0
//
// Served by the group coordinator (broker/group): offsets of an empty group,
// or of topics a consumer group does not subscribe to
// (GROUP_SUBSCRIBED_TO_TOPIC otherwise).

func init() { regKey(47, 0, 0).handler = handleOffsetDelete }

func handleOffsetDelete(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.OffsetDeleteRequest)
	b.groups.ensure(req.Group)
	resp, err := b.groups.c.OffsetDelete(ctx, req)
	return groupReply(req, resp, err)
}
