package broker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// testIdP is an identity provider: signing keys, and their JWKS served
// over HTTP on loopback.
type testIdP struct {
	t       testing.TB
	mu      sync.Mutex
	keys    map[string]any // kid → private key
	fetches atomic.Int32
	srv     *httptest.Server
}

func newTestIdP(t testing.TB) *testIdP {
	p := &testIdP{t: t, keys: map[string]any{}}
	p.addRSA("rsa-1")
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write(p.jwks())
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *testIdP) addRSA(kid string) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.keys[kid] = k
	p.mu.Unlock()
}

func (p *testIdP) addEC(kid string) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.keys[kid] = k
	p.mu.Unlock()
}

func (p *testIdP) jwks() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	var set jose.JSONWebKeySet
	for kid, k := range p.keys {
		var pub any
		alg := string(jose.RS256)
		switch k := k.(type) {
		case *rsa.PrivateKey:
			pub = &k.PublicKey
		case *ecdsa.PrivateKey:
			pub, alg = &k.PublicKey, string(jose.ES256)
		}
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: pub, KeyID: kid, Algorithm: alg, Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		p.t.Fatal(err)
	}
	return b
}

// token signs claims with key kid.
func (p *testIdP) token(kid string, claims map[string]any) string {
	p.mu.Lock()
	k := p.keys[kid]
	p.mu.Unlock()
	alg := jose.RS256
	if _, ok := k.(*ecdsa.PrivateKey); ok {
		alg = jose.ES256
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: k}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		p.t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		p.t.Fatal(err)
	}
	return tok
}

func claimsFor(sub string, exp time.Time) map[string]any {
	return map[string]any{"sub": sub, "iss": "https://idp.test", "aud": []string{"kafka"}, "exp": exp.Unix(), "iat": time.Now().Unix()}
}

func unsecuredToken(claims map[string]any) string {
	h, _ := json.Marshal(map[string]string{"alg": "none"})
	c, _ := json.Marshal(claims)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c) + "."
}

// TestOAuthValidator: signatures (RSA, ECDSA), a rotated key found by a
// refetch, expiry with clock skew, issuer, audience, the subject claim,
// alg none refused, the unsecured mode, and the GS2 message.
func TestOAuthValidator(t *testing.T) {
	idp := newTestIdP(t)
	v, err := newOAuthValidator(OAuthBearerConfig{JWKSURL: idp.srv.URL, ExpectedIssuer: "https://idp.test", ExpectedAudience: []string{"kafka", "other"}, JWKSMinRefetch: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	check := func(name, tok, want string) {
		t.Helper()
		got, _, err := v.validate(ctx, tok)
		switch {
		case want == "" && err == nil:
			t.Errorf("%s: accepted as %q", name, got)
		case want != "" && (err != nil || got != want):
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	check("rsa", idp.token("rsa-1", claimsFor("alice", now.Add(time.Hour))), "alice")
	idp.addEC("ec-2") // rotated in after the first fetch
	check("ec, new key", idp.token("ec-2", claimsFor("bob", now.Add(time.Hour))), "bob")
	check("expired", idp.token("rsa-1", claimsFor("alice", now.Add(-time.Minute))), "")
	check("expired within skew", idp.token("rsa-1", claimsFor("alice", now.Add(-10*time.Second))), "alice")
	c := claimsFor("alice", now.Add(time.Hour))
	c["iss"] = "https://evil.test"
	check("issuer", idp.token("rsa-1", c), "")
	c = claimsFor("alice", now.Add(time.Hour))
	c["aud"] = "billing"
	check("audience", idp.token("rsa-1", c), "")
	c["aud"] = "other"
	check("audience (string, second expected)", idp.token("rsa-1", c), "alice")
	c = claimsFor("", now.Add(time.Hour))
	check("no subject", idp.token("rsa-1", c), "")
	c = claimsFor("alice", now)
	delete(c, "exp")
	check("no exp", idp.token("rsa-1", c), "")
	check("unknown key", idp.tokenOther(t), "")
	tok := idp.token("rsa-1", claimsFor("alice", now.Add(time.Hour)))
	check("tampered", tok[:len(tok)-4]+"AAAA", "")
	check("alg none", unsecuredToken(claimsFor("alice", now.Add(time.Hour))), "")
	check("garbage", "not.a.token", "")

	// Tokens naming unknown keys do not hammer the provider: one refetch
	// per JWKSMinRefetch (10 s by default).
	rv, err := newOAuthValidator(OAuthBearerConfig{JWKSURL: idp.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	other := &testIdP{t: t, keys: map[string]any{}}
	other.addRSA("unknown-kid")
	before := idp.fetches.Load()
	for range 20 {
		if _, _, err := rv.validate(ctx, other.token("unknown-kid", claimsFor("x", now.Add(time.Hour)))); err == nil {
			t.Fatal("a token of an unknown key: accepted")
		}
	}
	if n := idp.fetches.Load() - before; n != 1 {
		t.Errorf("20 tokens of an unknown key: %d JWKS fetches, want 1", n)
	}

	// The JWKS from a file.
	file := filepath.Join(t.TempDir(), "jwks.json")
	os.WriteFile(file, idp.jwks(), 0o644)
	fv, err := newOAuthValidator(OAuthBearerConfig{JWKSURL: "file://" + file})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := fv.validate(ctx, idp.token("ec-2", claimsFor("carol", now.Add(time.Hour)))); err != nil || got != "carol" {
		t.Errorf("file JWKS: %q %v", got, err)
	}

	// Unsecured: alg none only.
	uv, err := newOAuthValidator(OAuthBearerConfig{Unsecured: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := uv.validate(ctx, unsecuredToken(claimsFor("dave", now.Add(time.Hour)))); err != nil || got != "dave" {
		t.Errorf("unsecured: %q %v", got, err)
	}
	if _, _, err := uv.validate(ctx, unsecuredToken(claimsFor("dave", now.Add(-time.Hour)))); err == nil {
		t.Error("unsecured, expired: accepted")
	}
	if _, _, err := uv.validate(ctx, tok); err == nil {
		t.Error("unsecured mode, a signed token: accepted (alg is not none)")
	}
	for _, bad := range []OAuthBearerConfig{{}, {Unsecured: true, JWKSURL: idp.srv.URL}, {JWKSURL: "ftp://x"}} {
		if _, err := newOAuthValidator(bad); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}

	// The client message (RFC 7628).
	good := idp.token("rsa-1", claimsFor("alice", now.Add(time.Hour)))
	for msg, want := range map[string]string{
		"n,,\x01auth=Bearer " + good + "\x01\x01":                            "alice",
		"n,a=alice,\x01host=x\x01auth=Bearer " + good + "\x01port=1\x01\x01": "alice",
		"n,a=bob,\x01auth=Bearer " + good + "\x01\x01":                       "",
		"n,,\x01auth=Basic " + good + "\x01\x01":                             "",
		"n,,\x01auth=Bearer " + good + "\x01":                                "",
		"p=x,,\x01auth=Bearer " + good + "\x01\x01":                          "",
		"n,,\x01\x01": "",
		"":            "",
	} {
		x := &oauthExchange{v: v}
		_, done, user, err := x.step([]byte(msg))
		if (want != "") != (err == nil && done) || user != want {
			t.Errorf("message %q: %v %q %v, want %q", msg, done, user, err, want)
		}
		if _, _, _, err := x.step([]byte(msg)); err == nil {
			t.Errorf("message %q: a second step accepted", msg)
		}
	}
}

// tokenOther is a token signed by a key the provider never published.
func (p *testIdP) tokenOther(t *testing.T) string {
	other := &testIdP{t: t, keys: map[string]any{}}
	other.addRSA("rsa-1") // same kid, another key
	return other.token("rsa-1", claimsFor("mallory", time.Now().Add(time.Hour)))
}

// TestOAuthBearerClients: franz-go over SASL_PLAINTEXT with OAUTHBEARER
// tokens from an identity provider: produce and consume as the token's
// subject, which ACLs name (User:alice); a token of an unknown key, or
// expired, is SASL_AUTHENTICATION_FAILED.
func TestOAuthBearerClients(t *testing.T) {
	idp := newTestIdP(t)
	b := startBroker(t, "", func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
		}
		c.SASLMechanisms = []string{MechanismOAuthBearer, MechanismSCRAMSHA256}
		c.OAuthBearer = &OAuthBearerConfig{JWKSURL: idp.srv.URL, ExpectedAudience: []string{"kafka"}}
		c.Authorizer = AuthorizerConfig{Enabled: true, SuperUsers: []string{"User:ANONYMOUS"}}
	})
	adm := kadm.NewClient(newClient(t, b))
	if _, err := adm.CreateTopic(testCtx(t), 1, 1, nil, "oauth"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateACLs(testCtx(t), kadm.NewACLs().Topics("oauth").Allow("User:alice").Operations(kadm.OpWrite, kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	tokenClient := func(tok string, opts ...kgo.Opt) *kgo.Client {
		return secureClient(t, b, nil, "SASL_PLAINTEXT", oauth.Auth{Token: tok}.AsMechanism(), opts...)
	}
	alice := tokenClient(idp.token("rsa-1", claimsFor("alice", time.Now().Add(time.Hour))),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"oauth": {0: kgo.NewOffset().AtStart()}}))
	if err := produceOne(alice, "oauth", "from-alice"); err != nil {
		t.Fatalf("alice produces: %v", err)
	}
	if rec, err := consumeOne(alice); err != nil || string(rec.Value) != "from-alice" {
		t.Fatalf("alice consumes: %v %v", rec, err)
	}
	// bob has a good token but no ACL.
	bob := tokenClient(idp.token("rsa-1", claimsFor("bob", time.Now().Add(time.Hour))))
	if err := produceOne(bob, "oauth", "x"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("bob produces: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	for name, tok := range map[string]string{
		"unknown key": idp.tokenOther(t),
		"expired":     idp.token("rsa-1", claimsFor("alice", time.Now().Add(-time.Hour))),
	} {
		// RFC 7628: the server's error message, then, at the client's
		// %x01, the failure with it as the message (Kafka's; franz-go's
		// own TestOAuthAuth looks for invalid_token).
		if err := tokenClient(tok).Ping(testCtx(t)); !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), "invalid_token") {
			t.Errorf("%s: %v, want SASL_AUTHENTICATION_FAILED with invalid_token", name, err)
		}
	}
}
