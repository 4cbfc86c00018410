package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	krb5config "github.com/jcmturner/gokrb5/v8/config"
	"github.com/spf13/viper"

	"github.com/sediment-io/sediment/broker"
)

// The broker's listener security settings (docs/security.md): Kafka's
// listener.security.protocol.map, the ssl.* files and sasl.enabled.mechanisms.
var securitySettings = []brokerSetting{
	{"listener-security-protocol-map", "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", "listener.security.protocol.map: NAME:PROTOCOL pairs; a listener whose name is not in the map is PLAINTEXT"},
	{"ssl-cert-file", "", "ssl.keystore: PEM certificate chain of SSL and SASL_SSL listeners"},
	{"ssl-key-file", "", "ssl.keystore: PEM private key of ssl-cert-file"},
	{"ssl-ca-file", "", "ssl.truststore: PEM CA certificates that sign client certificates, and peers' when the first listener is SSL (empty: the system's roots)"},
	{"ssl-client-auth", "none", "ssl.client.auth: none, requested or required (a client certificate's subject becomes the principal)"},
	{"sasl-enabled-mechanisms", strings.Join(broker.SupportedSASLMechanisms, ","), "sasl.enabled.mechanisms on SASL listeners: some of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (users: sediment user), OAUTHBEARER (with sasl-oauthbearer-jwks-endpoint-url), GSSAPI (with sasl-kerberos-keytab)"},
	{"sasl-kerberos-keytab", "", "GSSAPI: the keytab with the broker's service principal (sasl-kerberos-service-name/<host>@REALM), Kafka's JAAS keyTab"},
	{"sasl-kerberos-service-name", "kafka", "sasl.kerberos.service.name: the first component of the service principal clients ask tickets for"},
	{"sasl-kerberos-krb5-conf", "", "GSSAPI for the inter-broker user: the Kerberos configuration naming the realm's KDCs, Java's java.security.krb5.conf (empty: KRB5_CONFIG, else /etc/krb5.conf)"},
	{"sasl-kerberos-principal-to-local-rules", "DEFAULT", "sasl.kerberos.principal.to.local.rules: how a Kerberos principal becomes the principal, RULE:[n:format](match)s/from/to/g/L and DEFAULT, comma-separated (RULE:[2:$1@$0](.*@EXAMPLE\\.COM)s/@.*//L,DEFAULT)"},
	{"sasl-oauthbearer-jwks-endpoint-url", "", "sasl.oauthbearer.jwks.endpoint.url: the identity provider's JSON Web Key Set (https://, http:// or file://) that OAUTHBEARER tokens are checked against"},
	{"sasl-oauthbearer-jwks-endpoint-refresh", time.Hour, "sasl.oauthbearer.jwks.endpoint.refresh.ms: how often the keys are fetched again (a token of an unknown key fetches them at most every 10 s)"},
	{"sasl-oauthbearer-expected-issuer", "", "sasl.oauthbearer.expected.issuer: a token's iss must be this (empty: not checked)"},
	{"sasl-oauthbearer-expected-audience", "", "sasl.oauthbearer.expected.audience: comma-separated; a token's aud must contain one (empty: not checked)"},
	{"sasl-oauthbearer-sub-claim-name", "sub", "sasl.oauthbearer.sub.claim.name: the claim that is the principal"},
	{"sasl-oauthbearer-clock-skew", 30 * time.Second, "sasl.oauthbearer.clock.skew.seconds: allowed on exp, nbf and iat"},
	{"sasl-oauthbearer-unsecured", false, "accept unsigned OAUTHBEARER tokens (alg none, as librdkafka's sasl.oauthbearer.config makes): development only, Kafka's default unsecured validator"},
	{"inter-broker-sasl-mechanism", "SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol: how the broker's own clients log in when the first listener is SASL_PLAINTEXT or SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, GSSAPI with the keytab, or OAUTHBEARER with sasl-oauthbearer-token-endpoint-url)"},
	{"inter-broker-sasl-username", "", "the inter-broker SASL user (created by the brokers if it does not exist; make it a super user with the authorizer); with GSSAPI the broker's Kerberos principal in sasl-kerberos-keytab (kafka/broker1.example.com), no password; with OAUTHBEARER the OAuth client id"},
	{"inter-broker-sasl-password", "", "its password, with OAUTHBEARER the client secret (SEDIMENT_INTER_BROKER_SASL_PASSWORD keeps it out of the process list)"},
	{"sasl-oauthbearer-token-endpoint-url", "", "sasl.oauthbearer.token.endpoint.url: where an OAUTHBEARER inter-broker login gets its token, the identity provider's token endpoint (client credentials grant with the inter-broker client id and secret), or file:// and a file holding a token, read at each login"},
	{"sasl-oauthbearer-scope", "", "sasl.oauthbearer.scope: the scope asked for with the client credentials grant (space-separated; empty: none)"},
	{"ssl-principal-mapping-rules", "DEFAULT", "ssl.principal.mapping.rules: how a client certificate's subject becomes the principal, RULE:pattern/replacement/[LU] and DEFAULT, comma-separated (RULE:^CN=([^,]*),.*$/$1/L,DEFAULT)"},
	{"authorizer-enabled", false, "authorizer.class.name: enforce ACLs (sediment acl) on every request; the brokers' own principal on the first listener must be a super user"},
	{"super-users", "", "super.users: principals allowed everything, separated by semicolons (User:admin;User:ANONYMOUS)"},
	{"ssl-endpoint-identification-algorithm", "https", "ssl.endpoint.identification.algorithm: https checks that a peer broker's certificate names the address dialed (inter-broker SSL, Raft TLS); empty checks only that ssl-ca-file signed it"},
	{"raft-security-protocol", "PLAINTEXT", "the metadata quorum's Raft transport (raft-address): PLAINTEXT, or SSL for mutual TLS with ssl-cert-file, trusting only ssl-ca-file (every voter the same)"},
	{"allow-everyone-if-no-acl-found", false, "allow.everyone.if.no.acl.found: a resource without any ACL is open to everyone"},
}

func init() { brokerSettings = append(brokerSettings, securitySettings...) }

// parseProtocolMap reads "NAME:PROTOCOL,...".
func parseProtocolMap(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name, proto, ok := strings.Cut(f, ":")
		name, proto = strings.ToUpper(strings.TrimSpace(name)), strings.ToUpper(strings.TrimSpace(proto))
		switch {
		case !ok || name == "":
			return nil, fmt.Errorf("listener-security-protocol-map: %q: want NAME:PROTOCOL", f)
		case proto != broker.ProtocolPlaintext && proto != broker.ProtocolSSL && proto != broker.ProtocolSASLPlaintext && proto != broker.ProtocolSASLSSL:
			return nil, fmt.Errorf("listener-security-protocol-map: %q: protocol is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", f)
		}
		m[name] = proto
	}
	return m, nil
}

// applySecurity sets the listeners' protocols and the TLS and SASL settings.
func applySecurity(v *viper.Viper, cfg *broker.Config, log *slog.Logger) error {
	pm, err := parseProtocolMap(v.GetString("listener-security-protocol-map"))
	if err != nil {
		return err
	}
	needTLS := false
	for i := range cfg.Listeners {
		p, ok := pm[cfg.Listeners[i].Name]
		if !ok {
			p = broker.ProtocolPlaintext
		}
		cfg.Listeners[i].SecurityProtocol = p
		needTLS = needTLS || p == broker.ProtocolSSL || p == broker.ProtocolSASLSSL
	}
	switch p := strings.ToUpper(strings.TrimSpace(v.GetString("raft-security-protocol"))); p {
	case broker.ProtocolPlaintext, "":
	case broker.ProtocolSSL:
		cfg.RaftTLS, needTLS = true, true
	default:
		return fmt.Errorf("raft-security-protocol %q: want PLAINTEXT or SSL", v.GetString("raft-security-protocol"))
	}
	if cfg.SSLPrincipalMapper, err = broker.ParsePrincipalMappingRules(v.GetString("ssl-principal-mapping-rules")); err != nil {
		return err
	}
	// A token file needs no user: OAUTHBEARER with only the endpoint set.
	if u := v.GetString("inter-broker-sasl-username"); u != "" || v.GetString("sasl-oauthbearer-token-endpoint-url") != "" {
		cfg.InterBrokerSASL = &broker.InterBrokerSASLConfig{Mechanism: strings.ToUpper(v.GetString("inter-broker-sasl-mechanism")), User: u, Password: v.GetString("inter-broker-sasl-password"),
			TokenEndpoint: v.GetString("sasl-oauthbearer-token-endpoint-url"), Scope: v.GetString("sasl-oauthbearer-scope")}
		if cfg.InterBrokerSASL.Mechanism == broker.MechanismGSSAPI {
			path := v.GetString("sasl-kerberos-krb5-conf")
			if path == "" {
				path = os.Getenv("KRB5_CONFIG")
			}
			if path == "" {
				path = "/etc/krb5.conf"
			}
			if cfg.InterBrokerSASL.Krb5Conf, err = loadKrb5Conf(path, log); err != nil {
				return fmt.Errorf("sasl-kerberos-krb5-conf: %w", err)
			}
		}
	}
	supers, err := broker.ParseSuperUsers(v.GetString("super-users"))
	if err != nil {
		return fmt.Errorf("super-users: %w", err)
	}
	cfg.Authorizer = broker.AuthorizerConfig{
		Enabled:                   v.GetBool("authorizer-enabled"),
		SuperUsers:                supers,
		AllowEveryoneIfNoACLFound: v.GetBool("allow-everyone-if-no-acl-found"),
	}
	if u, unsecured := v.GetString("sasl-oauthbearer-jwks-endpoint-url"), v.GetBool("sasl-oauthbearer-unsecured"); u != "" || unsecured {
		var aud []string
		for _, a := range strings.Split(v.GetString("sasl-oauthbearer-expected-audience"), ",") {
			if a = strings.TrimSpace(a); a != "" {
				aud = append(aud, a)
			}
		}
		cfg.OAuthBearer = &broker.OAuthBearerConfig{
			JWKSURL:          u,
			JWKSRefresh:      v.GetDuration("sasl-oauthbearer-jwks-endpoint-refresh"),
			ExpectedIssuer:   v.GetString("sasl-oauthbearer-expected-issuer"),
			ExpectedAudience: aud,
			SubClaim:         v.GetString("sasl-oauthbearer-sub-claim-name"),
			ClockSkew:        v.GetDuration("sasl-oauthbearer-clock-skew"),
			Unsecured:        unsecured,
		}
	}
	// Read even without a keytab: rules that cannot work are refused
	// rather than left lying until GSSAPI is turned on.
	namer, err := broker.ParseKerberosRules(v.GetString("sasl-kerberos-principal-to-local-rules"))
	if err != nil {
		return fmt.Errorf("sasl-kerberos-principal-to-local-rules: %w", err)
	}
	if path := v.GetString("sasl-kerberos-keytab"); path != "" {
		kt, err := broker.LoadKeytab(path)
		if err != nil {
			return fmt.Errorf("sasl-kerberos-keytab: %w", err)
		}
		cfg.GSSAPI = &broker.GSSAPIConfig{Keytab: kt, ServiceName: v.GetString("sasl-kerberos-service-name"), Namer: namer}
	}
	for _, m := range strings.Split(v.GetString("sasl-enabled-mechanisms"), ",") {
		if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
			cfg.SASLMechanisms = append(cfg.SASLMechanisms, m)
		}
	}
	certFile, keyFile, caFile := v.GetString("ssl-cert-file"), v.GetString("ssl-key-file"), v.GetString("ssl-ca-file")
	if (certFile == "") != (keyFile == "") {
		return errors.New("ssl-cert-file and ssl-key-file go together")
	}
	if certFile == "" {
		if needTLS {
			return errors.New("an SSL or SASL_SSL listener, or raft-security-protocol SSL, needs ssl-cert-file and ssl-key-file")
		}
		return nil
	}
	certs, err := newCertReloader(certFile, keyFile, log)
	if err != nil {
		return fmt.Errorf("ssl-cert-file/ssl-key-file: %w", err)
	}
	var pool *x509.CertPool
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("ssl-ca-file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("ssl-ca-file %s: no PEM certificate in it", caFile)
		}
	}
	srv := &tls.Config{GetCertificate: certs.getCertificate, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	switch strings.ToLower(v.GetString("ssl-client-auth")) {
	case "none", "":
		srv.ClientAuth = tls.NoClientCert
	case "requested":
		srv.ClientAuth = tls.VerifyClientCertIfGiven
	case "required":
		srv.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return fmt.Errorf("ssl-client-auth %q: want none, requested or required", v.GetString("ssl-client-auth"))
	}
	cfg.TLS = srv
	cfg.PeerTLS = &tls.Config{RootCAs: pool, GetClientCertificate: certs.getClientCertificate, MinVersion: tls.VersionTLS12}
	switch alg := strings.ToLower(strings.TrimSpace(v.GetString("ssl-endpoint-identification-algorithm"))); alg {
	case "https":
	case "", "none":
		broker.SkipPeerHostnameCheck(cfg.PeerTLS)
	default:
		return fmt.Errorf("ssl-endpoint-identification-algorithm %q: want https or empty", alg)
	}
	return nil
}

// certReloader serves the certificate in ssl-cert-file/ssl-key-file and
// loads it again when either file changes (checked at most once a second,
// at a handshake), so a rotated certificate is used without a restart, as
// Kafka's dynamic keystore update. A pair that does not load (a half-written
// rotation) keeps the previous certificate in use and is tried again later.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	stamp     string // the files' sizes and modification times
	checkedAt time.Time
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	stamp, err := r.fileStamp()
	if err != nil {
		return nil, err
	}
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cert, r.stamp, r.checkedAt = &c, stamp, time.Now()
	return r, nil
}

func (r *certReloader) fileStamp() (string, error) {
	var b strings.Builder
	for _, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%d/%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}

func (r *certReloader) current() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checkedAt) < time.Second {
		return r.cert
	}
	r.checkedAt = time.Now()
	if stamp, err := r.fileStamp(); err == nil && stamp != r.stamp {
		if c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile); err == nil {
			r.cert, r.stamp = &c, stamp
			r.log.Info("TLS certificate reloaded", "file", r.certFile)
		}
	}
	return r.cert
}

func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.current(), nil
}

func (r *certReloader) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.current(), nil
}

// loadKrb5Conf reads a Kerberos configuration. gokrb5 answers a file with
// Kerberos 4 directives with a usable configuration and an
// UnsupportedDirective error, which MIT's tools ignore: so does this, with
// a warning.
func loadKrb5Conf(path string, log *slog.Logger) (*krb5config.Config, error) {
	c, err := krb5config.Load(path)
	var ud krb5config.UnsupportedDirective
	if errors.As(err, &ud) && c != nil {
		if log != nil {
			log.Warn("Kerberos configuration: a directive gokrb5 does not support is ignored", "file", path, "err", err)
		}
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the Kerberos configuration %s: %w", path, err)
	}
	return c, nil
}
