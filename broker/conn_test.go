package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SEDIMENT_TEST_LOG") != "" { // to read what a test's brokers did
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startBroker starts a broker on 127.0.0.1:0 with its data in dir (a
// fresh temp dir when empty).
func startBroker(t testing.TB, dir string, mod ...func(*Config)) *Broker {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := Config{
		DataDir:          dir,
		Listeners:        []Listener{{Addr: "127.0.0.1:0"}},
		AutoCreateTopics: true,
		Logger:           testLogger(t),
	}
	for _, m := range mod {
		m(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newClient(t testing.TB, b *Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// rawRequest sends one request frame built by kmsg and reads one response,
// failing the test on any error. Call it from the test goroutine only; a
// goroutine the test starts uses roundTrip and hands the error back.
func rawRequest(t testing.TB, nc net.Conn, req kmsg.Request, corr int32) kmsg.Response {
	t.Helper()
	resp, err := roundTrip(nc, req, corr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// roundTrip sends one request frame built by kmsg and reads one response
// within timeout.
func roundTrip(nc net.Conn, req kmsg.Request, corr int32, timeout time.Duration) (kmsg.Response, error) {
	return roundTripAs(nc, "", req, corr, timeout)
}

// roundTripAs is roundTrip with a client id in the request header ("":
// none).
func roundTripAs(nc net.Conn, clientID string, req kmsg.Request, corr int32, timeout time.Duration) (kmsg.Response, error) {
	f := kmsg.NewRequestFormatter()
	if clientID != "" {
		f = kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID))
	}
	frame := f.AppendRequest(nil, req, corr)
	if _, err := nc.Write(frame); err != nil {
		return nil, err
	}
	nc.SetReadDeadline(time.Now().Add(timeout))
	var sz [4]byte
	if _, err := io.ReadFull(nc, sz[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(sz[:]))
	if _, err := io.ReadFull(nc, body); err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corr {
		return nil, fmt.Errorf("correlation id %d, want %d", got, corr)
	}
	body = body[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != 18 {
		body = body[1:] // empty header tags
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decode %s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	return resp, nil
}

func TestApiVersions(t *testing.T) {
	var out logLines
	b := startBroker(t, "", func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for v := int16(0); v <= 5; v++ {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = v
		req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1.0"
		resp := rawRequest(t, nc, req, int32(v)).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("v%d: error %d", v, resp.ErrorCode)
		}
		found := false
		for _, k := range resp.ApiKeys {
			if k.ApiKey == 18 && k.MinVersion == 0 && k.MaxVersion == 5 {
				found = true
			}
		}
		if !found {
			t.Fatalf("v%d: ApiVersions range missing: %+v", v, resp.ApiKeys)
		}
	}
	// v5 (KIP-1242): the cluster and node the client expects. This
	// broker's: answered; another cluster or node: REBOOTSTRAP_REQUIRED;
	// a node without a cluster: INVALID_REQUEST; both without keys.
	cluster := b.meta.State().ClusterID
	for i, c := range []struct {
		cluster *string
		node    int32
		code    int16
	}{
		{&cluster, b.cfg.NodeID, 0},
		{nil, -1, 0},
		{kmsg.StringPtr("another-cluster"), b.cfg.NodeID, kerr.RebootstrapRequired.Code},
		{&cluster, b.cfg.NodeID + 1, kerr.RebootstrapRequired.Code},
		{&cluster, -1, kerr.RebootstrapRequired.Code},
		{nil, b.cfg.NodeID, kerr.InvalidRequest.Code},
	} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version, req.ClusterID, req.NodeID = 5, c.cluster, c.node
		resp := rawRequest(t, nc, req, int32(100+i)).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != c.code || (c.code == 0) != (len(resp.ApiKeys) > 0) {
			t.Fatalf("v5 for cluster %v node %d: error %d with %d keys, want error %d", c.cluster, c.node, resp.ErrorCode, len(resp.ApiKeys), c.code)
		}
	}
	// v6 is newer than we serve: a v0-shaped UNSUPPORTED_VERSION reply
	// naming the ApiVersions range alone, as Kafka's (KIP-511).
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 6
	var f kmsg.RequestFormatter
	nc.Write(f.AppendRequest(nil, req, 77))
	var sz [4]byte
	io.ReadFull(nc, sz[:])
	body := make([]byte, binary.BigEndian.Uint32(sz[:]))
	io.ReadFull(nc, body)
	v0 := kmsg.NewPtrApiVersionsResponse()
	v0.Version = 0
	if err := v0.ReadFrom(body[4:]); err != nil {
		t.Fatal(err)
	}
	if v0.ErrorCode != kerr.UnsupportedVersion.Code || len(v0.ApiKeys) != 1 || v0.ApiKeys[0].ApiKey != 18 || v0.ApiKeys[0].MaxVersion != 5 {
		t.Fatalf("v6: got error %d with keys %+v, want UNSUPPORTED_VERSION with ApiVersions 0-5 alone", v0.ErrorCode, v0.ApiKeys)
	}

	// kgo negotiates at v5 and sees the finalized features (v3+).
	cl := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kresp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if kresp.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(kresp.ErrorCode))
	}
	// The connection's own ApiVersions was v3+ (software name, features),
	// not v0 after an UNSUPPORTED_VERSION.
	if !strings.Contains(out.String(), `msg="client software" node=0 name=kgo`) {
		t.Fatalf("kgo's connections did not negotiate ApiVersions v3+:\n%s", out.String())
	}
}

// TestPipelinedReplies: a reply ready before a slower one queued behind it
// is sent at once, and replies keep request order.
func TestPipelinedReplies(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "pipe", 1, nil)
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var f kmsg.RequestFormatter
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version = 12
	fetch.MaxWaitMillis, fetch.MinBytes, fetch.MaxBytes = 60000, 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "pipe"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	// Metadata, then a long poll, then another Metadata.
	nc.Write(f.AppendRequest(nil, md, 1))
	nc.Write(f.AppendRequest(nil, fetch, 2))
	nc.Write(f.AppendRequest(nil, md, 3))
	read := func(want int32) []byte {
		nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		var sz [4]byte
		if _, err := io.ReadFull(nc, sz[:]); err != nil {
			t.Fatalf("reply %d: %v", want, err)
		}
		body := make([]byte, binary.BigEndian.Uint32(sz[:]))
		if _, err := io.ReadFull(nc, body); err != nil {
			t.Fatal(err)
		}
		if got := int32(binary.BigEndian.Uint32(body)); got != want {
			t.Fatalf("reply for %d, want %d", got, want)
		}
		return body
	}
	read(1) // not held behind the 60s long poll
	prod := newClient(t, b)
	if err := prod.ProduceSync(testCtx(t), &kgo.Record{Topic: "pipe", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	read(2)
	read(3)
}

func TestAdvertisedFor(t *testing.T) {
	host, _ := os.Hostname()
	for _, c := range [][3]string{
		{"localhost:9092", "127.0.0.1:9092", "localhost:9092"},
		{"127.0.0.1:0", "127.0.0.1:41234", "127.0.0.1:41234"},
		{":9092", "[::]:9092", net.JoinHostPort(host, "9092")},
		{"0.0.0.0:9092", "0.0.0.0:9092", net.JoinHostPort(host, "9092")},
	} {
		if got := advertisedFor(c[0], c[1]); got != c[2] {
			t.Errorf("advertisedFor(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

// A graceful shutdown keeps accepting and answering new connections while
// the leadership moves away, and refuses dials only once it has closed its
// listeners: a connection closed before its first answer reads to franz-go
// and librdkafka as a TLS mismatch (an EOF on the first read), which they do
// not retry, so a transactional offset commit sent to a coordinator that was
// shutting down failed with EOF under rolling restarts.
func TestShutdownServesNewConnectionsUntilListenersClose(t *testing.T) {
	b := startBroker(t, "")
	addr := b.Addr()
	served := make(chan error, 1)
	b.testHookShutdown = func() {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			served <- err
			return
		}
		defer nc.Close()
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = 3
		req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1.0"
		resp, err := roundTrip(nc, req, 1, 10*time.Second)
		if err == nil && resp.(*kmsg.ApiVersionsResponse).ErrorCode != 0 {
			err = fmt.Errorf("error code %d", resp.(*kmsg.ApiVersionsResponse).ErrorCode)
		}
		served <- err
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("a connection made during the controlled shutdown: %v, want an answer", err)
	}
	// Closed: a dial is refused (clients retry a refused dial elsewhere).
	if nc, err := net.Dial("tcp", addr); err == nil {
		nc.Close()
		t.Fatal("dial after Close succeeded, want refused")
	}
}
