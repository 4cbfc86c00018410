package broker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestSASLInterBroker: two brokers whose only listener is SASL_PLAINTEXT,
// with the authorizer on: they create the inter-broker user themselves and
// replicate every record produced with acks=all to both replicas, logged in
// as that user (a super user); a client with the same listener and no ACLs
// is refused.
func TestSASLInterBroker(t *testing.T) {
	brokers := startPair(t, func(c *Config) {
		c.Listeners = []Listener{{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext}}
		c.InterBrokerSASL = &InterBrokerSASLConfig{Mechanism: MechanismSCRAMSHA512, User: "broker", Password: "broker-secret"}
		c.Authorizer = AuthorizerConfig{Enabled: true, SuperUsers: []string{"User:broker"}}
	})
	// The operator logs in as the inter-broker user (the only one there is).
	cl := secureClient(t, brokers[0], nil, "SASL_PLAINTEXT", scram.Auth{User: "broker", Pass: "broker-secret"}.AsSha512Mechanism(),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(30*time.Second), kgo.RequestRetries(20))
	waitCond(t, func() bool { return cl.Ping(testCtx(t)) == nil }) // until a broker has created the user
	createPairTopic(t, kadm.NewClient(cl), "sasl-replicated", nil)
	produced := produceAll(t, cl, makeRecords("sasl-replicated", 200, "sasl"))
	for p, recs := range produced {
		end := recs[len(recs)-1].Offset + 1
		for _, b := range brokers {
			waitCond(t, func() bool {
				topic, ok := b.meta.State().Topic("sasl-replicated")
				if !ok {
					return false
				}
				part, err := b.store.openLocked(topic, p)
				return err == nil && part.log.LogEndOffset() >= end
			})
		}
	}
	if _, err := kadm.NewClient(cl).AlterUserSCRAMs(testCtx(t), nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "alice-pw"}}); err != nil {
		t.Fatal(err)
	}
	alice := secureClient(t, brokers[1], nil, "SASL_PLAINTEXT", scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism())
	waitCond(t, func() bool { return alice.Ping(testCtx(t)) == nil }) // her credential reached broker 2
	if err := produceOne(alice, "sasl-replicated", "x"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice, without ACLs, produces: %v", err)
	}
}

// TestSASLInterBrokerConfig: a SASL first listener needs the inter-broker
// user, with an enabled mechanism.
func TestSASLInterBrokerConfig(t *testing.T) {
	for name, c := range map[string]*InterBrokerSASLConfig{
		"none":             nil,
		"unknown":          {Mechanism: "GSSAPI", User: "b", Password: "p"},
		"not enabled":      {Mechanism: MechanismSCRAMSHA512, User: "b", Password: "p"},
		"no password":      {Mechanism: MechanismPlain, User: "b"},
		"oauth not usable": {Mechanism: MechanismOAuthBearer, User: "b", Password: "p"},
	} {
		cfg := Config{DataDir: t.TempDir(), Listeners: []Listener{{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext}},
			SASLMechanisms: []string{MechanismPlain, MechanismSCRAMSHA256}, InterBrokerSASL: c, Logger: testLogger(t)}
		b, err := New(cfg)
		if err == nil {
			b.Close()
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "inter-broker") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
