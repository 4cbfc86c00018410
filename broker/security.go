package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Listener security (Kafka's security.protocol per listener):
//
//	PLAINTEXT       no encryption, every client is User:ANONYMOUS
//	SSL             TLS; with a client certificate the principal is its subject
//	SASL_PLAINTEXT  SASL authentication (PLAIN, SCRAM-SHA-256/512) before any other request
//	SASL_SSL        both
//
// Everything that depends on the protocol happens here and in the connection
// layer (conn.go): the TLS handshake when a connection is accepted, the gate
// that admits only ApiVersions, SaslHandshake and SaslAuthenticate until a SASL
// connection has authenticated, and the principal handed to middleware
// (ConnInfo.Principal). Handlers never look at the protocol.

// Security protocol names, as Kafka spells them.
const (
	ProtocolPlaintext     = "PLAINTEXT"
	ProtocolSSL           = "SSL"
	ProtocolSASLPlaintext = "SASL_PLAINTEXT"
	ProtocolSASLSSL       = "SASL_SSL"
)

// protocolIDs are Kafka's SecurityProtocol ids (the metadata log's listeners).
var protocolIDs = map[string]int16{ProtocolPlaintext: 0, ProtocolSSL: 1, ProtocolSASLPlaintext: 2, ProtocolSASLSSL: 3}

// SASL mechanisms the broker implements.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// SupportedSASLMechanisms lists the mechanisms in the order the broker
// advertises them.
var SupportedSASLMechanisms = []string{MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512}

// AnonymousPrincipal is Kafka's name for an unauthenticated client.
const AnonymousPrincipal = "ANONYMOUS"

// saslMaxReceive bounds a request read before a SASL connection has
// authenticated (Kafka's sasl.server.max.receive.size): an unauthenticated
// peer cannot make the broker read a 100 MiB frame.
const saslMaxReceive = 512 << 10

// handshakeTimeout bounds a TLS handshake and, on SASL listeners, the time
// from accept to a completed authentication.
const handshakeTimeout = 10 * time.Second

func usesTLS(protocol string) bool {
	return protocol == ProtocolSSL || protocol == ProtocolSASLSSL
}

func usesSASL(protocol string) bool {
	return protocol == ProtocolSASLPlaintext || protocol == ProtocolSASLSSL
}

// checkSecurity validates the listeners' protocols against the TLS and SASL
// settings (called by New).
func (c *Config) checkSecurity() error {
	if err := c.checkRaftTLS(); err != nil {
		return err
	}
	for i, l := range c.Listeners {
		if _, ok := protocolIDs[l.SecurityProtocol]; !ok {
			return fmt.Errorf("broker: listener %s: unknown security protocol %q (want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)", l.Name, l.SecurityProtocol)
		}
		if usesTLS(l.SecurityProtocol) && (c.TLS == nil || (len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil && c.TLS.GetConfigForClient == nil)) {
			return fmt.Errorf("broker: listener %s is %s but no server certificate is configured (ssl-cert-file, ssl-key-file)", l.Name, l.SecurityProtocol)
		}
		if i == 0 && usesSASL(l.SecurityProtocol) {
			// The broker's own clients (replica fetchers, transaction
			// markers) connect to the first listener: on SASL they
			// log in as the inter-broker user.
			if c.InterBrokerSASL == nil {
				return fmt.Errorf("broker: the first listener (%s) carries inter-broker traffic; as %s it needs the inter-broker SASL user (inter-broker-sasl-mechanism, -username, -password)", l.Name, l.SecurityProtocol)
			}
			if err := c.InterBrokerSASL.check(c.SASLMechanisms, c.GSSAPI); err != nil {
				return err
			}
		}
	}
	for _, m := range c.SASLMechanisms {
		if m == MechanismOAuthBearer {
			if c.OAuthBearer == nil {
				return errors.New("broker: SASL mechanism OAUTHBEARER needs a JWKS URL (sasl-oauthbearer-jwks-endpoint-url) or the unsecured mode")
			}
			continue
		}
		if m == MechanismGSSAPI {
			if c.GSSAPI == nil || c.GSSAPI.Keytab == nil {
				return errors.New("broker: SASL mechanism GSSAPI needs the broker's keytab (sasl-kerberos-keytab)")
			}
			continue
		}
		if !slices.Contains(SupportedSASLMechanisms, m) {
			return fmt.Errorf("broker: SASL mechanism %q not supported (want some of %s)", m, strings.Join(SupportedSASLMechanisms, ", "))
		}
	}
	return nil
}

// saslConn is a SASL connection's authentication state. The reader checks
// done before it decodes each request; the SaslHandshake and SaslAuthenticate
// handlers (serial, so in request order) move the state along.
type saslConn struct {
	done atomic.Bool // authenticated: every API is open
	raw  atomic.Bool // SaslHandshake v0: the exchange comes as raw tokens
	// tokenAuth: logged in with a delegation token (delegation_tokens.go),
	// as its owner.
	tokenAuth atomic.Bool

	// expiry is when the session ends (Unix ns; 0: never): past it the
	// reader admits only a re-authentication (KIP-368).
	expiry atomic.Int64

	mu        sync.Mutex
	mechanism string // chosen by SaslHandshake; "" before
	exchange  saslExchange
	// reauth: a re-authentication is in progress (its handshake was
	// answered): only its SaslAuthenticate may come (conn.decode).
	// Written under mu.
	reauth atomic.Bool
	// lastReauth is when the last re-authentication started (zero:
	// none), for minReauthInterval.
	lastReauth time.Time

	// loggedIn is called once the first login succeeded (conn.afterLogin).
	loggedIn func()
}

// handshaken reports whether a SaslHandshake has chosen the mechanism of a
// SASL exchange with SaslAuthenticate requests (not raw tokens).
func (sc *saslConn) handshaken() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.mechanism != "" && !sc.raw.Load()
}

// sessionExpired reports whether the connection's SASL session has ended:
// only SaslHandshake and SaslAuthenticate may come then.
func (sc *saslConn) sessionExpired(now time.Time) bool {
	exp := sc.expiry.Load()
	return exp != 0 && now.UnixNano() > exp
}

// sessionLifetime is how long a login that ends now lasts (Kafka's
// SaslServerAuthenticator.calcCompletionTimesAndReturnSessionLifetimeMs):
// connections.max.reauth.ms, cut short by the expiry of the credential x
// logged in with (an OAUTHBEARER token, a delegation token), which bounds
// it also without that setting. 0: the session does not end.
func (b *Broker) sessionLifetime(x saslExchange, now time.Time) time.Duration {
	lifetime := b.cfg.ConnectionsMaxReauth
	if _, krb := x.(*gssapiExchange); krb && lifetime <= 0 {
		// Kafka's GSSAPI server reports no credential lifetime: the
		// ticket bounds only a session that ends anyway.
		return 0
	}
	if ex, ok := x.(interface{ expiry() time.Time }); ok && !ex.expiry().IsZero() {
		if until := max(ex.expiry().Sub(now), time.Millisecond); lifetime <= 0 || until < lifetime {
			lifetime = until
		}
	}
	return max(lifetime, 0)
}

// setExpiry ends the session lifetime after now (0: never).
func (sc *saslConn) setExpiry(now time.Time, lifetime time.Duration) {
	if lifetime <= 0 {
		sc.expiry.Store(0)
		return
	}
	sc.expiry.Store(now.Add(lifetime).UnixNano())
}

// saslPreAuthAPIs are the APIs a SASL connection may send before it has
// authenticated: ApiVersions, SaslHandshake, SaslAuthenticate.
func saslPreAuthAPI(key int16) bool { return key == 18 || key == 17 || key == 36 }

// principal returns the Kafka principal name of a connection ("User:" is not
// included).
func (ci *ConnInfo) principal() string {
	if ci.Principal == "" {
		return AnonymousPrincipal
	}
	return ci.Principal
}

// secure runs the listener's security setup on an accepted connection: the
// TLS handshake (bounded by handshakeTimeout) and, for a client certificate,
// the principal. It returns the connection to serve, or an error to close it.
func (b *Broker) secure(nc net.Conn, l Listener) (net.Conn, *saslConn, string, error) {
	var principal string
	if usesTLS(l.SecurityProtocol) {
		tc := tls.Server(nc, b.cfg.TLS)
		ctx, cancel := context.WithTimeout(b.ctx, handshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return nil, nil, "", fmt.Errorf("TLS handshake: %w", err)
		}
		if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 && !usesSASL(l.SecurityProtocol) {
			// Kafka's SSL principal: the certificate's subject, as
			// an RFC 2253 distinguished name, through the mapping
			// rules; a subject no rule maps fails the connection.
			// On SASL_SSL the login names the principal, and the
			// certificate's subject is not mapped (as Kafka).
			principal, err = b.cfg.SSLPrincipalMapper.Map(subjectName(certs[0]))
			if err != nil {
				return nil, nil, "", err
			}
		}
		nc = tc
	}
	var sc *saslConn
	if usesSASL(l.SecurityProtocol) {
		sc = &saslConn{}
	}
	return nc, sc, principal, nil
}

// isTokenLogin reports whether x logged in with a delegation token.
func isTokenLogin(x saslExchange) bool {
	t, ok := x.(interface{ tokenAuthenticated() bool })
	return ok && t.tokenAuthenticated()
}

// authenticated opens the connection to every API as user. Principal is
// set before done, which the reader loads before it decodes a request.
func (ci *ConnInfo) authenticated(b *Broker, user string) {
	ci.Principal = user
	ci.sasl.tokenAuth.Store(isTokenLogin(ci.sasl.exchange))
	ci.sasl.done.Store(true)
	if ci.sasl.loggedIn != nil {
		ci.sasl.loggedIn()
	}
	b.metrics.saslLogins.Inc()
	b.log.Debug("SASL login", "conn", ci.ID, "remote", ci.Remote.String(), "user", user, "mechanism", ci.sasl.mechanism)
}

func (ci *ConnInfo) logAuthFailure(b *Broker, mechanism string, err error) {
	b.metrics.saslFailures.Inc()
	b.log.Info("SASL login failed", "conn", ci.ID, "remote", ci.Remote.String(), "mechanism", mechanism, "err", err)
}

// legacyGSSAPI starts a GSSAPI login without SaslHandshake, as Kafka
// 0.9.0's clients and sarama with SASL v0 do and Kafka still accepts: the
// connection's first frame on a SASL listener is not a Kafka request (a
// GSS-API token begins 0x60, read as an API key no Kafka API has) while
// GSSAPI is enabled. The frame is then the first raw token.
func (c *conn) legacyGSSAPI(sc *saslConn, frame []byte) bool {
	if !slices.Contains(c.b.cfg.SASLMechanisms, MechanismGSSAPI) || len(frame) < 2 {
		return false
	}
	if key := int16(binary.BigEndian.Uint16(frame)); kmsg.RequestForKey(key) != nil {
		return false
	}
	x, err := c.b.newSASLExchange(MechanismGSSAPI)
	if err != nil {
		return false
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.mechanism != "" {
		return false
	}
	sc.mechanism, sc.exchange = MechanismGSSAPI, x
	sc.raw.Store(true)
	return true
}

// rawSASLToken runs one step of a SaslHandshake v0 exchange on the reader's
// goroutine: the token is the whole frame and the answer goes back the same
// way, in reply order. ok false closes the connection (a failed login: raw
// tokens have no way to carry an error).
func (c *conn) rawSASLToken(sc *saslConn, token []byte) (*slot, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.exchange == nil {
		return nil, false
	}
	out, done, user, err := sc.exchange.step(token)
	if err != nil {
		c.info.logAuthFailure(c.b, sc.mechanism, err)
		return nil, false
	}
	if done {
		sc.raw.Store(false)
		c.info.authenticated(c.b, user)
		now := time.Now()
		sc.setExpiry(now, c.b.sessionLifetime(sc.exchange, now))
	}
	s := &slot{done: make(chan struct{})}
	close(s.done)
	if done && out == nil && sc.mechanism == MechanismGSSAPI {
		// GSSAPI's last token (the client's security layer choice) has no
		// answer: Java's GSS-API server returns none and Kafka sends none,
		// and kafka-python reads its next response right after it.
		return s, true
	}
	if out == nil {
		out = []byte{} // PLAIN's success is an empty token, still sent
	}
	s.rawToken = &out
	return s, true
}

// writeRawToken writes a size-prefixed raw SASL token and flushes it.
func writeRawToken(w *bufio.Writer, tok []byte) error {
	var size [4]byte
	binary.BigEndian.PutUint32(size[:], uint32(len(tok)))
	w.Write(size[:])
	w.Write(tok)
	return w.Flush()
}

// peerTLS wraps a dialed connection to a peer's inter-broker listener in
// TLS when that listener is SSL.
func (b *Broker) peerTLS(nc net.Conn, addr string) net.Conn {
	if !usesTLS(b.cfg.Listeners[0].SecurityProtocol) {
		return nc
	}
	cfg := b.cfg.PeerTLS
	if cfg == nil {
		cfg = &tls.Config{}
	} else {
		cfg = cfg.Clone()
	}
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	return tls.Client(nc, cfg)
}
