package broker

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jcmturner/gofork/encoding/asn1"
	"github.com/jcmturner/gokrb5/v8/asn1tools"
	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana/flags"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/types"
)

// SASL/GSSAPI (Kerberos V5, RFC 4752 over RFC 4121), as Kafka's brokers
// accept it: the client sends a GSS-API initial context token (its AP-REQ
// for the broker's service principal, sasl.kerberos.service.name/<host>);
// the broker checks it against its keytab (gokrb5: the ticket decrypts
// with the service key, the authenticator with the session key, within the
// clock skew, not a replay), answers an AP-REP when the client asked for
// mutual authentication (MIT's GSS-API does: librdkafka through Cyrus SASL,
// the Java client), then offers "no security layer" in a wrap token; the
// client's wrap token chooses it, and the login is done. The principal is
// what sasl.kerberos.principal.to.local.rules make of the client's
// Kerberos name (kerberos_rules.go); by DEFAULT its first component (alice
// for alice@REALM or alice/host@REALM) when its realm is the broker's
// service realm, and a client of another realm is refused, as Kafka fails
// a principal no rule maps.

// MechanismGSSAPI is offered when Config.GSSAPI is set and SASLMechanisms
// names it.
const MechanismGSSAPI = "GSSAPI"

// GSSAPIConfig is the broker's Kerberos identity.
type GSSAPIConfig struct {
	// Keytab holds the keys of the broker's service principal
	// (ServiceName/<its host name>@REALM); several hosts' may be in it.
	Keytab *keytab.Keytab
	// ServiceName is Kafka's sasl.kerberos.service.name [kafka]: the
	// first component of the service principal clients ask tickets for.
	ServiceName string
	// Namer is sasl.kerberos.principal.to.local.rules; nil is DEFAULT
	// alone, with the service principal's realm as the broker's.
	Namer *KerberosNamer
	// MaxClockSkew bounds the difference between the client's clock and
	// the broker's [5m, Kerberos' default].
	MaxClockSkew time.Duration
}

func (c *GSSAPIConfig) serviceName() string {
	if c == nil || c.ServiceName == "" {
		return "kafka"
	}
	return c.ServiceName
}

// LoadKeytab reads a keytab file.
func LoadKeytab(path string) (*keytab.Keytab, error) {
	kt, err := keytab.Load(path)
	if err != nil {
		return nil, fmt.Errorf("keytab %s: %w", path, err)
	}
	return kt, nil
}

// gssapiExchange is one GSSAPI login.
type gssapiExchange struct {
	cfg   *GSSAPIConfig
	state int // 0: AP-REQ expected; 1: empty token after the AP-REP; 2: the client's wrap token

	user    string              // the short name, the connection's principal
	key     types.EncryptionKey // the initiator's subkey, else the session key
	seq     uint64              // our next wrap token's sequence number
	endTime time.Time           // the ticket's end time
}

func (b *Broker) newGSSAPIExchange() *gssapiExchange {
	return &gssapiExchange{cfg: b.cfg.GSSAPI}
}

func (x *gssapiExchange) step(in []byte) (out []byte, done bool, user string, err error) {
	// The tokens are parsed by gokrb5's ASN.1 decoder; whatever input it
	// trips on fails this login, never the broker.
	defer func() {
		if r := recover(); r != nil {
			out, done, user, err = nil, false, "", fmt.Errorf("GSSAPI: malformed token: %v", r)
			x.state = 3
		}
	}()
	switch x.state {
	case 0:
		out, err := x.acceptContext(in)
		if err != nil {
			return nil, false, "", err
		}
		return out, false, "", nil
	case 1:
		// After an AP-REP the client answers with an empty token; the
		// security layer offer follows.
		x.state = 2
		out, err := x.securityOffer()
		return out, false, "", err
	case 2:
		x.state = 3
		if err := x.checkChoice(in); err != nil {
			return nil, false, "", err
		}
		return nil, true, x.user, nil
	}
	return nil, false, "", errors.New("GSSAPI exchange already finished")
}

// expiry ends a re-authenticating session when the ticket does (KIP-368).
func (x *gssapiExchange) expiry() time.Time { return x.endTime }

func (x *gssapiExchange) acceptContext(in []byte) ([]byte, error) {
	var tok spnego.KRB5Token
	if err := tok.Unmarshal(in); err != nil {
		return nil, fmt.Errorf("GSSAPI: %w", err)
	}
	if !tok.IsAPReq() {
		return nil, errors.New("GSSAPI: the first token is not an AP-REQ")
	}
	req := &tok.APReq
	skew := x.cfg.MaxClockSkew
	if skew <= 0 {
		skew = 5 * time.Minute
	}
	ok, creds, err := service.VerifyAPREQ(req, service.NewSettings(x.cfg.Keytab, service.MaxClockSkew(skew), service.DecodePAC(false)))
	if err != nil || !ok {
		if err == nil {
			err = errors.New("AP-REQ not valid")
		}
		return nil, fmt.Errorf("GSSAPI: %w: %w", errAuthFailed, err)
	}
	want := x.cfg.serviceName()
	if svc := req.Ticket.SName.NameString; len(svc) == 0 || svc[0] != want {
		return nil, fmt.Errorf("GSSAPI: %w: a ticket for %v, not the %s service", errAuthFailed, svc, want)
	}
	name := req.Authenticator.CName.NameString
	if len(name) == 0 || name[0] == "" {
		return nil, fmt.Errorf("GSSAPI: %w: empty client principal", errAuthFailed)
	}
	user, err := x.cfg.Namer.ShortName(name, creds.Domain(), req.Ticket.Realm)
	if err != nil {
		return nil, fmt.Errorf("GSSAPI: %w: %w", errAuthFailed, err)
	}
	x.user = user
	x.endTime = req.Ticket.DecryptedEncPart.EndTime
	sessionKey := req.Ticket.DecryptedEncPart.Key
	x.key = sessionKey
	if req.Authenticator.SubKey.KeyType != 0 && len(req.Authenticator.SubKey.KeyValue) > 0 {
		x.key = req.Authenticator.SubKey
	}
	var seq [4]byte
	if _, err := rand.Read(seq[:]); err != nil {
		return nil, err
	}
	x.seq = uint64(binary.BigEndian.Uint32(seq[:]) & 0x3fffffff)
	if !types.IsFlagSet(&req.APOptions, flags.APOptionMutualRequired) {
		// No AP-REP wanted: the security layer offer comes at once.
		x.state = 2
		return x.securityOffer()
	}
	x.state = 1
	return x.apRep(req, sessionKey)
}

// encAPRepPart is RFC 4120's EncAPRepPart without the subkey (the broker
// keeps the initiator's).
type encAPRepPart struct {
	CTime          time.Time `asn1:"generalized,explicit,tag:0"`
	Cusec          int       `asn1:"explicit,tag:1"`
	SequenceNumber int64     `asn1:"explicit,tag:3"`
}

type apRepMsg struct {
	PVNO    int                 `asn1:"explicit,tag:0"`
	MsgType int                 `asn1:"explicit,tag:1"`
	EncPart types.EncryptedData `asn1:"explicit,tag:2"`
}

// apRep is the GSS-API token of the AP-REP for req: its authenticator's
// time, and the broker's initial sequence number, under the session key.
func (x *gssapiExchange) apRep(req *messages.APReq, sessionKey types.EncryptionKey) ([]byte, error) {
	part, err := asn1.Marshal(encAPRepPart{CTime: req.Authenticator.CTime, Cusec: req.Authenticator.Cusec, SequenceNumber: int64(x.seq)})
	if err != nil {
		return nil, err
	}
	part = asn1tools.AddASNAppTag(part, 27)
	enc, err := crypto.GetEncryptedData(part, sessionKey, keyusage.AP_REP_ENCPART, 0)
	if err != nil {
		return nil, err
	}
	rep, err := asn1.Marshal(apRepMsg{PVNO: 5, MsgType: 15, EncPart: enc})
	if err != nil {
		return nil, err
	}
	rep = asn1tools.AddASNAppTag(rep, 15)
	oid, err := asn1.Marshal(gssapi.OIDKRB5.OID())
	if err != nil {
		return nil, err
	}
	body := append(append(oid, 0x02, 0x00), rep...) // TOK_ID KRB_AP_REP
	return asn1tools.AddASNAppTag(body, 0), nil
}

// securityOffer is RFC 4752's first wrap token: the layers the broker
// supports (only "none", 1) and the largest message it takes (none
// wrapped, so nominal).
func (x *gssapiExchange) securityOffer() ([]byte, error) {
	et, err := crypto.GetEtype(x.key.KeyType)
	if err != nil {
		return nil, err
	}
	wt := gssapi.WrapToken{
		Flags:     0x01, // sent by the acceptor; not sealed; no acceptor subkey
		EC:        uint16(et.GetHMACBitLength() / 8),
		SndSeqNum: x.seq,
		Payload:   []byte{0x01, 0x00, 0xff, 0xff},
	}
	if err := wt.SetCheckSum(x.key, keyusage.GSSAPI_ACCEPTOR_SEAL); err != nil {
		return nil, err
	}
	x.seq++
	return wt.Marshal()
}

// checkChoice checks the client's answer: a wrap token under the
// initiator's key that chooses no security layer.
func (x *gssapiExchange) checkChoice(in []byte) error {
	in, err := unrotateWrapToken(in)
	if err != nil {
		return err
	}
	var wt gssapi.WrapToken
	if err := wt.Unmarshal(in, false); err != nil {
		return fmt.Errorf("GSSAPI: %w", err)
	}
	if wt.Flags&0x02 != 0 {
		return errors.New("GSSAPI: a sealed security layer answer (confidentiality is not offered)")
	}
	if ok, err := wt.Verify(x.key, keyusage.GSSAPI_INITIATOR_SEAL); !ok {
		return fmt.Errorf("GSSAPI: %w: %v", errAuthFailed, err)
	}
	p := wt.Payload
	if len(p) < 4 || p[0]&0x01 == 0 {
		return errors.New("GSSAPI: the client did not choose 'no security layer'")
	}
	// An authorization id after the choice (p[4:]) is ignored: the
	// connection's principal is the authenticated one, as Kafka's
	// SaslServerCallbackHandler authorizes any and keeps the
	// authentication id (Java clients on Active Directory send the UPN).
	return nil
}

// unrotateWrapToken undoes a wrap token's right rotation (RFC 4121 §4.2.5:
// RRC bytes of the data after the header were moved to its front).
func unrotateWrapToken(b []byte) ([]byte, error) {
	if len(b) < gssapi.HdrLen {
		return nil, errors.New("GSSAPI: wrap token too short")
	}
	rrc := int(binary.BigEndian.Uint16(b[6:8]))
	data := b[gssapi.HdrLen:]
	if rrc == 0 || len(data) == 0 {
		return b, nil
	}
	rrc %= len(data)
	out := make([]byte, len(b))
	copy(out, b[:gssapi.HdrLen])
	copy(out[gssapi.HdrLen:], data[rrc:])
	copy(out[gssapi.HdrLen+len(data)-rrc:], data[:rrc])
	binary.BigEndian.PutUint16(out[6:8], 0)
	return out, nil
}
