package broker

import (
	"net"
	"sort"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestEveryAdvertisedVersion sends a small, valid request at every version
// of every advertised API and checks that the reply decodes at that
// version (clients pin old versions: kcat Produce v7, kafka-go ApiVersions
// v0, kafkajs Fetch v11, …).
func TestEveryAdvertisedVersion(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "versions", 1, nil)
	produceAll(t, newClient(t, b), makeRecords("versions", 10, "v"))
	topic := "versions"
	var id [16]byte
	if mt, ok := b.meta.State().Topic(topic); ok {
		id = mt.ID
	}
	build := func(key int16) kmsg.Request {
		switch key {
		case 0:
			r := kmsg.NewPtrProduceRequest()
			r.Acks, r.TimeoutMillis = 1, 5000
			t := kmsg.NewProduceRequestTopic()
			t.Topic, t.TopicID = topic, id
			p := kmsg.NewProduceRequestTopicPartition()
			p.Records = buildBatch(-1, -1, -1, 1, 5)
			t.Partitions = append(t.Partitions, p)
			r.Topics = append(r.Topics, t)
			return r
		case 1:
			r := kmsg.NewPtrFetchRequest()
			r.MaxBytes = 1 << 20
			t := kmsg.NewFetchRequestTopic()
			t.Topic, t.TopicID = topic, id
			p := kmsg.NewFetchRequestTopicPartition()
			p.PartitionMaxBytes = 1 << 20
			t.Partitions = append(t.Partitions, p)
			r.Topics = append(r.Topics, t)
			return r
		case 2:
			r := kmsg.NewPtrListOffsetsRequest()
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = topic
			p := kmsg.NewListOffsetsRequestTopicPartition()
			p.Timestamp = -1
			t.Partitions = append(t.Partitions, p)
			r.Topics = append(r.Topics, t)
			return r
		case 3:
			r := kmsg.NewPtrMetadataRequest()
			t := kmsg.NewMetadataRequestTopic()
			t.Topic = kmsg.StringPtr(topic)
			r.Topics = append(r.Topics, t)
			return r
		case 19:
			r := kmsg.NewPtrCreateTopicsRequest()
			t := kmsg.NewCreateTopicsRequestTopic()
			t.Topic, t.NumPartitions, t.ReplicationFactor = "x", 1, 1
			r.Topics = append(r.Topics, t)
			r.ValidateOnly = true
			return r
		case 20:
			r := kmsg.NewPtrDeleteTopicsRequest()
			r.TopicNames = []string{"no-such-topic"}
			t := kmsg.NewDeleteTopicsRequestTopic()
			t.Topic = kmsg.StringPtr("no-such-topic")
			r.Topics = append(r.Topics, t)
			return r
		case 21:
			r := kmsg.NewPtrDeleteRecordsRequest()
			t := kmsg.NewDeleteRecordsRequestTopic()
			t.Topic = topic
			p := kmsg.NewDeleteRecordsRequestTopicPartition()
			p.Offset = 0
			t.Partitions = append(t.Partitions, p)
			r.Topics = append(r.Topics, t)
			return r
		case 23:
			r := kmsg.NewPtrOffsetForLeaderEpochRequest()
			t := kmsg.NewOffsetForLeaderEpochRequestTopic()
			t.Topic = topic
			t.Partitions = append(t.Partitions, kmsg.NewOffsetForLeaderEpochRequestTopicPartition())
			r.Topics = append(r.Topics, t)
			return r
		case 32:
			r := kmsg.NewPtrDescribeConfigsRequest()
			res := kmsg.NewDescribeConfigsRequestResource()
			res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, topic
			r.Resources = append(r.Resources, res)
			return r
		case 33:
			r := kmsg.NewPtrAlterConfigsRequest()
			res := kmsg.NewAlterConfigsRequestResource()
			res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, topic
			r.Resources = append(r.Resources, res)
			r.ValidateOnly = true
			return r
		case 37:
			r := kmsg.NewPtrCreatePartitionsRequest()
			t := kmsg.NewCreatePartitionsRequestTopic()
			t.Topic, t.Count = topic, 1
			r.Topics = append(r.Topics, t)
			r.ValidateOnly = true
			return r
		case 44:
			r := kmsg.NewPtrIncrementalAlterConfigsRequest()
			res := kmsg.NewIncrementalAlterConfigsRequestResource()
			res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, topic
			r.Resources = append(r.Resources, res)
			r.ValidateOnly = true
			return r
		case 60:
			r := kmsg.NewPtrDescribeClusterRequest()
			r.EndpointType = 1
			return r
		case 61:
			r := kmsg.NewPtrDescribeProducersRequest()
			t := kmsg.NewDescribeProducersRequestTopic()
			t.Topic, t.Partitions = topic, []int32{0}
			r.Topics = append(r.Topics, t)
			return r
		}
		return kmsg.RequestForKey(key)
	}
	// The APIs of this package's files (coordinators test their own).
	keys := []int{0, 1, 2, 3, 18, 19, 20, 21, 22, 23, 32, 33, 35, 37, 44, 60, 61}
	sort.Ints(keys)
	corr := int32(0)
	for _, k := range keys {
		e := apis[int16(k)]
		if e.handler == nil {
			continue
		}
		nc, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		for v := e.min; v <= e.max; v++ {
			req := build(e.key)
			req.SetVersion(v)
			corr++
			resp := rawRequest(t, nc, req, corr)
			if resp.GetVersion() != v {
				t.Fatalf("%s v%d: reply at v%d", kmsg.NameForKey(e.key), v, resp.GetVersion())
			}
		}
		nc.Close()
	}
}
