package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreateAcls: v0-3
//
// Adds ACLs (KIP-140; PREFIXED patterns from v1, KIP-290). Each creation is
// checked as Kafka's AclControlManager does (checkNewACL: no UNKNOWN or ANY
// codes, a non-empty name, the CLUSTER resource named kafka-cluster, a
// principal of the form Type:name) and answers INVALID_REQUEST otherwise.
// The creations on one resource pattern are one metadata command; creating
// an ACL that exists succeeds. Needs ALTER on the cluster (authz.go);
// SECURITY_DISABLED without the authorizer. v2+ flexible.

func init() { regKey(30, 0, 3).handler = handleCreateAcls }

func handleCreateAcls(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.CreateACLsRequest)
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(req.Creations))
	var batch aclBatch
	idx := map[string][]int{} // pattern → creations in it
	for i, c := range req.Creations {
		resp.Results[i] = kmsg.NewCreateACLsResponseResult()
		if b.authz == nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.SecurityDisabled.Code, kmsg.StringPtr(errNoAuthorizer)
			continue
		}
		pt := c.ResourcePatternType
		if r.Version == 0 {
			pt = kmsg.ACLResourcePatternTypeLiteral
		}
		a := aclFromKafka(c.ResourceType, c.ResourceName, pt, c.Principal, c.Host, c.Operation, c.PermissionType)
		if err := checkNewACL(&a); err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errCode(err), errMessage(err)
			continue
		}
		name := batch.add(a, false)
		idx[name] = append(idx[name], i)
	}
	for name, err := range batch.propose(ctx, b) {
		for _, i := range idx[name] {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errCode(err), errMessage(err)
		}
	}
	return &Reply{Msg: resp}, nil
}
