package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDeleteRecordsReachesFollowers: DeleteRecords on the leader raises
// the followers' log start too (from the log_start_offset of their fetch
// responses, as Kafka's fetcher does), so that when the leader dies the
// deleted records do not come back from the new one.
func TestDeleteRecordsReachesFollowers(t *testing.T) {
	c := StartCluster(t, 3)
	cl := c.Client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite())
	adm := kadm.NewClient(cl)
	const topic = "deleted-before"
	createClusterTopic(t, adm, topic, 1, 3, map[string]*string{"segment.bytes": kadm.StringPtr("1024")})
	c.WaitFullISR(t, adm, topic, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	produce := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			r := &kgo.Record{Topic: topic, Value: []byte("record-" + strconv.Itoa(i) + "-padding-padding-padding")}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	produce(0, 100)
	del, err := adm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {At: 50}}})
	if err != nil || del.Error() != nil {
		t.Fatalf("DeleteRecords: %v %v", err, del.Error())
	}
	// acks=all: acknowledged once every ISR follower fetched past it, so
	// each has processed a response sent after the delete.
	produce(100, 1)
	leader := c.WaitAgreedLeader(t, topic, 30*time.Second)
	t.Logf("killing leader %d", leader)
	c.Broker(leader).Kill()
	waitFor(t, 60*time.Second, "a new leader", func() bool {
		ps, err := c.Partitions(ctx, adm, topic)
		return err == nil && ps[0].Leader >= 0 && ps[0].Leader != leader
	})
	var start int64 = -1
	waitFor(t, 30*time.Second, "the log start from the new leader", func() bool {
		so, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			return false
		}
		o, ok := so.Lookup(topic, 0)
		if !ok || o.Err != nil {
			return false
		}
		start = o.Offset
		return true
	})
	if start != 50 {
		t.Fatalf("log start on the new leader %d, want 50 (records deleted on the old leader came back)", start)
	}
}
