package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// selfSignedPEM writes a self-signed certificate and its key (the CA file
// may be the certificate itself) and returns their paths.
func selfSignedPEM(t *testing.T) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "broker.pem"), filepath.Join(dir, "broker-key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	return cert, key
}

// TestRaftSecuritySettings: raft-security-protocol and
// ssl-endpoint-identification-algorithm reach the broker's configuration,
// and bad values are refused before anything starts.
func TestRaftSecuritySettings(t *testing.T) {
	cert, key := selfSignedPEM(t)
	files := "ssl-cert-file: " + cert + "\nssl-key-file: " + key + "\nssl-ca-file: " + cert + "\n"
	file := filepath.Join(t.TempDir(), "sediment.yaml")
	os.WriteFile(file, []byte("node-id: 1\nraft-security-protocol: ssl\n"+files), 0o644)
	cfg := configFromFile(t, file)
	if !cfg.RaftTLS || cfg.TLS == nil || cfg.PeerTLS == nil || cfg.PeerTLS.RootCAs == nil {
		t.Fatalf("raft TLS: %v, %v, %v", cfg.RaftTLS, cfg.TLS, cfg.PeerTLS)
	}
	if cfg.PeerTLS.InsecureSkipVerify || cfg.PeerTLS.VerifyConnection != nil {
		t.Error("https identification (the default) should leave Go's verification as is")
	}
	cfg = configFromFile(t, file, "--ssl-endpoint-identification-algorithm", "")
	if !cfg.PeerTLS.InsecureSkipVerify || cfg.PeerTLS.VerifyConnection == nil {
		t.Error("empty identification: the chain must be verified by VerifyConnection")
	}
	plain := filepath.Join(t.TempDir(), "sediment.yaml")
	os.WriteFile(plain, []byte("node-id: 1\n"), 0o644)
	if cfg := configFromFile(t, plain); cfg.RaftTLS {
		t.Error("raft TLS on by default")
	}
	for _, bad := range []string{
		"raft-security-protocol: SSL\n", // no certificate
		"raft-security-protocol: SASL_SSL\n" + files,
		"ssl-endpoint-identification-algorithm: http\n" + files,
	} {
		if configRefused(t, bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
