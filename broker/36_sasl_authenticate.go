package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslAuthenticate: v0-2
//
// One step of the SASL exchange chosen by SaslHandshake v1 (sasl.go). A
// failed login gets SASL_AUTHENTICATION_FAILED and the connection closes
// (OAUTHBEARER: a refused token first gets the error message of RFC 7628,
// {"status":"invalid_token"}, as the server's bytes, and the failure, with
// that message, comes at the client's %x01 answer, as in Kafka);
// a request out of turn before the login succeeded (no handshake) gets
// ILLEGAL_SASL_STATE and closes. After it (outside a re-authentication), or
// on a listener without SASL, it is ILLEGAL_SASL_STATE on a connection that
// stays, as Kafka's KafkaApis answers it (an expired session closes
// unanswered, as Kafka's SocketServer). On success every API opens and the
// connection's principal is the user.
//
// Re-authentication (KIP-368): a session lasts connections.max.reauth.ms,
// or until the credential (an OAUTHBEARER token, a delegation token)
// expires if sooner, also without that setting (sessionLifetime); a v1+
// login is told the lifetime, and the client logs in again on the same
// connection before then (SaslHandshake, SaslAuthenticate, as the same
// principal: another is SASL_AUTHENTICATION_FAILED, "Cannot change
// principals during re-authentication", and closes, as Kafka's
// ensurePrincipalUnchanged). The credential may change (a password, then a
// delegation token of the same owner): the token APIs follow the current
// login (tokenAuth), as Kafka's channel takes the new login's principal.
// Between a re-authentication's handshake and its SaslAuthenticate any
// other request closes the connection (conn.decode), as Kafka's
// SaslServerAuthenticator takes it for an illegal SASL state. A connection used for anything else after it is closed
// (conn.go), whatever the version it logged in with, as Kafka's
// SocketServer. With neither the lifetime is 0 and the session does not
// end, Kafka's default. v2 flexible. Serial: in request order.

func init() {
	e := regKey(36, 0, 2)
	e.handler = handleSaslAuthenticate
	e.serial = true
}

func handleSaslAuthenticate(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	sc := r.Conn.sasl
	afterLogin := func() (*Reply, error) {
		// Not part of a login: Kafka's KafkaApis answers it, and
		// the connection stays.
		resp.ErrorCode = kerr.IllegalSaslState.Code
		msg := "SaslAuthenticate request received after successful authentication"
		resp.ErrorMessage = &msg
		return &Reply{Msg: resp}, nil
	}
	if sc == nil {
		return afterLogin()
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.done.Load() && !sc.reauth.Load() {
		if sc.sessionExpired(time.Now()) {
			// Kafka's SocketServer closes an expired session on
			// anything but a re-authentication's handshake.
			return &Reply{NoResponse: true, Close: true}, nil
		}
		return afterLogin()
	}
	if sc.exchange == nil || sc.raw.Load() {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return &Reply{Msg: resp, Close: true}, nil
	}
	fail := func(err error) (*Reply, error) {
		r.Conn.logAuthFailure(b, sc.mechanism, err)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		during := "authentication"
		if sc.reauth.Load() {
			during = "re-authentication"
		}
		msg := fmt.Sprintf("Authentication failed during %s due to invalid credentials with SASL mechanism %s", during, sc.mechanism)
		if sf := (*saslFailure)(nil); errors.As(err, &sf) {
			msg = sf.msg // OAUTHBEARER's error message (RFC 7628), as Kafka
		}
		resp.ErrorMessage = &msg
		sc.exchange = nil
		return &Reply{Msg: resp, Close: true}, nil
	}
	out, done, user, err := sc.exchange.step(req.SASLAuthBytes)
	if err != nil {
		return fail(err)
	}
	resp.SASLAuthBytes = out
	if !done {
		return &Reply{Msg: resp}, nil
	}
	now := time.Now()
	if sc.reauth.Load() {
		if user != r.Conn.Principal {
			// Kafka's ReauthInfo.ensurePrincipalUnchanged: the
			// principal (type and name) must stay; its message.
			msg := fmt.Sprintf("Cannot change principals during re-authentication from User.%s: User.%s", r.Conn.Principal, user)
			return fail(&saslFailure{msg: msg, err: errors.New(msg)})
		}
		// The principal is the same, but the credential may not be
		// (a password, then a delegation token of the same owner, or
		// the reverse): as Kafka's channel takes the new login's
		// principal with its tokenAuthenticated flag, the token
		// APIs follow the login that is current.
		sc.tokenAuth.Store(isTokenLogin(sc.exchange))
		sc.reauth.Store(false)
		b.metrics.saslReauths.Inc()
	} else {
		r.Conn.authenticated(b, user)
	}
	lifetime := b.sessionLifetime(sc.exchange, now)
	if r.Version >= 1 {
		resp.SessionLifetimeMillis = lifetime.Milliseconds()
	}
	sc.setExpiry(now, lifetime)
	sc.exchange = nil
	return &Reply{Msg: resp}, nil
}
