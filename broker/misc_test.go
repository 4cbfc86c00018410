package broker

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMiscAPIs: DeleteRecords, OffsetForLeaderEpoch, DescribeProducers,
// LogAppendTime and DescribeCluster through real clients.
func TestMiscAPIs(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "misc", 1, map[string]*string{"message.timestamp.type": ptr("LogAppendTime")})
	cl := newClient(t, b)
	ctx := testCtx(t)
	old := time.Now().Add(-24 * time.Hour)
	res := cl.ProduceSync(ctx, &kgo.Record{Topic: "misc", Value: []byte("a"), Timestamp: old})
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	produceAll(t, cl, makeRecords("misc", 99, "m"))
	got := consumeN(t, b, "misc", 100)
	if ts := got[0][0].Timestamp; ts.Before(time.Now().Add(-time.Hour)) {
		t.Fatalf("LogAppendTime topic kept the client's timestamp %v", ts)
	}

	adm := kadm.NewClient(cl)
	var os kadm.Offsets
	os.AddOffset("misc", 0, 40, -1)
	dr, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := dr.Lookup("misc", 0); r.Err != nil || r.LowWatermark != 40 {
		t.Fatalf("delete records: %+v", r)
	}
	start, err := adm.ListStartOffsets(ctx, "misc")
	if o, _ := start.Lookup("misc", 0); err != nil || o.Offset != 40 {
		t.Fatalf("start after delete: %+v %v", o, err)
	}

	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = "misc"
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.CurrentLeaderEpoch, rp.LeaderEpoch = -1, 0
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	oe, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if p := oe.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.EndOffset != 100 {
		t.Fatalf("offset for leader epoch: %+v", p)
	}

	dp, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"misc": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	p := dp["misc"].Partitions[0]
	if p.Err != nil || len(p.ActiveProducers) != 1 {
		t.Fatalf("describe producers: %+v", p)
	}
	for _, ap := range p.ActiveProducers {
		if ap.LastSequence < 0 {
			t.Fatalf("producer %+v", ap)
		}
	}

	dc, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, cl)
	if err != nil || dc.ErrorCode != 0 || len(dc.Brokers) != 1 || dc.ClusterID == "" {
		t.Fatalf("describe cluster: %+v %v", dc, err)
	}
}
