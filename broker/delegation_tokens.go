package broker

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/xdg-go/scram"

	"github.com/sediment-io/sediment/metadata"
)

// Delegation tokens (KIP-48, KIP-373), as Kafka's: a client that logged in
// with its own credentials (SASL, or a TLS client certificate) creates a
// token, hands its id and HMAC to a job, and the job logs in with SCRAM as
// the token (user = token id, password = the HMAC in standard base64, the
// SCRAM extension tokenauth=true), acting as the token's owner until the
// token expires. Tokens are kept in the metadata log
// (metadata.ResourceDelegationToken: owner, requester, renewers and the
// three timestamps); the HMAC is not stored: every broker derives it from
// the token id with delegation.token.secret.key (HMAC-SHA512, as Kafka),
// which must be the same on every broker. Without the key the token APIs
// answer DELEGATION_TOKEN_AUTH_DISABLED and no token logs in.
//
// Lifetimes: a token lives until its expiry time (now +
// delegation.token.expiry.time.ms at creation), which the owner or a
// renewer may push back by renewing, never past its max time (now + the
// smaller of the requested max lifetime and delegation.token.max.lifetime.ms).
// An expired token no longer logs in (stricter than Kafka, which relies on
// its hourly sweep) and is removed by the metadata leader's sweep every
// delegation.token.expiry.check.interval.ms; expiring one with a negative
// period removes it at once.
//
// Kafka's restrictions: the token APIs are refused with
// DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on PLAINTEXT listeners, to SSL
// clients without a certificate, and to connections that logged in with a
// token. Creating a token for another owner needs CREATE_TOKENS on that
// USER resource ("User:name"); a token is described to its owner,
// requester and renewers, and to whoever has DESCRIBE on the
// DELEGATION_TOKEN resource (its id) or DESCRIBE_TOKENS on the owner's
// USER resource.

// Fields of a token in the metadata log.
const (
	tokenFieldOwner     = "owner"
	tokenFieldRequester = "requester"
	tokenFieldRenewers  = "renewers" // a JSON array of principals
	tokenFieldIssue     = "issue"    // Unix ms
	tokenFieldExpiry    = "expiry"
	tokenFieldMax       = "max"
)

// tokenSCRAMIterations is the iteration count of a token's SCRAM
// credential (Kafka: the mechanism's minimum).
const tokenSCRAMIterations = scramMinIterations

type delegationToken struct {
	id                 string
	owner, requester   string // Kafka principals: "User:alice"
	renewers           []string
	issue, expiry, max int64 // Unix ms
}

func parseDelegationToken(id string, m map[string]string) (delegationToken, bool) {
	t := delegationToken{id: id, owner: m[tokenFieldOwner], requester: m[tokenFieldRequester]}
	if t.owner == "" {
		return t, false
	}
	if t.requester == "" {
		t.requester = t.owner
	}
	if r := m[tokenFieldRenewers]; r != "" {
		if err := json.Unmarshal([]byte(r), &t.renewers); err != nil {
			return t, false
		}
	}
	var err1, err2, err3 error
	t.issue, err1 = strconv.ParseInt(m[tokenFieldIssue], 10, 64)
	t.expiry, err2 = strconv.ParseInt(m[tokenFieldExpiry], 10, 64)
	t.max, err3 = strconv.ParseInt(m[tokenFieldMax], 10, 64)
	return t, err1 == nil && err2 == nil && err3 == nil
}

func (t delegationToken) ops() []metadata.ConfigOp {
	renewers, _ := json.Marshal(t.renewers)
	if t.renewers == nil {
		renewers = []byte("[]")
	}
	return []metadata.ConfigOp{
		{Key: tokenFieldOwner, Value: t.owner},
		{Key: tokenFieldRequester, Value: t.requester},
		{Key: tokenFieldRenewers, Value: string(renewers)},
		{Key: tokenFieldIssue, Value: strconv.FormatInt(t.issue, 10)},
		{Key: tokenFieldExpiry, Value: strconv.FormatInt(t.expiry, 10)},
		{Key: tokenFieldMax, Value: strconv.FormatInt(t.max, 10)},
	}
}

func (t delegationToken) expired(nowMs int64) bool { return t.max < nowMs || t.expiry < nowMs }

// canRenew: the owner and the renewers may renew and expire a token.
func (t delegationToken) canRenew(principal string) bool {
	return principal == t.owner || slices.Contains(t.renewers, principal)
}

// related: the owner, the requester and the renewers see a token.
func (t delegationToken) related(principal string) bool {
	return principal == t.requester || t.canRenew(principal)
}

// splitPrincipal splits "User:alice" into its type and name.
func splitPrincipal(p string) (typ, name string) {
	typ, name, _ = strings.Cut(p, ":")
	return typ, name
}

func (b *Broker) tokensEnabled() bool { return b.cfg.DelegationTokenSecretKey != "" }

// tokenHMAC is a token's HMAC: HMAC-SHA512 of its id under the secret key.
func (b *Broker) tokenHMAC(id string) []byte {
	m := hmac.New(sha512.New, []byte(b.cfg.DelegationTokenSecretKey))
	m.Write([]byte(id))
	return m.Sum(nil)
}

// delegationTokens returns the tokens of a metadata state, by id.
func delegationTokens(st *metadata.State) []delegationToken {
	all := st.DelegationTokens()
	out := make([]delegationToken, 0, len(all))
	for id, m := range all {
		if t, ok := parseDelegationToken(id, m); ok {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// tokenByHMAC finds the token whose HMAC is mac.
func (b *Broker) tokenByHMAC(st *metadata.State, mac []byte) (delegationToken, bool) {
	for _, t := range delegationTokens(st) {
		if hmac.Equal(b.tokenHMAC(t.id), mac) {
			return t, true
		}
	}
	return delegationToken{}, false
}

// tokenCredential is the SCRAM credential a token logs in with (the HMAC,
// in standard base64, is its password), and the owner's name it logs in
// as; false if there is no such live token.
func (b *Broker) tokenCredential(id, mechanism string) (scram.StoredCredentials, string, time.Time, bool) {
	if !b.tokensEnabled() {
		return scram.StoredCredentials{}, "", time.Time{}, false
	}
	m, ok := b.meta.State().DelegationToken(id)
	if !ok {
		return scram.StoredCredentials{}, "", time.Time{}, false
	}
	t, ok := parseDelegationToken(id, m)
	if !ok || t.expired(time.Now().UnixMilli()) {
		return scram.StoredCredentials{}, "", time.Time{}, false
	}
	h, ok := scramHashes[mechanism]
	if !ok {
		return scram.StoredCredentials{}, "", time.Time{}, false
	}
	c, err := h.NewClientUnprepped(id, base64.StdEncoding.EncodeToString(b.tokenHMAC(id)), "")
	if err != nil {
		return scram.StoredCredentials{}, "", time.Time{}, false
	}
	// A salt of the token's own, derived so that every broker has the
	// same credential without storing one.
	salt := hmac.New(sha256.New, []byte(b.cfg.DelegationTokenSecretKey))
	salt.Write([]byte("scram salt:" + id))
	cred, err := c.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt.Sum(nil)[:16]), Iters: tokenSCRAMIterations})
	if err != nil {
		return scram.StoredCredentials{}, "", time.Time{}, false
	}
	_, owner := splitPrincipal(t.owner)
	return cred, owner, time.UnixMilli(min(t.expiry, t.max)), true
}

// tokenRequestAllowed is Kafka's allowTokenRequests.
func tokenRequestAllowed(ci *ConnInfo) bool {
	if ci == nil {
		return false
	}
	switch {
	case ci.sasl != nil && ci.sasl.tokenAuth.Load():
		return false
	case ci.SecurityProtocol == ProtocolPlaintext:
		return false
	case ci.SecurityProtocol == ProtocolSSL && ci.Principal == "":
		return false
	}
	return true
}

// tokenSubject is the requester's authorization subject (nil: no
// authorizer, everything allowed).
func (b *Broker) tokenSubject(r *Request) *subject {
	if b.authz == nil || r.Conn == nil {
		return nil
	}
	return b.authz.subject(b.meta.State(), r.Conn)
}

// tokenPeriod bounds a requested period: positive and at most def, else def.
func tokenPeriod(req int64, def time.Duration) int64 {
	if req > 0 {
		return min(req, def.Milliseconds())
	}
	return def.Milliseconds()
}

func saturatingAdd(a, b int64) int64 {
	if b > 0 && a > (1<<63-1)-b {
		return 1<<63 - 1
	}
	return a + b
}

// createDelegationToken makes a token for owner (requester's, unless
// given) and stores it.
func (b *Broker) createDelegationToken(ctx context.Context, requester, owner string, renewers []string, maxLifetimeMs int64) (delegationToken, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return delegationToken{}, err
	}
	now := time.Now().UnixMilli()
	t := delegationToken{
		id: base64.RawURLEncoding.EncodeToString(raw[:]), owner: owner, requester: requester, renewers: renewers, issue: now,
	}
	t.max = saturatingAdd(now, tokenPeriod(maxLifetimeMs, b.cfg.DelegationTokenMaxLifetime))
	t.expiry = min(t.max, saturatingAdd(now, b.cfg.DelegationTokenExpiryTime.Milliseconds()))
	_, _, err := b.store.propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceDelegationToken, ResourceName: t.id, Ops: t.ops()})
	return t, err
}

// setTokenExpiry stores a token's new expiry time; a negative one removes
// the token.
func (b *Broker) setTokenExpiry(ctx context.Context, t delegationToken, expiry int64) error {
	cmd := &metadata.AlterConfigs{ResourceType: metadata.ResourceDelegationToken, ResourceName: t.id}
	if expiry < 0 {
		for _, op := range t.ops() {
			cmd.Ops = append(cmd.Ops, metadata.ConfigOp{Key: op.Key, Delete: true})
		}
	} else {
		cmd.Ops = []metadata.ConfigOp{{Key: tokenFieldExpiry, Value: strconv.FormatInt(expiry, 10)}}
	}
	_, _, err := b.store.propose(ctx, cmd)
	return err
}

// tokenSweepLoop removes expired tokens, on the metadata leader, every
// delegation.token.expiry.check.interval.ms.
func (b *Broker) tokenSweepLoop(ctx context.Context) {
	if !b.tokensEnabled() {
		return
	}
	t := time.NewTicker(b.cfg.DelegationTokenExpiryCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if b.meta.IsLeader() {
			b.sweepDelegationTokens(ctx)
		}
	}
}

func (b *Broker) sweepDelegationTokens(ctx context.Context) {
	now := time.Now().UnixMilli()
	for _, t := range delegationTokens(b.meta.State()) {
		if !t.expired(now) {
			continue
		}
		if err := b.setTokenExpiry(ctx, t, -1); err != nil {
			b.log.Warn("removing an expired delegation token", "token_id", t.id, "err", err)
			return
		}
		b.log.Info("removed an expired delegation token", "token_id", t.id, "owner", t.owner)
	}
}

// tokenPrecheck is what the four token APIs check first: the connection
// may use them, and tokens are on.
func (b *Broker) tokenPrecheck(r *Request) int16 {
	if !tokenRequestAllowed(r.Conn) {
		return kerr.DelegationTokenRequestNotAllowed.Code
	}
	if !b.tokensEnabled() {
		return kerr.DelegationTokenAuthDisabled.Code
	}
	return 0
}

// namedToken is what Renew and Expire check first: the precheck, then
// the token named by its HMAC (DELEGATION_TOKEN_NOT_FOUND).
func (b *Broker) namedToken(r *Request, mac []byte) (delegationToken, int16) {
	if code := b.tokenPrecheck(r); code != 0 {
		return delegationToken{}, code
	}
	t, ok := b.tokenByHMAC(b.meta.State(), mac)
	if !ok {
		return t, kerr.DelegationTokenNotFound.Code
	}
	return t, 0
}

// changeTokenExpiry stores a token's new expiry (negative: removes it),
// bounded by 30 s, and returns the error code.
func (b *Broker) changeTokenExpiry(ctx context.Context, t delegationToken, expiry int64) int16 {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.setTokenExpiry(ctx, t, expiry); err != nil {
		return errCode(err)
	}
	return 0
}

// requesterPrincipal is the connection's Kafka principal.
func requesterPrincipal(r *Request) string { return "User:" + r.Conn.principal() }
