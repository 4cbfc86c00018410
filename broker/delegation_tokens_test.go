package broker

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// startTokenBroker is startSecureBroker with delegation tokens on.
func startTokenBroker(t *testing.T, pki *testPKI, mod func(*Config)) *Broker {
	t.Helper()
	return startBroker(t, "", func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
			{Name: "SSL", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSSL},
		}
		c.TLS = &tls.Config{Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool, ClientAuth: tls.VerifyClientCertIfGiven}
		c.DelegationTokenSecretKey = "a secret shared by every broker"
		if mod != nil {
			mod(c)
		}
	})
}

func scramAs(user, pass string) sasl.Mechanism {
	return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
}

// tokenAuth is a SCRAM login with a delegation token, as a job given the
// token would log in (KIP-48: the id as user, the HMAC in base64 as
// password, tokenauth=true).
func tokenAuth(tok kadm.DelegationToken, sha256 bool) sasl.Mechanism {
	a := scram.Auth{User: tok.TokenID, Pass: base64.StdEncoding.EncodeToString(tok.HMAC), IsToken: true}
	if sha256 {
		return a.AsSha256Mechanism()
	}
	return a.AsSha512Mechanism()
}

// TestDelegationTokens: alice (SCRAM) creates a token with bob as renewer;
// a client logging in with the token (SCRAM-SHA-256 and -512) produces and
// consumes as alice, and may not use the token APIs itself; PLAINTEXT and
// certificate-less SSL clients may not either. Describe filters by owner;
// bob renews it, carol (neither owner nor renewer) may not; expiring it
// with -1 removes it and its logins fail. A token created for another
// owner (KIP-373) logs in as that owner. A wrong HMAC does not log in.
func TestDelegationTokens(t *testing.T) {
	pki := newTestPKI(t)
	b := startTokenBroker(t, pki, nil)
	for _, u := range []string{"alice", "bob", "carol"} {
		setUser(t, b, u, u+"-pw", kadm.ScramSha512)
	}
	ctx := testCtx(t)
	adm := func(m sasl.Mechanism, opts ...kgo.Opt) *kadm.Client {
		return kadm.NewClient(secureClient(t, b, pki, "SASL_PLAINTEXT", m, opts...))
	}
	alice, bob, carol := adm(scramAs("alice", "alice-pw")), adm(scramAs("bob", "bob-pw")), adm(scramAs("carol", "carol-pw"))

	tok, err := alice.CreateDelegationToken(ctx, kadm.CreateDelegationToken{Renewers: []kadm.Principal{{Type: "User", Name: "bob"}}})
	if err != nil {
		t.Fatal(err)
	}
	if tok.Owner.Name != "alice" || tok.TokenRequesterPrincipal.Name != "alice" || tok.TokenID == "" || len(tok.HMAC) != 64 {
		t.Fatalf("created %+v", tok)
	}
	if d := tok.ExpiryTimestamp.Sub(tok.IssueTimestamp); d != 24*time.Hour {
		t.Errorf("expiry - issue = %v, want the default 24h", d)
	}
	if d := tok.MaxTimestamp.Sub(tok.IssueTimestamp); d != 7*24*time.Hour {
		t.Errorf("max - issue = %v, want the default 7 days", d)
	}

	// The token logs in, with either SCRAM mechanism, as alice.
	createTopic(t, b, "tok", 1, nil)
	for _, sha256 := range []bool{false, true} {
		cl := secureClient(t, b, pki, "SASL_PLAINTEXT", tokenAuth(tok, sha256), kgo.DefaultProduceTopic("tok"))
		if err := cl.ProduceSync(ctx, kgo.StringRecord("from a token")).FirstErr(); err != nil {
			t.Fatalf("produce with the token (sha256 %v): %v", sha256, err)
		}
		if _, err := kadm.NewClient(cl).DescribeDelegationTokens(ctx); !errors.Is(err, kerr.DelegationTokenRequestNotAllowed) {
			t.Errorf("token APIs on a token login: %v, want DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", err)
		}
	}
	checkSASLPrincipals(t, b, "alice", func(sc *saslConn) bool { return sc.tokenAuth.Load() })

	// Listeners without a client identity may not use tokens.
	plain := kadm.NewClient(newClient(t, b))
	if _, err := plain.CreateDelegationToken(ctx, kadm.CreateDelegationToken{}); !errors.Is(err, kerr.DelegationTokenRequestNotAllowed) {
		t.Errorf("PLAINTEXT create: %v, want DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", err)
	}
	anonSSL := kadm.NewClient(secureClient(t, b, pki, "SSL", nil))
	if _, err := anonSSL.DescribeDelegationTokens(ctx); !errors.Is(err, kerr.DelegationTokenRequestNotAllowed) {
		t.Errorf("SSL without a certificate: %v, want DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", err)
	}

	// Describe: by owner, renewer; an unrelated owner filter finds none.
	for _, c := range []struct {
		name   string
		owners []kadm.Principal
		want   int
	}{
		{"all", nil, 1},
		{"owner alice", []kadm.Principal{{Type: "User", Name: "alice"}}, 1},
		{"renewer bob", []kadm.Principal{{Type: "User", Name: "bob"}}, 1},
		{"nobody", []kadm.Principal{{Type: "User", Name: "nobody"}}, 0},
	} {
		got, err := alice.DescribeDelegationTokens(ctx, c.owners...)
		if err != nil {
			t.Fatalf("describe %s: %v", c.name, err)
		}
		if len(got) != c.want {
			t.Fatalf("describe %s: %d tokens, want %d", c.name, len(got), c.want)
		}
		if c.want == 1 && (!bytes.Equal(got[0].HMAC, tok.HMAC) || got[0].TokenID != tok.TokenID || len(got[0].Renewers) != 1 || got[0].Renewers[0].Name != "bob") {
			t.Errorf("describe %s: %+v", c.name, got[0])
		}
	}

	// Renew: bob may, carol may not; an unknown HMAC is not found.
	exp, err := bob.RenewDelegationToken(ctx, tok.HMAC, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(exp); d <= 0 || d > time.Hour {
		t.Errorf("renewed for 1h: expires in %v", d)
	}
	if got, _ := alice.DescribeDelegationTokens(ctx); len(got) != 1 || !got[0].ExpiryTimestamp.Equal(exp) {
		t.Errorf("after renewal: %+v, want expiry %v", got, exp)
	}
	if _, err := carol.RenewDelegationToken(ctx, tok.HMAC, time.Hour); !errors.Is(err, kerr.DelegationTokenOwnerMismatch) {
		t.Errorf("carol renews: %v, want DELEGATION_TOKEN_OWNER_MISMATCH", err)
	}
	if _, err := alice.RenewDelegationToken(ctx, []byte("not a token"), time.Hour); !errors.Is(err, kerr.DelegationTokenNotFound) {
		t.Errorf("renew an unknown HMAC: %v, want DELEGATION_TOKEN_NOT_FOUND", err)
	}

	// A wrong HMAC does not log in.
	bad := tok
	bad.HMAC = bytes.Repeat([]byte{1}, 64)
	if err := secureClient(t, b, pki, "SASL_PLAINTEXT", tokenAuth(bad, false)).Ping(ctx); err == nil {
		t.Error("a wrong HMAC logged in")
	}

	// KIP-373: alice creates a token owned by carol (no authorizer here:
	// allowed); it logs in as carol.
	forCarol, err := alice.CreateDelegationToken(ctx, kadm.CreateDelegationToken{Owner: &kadm.Principal{Name: "carol"}})
	if err != nil {
		t.Fatal(err)
	}
	if forCarol.Owner.Name != "carol" || forCarol.TokenRequesterPrincipal.Name != "alice" {
		t.Fatalf("token for carol: %+v", forCarol)
	}
	if err := secureClient(t, b, pki, "SASL_PLAINTEXT", tokenAuth(forCarol, false)).Ping(ctx); err != nil {
		t.Fatalf("carol's token: %v", err)
	}

	// Expire with -1: gone; its logins fail.
	if _, err := carol.ExpireDelegationToken(ctx, tok.HMAC, -time.Millisecond); !errors.Is(err, kerr.DelegationTokenOwnerMismatch) {
		t.Errorf("carol expires alice's token: %v, want DELEGATION_TOKEN_OWNER_MISMATCH", err)
	}
	if _, err := alice.ExpireDelegationToken(ctx, tok.HMAC, -time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// alice still sees carol's token (she requested it), not hers.
	if got, _ := alice.DescribeDelegationTokens(ctx, kadm.Principal{Type: "User", Name: "alice"}); len(got) != 1 || got[0].TokenID != forCarol.TokenID {
		t.Errorf("after expiring: %+v, want carol's token alone", got)
	}
	if err := secureClient(t, b, pki, "SASL_PLAINTEXT", tokenAuth(tok, false)).Ping(ctx); err == nil {
		t.Error("an expired token logged in")
	}
}

// TestDelegationTokenLifetimes: a token past its max time no longer logs
// in, cannot be renewed (DELEGATION_TOKEN_EXPIRED), and the metadata
// leader's sweep removes it. Without a secret key the token APIs answer
// DELEGATION_TOKEN_AUTH_DISABLED.
func TestDelegationTokenLifetimes(t *testing.T) {
	pki := newTestPKI(t)
	b := startTokenBroker(t, pki, func(c *Config) { c.DelegationTokenExpiryCheckInterval = 50 * time.Millisecond })
	setUser(t, b, "alice", "alice-pw", kadm.ScramSha256)
	ctx := testCtx(t)
	alice := kadm.NewClient(secureClient(t, b, pki, "SASL_PLAINTEXT", scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism()))

	tok, err := alice.CreateDelegationToken(ctx, kadm.CreateDelegationToken{MaxLifetime: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !tok.MaxTimestamp.Equal(tok.IssueTimestamp.Add(time.Millisecond)) || tok.ExpiryTimestamp.After(tok.MaxTimestamp) {
		t.Fatalf("a 1 ms token: issue %v expiry %v max %v", tok.IssueTimestamp, tok.ExpiryTimestamp, tok.MaxTimestamp)
	}
	// Wait until the clock has passed its max time (not a sleep for
	// ordering: the token's lifetime is wall-clock time).
	waitCond(t, func() bool { return time.Now().After(tok.MaxTimestamp.Add(time.Millisecond)) })
	if err := secureClient(t, b, pki, "SASL_PLAINTEXT", tokenAuth(tok, true)).Ping(ctx); err == nil {
		t.Error("an expired token logged in")
	}
	// Renewing races the sweep: expired or already gone.
	if _, err := alice.RenewDelegationToken(ctx, tok.HMAC, time.Hour); !errors.Is(err, kerr.DelegationTokenExpired) && !errors.Is(err, kerr.DelegationTokenNotFound) {
		t.Errorf("renew an expired token: %v, want DELEGATION_TOKEN_EXPIRED", err)
	}
	waitCond(t, func() bool { return len(b.meta.State().DelegationTokens()) == 0 })

	off := startBroker(t, "", func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
		}
	})
	setUser(t, off, "alice", "alice-pw", kadm.ScramSha256)
	cl, err := kgo.NewClient(kgo.SeedBrokers(off.listenerAddr("SASL_PLAINTEXT")), kgo.SASL(scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateDelegationToken(context.Background(), kadm.CreateDelegationToken{}); !errors.Is(err, kerr.DelegationTokenAuthDisabled) {
		t.Errorf("without a secret key: %v, want DELEGATION_TOKEN_AUTH_DISABLED", err)
	}
}

// checkSASLPrincipals fails the test unless b has connections logged in
// that match (SASL done and which), all as principal.
func checkSASLPrincipals(t *testing.T, b *Broker, principal string, which func(*saslConn) bool) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for c := range b.mu.conns {
		if sc := c.info.sasl; sc != nil && sc.done.Load() && which(sc) {
			n++
			if c.info.Principal != principal {
				t.Errorf("a logged-in connection's principal is %q, want %q", c.info.Principal, principal)
			}
		}
	}
	if n == 0 {
		t.Error("no such login on the broker")
	}
}

// saslLoginWith runs SaslHandshake v1 and the SaslAuthenticate v1 steps of
// m on nc, from correlation id corr on; it returns the last answer (nil if
// the handshake failed) and the next correlation id.
func saslLoginWith(t *testing.T, nc net.Conn, m sasl.Mechanism, corr int32) (*kmsg.SASLAuthenticateResponse, int32) {
	t.Helper()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, m.Name()
	if hr := rawRequest(t, nc, hs, corr).(*kmsg.SASLHandshakeResponse); hr.ErrorCode != 0 {
		t.Fatalf("handshake %s: %v", m.Name(), kerr.ErrorForCode(hr.ErrorCode))
	}
	corr++
	sess, msg, err := m.Authenticate(testCtx(t), nc.RemoteAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	for {
		au := kmsg.NewPtrSASLAuthenticateRequest()
		au.Version, au.SASLAuthBytes = 1, msg
		ar := rawRequest(t, nc, au, corr).(*kmsg.SASLAuthenticateResponse)
		corr++
		if ar.ErrorCode != 0 {
			return ar, corr
		}
		done, out, err := sess.Challenge(ar.SASLAuthBytes)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return ar, corr
		}
		msg = out
	}
}

// TestDelegationTokenReauthentication: a re-authentication (KIP-368) keeps
// the principal but may change the credential, and the token APIs follow
// the current one, as Kafka's channel takes the new login's principal with
// its tokenAuthenticated flag: a password login that re-authenticates with
// a token of the same owner may no longer use them (the flag was kept from
// the first login, so the token could mint tokens), and a token login that
// re-authenticates with the password may. A token of another owner is
// refused with Kafka's SASL_AUTHENTICATION_FAILED ("Cannot change
// principals during re-authentication") and the connection closes.
func TestDelegationTokenReauthentication(t *testing.T) {
	pki := newTestPKI(t)
	b := startTokenBroker(t, pki, func(c *Config) { c.ConnectionsMaxReauth = time.Hour })
	for _, u := range []string{"alice", "bob"} {
		setUser(t, b, u, u+"-pw", kadm.ScramSha512)
	}
	ctx := testCtx(t)
	tokenOf := func(user string) kadm.DelegationToken {
		adm := kadm.NewClient(secureClient(t, b, pki, "SASL_PLAINTEXT", scramAs(user, user+"-pw")))
		tok, err := adm.CreateDelegationToken(ctx, kadm.CreateDelegationToken{})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	aliceTok, bobTok := tokenOf("alice"), tokenOf("bob")
	dial := func() net.Conn {
		nc, err := net.Dial("tcp", b.listenerAddr("SASL_PLAINTEXT"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	login := func(nc net.Conn, m sasl.Mechanism, corr int32, what string) int32 {
		t.Helper()
		ar, next := saslLoginWith(t, nc, m, corr)
		if ar.ErrorCode != 0 {
			t.Fatalf("%s: %v %v", what, kerr.ErrorForCode(ar.ErrorCode), ar.ErrorMessage)
		}
		return next
	}
	createToken := func(nc net.Conn, corr int32) int16 {
		t.Helper()
		return rawRequest(t, nc, kmsg.NewPtrCreateDelegationTokenRequest(), corr).(*kmsg.CreateDelegationTokenResponse).ErrorCode
	}

	// Password, then alice's token.
	nc := dial()
	corr := login(nc, scramAs("alice", "alice-pw"), 1, "password login")
	corr = login(nc, tokenAuth(aliceTok, false), corr, "re-authentication with alice's token")
	if code := createToken(nc, corr); code != kerr.DelegationTokenRequestNotAllowed.Code {
		t.Errorf("CreateDelegationToken after re-authenticating with a token: %v, want DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", kerr.ErrorForCode(code))
	}

	// The token, then the password.
	nc = dial()
	corr = login(nc, tokenAuth(aliceTok, false), 1, "token login")
	if code := createToken(nc, corr); code != kerr.DelegationTokenRequestNotAllowed.Code {
		t.Fatalf("CreateDelegationToken on a token login: %v, want DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", kerr.ErrorForCode(code))
	}
	corr = login(nc, scramAs("alice", "alice-pw"), corr+1, "re-authentication with the password")
	if code := createToken(nc, corr); code != 0 {
		t.Errorf("CreateDelegationToken after re-authenticating with the password: %v", kerr.ErrorForCode(code))
	}

	// Bob's token on alice's connection.
	nc = dial()
	corr = login(nc, scramAs("alice", "alice-pw"), 1, "password login")
	ar, corr := saslLoginWith(t, nc, tokenAuth(bobTok, false), corr)
	const want = "Cannot change principals during re-authentication from User.alice: User.bob"
	msg := ""
	if ar.ErrorMessage != nil {
		msg = *ar.ErrorMessage
	}
	if ar.ErrorCode != kerr.SaslAuthenticationFailed.Code || msg != want {
		t.Errorf("re-authentication with bob's token: %v %q, want SASL_AUTHENTICATION_FAILED %q", kerr.ErrorForCode(ar.ErrorCode), msg, want)
	}
	if !connClosed(nc, kmsg.NewPtrMetadataRequest(), corr) {
		t.Error("re-authentication as another principal: connection not closed")
	}
}
