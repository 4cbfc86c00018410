package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/xdg-go/scram"

	"github.com/sediment-io/sediment/internal/testutil"
)

// writeTestCA writes a CA certificate and a server certificate for
// 127.0.0.1 signed by it, as PEM files in dir: ca.pem, broker.pem,
// broker-key.pem; and a client certificate of CN=alice,O=acme signed by it,
// alice.pem and alice-key.pem.
func writeTestCA(t testing.TB, dir string) (ca, cert, key string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sediment e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey := newKey()
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	cliKey := newKey()
	cliTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "alice", Organization: []string{"acme"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	cliDER, err := x509.CreateCertificate(rand.Reader, cliTmpl, caCert, &cliKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cliKeyDER, err := x509.MarshalPKCS8PrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	write("alice.pem", "CERTIFICATE", cliDER)
	write("alice-key.pem", "PRIVATE KEY", cliKeyDER)
	return write("ca.pem", "CERTIFICATE", caDER), write("broker.pem", "CERTIFICATE", srvDER), write("broker-key.pem", "PRIVATE KEY", keyDER)
}

// TestClientCertOpenSSL: mutual TLS with OpenSSL's clients, kcat
// (librdkafka) and kafka-python (Python's ssl): a broker process whose SSL
// listener requires a client certificate maps the subject CN=alice,O=acme
// to alice with --ssl-principal-mapping-rules, whom alone (besides the
// harness's ANONYMOUS) its authorizer lets in. kcat produces 50 keyed
// lines with alice's certificate and reads them back, kafka-python reads
// them too; without a certificate kcat cannot connect.
func TestClientCertOpenSSL(t *testing.T) {
	t.Parallel() // see TestMain
	dir := t.TempDir()
	ca, cert, key := writeTestCA(t, dir)
	aliceCert, aliceKey := filepath.Join(dir, "alice.pem"), filepath.Join(dir, "alice-key.pem")
	ssl := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	b := StartBroker(t, BrokerOptions{
		Listeners: "SSL://" + ssl,
		ExtraArgs: []string{"--ssl-cert-file", cert, "--ssl-key-file", key, "--ssl-ca-file", ca, "--ssl-client-auth", "required",
			"--ssl-principal-mapping-rules", "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT",
			"--authorizer-enabled", "--super-users", "User:ANONYMOUS;User:alice"},
	})
	const topic = "mtls"
	b.sediment(t, "", "topic", "create", topic, "--partitions", "2")
	props := []string{"-b", ssl, "-X", "security.protocol=SSL", "-X", "ssl.ca.location=" + ca}
	withCert := append(props[:len(props):len(props)], "-X", "ssl.certificate.location="+aliceCert, "-X", "ssl.key.location="+aliceKey)
	lines := keyedLines(50)
	if r := run(t, strings.Join(lines, "\n")+"\n", nil, kcatPath(t), append(withCert, "-P", "-t", topic, "-K:")...); r.Err != nil {
		t.Fatalf("kcat -P with alice's certificate: %v\n%s", r.Err, r.Stderr)
	}
	r := run(t, "", nil, kcatPath(t), append(withCert, "-C", "-t", topic, "-e", "-f", "%k:%s\n")...)
	if r.Err != nil {
		t.Fatalf("kcat -C with alice's certificate: %v\n%s", r.Err, r.Stderr)
	}
	got := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	sort.Strings(got)
	want := append([]string(nil), lines...)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("kcat read %d lines with alice's certificate, want the %d produced", len(got), len(want))
	}
	py := debianPythonReady(t, "kafka", "python3-kafka")
	script := `import sys
from kafka import KafkaConsumer
addr, topic, ca, cert, key = sys.argv[1:6]
c = KafkaConsumer(topic, bootstrap_servers=addr, security_protocol="SSL", ssl_cafile=ca, ssl_certfile=cert,
                  ssl_keyfile=key, auto_offset_reset="earliest", consumer_timeout_ms=10000)
n = 0
for m in c:
    n += 1
    if n == 50:
        break
print(n)
`
	if r := run(t, "", nil, py, "-c", script, ssl, topic, ca, aliceCert, aliceKey); r.Err != nil || strings.TrimSpace(r.Stdout) != "50" {
		t.Fatalf("kafka-python with alice's certificate: %v %q\n%s", r.Err, r.Stdout, r.Stderr)
	}
	if r := run(t, "", nil, kcatPath(t), append(props, "-L", "-m", "5")...); r.Err == nil {
		t.Fatalf("kcat without a client certificate listed metadata:\n%s", r.Stdout)
	}
}

// startSASLBroker starts a broker process with a SASL_SSL and a
// SASL_PLAINTEXT listener beside its PLAINTEXT one, its certificate signed
// by a fresh test CA (the PEM file ca).
func startSASLBroker(t *testing.T) (b *Broker, ca, saslSSL, saslPlain string) {
	t.Helper()
	ca, cert, key := writeTestCA(t, t.TempDir())
	saslSSL = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	saslPlain = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	b = StartBroker(t, BrokerOptions{
		Listeners: "SASL_SSL://" + saslSSL + ",SASL_PLAINTEXT://" + saslPlain,
		ExtraArgs: []string{"--ssl-cert-file", cert, "--ssl-key-file", key},
	})
	return b, ca, saslSSL, saslPlain
}

// TestSecurityKcatAndCLI runs a `sediment broker` process with a SASL_SSL
// and a SASL_PLAINTEXT listener beside its PLAINTEXT one, creates a user
// with `sediment user set`, and uses it from kcat (librdkafka: SCRAM over
// TLS, PLAIN in the clear) and from `sediment` itself; a wrong password is
// refused and nothing is readable without logging in.
func TestSecurityKcatAndCLI(t *testing.T) {
	t.Parallel() // see TestMain
	b, ca, saslSSL, saslPlain := startSASLBroker(t)
	b.sediment(t, "alice-pw\n", "user", "set", "alice", "--password-stdin")
	b.sediment(t, "", "user", "set", "bob", "--password", "bob-pw", "--mechanism", "SCRAM-SHA-512", "--iterations", "4096")
	list := b.sediment(t, "", "user", "list").Stdout
	for _, want := range []string{"alice  SCRAM-SHA-256 (8192 iterations), SCRAM-SHA-512 (8192 iterations)", "bob    SCRAM-SHA-512 (4096 iterations)"} {
		if !strings.Contains(list, want) {
			t.Errorf("sediment user list: no %q in\n%s", want, list)
		}
	}

	kcat := func(addr string, props []string, stdin string, args ...string) cmdResult {
		full := []string{"-b", addr}
		for _, p := range props {
			full = append(full, "-X", p)
		}
		return run(t, stdin, nil, kcatPath(t), append(full, args...)...)
	}
	scramTLS := []string{"security.protocol=SASL_SSL", "sasl.mechanisms=SCRAM-SHA-512", "sasl.username=alice", "sasl.password=alice-pw", "ssl.ca.location=" + ca}
	plainSASL := []string{"security.protocol=SASL_PLAINTEXT", "sasl.mechanisms=PLAIN", "sasl.username=bob", "sasl.password=bob-pw"}

	// kcat -L on the SASL_SSL listener lists the broker at that listener.
	if r := kcat(saslSSL, scramTLS, "", "-L"); r.Err != nil || !strings.Contains(r.Stdout, "at "+saslSSL) {
		t.Fatalf("kcat -L over SASL_SSL: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
	b.sediment(t, "", "topic", "create", "secure", "--partitions", "1")
	lines := keyedLines(300)
	if r := kcat(saslSSL, scramTLS, strings.Join(lines, "\n")+"\n", "-P", "-t", "secure", "-K:"); r.Err != nil {
		t.Fatalf("kcat -P over SASL_SSL: %v\n%s", r.Err, r.Stderr)
	}
	r := kcat(saslPlain, plainSASL, "", "-C", "-t", "secure", "-e", "-f", "%k:%s\n")
	if r.Err != nil {
		t.Fatalf("kcat -C over SASL_PLAINTEXT: %v\n%s", r.Err, r.Stderr)
	}
	if got := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(lines, "\n") {
		t.Fatalf("kcat read %d lines over SASL_PLAINTEXT, want the %d produced over SASL_SSL", len(got), len(lines))
	}

	// A wrong password: kcat gives up with librdkafka's authentication error.
	bad := append([]string{}, plainSASL...)
	bad[3] = "sasl.password=wrong"
	if r := kcat(saslPlain, append(bad, "socket.timeout.ms=5000"), "", "-L", "-m", "5"); r.Err == nil || !strings.Contains(r.Stderr, "Authentication failed") {
		t.Fatalf("kcat with a wrong password: err %v, stderr:\n%s", r.Err, r.Stderr)
	}

	// The sediment CLI over SASL_SSL, the password from the environment.
	env := []string{"SEDIMENT_BROKERS=" + saslSSL, "SEDIMENT_SECURITY_PROTOCOL=SASL_SSL", "SEDIMENT_SASL_MECHANISM=SCRAM-SHA-256",
		"SEDIMENT_SASL_USERNAME=alice", "SEDIMENT_SASL_PASSWORD=alice-pw", "SEDIMENT_SSL_CA_FILE=" + ca}
	out := run(t, "", env, sedimentBin, "consume", "secure", "--from", "earliest", "--count", "300", "--format", "key-value")
	if out.Err != nil {
		t.Fatalf("sediment consume over SASL_SSL: %v\n%s", out.Err, out.Stderr)
	}
	if n := strings.Count(out.Stdout, "\n"); n != 300 {
		t.Fatalf("sediment consume over SASL_SSL read %d lines, want 300:\n%s", n, out.Stdout)
	}
	// cluster status reaches the broker on its SASL_SSL address, logging in.
	out = run(t, "", env, sedimentBin, "cluster", "status")
	if out.Err != nil || !regexp.MustCompile(`(?m)^1\s+`+regexp.QuoteMeta(saslSSL)+`\s+active\s+true\s+true`).MatchString(out.Stdout) {
		t.Fatalf("sediment cluster status over SASL_SSL: %v\n%s\n%s", out.Err, out.Stdout, out.Stderr)
	}
	out = run(t, "", append(env[:len(env):len(env)], "SEDIMENT_SASL_PASSWORD=nope"), sedimentBin, "topic", "list", "--timeout", "10s")
	if out.Err == nil || !strings.Contains(out.Stderr, "SASL_AUTHENTICATION_FAILED") {
		t.Fatalf("sediment with a wrong password: %v\n%s", out.Err, out.Stderr)
	}
	// Deleting alice locks her out.
	b.sediment(t, "", "user", "delete", "alice")
	if r := kcat(saslSSL, append(scramTLS, "socket.timeout.ms=5000"), "", "-L", "-m", "5"); r.Err == nil {
		t.Fatalf("kcat as a deleted user: listed\n%s", r.Stdout)
	}
}

// TestKafkaPythonSASL: kafka-python (SaslHandshake v0 and raw tokens)
// produces and consumes with PLAIN and SCRAM-SHA-256 on SASL_PLAINTEXT and
// SCRAM-SHA-512 on SASL_SSL; a wrong password is refused.
func TestKafkaPythonSASL(t *testing.T) {
	py := debianPythonReady(t, "kafka", "python3-kafka")
	b, ca, saslSSL, saslPlain := startSASLBroker(t)
	b.sediment(t, "", "user", "set", "kpy", "--password", "kpy-pw")
	b.sediment(t, "", "topic", "create", "kpy-sasl", "--partitions", "1")
	r := run(t, "", nil, py, filepath.Join("kafkapython", "sasl.py"), saslPlain, saslSSL, ca, "kpy-sasl", "kpy", "kpy-pw")
	if r.Err != nil {
		t.Fatalf("sasl.py: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	var report struct {
		Produced      []string            `json:"produced"`
		Consumed      map[string][]string `json:"consumed"`
		WrongPassword string              `json:"wrong_password"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &report); err != nil {
		t.Fatalf("sasl.py report: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	if len(report.Produced) != 30 || len(report.Consumed) != 3 {
		t.Fatalf("report: %+v", report)
	}
	for run, got := range report.Consumed {
		if strings.Join(got, ",") != strings.Join(report.Produced, ",") {
			t.Errorf("%s consumed %v, want %v", run, got, report.Produced)
		}
	}
	if report.WrongPassword == "accepted" || report.WrongPassword == "" {
		t.Errorf("wrong password: %q", report.WrongPassword)
	}
	t.Logf("kafka-python with a wrong password: %s", report.WrongPassword)
}

// TestDelegationTokensCLI: a broker process with delegation tokens on (the
// secret key from SEDIMENT_DELEGATION_TOKEN_SECRET_KEY); alice, logged in
// with SCRAM, creates a token with `sediment token create`; `sediment
// produce` and `consume` log in with it (--sasl-token) and round-trip 50
// lines; describe lists it; `token expire` ends it and the token no longer
// logs in. On the PLAINTEXT listener the token commands are refused.
func TestDelegationTokensCLI(t *testing.T) {
	t.Parallel() // see TestMain
	saslPlain := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	b := StartBroker(t, BrokerOptions{
		Listeners: "SASL_PLAINTEXT://" + saslPlain,
		Env:       []string{"SEDIMENT_DELEGATION_TOKEN_SECRET_KEY=e2e-shared-secret"},
	})
	b.sediment(t, "", "user", "set", "alice", "--password", "alice-pw", "--mechanism", "SCRAM-SHA-512")
	b.sediment(t, "", "topic", "create", "tokens", "--partitions", "1")
	alice := []string{"SEDIMENT_BROKERS=" + saslPlain, "SEDIMENT_SECURITY_PROTOCOL=SASL_PLAINTEXT", "SEDIMENT_SASL_MECHANISM=SCRAM-SHA-512",
		"SEDIMENT_SASL_USERNAME=alice", "SEDIMENT_SASL_PASSWORD=alice-pw"}
	out := run(t, "", alice, sedimentBin, "token", "create", "--renewer", "scheduler")
	if out.Err != nil {
		t.Fatalf("sediment token create: %v\n%s", out.Err, out.Stderr)
	}
	rows := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if len(rows) != 2 || !strings.HasPrefix(rows[0], "TOKEN-ID") {
		t.Fatalf("sediment token create printed:\n%s", out.Stdout)
	}
	f := strings.Fields(rows[1])
	id, hmac := f[0], f[1]
	if f[2] != "User:alice" || f[4] != "User:scheduler" {
		t.Fatalf("token row %q: want owner User:alice, renewer User:scheduler", rows[1])
	}

	job := []string{"SEDIMENT_BROKERS=" + saslPlain, "SEDIMENT_SECURITY_PROTOCOL=SASL_PLAINTEXT", "SEDIMENT_SASL_MECHANISM=SCRAM-SHA-512",
		"SEDIMENT_SASL_TOKEN=true", "SEDIMENT_SASL_USERNAME=" + id, "SEDIMENT_SASL_PASSWORD=" + hmac}
	lines := keyedLines(50)
	if out := run(t, strings.Join(lines, "\n")+"\n", job, sedimentBin, "produce", "tokens", "--key-separator", ":"); out.Err != nil {
		t.Fatalf("sediment produce as the token: %v\n%s", out.Err, out.Stderr)
	}
	out = run(t, "", job, sedimentBin, "consume", "tokens", "--from", "earliest", "--count", "50", "--format", "key-value")
	if out.Err != nil || strings.Count(out.Stdout, "\n") != 50 {
		t.Fatalf("sediment consume as the token: %v\n%s\n%s", out.Err, out.Stdout, out.Stderr)
	}
	if out := run(t, "", job, sedimentBin, "token", "describe", "--timeout", "10s"); out.Err == nil || !strings.Contains(out.Stderr, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED") {
		t.Fatalf("token describe as the token: %v\n%s", out.Err, out.Stderr)
	}
	if out := run(t, "", alice, sedimentBin, "token", "describe"); out.Err != nil || !strings.Contains(out.Stdout, id) {
		t.Fatalf("sediment token describe: %v\n%s\n%s", out.Err, out.Stdout, out.Stderr)
	}
	if out := b.sedimentMayFail(t, "", "token", "describe", "--timeout", "10s"); out.Err == nil || !strings.Contains(out.Stderr, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED") {
		t.Fatalf("token describe on PLAINTEXT: %v\n%s", out.Err, out.Stderr)
	}
	if out := run(t, "", alice, sedimentBin, "token", "expire", hmac); out.Err != nil || strings.TrimSpace(out.Stdout) != "expired" {
		t.Fatalf("sediment token expire: %v\n%s\n%s", out.Err, out.Stdout, out.Stderr)
	}
	if out := run(t, "", job, sedimentBin, "topic", "list", "--timeout", "10s"); out.Err == nil {
		t.Fatalf("an expired token still logs in:\n%s", out.Stdout)
	}
}

// TestGSSAPIKcat: Kerberos against a real MIT KDC (Debian's krb5-kdc): a
// broker process with a keytab for kafka/localhost; kcat (librdkafka
// through Cyrus SASL and MIT GSS-API, which asks for mutual
// authentication) logs in with the ticket alice got from kinit, produces
// 200 keyed lines and reads them back; without a ticket it cannot log in.
// The broker maps alice with --sasl-kerberos-principal-to-local-rules to
// ALICE, whom the authorizer knows as a super user (alice it would refuse).
func TestGSSAPIKcat(t *testing.T) {
	kdc, b, saslPlain := startKerberizedBroker(t, "GSSAPI,SCRAM-SHA-512",
		// alice@SEDIMENT.TEST is "ALICE", the only user besides the
		// harness's ANONYMOUS the authorizer lets in.
		"--sasl-kerberos-principal-to-local-rules", "RULE:[1:$1]/U,DEFAULT",
		"--authorizer-enabled", "--super-users", "User:ANONYMOUS;User:ALICE")
	b.sediment(t, "", "topic", "create", "kerberized", "--partitions", "2")
	env := kinitAlice(t, kdc)
	props := []string{"-b", saslPlain, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=GSSAPI",
		"-X", "sasl.kerberos.service.name=kafka", "-X", "sasl.kerberos.kinit.cmd=true"}
	lines := keyedLines(200)
	if r := run(t, strings.Join(lines, "\n")+"\n", env, kcatPath(t), append(props, "-P", "-t", "kerberized", "-K:")...); r.Err != nil {
		t.Fatalf("kcat -P over GSSAPI: %v\n%s", r.Err, r.Stderr)
	}
	r := run(t, "", env, kcatPath(t), append(props, "-C", "-t", "kerberized", "-e", "-f", "%k:%s\n")...)
	if r.Err != nil {
		t.Fatalf("kcat -C over GSSAPI: %v\n%s", r.Err, r.Stderr)
	}
	got := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	sort.Strings(got)
	want := append([]string(nil), lines...)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("kcat read %d lines over GSSAPI, want the %d produced", len(got), len(want))
	}
	// The sediment CLI with the same ticket (--sasl-mechanism GSSAPI).
	cli := append([]string{"SEDIMENT_BROKERS=" + saslPlain, "SEDIMENT_SECURITY_PROTOCOL=SASL_PLAINTEXT", "SEDIMENT_SASL_MECHANISM=GSSAPI"}, env...)
	out := run(t, "", cli, sedimentBin, "consume", "kerberized", "--from", "earliest", "--count", "200")
	if out.Err != nil || strings.Count(out.Stdout, "\n") != 200 {
		t.Fatalf("sediment consume over GSSAPI: %v\n%s", out.Err, out.Stderr)
	}
	noTicket := kdc.Env(filepath.Join(t.TempDir(), "empty-ccache"))
	if r := run(t, "", noTicket, kcatPath(t), append(props, "-L", "-m", "5")...); r.Err == nil {
		t.Fatalf("kcat without a Kerberos ticket listed metadata:\n%s", r.Stdout)
	}
}

// TestGSSAPIInterBrokerCluster: three broker processes whose first listener,
// the one replication uses, is SASL_PLAINTEXT with GSSAPI alone, against a
// real MIT KDC: with --inter-broker-sasl-mechanism GSSAPI each logs in to
// the others as kafka/127.0.0.1@SEDIMENT.TEST from its keytab
// (--sasl-kerberos-krb5-conf names the KDC), the principal "kafka", the
// authorizer's super user. The followers of a topic with replication
// factor 3 and min.insync.replicas=3 join the ISR, and every record
// produced with acks=all is acknowledged.
func TestGSSAPIInterBrokerCluster(t *testing.T) {
	kdc := testutil.StartKDC(t)
	keytab := kdc.AddService(t, "kafka/127.0.0.1")
	c := NewCluster(t, 3, "--sasl-enabled-mechanisms", "GSSAPI", "--sasl-kerberos-keytab", keytab,
		"--inter-broker-sasl-mechanism", "GSSAPI", "--inter-broker-sasl-username", "kafka/127.0.0.1",
		"--sasl-kerberos-krb5-conf", kdc.Krb5Conf,
		"--authorizer-enabled", "--super-users", "User:ANONYMOUS;User:kafka")
	for _, b := range c.Brokers {
		b.leadListeners = "SASL_PLAINTEXT://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	}
	c.StartAll()
	adm := kadm.NewClient(c.Client(t))
	const topic = "krb-replicated"
	createClusterTopic(t, adm, topic, 2, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("3")})
	c.WaitFullISR(t, adm, topic, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prod := c.Client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RecordDeliveryTimeout(60*time.Second))
	var recs []*kgo.Record
	for i := range 300 {
		recs = append(recs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("acks=all with min.insync.replicas=3, replicated over GSSAPI: %v", err)
	}
}

// TestKafkaPythonGSSAPI: kafka-python (Debian's python3-kafka 2.0.2) logs in
// with Kerberos through python-gssapi and MIT's GSS-API, with the ticket
// `kinit alice` left: SaslHandshake v0 and raw tokens, a flow of its own
// (an empty token after the AP-REP, then the wrapped security layer
// choice with an authorization id). It produces 20 records with acks=all
// and reads them back; the broker knows it as alice.
func TestKafkaPythonGSSAPI(t *testing.T) {
	py := debianPythonReady(t, "kafka", "python3-kafka")
	debianPythonReady(t, "gssapi", "python3-gssapi")
	// Only alice's principal may write and read.
	kdc, b, saslPlain := startKerberizedBroker(t, "GSSAPI", "--authorizer-enabled", "--super-users", "User:ANONYMOUS;User:alice")
	b.sediment(t, "", "topic", "create", "kpy-krb", "--partitions", "1")
	env := kinitAlice(t, kdc)
	r := run(t, "", env, py, filepath.Join("kafkapython", "kerberos.py"), saslPlain, "kpy-krb")
	if r.Err != nil {
		t.Fatalf("kerberos.py: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	var report struct {
		Produced []string `json:"produced"`
		Consumed []string `json:"consumed"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &report); err != nil {
		t.Fatalf("kerberos.py report: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	if len(report.Produced) != 20 || strings.Join(report.Consumed, ",") != strings.Join(report.Produced, ",") {
		t.Fatalf("kafka-python over GSSAPI produced %v, consumed %v", report.Produced, report.Consumed)
	}
}

// TestSaramaGSSAPI: sarama 1.61.1's own Kerberos client (gokrb5, a password
// login) against a real MIT KDC, on SaslHandshake v0 with raw tokens and on
// v1 with SaslAuthenticate: each produces 25 keyed records with acks=all
// as alice, the authorizer's only other super user; franz-go reads all 50
// back from the PLAINTEXT listener.
func TestSaramaGSSAPI(t *testing.T) {
	kdc, b, saslPlain := startKerberizedBroker(t, "GSSAPI", "--authorizer-enabled", "--super-users", "User:ANONYMOUS;User:alice")
	const topic = "sarama-krb"
	b.sediment(t, "", "topic", "create", topic, "--partitions", "2")
	all := map[string]string{}
	for _, v := range []int16{sarama.SASLHandshakeV0, sarama.SASLHandshakeV1} {
		cfg := saramaConfig(sarama.MaxVersion)
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Mechanism = sarama.SASLTypeGSSAPI
		cfg.Net.SASL.Version = v
		// sarama's v0 flow comes before ApiVersions, as Kafka 0.10's.
		cfg.ApiVersionsRequest = v == sarama.SASLHandshakeV1
		cfg.Net.SASL.GSSAPI = sarama.GSSAPIConfig{AuthType: sarama.KRB5_USER_AUTH, KerberosConfigPath: kdc.Krb5Conf,
			ServiceName: "kafka", Username: "alice", Password: "alice-pw", Realm: kdc.Realm, DisablePAFXFAST: true}
		p, err := sarama.NewSyncProducer([]string{saslPlain}, cfg)
		if err != nil {
			t.Fatalf("sarama producer, SASL v%d: %v", v, err)
		}
		recs := compatRecords(fmt.Sprintf("krb-v%d", v), 25)
		for _, k := range sortedKeys(recs) {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(recs[k])}); err != nil {
				t.Fatalf("SendMessage over GSSAPI, SASL v%d: %v", v, err)
			}
			all[k] = recs[k]
		}
		p.Close()
	}
	consumeFranz(t, b, topic, len(all)).check(t, topic, all)
}

// saramaSCRAM is sarama's SCRAMClient over xdg-go/scram, as its examples
// build it.
type saramaSCRAM struct {
	gen  scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (s *saramaSCRAM) Begin(user, pass, authz string) error {
	cl, err := s.gen.NewClient(user, pass, authz)
	if err != nil {
		return err
	}
	s.conv = cl.NewConversation()
	return nil
}

func (s *saramaSCRAM) Step(challenge string) (string, error) { return s.conv.Step(challenge) }
func (s *saramaSCRAM) Done() bool                            { return s.conv.Done() }

// TestSaramaSASL: sarama 1.61.1 logs in with SCRAM-SHA-512, SCRAM-SHA-256
// and PLAIN, each on SaslHandshake v1 (SaslAuthenticate) and v0 (raw
// tokens), and produces 10 records with acks=all each; franz-go reads all
// 60 back; a wrong password is refused.
func TestSaramaSASL(t *testing.T) {
	saslPlain := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	b := StartBroker(t, BrokerOptions{Listeners: "SASL_PLAINTEXT://" + saslPlain})
	b.sediment(t, "", "user", "set", "sam", "--password", "sam-pw")
	const topic = "sarama-sasl"
	b.sediment(t, "", "topic", "create", topic, "--partitions", "2")
	config := func(mech sarama.SASLMechanism, v int16, pass string) *sarama.Config {
		cfg := saramaConfig(sarama.MaxVersion)
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Mechanism = mech
		cfg.Net.SASL.Version = v
		cfg.ApiVersionsRequest = v == sarama.SASLHandshakeV1 // sarama's v0 flow comes first
		cfg.Net.SASL.User, cfg.Net.SASL.Password = "sam", pass
		switch mech {
		case sarama.SASLTypeSCRAMSHA512:
			cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &saramaSCRAM{gen: scram.SHA512} }
		case sarama.SASLTypeSCRAMSHA256:
			cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &saramaSCRAM{gen: scram.SHA256} }
		}
		return cfg
	}
	all := map[string]string{}
	for _, mech := range []sarama.SASLMechanism{sarama.SASLTypeSCRAMSHA512, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypePlaintext} {
		for _, v := range []int16{sarama.SASLHandshakeV1, sarama.SASLHandshakeV0} {
			p, err := sarama.NewSyncProducer([]string{saslPlain}, config(mech, v, "sam-pw"))
			if err != nil {
				t.Fatalf("sarama producer, %s, SASL v%d: %v", mech, v, err)
			}
			recs := compatRecords(fmt.Sprintf("%s-v%d", mech, v), 10)
			for _, k := range sortedKeys(recs) {
				if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(recs[k])}); err != nil {
					t.Fatalf("SendMessage, %s, SASL v%d: %v", mech, v, err)
				}
				all[k] = recs[k]
			}
			p.Close()
		}
	}
	consumeFranz(t, b, topic, len(all)).check(t, topic, all)
	cfg := config(sarama.SASLTypeSCRAMSHA512, sarama.SASLHandshakeV1, "wrong")
	cfg.Metadata.Retry.Max = 0
	if p, err := sarama.NewSyncProducer([]string{saslPlain}, cfg); err == nil {
		p.Close()
		t.Error("a wrong SCRAM password logged in")
	}
}

// startKerberizedBroker starts a real MIT KDC with the user alice
// (alice-pw) and a broker process whose SASL_PLAINTEXT listener, at
// localhost, offers mechs with a keytab for kafka/localhost; extra are
// more broker flags.
func startKerberizedBroker(t *testing.T, mechs string, extra ...string) (kdc *testutil.KDC, b *Broker, saslPlain string) {
	t.Helper()
	kdc = testutil.StartKDC(t)
	kdc.AddUser(t, "alice", "alice-pw")
	keytab := kdc.AddService(t, "kafka/localhost")
	saslPlain = net.JoinHostPort("localhost", strconv.Itoa(freePort(t)))
	b = StartBroker(t, BrokerOptions{
		Listeners: "SASL_PLAINTEXT://" + saslPlain,
		ExtraArgs: append([]string{"--sasl-enabled-mechanisms", mechs, "--sasl-kerberos-keytab", keytab}, extra...),
	})
	return kdc, b, saslPlain
}

// kinitAlice gets alice a ticket with MIT's kinit into a credential cache
// of its own and returns the environment that points clients at it.
func kinitAlice(t *testing.T, kdc *testutil.KDC) []string {
	t.Helper()
	env := kdc.Env(filepath.Join(t.TempDir(), "ccache"))
	kinit, err := exec.LookPath("kinit")
	if err != nil {
		t.Fatalf("kinit is not installed (apt-get install krb5-user, or run .ci/run): %v", err)
	}
	if r := run(t, "alice-pw\n", env, kinit, "alice"); r.Err != nil {
		t.Fatalf("kinit alice: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	return env
}
