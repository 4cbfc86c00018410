package broker

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"slices"
	"strings"
)

// A TLS client's principal is its certificate's subject as Kafka names it:
// Java's X500Principal.getName(), the RFC 2253 form. Go's pkix.Name.String()
// differs in ways that make ACLs and mapping rules written for Kafka miss:
// it puts the attributes it parses in a fixed order of its own, not the
// certificate's, and writes DC and UID as dotted OIDs with hex values. So the
// subject is formatted here from its DER encoding, as Java does: the RDNs in
// reverse order, the keywords RFC 2253 defines (CN, C, L, ST, O, OU, STREET,
// DC, UID) for their string values, any other attribute (emailAddress,
// serialNumber, ...) as its dotted OID and "#" with the hex of its DER value.

// rfc2253Keywords are the attribute types RFC 2253 names, by OID.
var rfc2253Keywords = map[string]string{
	"2.5.4.3":                    "CN",
	"2.5.4.6":                    "C",
	"2.5.4.7":                    "L",
	"2.5.4.8":                    "ST",
	"2.5.4.10":                   "O",
	"2.5.4.11":                   "OU",
	"2.5.4.9":                    "STREET",
	"0.9.2342.19200300.100.1.25": "DC",
	"0.9.2342.19200300.100.1.1":  "UID",
}

type dnAttribute struct {
	Type  asn1.ObjectIdentifier
	Value asn1.RawValue
}

// dnRDNSET is one relative distinguished name: a SET OF attributes (the
// asn1 package reads a type whose name ends in SET as a SET).
type dnRDNSET []dnAttribute

// subjectName returns cert's subject in RFC 2253 form, as Kafka's SSL
// principal; Go's form when the subject does not parse.
func subjectName(cert *x509.Certificate) string {
	var rdns []dnRDNSET
	if rest, err := asn1.Unmarshal(cert.RawSubject, &rdns); err != nil || len(rest) > 0 {
		return cert.Subject.String()
	}
	var b strings.Builder
	for i := len(rdns) - 1; i >= 0; i-- {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		// A multi-valued RDN's attributes in Java's order: keywords
		// alphabetically, then OIDs numerically.
		avas := slices.Clone(rdns[i])
		slices.SortStableFunc(avas, func(x, y dnAttribute) int {
			kx, okx := rfc2253Keywords[x.Type.String()]
			ky, oky := rfc2253Keywords[y.Type.String()]
			switch {
			case okx && oky:
				return strings.Compare(kx, ky)
			case okx != oky:
				if okx {
					return -1
				}
				return 1
			}
			return slices.Compare(x.Type, y.Type)
		})
		for j, a := range avas {
			if j > 0 {
				b.WriteByte('+')
			}
			writeDNAttribute(&b, a)
		}
	}
	return b.String()
}

func writeDNAttribute(b *strings.Builder, a dnAttribute) {
	oid := a.Type.String()
	if kw, ok := rfc2253Keywords[oid]; ok {
		var s string
		if rest, err := asn1.Unmarshal(a.Value.FullBytes, &s); err == nil && len(rest) == 0 {
			b.WriteString(kw)
			b.WriteByte('=')
			escapeDNValue(b, s)
			return
		}
	}
	b.WriteString(oid)
	b.WriteString("=#")
	b.WriteString(hex.EncodeToString(a.Value.FullBytes))
}

// escapeDNValue writes s with RFC 2253's escapes: a backslash before each
// of ,+"\<>; and before a leading # or space and a trailing space.
func escapeDNValue(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case strings.IndexByte(`,+"\<>;`, c) >= 0,
			i == 0 && (c == '#' || c == ' '),
			i == len(s)-1 && c == ' ':
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
}
