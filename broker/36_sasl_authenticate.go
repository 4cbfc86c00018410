package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslAuthenticate: v0-2
//
// One step of the SASL exchange chosen by SaslHandshake v1 (sasl.go). A
// failed login gets SASL_AUTHENTICATION_FAILED and the connection closes;
// a request out of turn (no handshake, after success, on a listener without
// SASL) gets ILLEGAL_SASL_STATE and closes. On success every API opens and
// the connection's principal is the user. v1 session lifetime 0: the
// broker does not ask for re-authentication (connections.max.reauth.ms 0,
// Kafka's default). v2 flexible. Serial: in request order.

func init() {
	e := regKey(36, 0, 2)
	e.handler = handleSaslAuthenticate
	e.serial = true
}

func handleSaslAuthenticate(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	sc := r.Conn.sasl
	if sc == nil {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return &Reply{Msg: resp, Close: true}, nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.done.Load() || sc.exchange == nil || sc.raw.Load() {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return &Reply{Msg: resp, Close: true}, nil
	}
	out, done, user, err := sc.exchange.step(req.SASLAuthBytes)
	if err != nil {
		r.Conn.logAuthFailure(b, sc.mechanism, err)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := fmt.Sprintf("Authentication failed during authentication due to invalid credentials with SASL mechanism %s", sc.mechanism)
		resp.ErrorMessage = &msg
		sc.exchange = nil
		return &Reply{Msg: resp, Close: true}, nil
	}
	resp.SASLAuthBytes = out
	if done {
		r.Conn.authenticated(b, user)
	}
	return &Reply{Msg: resp}, nil
}
