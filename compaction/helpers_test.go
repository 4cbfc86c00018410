package compaction

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/vfs"
)

var quiet = slog.New(slog.DiscardHandler)

// One zstd encoder and decoder for the test helpers (both are safe for
// concurrent EncodeAll/DecodeAll).
var (
	zstdEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	zstdDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
)

// clock is a settable test clock.
type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time      { return time.UnixMilli(c.ms.Load()) }
func (c *clock) add(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// testCodec is one compression setting of the tests: a Kafka codec, and for
// snappy the framing (raw blocks as franz-go sends whole batches, or xerial
// as the Java producer does).
type testCodec struct {
	name   string
	codec  int16
	xerial bool
}

var testCodecs = []testCodec{
	{"none", 0, false}, {"gzip", 1, false}, {"snappy", 2, false}, {"snappy-xerial", 2, true}, {"lz4", 3, false}, {"zstd", 4, false},
}

// compressForTest compresses with the libraries directly (not the package's
// codec code), as a producer would.
func compressForTest(t testing.TB, tc testCodec, src []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch tc.codec {
	case 0:
		return src
	case 1:
		w := gzip.NewWriter(&buf)
		w.Write(src)
		w.Close()
	case 2:
		if !tc.xerial {
			return s2.EncodeSnappy(nil, src)
		}
		buf.Write([]byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1})
		for len(src) > 0 {
			n := min(len(src), 1000)
			blk := s2.EncodeSnappy(nil, src[:n])
			binary.Write(&buf, binary.BigEndian, uint32(len(blk)))
			buf.Write(blk)
			src = src[n:]
		}
	case 3:
		// 64 KiB blocks, as the Java client and librdkafka write: the
		// library's default of 4 MiB makes every reader allocate a 4 MiB
		// block, which the race detector makes very slow (its sync.Pool
		// drops items). TestCodecsRoundTrip reads a 4 MiB-block frame too.
		w := lz4.NewWriter(&buf)
		if err := w.Apply(lz4.BlockSizeOption(lz4.Block64Kb)); err != nil {
			t.Fatal(err)
		}
		w.Write(src)
		w.Close()
	case 4:
		return zstdEnc.EncodeAll(src, nil)
	}
	return buf.Bytes()
}

func decompressForTest(t testing.TB, codec int16, src []byte) []byte {
	t.Helper()
	var r io.Reader
	switch codec {
	case 0:
		return src
	case 1:
		gr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			t.Fatal(err)
		}
		r = gr
	case 2:
		if bytes.HasPrefix(src, []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}) {
			var out []byte
			for p := src[16:]; len(p) > 0; {
				n := binary.BigEndian.Uint32(p)
				blk, err := s2.Decode(nil, p[4:4+n])
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, blk...)
				p = p[4+n:]
			}
			return out
		}
		out, err := s2.Decode(nil, src)
		if err != nil {
			t.Fatal(err)
		}
		return out
	case 3:
		r = lz4.NewReader(bytes.NewReader(src))
	case 4:
		out, err := zstdDec.DecodeAll(src, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kv is one record to produce; a nil value is a tombstone.
type kv struct {
	key, value []byte
}

// batchOpts are the producer fields of a test batch.
type batchOpts struct {
	producerID    int64
	transactional bool
	control       bool
}

// makeBatch builds a v2 batch with kmsg (offsets from 0, as a producer sends
// it), compressed with tc, timestamps ts, ts+1, ....
func makeBatch(t testing.TB, tc testCodec, ts int64, o batchOpts, recs ...kv) []byte {
	t.Helper()
	var raw []byte
	for i, r := range recs {
		rec := kmsg.Record{TimestampDelta64: int64(i), OffsetDelta: int32(i), Key: r.key, Value: r.value}
		if i%3 == 1 {
			rec.Headers = []kmsg.Header{{Key: "h", Value: []byte{byte(i)}}}
		}
		body := rec.AppendTo(nil)
		_, n := binary.Varint(body)
		rec.Length = int32(len(body) - n)
		raw = rec.AppendTo(raw)
	}
	attrs := tc.codec
	if o.transactional {
		attrs |= attrTransactional
	}
	if o.control {
		attrs |= attrControl
	}
	pid := int64(-1)
	if o.producerID != 0 {
		pid = o.producerID
	}
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: attrs, LastOffsetDelta: int32(len(recs) - 1),
		FirstTimestamp: ts, MaxTimestamp: ts + int64(len(recs)) - 1, ProducerID: pid, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(len(recs)), Records: compressForTest(t, tc, raw),
	}
	if pid >= 0 {
		b.ProducerEpoch = 0
		b.FirstSequence = 0
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

// controlBatch is a transaction marker of producer pid.
func controlBatch(t testing.TB, ts int64, pid int64, commit bool) []byte {
	key := []byte{0, 0, 0, controlAbort}
	if commit {
		key[3] = controlCommit
	}
	return makeBatch(t, testCodecs[0], ts, batchOpts{producerID: pid, transactional: true, control: true}, kv{key, []byte{0, 0, 0, 0, 0, 0}})
}

// seen is one record read back from the log.
type seen struct {
	offset     int64
	key, value []byte
	control    bool
	ts         int64
}

// readView reads the whole log from its start and decodes it with kmsg and
// the test's own decompression.
func readView(t testing.TB, l *hotlog.Log) []seen {
	t.Helper()
	return readViewFrom(t, l, l.LogStartOffset())
}

// readViewFrom is readView from offset off.
func readViewFrom(t testing.TB, l *hotlog.Log, off int64) []seen {
	t.Helper()
	var out []seen
	for off < l.LogEndOffset() {
		b, err := l.ReadBytes(off, 1<<20, l.LogEndOffset())
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		if len(b) == 0 {
			break
		}
		if _, err := hotlog.ValidateReplicatedBatches(b); err != nil {
			t.Fatalf("log holds invalid batches: %v", err)
		}
		for len(b) > 0 {
			var rb kmsg.RecordBatch
			if err := rb.ReadFrom(b); err != nil {
				t.Fatal(err)
			}
			size := int(rb.Length) + 12
			raw := decompressForTest(t, rb.Attributes&7, rb.Records)
			for i := int32(0); i < rb.NumRecords; i++ {
				l, n := binary.Varint(raw)
				var rec kmsg.Record
				if err := rec.ReadFrom(raw[:n+int(l)]); err != nil {
					t.Fatalf("record: %v", err)
				}
				raw = raw[n+int(l):]
				out = append(out, seen{offset: rb.FirstOffset + int64(rec.OffsetDelta), key: rec.Key, value: rec.Value,
					control: rb.Attributes&attrControl != 0, ts: rb.FirstTimestamp + rec.TimestampDelta64})
			}
			if len(raw) != 0 {
				t.Fatalf("batch at %d: %d bytes after its records", rb.FirstOffset, len(raw))
			}
			off = rb.FirstOffset + int64(rb.LastOffsetDelta) + 1
			b = b[size:]
		}
	}
	return out
}

// latest is the latest record of every key in view order (tombstones too).
func latest(view []seen) map[string]seen {
	m := map[string]seen{}
	for _, r := range view {
		if !r.control && r.key != nil {
			m[string(r.key)] = r
		}
	}
	return m
}

// checkCompacted checks that view is exactly the latest record of every key
// (dropping tombstones if dropTombstones), in offset order.
func checkCompacted(t testing.TB, view []seen, want map[string]seen, dropTombstones bool) {
	t.Helper()
	got := map[string]bool{}
	prev := int64(-1)
	n := 0
	for _, r := range view {
		if r.offset <= prev {
			t.Fatalf("offset %d after %d", r.offset, prev)
		}
		prev = r.offset
		if r.control {
			continue
		}
		w, ok := want[string(r.key)]
		if !ok {
			t.Fatalf("key %q at %d should not be there", r.key, r.offset)
		}
		if got[string(r.key)] {
			t.Fatalf("key %q twice (again at %d)", r.key, r.offset)
		}
		got[string(r.key)] = true
		if w.offset != r.offset || !bytes.Equal(w.value, r.value) || (w.value == nil) != (r.value == nil) || w.ts != r.ts {
			t.Fatalf("key %q: got offset %d value %q ts %d, want offset %d value %q ts %d", r.key, r.offset, r.value, r.ts, w.offset, w.value, w.ts)
		}
		if dropTombstones && r.value == nil {
			t.Fatalf("tombstone of %q at %d survived its horizon", r.key, r.offset)
		}
		n++
	}
	for k, w := range want {
		if !got[k] && !(dropTombstones && w.value == nil) {
			t.Fatalf("key %q (offset %d) lost", k, w.offset)
		}
	}
}

func openLog(t testing.TB, fs vfs.FS, segBytes int64, clk *clock) *hotlog.Log {
	t.Helper()
	l, err := hotlog.Open(hotlog.Options{FS: fs, Dir: "/p", Config: hotlog.Config{SegmentBytes: segBytes, IndexIntervalBytes: 512, Flush: hotlog.FlushOS}, Now: clk.now, Logger: quiet})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

// appendTo returns a function that appends a batch to l and fails the test
// on an error.
func appendTo(t testing.TB, l *hotlog.Log) func([]byte) hotlog.AppendResult {
	return func(b []byte) hotlog.AppendResult {
		t.Helper()
		res, err := l.Append(b, hotlog.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
}

func keyOf(i int) []byte { return []byte(fmt.Sprintf("key-%05d", i)) }

func fixCRC(b []byte) {
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
}
