package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ConsumerGroupHeartbeat: v0-1
//
// KIP-848, served by the group coordinator (broker/group, docs/groups.md):
// server-side assignment (uniform, range), member and group epochs,
// incremental reconciliation, static members (epoch -2 leaves for now).
// v1: the client makes its member id, regex subscriptions. Serial on a
// connection like the classic group requests. With group.version 0
// (features.go) it answers UNSUPPORTED_VERSION, as Kafka does: franz-go
// falls back to the classic protocol, the Java consumer must be set to
// group.protocol=classic.

func init() {
	e := regKey(68, 0, 1)
	e.handler = handleConsumerGroupHeartbeat
	e.serial = true
}

func handleConsumerGroupHeartbeat(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ConsumerGroupHeartbeatRequest)
	if !b.consumerGroupsEnabled() {
		return topError(r, kerr.UnsupportedVersion.Code), nil // group.version 0 (features.go)
	}
	b.groups.ensure(req.Group)
	resp, err := b.groups.c.ConsumerGroupHeartbeat(ctx, groupClient(r), req)
	return groupReply(req, resp, err)
}
