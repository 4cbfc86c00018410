package broker

import (
	"bytes"
	"fmt"
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// limitFetcher sends raw Fetch v12 requests for one topic's partitions.
type limitFetcher struct {
	t     *testing.T
	nc    net.Conn
	corr  int32
	topic string
	hw    int64 // every partition's expected high watermark
}

// fetch sends one fetch (offsets: partition -> fetch offset, in partition
// order) and returns the response.
func (f *limitFetcher) fetch(id, epoch, maxBytes, partMax int32, offsets map[int32]int64) *kmsg.FetchResponse {
	f.t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.MaxBytes, req.MinBytes, req.MaxWaitMillis = maxBytes, 0, 0
	req.SessionID, req.SessionEpoch = id, epoch
	if len(offsets) > 0 {
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = f.topic
		for p := int32(0); p < 16; p++ {
			off, ok := offsets[p]
			if !ok {
				continue
			}
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = p, off, partMax
			ft.Partitions = append(ft.Partitions, fp)
		}
		req.Topics = append(req.Topics, ft)
	}
	f.corr++
	resp := rawRequest(f.t, f.nc, req, f.corr).(*kmsg.FetchResponse)
	if resp.ErrorCode != 0 {
		f.t.Fatalf("fetch error %d", resp.ErrorCode)
	}
	return resp
}

// batches returns, per partition in the response, the base offsets of its
// record batches (nil for none), checking that no partition has an error
// and each has its high watermark.
func (f *limitFetcher) batches(resp *kmsg.FetchResponse) map[int32][]int64 {
	f.t.Helper()
	out := map[int32][]int64{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 || rp.HighWatermark != f.hw {
				f.t.Fatalf("partition %d: error %d, high watermark %d", rp.Partition, rp.ErrorCode, rp.HighWatermark)
			}
			var offs []int64
			for buf := rp.RecordBatches; len(buf) > 0; {
				var rb kmsg.RecordBatch
				if err := rb.ReadFrom(buf); err != nil {
					f.t.Fatalf("partition %d: %v", rp.Partition, err)
				}
				offs = append(offs, rb.FirstOffset)
				buf = buf[12+int(rb.Length):]
			}
			out[rp.Partition] = offs
		}
	}
	return out
}

func (f *limitFetcher) check(name string, resp *kmsg.FetchResponse, want map[int32][]int64) {
	f.t.Helper()
	got := f.batches(resp)
	if len(got) != len(want) {
		f.t.Fatalf("%s: partitions %v, want %v", name, got, want)
	}
	for p, w := range want {
		if fmt.Sprint(got[p]) != fmt.Sprint(w) {
			f.t.Fatalf("%s: partition %d batches at %v, want %v (all: %v)", name, p, got[p], w, got)
		}
	}
}

// produceBig produces perPart batches of one 20000-byte record to each
// partition, round robin, and returns them by partition.
func produceBig(t *testing.T, b *Broker, topic string, parts int32, perPart int) map[int32][]*kgo.Record {
	prod := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	want := map[int32][]*kgo.Record{}
	for i := 0; i < perPart; i++ {
		for p := int32(0); p < parts; p++ {
			// One record per ProduceSync: one batch each, larger
			// than the limits the tests ask for.
			r := &kgo.Record{Topic: topic, Partition: p, Value: bytes.Repeat([]byte{byte('a' + p)}, 20000), Key: []byte(fmt.Sprint(i))}
			want[p] = append(want[p], produceAll(t, prod, []*kgo.Record{r})[p]...)
		}
	}
	return want
}

// TestFetchSizeLimits checks KIP-74's limits: only the first partition with
// data may exceed max_bytes / partition_max_bytes, by its first batch; later
// partitions whose first batch does not fit return nothing (no error, high
// watermark set). A fetch session rotates the partitions that returned
// records to the end, and a kgo consumer with small limits reads all.
func TestFetchSizeLimits(t *testing.T) {
	b := startBroker(t, "")
	const topic, parts, perPart = "kip74", 3, 2
	createTopic(t, b, topic, parts, nil)
	want := produceBig(t, b, topic, parts, perPart)
	f := &limitFetcher{t: t, nc: dial(t, b), topic: topic, hw: perPart}
	all := map[int32]int64{0: 0, 1: 0, 2: 0}
	first := map[int32][]int64{0: {0}, 1: nil, 2: nil}
	// Every batch exceeds both limits.
	f.check("both limits", f.fetch(0, -1, 10000, 10000, all), first)
	// Only partition_max_bytes is small: the total would fit them all.
	f.check("partition limit", f.fetch(0, -1, 1<<20, 10000, all), first)
	// Only max_bytes is small: one batch fits, then nothing more.
	f.check("total limit", f.fetch(0, -1, 30000, 1<<20, all), first)
	// The first partition with data gets its batch.
	f.check("from offset 1", f.fetch(0, -1, 10000, 10000, map[int32]int64{0: 2, 1: 1, 2: 0}), map[int32][]int64{0: nil, 1: {1}, 2: nil})

	// A session: the partition that returned records moves to the end.
	full := f.fetch(0, 0, 10000, 10000, all)
	f.check("session full", full, first)
	id := full.SessionID
	f.check("session 1", f.fetch(id, 1, 10000, 10000, map[int32]int64{0: 1}), map[int32][]int64{1: {0}})
	f.check("session 2", f.fetch(id, 2, 10000, 10000, map[int32]int64{1: 1}), map[int32][]int64{2: {0}})
	f.check("session 3", f.fetch(id, 3, 10000, 10000, map[int32]int64{2: 1}), map[int32][]int64{0: {1}})

	// kgo with limits below every batch still reads every partition.
	got := consumeN(t, b, topic, parts*perPart, kgo.FetchMaxBytes(10000), kgo.FetchMaxPartitionBytes(10000))
	sameRecords(t, want, got)
}

// TestFetchSizeLimitsTiered: the same limits when the batches are read from
// the bucket (offsets below the local log start). A later partition whose
// first batch does not fit, or that finds the budget spent, is empty, not
// OFFSET_OUT_OF_RANGE.
func TestFetchSizeLimitsTiered(t *testing.T) {
	b, _, _ := startFolderTieredBroker(t)
	const topic, parts, perPart = "kip74tiered", 3, 3
	// Each 20 KB batch fills a 16 KiB segment: the first two seal and
	// leave the local log.
	createTopic(t, b, topic, parts, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1")})
	want := produceBig(t, b, topic, parts, perPart)
	waitTiered(t, "two batches of every partition only in the bucket", func() bool {
		for p := int32(0); p < parts; p++ {
			pt, err := b.store.partition(b.meta.State(), topic, p)
			if err != nil || pt.log.LogStartOffset() < 2 {
				return false
			}
		}
		return true
	})
	f := &limitFetcher{t: t, nc: dial(t, b), topic: topic, hw: perPart}
	all := map[int32]int64{0: 0, 1: 0, 2: 0}
	first := map[int32][]int64{0: {0}, 1: nil, 2: nil}
	f.check("both limits", f.fetch(0, -1, 10000, 10000, all), first)
	f.check("partition limit", f.fetch(0, -1, 1<<20, 10000, all), first)
	f.check("total limit", f.fetch(0, -1, 30000, 1<<20, all), first)
	// A remote first batch, then local ones that do not fit.
	f.check("remote then local", f.fetch(0, -1, 10000, 10000, map[int32]int64{0: 1, 1: 2, 2: 2}), map[int32][]int64{0: {1}, 1: nil, 2: nil})
	// A local first batch, then remote ones that do not fit.
	f.check("local then remote", f.fetch(0, -1, 10000, 10000, map[int32]int64{0: 2, 1: 0, 2: 1}), map[int32][]int64{0: {2}, 1: nil, 2: nil})
	got := consumeN(t, b, topic, parts*perPart, kgo.FetchMaxBytes(10000), kgo.FetchMaxPartitionBytes(10000))
	sameRecords(t, want, got)
}
