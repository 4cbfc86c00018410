package broker

import (
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
)

// storedCodecs returns the codec of every batch of partition 0 of topic
// from offset from, in log order, with the batches' total size.
func storedCodecs(t *testing.T, b *Broker, topic string, from int64) (codecs []int, size int) {
	t.Helper()
	p, err := b.store.partition(b.meta.State(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	data, err := p.log.ReadBytes(max(from, p.log.LogStartOffset()), 64<<20, p.log.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	for len(data) >= hotlog.BatchHeaderSize {
		h, err := hotlog.ParseBatchHeader(data)
		if err != nil || int64(len(data)) < h.Size() {
			t.Fatalf("stored batch: %v", err)
		}
		codecs = append(codecs, h.Compression())
		size += int(h.Size())
		data = data[h.Size():]
	}
	return codecs, size
}

// TestCompressionTypeRecompresses: a topic whose compression.type names a
// codec stores every produced batch in that codec, whatever the producer
// used (Kafka's LogValidator recompresses), at the topic's
// compression.<codec>.level; consumers read the same records; an
// idempotent producer's retry is still a duplicate; a batch whose CRC is
// wrong is CORRUPT_MESSAGE, not given a valid CRC by the rewrite; with
// compression.type producer (the default) batches stay as sent.
func TestCompressionTypeRecompresses(t *testing.T) {
	b := startBroker(t, "")
	codecs := []struct {
		name string
		opt  kgo.CompressionCodec
		num  int
	}{{"none", kgo.NoCompression(), 0}, {"gzip", kgo.GzipCompression(), 1}, {"snappy", kgo.SnappyCompression(), 2},
		{"lz4", kgo.Lz4Compression(), 3}, {"zstd", kgo.ZstdCompression(), 4}}
	for _, target := range []struct {
		typ string
		num int
	}{{"zstd", 4}, {"uncompressed", 0}, {"gzip", 1}, {"snappy", 2}, {"lz4", 3}, {"producer", -1}} {
		topic := "ct-" + target.typ
		createTopic(t, b, topic, 1, map[string]*string{"compression.type": ptr(target.typ)})
		var want []*kgo.Record
		for _, c := range codecs {
			cl := newClient(t, b, kgo.ProducerBatchCompression(c.opt), kgo.ProducerLinger(0))
			recs := makeRecords(topic, 50, c.name)
			from := int64(len(want))
			want = append(want, produceAll(t, cl, recs)[0]...)
			wantCodec := target.num
			if target.num < 0 {
				wantCodec = c.num
			}
			got, _ := storedCodecs(t, b, topic, from)
			for _, codec := range got {
				// As sent, under "producer": kgo sends a batch that its
				// codec would not shrink uncompressed.
				if codec != wantCodec && (target.num >= 0 || codec != 0) {
					t.Errorf("%s: the %s producer's batches stored with codecs %v, want %d", topic, c.name, got, wantCodec)
					break
				}
			}
			if len(got) == 0 {
				t.Fatalf("%s: nothing stored from %d", topic, from)
			}
		}
		sameRecords(t, map[int32][]*kgo.Record{0: want}, consumeN(t, b, topic, len(want)))
	}

	// Levels: gzip at 1 and at 9 on the same compressible records.
	sizes := map[string]int{}
	for _, level := range []string{"1", "9"} {
		topic := "ct-gzip-" + level
		createTopic(t, b, topic, 1, map[string]*string{"compression.type": ptr("gzip"), "compression.gzip.level": ptr(level)})
		// One uncompressed batch of the same records each time.
		if rp := produceRaw(t, dial(t, b), topic, levelBatch(), -1, 9, 1); rp.ErrorCode != 0 {
			t.Fatalf("%s: %v", topic, kerr.ErrorForCode(rp.ErrorCode))
		}
		_, sizes[level] = storedCodecs(t, b, topic, 0)
	}
	t.Logf("gzip level 1: %d bytes, level 9: %d bytes", sizes["1"], sizes["9"])
	if sizes["9"] >= sizes["1"] {
		t.Errorf("gzip level 9 stored %d bytes, level 1 %d: the level is not applied", sizes["9"], sizes["1"])
	}

	// Raw batches: a retry of an idempotent batch is answered with its
	// first offset; a broken CRC is refused.
	nc := dial(t, b)
	batch := buildBatch(7, 0, 0, 5, 100)
	for i := range 2 {
		rp := produceRaw(t, nc, "ct-zstd", batch, -1, 9, int32(10+i))
		if rp.ErrorCode != 0 || rp.BaseOffset != 250 {
			t.Fatalf("idempotent batch, try %d: %v at %d, want offset 250", i, kerr.ErrorForCode(rp.ErrorCode), rp.BaseOffset)
		}
	}
	bad := buildBatch(8, 0, 0, 5, 100)
	bad[len(bad)-1] ^= 1
	if rp := produceRaw(t, nc, "ct-zstd", bad, -1, 9, 20); rp.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("a batch with a broken CRC on a zstd topic: %v, want CORRUPT_MESSAGE", kerr.ErrorForCode(rp.ErrorCode))
	}
	if got, _ := storedCodecs(t, b, "ct-zstd", 250); len(got) != 1 || got[0] != 4 {
		t.Fatalf("ct-zstd holds batches from 250 with codecs %v, want the idempotent batch alone, in zstd", got)
	}
}

// levelBatch is an uncompressed batch of 300 records of JSON-like text,
// compressible, but not trivially.
func levelBatch() []byte {
	var recs []byte
	for i := range 300 {
		r := kmsg.NewRecord()
		r.OffsetDelta = int32(i)
		r.Value = fmt.Appendf(nil, `{"id":%d,"user":"user-%d","amount":%d.%02d,"tags":["t%d","t%d"]}`, i, i*7919%1000, i*31%977, i%100, i%13, i%17)
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = append(recs, r.AppendTo(nil)...)
	}
	now := time.Now().UnixMilli()
	rb := kmsg.NewRecordBatch()
	rb.Magic, rb.LastOffsetDelta, rb.NumRecords = 2, 299, 300
	rb.FirstTimestamp, rb.MaxTimestamp = now, now
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = -1, -1, -1
	rb.Records = recs
	raw := rb.AppendTo(nil)
	putU32(raw[8:], uint32(len(raw)-12))
	putU32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}
