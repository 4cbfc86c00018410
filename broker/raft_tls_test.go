package broker

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// raftReadIndex asks the metadata transport at addr for a read index (a
// forwarded request: protocol byte 'F', op 4), over TLS when cfg is set, and
// returns the response's status byte (0: the read index, 1: an error, such
// as "not the leader") or why there was no answer.
func raftReadIndex(addr string, cfg *tls.Config) (byte, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(15 * time.Second))
	c := nc
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.ServerName = "127.0.0.1"
		c = tls.Client(nc, cfg)
	}
	req := []byte{'F', 0, 0, 0, 5, 4}
	req = binary.BigEndian.AppendUint32(req, 5000)
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return 0, err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size == 0 || size > 1<<20 {
		return 0, fmt.Errorf("response of %d bytes", size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		return 0, err
	}
	return body[0], nil
}

// TestRaftTLS: two brokers whose metadata quorum runs over mutual TLS, with
// the authorizer on, form the quorum, forward proposals to each other and
// replicate; their Raft port then answers a super user's certificate and
// refuses a plaintext connection, a connection without a certificate, a
// certificate of another CA, and a certificate the CA signed whose
// principal is not a super user. The brokers carry on after each.
func TestRaftTLS(t *testing.T) {
	pki, other := newTestPKI(t), newTestPKI(t)
	brokers := startPair(t, func(c *Config) {
		c.Listeners = []Listener{{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext}}
		c.TLS = &tls.Config{Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool}
		c.PeerTLS = &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.server}}
		c.RaftTLS = true
		c.Authorizer = AuthorizerConfig{Enabled: true, SuperUsers: []string{"User:CN=broker", "User:" + AnonymousPrincipal}}
	})
	// Topics created through each broker: one of them is a follower of
	// the quorum, whose proposals go to the leader over the TLS transport.
	for i, b := range brokers {
		cl := newClient(t, b)
		topic := fmt.Sprintf("raft-tls-%d", i)
		createPairTopic(t, kadm.NewClient(cl), topic, nil)
		produceAll(t, cl, makeRecords(topic, 50, "v"))
	}

	addr := brokers[0].cfg.RaftAddr
	super := &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.server}}
	if _, err := raftReadIndex(addr, super); err != nil {
		t.Fatalf("a super user's certificate: %v; want an answer", err)
	}
	refused := map[string]*tls.Config{
		"plaintext":          nil,
		"no certificate":     {RootCAs: pki.pool},
		"another CA's":       {RootCAs: pki.pool, Certificates: []tls.Certificate{other.server}},
		"not a super user's": {RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}},
	}
	for name, cfg := range refused {
		status, err := raftReadIndex(addr, cfg)
		if err == nil {
			t.Errorf("%s: answered (status %d); want the connection refused", name, status)
			continue
		}
		var rec tls.RecordHeaderError
		switch {
		case errors.Is(err, io.EOF), errors.As(err, &rec), strings.Contains(err.Error(), "tls:"), strings.Contains(err.Error(), "reset by peer"):
		default:
			t.Errorf("%s: %v; want a TLS failure or a closed connection", name, err)
		}
	}
	// Still a working quorum, reached the right way.
	if _, err := raftReadIndex(brokers[1].cfg.RaftAddr, super); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
	cl := newClient(t, brokers[1])
	createPairTopic(t, kadm.NewClient(cl), "raft-tls-after", nil)
}

// TestRaftTLSWithoutAuthorizer: without the authorizer any certificate the
// CA signed is a peer; one from elsewhere is not.
func TestRaftTLSWithoutAuthorizer(t *testing.T) {
	pki, other := newTestPKI(t), newTestPKI(t)
	b := startBroker(t, "", func(c *Config) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool}
		c.PeerTLS = &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.server}}
		c.RaftTLS = true
	})
	addr := b.meta.Addr()
	if status, err := raftReadIndex(addr, &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}); err != nil || status != 0 {
		t.Fatalf("a certificate the CA signed: status %d, %v", status, err)
	}
	if _, err := raftReadIndex(addr, &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{other.client}}); err == nil {
		t.Fatal("another CA's certificate was answered")
	}
}

// TestRaftTLSConfig: the settings RaftTLS needs are checked before the
// broker opens anything.
func TestRaftTLSConfig(t *testing.T) {
	pki := newTestPKI(t)
	cert := []tls.Certificate{pki.server}
	for name, c := range map[string]Config{
		"no certificate":      {RaftTLS: true},
		"no CA":               {RaftTLS: true, TLS: &tls.Config{Certificates: cert}, PeerTLS: &tls.Config{Certificates: cert, RootCAs: pki.pool}},
		"no peer trust":       {RaftTLS: true, TLS: &tls.Config{Certificates: cert, ClientCAs: pki.pool}, PeerTLS: &tls.Config{Certificates: cert}},
		"no peer certificate": {RaftTLS: true, TLS: &tls.Config{Certificates: cert, ClientCAs: pki.pool}, PeerTLS: &tls.Config{RootCAs: pki.pool}},
	} {
		c.DataDir = t.TempDir()
		if b, err := New(c); err == nil {
			b.Close()
			t.Errorf("%s: New succeeded", name)
		} else if !strings.Contains(err.Error(), "raft-security-protocol") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestSkipPeerHostnameCheck: with ssl-endpoint-identification-algorithm
// empty a peer's certificate that names another host is accepted when the
// CA signed it, and refused when another CA did.
func TestSkipPeerHostnameCheck(t *testing.T) {
	pki, other := newTestPKI(t), newTestPKI(t)
	handshake := func(server tls.Certificate, client *tls.Config) error {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{server}})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		nc, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		return tls.Client(nc, client).Handshake()
	}
	named := &tls.Config{RootCAs: pki.pool, ServerName: "broker-7.example.com"}
	if err := handshake(pki.server, named); err == nil {
		t.Fatal("https identification: a certificate for 127.0.0.1 accepted for broker-7.example.com")
	}
	SkipPeerHostnameCheck(named)
	if err := handshake(pki.server, named); err != nil {
		t.Fatalf("without identification, the CA's certificate: %v", err)
	}
	if err := handshake(other.server, named); err == nil {
		t.Fatal("without identification, another CA's certificate was accepted")
	}
	if err := handshake(pki.client, named); err == nil {
		t.Fatal("a certificate without server use was accepted")
	}
}

// TestDialPeerSilentTLS: the broker's dialer for its own clients (replica
// fetches, transaction markers) runs the TLS handshake itself, bounded by
// the dial's context, and fails on a peer that accepts the connection but
// never answers; left to the client's first write, the handshake's read
// had no deadline.
func TestDialPeerSilentTLS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 4)
	go func() {
		defer close(held)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // never read, never written
		}
	}()
	defer func() {
		ln.Close()
		for c := range held {
			c.Close()
		}
	}()
	b := &Broker{cfg: Config{Listeners: []Listener{{Name: "SSL", SecurityProtocol: ProtocolSSL}}, PeerTLS: &tls.Config{}}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c, err := b.dialPeer(ctx, "tcp", ln.Addr().String())
	if err == nil {
		c.Close()
		t.Fatal("dialPeer returned a connection whose TLS handshake the peer never answered")
	}
}
