package broker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// SASL/OAUTHBEARER (KIP-255, RFC 7628) with Kafka's OIDC validation
// (KIP-768): the client sends a JWT access token from its identity provider;
// the broker checks its signature against the provider's JSON Web Key Set,
// its expiry, issuer and audience, and takes the principal from its subject
// claim. go-jose parses and verifies the tokens.
//
// The unsecured mode is Kafka's default validator for development
// (OAuthBearerUnsecuredValidatorCallbackHandler): unsigned tokens
// (alg "none", as librdkafka makes them from sasl.oauthbearer.config) are
// taken at their word. It is off unless asked for, and never on with a key
// set.

// MechanismOAuthBearer is offered when Config.OAuthBearer is set and
// SASLMechanisms names it.
const MechanismOAuthBearer = "OAUTHBEARER"

// OAuthBearerConfig is Kafka's sasl.oauthbearer.* broker settings.
type OAuthBearerConfig struct {
	// JWKSURL is where the signing keys are (jwks.endpoint.url): https://,
	// http:// or file://.
	JWKSURL string
	// JWKSRefresh is how often the keys are fetched again
	// (jwks.endpoint.refresh.ms) [1h]; a token signed by an unknown key
	// also makes a fetch, at most every JWKSMinRefetch [10s].
	JWKSRefresh    time.Duration
	JWKSMinRefetch time.Duration
	// ExpectedIssuer, if set, must be the token's "iss"
	// (expected.issuer); ExpectedAudience, if set, must contain one of
	// the token's "aud" (expected.audience).
	ExpectedIssuer   string
	ExpectedAudience []string
	// SubClaim names the claim that is the principal (sub.claim.name)
	// ["sub"].
	SubClaim string
	// ClockSkew is allowed on exp, nbf and iat
	// (clock.skew.seconds) [30s].
	ClockSkew time.Duration
	// Unsecured accepts unsigned tokens (no JWKSURL then).
	Unsecured bool
	// HTTPClient fetches the keys [a client with a 10 s timeout].
	HTTPClient *http.Client
}

// signingAlgs are the signature algorithms accepted (Kafka's default
// allowlist: RSA, RSA-PSS and ECDSA).
var signingAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512, jose.ES256, jose.ES384, jose.ES512}

// maxJWKSBytes bounds a fetched key set.
const maxJWKSBytes = 1 << 20

// oauthValidator checks tokens; one per broker.
type oauthValidator struct {
	cfg OAuthBearerConfig
	now func() time.Time

	mu        sync.Mutex
	keys      *jose.JSONWebKeySet
	fetchedAt time.Time
	lastTry   time.Time
}

func newOAuthValidator(cfg OAuthBearerConfig) (*oauthValidator, error) {
	if cfg.Unsecured == (cfg.JWKSURL != "") {
		return nil, errors.New("broker: OAUTHBEARER needs either a JWKS URL or the unsecured mode, not both")
	}
	if cfg.JWKSURL != "" {
		u, err := url.Parse(cfg.JWKSURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "file") {
			return nil, fmt.Errorf("broker: OAUTHBEARER JWKS URL %q: want https://, http:// or file://", cfg.JWKSURL)
		}
	}
	if cfg.JWKSRefresh <= 0 {
		cfg.JWKSRefresh = time.Hour
	}
	if cfg.JWKSMinRefetch <= 0 {
		cfg.JWKSMinRefetch = 10 * time.Second
	}
	if cfg.SubClaim == "" {
		cfg.SubClaim = "sub"
	}
	if cfg.ClockSkew <= 0 {
		cfg.ClockSkew = 30 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &oauthValidator{cfg: cfg, now: time.Now}, nil
}

// fetch reads the key set.
func (v *oauthValidator) fetch(ctx context.Context) (*jose.JSONWebKeySet, error) {
	u, _ := url.Parse(v.cfg.JWKSURL)
	var body []byte
	var err error
	if u.Scheme == "file" {
		var f *os.File
		if f, err = os.Open(u.Path); err != nil {
			return nil, err
		}
		defer f.Close()
		body, err = io.ReadAll(io.LimitReader(f, maxJWKSBytes+1))
	} else {
		req, rerr := http.NewRequestWithContext(ctx, http.MethodGet, v.cfg.JWKSURL, nil)
		if rerr != nil {
			return nil, rerr
		}
		resp, rerr := v.cfg.HTTPClient.Do(req)
		if rerr != nil {
			return nil, rerr
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s", v.cfg.JWKSURL, resp.Status)
		}
		body, err = io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	}
	if err != nil {
		return nil, err
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("JWKS at %s is larger than %d bytes", v.cfg.JWKSURL, maxJWKSBytes)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("JWKS at %s: %w", v.cfg.JWKSURL, err)
	}
	return &set, nil
}

// keysFor returns the keys with id kid ("" matches every key), fetching
// the set when it is old, or when no key matches and the last fetch is
// JWKSMinRefetch old (a rotated key).
func (v *oauthValidator) keysFor(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	match := func() []jose.JSONWebKey {
		if v.keys == nil {
			return nil
		}
		if kid != "" {
			return v.keys.Key(kid)
		}
		return v.keys.Keys
	}
	keys := match()
	stale := v.keys == nil || now.Sub(v.fetchedAt) > v.cfg.JWKSRefresh
	if (stale || len(keys) == 0) && now.Sub(v.lastTry) >= v.cfg.JWKSMinRefetch {
		v.lastTry = now
		set, err := v.fetch(ctx)
		if err != nil {
			if v.keys == nil {
				return nil, fmt.Errorf("no JWKS: %w", err)
			}
			// Keep the keys known; the next refetch may succeed.
		} else {
			v.keys, v.fetchedAt = set, now
			keys = match()
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no key %q in the JWKS", kid)
	}
	return keys, nil
}

// validate checks a token and returns its principal and expiry.
func (v *oauthValidator) validate(ctx context.Context, token string) (string, time.Time, error) {
	if v.cfg.Unsecured {
		return v.validateUnsecured(token)
	}
	tok, err := jwt.ParseSigned(token, signingAlgs)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("token: %w", err)
	}
	if len(tok.Headers) != 1 {
		return "", time.Time{}, errors.New("token: want one signature")
	}
	keys, err := v.keysFor(ctx, tok.Headers[0].KeyID)
	if err != nil {
		return "", time.Time{}, err
	}
	var claims jwt.Claims
	var all map[string]any
	verified := false
	for _, k := range keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if err = tok.Claims(k.Key, &claims, &all); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return "", time.Time{}, fmt.Errorf("token signature: %v", err)
	}
	if claims.Expiry == nil {
		return "", time.Time{}, errors.New("token has no exp claim")
	}
	exp := jwt.Expected{Issuer: v.cfg.ExpectedIssuer, Time: v.now()}
	if len(v.cfg.ExpectedAudience) > 0 {
		exp.AnyAudience = v.cfg.ExpectedAudience
	}
	if err := claims.ValidateWithLeeway(exp, v.cfg.ClockSkew); err != nil {
		return "", time.Time{}, fmt.Errorf("token: %w", err)
	}
	sub, err := v.principal(all)
	return sub, claims.Expiry.Time(), err
}

// principal is the subject claim: a non-empty string.
func (v *oauthValidator) principal(claims map[string]any) (string, error) {
	sub, _ := claims[v.cfg.SubClaim].(string)
	if strings.TrimSpace(sub) == "" || strings.ContainsRune(sub, 0) {
		return "", fmt.Errorf("token has no usable %q claim", v.cfg.SubClaim)
	}
	return sub, nil
}

// validateUnsecured takes an unsigned token (header.payload.) as Kafka's
// unsecured validator does: alg "none", an exp in the future, a subject.
func (v *oauthValidator) validateUnsecured(token string) (string, time.Time, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] != "" {
		return "", time.Time{}, errors.New("unsecured token: want header.payload. (no signature)")
	}
	var header struct {
		Alg string `json:"alg"`
	}
	var claims map[string]any
	for i, dst := range []any{&header, &claims} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			return "", time.Time{}, fmt.Errorf("unsecured token: %w", err)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return "", time.Time{}, fmt.Errorf("unsecured token: %w", err)
		}
	}
	if header.Alg != "none" {
		return "", time.Time{}, fmt.Errorf("unsecured token: alg %q, want none", header.Alg)
	}
	exp, ok := claims["exp"].(float64)
	if !ok || math.IsNaN(exp) {
		return "", time.Time{}, errors.New("unsecured token has no exp claim")
	}
	expiry := time.Unix(int64(exp), 0)
	if expiry.Add(v.cfg.ClockSkew).Before(v.now()) {
		return "", time.Time{}, errors.New("unsecured token expired")
	}
	sub, err := v.principal(claims)
	return sub, expiry, err
}

// oauthExchange is the server side of OAUTHBEARER: one client message,
// "n,[a=authzid],\x01auth=Bearer <token>\x01[key=value\x01]...\x01".
type oauthExchange struct {
	v    *oauthValidator
	done bool
	exp  time.Time // the token's, once validated
	// failed is why the token was refused, once the server's error
	// message (RFC 7628 3.2.2) is sent: the client answers it with %x01,
	// and the login then fails with that message, as Kafka's
	// OAuthBearerSaslServer does.
	failed error
}

// oauthErrorStatus is the server's error message for a refused token
// (RFC 7628 3.2.2, as Kafka's jsonErrorResponse).
const oauthErrorStatus = `{"status":"invalid_token"}`

// saslFailure is a login failure whose message the client is told in
// SaslAuthenticate's error_message, instead of the generic one.
type saslFailure struct {
	msg string // for the client
	err error  // for the broker's log
}

func (e *saslFailure) Error() string { return e.err.Error() }
func (e *saslFailure) Unwrap() error { return e.err }

// expiry is when the token expires: a session ends then (KIP-368).
func (x *oauthExchange) expiry() time.Time { return x.exp }

func (x *oauthExchange) step(in []byte) ([]byte, bool, string, error) {
	if x.failed != nil {
		// The client's answer to the error message: %x01 (RFC 7628).
		err := x.failed
		if len(in) != 1 || in[0] != 0x01 {
			err = fmt.Errorf("%w (and the client answered the error message with %d bytes, not %%x01)", err, len(in))
		}
		return nil, false, "", &saslFailure{msg: oauthErrorStatus, err: err}
	}
	if x.done {
		return nil, false, "", errors.New("OAUTHBEARER exchange already finished")
	}
	x.done = true
	msg := string(in)
	gs2, rest, ok := strings.Cut(msg, "\x01")
	if !ok || !strings.HasSuffix(rest, "\x01\x01") {
		return nil, false, "", errors.New("OAUTHBEARER: malformed client message")
	}
	cb, authz, ok := strings.Cut(gs2, ",")
	if !ok || cb != "n" && cb != "y" || !strings.HasSuffix(authz, ",") {
		return nil, false, "", errors.New("OAUTHBEARER: malformed GS2 header")
	}
	authz = strings.TrimSuffix(authz, ",")
	if authz != "" && !strings.HasPrefix(authz, "a=") {
		return nil, false, "", errors.New("OAUTHBEARER: malformed authorization id")
	}
	var token string
	for _, kv := range strings.Split(strings.TrimSuffix(rest, "\x01\x01"), "\x01") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, false, "", errors.New("OAUTHBEARER: malformed key=value")
		}
		if k == "auth" {
			scheme, t, ok := strings.Cut(val, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || t == "" {
				return nil, false, "", errors.New("OAUTHBEARER: auth is not a bearer token")
			}
			token = strings.TrimSpace(t)
		}
	}
	if token == "" {
		return nil, false, "", errors.New("OAUTHBEARER: no token")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	user, exp, err := x.v.validate(ctx, token)
	if err != nil {
		// A refused token: the error message, then the failure at the
		// client's %x01.
		x.failed = err
		return []byte(oauthErrorStatus), false, "", nil
	}
	if authz != "" && authz[2:] != user {
		return nil, false, "", errors.New("OAUTHBEARER: authorization id differs from the token's principal")
	}
	x.exp = exp
	return nil, true, user, nil
}
