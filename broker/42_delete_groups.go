package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteGroups: v0-3
//
// Served by the group coordinator (broker/group): empty groups are deleted
// with their offsets (tombstones in __consumer_offsets); groups with
// members get NON_EMPTY_GROUP. Share groups (KIP-932) likewise, with their
// start offsets. v2+ flexible, v3+ error messages (none set).

func init() { regKey(42, 0, 3).handler = handleDeleteGroups }

func handleDeleteGroups(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DeleteGroupsRequest)
	b.groups.ensure(req.Groups...)
	// Share groups are the broker's (share_coordinator.go); the rest the
	// coordinator's.
	var shareGroups []string
	classic := req.Groups[:0:0]
	for _, g := range req.Groups {
		if b.shares.coord.isShareGroup(g) {
			shareGroups = append(shareGroups, g)
		} else {
			classic = append(classic, g)
		}
	}
	req.Groups = classic
	resp, err := b.groups.c.DeleteGroups(ctx, req)
	if err == nil && resp != nil {
		for _, g := range shareGroups {
			rg := kmsg.NewDeleteGroupsResponseGroup()
			rg.Group, rg.ErrorCode = g, b.shares.coord.delete(ctx, g)
			resp.Groups = append(resp.Groups, rg)
		}
	}
	return groupReply(req, resp, err)
}
