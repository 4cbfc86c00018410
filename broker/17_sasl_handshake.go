package broker

import (
	"context"
	"slices"

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
// and the connection closes; a second handshake, or one on a listener
// without SASL, gets ILLEGAL_SASL_STATE, except a re-authentication
// (KIP-368: on a session that expires, after a login, v1, the same
// mechanism). Serial: in request order.

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
	if sc.done.Load() {
		// A re-authentication (KIP-368): only where the session
		// expires (as Kafka's KafkaChannel), at v1, with the same
		// mechanism.
		if sc.expiry.Load() == 0 || r.Version < 1 || sc.reauth || req.Mechanism != sc.mechanism {
			resp.ErrorCode = kerr.IllegalSaslState.Code
			return &Reply{Msg: resp, Close: true}, nil
		}
		x, err := b.newSASLExchange(req.Mechanism)
		if err != nil {
			return nil, err
		}
		sc.exchange, sc.reauth = x, true
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
