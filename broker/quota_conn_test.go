package broker

import (
	"errors"
	"net"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// dialFrom dials the broker from a local address of the 127/8 loopback
// net, so that a test can be a client address of its own.
func dialFrom(t *testing.T, b *Broker, ip string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	nc, err := d.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

func setQuotas(t *testing.T, adm *kadm.Client, entries ...kadm.AlterClientQuotaEntry) {
	t.Helper()
	res, err := adm.AlterClientQuotas(testCtx(t), entries)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("alter %v: %v %s", r.Entity, r.Err, r.ErrMessage)
		}
	}
}

// TestConnectionCreationRateQuota: an ip entity's connection_creation_rate
// (KIP-612). With a rate of 1 per second for 127.0.0.2 (measured over at
// least one 1 s window), the first of five quick connections from there is
// served and the other four are held unserved and closed (and not counted,
// so the rate stays at its bound); 127.0.0.1 is not limited. The default
// ip entity then limits an address with no entity of its own (127.0.0.3).
func TestConnectionCreationRateQuota(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.QuotaWindowNum = 2 })
	adm := kadm.NewClient(newClient(t, b))
	str := func(s string) *string { return &s }
	rate := func(v float64) kadm.AlterClientQuotaOp {
		return kadm.AlterClientQuotaOp{Key: "connection_creation_rate", Value: v}
	}
	setQuotas(t, adm, ipEntry(str("127.0.0.2"), rate(1)))
	waitCond(t, func() bool { _, ok := b.quotas.currentTable().ipRate("127.0.0.2"); return ok })

	var conns []net.Conn
	for range 5 {
		conns = append(conns, dialFrom(t, b, "127.0.0.2"))
	}
	served := 0
	for i, nc := range conns {
		if apiVersionsOK(nc, int32(i), 10*time.Second) {
			served++
		}
	}
	if served != 1 {
		t.Fatalf("%d of 5 quick connections from 127.0.0.2 served, want 1 (connection_creation_rate 1)", served)
	}
	if n := promtest.ToFloat64(b.metrics.connThrottled.WithLabelValues("ip")); n != 4 {
		t.Errorf("throttled connections: %v, want 4", n)
	}
	for i := range 5 {
		if !apiVersionsOK(dialT(t, b.Addr()), int32(i), 10*time.Second) {
			t.Fatal("127.0.0.1 was limited")
		}
	}

	// The default ip entity: 127.0.0.3 has no entity of its own.
	setQuotas(t, adm, ipEntry(nil, rate(1)))
	waitCond(t, func() bool { _, ok := b.quotas.currentTable().ipRate("127.0.0.3"); return ok })
	first, second := dialFrom(t, b, "127.0.0.3"), dialFrom(t, b, "127.0.0.3")
	if !apiVersionsOK(first, 1, 10*time.Second) {
		t.Fatal("the first connection from 127.0.0.3 was not served")
	}
	if apiVersionsOK(second, 2, 10*time.Second) {
		t.Fatal("a second quick connection from 127.0.0.3 was served over the default connection_creation_rate of 1")
	}
}

// TestMaxConnectionCreationRate: max.connection.creation.rate, set as a
// dynamic broker config, makes the listener wait before it serves a
// connection over the rate: every connection is served, and those over the
// rate are counted as throttled. A negative value is INVALID_CONFIG.
func TestMaxConnectionCreationRate(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.QuotaWindowNum = 2 })
	adm := kadm.NewClient(newClient(t, b))
	ctx := testCtx(t)
	alter := func(value string) error {
		t.Helper()
		rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.connection.creation.rate", Value: &value}})
		if err != nil {
			t.Fatal(err)
		}
		return rs[0].Err
	}
	if err := alter("-1"); !errors.Is(err, kerr.InvalidConfig) {
		t.Fatalf("max.connection.creation.rate=-1: %v, want INVALID_CONFIG", err)
	}
	if err := alter("1"); err != nil {
		t.Fatal(err)
	}
	waitCond(t, func() bool {
		b.limits.mu.Lock()
		defer b.limits.mu.Unlock()
		return b.limits.creationRate == 1
	})
	var conns []net.Conn
	for range 3 {
		conns = append(conns, dialT(t, b.Addr()))
	}
	for i, nc := range conns {
		if !apiVersionsOK(nc, int32(i), 30*time.Second) {
			t.Fatalf("connection %d was not served: over max.connection.creation.rate a connection waits, it is not refused", i)
		}
	}
	if n := promtest.ToFloat64(b.metrics.connThrottled.WithLabelValues("broker")); n < 1 {
		t.Errorf("throttled connections: %v, want ≥ 1 of 3 quick ones over a rate of 1", n)
	}
	rc, err := adm.DescribeBrokerConfigs(ctx, b.cfg.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rc[0].Configs {
		if c.Key == "max.connection.creation.rate" {
			found = c.Value != nil && *c.Value == "1"
		}
	}
	if !found {
		t.Error("DescribeConfigs does not show max.connection.creation.rate=1")
	}
}

// TestRequestPercentageQuota: request_percentage (KIP-124). A client id
// with a tiny quota is told a throttle time (bounded by one quota window)
// on its first request; another client id is not. Time a request waits is
// not charged: a Fetch that long-polls 1.5 s on an empty partition, under
// a quota of 20% of a handler, is not throttled (charging the wait would
// make it 150% over a 1 s window).
func TestRequestPercentageQuota(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.QuotaWindowNum = 2 })
	createTopic(t, b, "rq", 1, nil)
	adm := kadm.NewClient(newClient(t, b))
	str := func(s string) *string { return &s }
	pct := func(v float64) kadm.AlterClientQuotaOp {
		return kadm.AlterClientQuotaOp{Key: "request_percentage", Value: v}
	}
	setQuotas(t, adm,
		quotaEntry(nil, str("greedy"), pct(1e-6)),
		quotaEntry(nil, str("poller"), pct(20)),
	)
	waitCond(t, func() bool {
		tb := b.quotas.currentTable()
		_, _, ok1 := tb.resolve(quotaTypeRequest, "ANONYMOUS", "greedy")
		_, _, ok2 := tb.resolve(quotaTypeRequest, "ANONYMOUS", "poller")
		return ok1 && ok2
	})

	metadata := func(client string, corr int32) int32 {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 12 // throttle_time_ms since v3
		resp, err := roundTripAs(dialT(t, b.Addr()), client, req, corr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.MetadataResponse).ThrottleMillis
	}
	if ms := metadata("greedy", 1); ms <= 0 || ms > 1000 {
		t.Errorf("greedy client's throttle: %d ms, want (0, 1000] (one window at most)", ms)
	}
	if ms := metadata("polite", 2); ms != 0 {
		t.Errorf("a client id without a quota was throttled %d ms", ms)
	}

	req := kmsg.NewPtrFetchRequest()
	req.Version = 11
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 1500, 1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "rq"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	start := time.Now()
	resp, err := roundTripAs(dialT(t, b.Addr()), "poller", req, 3, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fr := resp.(*kmsg.FetchResponse)
	if time.Since(start) < time.Second {
		t.Fatalf("the fetch returned after %v: it did not long-poll, the test proves nothing", time.Since(start))
	}
	if fr.ThrottleMillis != 0 {
		t.Errorf("a long-polling fetch was throttled %d ms: its wait was charged to request_percentage", fr.ThrottleMillis)
	}
}
