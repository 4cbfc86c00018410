package broker

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// saslLogin runs SaslHandshake v1 and one SaslAuthenticate v1 on nc.
func saslLogin(t *testing.T, nc net.Conn, mech string, msg []byte, corr int32) (*kmsg.SASLHandshakeResponse, *kmsg.SASLAuthenticateResponse) {
	t.Helper()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, mech
	hresp := rawRequest(t, nc, hs, corr).(*kmsg.SASLHandshakeResponse)
	if hresp.ErrorCode != 0 {
		return hresp, nil
	}
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 1, msg
	return hresp, rawRequest(t, nc, au, corr+1).(*kmsg.SASLAuthenticateResponse)
}

func plainMsg(user, pass string) []byte { return []byte("\x00" + user + "\x00" + pass) }

// dialAsAlice connects to b's SASL_PLAINTEXT listener and logs in as alice
// with PLAIN (correlation ids 1 and 2); the connection closes at cleanup.
func dialAsAlice(t *testing.T, b *Broker) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", b.listenerAddr("SASL_PLAINTEXT"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, au := saslLogin(t, nc, MechanismPlain, plainMsg("alice", "alice-pw"), 1); au == nil || au.ErrorCode != 0 {
		t.Fatalf("login: %+v", au)
	}
	return nc
}

// connClosed reports whether the broker closed nc after a request.
func connClosed(nc net.Conn, req kmsg.Request, corr int32) bool {
	_, err := roundTrip(nc, req, corr, 10*time.Second)
	return err != nil
}

// TestSASLReauthentication: KIP-368 with connections.max.reauth.ms.
func TestSASLReauthentication(t *testing.T) {
	const lifetime = 1500 * time.Millisecond
	idp := newTestIdP(t)
	b := startBroker(t, "", func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
		}
		c.SASLMechanisms = []string{MechanismPlain, MechanismSCRAMSHA256, MechanismOAuthBearer}
		c.OAuthBearer = &OAuthBearerConfig{JWKSURL: idp.srv.URL}
		c.ConnectionsMaxReauth = lifetime
	})
	setUser(t, b, "alice", "alice-pw", kadm.ScramSha256)
	setUser(t, b, "bob", "bob-pw", kadm.ScramSha256)
	if _, err := kadm.NewClient(newClient(t, b)).CreateTopic(testCtx(t), 1, 1, nil, "reauth"); err != nil {
		t.Fatal(err)
	}
	sessions := func() (n int, expired bool) { // SASL connections, and whether all have expired
		b.mu.Lock()
		defer b.mu.Unlock()
		expired = true
		for c := range b.mu.conns {
			if c.info.sasl != nil && c.info.sasl.done.Load() {
				n++
				expired = expired && c.info.sasl.sessionExpired(time.Now())
			}
		}
		return n, expired
	}
	dial := func() net.Conn {
		nc, err := net.Dial("tcp", b.listenerAddr("SASL_PLAINTEXT"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}

	// franz-go re-authenticates on its own: the same connection carries on.
	cl := secureClient(t, b, nil, "SASL_PLAINTEXT", scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism(), kgo.DefaultProduceTopic("reauth"))
	if err := produceOne(cl, "reauth", "1"); err != nil {
		t.Fatal(err)
	}
	n, _ := sessions()
	reauths := testutil.ToFloat64(b.metrics.saslReauths)
	waitCond(t, func() bool { _, expired := sessions(); return expired })
	if err := produceOne(cl, "reauth", "2"); err != nil {
		t.Fatalf("produce after the session's lifetime: %v", err)
	}
	if got := testutil.ToFloat64(b.metrics.saslReauths); got <= reauths {
		t.Errorf("re-authentications: %v, want more than %v", got, reauths)
	}
	if m, _ := sessions(); m != n {
		t.Errorf("SASL connections: %d, then %d (want the same connections)", n, m)
	}
	cl.Close()

	// A raw client that does not re-authenticate is closed on its next
	// request after the lifetime; SaslAuthenticate v1 told it the lifetime.
	nc := dial()
	_, au := saslLogin(t, nc, MechanismPlain, plainMsg("alice", "alice-pw"), 1)
	if au == nil || au.ErrorCode != 0 || au.SessionLifetimeMillis != lifetime.Milliseconds() {
		t.Fatalf("login: %+v, want lifetime %d ms", au, lifetime.Milliseconds())
	}
	if connClosed(nc, kmsg.NewPtrMetadataRequest(), 3) {
		t.Fatal("closed within the session")
	}
	waitCond(t, func() bool { _, expired := sessions(); return expired })
	if !connClosed(nc, kmsg.NewPtrMetadataRequest(), 4) {
		t.Fatal("a request after the session expired was answered")
	}

	// Re-authenticating after expiry, as the same user: served again.
	nc = dial()
	saslLogin(t, nc, MechanismPlain, plainMsg("alice", "alice-pw"), 1)
	waitCond(t, func() bool { _, expired := sessions(); return expired })
	if hs, au := saslLogin(t, nc, MechanismPlain, plainMsg("alice", "alice-pw"), 3); hs.ErrorCode != 0 || au.ErrorCode != 0 || au.SessionLifetimeMillis != lifetime.Milliseconds() {
		t.Fatalf("re-authentication: %+v %+v", hs, au)
	}
	if connClosed(nc, kmsg.NewPtrMetadataRequest(), 5) {
		t.Fatal("closed after re-authenticating")
	}
	// As another user: refused, closed. (On a new connection: on this one
	// a handshake within a second of the last re-authentication's start
	// is not one, TestSASLHandshakeStates.)
	nc = dial()
	saslLogin(t, nc, MechanismPlain, plainMsg("alice", "alice-pw"), 1)
	if _, au := saslLogin(t, nc, MechanismPlain, plainMsg("bob", "bob-pw"), 3); au == nil || au.ErrorCode != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("re-authentication as bob on alice's connection: %+v", au)
	}
	if !connClosed(nc, kmsg.NewPtrMetadataRequest(), 5) {
		t.Fatal("re-authentication as bob: connection not closed")
	}
	// With another enabled mechanism: the handshake is answered without
	// error and the connection closes (Kafka's REAUTH_BAD_MECHANISM).
	nc = dial()
	saslLogin(t, nc, MechanismPlain, plainMsg("alice", "alice-pw"), 1)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, MechanismOAuthBearer
	if hr := rawRequest(t, nc, hs, 3).(*kmsg.SASLHandshakeResponse); hr.ErrorCode != 0 {
		t.Fatalf("re-handshake with another mechanism: %+v", hr)
	}
	if !connClosed(nc, kmsg.NewPtrMetadataRequest(), 4) {
		t.Fatal("re-authentication with another mechanism: connection not closed")
	}

	// OAUTHBEARER: the session ends with the token if that is sooner.
	nc = dial()
	tok := idp.token("rsa-1", claimsFor("carol", time.Now().Add(time.Hour)))
	if _, au := saslLogin(t, nc, MechanismOAuthBearer, []byte("n,,\x01auth=Bearer "+tok+"\x01\x01"), 1); au == nil || au.ErrorCode != 0 || au.SessionLifetimeMillis != lifetime.Milliseconds() {
		t.Fatalf("OAUTHBEARER, token for 1h: %+v", au)
	}
	nc = dial()
	tok = idp.token("rsa-1", claimsFor("carol", time.Now().Add(time.Second)))
	if _, au := saslLogin(t, nc, MechanismOAuthBearer, []byte("n,,\x01auth=Bearer "+tok+"\x01\x01"), 1); au == nil || au.ErrorCode != 0 || au.SessionLifetimeMillis >= lifetime.Milliseconds() || au.SessionLifetimeMillis <= 0 {
		t.Fatalf("OAUTHBEARER, token for 1s: %+v, want a lifetime under %v", au, lifetime)
	}
}

// TestSASLNoReauthentication: without connections.max.reauth.ms the
// lifetime is 0, sessions do not expire, and a second handshake is
// ILLEGAL_SASL_STATE.
func TestSASLNoReauthentication(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
		}
	})
	setUser(t, b, "alice", "alice-pw", kadm.ScramSha256)
	nc, err := net.Dial("tcp", b.listenerAddr("SASL_PLAINTEXT"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, au := saslLogin(t, nc, MechanismPlain, plainMsg("alice", "alice-pw"), 1); au == nil || au.ErrorCode != 0 || au.SessionLifetimeMillis != 0 {
		t.Fatalf("login: %+v, want lifetime 0", au)
	}
	if hs, _ := saslLogin(t, nc, MechanismPlain, plainMsg("alice", "alice-pw"), 3); hs.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("second handshake: %+v", hs)
	}
}

// TestSASLHandshakeStates: a SaslHandshake in each state of a connection's
// authentication is answered as Kafka answers it. After a login that is not
// re-authenticated (a session that does not expire, or a second handshake
// within a second of the last re-authentication's start) it is
// ILLEGAL_SASL_STATE from KafkaApis and the connection stays; during a
// login or a re-authentication it is ILLEGAL_SASL_STATE and the connection
// closes; a re-authentication with a disabled mechanism is
// UNSUPPORTED_SASL_MECHANISM and closes. The connection used to close
// after every ILLEGAL_SASL_STATE.
func TestSASLHandshakeStates(t *testing.T) {
	listeners := func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
		}
		c.SASLMechanisms = []string{MechanismPlain, MechanismSCRAMSHA256}
	}
	plain := startBroker(t, "", listeners)
	reauth := startBroker(t, "", listeners, func(c *Config) { c.ConnectionsMaxReauth = time.Hour })
	for _, b := range []*Broker{plain, reauth} {
		setUser(t, b, "alice", "alice-pw", kadm.ScramSha256)
	}
	dial := func(b *Broker) net.Conn {
		nc, err := net.Dial("tcp", b.listenerAddr("SASL_PLAINTEXT"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	handshake := func(nc net.Conn, mech string, corr int32) int16 {
		t.Helper()
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, mech
		return rawRequest(t, nc, hs, corr).(*kmsg.SASLHandshakeResponse).ErrorCode
	}
	login := func(nc net.Conn, corr int32) {
		t.Helper()
		if hs, au := saslLogin(t, nc, MechanismPlain, plainMsg("alice", "alice-pw"), corr); hs.ErrorCode != 0 || au == nil || au.ErrorCode != 0 {
			t.Fatalf("login: %+v %+v", hs, au)
		}
	}

	// A session that does not expire: every later handshake is
	// ILLEGAL_SASL_STATE, and the connection carries on.
	nc := dial(plain)
	login(nc, 1)
	for corr := int32(3); corr < 5; corr++ {
		if code := handshake(nc, MechanismPlain, corr); code != kerr.IllegalSaslState.Code {
			t.Fatalf("handshake after login: %v, want ILLEGAL_SASL_STATE", kerr.ErrorForCode(code))
		}
	}
	if connClosed(nc, kmsg.NewPtrMetadataRequest(), 5) {
		t.Fatal("handshake after login closed the connection")
	}

	// During the login: ILLEGAL_SASL_STATE, closed.
	nc = dial(plain)
	if code := handshake(nc, MechanismPlain, 1); code != 0 {
		t.Fatalf("handshake: %v", kerr.ErrorForCode(code))
	}
	if code := handshake(nc, MechanismPlain, 2); code != kerr.IllegalSaslState.Code {
		t.Fatalf("second handshake during the login: %v, want ILLEGAL_SASL_STATE", kerr.ErrorForCode(code))
	}
	if !connClosed(nc, kmsg.NewPtrApiVersionsRequest(), 3) {
		t.Fatal("second handshake during the login: connection not closed")
	}

	// A session that expires: a re-authentication right after the login
	// (no earlier one), then a handshake within the second after it
	// started is not one: ILLEGAL_SASL_STATE, the connection carries on.
	nc = dial(reauth)
	login(nc, 1)
	login(nc, 3)
	if code := handshake(nc, MechanismPlain, 5); code != kerr.IllegalSaslState.Code {
		t.Fatalf("handshake within a second of the last re-authentication: %v, want ILLEGAL_SASL_STATE", kerr.ErrorForCode(code))
	}
	if connClosed(nc, kmsg.NewPtrMetadataRequest(), 6) {
		t.Fatal("handshake within a second of the last re-authentication closed the connection")
	}

	// During a re-authentication: ILLEGAL_SASL_STATE, closed.
	nc = dial(reauth)
	login(nc, 1)
	if code := handshake(nc, MechanismPlain, 3); code != 0 {
		t.Fatalf("re-authentication handshake: %v", kerr.ErrorForCode(code))
	}
	if code := handshake(nc, MechanismPlain, 4); code != kerr.IllegalSaslState.Code {
		t.Fatalf("handshake during the re-authentication: %v, want ILLEGAL_SASL_STATE", kerr.ErrorForCode(code))
	}
	if !connClosed(nc, kmsg.NewPtrMetadataRequest(), 5) {
		t.Fatal("handshake during the re-authentication: connection not closed")
	}

	// A re-authentication with a disabled mechanism: closed with
	// UNSUPPORTED_SASL_MECHANISM.
	nc = dial(reauth)
	login(nc, 1)
	if code := handshake(nc, MechanismGSSAPI, 3); code != kerr.UnsupportedSaslMechanism.Code {
		t.Fatalf("re-authentication with GSSAPI: %v, want UNSUPPORTED_SASL_MECHANISM", kerr.ErrorForCode(code))
	}
	if !connClosed(nc, kmsg.NewPtrMetadataRequest(), 4) {
		t.Fatal("re-authentication with a disabled mechanism: connection not closed")
	}
}

// TestSASLAuthenticateAfterLogin: a SaslAuthenticate after the login
// succeeded (not in a re-authentication), or on a listener without SASL,
// is ILLEGAL_SASL_STATE with Kafka's KafkaApis message, and the connection
// stays; it used to close.
func TestSASLAuthenticateAfterLogin(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
		}
	})
	setUser(t, b, "alice", "alice-pw", kadm.ScramSha256)
	for _, listener := range []string{"SASL_PLAINTEXT", "PLAINTEXT"} {
		nc, err := net.Dial("tcp", b.listenerAddr(listener))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		corr := int32(1)
		if listener == "SASL_PLAINTEXT" {
			if _, au := saslLogin(t, nc, MechanismPlain, plainMsg("alice", "alice-pw"), corr); au == nil || au.ErrorCode != 0 {
				t.Fatalf("login: %+v", au)
			}
			corr += 2
		}
		au := kmsg.NewPtrSASLAuthenticateRequest()
		au.Version, au.SASLAuthBytes = 1, plainMsg("alice", "alice-pw")
		ar := rawRequest(t, nc, au, corr).(*kmsg.SASLAuthenticateResponse)
		if ar.ErrorCode != kerr.IllegalSaslState.Code || ar.ErrorMessage == nil || *ar.ErrorMessage != "SaslAuthenticate request received after successful authentication" {
			t.Errorf("%s: SaslAuthenticate after login: %v %v, want ILLEGAL_SASL_STATE", listener, kerr.ErrorForCode(ar.ErrorCode), ar.ErrorMessage)
		}
		if connClosed(nc, kmsg.NewPtrMetadataRequest(), corr+1) {
			t.Errorf("%s: SaslAuthenticate after login closed the connection", listener)
		}
	}
}

// saslSessions reports, over b's authenticated SASL connections, whether
// every session has an end (bounded) and whether every one has ended.
func saslSessions(b *Broker) (bounded, expired bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bounded, expired = true, true
	for c := range b.mu.conns {
		if sc := c.info.sasl; sc != nil && sc.done.Load() {
			bounded = bounded && sc.expiry.Load() != 0
			expired = expired && sc.sessionExpired(time.Now())
		}
	}
	return bounded, expired
}

// TestSASLSessionExpiresWhateverTheVersion: as Kafka's SocketServer, a
// session ends (and the connection closes on its next request) also for a
// client that logged in with SaslAuthenticate v0 or raw tokens, which
// cannot re-authenticate; and an expiring credential (an OAUTHBEARER token)
// ends it also without connections.max.reauth.ms, the client being told
// the lifetime and allowed to re-authenticate.
func TestSASLSessionExpiresWhateverTheVersion(t *testing.T) {
	idp := newTestIdP(t)
	start := func(reauth time.Duration) *Broker {
		b := startBroker(t, "", func(c *Config) {
			c.Listeners = []Listener{
				{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
				{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
			}
			c.SASLMechanisms = []string{MechanismPlain, MechanismOAuthBearer}
			c.OAuthBearer = &OAuthBearerConfig{JWKSURL: idp.srv.URL}
			c.ConnectionsMaxReauth = reauth
		})
		setUser(t, b, "alice", "alice-pw", kadm.ScramSha256)
		return b
	}
	dial := func(b *Broker) net.Conn {
		nc, err := net.Dial("tcp", b.listenerAddr("SASL_PLAINTEXT"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	endsAndCloses := func(b *Broker, nc net.Conn, what string) {
		t.Helper()
		if bounded, _ := saslSessions(b); !bounded {
			t.Fatalf("%s: the session has no end", what)
		}
		waitCond(t, func() bool { _, expired := saslSessions(b); return expired })
		if !connClosed(nc, kmsg.NewPtrMetadataRequest(), 10) {
			t.Fatalf("%s: a request after the session expired was answered", what)
		}
	}

	b := start(time.Second)
	// SaslAuthenticate v0.
	nc := dial(b)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, MechanismPlain
	if hr := rawRequest(t, nc, hs, 1).(*kmsg.SASLHandshakeResponse); hr.ErrorCode != 0 {
		t.Fatalf("handshake: %+v", hr)
	}
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 0, plainMsg("alice", "alice-pw")
	if ar := rawRequest(t, nc, au, 2).(*kmsg.SASLAuthenticateResponse); ar.ErrorCode != 0 {
		t.Fatalf("SaslAuthenticate v0: %+v", ar)
	}
	endsAndCloses(b, nc, "SaslAuthenticate v0")

	// SaslHandshake v0: raw tokens.
	nc = dial(b)
	hs.Version = 0
	if hr := rawRequest(t, nc, hs, 1).(*kmsg.SASLHandshakeResponse); hr.ErrorCode != 0 {
		t.Fatalf("handshake v0: %+v", hr)
	}
	tok := plainMsg("alice", "alice-pw")
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(tok)))
	if _, err := nc.Write(append(frame, tok...)); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var answer [4]byte // PLAIN's empty token
	if _, err := io.ReadFull(nc, answer[:]); err != nil || answer != [4]byte{} {
		t.Fatalf("raw PLAIN answer %v: %v", answer, err)
	}
	endsAndCloses(b, nc, "raw tokens")

	// Without connections.max.reauth.ms, an OAUTHBEARER token's expiry.
	b = start(0)
	bearer := func(exp time.Duration) []byte {
		return []byte("n,,\x01auth=Bearer " + idp.token("rsa-1", claimsFor("carol", time.Now().Add(exp))) + "\x01\x01")
	}
	nc = dial(b)
	if _, ar := saslLogin(t, nc, MechanismOAuthBearer, bearer(2*time.Second), 1); ar == nil || ar.ErrorCode != 0 || ar.SessionLifetimeMillis <= 0 || ar.SessionLifetimeMillis > 2000 {
		t.Fatalf("OAUTHBEARER, token for 2s: %+v, want its lifetime", ar)
	}
	endsAndCloses(b, nc, "OAUTHBEARER")

	nc = dial(b)
	saslLogin(t, nc, MechanismOAuthBearer, bearer(2*time.Second), 1)
	if hr, ar := saslLogin(t, nc, MechanismOAuthBearer, bearer(time.Hour), 3); hr.ErrorCode != 0 || ar == nil || ar.ErrorCode != 0 || ar.SessionLifetimeMillis < (time.Hour-time.Minute).Milliseconds() {
		t.Fatalf("re-authentication with a fresh token: %+v %+v", hr, ar)
	}
	if connClosed(nc, kmsg.NewPtrMetadataRequest(), 5) {
		t.Fatal("closed after re-authenticating")
	}
}

// TestSASLLoginLiftsHandshakeDeadline: a SASL connection idle after its
// login outlives the login's deadline (handshakeTimeout after it
// connected), under which the reader waited for the request after
// SaslAuthenticate; it is closed only by connections.max.idle.ms, and not
// at all when that is negative (no limit, as Kafka's).
func TestSASLLoginLiftsHandshakeDeadline(t *testing.T) {
	var conns []net.Conn
	var connected time.Time                       // the last connection's
	for _, idle := range []time.Duration{0, -1} { // 0: the default, 10 minutes
		b := startBroker(t, "", func(c *Config) {
			c.Listeners = []Listener{
				{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
				{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
			}
			c.ConnectionsMaxIdle = idle
		})
		setUser(t, b, "alice", "alice-pw", kadm.ScramSha256)
		connected = time.Now()
		conns = append(conns, dialAsAlice(t, b))
	}
	waitCond(t, func() bool { return time.Since(connected) > handshakeTimeout+time.Second })
	for i, nc := range conns {
		if connClosed(nc, kmsg.NewPtrMetadataRequest(), 3) {
			t.Errorf("connection %d: closed at the login's deadline", i)
		}
	}
}

// TestSASLRequestDuringReauthentication: after a re-authentication's
// SaslHandshake, a request other than its SaslAuthenticate closes the
// connection (Kafka's authenticator: illegal SASL state), after its answer
// with ILLEGAL_SASL_STATE where the response has a top-level error code
// (illegalSASLState); the same sequence with the SaslAuthenticate first goes
// on. The same holds between a first login's handshake and its
// SaslAuthenticate.
func TestSASLRequestDuringReauthentication(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
		}
		c.ConnectionsMaxReauth = time.Hour
	})
	setUser(t, b, "alice", "alice-pw", kadm.ScramSha256)
	for _, authenticateFirst := range []bool{true, false} {
		nc := dialAsAlice(t, b)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, MechanismPlain
		if hr := rawRequest(t, nc, hs, 3).(*kmsg.SASLHandshakeResponse); hr.ErrorCode != 0 {
			t.Fatalf("re-authentication handshake: %v", kerr.ErrorForCode(hr.ErrorCode))
		}
		if authenticateFirst {
			au := kmsg.NewPtrSASLAuthenticateRequest()
			au.Version, au.SASLAuthBytes = 1, plainMsg("alice", "alice-pw")
			if ar := rawRequest(t, nc, au, 4).(*kmsg.SASLAuthenticateResponse); ar.ErrorCode != 0 {
				t.Fatalf("re-authentication: %v", kerr.ErrorForCode(ar.ErrorCode))
			}
			if connClosed(nc, kmsg.NewPtrMetadataRequest(), 5) {
				t.Fatal("closed after the re-authentication completed")
			}
		} else if !connClosed(nc, kmsg.NewPtrMetadataRequest(), 4) {
			t.Fatal("a Metadata request between the re-authentication's handshake and its SaslAuthenticate was answered")
		}
	}
	answeredThenClosed := func(nc net.Conn, what string) {
		t.Helper()
		dc := kmsg.NewPtrDescribeClusterRequest()
		dc.Version = 1
		resp, err := roundTrip(nc, dc, 9, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: DescribeCluster not answered: %v", what, err)
		}
		if code := resp.(*kmsg.DescribeClusterResponse).ErrorCode; code != kerr.IllegalSaslState.Code {
			t.Fatalf("%s: DescribeCluster answered %v, want ILLEGAL_SASL_STATE", what, kerr.ErrorForCode(code))
		}
		if !connClosed(nc, kmsg.NewPtrApiVersionsRequest(), 10) {
			t.Fatalf("%s: the connection stayed open after ILLEGAL_SASL_STATE", what)
		}
	}
	// A re-authentication's handshake, then a request with a top-level
	// error code.
	nc := dialAsAlice(t, b)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, MechanismPlain
	if hr := rawRequest(t, nc, hs, 3).(*kmsg.SASLHandshakeResponse); hr.ErrorCode != 0 {
		t.Fatalf("re-authentication handshake: %v", kerr.ErrorForCode(hr.ErrorCode))
	}
	answeredThenClosed(nc, "during a re-authentication")
	dial := func() net.Conn {
		t.Helper()
		nc, err := net.Dial("tcp", b.listenerAddr("SASL_PLAINTEXT"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	// A first login's handshake, then the same.
	nc = dial()
	if hr := rawRequest(t, nc, hs, 1).(*kmsg.SASLHandshakeResponse); hr.ErrorCode != 0 {
		t.Fatalf("handshake: %v", kerr.ErrorForCode(hr.ErrorCode))
	}
	answeredThenClosed(nc, "before the first SaslAuthenticate")
	// Before any handshake: closed unanswered, as Kafka.
	dc := kmsg.NewPtrDescribeClusterRequest()
	dc.Version = 1
	if !connClosed(dial(), dc, 1) {
		t.Fatal("a DescribeCluster before any SASL handshake was answered")
	}
}
