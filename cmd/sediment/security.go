package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

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
	{"sasl-enabled-mechanisms", strings.Join(broker.SupportedSASLMechanisms, ","), "sasl.enabled.mechanisms on SASL listeners: some of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (users: sediment user)"},
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
func applySecurity(v *viper.Viper, cfg *broker.Config) error {
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
			return errors.New("an SSL or SASL_SSL listener needs ssl-cert-file and ssl-key-file")
		}
		return nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
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
	srv := &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, MinVersion: tls.VersionTLS12}
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
	cfg.PeerTLS = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return nil
}
