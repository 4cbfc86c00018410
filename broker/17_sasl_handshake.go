package broker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslHandshake: v0-1
//
// Picks the SASL mechanism of a connection on a SASL listener (sasl.go). v1
// (KIP-152): the exchange follows in SaslAuthenticate requests. v0: it
// follows as raw size-prefixed tokens, read by the connection itself
// (conn.go readLoop), as older clients (kafka-python) send it. An unknown or
// disabled mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled ones
// and the connection closes. The other states, as Kafka's:
//
//   - a listener without SASL: ILLEGAL_SASL_STATE (KafkaApis), the
//     connection stays;
//   - during a login or re-authentication (after its handshake, before its
//     SaslAuthenticate succeeded): ILLEGAL_SASL_STATE and the connection
//     closes (SaslServerAuthenticator: "Unexpected Kafka request of type
//     SASL_HANDSHAKE during SASL authentication");
//   - after a login, on a session that does not expire, or within a second
//     of the last re-authentication's start (KafkaChannel's
//     MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS): not a re-authentication, so
//     KafkaApis answers ILLEGAL_SASL_STATE and the connection stays; if the
//     session has expired meanwhile the connection closes unanswered
//     (SocketServer);
//   - after a login, on a session that expires: a re-authentication
//     (KIP-368), v1. With an enabled mechanism other than the login's the
//     handshake is answered without error, as Kafka's, and the connection
//     closes (Kafka closes it at the next frame, REAUTH_BAD_MECHANISM).
//     At v0 (raw tokens, which only the login reads) it is refused with
//     ILLEGAL_SASL_STATE and the connection closes; Kafka would take raw
//     tokens, but no client re-authenticates with v0 (KIP-368 needs
//     SaslAuthenticate v1).
//
// Serial: in request order.

func init() {
	e := regKey(17, 0, 1)
	e.handler = handleSaslHandshake
	e.serial = true
}

func handleSaslHandshake(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = b.cfg.SASLMechanisms
	sc := r.Conn.sasl
	if sc == nil {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return &Reply{Msg: resp}, nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.done.Load() && !sc.reauth.Load() {
		now := time.Now()
		if sc.expiry.Load() == 0 || (!sc.lastReauth.IsZero() && now.Sub(sc.lastReauth) < minReauthInterval) {
			// Not a re-authentication (Kafka's
			// KafkaChannel.maybeBeginServerReauthentication is false):
			// SocketServer closes an expired session, else KafkaApis
			// answers ILLEGAL_SASL_STATE on the open connection.
			if sc.sessionExpired(now) {
				return &Reply{NoResponse: true, Close: true}, nil
			}
			resp.ErrorCode = kerr.IllegalSaslState.Code
			return &Reply{Msg: resp}, nil
		}
		sc.lastReauth = now
		if r.Version < 1 {
			resp.ErrorCode = kerr.IllegalSaslState.Code
			return &Reply{Msg: resp, Close: true}, nil
		}
		if !slices.Contains(b.cfg.SASLMechanisms, req.Mechanism) {
			resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
			return &Reply{Msg: resp, Close: true}, nil
		}
		if req.Mechanism != sc.mechanism {
			// Kafka's REAUTH_BAD_MECHANISM: the handshake is answered
			// without error (the mechanism is enabled) and the
			// re-authentication fails at the next frame, which closes
			// the connection unanswered. Nothing but that frame can
			// come between, so the connection closes after the answer.
			r.Conn.logAuthFailure(b, sc.mechanism, fmt.Errorf("SASL mechanism '%s' requested by client is not supported for re-authentication of mechanism '%s'", req.Mechanism, sc.mechanism))
			return &Reply{Msg: resp, Close: true}, nil
		}
		x, err := b.newSASLExchange(req.Mechanism)
		if err != nil {
			return nil, err
		}
		sc.exchange = x
		sc.reauth.Store(true)
		return &Reply{Msg: resp}, nil
	}
	if sc.mechanism != "" {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return &Reply{Msg: resp, Close: true}, nil
	}
	if !slices.Contains(b.cfg.SASLMechanisms, req.Mechanism) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return &Reply{Msg: resp, Close: true}, nil
	}
	x, err := b.newSASLExchange(req.Mechanism)
	if err != nil {
		return nil, err
	}
	sc.mechanism, sc.exchange = req.Mechanism, x
	sc.raw.Store(r.Version == 0)
	return &Reply{Msg: resp}, nil
}

// minReauthInterval is the least time between the starts of two
// re-authentications of a connection (Kafka's KafkaChannel): a handshake
// sooner is not one.
const minReauthInterval = time.Second
