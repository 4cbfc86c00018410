package compaction

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func FuzzCheckKeys(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, headerSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := CheckKeys(b, 1<<16)
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrMissingKey) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("unexpected error class: %v", err)
		}
	})
}

// TestCheckRecords: a compressed batch passes only with exactly its
// header's count of well-formed records at offset deltas 0..n-1, in every
// codec; a header claiming records its payload does not hold (which a
// reader of the log would trust) is ErrCorrupt.
func TestCheckRecords(t *testing.T) {
	recs := []kv{{[]byte("a"), []byte("1")}, {nil, []byte("2")}, {[]byte("c"), nil}}
	for _, tc := range testCodecs {
		t.Run(tc.name, func(t *testing.T) {
			good := makeBatch(t, tc, 1000, batchOpts{}, recs...)
			if err := CheckRecords(good, 1<<20); err != nil {
				t.Fatalf("a good batch: %v", err)
			}
			if err := CheckKeys(good, 1<<20); !errors.Is(err, ErrMissingKey) {
				t.Fatalf("CheckKeys on a keyless record: %v", err)
			}
			// The same payload under a header claiming more records.
			for _, n := range []int32{4, 300_000} {
				bad := rewriteCounts(t, good, n-1, n)
				if err := CheckRecords(bad, 1<<20); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("header claiming %d records over 3: %v", n, err)
				}
			}
			// Fewer than the payload holds.
			if err := CheckRecords(rewriteCounts(t, good, 1, 2), 1<<20); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("header claiming 2 records over 3: %v", err)
			}
		})
	}
	// Offset deltas 0, 2, 4 under a header of 3 records, last delta 4:
	// not what a producer sends.
	var raw []byte
	for i := range 3 {
		rec := kmsg.Record{OffsetDelta: int32(2 * i), Key: []byte("k"), Value: []byte("v")}
		body := rec.AppendTo(nil)
		_, n := binary.Varint(body)
		rec.Length = int32(len(body) - n)
		raw = rec.AppendTo(raw)
	}
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: 1, LastOffsetDelta: 4, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: 3, Records: compressForTest(t, testCodecs[1], raw)}
	if err := CheckRecords(b.AppendTo(nil), 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("offset deltas 0, 2, 4: %v", err)
	}
	// An empty gzip stream claiming 300,000 records.
	b = kmsg.RecordBatch{Magic: 2, Attributes: 1, LastOffsetDelta: 299_999, NumRecords: 300_000, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		Records: compressForTest(t, testCodecs[1], nil)}
	if err := CheckRecords(b.AppendTo(nil), 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an empty payload claiming 300000 records: %v", err)
	}
}

// rewriteCounts sets a batch's last offset delta and record count (the
// CRC is not checked by CheckRecords: hotlog's validation does that).
func rewriteCounts(t *testing.T, batch []byte, lastDelta, n int32) []byte {
	t.Helper()
	out := bytes.Clone(batch)
	binary.BigEndian.PutUint32(out[23:], uint32(lastDelta))
	binary.BigEndian.PutUint32(out[57:], uint32(n))
	return out
}

func FuzzCheckRecords(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, headerSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := CheckRecords(b, 1<<16); err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("unexpected error class: %v", err)
		}
	})
}
