package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RenewDelegationToken: v0-2
//
// Pushes a token's expiry time back (delegation_tokens.go), found by its
// HMAC: to now + renew_period_ms (≤ 0: delegation.token.expiry.time.ms;
// bounded by it), never past the token's max time. In Kafka's order:
// DELEGATION_TOKEN_NOT_FOUND, DELEGATION_TOKEN_EXPIRED, then
// DELEGATION_TOKEN_OWNER_MISMATCH unless the requester is the owner or a
// renewer; the precheck errors of CreateDelegationToken first. The answer's
// expiry is -1 on an error. v2 flexible.
func init() { regKey(39, 0, 2).handler = handleRenewDelegationToken }

func handleRenewDelegationToken(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.RenewDelegationTokenRequest)
	resp := req.ResponseKind().(*kmsg.RenewDelegationTokenResponse)
	resp.ExpiryTimestamp = -1
	t, code := b.namedToken(r, req.HMAC)
	now := time.Now().UnixMilli()
	switch {
	case code != 0:
		resp.ErrorCode = code
	case t.expired(now):
		resp.ErrorCode = kerr.DelegationTokenExpired.Code
	case !t.canRenew(requesterPrincipal(r)):
		resp.ErrorCode = kerr.DelegationTokenOwnerMismatch.Code
	}
	if resp.ErrorCode != 0 {
		return &Reply{Msg: resp}, nil
	}
	expiry := min(t.max, saturatingAdd(now, tokenPeriod(req.RenewTimeMillis, b.cfg.DelegationTokenExpiryTime)))
	if resp.ErrorCode = b.changeTokenExpiry(ctx, t, expiry); resp.ErrorCode == 0 {
		resp.ExpiryTimestamp = expiry
	}
	return &Reply{Msg: resp}, nil
}
