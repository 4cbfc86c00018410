package broker

import (
	"math/bits"
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

// TestAuthorizedOperations: with no authorizer, Metadata and DescribeCluster
// report every operation a topic and the cluster support when asked (as
// Kafka does; librdkafka's 0081 DescribeTopics/DescribeCluster check the
// counts), the "not requested" value otherwise; DescribeConfigs of the
// broker lists broker.rack (librdkafka's 0101 reads it).
func TestAuthorizedOperations(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.Rack = "rack-a" })
	createTopic(t, b, "ops", 1, nil)
	cl := newClient(t, b)
	ctx := testCtx(t)
	for _, include := range []bool{false, true} {
		md := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr("ops")
		md.Topics = append(md.Topics, mt)
		md.IncludeTopicAuthorizedOperations, md.IncludeClusterAuthorizedOperations = include, include
		mr, err := md.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		dc := kmsg.NewPtrDescribeClusterRequest()
		dc.IncludeClusterAuthorizedOperations = include
		dr, err := dc.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		wantTopic, wantCluster := int32(authorizedOpsUnknown), int32(authorizedOpsUnknown)
		if include {
			wantTopic, wantCluster = topicOperations, clusterOperations
		}
		if got := mr.Topics[0].AuthorizedOperations; got != wantTopic {
			t.Errorf("include=%v: topic operations %b, want %b", include, got, wantTopic)
		}
		// Metadata carries the cluster's operations in v8-v10 only (kgo
		// sends its newest version).
		if (mr.Version <= 10 && mr.AuthorizedOperations != wantCluster) || dr.ClusterAuthorizedOperations != wantCluster {
			t.Errorf("include=%v: cluster operations %b (Metadata), %b (DescribeCluster), want %b", include, mr.AuthorizedOperations, dr.ClusterAuthorizedOperations, wantCluster)
		}
	}
	// Metadata v10 (the last with the cluster's operations), raw.
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 10
	md.IncludeClusterAuthorizedOperations = true
	if mr := rawRequest(t, dial(t, b), md, 1).(*kmsg.MetadataResponse); mr.AuthorizedOperations != clusterOperations {
		t.Errorf("Metadata v10: cluster operations %b, want %b", mr.AuthorizedOperations, int32(clusterOperations))
	}
	if n := bits.OnesCount32(topicOperations); n != 8 {
		t.Errorf("%d topic operations, Kafka has 8", n)
	}
	if n := bits.OnesCount32(clusterOperations); n != 7 {
		t.Errorf("%d cluster operations, Kafka has 7", n)
	}
	rc, err := kadm.NewClient(cl).DescribeBrokerConfigs(ctx, b.cfg.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	rack := ""
	for _, c := range rc[0].Configs {
		if c.Key == "broker.rack" {
			rack = c.MaybeValue()
		}
	}
	if rack != "rack-a" {
		t.Errorf("DescribeConfigs(broker) broker.rack = %q, want rack-a", rack)
	}
}
