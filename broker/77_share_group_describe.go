package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareGroupDescribe: v1
//
// KIP-932: the share groups this broker coordinates (share_coordinator.go):
// state, epochs, the "simple" assignor, members with their subscriptions and
// assignments. A group that is not a share group: GROUP_ID_NOT_FOUND.

func init() { regKey(77, 1, 1).handler = handleShareGroupDescribe }

func handleShareGroupDescribe(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ShareGroupDescribeRequest)
	return &Reply{Msg: b.shares.coord.describe(req)}, nil
}
