package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRemoteTimestampCompressedBatch: ListOffsets by timestamp answered
// from the bucket finds the first record at or after the time inside an lz4
// batch, as the local path (broker/timestamps.go) and Kafka do; it answered
// the batch's base offset and max timestamp, so the same question got
// another answer once the segment was tiered (a replay review: 388 of 400
// lookups wrong on an lz4 topic).
func TestRemoteTimestampCompressedBatch(t *testing.T) {
	b, _, _ := startFolderTieredBroker(t)
	const base = int64(1451606400000)
	for _, topic := range []string{"local", "tiered"} {
		cfg := map[string]*string{"segment.bytes": ptr("4096"), "retention.ms": ptr("-1")}
		if topic == "tiered" {
			cfg["remote.storage.enable"], cfg["local.retention.bytes"] = ptr("true"), ptr("0")
		}
		createTopic(t, b, topic, 1, cfg)
		cl := newClient(t, b, kgo.ProducerLinger(50*time.Millisecond), kgo.ProducerBatchMaxBytes(8<<10), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
		recs := make([]*kgo.Record, 3000)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("record %d of a compressible history, record %d", i, i)), Timestamp: time.UnixMilli(base + int64(i)*1000)}
		}
		produceAll(t, cl, recs)
	}
	waitTiered(t, "old segments only in the bucket", func() bool { return listOffset(t, b, "tiered", -4) > 2000 })
	for _, k := range []int64{10, 777, 1500} {
		ts := base + k*1000
		l, r := listOffset(t, b, "local", ts), listOffset(t, b, "tiered", ts)
		t.Logf("record %d: local %d tiered %d (local start of tiered %d)", k, l, r, listOffset(t, b, "tiered", -4))
		if l != k || r != k {
			t.Errorf("ListOffsets(ts of record %d): local topic %d, tiered topic %d; want %d for both", k, l, r, k)
		}
	}
}
