package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeDelegationToken: v0-3
//
// Lists tokens (delegation_tokens.go) with their HMACs: with owners null,
// every token the requester may see; with owners given, those whose owner,
// requester or a renewer is one of them; an empty list, none. The requester
// sees a token it owns, requested or renews, or one it has DESCRIBE on (the
// DELEGATION_TOKEN resource, its id) or DESCRIBE_TOKENS on its owner's
// USER resource. Expired tokens not yet swept are listed, as in Kafka. The
// precheck errors of CreateDelegationToken first. v2+ flexible; v3 adds
// each token's requester.
func init() { regKey(41, 0, 3).handler = handleDescribeDelegationToken }

func handleDescribeDelegationToken(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeDelegationTokenRequest)
	resp := req.ResponseKind().(*kmsg.DescribeDelegationTokenResponse)
	if resp.ErrorCode = b.tokenPrecheck(r); resp.ErrorCode != 0 {
		return &Reply{Msg: resp}, nil
	}
	if req.Owners != nil && len(req.Owners) == 0 {
		return &Reply{Msg: resp}, nil
	}
	requester := requesterPrincipal(r)
	s := b.tokenSubject(r)
	for _, t := range delegationTokens(b.meta.State()) {
		if req.Owners != nil {
			match := false
			for _, o := range req.Owners {
				match = match || t.related(o.PrincipalType+":"+o.PrincipalName)
			}
			if !match {
				continue
			}
		}
		if !t.related(requester) && !s.allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeDelegationToken, t.id) &&
			!s.allowed(kmsg.ACLOperationDescribeTokens, kmsg.ACLResourceTypeUser, t.owner) {
			continue
		}
		d := kmsg.NewDescribeDelegationTokenResponseTokenDetail()
		d.PrincipalType, d.PrincipalName = splitPrincipal(t.owner)
		d.TokenRequesterPrincipalType, d.TokenRequesterPrincipalName = splitPrincipal(t.requester)
		d.IssueTimestamp, d.ExpiryTimestamp, d.MaxTimestamp = t.issue, t.expiry, t.max
		d.TokenID, d.HMAC = t.id, b.tokenHMAC(t.id)
		for _, rn := range t.renewers {
			dr := kmsg.NewDescribeDelegationTokenResponseTokenDetailRenewer()
			dr.PrincipalType, dr.PrincipalName = splitPrincipal(rn)
			d.Renewers = append(d.Renewers, dr)
		}
		resp.TokenDetails = append(resp.TokenDetails, d)
	}
	return &Reply{Msg: resp}, nil
}
