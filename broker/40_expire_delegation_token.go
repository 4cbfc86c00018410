package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ExpireDelegationToken: v0-2
//
// Brings a token's expiry time forward (delegation_tokens.go), found by its
// HMAC: a negative expiry_time_period_ms removes the token at once (the
// answer's expiry is now), another sets its expiry to now + the period,
// never past its max time. In Kafka's order: DELEGATION_TOKEN_NOT_FOUND,
// DELEGATION_TOKEN_OWNER_MISMATCH unless the requester is the owner or a
// renewer, then DELEGATION_TOKEN_EXPIRED for a token already expired
// (unless removing it). v2 flexible.
func init() { regKey(40, 0, 2).handler = handleExpireDelegationToken }

func handleExpireDelegationToken(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ExpireDelegationTokenRequest)
	resp := req.ResponseKind().(*kmsg.ExpireDelegationTokenResponse)
	resp.ExpiryTimestamp = -1
	t, code := b.namedToken(r, req.HMAC)
	now := time.Now().UnixMilli()
	switch {
	case code != 0:
		resp.ErrorCode = code
	case !t.canRenew(requesterPrincipal(r)):
		resp.ErrorCode = kerr.DelegationTokenOwnerMismatch.Code
	case req.ExpiryPeriodMillis >= 0 && t.expired(now):
		resp.ErrorCode = kerr.DelegationTokenExpired.Code
	}
	if resp.ErrorCode != 0 {
		return &Reply{Msg: resp}, nil
	}
	expiry := int64(-1)
	if req.ExpiryPeriodMillis >= 0 {
		expiry = min(t.max, saturatingAdd(now, req.ExpiryPeriodMillis))
	}
	if resp.ErrorCode = b.changeTokenExpiry(ctx, t, expiry); resp.ErrorCode == 0 {
		resp.ExpiryTimestamp = expiry
		if expiry < 0 {
			resp.ExpiryTimestamp = now // removed now
		}
	}
	return &Reply{Msg: resp}, nil
}
