package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	krb5client "github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/credentials"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/kerberos"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The client commands' connection security, named as librdkafka's
// properties (security.protocol, sasl.mechanism, sasl.username, …).
// --ssl-ca-file is the broker setting's name too: the same CA file serves
// both (SEDIMENT_SSL_CA_FILE).
func addClientSecurityFlags(fs *pflag.FlagSet) []string {
	fs.String("security-protocol", "PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (env SEDIMENT_SECURITY_PROTOCOL)")
	fs.String("sasl-mechanism", "SCRAM-SHA-256", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or GSSAPI (env SEDIMENT_SASL_MECHANISM)")
	fs.String("sasl-kerberos-service-name", "kafka", "GSSAPI: the brokers' service name; the ticket comes from the credential cache kinit filled (KRB5CCNAME), the realm's KDC from KRB5_CONFIG or /etc/krb5.conf (env SEDIMENT_SASL_KERBEROS_SERVICE_NAME)")
	fs.String("sasl-oauthbearer-token-file", "", "OAUTHBEARER: a file holding the access token (JWT) from the identity provider, read at each connection (env SEDIMENT_SASL_OAUTHBEARER_TOKEN_FILE)")
	fs.String("sasl-username", "", "SASL user (env SEDIMENT_SASL_USERNAME)")
	fs.String("sasl-password", "", "SASL password (env SEDIMENT_SASL_PASSWORD, which keeps it out of the process list)")
	fs.Bool("sasl-token", false, "SCRAM as a delegation token: --sasl-username is the token id, --sasl-password its HMAC in base64 (env SEDIMENT_SASL_TOKEN)")
	fs.String("ssl-ca-file", "", "PEM CA certificates to trust (default: the system's) (env SEDIMENT_SSL_CA_FILE)")
	fs.String("ssl-client-cert-file", "", "PEM client certificate, for brokers with ssl-client-auth (env SEDIMENT_SSL_CLIENT_CERT_FILE)")
	fs.String("ssl-client-key-file", "", "PEM key of --ssl-client-cert-file (env SEDIMENT_SSL_CLIENT_KEY_FILE)")
	return []string{"security-protocol", "sasl-mechanism", "sasl-kerberos-service-name", "sasl-oauthbearer-token-file", "sasl-username", "sasl-password", "sasl-token", "ssl-ca-file", "ssl-client-cert-file", "ssl-client-key-file"}
}

// securityOpts turns the flags into franz-go options (kgo.DialTLSConfig,
// kgo.SASL with franz-go's own mechanisms).
func (o *clientOptions) securityOpts() ([]kgo.Opt, error) {
	proto := strings.ToUpper(o.v.GetString("security-protocol"))
	var useTLS, useSASL bool
	switch proto {
	case "PLAINTEXT", "":
	case "SSL":
		useTLS = true
	case "SASL_PLAINTEXT":
		useSASL = true
	case "SASL_SSL":
		useTLS, useSASL = true, true
	default:
		return nil, fmt.Errorf("--security-protocol %q: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", proto)
	}
	var opts []kgo.Opt
	if useTLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if f := o.v.GetString("ssl-ca-file"); f != "" {
			pem, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("--ssl-ca-file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--ssl-ca-file %s: no PEM certificate in it", f)
			}
		}
		cert, key := o.v.GetString("ssl-client-cert-file"), o.v.GetString("ssl-client-key-file")
		if (cert == "") != (key == "") {
			return nil, fmt.Errorf("--ssl-client-cert-file and --ssl-client-key-file go together")
		}
		if cert != "" {
			c, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if useSASL && strings.EqualFold(o.v.GetString("sasl-mechanism"), "OAUTHBEARER") {
		file := o.v.GetString("sasl-oauthbearer-token-file")
		if file == "" {
			return nil, fmt.Errorf("--sasl-mechanism OAUTHBEARER needs --sasl-oauthbearer-token-file (or SEDIMENT_SASL_OAUTHBEARER_TOKEN_FILE)")
		}
		// Read at each login, so that a token refreshed in the file by
		// another process is used by the next connection.
		opts = append(opts, kgo.SASL(oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := os.ReadFile(file)
			if err != nil {
				return oauth.Auth{}, fmt.Errorf("--sasl-oauthbearer-token-file: %w", err)
			}
			return oauth.Auth{Token: strings.TrimSpace(string(tok))}, nil
		})))
		return opts, nil
	}
	if useSASL && strings.EqualFold(o.v.GetString("sasl-mechanism"), "GSSAPI") {
		m, err := kerberosMechanism(o.v.GetString("sasl-kerberos-service-name"))
		if err != nil {
			return nil, err
		}
		return append(opts, kgo.SASL(m)), nil
	}
	if useSASL {
		user, pass := o.v.GetString("sasl-username"), o.v.GetString("sasl-password")
		if user == "" {
			return nil, fmt.Errorf("--security-protocol %s needs --sasl-username and --sasl-password (or SEDIMENT_SASL_USERNAME, SEDIMENT_SASL_PASSWORD)", proto)
		}
		var m sasl.Mechanism
		token := o.v.GetBool("sasl-token")
		switch mech := strings.ToUpper(o.v.GetString("sasl-mechanism")); {
		case token && mech == "PLAIN":
			return nil, fmt.Errorf("--sasl-token logs in with SCRAM: --sasl-mechanism SCRAM-SHA-256 or SCRAM-SHA-512")
		case mech == "PLAIN":
			m = plain.Auth{User: user, Pass: pass}.AsMechanism()
		case mech == "SCRAM-SHA-256":
			m = scram.Auth{User: user, Pass: pass, IsToken: token}.AsSha256Mechanism()
		case mech == "SCRAM-SHA-512":
			m = scram.Auth{User: user, Pass: pass, IsToken: token}.AsSha512Mechanism()
		default:
			return nil, fmt.Errorf("--sasl-mechanism %q: want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", o.v.GetString("sasl-mechanism"))
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// kerberosMechanism logs in with the ticket in the user's credential cache
// (KRB5CCNAME, else /tmp/krb5cc_<uid>, as MIT's tools), after kinit, as
// kcat with sasl.kerberos.kinit.cmd does: no password or keytab here.
func kerberosMechanism(service string) (sasl.Mechanism, error) {
	conf := os.Getenv("KRB5_CONFIG")
	if conf == "" {
		conf = "/etc/krb5.conf"
	}
	cfg, err := loadKrb5Conf(conf, nil)
	if err != nil {
		return nil, fmt.Errorf("GSSAPI: %w", err)
	}
	cc := strings.TrimPrefix(os.Getenv("KRB5CCNAME"), "FILE:")
	if cc == "" {
		cc = fmt.Sprintf("/tmp/krb5cc_%d", os.Getuid())
	}
	ccache, err := credentials.LoadCCache(cc)
	if err != nil {
		return nil, fmt.Errorf("GSSAPI: credential cache %s (run kinit first): %w", cc, err)
	}
	cl, err := krb5client.NewFromCCache(ccache, cfg, krb5client.DisablePAFXFAST(true))
	if err != nil {
		return nil, fmt.Errorf("GSSAPI: %w", err)
	}
	if service == "" {
		service = "kafka"
	}
	return kerberos.Auth{Client: cl, Service: service, PersistAfterAuth: true}.AsMechanism(), nil
}
