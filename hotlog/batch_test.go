package hotlog

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestValidateBatches(t *testing.T) {
	b1 := simpleBatch(3, 10, 1000)
	b2 := makeBatch(2000, 0, testRecord{key: []byte("k"), value: []byte("v"), tsDelta: 5}, testRecord{value: nil, tsDelta: -1})
	hdrs, err := ValidateBatches(append(append([]byte(nil), b1...), b2...))
	if err != nil {
		t.Fatal(err)
	}
	if len(hdrs) != 2 || hdrs[0].NumRecords != 3 || hdrs[1].NumRecords != 2 || hdrs[1].MaxTimestamp != 2005 {
		t.Fatalf("headers %+v", hdrs)
	}

	mutate := func(b []byte, f func([]byte), crc bool) []byte {
		c := append([]byte(nil), b...)
		f(c)
		if crc {
			fixCRC(c)
		}
		return c
	}
	be := binary.BigEndian
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrInvalidRecord},
		{"short header", b1[:30], ErrCorruptBatch},
		{"truncated batch", b1[:len(b1)-1], ErrCorruptBatch},
		{"trailing garbage", append(append([]byte(nil), b1...), 1, 2, 3), ErrCorruptBatch},
		{"bad crc", mutate(b1, func(c []byte) { c[len(c)-1] ^= 1 }, false), ErrCorruptBatch},
		{"bad magic", mutate(b1, func(c []byte) { c[offMagic] = 1 }, false), ErrCorruptBatch},
		{"length below header", mutate(b1, func(c []byte) { be.PutUint32(c[offBatchLength:], 10) }, false), ErrCorruptBatch},
		{"huge length", mutate(b1, func(c []byte) { be.PutUint32(c[offBatchLength:], 1<<31-1) }, false), ErrCorruptBatch},
		{"negative length", mutate(b1, func(c []byte) { be.PutUint32(c[offBatchLength:], 0x80000000) }, false), ErrCorruptBatch},
		{"count lies", mutate(b1, func(c []byte) { be.PutUint32(c[offNumRecords:], 4) }, true), ErrInvalidRecord},
		{"count and delta lie together", mutate(b1, func(c []byte) {
			be.PutUint32(c[offNumRecords:], 4)
			be.PutUint32(c[offLastOffsetDelta:], 3)
		}, true), ErrInvalidRecord},
		{"zero records", mutate(b1, func(c []byte) {
			be.PutUint32(c[offNumRecords:], 0)
			be.PutUint32(c[offLastOffsetDelta:], 0xffffffff)
		}, true), ErrInvalidRecord},
		{"bad codec", mutate(b1, func(c []byte) { be.PutUint16(c[offAttributes:], 7) }, true), ErrCorruptBatch},
		{"record length lies", mutate(b1, func(c []byte) { c[BatchHeaderSize] = 0x7f }, true), ErrCorruptBatch},
		{"offset delta out of order", mutate(makeBatch(0, 0, testRecord{value: []byte("a")}, testRecord{value: []byte("b")}), func(c []byte) {
			// second record: len, attrs, tsDelta, offsetDelta
			first := int(c[BatchHeaderSize]) / 2
			c[BatchHeaderSize+1+first+3] = 4 // zigzag 2
		}, true), ErrInvalidRecord},
	}
	for _, tc := range cases {
		if _, err := ValidateBatches(tc.in); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	// A compressed batch is checked at the header level only.
	c := makeBatch(0, 4, testRecord{value: []byte("zstd-bytes")})
	if _, err := ValidateBatches(c); err != nil {
		t.Fatalf("compressed: %v", err)
	}
}

// TestKmsgAgrees checks our header parsing and CRC against franz-go's encoder.
func TestKmsgAgrees(t *testing.T) {
	rec := kmsg.NewRecord()
	rec.Value = []byte("hello")
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	var records []byte
	rb := kmsg.NewRecordBatch()
	rb.Magic = 2
	rb.LastOffsetDelta = 0
	rb.FirstTimestamp = 1234
	rb.MaxTimestamp = 1234
	rb.ProducerID = 7
	rb.ProducerEpoch = 1
	rb.FirstSequence = 9
	rb.NumRecords = 1
	recBytes := rec.AppendTo(nil)
	// kmsg.Record.AppendTo writes the length varint first.
	records = recBytes
	rb.Records = records
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[offBatchLength:], uint32(len(raw)-batchOverhead))
	fixCRC(raw)
	hdrs, err := ValidateBatches(raw)
	if err != nil {
		t.Fatal(err)
	}
	h := hdrs[0]
	if h.ProducerID != 7 || h.ProducerEpoch != 1 || h.BaseSequence != 9 || h.MaxTimestamp != 1234 {
		t.Fatalf("%+v", h)
	}
	var back kmsg.RecordBatch
	if err := back.ReadFrom(raw); err != nil {
		t.Fatal(err)
	}
	if back.CRC != int32(h.CRC) || back.Length != h.BatchLength {
		t.Fatalf("kmsg sees crc %x len %d, we %x %d", back.CRC, back.Length, h.CRC, h.BatchLength)
	}
}

func FuzzValidateBatches(f *testing.F) {
	f.Add(simpleBatch(2, 5, 1))
	f.Add(append(simpleBatch(1, 0, 1), makeBatch(3, 1, testRecord{value: []byte("x")})...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		hdrs, err := ValidateBatches(data)
		if err != nil {
			if !errors.Is(err, ErrCorruptBatch) && !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		var total int64
		for _, h := range hdrs {
			if h.NumRecords != h.LastOffsetDelta+1 || h.Magic != 2 {
				t.Fatalf("accepted inconsistent header %+v", h)
			}
			total += h.Size()
		}
		if total != int64(len(data)) {
			t.Fatalf("sizes %d != %d", total, len(data))
		}
	})
}

func TestCompactedBatches(t *testing.T) {
	compacted := makeCompacted([]int64{0, 2}, 2)
	empty := makeCompacted(nil, 5)
	for _, b := range [][]byte{compacted, empty} {
		if _, err := ValidateBatches(b); !errors.Is(err, ErrInvalidRecord) {
			t.Fatalf("producer path accepted a compacted batch: %v", err)
		}
		if _, err := ValidateReplicatedBatches(b); err != nil {
			t.Fatalf("replica path refused a compacted batch: %v", err)
		}
	}
	for _, bad := range [][]byte{makeCompacted([]int64{1, 1}, 2), makeCompacted([]int64{0, 3}, 2), makeCompacted([]int64{0, 1, 2}, 1)} {
		if _, err := ValidateReplicatedBatches(bad); !errors.Is(err, ErrInvalidRecord) {
			t.Fatalf("bad compacted batch accepted: %v", err)
		}
	}
}

// TestRecordVarint: the record reader's short paths decode as
// binary.Varint does, for every input of up to two bytes and for a
// three-byte one.
func TestRecordVarint(t *testing.T) {
	check := func(in []byte) {
		t.Helper()
		r := recordReader{b: in}
		got := r.varint()
		want, n := binary.Varint(in)
		if n <= 0 {
			if !r.err {
				t.Fatalf("% x: decoded %d, binary.Varint refuses it", in, got)
			}
			return
		}
		if r.err || got != want || len(r.b) != len(in)-n {
			t.Fatalf("% x: got %d (err %v, %d left), want %d (%d left)", in, got, r.err, len(r.b), want, len(in)-n)
		}
	}
	for x := 0; x < 1<<16; x++ {
		check([]byte{byte(x), byte(x >> 8)})
		check([]byte{byte(x), byte(x >> 8), 0x05})
		check([]byte{byte(x)})
	}
	check([]byte{0x80, 0x80, 0x01})
	check(nil)
}
