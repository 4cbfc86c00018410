package broker

import (
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestBrokerLoggers: the BROKER_LOGGER config resource (Kafka's broker
// loggers, kafka-configs.sh --entity-type broker-loggers) shows the root
// logger at the broker's level; IncrementalAlterConfigs sets it at once
// (the broker then writes debug lines it did not write before), not with
// validate_only; bad levels and unknown loggers are INVALID_CONFIG; DELETE
// of root, APPEND, SUBTRACT, another broker's id, an empty name and the
// legacy AlterConfigs are INVALID_REQUEST, as in Kafka.
func TestBrokerLoggers(t *testing.T) {
	var out logLines
	level := new(slog.LevelVar)
	b := startBroker(t, "", func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level}))
		c.LogLevel = level
	})
	cl := newClient(t, b)
	ctx := testCtx(t)
	// Straight to this broker: the client would route a resource named
	// after another broker id to that broker.
	send := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := cl.Broker(int(b.cfg.NodeID)).Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	describe := func(name string, names ...string) (int16, map[string]kmsg.DescribeConfigsResponseResourceConfig) {
		t.Helper()
		req := kmsg.NewPtrDescribeConfigsRequest()
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName, r.ConfigNames = kmsg.ConfigResourceTypeBrokerLogger, name, names
		req.Resources = append(req.Resources, r)
		res := send(req).(*kmsg.DescribeConfigsResponse).Resources[0]
		m := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
		for _, c := range res.Configs {
			m[c.Name] = c
		}
		return res.ErrorCode, m
	}
	type op struct {
		op          kmsg.IncrementalAlterConfigOp
		name, value string
	}
	alter := func(name string, validateOnly bool, ops ...op) int16 {
		t.Helper()
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		req.ValidateOnly = validateOnly
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeBrokerLogger, name
		for _, o := range ops {
			c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			c.Op, c.Name = o.op, o.name
			if o.op != kmsg.IncrementalAlterConfigOpDelete {
				c.Value = kmsg.StringPtr(o.value)
			}
			r.Configs = append(r.Configs, c)
		}
		req.Resources = append(req.Resources, r)
		return send(req).(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode
	}
	id := b.nodeName
	root := func() string {
		t.Helper()
		code, m := describe(id)
		c, ok := m[rootLogger]
		if code != 0 || !ok || len(m) != 1 {
			t.Fatalf("describe broker logger %s: code %d, configs %v", id, code, m)
		}
		if c.Source != kmsg.ConfigSourceDynamicBrokerLoggerConfig || c.ReadOnly || c.Value == nil {
			t.Fatalf("root logger: %+v", c)
		}
		return *c.Value
	}

	if got := root(); got != "INFO" {
		t.Fatalf("root logger at %s, want INFO (the broker's level)", got)
	}
	if _, m := describe(id, "kafka.server"); len(m) != 0 {
		t.Fatalf("asked for another logger's level only: got %v", m)
	}
	if code, _ := describe("2"); code != kerr.InvalidRequest.Code {
		t.Fatalf("describe another broker's loggers: code %d, want INVALID_REQUEST", code)
	}
	if code, _ := describe(""); code != kerr.InvalidRequest.Code {
		t.Fatalf("describe loggers of no broker: code %d, want INVALID_REQUEST", code)
	}

	set := kmsg.IncrementalAlterConfigOpSet
	for _, c := range []struct {
		what string
		name string
		ops  []op
		want int16
	}{
		{"a level in lower case", id, []op{{set, rootLogger, "debug"}}, kerr.InvalidConfig.Code},
		{"no such level", id, []op{{set, rootLogger, "VERBOSE"}}, kerr.InvalidConfig.Code},
		{"no such logger", id, []op{{set, "kafka.server.KafkaApis", "DEBUG"}}, kerr.InvalidConfig.Code},
		{"a valid set beside a bad one", id, []op{{set, rootLogger, "DEBUG"}, {set, rootLogger + "x", "DEBUG"}}, kerr.InvalidConfig.Code},
		{"DELETE of root", id, []op{{kmsg.IncrementalAlterConfigOpDelete, rootLogger, ""}}, kerr.InvalidRequest.Code},
		{"APPEND", id, []op{{kmsg.IncrementalAlterConfigOpAppend, rootLogger, "DEBUG"}}, kerr.InvalidRequest.Code},
		{"SUBTRACT", id, []op{{kmsg.IncrementalAlterConfigOpSubtract, rootLogger, "DEBUG"}}, kerr.InvalidRequest.Code},
		{"another broker's id", "2", []op{{set, rootLogger, "DEBUG"}}, kerr.InvalidRequest.Code},
		{"no broker id", "", []op{{set, rootLogger, "DEBUG"}}, kerr.InvalidRequest.Code},
	} {
		if got := alter(c.name, false, c.ops...); got != c.want {
			t.Errorf("%s: code %d, want %d", c.what, got, c.want)
		}
	}
	if got := root(); got != "INFO" {
		t.Fatalf("after refused changes the root logger is at %s, want INFO", got)
	}
	if code := alter(id, true, op{set, rootLogger, "DEBUG"}); code != 0 || root() != "INFO" {
		t.Fatalf("validate_only: code %d, level %s (want 0, INFO)", code, root())
	}

	// Legacy AlterConfigs has no BROKER_LOGGER (Kafka: unknown resource type).
	legacy := kmsg.NewPtrAlterConfigsRequest()
	lr := kmsg.NewAlterConfigsRequestResource()
	lr.ResourceType, lr.ResourceName = kmsg.ConfigResourceTypeBrokerLogger, id
	lc := kmsg.NewAlterConfigsRequestResourceConfig()
	lc.Name, lc.Value = rootLogger, kmsg.StringPtr("DEBUG")
	lr.Configs = append(lr.Configs, lc)
	legacy.Resources = append(legacy.Resources, lr)
	if code := send(legacy).(*kmsg.AlterConfigsResponse).Resources[0].ErrorCode; code != kerr.InvalidRequest.Code {
		t.Fatalf("legacy AlterConfigs of a broker logger: code %d, want INVALID_REQUEST", code)
	}

	if strings.Contains(out.String(), "level=DEBUG") {
		t.Fatal("debug lines written at INFO")
	}
	if code := alter(id, false, op{set, rootLogger, "DEBUG"}); code != 0 {
		t.Fatalf("set root to DEBUG: code %d", code)
	}
	if got := root(); got != "DEBUG" || level.Level() != slog.LevelDebug {
		t.Fatalf("root logger at %s (handler level %v), want DEBUG", got, level.Level())
	}
	// A new connection: the broker logs its accept at debug.
	cl2 := newClient(t, b)
	if err := cl2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "level=DEBUG") {
		t.Fatalf("no debug line after the root logger was set to DEBUG:\n%s", out.String())
	}
	for _, c := range []struct{ set, want string }{{"TRACE", "TRACE"}, {"WARN", "WARN"}, {"FATAL", "FATAL"}, {"ERROR", "ERROR"}, {"INFO", "INFO"}} {
		if code := alter(id, false, op{set, rootLogger, c.set}); code != 0 || root() != c.want {
			t.Fatalf("set root to %s: code %d, level %s", c.set, code, root())
		}
	}
}

// TestBrokerLoggersFixedLevel: a broker started without a settable level
// shows the finest level its logger takes and refuses a change.
func TestBrokerLoggersFixedLevel(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logLines{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	cl := newClient(t, b)
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeBrokerLogger, b.nodeName
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if res := resp.Resources[0]; res.ErrorCode != 0 || len(res.Configs) != 1 || *res.Configs[0].Value != "WARN" {
		t.Fatalf("describe: %+v, want root at WARN", res)
	}
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ar := kmsg.NewIncrementalAlterConfigsRequestResource()
	ar.ResourceType, ar.ResourceName = kmsg.ConfigResourceTypeBrokerLogger, b.nodeName
	ac := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	ac.Name, ac.Value = rootLogger, kmsg.StringPtr("DEBUG")
	ar.Configs = append(ar.Configs, ac)
	alter.Resources = append(alter.Resources, ar)
	aresp, err := alter.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := aresp.Resources[0].ErrorCode; code != kerr.InvalidConfig.Code {
		t.Fatalf("alter a fixed level: code %d, want INVALID_CONFIG", code)
	}
}

// TestListConfigResources: v1 lists groups with configs, broker loggers,
// brokers and topics in Kafka's order (nothing for client metrics), only
// the types asked for, UNSUPPORTED_VERSION for a type it does not know; v0
// (ListClientMetricsResources) lists client metrics only: none.
func TestListConfigResources(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "lcr-b", 1, nil)
	createTopic(t, b, "lcr-a", 1, nil)
	cl := newClient(t, b)
	ctx := testCtx(t)
	// Group g1 gets a config; g2 gets one that is then removed.
	for _, g := range []struct {
		group string
		op    kmsg.IncrementalAlterConfigOp
	}{{"g1", kmsg.IncrementalAlterConfigOpSet}, {"g2", kmsg.IncrementalAlterConfigOpSet}, {"g2", kmsg.IncrementalAlterConfigOpDelete}} {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, g.group
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op = "consumer.session.timeout.ms", g.op
		if g.op == kmsg.IncrementalAlterConfigOpSet {
			c.Value = kmsg.StringPtr("50000")
		}
		r.Configs = append(r.Configs, c)
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("group config of %s: %v %+v", g.group, err, resp)
		}
	}
	list := func(version int16, types ...kmsg.ConfigResourceType) (int16, []string) {
		t.Helper()
		req := kmsg.NewPtrListConfigResourcesRequest()
		req.Version = version
		for _, typ := range types {
			req.ResourceTypes = append(req.ResourceTypes, int8(typ))
		}
		// A raw connection: the client would send its own version.
		nc, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		r := rawRequest(t, nc, req, 1).(*kmsg.ListConfigResourcesResponse)
		var out []string
		for _, c := range r.ConfigResources {
			if c.Type == int8(kmsg.ConfigResourceTypeTopic) && strings.HasPrefix(c.Name, "__") {
				continue // internal topics, whether made yet or not
			}
			out = append(out, kmsg.ConfigResourceType(c.Type).String()+":"+c.Name)
		}
		return r.ErrorCode, out
	}
	id := b.nodeName
	for _, c := range []struct {
		what    string
		version int16
		types   []kmsg.ConfigResourceType
		code    int16
		want    string
	}{
		{"every type", 1, nil, 0, "GROUP_CONFIG:g1 BROKER_LOGGER:" + id + " BROKER:" + id + " TOPIC:lcr-a TOPIC:lcr-b"},
		{"topics", 1, []kmsg.ConfigResourceType{kmsg.ConfigResourceTypeTopic}, 0, "TOPIC:lcr-a TOPIC:lcr-b"},
		{"the order is Kafka's, not the request's", 1,
			[]kmsg.ConfigResourceType{kmsg.ConfigResourceTypeTopic, kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeGroupConfig, kmsg.ConfigResourceTypeTopic},
			0, "GROUP_CONFIG:g1 BROKER:" + id + " TOPIC:lcr-a TOPIC:lcr-b"},
		{"client metrics", 1, []kmsg.ConfigResourceType{kmsg.ConfigResourceTypeClientMetrics}, 0, ""},
		{"an unknown type beside known ones", 1, []kmsg.ConfigResourceType{kmsg.ConfigResourceTypeTopic, 64}, kerr.UnsupportedVersion.Code, ""},
		{"v0: client metrics only", 0, nil, 0, ""},
	} {
		code, got := list(c.version, c.types...)
		if code != c.code || strings.Join(got, " ") != c.want {
			t.Errorf("%s: code %d, %q; want code %d, %q", c.what, code, strings.Join(got, " "), c.code, c.want)
		}
	}

	// What the client's Admin would then do: describe each resource listed.
	_, all := list(1)
	for _, res := range all {
		typ, name, _ := strings.Cut(res, ":")
		rt, err := kmsg.ParseConfigResourceType(typ)
		if err != nil {
			t.Fatal(err)
		}
		req := kmsg.NewPtrDescribeConfigsRequest()
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = rt, name
		r.ConfigNames = []string{} // empty, not null: every config, as null (Kafka's ConfigHelper)
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.Resources[0].ErrorCode != 0 || len(resp.Resources[0].Configs) == 0 {
			t.Errorf("describe %s listed by ListConfigResources: %v %+v", res, err, resp)
		}
	}
}
