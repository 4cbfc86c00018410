package broker

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	krbclient "github.com/jcmturner/gokrb5/v8/client"
	krbconfig "github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/kerberos"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sediment-io/sediment/internal/testutil"
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
// user, with an enabled mechanism; with GSSAPI, the broker's principal, in
// its keytab, and a Kerberos configuration.
func TestSASLInterBrokerConfig(t *testing.T) {
	kt := keytab.New()
	if err := kt.AddEntry("kafka/localhost", "SEDIMENT.TEST", "pw", time.Unix(0, 0), 1, etypeID.AES256_CTS_HMAC_SHA1_96); err != nil {
		t.Fatal(err)
	}
	scram := []string{MechanismPlain, MechanismSCRAMSHA256}
	gss := []string{MechanismGSSAPI}
	oauthMechs := []string{MechanismOAuthBearer}
	for name, c := range map[string]struct {
		mechs []string
		ib    *InterBrokerSASLConfig
	}{
		"none":                     {scram, nil},
		"unknown":                  {scram, &InterBrokerSASLConfig{Mechanism: "DIGEST-MD5", User: "b", Password: "p"}},
		"not enabled":              {scram, &InterBrokerSASLConfig{Mechanism: MechanismSCRAMSHA512, User: "b", Password: "p"}},
		"no password":              {scram, &InterBrokerSASLConfig{Mechanism: MechanismPlain, User: "b"}},
		"oauth not enabled":        {scram, &InterBrokerSASLConfig{Mechanism: MechanismOAuthBearer, User: "b", Password: "p", TokenEndpoint: "https://idp.test/token"}},
		"oauth no endpoint":        {oauthMechs, &InterBrokerSASLConfig{Mechanism: MechanismOAuthBearer, User: "b", Password: "p"}},
		"oauth bad endpoint":       {oauthMechs, &InterBrokerSASLConfig{Mechanism: MechanismOAuthBearer, User: "b", Password: "p", TokenEndpoint: "ldap://idp.test"}},
		"oauth no secret":          {oauthMechs, &InterBrokerSASLConfig{Mechanism: MechanismOAuthBearer, User: "b", TokenEndpoint: "https://idp.test/token"}},
		"oauth file without path":  {oauthMechs, &InterBrokerSASLConfig{Mechanism: MechanismOAuthBearer, TokenEndpoint: "file://"}},
		"oauth file with a host":   {oauthMechs, &InterBrokerSASLConfig{Mechanism: MechanismOAuthBearer, TokenEndpoint: "file://tokens/t.jwt"}},
		"gssapi disabled":          {scram, &InterBrokerSASLConfig{Mechanism: MechanismGSSAPI, User: "kafka/localhost", Krb5Conf: krbconfig.New()}},
		"gssapi no principal":      {gss, &InterBrokerSASLConfig{Mechanism: MechanismGSSAPI, Krb5Conf: krbconfig.New()}},
		"gssapi no krb5.conf":      {gss, &InterBrokerSASLConfig{Mechanism: MechanismGSSAPI, User: "kafka/localhost"}},
		"gssapi not in the keytab": {gss, &InterBrokerSASLConfig{Mechanism: MechanismGSSAPI, User: "kafka/other", Krb5Conf: krbconfig.New()}},
		"gssapi another realm":     {gss, &InterBrokerSASLConfig{Mechanism: MechanismGSSAPI, User: "kafka/localhost@OTHER.TEST", Krb5Conf: krbconfig.New()}},
	} {
		cfg := Config{DataDir: t.TempDir(), Listeners: []Listener{{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext}},
			SASLMechanisms: c.mechs, GSSAPI: &GSSAPIConfig{Keytab: kt}, InterBrokerSASL: c.ib, Logger: testLogger(t)}
		b, err := New(cfg)
		if err == nil {
			b.Close()
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "inter-broker") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestGSSAPIInterBroker: two brokers whose only listener is SASL_PLAINTEXT
// with GSSAPI alone, bound to 127.0.0.1 and advertised as localhost,
// against a real MIT KDC, with the authorizer on: they log in to each other
// as kafka/localhost@SEDIMENT.TEST with their keytab (the principal
// "kafka", a super user), asking for tickets of kafka/localhost even where
// they dial the bound address (their clients' seed), and replicate every
// record alice produces with acks=all to both replicas.
func TestGSSAPIInterBroker(t *testing.T) {
	kdc := testutil.StartKDC(t)
	kdc.AddUser(t, "alice", "alice-pw")
	kt, err := LoadKeytab(kdc.AddService(t, "kafka/localhost"))
	if err != nil {
		t.Fatal(err)
	}
	krb5, err := krbconfig.Load(kdc.Krb5Conf)
	if err != nil {
		t.Fatal(err)
	}
	brokers := startPair(t, func(c *Config) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		c.Listeners = []Listener{{Name: "SASL_PLAINTEXT", Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			Advertised: net.JoinHostPort("localhost", strconv.Itoa(port)), SecurityProtocol: ProtocolSASLPlaintext}}
		c.SASLMechanisms = []string{MechanismGSSAPI}
		c.GSSAPI = &GSSAPIConfig{Keytab: kt}
		c.InterBrokerSASL = &InterBrokerSASLConfig{Mechanism: MechanismGSSAPI, User: "kafka/localhost", Krb5Conf: krb5}
		c.Authorizer = AuthorizerConfig{Enabled: true, SuperUsers: []string{"User:kafka", "User:alice"}}
	})
	alice := kerberos.Auth{Client: krbclient.NewWithPassword("alice", kdc.Realm, "alice-pw", krb5, krbclient.DisablePAFXFAST(true)), Service: "kafka"}.AsMechanism()
	// Clients ask tickets for the host they dial: the advertised one.
	cl := secureClient(t, brokers[0], nil, "SASL_PLAINTEXT", alice, kgo.SeedBrokers(brokers[0].addrs[0].Advertised),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(30*time.Second), kgo.RequestRetries(20))
	createPairTopic(t, kadm.NewClient(cl), "krb-replicated", nil)
	produced := produceAll(t, cl, makeRecords("krb-replicated", 200, "krb"))
	for p, recs := range produced {
		end := recs[len(recs)-1].Offset + 1
		for _, b := range brokers {
			waitCond(t, func() bool {
				topic, ok := b.meta.State().Topic("krb-replicated")
				if !ok {
					return false
				}
				part, err := b.store.openLocked(topic, p)
				return err == nil && part.log.LogEndOffset() >= end
			})
		}
	}
	// The followers fetched logged in as "kafka".
	n := 0
	for _, b := range brokers {
		b.mu.Lock()
		for c := range b.mu.conns {
			if sc := c.info.sasl; sc != nil && sc.done.Load() && c.info.Principal == "kafka" {
				n++
			}
		}
		b.mu.Unlock()
	}
	if n == 0 {
		t.Error("no connection logged in as the brokers' principal kafka")
	}
}
