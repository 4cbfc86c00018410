package broker

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"

	"github.com/xdg-go/scram"

	"github.com/sediment-io/sediment/metadata"
)

// SASL authentication (KIP-43, KIP-84, KIP-152). Users exist through their
// SCRAM credentials, kept in the metadata log (ResourceUser, changed by
// AlterUserScramCredentials, KIP-554), so every broker checks a login
// against its own copy of the metadata state:
//
//   - SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the server side
//     of the exchange is github.com/xdg-go/scram over the stored credentials;
//     the password never reaches the broker.
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
var scramHashes = map[string]scram.HashGeneratorFcn{
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
		return &plainExchange{b: b}, nil
	}
	h, ok := scramHashes[mechanism]
	if !ok {
		return nil, fmt.Errorf("mechanism %q", mechanism)
	}
	srv, err := h.NewServer(func(user string) (scram.StoredCredentials, error) {
		cred, ok := b.scramCredential(user, mechanism)
		if !ok {
			return scram.StoredCredentials{}, errAuthFailed
		}
		return cred, nil
	})
	if err != nil {
		return nil, err
	}
	return &scramExchange{conv: srv.NewConversation()}, nil
}

type scramExchange struct{ conv *scram.ServerConversation }

func (x *scramExchange) step(in []byte) ([]byte, bool, string, error) {
	out, err := x.conv.Step(string(in))
	if err != nil {
		return nil, false, "", err
	}
	if x.conv.Done() {
		if !x.conv.Valid() {
			return nil, false, "", errAuthFailed
		}
		if az := x.conv.AuthzID(); az != "" && az != x.conv.Username() {
			// Kafka accepts an authorization id only if it is the user.
			return nil, false, "", errors.New("authorization id differs from the user")
		}
		return []byte(out), true, x.conv.Username(), nil
	}
	return []byte(out), false, "", nil
}

type plainExchange struct{ b *Broker }

// step reads "authzid NUL user NUL password" (RFC 4616).
func (x *plainExchange) step(in []byte) ([]byte, bool, string, error) {
	user, password, err := parsePlain(in)
	if err != nil {
		return nil, false, "", err
	}
	// Any of the user's credentials that the password reproduces.
	for _, m := range []string{MechanismSCRAMSHA512, MechanismSCRAMSHA256} {
		cred, ok := x.b.scramCredential(user, m)
		if !ok {
			continue
		}
		c, err := scramHashes[m].NewClientUnprepped(user, password, "")
		if err != nil {
			continue
		}
		if got := c.GetStoredCredentials(cred.KeyFactors); hmac.Equal(got.StoredKey, cred.StoredKey) {
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
	var h func() hash.Hash = sha256.New
	if mechanism == MechanismSCRAMSHA512 {
		h = sha512.New
	}
	mac := func(key []byte, msg string) []byte {
		m := hmac.New(h, key)
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	d := h()
	d.Write(mac(salted, "Client Key"))
	return scram.StoredCredentials{
		KeyFactors: scram.KeyFactors{Salt: string(salt), Iters: int(iterations)},
		StoredKey:  d.Sum(nil),
		ServerKey:  mac(salted, "Server Key"),
	}
}

// userConfigOp is the metadata change that sets or removes one credential.
func userConfigOp(mechanism string, c *scram.StoredCredentials) metadata.ConfigOp {
	if c == nil {
		return metadata.ConfigOp{Key: mechanism, Delete: true}
	}
	return metadata.ConfigOp{Key: mechanism, Value: formatSCRAMCredential(*c)}
}
