package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// startOAuthBroker starts a broker process with a SASL_PLAINTEXT listener
// beside its PLAINTEXT one, OAUTHBEARER the only SASL mechanism, and more
// broker flags (the validator's settings, the authorizer).
func startOAuthBroker(t *testing.T, extra ...string) (b *Broker, saslPlain string) {
	t.Helper()
	saslPlain = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	b = StartBroker(t, BrokerOptions{
		Listeners: "SASL_PLAINTEXT://" + saslPlain,
		ExtraArgs: append([]string{"--sasl-enabled-mechanisms", "OAUTHBEARER"}, extra...),
	})
	return b, saslPlain
}

// kcatAt runs kcat against addr with the -X properties props.
func kcatAt(t *testing.T, addr string, props []string, stdin string, args ...string) cmdResult {
	t.Helper()
	full := []string{"-b", addr}
	for _, p := range props {
		full = append(full, "-X", p)
	}
	return run(t, stdin, nil, kcatPath(t), append(full, args...)...)
}

// kcatUnsecuredAs are librdkafka's properties for OAUTHBEARER with an
// unsigned token (alg none) that it makes itself, for principal.
func kcatUnsecuredAs(principal string) []string {
	return []string{"security.protocol=SASL_PLAINTEXT", "sasl.mechanisms=OAUTHBEARER",
		"enable.sasl.oauthbearer.unsecure.jwt=true", "sasl.oauthbearer.config=principal=" + principal}
}

// TestOAuthKcatUnsecured: kcat (librdkafka's builtin OAUTHBEARER with
// unsecured tokens) produces keyed lines to a broker process that accepts
// unsigned tokens and reads them back; with the authorizer on, the token's
// principal is what the ACLs see: alice may produce only once an ACL names
// User:alice, bob never.
func TestOAuthKcatUnsecured(t *testing.T) {
	b, saslPlain := startOAuthBroker(t, "--sasl-oauthbearer-unsecured")
	alice := kcatUnsecuredAs("alice")

	if r := kcatAt(t, saslPlain, alice, "", "-L"); r.Err != nil || !strings.Contains(r.Stdout, "at "+saslPlain) {
		t.Fatalf("kcat -L over SASL_PLAINTEXT with OAUTHBEARER: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
	b.sediment(t, "", "topic", "create", "oauth-kcat", "--partitions", "1")
	lines := keyedLines(200)
	if r := kcatAt(t, saslPlain, alice, strings.Join(lines, "\n")+"\n", "-P", "-t", "oauth-kcat", "-K:"); r.Err != nil {
		t.Fatalf("kcat -P with OAUTHBEARER: %v\n%s", r.Err, r.Stderr)
	}
	r := kcatAt(t, saslPlain, alice, "", "-C", "-t", "oauth-kcat", "-e", "-f", "%k:%s\n")
	if r.Err != nil {
		t.Fatalf("kcat -C with OAUTHBEARER: %v\n%s", r.Err, r.Stderr)
	}
	if got := strings.TrimSuffix(r.Stdout, "\n"); got != strings.Join(lines, "\n") {
		t.Fatalf("kcat read back over OAUTHBEARER:\n%s\nwant the %d lines produced:\n%s", got, len(lines), strings.Join(lines, "\n"))
	}
	// The SASL listener offers OAUTHBEARER only: PLAIN is not logged in.
	plain := []string{"security.protocol=SASL_PLAINTEXT", "sasl.mechanisms=PLAIN", "sasl.username=alice", "sasl.password=x", "socket.timeout.ms=5000"}
	if r := kcatAt(t, saslPlain, plain, "", "-L", "-m", "5"); r.Err == nil ||
		!strings.Contains(r.Stderr, "Unsupported SASL mechanism") || !strings.Contains(r.Stderr, "OAUTHBEARER") {
		t.Fatalf("kcat with PLAIN on an OAUTHBEARER-only listener: %v, want an unsupported mechanism naming OAUTHBEARER\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("broker stop: %v", err)
	}

	// The authorizer on: the token's principal (sasl.oauthbearer.config's
	// principal, the "sub" of the unsigned token) needs ACLs; ANONYMOUS
	// (the PLAINTEXT listener) is a super user and manages them.
	b, saslPlain = startOAuthBroker(t, "--sasl-oauthbearer-unsecured", "--authorizer-enabled", "--super-users", "User:ANONYMOUS")
	const topic = "oauth-acl"
	b.sediment(t, "", "topic", "create", topic, "--partitions", "1")
	produce := func(principal, line string) cmdResult {
		return kcatAt(t, saslPlain, kcatUnsecuredAs(principal), line+"\n", "-P", "-t", topic, "-K:")
	}
	refused := func(principal string, r cmdResult) {
		t.Helper()
		if r.Err == nil || !strings.Contains(r.Stderr, "Topic authorization failed") {
			t.Fatalf("kcat -P as %s without an ACL: err %v, want a topic authorization error; stderr:\n%s", principal, r.Err, r.Stderr)
		}
	}
	refused("alice", produce("alice", "alice:before the ACL"))
	b.sediment(t, "", "acl", "create", "--allow-principal", "User:alice", "--producer", "--topic", topic)
	// Wait until the broker's authorizer has the ACL: alice's metadata
	// for the topic stops being refused (kcat -L changes nothing).
	waitFor(t, 30*time.Second, "alice may describe "+topic, func() bool {
		r := kcatAt(t, saslPlain, alice, "", "-L", "-t", topic)
		return r.Err == nil && strings.Contains(r.Stdout, `topic "`+topic+`" with 1 partitions:`)
	})
	if r := produce("alice", "alice:after the ACL"); r.Err != nil {
		t.Fatalf("kcat -P as alice with a producer ACL: %v\n%s", r.Err, r.Stderr)
	}
	refused("bob", produce("bob", "bob:never"))
	// Only alice's write after the ACL is in the topic (read as ANONYMOUS).
	out := b.kcat(t, "", "-C", "-t", topic, "-e", "-f", "%k:%s\n").Stdout
	if out != "alice:after the ACL\n" {
		t.Fatalf("%s holds %q, want only alice's record written after the ACL", topic, out)
	}
}

// testJWKS is an identity provider's RSA signing key and its JWKS.
type testJWKS struct {
	kid string
	key *rsa.PrivateKey
}

func newTestJWKS(t *testing.T, kid string) *testJWKS {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &testJWKS{kid: kid, key: k}
}

// writeJWKS writes the public key set to path.
func (p *testJWKS) writeJWKS(t *testing.T, path string) {
	t.Helper()
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &p.key.PublicKey, KeyID: p.kid, Algorithm: string(jose.RS256), Use: "sig"}}}
	js, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, js, 0o600); err != nil {
		t.Fatal(err)
	}
}

// idpClaims are the claims TestOAuthSignedTokenCLI's broker expects
// (issuer https://idp.test, audience kafka) for sub, expiring at exp.
func idpClaims(sub string, exp time.Time) map[string]any {
	return map[string]any{"sub": sub, "iss": "https://idp.test", "aud": []string{"kafka"},
		"exp": exp.Unix(), "iat": time.Now().Add(-2 * time.Hour).Unix()}
}

// tokenFile signs an RS256 token with claims and writes it to a new file
// in dir.
func (p *testJWKS) tokenFile(t *testing.T, dir, name string, claims map[string]any) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(p.token(t, claims)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// token signs an RS256 token with claims.
func (p *testJWKS) token(t testing.TB, claims map[string]any) string {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: p.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", p.kid))
	if err != nil {
		t.Error(err)
		return ""
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Error(err)
	}
	return tok
}

// TestOAuthSignedTokenCLI: a broker process checks RS256 tokens against a
// JWKS file (file://), with an expected issuer and audience; `sediment
// produce` and `sediment consume` log in with a token from a file and
// round-trip lines; an expired token, a token signed by a key not in the
// JWKS (with the same key id), and tokens for another audience or from
// another issuer fail the commands with an authentication error.
func TestOAuthSignedTokenCLI(t *testing.T) {
	dir := t.TempDir()
	idp := newTestJWKS(t, "idp-key-1")
	jwksPath := filepath.Join(dir, "jwks.json")
	idp.writeJWKS(t, jwksPath)
	b, saslPlain := startOAuthBroker(t,
		"--sasl-oauthbearer-jwks-endpoint-url", "file://"+jwksPath,
		"--sasl-oauthbearer-expected-issuer", "https://idp.test",
		"--sasl-oauthbearer-expected-audience", "kafka")
	b.sediment(t, "", "topic", "create", "oauth-cli", "--partitions", "1")

	cli := func(tokenFile, stdin string, args ...string) cmdResult {
		args = append(args, "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "OAUTHBEARER",
			"--sasl-oauthbearer-token-file", tokenFile, "--timeout", "20s")
		return run(t, stdin, []string{"SEDIMENT_BROKERS=" + saslPlain}, sedimentBin, args...)
	}
	good := idp.tokenFile(t, dir, "carol.jwt", idpClaims("carol", time.Now().Add(time.Hour)))
	lines := keyedLines(150)
	if r := cli(good, strings.Join(lines, "\n")+"\n", "produce", "oauth-cli", "-K", ":"); r.Err != nil {
		t.Fatalf("sediment produce with a signed token: %v\n%s", r.Err, r.Stderr)
	}
	r := cli(good, "", "consume", "oauth-cli", "--from", "earliest", "--exit", "--format", "key-value", "-K", ":")
	if r.Err != nil {
		t.Fatalf("sediment consume with a signed token: %v\n%s", r.Err, r.Stderr)
	}
	if got := strings.TrimSuffix(r.Stdout, "\n"); got != strings.Join(lines, "\n") {
		t.Fatalf("sediment consume with a signed token read:\n%s\nwant the %d lines produced:\n%s", got, len(lines), strings.Join(lines, "\n"))
	}

	// Tokens the broker must refuse: each command fails with an
	// authentication error, and the broker logs the reason.
	other := newTestJWKS(t, idp.kid) // same key id, a key the JWKS does not have
	wrongAud := idpClaims("carol", time.Now().Add(time.Hour))
	wrongAud["aud"] = []string{"not-kafka"}
	wrongIss := idpClaims("carol", time.Now().Add(time.Hour))
	wrongIss["iss"] = "https://evil.test"
	for _, tc := range []struct {
		name, file, reason string
	}{
		// exp an hour ago: far beyond the 30 s clock skew allowed.
		{"expired", idp.tokenFile(t, dir, "expired.jwt", idpClaims("carol", time.Now().Add(-time.Hour))), "token is expired"},
		{"foreign-key", other.tokenFile(t, dir, "foreign.jwt", idpClaims("carol", time.Now().Add(time.Hour))), "token signature"},
		{"wrong-audience", idp.tokenFile(t, dir, "aud.jwt", wrongAud), "invalid audience"},
		{"wrong-issuer", idp.tokenFile(t, dir, "iss.jwt", wrongIss), "invalid issuer"},
	} {
		logLen := len(b.Log())
		for _, cmd := range [][]string{
			{"produce", "oauth-cli", "-K", ":"},
			{"consume", "oauth-cli", "--from", "earliest", "--exit"},
		} {
			r := cli(tc.file, "mallory:refused\n", cmd...)
			if r.Err == nil {
				t.Fatalf("sediment %s with the %s token: succeeded\nstdout:\n%s\nstderr:\n%s", cmd[0], tc.name, r.Stdout, r.Stderr)
			}
			if !strings.Contains(strings.ToLower(r.Stderr), "authentication") || !strings.Contains(r.Stderr, "cannot log in") {
				t.Fatalf("sediment %s with the %s token: %v, want an authentication error; stderr:\n%s", cmd[0], tc.name, r.Err, r.Stderr)
			}
			t.Logf("sediment %s with the %s token: %v: %s", cmd[0], tc.name, r.Err, strings.TrimSpace(r.Stderr))
			if r.Stdout != "" {
				t.Errorf("sediment %s with the %s token printed records:\n%s", cmd[0], tc.name, r.Stdout)
			}
		}
		// The log reaches us through a pipe: wait for the lines.
		waitFor(t, 10*time.Second, "the broker's log to give the reason "+strconv.Quote(tc.reason)+" for both logins with the "+tc.name+" token", func() bool {
			logged := 0
			for _, l := range strings.Split(b.Log()[logLen:], "\n") {
				if strings.Contains(l, "SASL login failed") && strings.Contains(l, "mechanism=OAUTHBEARER") && strings.Contains(l, tc.reason) {
					logged++
				}
			}
			return logged >= 2
		})
	}

	// Nothing was written with the refused tokens; the good one still works.
	r = cli(good, "", "consume", "oauth-cli", "--from", "earliest", "--exit")
	if r.Err != nil || strings.Count(r.Stdout, "\n") != len(lines) {
		t.Fatalf("sediment consume after the refused tokens: %v, %d lines, want %d\n%s", r.Err, strings.Count(r.Stdout, "\n"), len(lines), r.Stderr)
	}
}

// TestKafkaPythonOAuth: kafka-python 2.0.2 (Debian's python3-kafka) logs in
// with OAUTHBEARER on SaslHandshake v0 (raw tokens) with unsigned tokens
// from its token provider, to a broker that accepts them, with the
// authorizer letting only alice in: it produces 10 records as alice and
// reads them back; an expired token does not log in.
func TestKafkaPythonOAuth(t *testing.T) {
	py := debianPythonReady(t, "kafka", "python3-kafka")
	b, saslPlain := startOAuthBroker(t, "--sasl-oauthbearer-unsecured", "--authorizer-enabled", "--super-users", "User:ANONYMOUS;User:alice")
	b.sediment(t, "", "topic", "create", "kpy-oauth", "--partitions", "1")
	r := run(t, "", nil, py, filepath.Join("kafkapython", "oauth.py"), saslPlain, "kpy-oauth")
	if r.Err != nil {
		t.Fatalf("oauth.py: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	var report struct {
		Produced []string `json:"produced"`
		Consumed []string `json:"consumed"`
		Expired  string   `json:"expired"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &report); err != nil {
		t.Fatalf("oauth.py report: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	if len(report.Produced) != 10 || strings.Join(report.Consumed, ",") != strings.Join(report.Produced, ",") {
		t.Fatalf("kafka-python over OAUTHBEARER produced %v, consumed %v", report.Produced, report.Consumed)
	}
	if report.Expired == "accepted" || report.Expired == "" {
		t.Errorf("an expired token: %q", report.Expired)
	}
	t.Logf("kafka-python with an expired token: %s", report.Expired)
}

// saramaToken hands sarama an unsigned token (alg none) for sub.
type saramaToken struct{ sub string }

func (s saramaToken) Token() (*sarama.AccessToken, error) {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	now := time.Now().Unix()
	return &sarama.AccessToken{Token: enc(map[string]string{"alg": "none"}) + "." +
		enc(map[string]any{"sub": s.sub, "iat": now - 60, "exp": now + 3600}) + "."}, nil
}

// TestSaramaOAuth: sarama 1.61.1 logs in with OAUTHBEARER (SaslHandshake
// v1, SaslAuthenticate) with unsigned tokens from its token provider, to a
// broker that accepts them, with the authorizer letting only alice in: it
// produces 20 keyed records as alice, which franz-go reads back; as bob it
// is refused the topic.
func TestSaramaOAuth(t *testing.T) {
	b, saslPlain := startOAuthBroker(t, "--sasl-oauthbearer-unsecured", "--authorizer-enabled", "--super-users", "User:ANONYMOUS;User:alice")
	const topic = "sarama-oauth"
	b.sediment(t, "", "topic", "create", topic, "--partitions", "2")
	producer := func(sub string) sarama.SyncProducer {
		cfg := saramaConfig(sarama.MaxVersion)
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Retry.Max = 1
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Mechanism = sarama.SASLTypeOAuth
		cfg.Net.SASL.TokenProvider = saramaToken{sub}
		p, err := sarama.NewSyncProducer([]string{saslPlain}, cfg)
		if err != nil {
			t.Fatalf("sarama producer as %s: %v", sub, err)
		}
		return p
	}
	p := producer("alice")
	recs := compatRecords("oauth", 20)
	for _, k := range sortedKeys(recs) {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(recs[k])}); err != nil {
			t.Fatalf("SendMessage over OAUTHBEARER as alice: %v", err)
		}
	}
	p.Close()
	consumeFranz(t, b, topic, len(recs)).check(t, topic, recs)
	p = producer("bob")
	defer p.Close()
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("x")}); !errors.Is(err, sarama.ErrTopicAuthorizationFailed) {
		t.Errorf("bob, without ACLs: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
}

// TestOAuthInterBrokerCluster: three broker processes whose first listener,
// the one replication uses, is SASL_PLAINTEXT with OAUTHBEARER alone:
// with --inter-broker-sasl-mechanism OAUTHBEARER each gets an access token
// from the identity provider's token endpoint (the client credentials
// grant, served here on loopback) and logs in to the others as the token's
// subject, the authorizer's super user. The followers of a topic with
// replication factor 3 and min.insync.replicas=3 join the ISR, and every
// record produced with acks=all is acknowledged.
func TestOAuthInterBrokerCluster(t *testing.T) {
	dir := t.TempDir()
	idp := newTestJWKS(t, "idp-key-1")
	jwksPath := filepath.Join(dir, "jwks.json")
	idp.writeJWKS(t, jwksPath)
	var grants, refusals atomic.Int32
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, pw, ok := r.BasicAuth()
		w.Header().Set("Content-Type", "application/json")
		if r.ParseForm() != nil || r.PostForm.Get("grant_type") != "client_credentials" || !ok || id != "sediment-brokers" || pw != "s3cret" {
			refusals.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		grants.Add(1)
		json.NewEncoder(w).Encode(map[string]any{"access_token": idp.token(t, idpClaims("broker-svc", time.Now().Add(time.Hour))),
			"token_type": "Bearer", "expires_in": 3600})
	}))
	defer endpoint.Close()
	c := NewCluster(t, 3, "--sasl-enabled-mechanisms", "OAUTHBEARER",
		"--sasl-oauthbearer-jwks-endpoint-url", "file://"+jwksPath,
		"--sasl-oauthbearer-expected-issuer", "https://idp.test", "--sasl-oauthbearer-expected-audience", "kafka",
		"--inter-broker-sasl-mechanism", "OAUTHBEARER", "--inter-broker-sasl-username", "sediment-brokers",
		"--sasl-oauthbearer-token-endpoint-url", endpoint.URL+"/token",
		"--authorizer-enabled", "--super-users", "User:ANONYMOUS;User:broker-svc")
	for _, b := range c.Brokers {
		b.leadListeners = "SASL_PLAINTEXT://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		b.env = append(b.env, "SEDIMENT_INTER_BROKER_SASL_PASSWORD=s3cret")
	}
	c.StartAll()
	adm := kadm.NewClient(c.Client(t))
	const topic = "oauth-replicated"
	createClusterTopic(t, adm, topic, 2, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("3")})
	c.WaitFullISR(t, adm, topic, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prod := c.Client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RecordDeliveryTimeout(60*time.Second))
	var recs []*kgo.Record
	for i := range 300 {
		recs = append(recs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("acks=all with min.insync.replicas=3, replicated over OAUTHBEARER: %v", err)
	}
	if g, r := grants.Load(), refusals.Load(); g < 2 || r != 0 {
		t.Fatalf("token endpoint: %d grants, %d refusals; want one or more per follower, none refused", g, r)
	}
}
