package broker

import (
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestControllerMutationQuota: controller_mutation_rate (KIP-599) on the
// client id "admin-tool": 0.1 partitions/s, so a bucket of 0.2 (2 windows
// of 1 s). A create of 3 partitions is admitted and takes the bucket to
// -2.8 (throttled ~28 s); while it refills, the next create and a delete
// get THROTTLING_QUOTA_EXCEEDED and change nothing; validate_only is free;
// an old CreateTopics (v5) is done and throttled; another client id is not
// limited.
func TestControllerMutationQuota(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.QuotaWindowNum, c.QuotaWindowSize = 2, time.Second })
	adm := kadm.NewClient(newClient(t, b))
	res, err := adm.AlterClientQuotas(testCtx(t), []kadm.AlterClientQuotaEntry{
		quotaEntry(nil, kmsg.StringPtr("admin-tool"), kadm.AlterClientQuotaOp{Key: "controller_mutation_rate", Value: 0.1}),
	})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("set quota: %v %+v", err, res)
	}
	var corr int32
	// Each request on a fresh connection (a throttled one is muted).
	send := func(client string, req kmsg.Request) kmsg.Response {
		t.Helper()
		nc, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		corr++
		resp, err := roundTripAs(nc, client, req, corr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	create := func(client string, version int16, name string, parts int32, validateOnly bool) (*kmsg.CreateTopicsResponse, int16) {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version, req.TimeoutMillis, req.ValidateOnly = version, 30000, validateOnly
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic, ct.NumPartitions, ct.ReplicationFactor = name, parts, 1
		req.Topics = append(req.Topics, ct)
		resp := send(client, req).(*kmsg.CreateTopicsResponse)
		return resp, resp.Topics[0].ErrorCode
	}
	exists := func(name string) bool { _, ok := b.meta.State().Topic(name); return ok }

	resp, code := create("admin-tool", 7, "m1", 3, false)
	if code != 0 || resp.ThrottleMillis < 20000 || resp.ThrottleMillis > 28000 {
		t.Fatalf("first create: code %d, throttle %d ms (want 0, about 28000)", code, resp.ThrottleMillis)
	}
	if resp, code = create("admin-tool", 7, "m2", 1, false); code != kerr.ThrottlingQuotaExceeded.Code || resp.ThrottleMillis <= 0 || exists("m2") {
		t.Fatalf("second create: code %d, throttle %d, exists %v", code, resp.ThrottleMillis, exists("m2"))
	}
	if _, code = create("admin-tool", 7, "m3", 50, true); code != 0 {
		t.Fatalf("validate_only create: code %d", code)
	}
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.Version, del.TimeoutMillis, del.TopicNames = 5, 30000, []string{"m1"}
	if dresp := send("admin-tool", del).(*kmsg.DeleteTopicsResponse); dresp.Topics[0].ErrorCode != kerr.ThrottlingQuotaExceeded.Code || !exists("m1") {
		t.Fatalf("delete while throttled: %+v", dresp.Topics)
	}
	// CreateTopics v5 knows no THROTTLING_QUOTA_EXCEEDED: done, throttled.
	if resp, code = create("admin-tool", 5, "m4", 1, false); code != 0 || resp.ThrottleMillis <= 0 || !exists("m4") {
		t.Fatalf("v5 create: code %d, throttle %d", code, resp.ThrottleMillis)
	}
	// Other clients are not limited.
	if resp, code = create("other", 7, "m5", 4, false); code != 0 || resp.ThrottleMillis != 0 {
		t.Fatalf("another client: code %d, throttle %d", code, resp.ThrottleMillis)
	}
}
