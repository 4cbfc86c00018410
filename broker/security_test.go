package broker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	xscram "github.com/xdg-go/scram"

	"github.com/sediment-io/sediment/metadata"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, made fresh for each test.
type testPKI struct {
	pool           *x509.CertPool
	server, client tls.Certificate
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sediment test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, subject pkix.Name, usage []x509.ExtKeyUsage, ips []net.IP) tls.Certificate {
		k := key()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: subject,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: usage, IPAddresses: ips, KeyUsage: x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	p := &testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	// The broker's certificate serves as a client certificate too: brokers
	// present it to each other when the first listener is SSL.
	p.server = issue(2, pkix.Name{CommonName: "broker"}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, []net.IP{net.ParseIP("127.0.0.1")})
	p.client = issue(3, pkix.Name{CommonName: "alice", Organization: []string{"acme"}}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil)
	return p
}

// startSecureBroker starts a broker with the four kinds of listener, in
// this order: PLAINTEXT (first: inter-broker), SASL_PLAINTEXT, SSL, SASL_SSL.
func startSecureBroker(t testing.TB, dir string, pki *testPKI) *Broker {
	t.Helper()
	return startBroker(t, dir, func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
			{Name: "SSL", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSSL},
			{Name: "SASL_SSL", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLSSL},
		}
		c.TLS = &tls.Config{Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool, ClientAuth: tls.VerifyClientCertIfGiven}
	})
}

func (b *Broker) listenerAddr(name string) string {
	for _, l := range b.addrs {
		if l.Name == name {
			return l.Addr
		}
	}
	return ""
}

func setUser(t testing.TB, b *Broker, user, password string, mechs ...kadm.ScramMechanism) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, b))
	var ups []kadm.UpsertSCRAM
	for _, m := range mechs {
		ups = append(ups, kadm.UpsertSCRAM{User: user, Mechanism: m, Iterations: 4096, Password: password})
	}
	res, err := adm.AlterUserSCRAMs(testCtx(t), nil, ups)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("set user %s: %v %s", r.User, r.Err, r.ErrMessage)
		}
	}
}

// secureClient is a kgo client on one of startSecureBroker's listeners.
func secureClient(t testing.TB, b *Broker, pki *testPKI, listener string, m sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	o := []kgo.Opt{kgo.SeedBrokers(b.listenerAddr(listener)), kgo.RequestRetries(0), kgo.RetryTimeout(5 * time.Second)}
	if strings.Contains(listener, "SSL") {
		o = append(o, kgo.DialTLSConfig(&tls.Config{RootCAs: pki.pool}))
	}
	if m != nil {
		o = append(o, kgo.SASL(m))
	}
	cl, err := kgo.NewClient(append(o, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestSecureListeners: every listener kind with every SASL mechanism
// carries produce and consume (with kgo's own SASL and TLS), the metadata
// a client gets names its own listener, TLS fetches are copied (no
// sendfile), and the users' credentials survive a restart.
func TestSecureListeners(t *testing.T) {
	dir := t.TempDir()
	pki := newTestPKI(t)
	b := startSecureBroker(t, dir, pki)
	setUser(t, b, "alice", "alice-secret", kadm.ScramSha256, kadm.ScramSha512)

	adm := kadm.NewClient(newClient(t, b))
	d, err := adm.DescribeUserSCRAMs(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if u := d["alice"]; u.Err != nil || len(u.CredInfos) != 2 || u.CredInfos[0].Iterations != 4096 {
		t.Fatalf("described alice: %+v", d)
	}

	mechs := map[string]func() sasl.Mechanism{
		"PLAIN":         func() sasl.Mechanism { return plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism() },
		"SCRAM-SHA-256": func() sasl.Mechanism { return scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism() },
		"SCRAM-SHA-512": func() sasl.Mechanism { return scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism() },
	}
	type run struct{ listener, mech string }
	runs := []run{{"SSL", ""}}
	for _, l := range []string{"SASL_PLAINTEXT", "SASL_SSL"} {
		for m := range mechs {
			runs = append(runs, run{l, m})
		}
	}
	copiedBefore := testutil.ToFloat64(b.metrics.copied)
	for _, r := range runs {
		t.Run(r.listener+"/"+r.mech, func(t *testing.T) {
			var m sasl.Mechanism
			if r.mech != "" {
				m = mechs[r.mech]()
			}
			topic := strings.ToLower("sec-" + r.listener + "-" + r.mech)
			cl := secureClient(t, b, pki, r.listener, m)
			acl := kadm.NewClient(cl)
			if _, err := acl.CreateTopic(testCtx(t), 2, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			meta, err := acl.BrokerMetadata(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := meta.Brokers[0]; net.JoinHostPort(got.Host, itoa(got.Port)) != b.listenerAddr(r.listener) {
				t.Fatalf("metadata on %s names %s:%d, want %s", r.listener, got.Host, got.Port, b.listenerAddr(r.listener))
			}
			want := produceAll(t, cl, makeRecords(topic, 300, r.mech))
			consumer := secureClient(t, b, pki, r.listener, m, kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
			got := map[int32][]*kgo.Record{}
			for n := 0; n < 300; {
				fs := consumer.PollFetches(testCtx(t))
				fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
				fs.EachRecord(func(rec *kgo.Record) { got[rec.Partition] = append(got[rec.Partition], rec); n++ })
			}
			sameRecords(t, want, got)
		})
	}
	if testutil.ToFloat64(b.metrics.copied) == copiedBefore {
		t.Fatal("fetches over TLS did not go through the copying path")
	}
	if n := testutil.ToFloat64(b.metrics.saslLogins); n < 6 {
		t.Fatalf("sasl logins %v, want at least 6", n)
	}

	// The credentials are in the metadata log: after a restart alice
	// still logs in.
	b.Close()
	b = startSecureBroker(t, dir, pki)
	cl := secureClient(t, b, pki, "SASL_SSL", mechs["SCRAM-SHA-512"]())
	if err := cl.Ping(testCtx(t)); err != nil {
		t.Fatalf("login after restart: %v", err)
	}
}

func itoa(n int32) string { return big.NewInt(int64(n)).String() }

// TestSASLFailures: wrong passwords, unknown users, changed and deleted
// credentials, a disabled mechanism and requests out of turn get Kafka's
// answers, and the connection closes.
func TestSASLFailures(t *testing.T) {
	pki := newTestPKI(t)
	b := startSecureBroker(t, "", pki)
	setUser(t, b, "bob", "old", kadm.ScramSha256)

	login := func(m sasl.Mechanism) error {
		cl := secureClient(t, b, pki, "SASL_PLAINTEXT", m)
		defer cl.Close()
		return cl.Ping(testCtx(t))
	}
	isAuthFailed := func(err error) bool { return errors.Is(err, kerr.SaslAuthenticationFailed) }
	for name, m := range map[string]sasl.Mechanism{
		"scram wrong password":   scram.Auth{User: "bob", Pass: "nope"}.AsSha256Mechanism(),
		"scram unknown user":     scram.Auth{User: "mallory", Pass: "old"}.AsSha256Mechanism(),
		"scram other mechanism":  scram.Auth{User: "bob", Pass: "old"}.AsSha512Mechanism(),
		"plain wrong password":   plain.Auth{User: "bob", Pass: "nope"}.AsMechanism(),
		"plain unknown user":     plain.Auth{User: "mallory", Pass: "old"}.AsMechanism(),
		"plain other authz user": plain.Auth{Zid: "alice", User: "bob", Pass: "old"}.AsMechanism(),
	} {
		if err := login(m); !isAuthFailed(err) {
			t.Errorf("%s: got %v, want SASL_AUTHENTICATION_FAILED", name, err)
		}
	}
	if n := testutil.ToFloat64(b.metrics.saslFailures); n < 6 {
		t.Errorf("sasl failures %v, want at least 6", n)
	}
	if err := login(plain.Auth{User: "bob", Pass: "old"}.AsMechanism()); err != nil {
		t.Fatalf("bob's PLAIN login: %v", err)
	}
	setUser(t, b, "bob", "new", kadm.ScramSha256)
	if err := login(scram.Auth{User: "bob", Pass: "old"}.AsSha256Mechanism()); !isAuthFailed(err) {
		t.Errorf("old password after change: %v", err)
	}
	if err := login(scram.Auth{User: "bob", Pass: "new"}.AsSha256Mechanism()); err != nil {
		t.Errorf("new password: %v", err)
	}

	// Requests out of turn, on raw connections.
	dialTo := func(listener string) net.Conn {
		nc, err := net.Dial("tcp", b.listenerAddr(listener))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	closed := func(nc net.Conn) bool {
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := nc.Read(make([]byte, 1))
		return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(errString(err), "reset")
	}
	// Metadata before authenticating: closed.
	nc := dialTo("SASL_PLAINTEXT")
	var f kmsg.RequestFormatter
	nc.Write(f.AppendRequest(nil, kmsg.NewPtrMetadataRequest(), 1))
	if !closed(nc) {
		t.Error("metadata before SASL: connection not closed")
	}
	// A frame over the pre-authentication bound: closed.
	nc = dialTo("SASL_PLAINTEXT")
	nc.Write([]byte{0, 0x10, 0, 0}) // 1 MiB
	if !closed(nc) {
		t.Error("1 MiB frame before SASL: connection not closed")
	}
	// ApiVersions is allowed, then an unknown mechanism.
	nc = dialTo("SASL_PLAINTEXT")
	rawRequest(t, nc, kmsg.NewPtrApiVersionsRequest(), 1)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "GSSAPI"
	hr := rawRequest(t, nc, hs, 2).(*kmsg.SASLHandshakeResponse)
	if hr.ErrorCode != kerr.UnsupportedSaslMechanism.Code || strings.Join(hr.SupportedMechanisms, ",") != "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512" {
		t.Errorf("GSSAPI handshake: %+v", hr)
	}
	if !closed(nc) {
		t.Error("unsupported mechanism: connection not closed")
	}
	// SaslAuthenticate without a handshake: ILLEGAL_SASL_STATE, closed.
	nc = dialTo("SASL_PLAINTEXT")
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 1, []byte("\x00bob\x00new")
	if ar := rawRequest(t, nc, au, 1).(*kmsg.SASLAuthenticateResponse); ar.ErrorCode != kerr.IllegalSaslState.Code {
		t.Errorf("authenticate without handshake: %+v", ar)
	}
	// A handshake on a listener without SASL: ILLEGAL_SASL_STATE.
	nc = dialTo("PLAINTEXT")
	hs.Mechanism = "PLAIN"
	if hr := rawRequest(t, nc, hs, 1).(*kmsg.SASLHandshakeResponse); hr.ErrorCode != kerr.IllegalSaslState.Code {
		t.Errorf("handshake on PLAINTEXT: %+v", hr)
	}
	// Deleting bob's only credential deletes bob.
	adm := kadm.NewClient(newClient(t, b))
	res, err := adm.AlterUserSCRAMs(testCtx(t), []kadm.DeleteSCRAM{{User: "bob", Mechanism: kadm.ScramSha256}}, nil)
	if err != nil || res["bob"].Err != nil {
		t.Fatalf("delete bob: %v %+v", err, res)
	}
	if err := login(scram.Auth{User: "bob", Pass: "new"}.AsSha256Mechanism()); !isAuthFailed(err) {
		t.Errorf("deleted user logs in: %v", err)
	}
	if d, err := adm.DescribeUserSCRAMs(testCtx(t)); err != nil || len(d) != 0 {
		t.Errorf("users after delete: %v %+v", err, d)
	}
	// The broker carries on.
	if err := newClient(t, b).Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestSASLHandshakeV0: the raw-token exchange that follows SaslHandshake v0
// (kafka-python and other older clients), PLAIN and SCRAM.
func TestSASLHandshakeV0(t *testing.T) {
	pki := newTestPKI(t)
	b := startSecureBroker(t, "", pki)
	setUser(t, b, "carol", "pw", kadm.ScramSha512)

	rawToken := func(nc net.Conn, tok []byte) []byte {
		t.Helper()
		frame := append([]byte{0, 0, 0, 0}, tok...)
		putU32(frame, uint32(len(tok)))
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		var sz [4]byte
		if _, err := io.ReadFull(nc, sz[:]); err != nil {
			t.Fatalf("reading the token's answer: %v", err)
		}
		out := make([]byte, int(sz[0])<<24|int(sz[1])<<16|int(sz[2])<<8|int(sz[3]))
		if _, err := io.ReadFull(nc, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	handshake := func(mech string) net.Conn {
		nc, err := net.Dial("tcp", b.listenerAddr("SASL_PLAINTEXT"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 0, mech
		if hr := rawRequest(t, nc, hs, 1).(*kmsg.SASLHandshakeResponse); hr.ErrorCode != 0 {
			t.Fatalf("handshake v0 %s: %+v", mech, hr)
		}
		return nc
	}
	works := func(nc net.Conn) {
		t.Helper()
		if mr := rawRequest(t, nc, kmsg.NewPtrMetadataRequest(), 9).(*kmsg.MetadataResponse); len(mr.Brokers) != 1 {
			t.Fatalf("metadata after raw login: %+v", mr)
		}
	}

	nc := handshake("PLAIN")
	if out := rawToken(nc, []byte("\x00carol\x00pw")); len(out) != 0 {
		t.Fatalf("PLAIN answer %q, want empty", out)
	}
	works(nc)

	nc = handshake("SCRAM-SHA-512")
	c, err := xscram.SHA512.NewClient("carol", "pw", "")
	if err != nil {
		t.Fatal(err)
	}
	conv := c.NewConversation()
	first, _ := conv.Step("")
	final, err := conv.Step(string(rawToken(nc, []byte(first))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conv.Step(string(rawToken(nc, []byte(final)))); err != nil || !conv.Valid() {
		t.Fatalf("server's final message: %v", err)
	}
	works(nc)

	// A wrong password closes the connection without an answer.
	nc = handshake("PLAIN")
	frame := []byte{0, 0, 0, 11, 0, 'c', 'a', 'r', 'o', 'l', 0, 'b', 'a', 'd', '!'}
	nc.Write(frame)
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); err == nil {
		t.Fatal("wrong raw PLAIN password: got an answer")
	}
}

// TestTLSClientCertPrincipal: an SSL client's certificate subject is its
// principal; without one it is anonymous.
func TestTLSClientCertPrincipal(t *testing.T) {
	pki := newTestPKI(t)
	b := startSecureBroker(t, "", pki)
	principals := func() map[string]bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		out := map[string]bool{}
		for c := range b.mu.conns {
			if c.info.Listener == "SSL" {
				out[c.info.principal()] = true
			}
		}
		return out
	}
	withCert := secureClient(t, b, pki, "SSL", nil, kgo.DialTLSConfig(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}))
	if err := withCert.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if p := principals(); !p["CN=alice,O=acme"] {
		t.Fatalf("principals on SSL: %v", p)
	}
	withCert.Close()
	anon := secureClient(t, b, pki, "SSL", nil)
	if err := anon.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if p := principals(); !p[AnonymousPrincipal] {
		t.Fatalf("principals on SSL: %v", p)
	}
	// A plaintext client on the SSL port fails its handshake; the broker
	// carries on.
	nc, err := net.Dial("tcp", b.listenerAddr("SSL"))
	if err != nil {
		t.Fatal(err)
	}
	var f kmsg.RequestFormatter
	nc.Write(f.AppendRequest(nil, kmsg.NewPtrApiVersionsRequest(), 1))
	nc.SetReadDeadline(time.Now().Add(15 * time.Second))
	io.Copy(io.Discard, nc) // the TLS alert, then EOF
	nc.Close()
	if err := anon.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestAlterUserScramCredentialsErrors: Kafka's per-user error codes.
func TestAlterUserScramCredentialsErrors(t *testing.T) {
	b := startBroker(t, "")
	cl := newClient(t, b)
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	up := func(name string, mech int8, iters int32, salted int) kmsg.AlterUserSCRAMCredentialsRequestUpsertion {
		u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		u.Name, u.Mechanism, u.Iterations, u.Salt, u.SaltedPassword = name, mech, iters, []byte("salt"), make([]byte, salted)
		return u
	}
	del := func(name string, mech int8) kmsg.AlterUserSCRAMCredentialsRequestDeletion {
		d := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
		d.Name, d.Mechanism = name, mech
		return d
	}
	req.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{
		up("ok", 1, 4096, 32),
		up("few", 1, 100, 32),
		up("many", 2, 20000, 64),
		up("mech", 7, 4096, 32),
		up("", 1, 4096, 32),
		up("twice", 1, 4096, 32), up("twice", 1, 8192, 32),
		up("short", 2, 4096, 18), // any length, as Kafka (kafka-go's tests send 18 bytes)
		up("nopw", 2, 4096, 0),
	}
	req.Deletions = []kmsg.AlterUserSCRAMCredentialsRequestDeletion{del("ghost", 1)}
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int16{
		"ok": 0, "few": kerr.UnacceptableCredential.Code, "many": kerr.UnacceptableCredential.Code,
		"mech": kerr.UnsupportedSaslMechanism.Code, "": kerr.UnacceptableCredential.Code,
		"twice": kerr.DuplicateResource.Code, "short": 0, "nopw": kerr.UnacceptableCredential.Code,
		"ghost": kerr.ResourceNotFound.Code,
	}
	if len(resp.Results) != len(want) {
		t.Fatalf("results: %+v", resp.Results)
	}
	for _, r := range resp.Results {
		if r.ErrorCode != want[r.User] {
			t.Errorf("user %q: code %d, want %d (%v)", r.User, r.ErrorCode, want[r.User], r.ErrorMessage)
		}
	}
	dreq := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	for _, n := range []string{"ok", "ghost", "ok2", "ok2"} {
		u := kmsg.NewDescribeUserSCRAMCredentialsRequestUser()
		u.Name = n
		dreq.Users = append(dreq.Users, u)
	}
	dresp, err := dreq.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	dwant := map[string]int16{"ok": 0, "ghost": kerr.ResourceNotFound.Code, "ok2": kerr.DuplicateResource.Code}
	if len(dresp.Results) != 3 {
		t.Fatalf("describe results: %+v", dresp.Results)
	}
	for _, r := range dresp.Results {
		if r.ErrorCode != dwant[r.User] {
			t.Errorf("describe %q: code %d, want %d", r.User, r.ErrorCode, dwant[r.User])
		}
		if r.User == "ok" && (len(r.CredentialInfos) != 1 || r.CredentialInfos[0].Mechanism != 1 || r.CredentialInfos[0].Iterations != 4096) {
			t.Errorf("describe ok: %+v", r.CredentialInfos)
		}
	}
}

// TestSecurityConfigChecks: configurations New refuses.
func TestSecurityConfigChecks(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"SASL first listener": func(c *Config) {
			c.Listeners = []Listener{{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext}}
		},
		"SSL without certificate": func(c *Config) {
			c.Listeners = []Listener{{Name: "SSL", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSSL}}
		},
		"unknown protocol":  func(c *Config) { c.Listeners[0].SecurityProtocol = "KERBEROS" },
		"unknown mechanism": func(c *Config) { c.SASLMechanisms = []string{"GSSAPI"} },
	} {
		cfg := Config{DataDir: t.TempDir(), Listeners: []Listener{{Addr: "127.0.0.1:0"}}, Logger: testLogger(t)}
		mod(&cfg)
		if b, err := New(cfg); err == nil {
			b.Close()
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// startTLSPair starts two brokers whose only listener is SSL with client
// certificates required; their own clients trust peerCAs.
func startTLSPair(t *testing.T, pki *testPKI, peerCAs *x509.CertPool, lag time.Duration) []*Broker {
	return startPair(t, func(c *Config) {
		c.Listeners = []Listener{{Name: "SSL", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSSL}}
		c.TLS = &tls.Config{Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert}
		c.PeerTLS = &tls.Config{RootCAs: peerCAs, Certificates: []tls.Certificate{pki.server}}
		c.ReplicaLagTimeMax = lag
	})
}

// startPair starts two brokers with a two-voter metadata quorum, each
// configured by mod (which sets the listeners), started together (each
// waits for the other's vote).
func startPair(t testing.TB, mod func(*Config)) []*Broker {
	raftAddr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	var brokers []*Broker
	for attempt := 1; ; attempt++ {
		voters := []metadata.Peer{{ID: 1, Addr: raftAddr()}, {ID: 2, Addr: raftAddr()}}
		brokers = make([]*Broker, 2)
		errs := make(chan error, 2)
		for i := range brokers {
			cfg := Config{NodeID: int32(i + 1), DataDir: t.TempDir(), RaftAddr: voters[i].Addr, Voters: voters, Logger: testLogger(t)}
			mod(&cfg)
			go func() {
				b, err := New(cfg)
				brokers[i] = b
				errs <- err
			}()
		}
		var err error
		for range brokers {
			err = errors.Join(err, <-errs)
		}
		if err == nil {
			break
		}
		for _, b := range brokers {
			if b != nil {
				b.Close()
			}
		}
		// A port picked above may have been taken by another process
		// (make test runs packages in parallel) before its broker bound
		// it: that broker fails at once and the other once it gives up
		// waiting for the quorum. Again with other ports.
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; again with other ports", attempt, err)
	}
	t.Cleanup(func() {
		// The metadata quorum's follower first: its controlled shutdown
		// (fencing itself) is applied at once by the leader, which then
		// sees no other live broker and stops at once. The other way
		// round, the follower may not have applied the leader's fence
		// when the leader is gone, and its controlled shutdown waits out
		// ControlledShutdownTimeout for a quorum that cannot form.
		last := brokers[1]
		if brokers[0].store.meta.IsLeader() {
			last = brokers[0]
		}
		for _, b := range brokers {
			if b != last {
				b.Close()
			}
		}
		last.Close()
	})
	return brokers
}

// createPairTopic creates topic with two partitions on both brokers,
// retrying until both have registered.
func createPairTopic(t testing.TB, adm *kadm.Client, topic string, configs map[string]*string) {
	ctx := testCtx(t)
	tick := time.NewTicker(50 * time.Millisecond) // polling interval, not synchronisation
	defer tick.Stop()
	for {
		resp, err := adm.CreateTopic(ctx, 2, 2, configs, topic)
		if err == nil && resp.Err == nil {
			return
		}
		select {
		case <-tick.C: // INVALID_REPLICATION_FACTOR until both brokers registered
		case <-ctx.Done():
			t.Fatalf("create %s: %v %v", topic, err, resp.Err)
		}
	}
}

// TestSSLInterBroker: brokers whose only listener is SSL replicate to each
// other over TLS (PeerTLS, presenting their certificate): every record
// produced with acks=all reaches both replicas of both partitions.
func TestSSLInterBroker(t *testing.T) {
	pki := newTestPKI(t)
	brokers := startTLSPair(t, pki, pki.pool, 0)
	cl := secureClient(t, brokers[0], pki, "SSL", nil, kgo.DialTLSConfig(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(30*time.Second), kgo.RequestRetries(20))
	createPairTopic(t, kadm.NewClient(cl), "tls-replicated", nil)
	produced := produceAll(t, cl, makeRecords("tls-replicated", 200, "tls"))
	for p, recs := range produced {
		end := recs[len(recs)-1].Offset + 1
		for _, b := range brokers {
			waitCond(t, func() bool {
				topic, ok := b.meta.State().Topic("tls-replicated")
				if !ok {
					return false
				}
				part, err := b.store.openLocked(topic, p)
				return err == nil && part.log.LogEndOffset() >= end
			})
		}
	}
}

// TestAcksAllISRShrinksBelowMin: a follower that cannot fetch (its TLS
// handshakes with the leader fail) leaves the ISR while an acks=all produce
// waits (replica lag 10 s); the leader alone then moves the high watermark
// past the batch, which is on one replica of the two min.insync.replicas
// asks for, so the produce gets NOT_ENOUGH_REPLICAS_AFTER_APPEND (as from
// Kafka), and the next one NOT_ENOUGH_REPLICAS, never success.
func TestAcksAllISRShrinksBelowMin(t *testing.T) {
	pki, other := newTestPKI(t), newTestPKI(t)
	// The follower leaves the ISR 10 s after the partition is made: long
	// enough for the first produce to be appended while it is still in.
	brokers := startTLSPair(t, pki, other.pool, 10*time.Second)
	cl := secureClient(t, brokers[0], pki, "SSL", nil, kgo.DialTLSConfig(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}))
	two := "2"
	createPairTopic(t, kadm.NewClient(cl), "min-isr", map[string]*string{"min.insync.replicas": &two})
	var leader int32 = -1
	waitCond(t, func() bool { // the new partition's leader, once elected
		md, err := kadm.NewClient(cl).Metadata(testCtx(t), "min-isr")
		if err == nil && len(md.Topics["min-isr"].Partitions) == 2 {
			leader = md.Topics["min-isr"].Partitions[0].Leader
		}
		return leader == 1 || leader == 2
	})
	b := brokers[leader-1]
	nc, err := tls.Dial("tcp", b.listenerAddr("SSL"), &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	produce := func(corr int32) int16 {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 9, -1, 30000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "min-isr"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = 0, buildBatch(-1, -1, 0, 3, 10)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := roundTrip(nc, req, corr, 40*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	}
	code := produce(1)
	for corr := int32(10); code == kerr.UnknownTopicOrPartition.Code || code == kerr.NotLeaderForPartition.Code; corr++ {
		code = produce(corr) // the leader has not opened the new partition yet
	}
	if code != kerr.NotEnoughReplicasAfterAppend.Code {
		t.Fatalf("acks=all while the follower drops out: error %d, want NOT_ENOUGH_REPLICAS_AFTER_APPEND (%d)", code, kerr.NotEnoughReplicasAfterAppend.Code)
	}
	if code := produce(2000); code != kerr.NotEnoughReplicas.Code {
		t.Fatalf("acks=all with one in-sync replica: error %d, want NOT_ENOUGH_REPLICAS", code)
	}
}

// TestTLSPrincipalMapping: ssl.principal.mapping.rules make the client
// certificate's subject CN=alice,O=acme the principal "alice"; a subject no
// rule maps fails the connection, and the broker carries on.
func TestTLSPrincipalMapping(t *testing.T) {
	pki := newTestPKI(t)
	start := func(rules string) *Broker {
		m, err := ParsePrincipalMappingRules(rules)
		if err != nil {
			t.Fatal(err)
		}
		return startBroker(t, "", func(c *Config) {
			c.Listeners = []Listener{
				{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
				{Name: "SSL", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSSL},
				{Name: "SASL_SSL", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLSSL},
			}
			c.TLS = &tls.Config{Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool, ClientAuth: tls.VerifyClientCertIfGiven}
			c.SSLPrincipalMapper = m
		})
	}
	b := start(`RULE:^CN=([^,]*),O=acme$/$1/L,DEFAULT`)
	cl := secureClient(t, b, pki, "SSL", nil, kgo.DialTLSConfig(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}))
	if err := cl.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	var got []string
	for c := range b.mu.conns {
		if c.info.Listener == "SSL" {
			got = append(got, c.info.principal())
		}
	}
	b.mu.Unlock()
	if len(got) == 0 || got[0] != "alice" {
		t.Fatalf("principals on SSL: %v, want alice", got)
	}

	b = start(`RULE:^CN=([^,]*),O=other$/$1/`) // no DEFAULT: alice's subject fails
	cl = secureClient(t, b, pki, "SSL", nil, kgo.DialTLSConfig(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}))
	if err := cl.Ping(testCtx(t)); err == nil {
		t.Fatal("a subject no rule maps: the connection was served")
	}
	if err := newClient(t, b).Ping(testCtx(t)); err != nil {
		t.Fatalf("the broker after a refused subject: %v", err)
	}
	// On SASL_SSL the login names the principal: the same certificate,
	// which no rule maps, does not fail the connection (as Kafka, which
	// maps certificates on SSL listeners only).
	setUser(t, b, "bob", "bob-secret", kadm.ScramSha512)
	m := scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha512Mechanism()
	cl = secureClient(t, b, pki, "SASL_SSL", m, kgo.DialTLSConfig(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}))
	if err := cl.Ping(testCtx(t)); err != nil {
		t.Fatalf("SASL_SSL with a certificate no mapping rule maps: %v", err)
	}
}

// TestShutdownSkipsControlledShutdownWithoutQuorum: a broker whose only
// peer has crashed (its metadata voter gone, never fenced) stops without
// waiting for a controlled shutdown that no quorum could commit.
func TestShutdownSkipsControlledShutdownWithoutQuorum(t *testing.T) {
	brokers := startPair(t, func(c *Config) {
		c.Listeners = []Listener{{Addr: "127.0.0.1:0"}}
		c.ControlledShutdownTimeout = time.Hour
	})
	waitCond(t, func() bool {
		st := brokers[0].meta.State()
		return len(st.Brokers()) == 2 && brokers[1].meta.State().Version >= st.Version &&
			(brokers[0].meta.IsLeader() || brokers[1].meta.IsLeader())
	})
	// The quorum's leader "crashes": its Raft port closes, nothing is
	// fenced. (Were the survivor the leader, it would step down at once
	// and its proposal fail fast; a follower waits for a leader.)
	leader, survivor := brokers[0], brokers[1]
	if !leader.store.meta.IsLeader() {
		leader, survivor = survivor, leader
	}
	leader.store.meta.Close()
	closed := make(chan error, 1)
	go func() { closed <- survivor.Close() }()
	select {
	case <-closed:
	case <-testCtx(t).Done():
		t.Fatal("Close waited for a controlled shutdown with no quorum possible")
	}
}

// TestLargeFirstRequestAfterSASLLogin: the first request after a SASL
// login may be as large as any (socket.request.max.bytes), not the
// pre-login bound of 512 KiB. The reader used to take the bound before it
// waited for the frame, while the login was still being answered, so
// franz-go, which keeps Produce on a connection of its own, never
// delivered a 600 KiB record: the broker closed every new connection at its
// first Produce (security review; librdkafka too, on a connection that
// starts with a Produce).
func TestLargeFirstRequestAfterSASLLogin(t *testing.T) {
	pki := newTestPKI(t)
	b := startSecureBroker(t, t.TempDir(), pki)
	setUser(t, b, "alice", "alice-secret", kadm.ScramSha512)
	if _, err := kadm.NewClient(newClient(t, b)).CreateTopic(testCtx(t), 1, 1, nil, "big"); err != nil {
		t.Fatal(err)
	}
	m := scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()
	cl := secureClient(t, b, pki, "SASL_PLAINTEXT", m, kgo.DefaultProduceTopic("big"))
	v := make([]byte, 600<<10)
	rand.Read(v)
	// A bound, not a wait: the produce takes milliseconds; refused, kgo
	// reconnects and logs in again until a login's answer happens to be
	// written before the reader waits (a minute or more).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: v}).FirstErr(); err != nil {
		t.Fatalf("600 KiB record over SASL_PLAINTEXT: %v", err)
	}
}
