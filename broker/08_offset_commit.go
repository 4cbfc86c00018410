package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetCommit: v0-10
//
// Served by the group coordinator (broker/group): one batch of Kafka's
// offset-commit records in __consumer_offsets per request. v0-v1 are stored
// like v2 (the v1 per-partition timestamp is ignored), v2-v4 retention, v6+
// leader epoch, v7+ instance id, v8+ flexible, v9+ GROUP_ID_NOT_FOUND, v10
// topic ids. Serial on a connection.

func init() {
	e := regKey(8, 0, 10)
	e.handler = handleOffsetCommit
	e.serial = true
}

func handleOffsetCommit(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.OffsetCommitRequest)
	b.groups.ensure(req.Group)
	resp, err := b.groups.c.OffsetCommit(ctx, req)
	return groupReply(req, resp, err)
}
