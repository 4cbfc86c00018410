package broker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// testTokenEndpoint is an identity provider's token endpoint: the client
// credentials grant for one client, issuing tokens of idp's key for sub.
type testTokenEndpoint struct {
	srv              *httptest.Server
	grants, refusals atomic.Int32
}

func newTestTokenEndpoint(t *testing.T, idp *testIdP, clientID, secret, scope, sub string, lifetime time.Duration) *testTokenEndpoint {
	return newTestTokenEndpointWith(t, idp, clientID, secret, scope, sub, lifetime, true)
}

// newTestTokenEndpointWith may leave expires_in out of its answers (RFC
// 6749 only recommends it).
func newTestTokenEndpointWith(t *testing.T, idp *testIdP, clientID, secret, scope, sub string, lifetime time.Duration, expiresIn bool) *testTokenEndpoint {
	e := &testTokenEndpoint{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, pw, ok := r.BasicAuth()
		if r.Method != http.MethodPost || r.ParseForm() != nil || r.PostForm.Get("grant_type") != "client_credentials" ||
			!ok || id != clientID || pw != secret || r.PostForm.Get("scope") != scope {
			e.refusals.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		e.grants.Add(1)
		w.Header().Set("Content-Type", "application/json")
		answer := map[string]any{"access_token": idp.token("rsa-1", claimsFor(sub, time.Now().Add(lifetime))), "token_type": "Bearer"}
		if expiresIn {
			answer["expires_in"] = int(lifetime.Seconds())
		}
		json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// TestOAuthInterBroker: two brokers whose only listener is SASL_PLAINTEXT
// with OAUTHBEARER alone, the authorizer on and min.insync.replicas=2: they
// log in to each other with access tokens from the identity provider's
// token endpoint (client credentials, the token reused across logins) or
// from a token file, as the principal of the token's subject (a super
// user), and every record produced with acks=all reaches both replicas. A
// wrong client secret is refused by the endpoint, and replication does not
// log in.
func TestOAuthInterBroker(t *testing.T) {
	idp := newTestIdP(t)
	pair := func(t *testing.T, ib *InterBrokerSASLConfig) []*Broker {
		return startPair(t, func(c *Config) {
			c.Listeners = []Listener{{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext}}
			c.SASLMechanisms = []string{MechanismOAuthBearer}
			c.OAuthBearer = &OAuthBearerConfig{JWKSURL: idp.srv.URL, ExpectedIssuer: "https://idp.test", ExpectedAudience: []string{"kafka"}}
			c.InterBrokerSASL = ib
			c.Authorizer = AuthorizerConfig{Enabled: true, SuperUsers: []string{"User:broker-svc", "User:ops"}}
		})
	}
	replicate := func(t *testing.T, brokers []*Broker, topic string) {
		t.Helper()
		ops := secureClient(t, brokers[0], nil, "SASL_PLAINTEXT", oauth.Auth{Token: idp.token("rsa-1", claimsFor("ops", time.Now().Add(time.Hour)))}.AsMechanism(),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(60*time.Second), kgo.RequestRetries(50))
		createPairTopic(t, kadm.NewClient(ops), topic, map[string]*string{"min.insync.replicas": ptr("2")})
		produced := produceAll(t, ops, makeRecords(topic, 200, "oauth"))
		for p, recs := range produced {
			end := recs[len(recs)-1].Offset + 1
			for _, b := range brokers {
				waitCond(t, func() bool {
					topic, ok := b.meta.State().Topic(topic)
					if !ok {
						return false
					}
					part, err := b.store.openLocked(topic, p)
					return err == nil && part.log.LogEndOffset() >= end
				})
			}
		}
	}

	t.Run("token endpoint", func(t *testing.T) {
		ep := newTestTokenEndpoint(t, idp, "sediment-brokers", "s3cret", "kafka replication", "broker-svc", time.Hour)
		brokers := pair(t, &InterBrokerSASLConfig{Mechanism: MechanismOAuthBearer, User: "sediment-brokers", Password: "s3cret",
			TokenEndpoint: ep.srv.URL, Scope: "kafka replication"})
		replicate(t, brokers, "oauth-replicated")
		// Each broker asked for a token and reused it for its other logins.
		if g := ep.grants.Load(); g < 1 || g > 2 {
			t.Fatalf("%d tokens granted to two brokers, want one or two (reused across logins)", g)
		}
		if ep.refusals.Load() != 0 {
			t.Fatalf("%d token requests refused", ep.refusals.Load())
		}
	})

	t.Run("token file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(path, []byte(idp.token("rsa-1", claimsFor("broker-svc", time.Now().Add(time.Hour)))+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		brokers := pair(t, &InterBrokerSASLConfig{Mechanism: MechanismOAuthBearer, TokenEndpoint: "file://" + path})
		replicate(t, brokers, "oauth-file")
	})

	// Without expires_in the token's own exp says how long it is reused: a
	// token of an hour serves both logins, one expiring within the minute
	// of margin is replaced at each.
	for _, tc := range []struct {
		lifetime time.Duration
		grants   int32
	}{{time.Hour, 1}, {30 * time.Second, 2}} {
		t.Run(fmt.Sprintf("no expires_in, token of %v", tc.lifetime), func(t *testing.T) {
			ep := newTestTokenEndpointWith(t, idp, "sediment-brokers", "s3cret", "", "broker-svc", tc.lifetime, false)
			b := startBroker(t, "", func(c *Config) {
				c.Listeners = []Listener{{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext}}
				c.SASLMechanisms = []string{MechanismOAuthBearer}
				c.OAuthBearer = &OAuthBearerConfig{JWKSURL: idp.srv.URL}
				c.InterBrokerSASL = &InterBrokerSASLConfig{Mechanism: MechanismOAuthBearer, User: "sediment-brokers", Password: "s3cret", TokenEndpoint: ep.srv.URL}
			})
			base := ep.grants.Load() // the broker's own clients may have logged in already
			for range 2 {
				if _, err := b.interBrokerToken(testCtx(t)); err != nil {
					t.Fatal(err)
				}
			}
			if got := ep.grants.Load() - base; got != tc.grants && !(tc.grants == 1 && got == 0) {
				t.Fatalf("%d grants for two logins, want %d", got, tc.grants)
			}
		})
	}

	t.Run("wrong secret", func(t *testing.T) {
		ep := newTestTokenEndpoint(t, idp, "sediment-brokers", "s3cret", "", "broker-svc", time.Hour)
		b := startBroker(t, "", func(c *Config) {
			c.Listeners = []Listener{{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext}}
			c.SASLMechanisms = []string{MechanismOAuthBearer}
			c.OAuthBearer = &OAuthBearerConfig{JWKSURL: idp.srv.URL}
			c.InterBrokerSASL = &InterBrokerSASLConfig{Mechanism: MechanismOAuthBearer, User: "sediment-brokers", Password: "wrong", TokenEndpoint: ep.srv.URL}
		})
		_, err := b.interBrokerToken(testCtx(t))
		if err == nil || !strings.Contains(err.Error(), "invalid_client") || ep.refusals.Load() == 0 {
			t.Fatalf("a token with a wrong secret: %v (%d refusals)", err, ep.refusals.Load())
		}
	})
}

// TestTokenExpiry: a token's exp claim (read, not verified), else a short
// reuse.
func TestTokenExpiry(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tok := unsecuredToken(map[string]any{"sub": "b", "exp": now.Add(time.Hour).Unix()})
	if got := tokenExpiry(tok, now); !got.Equal(now.Add(time.Hour)) {
		t.Errorf("exp an hour on: %v", got)
	}
	for _, bad := range []string{"", "opaque-token", "a.b.c", unsecuredToken(map[string]any{"sub": "b"}),
		unsecuredToken(map[string]any{"exp": "soon"}), unsecuredToken(map[string]any{"exp": 1e300})} {
		if got := tokenExpiry(bad, now); !got.Equal(now.Add(interBrokerTokenNoExpiry)) {
			t.Errorf("%q: %v, want %v on", bad, got, interBrokerTokenNoExpiry)
		}
	}
}
