package broker

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
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

// InterBrokerSASLConfig is how the broker's own clients log in.
type InterBrokerSASLConfig struct {
	Mechanism      string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	User, Password string
}

// interBrokerSCRAMIterations is the iteration count of a credential the
// broker creates.
const interBrokerSCRAMIterations = 8192

// mechanism returns the franz-go mechanism; nil without SASL.
func (c *InterBrokerSASLConfig) mechanism() sasl.Mechanism {
	switch {
	case c == nil:
		return nil
	case c.Mechanism == MechanismPlain:
		return plain.Auth{User: c.User, Pass: c.Password}.AsMechanism()
	case c.Mechanism == MechanismSCRAMSHA256:
		return scram.Auth{User: c.User, Pass: c.Password}.AsSha256Mechanism()
	default:
		return scram.Auth{User: c.User, Pass: c.Password}.AsSha512Mechanism()
	}
}

// check refuses a configuration the first listener cannot use.
func (c *InterBrokerSASLConfig) check(enabled []string) error {
	switch {
	case c.Mechanism != MechanismPlain && c.Mechanism != MechanismSCRAMSHA256 && c.Mechanism != MechanismSCRAMSHA512:
		return fmt.Errorf("broker: inter-broker SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.Mechanism)
	case !slices.Contains(enabled, c.Mechanism):
		return fmt.Errorf("broker: inter-broker SASL mechanism %s is not among the enabled mechanisms %v", c.Mechanism, enabled)
	case c.User == "" || c.Password == "":
		return fmt.Errorf("broker: inter-broker SASL needs a user and a password")
	}
	return nil
}

// peerClientOpts are the options of the broker's own Kafka clients.
func (b *Broker) peerClientOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.Dialer(b.dialPeer)}
	if m := b.cfg.InterBrokerSASL.mechanism(); m != nil && usesSASL(b.cfg.Listeners[0].SecurityProtocol) {
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
	if c == nil || !usesSASL(b.cfg.Listeners[0].SecurityProtocol) {
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
