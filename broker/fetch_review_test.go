package broker

import (
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch semantics checked against Kafka's KafkaApis.handleFetchRequest,
// ReplicaManager.fetchMessages/readFromLog, DelayedFetch and FetchSession
// (from a review of the Fetch path).

// reviewPart is one partition of a reviewFetch: partition, fetch offset,
// partition_max_bytes and current leader epoch (-1: none).
type reviewPart struct {
	p       int32
	off     int64
	partMax int32
	epoch   int32
}

// reviewFetch sends one Fetch v12 of topic's partitions and returns the
// answer and how long it took.
func reviewFetch(t *testing.T, nc net.Conn, corr *int32, topic string, id, sessEpoch, maxBytes, minBytes, maxWait int32, parts []reviewPart) (*kmsg.FetchResponse, time.Duration) {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.MaxBytes, req.MinBytes, req.MaxWaitMillis = maxBytes, minBytes, maxWait
	req.SessionID, req.SessionEpoch = id, sessEpoch
	if len(parts) > 0 {
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = topic
		for _, rp := range parts {
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = rp.p, rp.off, rp.partMax, rp.epoch
			ft.Partitions = append(ft.Partitions, fp)
		}
		req.Topics = append(req.Topics, ft)
	}
	*corr++
	start := time.Now()
	resp, err := roundTrip(nc, req, *corr, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*kmsg.FetchResponse), time.Since(start)
}

// A partition that fails at lookup (here UNKNOWN_LEADER_EPOCH: the client
// knows a newer epoch; the same path serves FENCED_LEADER_EPOCH and
// NOT_LEADER_OR_FOLLOWER) ends the long poll at once, as in Kafka's
// ReplicaManager.fetchMessages (errorReadingData), although the other
// partition has no data. A partition the metadata does not know does not:
// Kafka answers those (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID,
// TOPIC_AUTHORIZATION_FAILED) beside the read and waits for the others.
func TestFetchLongPollEndsOnLookupError(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "lp", 2, nil)
	nc := dial(t, b)
	var corr int32
	r, _ := reviewFetch(t, nc, &corr, "lp", 0, -1, 1<<20, 0, 0, []reviewPart{{0, 0, 1 << 20, -1}})
	if r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("probe: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	tp, _ := b.meta.State().Topic("lp")
	le := tp.Partitions[0].LeaderEpoch
	r, took := reviewFetch(t, nc, &corr, "lp", 0, -1, 1<<20, 1, 3000,
		[]reviewPart{{0, 0, 1 << 20, le + 1}, {1, 0, 1 << 20, -1}})
	if code := r.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownLeaderEpoch.Code {
		t.Fatalf("partition 0: %v, want UNKNOWN_LEADER_EPOCH", kerr.ErrorForCode(code))
	}
	if took > time.Second {
		t.Errorf("the UNKNOWN_LEADER_EPOCH answer waited %v (max_wait 3s); Kafka answers an error at once", took)
	}
	// An unknown partition waits for the known one, to max_wait.
	r, took = reviewFetch(t, nc, &corr, "lp", 0, -1, 1<<20, 1, 500,
		[]reviewPart{{7, 0, 1 << 20, -1}, {1, 0, 1 << 20, -1}})
	if code := r.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("partition 7: %v, want UNKNOWN_TOPIC_OR_PARTITION", kerr.ErrorForCode(code))
	}
	if took < 400*time.Millisecond {
		t.Errorf("an unknown partition ended the long poll after %v (max_wait 500ms); Kafka waits for the others", took)
	}
}
