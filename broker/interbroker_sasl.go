package broker

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	krbclient "github.com/jcmturner/gokrb5/v8/client"
	krbconfig "github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/kerberos"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	xscram "github.com/xdg-go/scram"

	"github.com/sediment-io/sediment/metadata"
)

// SASL on the inter-broker listener (Kafka's sasl.mechanism.inter.broker.protocol
// with the listener's JAAS credentials): when the first listener is
// SASL_PLAINTEXT or SASL_SSL, the broker's own clients (replica fetchers,
// transaction markers) log in there as InterBrokerSASL's user.
//
// The user is a SCRAM user like any other (metadata log). So that a cluster
// whose only listeners are SASL can start, each broker creates it at start
// when it does not exist yet (as kafka-storage format --add-scram does in
// Kafka); an existing credential is never overwritten: one that the
// configured password does not match is logged, and replication fails to
// log in until the operator fixes one or the other. With the authorizer, the
// user must be a super user (or hold CLUSTER_ACTION).

//
// With GSSAPI (Kafka's sasl.mechanism.inter.broker.protocol=GSSAPI and the
// KafkaServer JAAS principal) the broker logs in as its own Kerberos
// principal, User, with the keys of its keytab (GSSAPIConfig.Keytab): it
// asks the realm's KDC (Krb5Conf) for a ticket-granting ticket, renewed as
// it expires, and for a service ticket of each peer's
// <service name>/<advertised host>. Its principal on the peers is what
// their sasl.kerberos.principal.to.local.rules make of it ("kafka" for
// kafka/broker1.example.com@REALM by DEFAULT). No credential is created.
//
// With OAUTHBEARER (KIP-768's login callback handler: the listener's JAAS
// clientId and clientSecret, sasl.oauthbearer.token.endpoint.url and
// sasl.oauthbearer.scope) the broker logs in with an access token it gets
// from the identity provider's token endpoint by the client credentials
// grant (RFC 6749 4.4), User the client id and Password the secret, and
// reuses until shortly before it expires; a file:// endpoint names a file
// holding a token (a sidecar keeps it fresh), read at each login. The peers
// check the token as any client's (OAuthBearerConfig); its subject claim
// is the principal. No credential is created.

// InterBrokerSASLConfig is how the broker's own clients log in.
type InterBrokerSASLConfig struct {
	Mechanism string // PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, GSSAPI or OAUTHBEARER
	// User is the SCRAM or PLAIN user; with GSSAPI the broker's Kerberos
	// principal (kafka/broker1.example.com, or with @REALM; without it the
	// realm of the keytab's entry); with OAUTHBEARER the OAuth client id.
	User     string
	Password string // not with GSSAPI; the client secret with OAUTHBEARER
	// Krb5Conf is the Kerberos configuration (the KDCs of the realm) the
	// GSSAPI login asks for tickets with.
	Krb5Conf *krbconfig.Config
	// TokenEndpoint is where OAUTHBEARER gets its access token: the
	// identity provider's token endpoint (https:// or http://), or
	// file:// and the path of a file holding one.
	TokenEndpoint string
	// Scope is the scope asked for with the client credentials grant
	// (space-separated; empty: none).
	Scope string
}

// interBrokerSCRAMIterations is the iteration count of a credential the
// broker creates.
const interBrokerSCRAMIterations = 8192

// mechanism returns the franz-go mechanism; nil without SASL.
func (b *Broker) interBrokerMechanism() sasl.Mechanism {
	c := b.cfg.InterBrokerSASL
	switch {
	case c == nil:
		return nil
	case c.Mechanism == MechanismGSSAPI:
		first := b.addrs[0]
		return advertisedSPN{
			Mechanism:  kerberos.Auth{Client: b.krbClient, Service: b.cfg.GSSAPI.serviceName()}.AsMechanism(),
			bound:      first.Addr,
			advertised: first.Advertised,
			gate:       &b.krbGate,
		}
	case c.Mechanism == MechanismOAuthBearer:
		return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
			tok, err := b.interBrokerToken(ctx)
			return oauth.Auth{Token: tok}, err
		})
	case c.Mechanism == MechanismPlain:
		return plain.Auth{User: c.User, Pass: c.Password}.AsMechanism()
	case c.Mechanism == MechanismSCRAMSHA256:
		return scram.Auth{User: c.User, Pass: c.Password}.AsSha256Mechanism()
	default:
		return scram.Auth{User: c.User, Pass: c.Password}.AsSha512Mechanism()
	}
}

// advertisedSPN asks for the service ticket of the advertised host where the
// broker's own clients dial their seed, the first listener's bound address
// (0.0.0.0:9092, or an IP address the advertised name stands for): franz-go's
// Kerberos mechanism takes the host it dialed for the service principal's,
// and no service principal names a bound address.
//
// gate orders the logins against Broker.Close's Destroy of the Kerberos
// client (which rewrites its credentials): a client's connection goroutine
// may still be logging in when Close runs, and kgo's Close does not wait
// for it (the race detector saw the two).
type advertisedSPN struct {
	sasl.Mechanism
	bound, advertised string
	gate              *krbGate
}

// krbGate: logins hold it shared; Close takes it to destroy the client,
// after which logins fail.
type krbGate struct {
	mu        sync.RWMutex
	destroyed bool
}

func (m advertisedSPN) Authenticate(ctx context.Context, host string) (sasl.Session, []byte, error) {
	if host == m.bound {
		host = m.advertised
	}
	if m.gate != nil {
		m.gate.mu.RLock()
		defer m.gate.mu.RUnlock()
		if m.gate.destroyed {
			return nil, nil, errors.New("broker: closed: no Kerberos login")
		}
	}
	return m.Mechanism.Authenticate(ctx, host)
}

// check refuses a configuration the first listener cannot use.
func (c *InterBrokerSASLConfig) check(enabled []string, gss *GSSAPIConfig) error {
	switch {
	case c.Mechanism != MechanismPlain && c.Mechanism != MechanismSCRAMSHA256 && c.Mechanism != MechanismSCRAMSHA512 && c.Mechanism != MechanismGSSAPI && c.Mechanism != MechanismOAuthBearer:
		return fmt.Errorf("broker: inter-broker SASL mechanism %q: want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, GSSAPI or OAUTHBEARER", c.Mechanism)
	case !slices.Contains(enabled, c.Mechanism):
		return fmt.Errorf("broker: inter-broker SASL mechanism %s is not among the enabled mechanisms %v", c.Mechanism, enabled)
	case c.Mechanism == MechanismOAuthBearer:
		u, err := url.Parse(c.TokenEndpoint)
		switch {
		case c.TokenEndpoint == "" || err != nil:
			return fmt.Errorf("broker: inter-broker SASL with OAUTHBEARER needs the token endpoint (sasl-oauthbearer-token-endpoint-url): %q", c.TokenEndpoint)
		case u.Scheme == "file":
			if u.Path == "" || u.Host != "" {
				return fmt.Errorf("broker: inter-broker OAUTHBEARER token file %q: want file:///absolute/path", c.TokenEndpoint)
			}
		case u.Scheme != "https" && u.Scheme != "http":
			return fmt.Errorf("broker: inter-broker OAUTHBEARER token endpoint %q: want https://, http:// or file://", c.TokenEndpoint)
		case c.User == "" || c.Password == "":
			return errors.New("broker: inter-broker SASL with OAUTHBEARER needs the client id and secret (inter-broker-sasl-username, -password)")
		}
	case c.Mechanism == MechanismGSSAPI:
		if c.User == "" {
			return errors.New("broker: inter-broker SASL with GSSAPI needs the broker's Kerberos principal (inter-broker-sasl-username)")
		}
		if c.Krb5Conf == nil {
			return errors.New("broker: inter-broker SASL with GSSAPI needs the Kerberos configuration (sasl-kerberos-krb5-conf)")
		}
		if gss == nil || gss.Keytab == nil {
			return errors.New("broker: inter-broker SASL with GSSAPI needs the broker's keytab (sasl-kerberos-keytab)")
		}
		if _, _, err := c.kerberosPrincipal(gss.Keytab); err != nil {
			return err
		}
	case c.User == "" || c.Password == "":
		return fmt.Errorf("broker: inter-broker SASL needs a user and a password")
	}
	return nil
}

// kerberosPrincipal splits User into the name and the realm; without
// "@REALM" the realm is that of the keytab's entry for the name, which
// must be there either way.
func (c *InterBrokerSASLConfig) kerberosPrincipal(kt *keytab.Keytab) (name, realm string, err error) {
	name, realm, _ = strings.Cut(c.User, "@")
	for _, e := range kt.Entries {
		if strings.Join(e.Principal.Components, "/") == name && (realm == "" || e.Principal.Realm == realm) {
			return name, e.Principal.Realm, nil
		}
	}
	return "", "", fmt.Errorf("broker: inter-broker SASL with GSSAPI: the keytab holds no key of %s", c.User)
}

// newInterBrokerKerberos makes the Kerberos client of GSSAPI inter-broker
// logins; it logs in at the first connection and renews its ticket.
func (b *Broker) newInterBrokerKerberos() error {
	c := b.cfg.InterBrokerSASL
	if c == nil || c.Mechanism != MechanismGSSAPI || !usesSASL(b.cfg.Listeners[0].SecurityProtocol) {
		return nil
	}
	name, realm, err := c.kerberosPrincipal(b.cfg.GSSAPI.Keytab)
	if err != nil {
		return err
	}
	b.krbClient = krbclient.NewWithKeytab(name, realm, b.cfg.GSSAPI.Keytab, c.Krb5Conf, krbclient.DisablePAFXFAST(true))
	return nil
}

// peerClientOpts are the options of the broker's own Kafka clients.
func (b *Broker) peerClientOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.Dialer(b.dialPeer)}
	if m := b.interBrokerMechanism(); m != nil && usesSASL(b.cfg.Listeners[0].SecurityProtocol) {
		opts = append(opts, kgo.SASL(m))
	}
	return opts
}

// credentialMechanism is the SCRAM credential the user logs in with (PLAIN
// checks passwords against SCRAM-SHA-512 or -256 credentials).
func (c *InterBrokerSASLConfig) credentialMechanism() string {
	if c.Mechanism == MechanismPlain {
		return MechanismSCRAMSHA512
	}
	return c.Mechanism
}

// ensureInterBrokerUser creates the inter-broker user's credential if the
// metadata has none, retrying until it is there or the broker stops.
func (b *Broker) ensureInterBrokerUser(ctx context.Context) {
	c := b.cfg.InterBrokerSASL
	if c == nil || c.Mechanism == MechanismGSSAPI || c.Mechanism == MechanismOAuthBearer || !usesSASL(b.cfg.Listeners[0].SecurityProtocol) {
		return
	}
	mech := c.credentialMechanism()
	backoff := 100 * time.Millisecond
	for {
		if cred, ok := b.scramCredential(c.User, mech); ok {
			if !credentialMatches(mech, c.User, c.Password, cred) {
				b.log.Error("the inter-broker user's credential in the metadata does not match inter-broker-sasl-password: replication cannot log in", "user", c.User, "mechanism", mech)
			}
			return
		}
		salt := make([]byte, 32)
		rand.Read(salt)
		cl, err := scramHashes[mech].NewClientUnprepped(c.User, c.Password, "")
		if err == nil {
			var cred xscram.StoredCredentials
			if cred, err = cl.GetStoredCredentialsWithError(xscram.KeyFactors{Salt: string(salt), Iters: interBrokerSCRAMIterations}); err == nil {
				pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, _, err = b.store.propose(pctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceUser, ResourceName: c.User,
					Ops: []metadata.ConfigOp{userConfigOp(mech, &cred)}})
				cancel()
				if err == nil {
					b.log.Info("created the inter-broker SASL user", "user", c.User, "mechanism", mech)
					return
				}
			}
		}
		b.log.Debug("creating the inter-broker SASL user", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// credentialMatches reports whether password reproduces cred.
func credentialMatches(mech, user, password string, cred xscram.StoredCredentials) bool {
	cl, err := scramHashes[mech].NewClientUnprepped(user, password, "")
	if err != nil {
		return false
	}
	got, err := cl.GetStoredCredentialsWithError(cred.KeyFactors)
	return err == nil && hmac.Equal(got.StoredKey, cred.StoredKey)
}
