package broker

import (
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// apiVersionsOK reports whether nc is answered an ApiVersions within d.
func apiVersionsOK(nc net.Conn, corr int32, d time.Duration) bool {
	_, err := roundTrip(nc, kmsg.NewPtrApiVersionsRequest(), corr, d)
	return err == nil
}

func dialT(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// TestMaxConnectionsPerIP: the connection over max.connections.per.ip is
// closed at once; one more fits when one closes; an override for the
// address wins.
func TestMaxConnectionsPerIP(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.MaxConnectionsPerIP = 3 })
	var open []net.Conn
	for i := range 3 {
		nc := dialT(t, b.Addr())
		if !apiVersionsOK(nc, int32(i), 10*time.Second) {
			t.Fatalf("connection %d refused", i)
		}
		open = append(open, nc)
	}
	extra := dialT(t, b.Addr())
	if apiVersionsOK(extra, 9, 10*time.Second) {
		t.Fatal("a 4th connection from the address was served")
	}
	if n := testutil.ToFloat64(b.metrics.connRejected); n != 1 {
		t.Errorf("rejected connections: %v, want 1", n)
	}
	open[0].Close()
	waitCond(t, func() bool { return apiVersionsOK(dialT(t, b.Addr()), 1, 10*time.Second) })

	// An override of 1 for 127.0.0.1, no general limit.
	ov, err := ParseConnectionOverrides("127.0.0.1:1, [::1]:5")
	if err != nil || ov["127.0.0.1"] != 1 || ov["::1"] != 5 {
		t.Fatalf("overrides: %v %v", ov, err)
	}
	b2 := startBroker(t, "", func(c *Config) { c.MaxConnectionsPerIPOverrides = ov })
	if !apiVersionsOK(dialT(t, b2.Addr()), 1, 10*time.Second) {
		t.Fatal("first connection refused")
	}
	if apiVersionsOK(dialT(t, b2.Addr()), 2, 10*time.Second) {
		t.Fatal("a second connection with an override of 1 was served")
	}
	for _, bad := range []string{"127.0.0.1", "127.0.0.1:x", "127.0.0.1:-1", ":3"} {
		if _, err := ParseConnectionOverrides(bad); err == nil {
			t.Errorf("override %q accepted", bad)
		}
	}
}

// TestMaxConnections: with max.connections open on the client listener, a
// new client waits (not served, not closed) until one closes; the first
// listener, for brokers, is served meanwhile.
func TestMaxConnections(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0"},
			{Name: "CLIENT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
		}
		c.MaxConnections = 2
	})
	client := b.listenerAddr("CLIENT")
	first := dialT(t, client)
	for i, nc := range []net.Conn{first, dialT(t, client)} {
		if !apiVersionsOK(nc, int32(i), 10*time.Second) {
			t.Fatalf("client connection %d refused", i)
		}
	}
	waiting := dialT(t, client) // in the backlog
	done := make(chan bool, 1)
	go func() { done <- apiVersionsOK(waiting, 5, 30*time.Second) }()
	for i := range 3 { // the inter-broker listener is not counted
		if !apiVersionsOK(dialT(t, b.Addr()), int32(i), 10*time.Second) {
			t.Fatal("the first listener did not serve while the client listener was full")
		}
	}
	select {
	case <-done:
		t.Fatal("a third client connection was served at max.connections 2")
	default:
	}
	first.Close()
	if !<-done {
		t.Fatal("the waiting client was not served after a connection closed")
	}
}
