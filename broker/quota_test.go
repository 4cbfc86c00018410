package broker

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// TestRateSensor: Kafka's windowed rate and throttle time. With 11 windows
// of 1s a fresh sensor measures over at least 10s, so 10 MiB at once is
// exactly 1 MiB/s; one more MiB is 1.1 MiB/s, 10% over a 10s window: 1s.
func TestRateSensor(t *testing.T) {
	const mib = 1 << 20
	s := newRateSensor(11, 1000)
	if ms := s.recordAndThrottle(10*mib, mib, 0); ms != 0 {
		t.Fatalf("at the quota: throttle %dms, want 0", ms)
	}
	if ms := s.recordAndThrottle(mib, mib, 0); ms != 1000 {
		t.Fatalf("10%% over: throttle %dms, want 1000", ms)
	}
	// 12s later every sample is older than the 11 windows: all forgotten.
	if ms := s.recordAndThrottle(mib, mib, 12000); ms != 0 {
		t.Fatalf("after the samples expired: throttle %dms, want 0", ms)
	}
	// The window spans the oldest live sample once it is past 10s:
	// samples at 12s..22.5s hold 1+10 MiB over 10.5s.
	s.recordAndThrottle(10*mib, mib, 22500)
	if r, w := s.measureLocked(22500); w != 10500 || math.Abs(r-11*mib/10.5) > 1 {
		t.Fatalf("rate %f over %dms, want %f over 10500ms", r, w, 11*mib/10.5)
	}
}

// TestQuotaPrecedence: each client's quota comes from the first entity in
// Kafka's order that sets the type's key, and is measured by the matched
// entity's tags.
func TestQuotaPrecedence(t *testing.T) {
	str := func(s string) *string { return &s }
	ent := func(u, c **string) quotaKey {
		e := quotaEntity{}
		if u != nil {
			e.hasUser, e.user = true, *u
		}
		if c != nil {
			e.hasClient, e.client = true, *c
		}
		return keyOf(e)
	}
	alice, app, def := str("alice"), str("app"), (*string)(nil)
	levels := []struct {
		key        quotaKey
		user, clnt string // sensor tags for (alice, app)
	}{
		{ent(&alice, &app), "alice", "app"},
		{ent(&alice, &def), "alice", "app"},
		{ent(&alice, nil), "alice", ""},
		{ent(&def, &app), "alice", "app"},
		{ent(&def, &def), "alice", "app"},
		{ent(&def, nil), "alice", ""},
		{ent(nil, &app), "", "app"},
		{ent(nil, &def), "", "app"},
	}
	// With levels i.. set (value i+1), level i wins.
	for i := range levels {
		tbl := &quotaTable{values: map[quotaKey]map[string]float64{}}
		for j := i; j < len(levels); j++ {
			tbl.values[levels[j].key] = map[string]float64{quotaProducerByteRate: float64(j + 1)}
		}
		bound, sk, ok := tbl.resolve(quotaTypeProduce, "alice", "app")
		if !ok || bound != float64(i+1) || sk.user != levels[i].user || sk.client != levels[i].clnt {
			t.Errorf("levels %d..: got %v %v %+v, want %d tags (%q, %q)", i, ok, bound, sk, i+1, levels[i].user, levels[i].clnt)
		}
		// The other quota type is not affected.
		if _, _, ok := tbl.resolve(quotaTypeFetch, "alice", "app"); ok {
			t.Errorf("levels %d..: a fetch quota resolved from producer_byte_rate entries", i)
		}
	}
	// Another user and client id only match the defaults.
	tbl := &quotaTable{values: map[quotaKey]map[string]float64{}}
	for j, l := range levels {
		tbl.values[l.key] = map[string]float64{quotaConsumerByteRate: float64(j + 1)}
	}
	if bound, sk, _ := tbl.resolve(quotaTypeFetch, "bob", "other"); bound != 5 || sk.user != "bob" || sk.client != "other" {
		t.Errorf("bob/other: %v %+v, want the default user + default client-id quota (5)", bound, sk)
	}
}

// TestQuotaEntityCanonical: the stored entity string reads back, names
// with separators included.
func TestQuotaEntityCanonical(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, e := range []quotaEntity{
		{hasUser: true, user: str("alice")},
		{hasUser: true},
		{hasClient: true, client: str("a&b=c d%")},
		{hasUser: true, user: str("<default>"), hasClient: true},
		{hasUser: true, hasClient: true, client: str("user")},
		{hasIP: true, ip: str("1.2.3.4")},
		{hasIP: true, ip: str("::1")},
		{hasIP: true},
	} {
		back, ok := parseCanonicalQuotaEntity(e.String())
		if !ok || keyOf(back) != keyOf(e) || back.String() != e.String() || back.hasIP != e.hasIP {
			t.Errorf("%q: read back %v %+v", e.String(), ok, back)
		}
	}
	for _, bad := range []string{"", "client-id&user", "user&user", "user=%zz", "user=a&ip=1.2.3.4", "ip&client-id", "ip&ip"} {
		if _, ok := parseCanonicalQuotaEntity(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func quotaEntry(user, client *string, ops ...kadm.AlterClientQuotaOp) kadm.AlterClientQuotaEntry {
	var e kadm.ClientQuotaEntity
	if user != nil {
		e = append(e, kadm.ClientQuotaEntityComponent{Type: "user", Name: user})
	}
	if client != nil {
		e = append(e, kadm.ClientQuotaEntityComponent{Type: "client-id", Name: client})
	}
	return kadm.AlterClientQuotaEntry{Entity: e, Ops: ops}
}

func ipEntry(ip *string, ops ...kadm.AlterClientQuotaOp) kadm.AlterClientQuotaEntry {
	return kadm.AlterClientQuotaEntry{Entity: kadm.ClientQuotaEntity{{Type: "ip", Name: ip}}, Ops: ops}
}

func described(t *testing.T, qs kadm.DescribedClientQuotas) []string {
	t.Helper()
	var out []string
	for _, q := range qs {
		s := q.Entity.String()
		for _, v := range q.Values {
			s += " " + v.String()
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// TestClientQuotasAdmin: kadm round trips of AlterClientQuotas and
// DescribeClientQuotas, defaults, filters, validate_only, and Kafka's error
// codes for bad input.
func TestClientQuotasAdmin(t *testing.T) {
	b := startBroker(t, "")
	adm := kadm.NewClient(newClient(t, b))
	ctx := testCtx(t)
	str := func(s string) *string { return &s }
	set := func(k string, v float64) kadm.AlterClientQuotaOp { return kadm.AlterClientQuotaOp{Key: k, Value: v} }
	dflt := func(typ string) kadm.ClientQuotaEntityComponent { return kadm.ClientQuotaEntityComponent{Type: typ} }

	entries := []kadm.AlterClientQuotaEntry{
		quotaEntry(str("alice"), nil, set("producer_byte_rate", 1024), set("consumer_byte_rate", 2048)),
		quotaEntry(str("alice"), str("app"), set("producer_byte_rate", 4096)),
		quotaEntry(nil, str("app"), set("consumer_byte_rate", 100)),
		{Entity: kadm.ClientQuotaEntity{dflt("user")}, Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", 512)}},
		{Entity: kadm.ClientQuotaEntity{dflt("user"), dflt("client-id")}, Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", 256)}},
		{Entity: kadm.ClientQuotaEntity{dflt("client-id")}, Ops: []kadm.AlterClientQuotaOp{set("consumer_byte_rate", 128)}},
	}
	// validate_only stores nothing.
	res, err := adm.ValidateAlterClientQuotas(ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("validate %v: %v %s", r.Entity, r.Err, r.ErrMessage)
		}
	}
	if qs, err := adm.DescribeClientQuotas(ctx, false, nil); err != nil || len(qs) != 0 {
		t.Fatalf("after validate_only: %v %v", qs, err)
	}
	res, err = adm.AlterClientQuotas(ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(entries) {
		t.Fatalf("%d results for %d entries", len(res), len(entries))
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("alter %v: %v %s", r.Entity, r.Err, r.ErrMessage)
		}
	}
	describe := func(strict bool, comps ...kadm.DescribeClientQuotaComponent) []string {
		t.Helper()
		qs, err := adm.DescribeClientQuotas(ctx, strict, comps)
		if err != nil {
			t.Fatal(err)
		}
		return described(t, qs)
	}
	want := []string{
		"{client-id=<default>} consumer_byte_rate=128.000000",
		"{client-id=app} consumer_byte_rate=100.000000",
		"{user=<default>, client-id=<default>} producer_byte_rate=256.000000",
		"{user=<default>} producer_byte_rate=512.000000",
		"{user=alice, client-id=app} producer_byte_rate=4096.000000",
		"{user=alice} consumer_byte_rate=2048.000000 producer_byte_rate=1024.000000",
	}
	if got := describe(false); !slices.Equal(got, want) {
		t.Fatalf("describe all:\n%q\nwant\n%q", got, want)
	}
	user := func(mt kadm.QuotasMatchType, name *string) kadm.DescribeClientQuotaComponent {
		return kadm.DescribeClientQuotaComponent{Type: "user", MatchType: mt, MatchName: name}
	}
	client := func(mt kadm.QuotasMatchType, name *string) kadm.DescribeClientQuotaComponent {
		return kadm.DescribeClientQuotaComponent{Type: "client-id", MatchType: mt, MatchName: name}
	}
	for _, c := range []struct {
		name   string
		strict bool
		comps  []kadm.DescribeClientQuotaComponent
		want   []string
	}{
		{"user alice", false, []kadm.DescribeClientQuotaComponent{user(0, str("alice"))}, []string{want[4], want[5]}},
		{"user alice strict", true, []kadm.DescribeClientQuotaComponent{user(0, str("alice"))}, []string{want[5]}},
		{"default user", false, []kadm.DescribeClientQuotaComponent{user(1, nil)}, []string{want[2], want[3]}},
		{"default user strict", true, []kadm.DescribeClientQuotaComponent{user(1, nil)}, []string{want[3]}},
		{"any user strict", true, []kadm.DescribeClientQuotaComponent{user(2, nil)}, []string{want[3], want[5]}},
		{"any client strict", true, []kadm.DescribeClientQuotaComponent{client(2, nil)}, []string{want[0], want[1]}},
		{"any user, client app", false, []kadm.DescribeClientQuotaComponent{user(2, nil), client(0, str("app"))}, []string{want[4]}},
		{"user bob", false, []kadm.DescribeClientQuotaComponent{user(0, str("bob"))}, nil},
	} {
		if got := describe(c.strict, c.comps...); !slices.Equal(got, c.want) {
			t.Errorf("%s:\n%q\nwant\n%q", c.name, got, c.want)
		}
	}

	// Remove one key, then the entity's last: it goes away.
	res, err = adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		quotaEntry(str("alice"), nil, kadm.AlterClientQuotaOp{Key: "consumer_byte_rate", Remove: true}),
		quotaEntry(str("alice"), str("app"), kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Remove: true}),
	})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("remove: %v %+v", err, res)
	}
	if got := describe(false, user(0, str("alice"))); !slices.Equal(got, []string{"{user=alice} producer_byte_rate=1024.000000"}) {
		t.Fatalf("after remove: %q", got)
	}

	// Bad input: Kafka's codes, per entry; nothing stored.
	for _, c := range []struct {
		name  string
		entry kadm.AlterClientQuotaEntry
		want  error
	}{
		{"empty entity", kadm.AlterClientQuotaEntry{Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", 1)}}, kerr.InvalidRequest},
		{"unknown entity type", kadm.AlterClientQuotaEntry{Entity: kadm.ClientQuotaEntity{{Type: "group", Name: str("g")}}, Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", 1)}}, kerr.InvalidRequest},
		{"duplicate entity type", kadm.AlterClientQuotaEntry{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: str("a")}, {Type: "user", Name: str("b")}}, Ops: []kadm.AlterClientQuotaOp{set("producer_byte_rate", 1)}}, kerr.InvalidRequest},
		{"empty name", quotaEntry(str(""), nil, set("producer_byte_rate", 1)), kerr.InvalidRequest},
		{"ip with user", kadm.AlterClientQuotaEntry{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: str("bob")}, {Type: "ip", Name: str("10.0.0.1")}}, Ops: []kadm.AlterClientQuotaOp{set("connection_creation_rate", 1)}}, kerr.InvalidRequest},
		{"ip not an address", ipEntry(str("no such host.invalid"), set("connection_creation_rate", 1)), kerr.InvalidRequest},
		{"ip byte rate", ipEntry(str("10.0.0.1"), set("producer_byte_rate", 1)), kerr.InvalidRequest},
		{"ip fractional", ipEntry(str("10.0.0.1"), set("connection_creation_rate", 1.5)), kerr.InvalidRequest},
		{"ip too large", ipEntry(nil, set("connection_creation_rate", 1<<31)), kerr.InvalidRequest},
		{"ip zero", ipEntry(nil, set("connection_creation_rate", 0)), kerr.InvalidRequest},
		{"user connection rate", quotaEntry(str("bob"), nil, set("connection_creation_rate", 5)), kerr.InvalidRequest},
		{"unknown key", quotaEntry(str("bob"), nil, set("bytes_per_fortnight", 1)), kerr.InvalidRequest},
		{"request_percentage zero", quotaEntry(str("bob"), nil, set("request_percentage", 0)), kerr.InvalidRequest},
		{"zero", quotaEntry(str("bob"), nil, set("producer_byte_rate", 0)), kerr.InvalidRequest},
		{"negative", quotaEntry(str("bob"), nil, set("consumer_byte_rate", -5)), kerr.InvalidRequest},
		{"fractional", quotaEntry(str("bob"), nil, set("producer_byte_rate", 1.5)), kerr.InvalidRequest},
		{"NaN", quotaEntry(str("bob"), nil, set("producer_byte_rate", math.NaN())), kerr.InvalidRequest},
		{"too large", quotaEntry(str("bob"), nil, set("producer_byte_rate", 1e300)), kerr.InvalidRequest},
		{"duplicate key", quotaEntry(str("bob"), nil, set("producer_byte_rate", 1), set("producer_byte_rate", 2)), kerr.InvalidRequest},
	} {
		for _, validate := range []bool{true, false} {
			alter := adm.AlterClientQuotas
			if validate {
				alter = adm.ValidateAlterClientQuotas
			}
			res, err := alter(ctx, []kadm.AlterClientQuotaEntry{c.entry})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if len(res) != 1 || !errors.Is(res[0].Err, c.want) || res[0].ErrMessage == "" {
				t.Errorf("%s (validate %v): %+v, want %v with a message", c.name, validate, res, c.want)
			}
		}
	}
	if got := describe(false, user(0, str("bob"))); len(got) != 0 {
		t.Fatalf("bad input stored: %q", got)
	}

	// ip entities (KIP-612): an address, a host name, the default; they
	// stand alone in filters too.
	res, err = adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		ipEntry(str("10.1.2.3"), set("connection_creation_rate", 20)),
		ipEntry(str("localhost"), set("connection_creation_rate", 30)),
		ipEntry(nil, set("connection_creation_rate", 100)),
		quotaEntry(str("carol"), nil, set("request_percentage", 12.5)),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("alter %v: %v %s", r.Entity, r.Err, r.ErrMessage)
		}
	}
	ip := func(m kadm.QuotasMatchType, name *string) kadm.DescribeClientQuotaComponent {
		return kadm.DescribeClientQuotaComponent{Type: "ip", MatchType: m, MatchName: name}
	}
	for _, c := range []struct {
		name  string
		comps []kadm.DescribeClientQuotaComponent
		want  []string
	}{
		{"any ip", []kadm.DescribeClientQuotaComponent{ip(2, nil)}, []string{"{ip=10.1.2.3} connection_creation_rate=20.000000", "{ip=<default>} connection_creation_rate=100.000000", "{ip=localhost} connection_creation_rate=30.000000"}},
		{"default ip", []kadm.DescribeClientQuotaComponent{ip(1, nil)}, []string{"{ip=<default>} connection_creation_rate=100.000000"}},
		{"ip 10.1.2.3", []kadm.DescribeClientQuotaComponent{ip(0, str("10.1.2.3"))}, []string{"{ip=10.1.2.3} connection_creation_rate=20.000000"}},
		{"user carol", []kadm.DescribeClientQuotaComponent{user(0, str("carol"))}, []string{"{user=carol} request_percentage=12.500000"}},
	} {
		if got := describe(false, c.comps...); !slices.Equal(got, c.want) {
			t.Errorf("%s:\n%q\nwant\n%q", c.name, got, c.want)
		}
	}
	// localhost is looked up in the background: wait for it.
	waitCond(t, func() bool { _, ok := b.quotas.currentTable().ipRates["127.0.0.1"]; return ok })
	tbl := b.quotas.currentTable()
	if r, ok := tbl.ipRate("10.1.2.3"); !ok || r != 20 {
		t.Errorf("ipRate(10.1.2.3) = %v %v, want 20", r, ok)
	}
	if r, ok := tbl.ipRate("127.0.0.1"); !ok || r != 30 {
		t.Errorf("ipRate(127.0.0.1) = %v %v, want 30 (localhost's entity)", r, ok)
	}
	if r, ok := tbl.ipRate("192.0.2.1"); !ok || r != 100 {
		t.Errorf("ipRate(192.0.2.1) = %v %v, want the default's 100", r, ok)
	}

	// Bad filters fail the whole describe.
	for _, c := range []struct {
		name  string
		comps []kadm.DescribeClientQuotaComponent
		want  error
	}{
		{"exact without name", []kadm.DescribeClientQuotaComponent{user(0, nil)}, kerr.InvalidRequest},
		{"default with name", []kadm.DescribeClientQuotaComponent{user(1, str("x"))}, kerr.InvalidRequest},
		{"any with name", []kadm.DescribeClientQuotaComponent{user(2, str("x"))}, kerr.InvalidRequest},
		{"twice", []kadm.DescribeClientQuotaComponent{user(1, nil), user(2, nil)}, kerr.InvalidRequest},
		{"unknown match type", []kadm.DescribeClientQuotaComponent{user(7, nil)}, kerr.InvalidRequest},
		{"ip with user", []kadm.DescribeClientQuotaComponent{user(2, nil), {Type: "ip", MatchType: 2}}, kerr.InvalidRequest},
		{"unknown type", []kadm.DescribeClientQuotaComponent{{Type: "group", MatchType: 2}}, kerr.UnsupportedVersion},
	} {
		if _, err := adm.DescribeClientQuotas(ctx, false, c.comps); !errors.Is(err, c.want) {
			t.Errorf("describe %s: %v, want %v", c.name, err, c.want)
		}
	}

	// Quotas are not broker configs.
	rc, err := adm.DescribeBrokerConfigs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc[0].Configs {
		if c.Key == "producer_byte_rate" || c.Key == "consumer_byte_rate" {
			t.Errorf("DescribeConfigs(broker) shows %s", c.Key)
		}
	}
}

// TestProduceQuotaMute: a Produce over the anonymous user's
// producer_byte_rate is answered at once with throttle_time_ms, and the
// connection's next request is handled only after that time (KIP-219).
func TestProduceQuotaMute(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.QuotaWindowNum = 2 })
	createTopic(t, b, "quota", 1, nil)
	adm := kadm.NewClient(newClient(t, b))
	ctx := testCtx(t)
	anon := "ANONYMOUS"
	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		quotaEntry(&anon, nil, kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Value: 100 << 10}),
	})
	if err != nil || res[0].Err != nil {
		t.Fatalf("alter: %v %+v", err, res)
	}
	nc := dial(t, b)
	batch := buildBatch(-1, -1, -1, 1, 200<<10) // ~200 KiB: twice the quota of the 1s minimum window
	req := kmsg.NewPtrProduceRequest()
	req.Version = 9
	req.Acks = 1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "quota"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := rawRequest(t, nc, req, 1).(*kmsg.ProduceResponse)
	answered := time.Now()
	if ec := resp.Topics[0].Partitions[0].ErrorCode; ec != 0 {
		t.Fatalf("produce: %v", kerr.ErrorForCode(ec))
	}
	throttle := time.Duration(resp.ThrottleMillis) * time.Millisecond
	if throttle < 900*time.Millisecond || throttle > 1500*time.Millisecond {
		t.Fatalf("throttle_time_ms %d, want about 1000 ((200-100)/100 of a 1s window)", resp.ThrottleMillis)
	}
	rawRequest(t, nc, kmsg.NewPtrApiVersionsRequest(), 2)
	// Not muted, the answer comes in milliseconds; the margin is for a
	// loaded machine, where this goroutine reads the throttled reply late
	// (a 50 ms margin failed: 2.86 s waited against 2.95).
	if waited := time.Since(answered); waited < throttle/2 {
		t.Fatalf("next request answered %v after a throttled reply of %v: the connection was not muted", waited, throttle)
	}
	// Pipelined: two Produce requests sent at once. The broker reads both
	// but starts the second only once the first's throttle has passed,
	// also with acks=-1, where the first lets the second start its
	// appends before it is answered (Request.Ordered).
	req.Acks = -1
	var f kmsg.RequestFormatter
	frames := append(f.AppendRequest(nil, req, 3), f.AppendRequest(nil, req, 4)...)
	if _, err := nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	var at [2]time.Time
	var throttles [2]time.Duration
	for i := range at {
		nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		var sz [4]byte
		if _, err := io.ReadFull(nc, sz[:]); err != nil {
			t.Fatalf("pipelined response %d: %v", i, err)
		}
		body := make([]byte, binary.BigEndian.Uint32(sz[:]))
		if _, err := io.ReadFull(nc, body); err != nil {
			t.Fatal(err)
		}
		at[i] = time.Now()
		pr := req.ResponseKind().(*kmsg.ProduceResponse)
		if err := pr.ReadFrom(body[5:]); err != nil { // correlation id, header tags (v9 is flexible)
			t.Fatal(err)
		}
		throttles[i] = time.Duration(pr.ThrottleMillis) * time.Millisecond
	}
	if throttles[0] <= 0 {
		t.Fatalf("first pipelined Produce not throttled")
	}
	if gap := at[1].Sub(at[0]); gap < throttles[0]/2 {
		t.Fatalf("second pipelined Produce answered %v after the first, throttled %v: it did not wait", gap, throttles[0])
	}
	if n := testutil.CollectAndCount(b.quotas.throttleTime); n != 1 {
		t.Fatalf("throttle time histogram series: %d", n)
	}
}

// TestBoundFetch: a consumer's max_bytes is lowered to its quota's worth
// of quota-window-num - 1 windows, as Kafka's getMaxValueInQuotaWindow.
func TestBoundFetch(t *testing.T) {
	q := &quotas{numWindows: 11, windowMs: 1000}
	tbl := &quotaTable{values: map[quotaKey]map[string]float64{
		{hasClient: true, client: "slow"}: {quotaConsumerByteRate: 1024},
	}}
	for _, c := range []struct {
		client   string
		max, out int32
	}{
		{"slow", 50 << 20, 10 << 10},
		{"slow", 5000, 5000},
		{"other", 50 << 20, 50 << 20},
	} {
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes = c.max
		q.boundFetch(tbl, req, AnonymousPrincipal, c.client)
		if req.MaxBytes != c.out {
			t.Errorf("%s, max_bytes %d: %d, want %d", c.client, c.max, req.MaxBytes, c.out)
		}
	}
}

// quotaThrottles counts the throttle times a kgo client is given.
type quotaThrottles struct{ n atomic.Int32 }

func (h *quotaThrottles) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	if d > 0 {
		h.n.Add(1)
	}
}

// TestUserQuotaSASL: a user quota applies to the SASL user's connections,
// not to an anonymous client with the same client id on the PLAINTEXT
// listener.
func TestUserQuotaSASL(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.QuotaWindowNum = 2
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext},
			{Name: "SASL_PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolSASLPlaintext},
		}
	})
	createTopic(t, b, "quota", 1, nil)
	setUser(t, b, "alice", "alice-secret", kadm.ScramSha256)
	alice := "alice"
	res, err := kadm.NewClient(newClient(t, b)).AlterClientQuotas(testCtx(t), []kadm.AlterClientQuotaEntry{
		quotaEntry(&alice, nil, kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Value: 100 << 10}),
	})
	if err != nil || res[0].Err != nil {
		t.Fatalf("alter: %v %+v", err, res)
	}
	produce := func(cl *kgo.Client) {
		t.Helper()
		recs := make([]*kgo.Record, 6)
		for i := range recs {
			v := make([]byte, 50<<10)
			rand.Read(v)
			recs[i] = &kgo.Record{Topic: "quota", Value: v}
		}
		for _, r := range recs { // one request each
			if err := cl.ProduceSync(testCtx(t), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var anon, sasl quotaThrottles
	opts := []kgo.Opt{kgo.ClientID("app"), kgo.ProducerBatchCompression(kgo.NoCompression())}
	produce(newClient(t, b, append(opts, kgo.WithHooks(&anon))...))
	if n := anon.n.Load(); n != 0 {
		t.Fatalf("anonymous client throttled %d times by alice's quota", n)
	}
	cl, err := kgo.NewClient(append(opts, kgo.WithHooks(&sasl), kgo.SeedBrokers(b.listenerAddr("SASL_PLAINTEXT")),
		kgo.SASL(plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce(cl)
	if sasl.n.Load() == 0 {
		t.Fatal("alice's 300 KiB at 100 KiB/s were not throttled")
	}
}

// FuzzQuotaEntity: any stored entity string either does not parse or
// parses to an entity whose canonical form reads back to the same entity;
// any entity's canonical form parses.
func FuzzQuotaEntity(f *testing.F) {
	for _, s := range []string{"user=alice", "user&client-id", "client-id=a%26b", "user=%3Cdefault%3E&client-id=x", "user=", "&", "user=%"} {
		f.Add(s, "u", "c", true, false)
	}
	f.Fuzz(func(t *testing.T, s, user, client string, hasUser, hasClient bool) {
		if e, ok := parseCanonicalQuotaEntity(s); ok {
			back, ok := parseCanonicalQuotaEntity(e.String())
			if !ok || keyOf(back) != keyOf(e) {
				t.Fatalf("%q: %+v re-encodes to %q, which reads back %v %+v", s, e, e.String(), ok, back)
			}
		}
		if !hasUser && !hasClient {
			return
		}
		e := quotaEntity{hasUser: hasUser, hasClient: hasClient}
		if hasUser && user != "" {
			e.user = &user
		}
		if hasClient && client != "" {
			e.client = &client
		}
		back, ok := parseCanonicalQuotaEntity(e.String())
		if !ok || keyOf(back) != keyOf(e) {
			t.Fatalf("%+v: %q reads back %v %+v", e, e.String(), ok, back)
		}
	})
}

// TestFetchQuotaThrottledEmpty: a consumer's Fetch over its
// consumer_byte_rate is answered with the throttle time and no records, as
// Kafka's throttled fetch response, and its bytes are not counted; a fetch
// session survives it (an incremental session moves to its next epoch and
// the next answer carries what this one held back; a new session is not
// opened), and a kgo consumer reads every record once, in order.
func TestFetchQuotaThrottledEmpty(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.QuotaWindowNum = 2 })
	createTopic(t, b, "fq", 1, nil)
	nc := dial(t, b)
	const n = 4
	for i := range n {
		if rp := produceRaw(t, nc, "fq", buildBatch(-1, -1, -1, 1, 60<<10), 1, 9, int32(i)); rp.ErrorCode != 0 {
			t.Fatalf("produce %d: %v", i, kerr.ErrorForCode(rp.ErrorCode))
		}
	}
	// acks=1 answers before the fsync that moves the high watermark: a
	// fetch of offset 1 could find nothing to read yet (an empty answer,
	// no throttle), which failed the test on a loaded machine.
	fq, err := b.store.partition(b.meta.State(), "fq", 0)
	if err != nil {
		t.Fatal(err)
	}
	waitCond(t, func() bool { return fq.log.HighWatermark() == n })
	anon := AnonymousPrincipal
	res, err := kadm.NewClient(newClient(t, b)).AlterClientQuotas(testCtx(t), []kadm.AlterClientQuotaEntry{
		quotaEntry(&anon, nil, kadm.AlterClientQuotaOp{Key: "consumer_byte_rate", Value: 62 << 10}),
	})
	if err != nil || res[0].Err != nil {
		t.Fatalf("alter: %v %+v", err, res)
	}
	waitCond(t, func() bool { return b.quotas.currentTable().any[quotaTypeFetch] })

	corr := int32(100)
	fetch := func(nc net.Conn, session, epoch int32, offset int64) *kmsg.FetchResponse {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version = 12
		req.ReplicaID = -1
		req.MaxWaitMillis = 0
		req.MaxBytes = 1 << 20
		req.SessionID, req.SessionEpoch = session, epoch
		if offset >= 0 {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = "fq"
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = offset, 1<<20, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		corr++
		resp := rawRequest(t, nc, req, corr).(*kmsg.FetchResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("fetch (session %d epoch %d): %v", session, epoch, kerr.ErrorForCode(resp.ErrorCode))
		}
		return resp
	}
	// records returns the base offsets of the batches in a response.
	records := func(resp *kmsg.FetchResponse) []int64 {
		var offs []int64
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					t.Fatalf("partition error %v", kerr.ErrorForCode(rp.ErrorCode))
				}
				raw := rp.RecordBatches
				for len(raw) >= 12 {
					var rb kmsg.RecordBatch
					if err := rb.ReadFrom(raw); err != nil {
						t.Fatal(err)
					}
					offs = append(offs, rb.FirstOffset)
					raw = raw[12+int(rb.Length):]
				}
			}
		}
		return offs
	}

	// A full fetch opens the session: the first batch (max_bytes is
	// bounded to the quota's 62 KiB), 60 KiB, under the quota.
	nc = dial(t, b)
	resp := fetch(nc, 0, 0, 0)
	if got := records(resp); len(got) != 1 || got[0] != 0 || resp.ThrottleMillis != 0 || resp.SessionID == 0 {
		t.Fatalf("first fetch: batches %v, throttle %d ms, session %d; want [0], 0, a session", got, resp.ThrottleMillis, resp.SessionID)
	}
	session := resp.SessionID
	// The next 60 KiB take the rate to 120 KiB over the window's first
	// 1 s + the time since the first fetch: over 62 KiB/s unless that
	// time passes 0.9 s (a quota of 100 KiB/s left only 0.2 s, which a
	// loaded machine took: the test failed with no throttle).
	resp = fetch(nc, session, 1, 1)
	if got := records(resp); len(got) != 0 || len(resp.Topics) != 0 || resp.ThrottleMillis <= 0 || resp.SessionID != session {
		t.Fatalf("fetch over the quota: batches %v (%d topics), throttle %d ms, session %d; want none, a throttle, session %d",
			got, len(resp.Topics), resp.ThrottleMillis, resp.SessionID, session)
	}
	// The incremental session goes on at the next epochs (the connection
	// is muted meanwhile); once the rate allows, the held-back batch comes.
	epoch := int32(2)
	for ; ; epoch++ {
		if epoch > 30 {
			t.Fatal("never answered with records")
		}
		resp = fetch(nc, session, epoch, -1)
		if resp.SessionID != session {
			t.Fatalf("epoch %d: session %d, want %d", epoch, resp.SessionID, session)
		}
		got := records(resp)
		if resp.ThrottleMillis > 0 {
			if len(resp.Topics) != 0 {
				t.Fatalf("epoch %d: throttled %d ms with %d topics", epoch, resp.ThrottleMillis, len(resp.Topics))
			}
			continue
		}
		if len(got) != 1 || got[0] != 1 {
			t.Fatalf("epoch %d: batches %v, want [1]", epoch, got)
		}
		break
	}
	// The throttled answers were not counted: 120 KiB, not more.
	b.quotas.mu.Lock()
	var measured float64
	for k, s := range b.quotas.mu.sensors {
		if k.typ != quotaTypeFetch {
			continue
		}
		s.mu.Lock()
		for _, smp := range s.samples {
			measured += smp.value
		}
		s.mu.Unlock()
	}
	b.quotas.mu.Unlock()
	if measured < 120<<10 || measured > 130<<10 {
		t.Fatalf("fetch sensors hold %.0f bytes, want the two batches answered (~120 KiB)", measured)
	}
	// Over the quota, a new session's full fetch is answered without
	// opening it.
	sessions := func() int {
		b.fetchSessions.mu.Lock()
		defer b.fetchSessions.mu.Unlock()
		return len(b.fetchSessions.m)
	}
	before := sessions()
	resp = fetch(dial(t, b), 0, 0, 2)
	if len(resp.Topics) != 0 || resp.ThrottleMillis <= 0 || resp.SessionID != 0 || sessions() != before {
		t.Fatalf("full fetch over the quota: %d topics, throttle %d ms, session %d, %d sessions (was %d)",
			len(resp.Topics), resp.ThrottleMillis, resp.SessionID, sessions(), before)
	}

	// A real consumer reads everything once, in order, throttled.
	var h quotaThrottles
	cl := newClient(t, b, kgo.WithHooks(&h), kgo.ConsumeTopics("fq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var next int64
	for next < n {
		fs := cl.PollFetches(testCtx(t))
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != next || len(r.Value) != 60<<10 {
				t.Fatalf("record at offset %d (%d bytes), want offset %d", r.Offset, len(r.Value), next)
			}
			next++
		})
	}
	if h.n.Load() == 0 {
		t.Fatal("a consumer of 240 KiB at 62 KiB/s was never throttled")
	}
}
