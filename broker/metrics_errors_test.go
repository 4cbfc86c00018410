package broker

import (
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRequestErrorMetrics: the error codes of replies are counted by API
// and Kafka's error name, once per partition that has one (Kafka's
// ErrorsPerSec): a Produce to two partitions a topic does not have, a
// Fetch past the log end, a Metadata of an unknown topic.
func TestRequestErrorMetrics(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) { c.AutoCreateTopics = false })
	createTopic(t, b, "errs", 1, nil)
	cl := newClient(t, b)
	ctx := testCtx(t)
	tm, _ := b.meta.State().Topic("errs")

	produce := kmsg.NewPtrProduceRequest()
	produce.Acks = 1
	produce.TimeoutMillis = 5000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic, pt.TopicID = "errs", [16]byte(tm.ID) // the client sends its newest version
	for _, p := range []int32{5, 6} {
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Partition = p
		pt.Partitions = append(pt.Partitions, pp)
	}
	produce.Topics = append(produce.Topics, pt)
	if _, err := produce.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}

	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxWaitMillis = 10
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic, ft.TopicID = "errs", [16]byte(tm.ID)
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset = 1000
	fp.PartitionMaxBytes = 1 << 20
	fp.CurrentLeaderEpoch = -1
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	if _, err := fetch.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}

	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("no-such-topic")
	meta.Topics = append(meta.Topics, mt)
	if _, err := meta.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		api, err string
		want     float64
	}{
		{"Produce", "UNKNOWN_TOPIC_OR_PARTITION", 2},
		{"Fetch", "OFFSET_OUT_OF_RANGE", 1},
		{"Metadata", "UNKNOWN_TOPIC_OR_PARTITION", 1},
	} {
		if v := metricValue(t, b, "sediment_request_errors_total", "api", c.api, "error", c.err); v != c.want {
			t.Errorf("sediment_request_errors_total{api=%q,error=%q} = %v, want %v", c.api, c.err, v, c.want)
		}
	}
}

// TestWalkErrorCodes: every error code field of a reply is found, at any
// depth, under kmsg's names (ErrorCode, …ErrorCode, Error), and nothing
// else is read as one.
func TestWalkErrorCodes(t *testing.T) {
	resp := kmsg.NewPtrDescribeConfigsResponse()
	for _, code := range []int16{0, kerr.InvalidRequest.Code, kerr.TopicAuthorizationFailed.Code} {
		r := kmsg.NewDescribeConfigsResponseResource()
		r.ErrorCode = code
		r.ResourceType = 2 // an int8: not an error
		resp.Resources = append(resp.Resources, r)
	}
	share := kmsg.NewPtrShareAcknowledgeResponse()
	share.ErrorCode = kerr.GroupAuthorizationFailed.Code
	st := kmsg.NewShareAcknowledgeResponseTopic()
	sp := kmsg.NewShareAcknowledgeResponseTopicPartition()
	sp.ErrorCode = kerr.InvalidRecordState.Code
	st.Partitions = append(st.Partitions, sp)
	share.Topics = append(share.Topics, st)
	for _, c := range []struct {
		msg  kmsg.Response
		want []int16
	}{
		{resp, []int16{kerr.InvalidRequest.Code, kerr.TopicAuthorizationFailed.Code}},
		{share, []int16{kerr.GroupAuthorizationFailed.Code, kerr.InvalidRecordState.Code}},
		{kmsg.NewPtrApiVersionsResponse(), nil},
	} {
		var got []int16
		walkErrorCodes(reflect.ValueOf(c.msg), func(code int16) { got = append(got, code) })
		if !slices.Equal(got, c.want) {
			t.Errorf("%T: codes %v, want %v", c.msg, got, c.want)
		}
	}
	if n := errorName(kerr.NotLeaderForPartition.Code); n != "NOT_LEADER_FOR_PARTITION" {
		t.Errorf("errorName: %s", n)
	}
	if n := errorName(-1234); n != "UNKNOWN_CODE_-1234" {
		t.Errorf("errorName of an unknown code: %s", n)
	}
}
