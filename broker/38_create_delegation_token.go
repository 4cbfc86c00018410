package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreateDelegationToken: v0-3
//
// Creates a delegation token (delegation_tokens.go) owned by the requester,
// or (v3, KIP-373) by the owner it names, which needs CREATE_TOKENS on that
// USER resource (DELEGATION_TOKEN_AUTHORIZATION_FAILED otherwise). Renewers
// must be of type User (INVALID_PRINCIPAL_TYPE). max_lifetime_ms ≤ 0 takes
// delegation.token.max.lifetime.ms, a larger one is bounded by it. The
// answer carries the token id, its HMAC and its timestamps. Refused on
// connections that may not use tokens (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
// and when tokens are off (DELEGATION_TOKEN_AUTH_DISABLED). v2+ flexible.
func init() { regKey(38, 0, 3).handler = handleCreateDelegationToken }

func handleCreateDelegationToken(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.CreateDelegationTokenRequest)
	resp := req.ResponseKind().(*kmsg.CreateDelegationTokenResponse)
	requester := requesterPrincipal(r)
	resp.PrincipalType, resp.PrincipalName = splitPrincipal(requester)
	resp.TokenRequesterPrincipalType, resp.TokenRequesterPrincipalName = resp.PrincipalType, resp.PrincipalName
	if resp.ErrorCode = b.tokenPrecheck(r); resp.ErrorCode != 0 {
		return &Reply{Msg: resp}, nil
	}
	owner := requester
	if req.OwnerPrincipalName != nil && *req.OwnerPrincipalName != "" {
		typ := "User"
		if req.OwnerPrincipalType != nil && *req.OwnerPrincipalType != "" {
			typ = *req.OwnerPrincipalType
		}
		if typ != "User" {
			resp.ErrorCode = kerr.InvalidPrincipalType.Code
			return &Reply{Msg: resp}, nil
		}
		owner = typ + ":" + *req.OwnerPrincipalName
		if owner != requester && !b.tokenSubject(r).allowed(kmsg.ACLOperationCreateTokens, kmsg.ACLResourceTypeUser, owner) {
			resp.ErrorCode = kerr.DelegationTokenAuthorizationFailed.Code
			return &Reply{Msg: resp}, nil
		}
	}
	resp.PrincipalType, resp.PrincipalName = splitPrincipal(owner)
	var renewers []string
	for _, rn := range req.Renewers {
		if rn.PrincipalType != "User" {
			resp.ErrorCode = kerr.InvalidPrincipalType.Code
			return &Reply{Msg: resp}, nil
		}
		renewers = append(renewers, rn.PrincipalType+":"+rn.PrincipalName)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t, err := b.createDelegationToken(ctx, requester, owner, renewers, req.MaxLifetimeMillis)
	if err != nil {
		resp.ErrorCode = errCode(err)
		return &Reply{Msg: resp}, nil
	}
	resp.IssueTimestamp, resp.ExpiryTimestamp, resp.MaxTimestamp = t.issue, t.expiry, t.max
	resp.TokenID, resp.HMAC = t.id, b.tokenHMAC(t.id)
	return &Reply{Msg: resp}, nil
}
