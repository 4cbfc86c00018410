package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// DeleteAcls: v0-3
//
// Removes the ACLs matching each filter (the filters of DescribeAcls) and
// answers, per filter, the ACLs it removed. The matches are taken from the
// metadata this broker has applied; the removals on one resource pattern are
// one metadata command, and removing an ACL that another request removed
// first succeeds. A filter with an UNKNOWN element is INVALID_REQUEST.
// Needs ALTER on the cluster (authz.go). v2+ flexible.

func init() { regKey(31, 0, 3).handler = handleDeleteAcls }

func handleDeleteAcls(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DeleteACLsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	all := b.meta.State().ACLs().All()
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	matched := make([][]metadata.ACL, len(req.Filters))
	var batch aclBatch
	seen := map[metadata.ACL]bool{}
	for i, fl := range req.Filters {
		resp.Results[i] = kmsg.NewDeleteACLsResponseResult()
		f := aclFilter{rt: fl.ResourceType, name: fl.ResourceName, pattern: fl.ResourcePatternType,
			principal: fl.Principal, host: fl.Host, op: fl.Operation, perm: fl.PermissionType}
		if r.Version == 0 {
			f.pattern = kmsg.ACLResourcePatternTypeLiteral
		}
		if b.authz == nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.SecurityDisabled.Code, kmsg.StringPtr(errNoAuthorizer)
			continue
		}
		if err := f.check(); err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errCode(err), errMessage(err)
			continue
		}
		for _, a := range all {
			if !f.matches(&a) {
				continue
			}
			matched[i] = append(matched[i], a)
			if seen[a] {
				continue
			}
			seen[a] = true
			batch.add(a, true)
		}
	}
	failed := batch.propose(ctx, b)
	for i := range req.Filters {
		for _, a := range matched[i] {
			m := kmsg.NewDeleteACLsResponseResultMatchingACL()
			m.ResourceType, m.ResourceName = kmsg.ACLResourceType(a.ResourceType), a.ResourceName
			m.ResourcePatternType = kmsg.ACLResourcePatternType(a.PatternType)
			m.Principal, m.Host = a.Principal, a.Host
			m.Operation, m.PermissionType = kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission)
			if err := failed[a.ACLPatternName()]; err != nil {
				m.ErrorCode, m.ErrorMessage = errCode(err), errMessage(err)
			}
			resp.Results[i].MatchingACLs = append(resp.Results[i].MatchingACLs, m)
		}
	}
	return &Reply{Msg: resp}, nil
}
