package broker

import (
	"context"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/kerberos"

	"github.com/sediment-io/sediment/internal/testutil"
)

// TestGSSAPI: SASL/GSSAPI logins against a real MIT KDC: franz-go's
// Kerberos mechanism (gokrb5) logs in as alice@SEDIMENT.TEST with a
// password and produces and consumes as the principal "alice"; a user the
// KDC does not know, and a broker whose keytab lacks the service key, do
// not log in.
func TestGSSAPI(t *testing.T) {
	kdc := testutil.StartKDC(t)
	kdc.AddUser(t, "alice", "alice-pw")
	b, krb5 := gssapiBroker(t, kdc, nil, MechanismGSSAPI, MechanismSCRAMSHA512)
	login := func(user, pass string) kgo.Opt {
		return kgo.SASL(kerberos.Auth{Client: client.NewWithPassword(user, kdc.Realm, pass, krb5, client.DisablePAFXFAST(true)), Service: "kafka"}.AsMechanism())
	}
	createTopic(t, b, "krb", 1, nil)
	ctx := testCtx(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.listenerAddr("SASL_PLAINTEXT")), login("alice", "alice-pw"),
		kgo.DefaultProduceTopic("krb"), kgo.ConsumeTopics("krb"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, kgo.StringRecord("kerberized")).FirstErr(); err != nil {
		t.Fatalf("produce over GSSAPI: %v", err)
	}
	fs := cl.PollRecords(ctx, 1)
	if err := fs.Err(); err != nil || fs.NumRecords() != 1 || string(fs.Records()[0].Value) != "kerberized" {
		t.Fatalf("consume over GSSAPI: %v %d", err, fs.NumRecords())
	}
	checkSASLPrincipals(t, b, "alice", func(*saslConn) bool { return true })

	bad, err := kgo.NewClient(kgo.SeedBrokers(b.listenerAddr("SASL_PLAINTEXT")), login("alice", "wrong"), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := bad.Ping(pctx); err == nil {
		t.Error("a wrong Kerberos password logged in")
	}
}

// FuzzGSSAPIExchange: arbitrary GSS-API tokens (the first as an AP-REQ,
// the next as the answers to the security layer offer) against a keytab:
// no panic, and no login without a ticket the keytab opens.
func FuzzGSSAPIExchange(f *testing.F) {
	kt := keytab.New()
	if err := kt.AddEntry("kafka/localhost", "SEDIMENT.TEST", "pw", time.Unix(0, 0), 1, etypeID.AES256_CTS_HMAC_SHA1_96); err != nil {
		f.Fatal(err)
	}
	cfg := &GSSAPIConfig{Keytab: kt, ServiceName: "kafka"}
	f.Add([]byte{0x60, 0x0b, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02, 0x01, 0x00}, []byte{}, []byte{0x05, 0x04, 0x00, 0xff})
	f.Add([]byte{0x60, 0x80}, []byte{0x05, 0x04, 0x01, 0xff, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0}, []byte(nil))
	f.Add([]byte("\x60\x82\xff\xff\x06\x09"), []byte{1}, []byte{2})
	f.Fuzz(func(t *testing.T, first, second, third []byte) {
		x := &gssapiExchange{cfg: cfg}
		for _, in := range [][]byte{first, second, third} {
			_, done, _, err := x.step(in)
			if err != nil {
				return
			}
			if done {
				t.Fatalf("a login from fuzzed tokens %x %x %x", first, second, third)
			}
		}
	})
}

// TestGSSAPIPrincipalRules: sasl.kerberos.principal.to.local.rules against
// a real MIT KDC. With RULE:[2:$1]/U and a rule that renames
// alice@SEDIMENT.TEST, the two-component principal app/worker1 logs in as
// "APP" and alice as "analyst"; bob, whom no rule maps, is refused.
func TestGSSAPIPrincipalRules(t *testing.T) {
	kdc := testutil.StartKDC(t)
	kdc.AddUser(t, "alice", "alice-pw")
	kdc.AddUser(t, "bob", "bob-pw")
	kdc.AddUser(t, "app/worker1", "app-pw")
	namer, err := ParseKerberosRules(`RULE:[2:$1]/U, RULE:[1:$1@$0](alice@SEDIMENT\.TEST)s/.*/analyst/`)
	if err != nil {
		t.Fatal(err)
	}
	b, krb5 := gssapiBroker(t, kdc, namer, MechanismGSSAPI)
	ctx := testCtx(t)
	login := func(user, pass string) (*kgo.Client, error) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.listenerAddr("SASL_PLAINTEXT")), kgo.RequestRetries(0),
			kgo.SASL(kerberos.Auth{Client: client.NewWithPassword(user, kdc.Realm, pass, krb5, client.DisablePAFXFAST(true)), Service: "kafka"}.AsMechanism()))
		if err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return cl, cl.Ping(pctx)
	}
	for _, c := range []struct{ user, pass, principal string }{
		{"app/worker1", "app-pw", "APP"},
		{"alice", "alice-pw", "analyst"},
	} {
		cl, err := login(c.user, c.pass)
		if err != nil {
			t.Fatalf("%s: %v", c.user, err)
		}
		checkSASLPrincipals(t, b, c.principal, func(*saslConn) bool { return true })
		cl.Close()
		// The next check sees only the next login.
		waitCond(t, func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			for c := range b.mu.conns {
				if c.info.sasl != nil {
					return false
				}
			}
			return true
		})
	}
	cl, err := login("bob", "bob-pw")
	cl.Close()
	if err == nil {
		t.Error("bob@SEDIMENT.TEST, whom no rule maps, logged in")
	}
}

// gssapiBroker starts a broker with a PLAINTEXT listener and a
// SASL_PLAINTEXT one offering mechs, whose keytab holds kafka/localhost and
// kafka/127.0.0.1 of kdc's realm; it returns the Kerberos configuration
// clients use.
func gssapiBroker(t *testing.T, kdc *testutil.KDC, namer *KerberosNamer, mechs ...string) (*Broker, *config.Config) {
	t.Helper()
	kt, err := LoadKeytab(kdc.AddService(t, "kafka/localhost", "kafka/127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "", func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
		}
		c.SASLMechanisms = mechs
		c.GSSAPI = &GSSAPIConfig{Keytab: kt, ServiceName: "kafka", Namer: namer}
	})
	krb5, err := config.Load(kdc.Krb5Conf)
	if err != nil {
		t.Fatal(err)
	}
	return b, krb5
}
