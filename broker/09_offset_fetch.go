package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetFetch: v0-10
//
// Served by the group coordinator (broker/group): no commit (or no group)
// is offset -1 with no error. v2+ top-level error and all topics with a null
// list, v5+ leader epoch, v6+ flexible, v7 require stable, v8+ batched
// groups, v10 topic ids. Serial on a connection.

func init() {
	e := regKey(9, 0, 10)
	e.handler = handleOffsetFetch
	e.serial = true
}

func handleOffsetFetch(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.OffsetFetchRequest)
	if r.Version >= 8 {
		ids := make([]string, 0, len(req.Groups))
		for _, g := range req.Groups {
			ids = append(ids, g.Group)
		}
		b.groups.ensure(ids...)
	} else {
		b.groups.ensure(req.Group)
	}
	resp, err := b.groups.c.OffsetFetch(ctx, req)
	return groupReply(req, resp, err)
}
