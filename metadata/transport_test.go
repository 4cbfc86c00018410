package metadata

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestDialSilentTLSPeer: a peer that accepts the TCP connection but never
// answers the TLS handshake fails the dial within its timeout, for raft's
// own connections and for forwarded requests alike; without the read
// deadline the handshake waited for ever, and raft's Shutdown with it.
func TestDialSilentTLSPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(held)
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
	dial := func(addr string, timeout time.Duration) (net.Conn, error) {
		nc, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil, err
		}
		return tls.Client(nc, &tls.Config{ServerName: "127.0.0.1"}), nil
	}
	const timeout = 200 * time.Millisecond
	for name, f := range map[string]func() error{
		"raft": func() error {
			c, err := (&muxLayer{dial: dial}).Dial(raft.ServerAddress(ln.Addr().String()), timeout)
			if err == nil {
				c.Close()
			}
			return err
		},
		"forward": func() error {
			_, err := identify(dial, ln.Addr().String(), 1, timeout)
			return err
		},
	} {
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: a dial to a peer that never answered succeeded", name)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the dial to a peer that never answers the TLS handshake has not returned after 30s (timeout %v)", name, timeout)
		}
	}
}
