package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ConsumerGroupDescribe: v0-1
//
// KIP-848 groups, served by the group coordinator (broker/group): state,
// group and assignment epochs, assignor, members with their epoch,
// subscription, current and target assignment. A classic group gets
// GROUP_ID_NOT_FOUND. v1: member type. With group.version 0 every group is
// UNSUPPORTED_VERSION (features.go).

func init() { regKey(69, 0, 1).handler = handleConsumerGroupDescribe }

func handleConsumerGroupDescribe(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ConsumerGroupDescribeRequest)
	if !b.consumerGroupsEnabled() { // group.version 0 (features.go)
		resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
		for _, g := range req.Groups {
			rg := kmsg.NewConsumerGroupDescribeResponseGroup()
			rg.Group, rg.ErrorCode = g, kerr.UnsupportedVersion.Code
			resp.Groups = append(resp.Groups, rg)
		}
		return &Reply{Msg: resp}, nil
	}
	b.groups.ensure(req.Groups...)
	resp, err := b.groups.c.ConsumerGroupDescribe(ctx, req)
	return groupReply(req, resp, err)
}
