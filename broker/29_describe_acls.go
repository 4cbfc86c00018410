package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// DescribeAcls: v0-3
//
// The ACLs that match one filter (acl.go's aclFilter: ANY matches every
// type, pattern, operation and permission, a null name, principal or host
// every one; the MATCH pattern type every pattern that applies to the name
// given), grouped by resource pattern. A filter with an UNKNOWN element is
// INVALID_REQUEST. v0 knows only LITERAL patterns. Without the authorizer
// the three ACL APIs answer SECURITY_DISABLED, as Kafka's: ACLs that nothing
// enforces are not accepted. Needs DESCRIBE on the
// cluster (authz.go). v2+ flexible.

func init() { regKey(29, 0, 3).handler = handleDescribeAcls }

func handleDescribeAcls(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeACLsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	f := aclFilter{rt: req.ResourceType, name: req.ResourceName, pattern: req.ResourcePatternType,
		principal: req.Principal, host: req.Host, op: req.Operation, perm: req.PermissionType}
	if r.Version == 0 {
		f.pattern = kmsg.ACLResourcePatternTypeLiteral
	}
	if b.authz == nil {
		resp.ErrorCode, resp.ErrorMessage = kerr.SecurityDisabled.Code, kmsg.StringPtr(errNoAuthorizer)
		return &Reply{Msg: resp}, nil
	}
	if err := f.check(); err != nil {
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		return &Reply{Msg: resp}, nil
	}
	var last *kmsg.DescribeACLsResponseResource
	for _, a := range b.meta.State().ACLs().All() { // sorted by pattern
		if !f.matches(&a) {
			continue
		}
		if last == nil || int8(last.ResourceType) != a.ResourceType || int8(last.ResourcePatternType) != a.PatternType || last.ResourceName != a.ResourceName {
			res := kmsg.NewDescribeACLsResponseResource()
			res.ResourceType, res.ResourceName = kmsg.ACLResourceType(a.ResourceType), a.ResourceName
			res.ResourcePatternType = kmsg.ACLResourcePatternType(a.PatternType)
			resp.Resources = append(resp.Resources, res)
			last = &resp.Resources[len(resp.Resources)-1]
		}
		e := kmsg.NewDescribeACLsResponseResourceACL()
		e.Principal, e.Host = a.Principal, a.Host
		e.Operation, e.PermissionType = kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission)
		last.ACLs = append(last.ACLs, e)
	}
	return &Reply{Msg: resp}, nil
}

const errNoAuthorizer = "no authorizer is configured on the broker (sediment broker --authorizer-enabled)"

// aclFromKafka builds the stored form of a new ACL.
func aclFromKafka(rt kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType, principal, host string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) metadata.ACL {
	return metadata.ACL{ResourceType: int8(rt), ResourceName: name, PatternType: int8(pt), Principal: principal, Host: host, Operation: int8(op), Permission: int8(perm)}
}

// aclBatch gathers ACL changes into one metadata command per resource
// pattern (an ACL's pattern is one config resource, metadata/acl.go).
type aclBatch struct {
	cmds  map[string]*metadata.AlterConfigs
	order []string
}

// add adds or (del) removes a; it returns a's pattern name.
func (ab *aclBatch) add(a metadata.ACL, del bool) string {
	name := a.ACLPatternName()
	cmd := ab.cmds[name]
	if cmd == nil {
		if ab.cmds == nil {
			ab.cmds = map[string]*metadata.AlterConfigs{}
		}
		cmd = &metadata.AlterConfigs{ResourceType: metadata.ResourceACL, ResourceName: name}
		ab.cmds[name] = cmd
		ab.order = append(ab.order, name)
	}
	cmd.Ops = append(cmd.Ops, metadata.ConfigOp{Key: a.ACLEntryKey(), Delete: del})
	return name
}

// propose commits the commands; it returns the failed ones' errors by
// pattern name.
func (ab *aclBatch) propose(ctx context.Context, b *Broker) map[string]error {
	failed := map[string]error{}
	for _, name := range ab.order {
		if _, _, err := b.store.propose(ctx, ab.cmds[name]); err != nil {
			failed[name] = err
		}
	}
	return failed
}
