package broker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"testing"
	"time"
)

// TestSubjectNameRFC2253: a certificate's subject becomes the principal in
// the form Kafka gives it (Java's X500Principal.getName(), RFC 2253, as
// `openssl x509 -subject -nameopt RFC2253` prints it): the certificate's own
// order reversed, DC and UID by keyword, other attributes as OID=#hex, the
// RFC 2253 escapes. Go's pkix.Name.String(), used before, wrote DC and UID as
// OIDs and reordered attributes, so ACLs written for Kafka did not match
// (security review).
func TestSubjectNameRFC2253(t *testing.T) {
	oid := func(s ...int) asn1.ObjectIdentifier { return asn1.ObjectIdentifier(s) }
	var (
		cn    = oid(2, 5, 4, 3)
		o     = oid(2, 5, 4, 10)
		ou    = oid(2, 5, 4, 11)
		c     = oid(2, 5, 4, 6)
		dc    = oid(0, 9, 2342, 19200300, 100, 1, 25)
		uid   = oid(0, 9, 2342, 19200300, 100, 1, 1)
		email = oid(1, 2, 840, 113549, 1, 9, 1)
	)
	rdn := func(t asn1.ObjectIdentifier, v string) []pkix.AttributeTypeAndValue {
		return []pkix.AttributeTypeAndValue{{Type: t, Value: v}}
	}
	for _, tc := range []struct {
		subject pkix.RDNSequence
		want    string
	}{
		{pkix.RDNSequence{rdn(dc, "com"), rdn(dc, "example"), rdn(ou, "users"), rdn(cn, "dcuser")},
			"CN=dcuser,OU=users,DC=example,DC=com"},
		{pkix.RDNSequence{rdn(uid, "u1"), rdn(o, "acme"), rdn(cn, "uiduser")},
			"CN=uiduser,O=acme,UID=u1"},
		// In the certificate's order, which is not Go's (C first).
		{pkix.RDNSequence{rdn(cn, "alice"), rdn(c, "DE"), rdn(o, "acme")},
			"O=acme,C=DE,CN=alice"},
		{pkix.RDNSequence{rdn(c, "US"), rdn(o, "acme"), rdn(cn, "bob"), rdn(email, "bob@acme.example")},
			"1.2.840.113549.1.9.1=#0c10626f624061636d652e6578616d706c65,CN=bob,O=acme,C=US"},
		{pkix.RDNSequence{rdn(o, "Acme, Inc."), rdn(cn, " #lead+\"x\";<y>\\ ")},
			`CN=\ #lead\+\"x\"\;\<y\>\\\ ,O=Acme\, Inc.`},
		{pkix.RDNSequence{rdn(cn, "#hash")}, `CN=\#hash`},
		// A multi-valued RDN.
		{pkix.RDNSequence{rdn(o, "acme"), {{Type: cn, Value: "carol"}, {Type: ou, Value: "ops"}}},
			"CN=carol+OU=ops,O=acme"},
	} {
		raw, err := asn1.Marshal(tc.subject)
		if err != nil {
			t.Fatal(err)
		}
		if got := subjectName(selfSigned(t, raw)); got != tc.want {
			t.Errorf("subject %v:\n got %s\nwant %s", tc.subject, got, tc.want)
		}
	}
}

func selfSigned(t *testing.T, rawSubject []byte) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), RawSubject: rawSubject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
