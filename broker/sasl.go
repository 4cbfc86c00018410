package broker

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"

	"github.com/xdg-go/scram"

	"github.com/sediment-io/sediment/metadata"
)

// SASL authentication (KIP-43, KIP-84, KIP-152). Users exist through their
// SCRAM credentials, kept in the metadata log (ResourceUser, changed by
// AlterUserScramCredentials, KIP-554), so every broker checks a login
// against its own copy of the metadata state:
//
//   - SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the server side
//     over the stored credentials (scramExchange); the password never
//     reaches the broker.
//   - PLAIN (RFC 4616): the password is checked against the user's SCRAM
//     credentials by deriving them again (PBKDF2 with the stored salt and
//     iterations), so PLAIN needs no second store of passwords. It sends the
//     password itself and belongs on SASL_SSL.

// scramMinIterations and scramMaxIterations are Kafka's bounds on a
// credential's iteration count.
const (
	scramMinIterations = 4096
	scramMaxIterations = 16384
)

// scramHashes maps the SCRAM mechanisms to their hash.
var scramHashes = map[string]scram.HashGeneratorFcn{ // func() hash.Hash
	MechanismSCRAMSHA256: scram.SHA256,
	MechanismSCRAMSHA512: scram.SHA512,
}

// scramMechanismTypes are Kafka's ids of the SCRAM mechanisms in
// Describe/AlterUserScramCredentials.
var scramMechanismTypes = map[int8]string{1: MechanismSCRAMSHA256, 2: MechanismSCRAMSHA512}

func scramMechanismType(name string) int8 {
	for t, n := range scramMechanismTypes {
		if n == name {
			return t
		}
	}
	return 0
}

// errAuthFailed is what a client is told of any failed login, whatever the
// reason (unknown user, wrong password, malformed exchange), as Kafka does.
var errAuthFailed = errors.New("authentication failed: invalid credentials")

// saslExchange is one login in progress.
type saslExchange interface {
	// step takes the client's next message and returns the server's, or
	// an error (the login failed). done reports a successful end.
	step(in []byte) (out []byte, done bool, user string, err error)
}

// newSASLExchange starts a login with the given mechanism.
func (b *Broker) newSASLExchange(mechanism string) (saslExchange, error) {
	if mechanism == MechanismPlain {
		return &plainExchange{lookup: b.scramCredential}, nil
	}
	if mechanism == MechanismOAuthBearer && b.oauth != nil {
		return &oauthExchange{v: b.oauth}, nil
	}
	if mechanism == MechanismGSSAPI && b.cfg.GSSAPI != nil {
		return b.newGSSAPIExchange(), nil
	}
	if _, ok := scramHashes[mechanism]; !ok {
		return nil, fmt.Errorf("mechanism %q", mechanism)
	}
	return &scramExchange{lookup: b.scramCredential, tokenLookup: b.tokenCredential, mechanism: mechanism}, nil
}

// scramExchange is the server side of SCRAM (RFC 5802), as Kafka's
// ScramSaslServer runs it: no channel binding, an authorization id only if
// it is the user, and a client-final nonce accepted when it ends with the
// server's nonce (librdkafka sends the client's nonce once more in front,
// and Kafka accepts it; xdg-go/scram's server requires equality, which is
// why this side is not xdg-go's). The proof is checked over the messages as
// the client sent them.
type scramExchange struct {
	lookup func(user, mechanism string) (scram.StoredCredentials, bool)
	// tokenLookup finds a delegation token's credential, the owner it
	// logs in as and when it expires (delegation_tokens.go), for a
	// client-first message with the extension tokenauth=true (KIP-48).
	tokenLookup func(id, mechanism string) (scram.StoredCredentials, string, time.Time, bool)
	mechanism   string
	state       int // 0: client-first expected, 1: client-final expected
	token       bool
	tokenExpiry time.Time

	user                        string
	cred                        scram.StoredCredentials
	gs2Header                   string
	clientFirstBare, serverMsg1 string
	nonce                       string
}

func (x *scramExchange) step(in []byte) ([]byte, bool, string, error) {
	msg := string(in)
	switch x.state {
	case 0:
		x.state = 1
		out, err := x.clientFirst(msg)
		return []byte(out), false, "", err
	case 1:
		x.state = 2
		out, err := x.clientFinal(msg)
		if err != nil {
			return nil, false, "", err
		}
		return []byte(out), true, x.user, nil
	}
	return nil, false, "", errors.New("SCRAM exchange already finished")
}

func (x *scramExchange) clientFirst(msg string) (string, error) {
	// gs2-header: "n," or "y," (no channel binding), then "a=authzid," or ",".
	cb, rest, ok := strings.Cut(msg, ",")
	if !ok || (cb != "n" && cb != "y") {
		return "", errors.New("SCRAM: channel binding not supported")
	}
	authz, bare, ok := strings.Cut(rest, ",")
	if !ok || (authz != "" && !strings.HasPrefix(authz, "a=")) {
		return "", errors.New("SCRAM: malformed client-first message")
	}
	x.gs2Header = msg[:len(msg)-len(bare)]
	fields := strings.Split(bare, ",")
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "n=") || !strings.HasPrefix(fields[1], "r=") || len(fields[1]) < 3 {
		return "", errors.New("SCRAM: malformed client-first message")
	}
	user, err := scramName(fields[0][2:])
	if err != nil {
		return "", err
	}
	if authz != "" {
		if az, err := scramName(authz[2:]); err != nil || az != user {
			return "", errors.New("SCRAM: authorization id differs from the user")
		}
	}
	// SCRAM extensions (RFC 5802 reserves the attributes after r=):
	// Kafka's tokenauth=true names a delegation token as the user.
	for _, ext := range fields[2:] {
		if k, v, _ := strings.Cut(ext, "="); k == "tokenauth" {
			x.token = strings.EqualFold(v, "true")
		}
	}
	var cred scram.StoredCredentials
	if x.token {
		if x.tokenLookup == nil {
			return "", errAuthFailed
		}
		var owner string
		cred, owner, x.tokenExpiry, ok = x.tokenLookup(user, x.mechanism)
		if !ok {
			return "", errAuthFailed
		}
		user = owner // the token logs in as its owner
	} else {
		cred, ok = x.lookup(user, x.mechanism)
	}
	if !ok {
		return "", errAuthFailed
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	x.user, x.cred, x.clientFirstBare = user, cred, bare
	x.nonce = fields[1][2:] + base64.RawURLEncoding.EncodeToString(raw[:])
	x.serverMsg1 = fmt.Sprintf("r=%s,s=%s,i=%d", x.nonce, base64.StdEncoding.EncodeToString([]byte(cred.Salt)), cred.Iters)
	return x.serverMsg1, nil
}

func (x *scramExchange) clientFinal(msg string) (string, error) {
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return "", errors.New("SCRAM: no proof")
	}
	withoutProof, proofB64 := msg[:i], msg[i+3:]
	fields := strings.Split(withoutProof, ",")
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "c=") || !strings.HasPrefix(fields[1], "r=") {
		return "", errors.New("SCRAM: malformed client-final message")
	}
	if cb, err := base64.StdEncoding.DecodeString(fields[0][2:]); err != nil || string(cb) != x.gs2Header {
		return "", errors.New("SCRAM: channel binding differs from the gs2 header")
	}
	if !strings.HasSuffix(fields[1][2:], x.nonce) {
		return "", errors.New("SCRAM: nonce differs from the server's")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	h := scramHashes[x.mechanism]
	if err != nil || len(proof) != h().Size() {
		return "", errors.New("SCRAM: malformed proof")
	}
	authMsg := []byte(x.clientFirstBare + "," + x.serverMsg1 + "," + withoutProof)
	sig := hmacSum(h, x.cred.StoredKey, authMsg)
	for j := range proof {
		proof[j] ^= sig[j] // now the client key
	}
	d := h()
	d.Write(proof)
	if !hmac.Equal(d.Sum(nil), x.cred.StoredKey) {
		return "", errAuthFailed
	}
	return "v=" + base64.StdEncoding.EncodeToString(hmacSum(h, x.cred.ServerKey, authMsg)), nil
}

// tokenAuthenticated reports a login with a delegation token.
func (x *scramExchange) tokenAuthenticated() bool { return x.token }

// expiry bounds a token login's session (KIP-368), as an OAUTHBEARER
// token's does; a password login has none.
func (x *scramExchange) expiry() time.Time {
	if !x.token {
		return time.Time{}
	}
	return x.tokenExpiry
}

func hmacSum(h func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(h, key)
	m.Write(msg)
	return m.Sum(nil)
}

// scramName decodes a SCRAM saslname ("=2C" is ',', "=3D" is '=').
func scramName(s string) (string, error) {
	if s == "" {
		return "", errors.New("SCRAM: empty user name")
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == ',':
			return "", errors.New("SCRAM: malformed user name")
		case s[i] != '=':
			b.WriteByte(s[i])
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
			i += 2
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
			i += 2
		default:
			return "", errors.New("SCRAM: malformed user name")
		}
	}
	return b.String(), nil
}

type plainExchange struct {
	lookup func(user, mechanism string) (scram.StoredCredentials, bool)
}

// step reads "authzid NUL user NUL password" (RFC 4616).
func (x *plainExchange) step(in []byte) ([]byte, bool, string, error) {
	user, password, err := parsePlain(in)
	if err != nil {
		return nil, false, "", err
	}
	// Any of the user's credentials that the password reproduces.
	for _, m := range []string{MechanismSCRAMSHA512, MechanismSCRAMSHA256} {
		cred, ok := x.lookup(user, m)
		if !ok {
			continue
		}
		c, err := scramHashes[m].NewClientUnprepped(user, password, "")
		if err != nil {
			continue
		}
		if got, err := c.GetStoredCredentialsWithError(cred.KeyFactors); err == nil && hmac.Equal(got.StoredKey, cred.StoredKey) {
			return nil, true, user, nil
		}
	}
	return nil, false, "", errAuthFailed
}

// parsePlain splits a PLAIN message; the authorization id, if any, must be
// the user.
func parsePlain(in []byte) (user, password string, err error) {
	parts := bytes.Split(in, []byte{0})
	if len(parts) != 3 || len(parts[1]) == 0 || len(parts[2]) == 0 {
		return "", "", errors.New("malformed PLAIN message")
	}
	if len(parts[0]) > 0 && !bytes.Equal(parts[0], parts[1]) {
		return "", "", errors.New("authorization id differs from the user")
	}
	return string(parts[1]), string(parts[2]), nil
}

// scramCredential looks a user's credential for a mechanism up in the
// metadata state.
func (b *Broker) scramCredential(user, mechanism string) (scram.StoredCredentials, bool) {
	v, ok := b.meta.State().UserConfigs(user)[mechanism]
	if !ok {
		return scram.StoredCredentials{}, false
	}
	c, err := parseSCRAMCredential(v)
	if err != nil {
		b.log.Warn("unreadable SCRAM credential", "user", user, "mechanism", mechanism, "err", err)
		return scram.StoredCredentials{}, false
	}
	return c, true
}

// formatSCRAMCredential is the stored form of a credential.
func formatSCRAMCredential(c scram.StoredCredentials) string {
	enc := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("salt=%s,stored_key=%s,server_key=%s,iterations=%d",
		enc([]byte(c.Salt)), enc(c.StoredKey), enc(c.ServerKey), c.Iters)
}

func parseSCRAMCredential(s string) (scram.StoredCredentials, error) {
	var c scram.StoredCredentials
	seen := 0
	for _, f := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return c, fmt.Errorf("field %q", f)
		}
		var err error
		var raw []byte
		switch k {
		case "salt":
			raw, err = base64.StdEncoding.DecodeString(v)
			c.Salt = string(raw)
		case "stored_key":
			c.StoredKey, err = base64.StdEncoding.DecodeString(v)
		case "server_key":
			c.ServerKey, err = base64.StdEncoding.DecodeString(v)
		case "iterations":
			c.Iters, err = strconv.Atoi(v)
		default:
			return c, fmt.Errorf("field %q", k)
		}
		if err != nil {
			return c, fmt.Errorf("%s: %w", k, err)
		}
		seen++
	}
	if seen != 4 || c.Iters <= 0 || len(c.StoredKey) == 0 || len(c.ServerKey) == 0 {
		return c, errors.New("incomplete credential")
	}
	return c, nil
}

// scramFromSaltedPassword derives the stored credential from what
// AlterUserScramCredentials carries (RFC 5802: StoredKey = H(HMAC(salted,
// "Client Key")), ServerKey = HMAC(salted, "Server Key")).
func scramFromSaltedPassword(mechanism string, salt, salted []byte, iterations int32) scram.StoredCredentials {
	h := scramHashes[mechanism]
	d := h()
	d.Write(hmacSum(h, salted, []byte("Client Key")))
	return scram.StoredCredentials{
		KeyFactors: scram.KeyFactors{Salt: string(salt), Iters: int(iterations)},
		StoredKey:  d.Sum(nil),
		ServerKey:  hmacSum(h, salted, []byte("Server Key")),
	}
}

// userConfigOp is the metadata change that sets or removes one credential.
func userConfigOp(mechanism string, c *scram.StoredCredentials) metadata.ConfigOp {
	if c == nil {
		return metadata.ConfigOp{Key: mechanism, Delete: true}
	}
	return metadata.ConfigOp{Key: mechanism, Value: formatSCRAMCredential(*c)}
}
