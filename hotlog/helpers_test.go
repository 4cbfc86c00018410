package hotlog

import (
	"encoding/binary"
	"hash/crc32"
)

// testRecord is one record for makeBatch.
type testRecord struct {
	key, value []byte
	tsDelta    int64
}

// makeBatch hand-builds a valid v2 batch of records (uncompressed unless
// codec is set, in which case the "compressed" payload is just the record
// bytes: validation does not open it).
func makeBatch(baseTs int64, codec int16, recs ...testRecord) []byte {
	var body []byte
	maxTs := baseTs
	for i, r := range recs {
		var rec []byte
		rec = append(rec, 0)
		rec = binary.AppendVarint(rec, r.tsDelta)
		rec = binary.AppendVarint(rec, int64(i))
		if r.key == nil {
			rec = binary.AppendVarint(rec, -1)
		} else {
			rec = binary.AppendVarint(rec, int64(len(r.key)))
			rec = append(rec, r.key...)
		}
		rec = binary.AppendVarint(rec, int64(len(r.value)))
		rec = append(rec, r.value...)
		rec = binary.AppendVarint(rec, 0)
		body = binary.AppendVarint(body, int64(len(rec)))
		body = append(body, rec...)
		if baseTs+r.tsDelta > maxTs {
			maxTs = baseTs + r.tsDelta
		}
	}
	b := make([]byte, BatchHeaderSize, BatchHeaderSize+len(body))
	b = append(b, body...)
	be := binary.BigEndian
	be.PutUint64(b[offBaseOffset:], 0)
	be.PutUint32(b[offBatchLength:], uint32(len(b)-batchOverhead))
	be.PutUint32(b[offLeaderEpoch:], 0xffffffff)
	b[offMagic] = 2
	be.PutUint16(b[offAttributes:], uint16(codec))
	be.PutUint32(b[offLastOffsetDelta:], uint32(len(recs)-1))
	be.PutUint64(b[offBaseTimestamp:], uint64(baseTs))
	be.PutUint64(b[offMaxTimestamp:], uint64(maxTs))
	be.PutUint64(b[offProducerID:], 0xffffffffffffffff)
	be.PutUint16(b[offProducerEpoch:], 0xffff)
	be.PutUint32(b[offBaseSequence:], 0xffffffff)
	be.PutUint32(b[offNumRecords:], uint32(len(recs)))
	fixCRC(b)
	return b
}

func fixCRC(b []byte) {
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
}

// simpleBatch is n records of valueSize bytes at timestamp ts.
func simpleBatch(n, valueSize int, ts int64) []byte {
	recs := make([]testRecord, n)
	for i := range recs {
		v := make([]byte, valueSize)
		for j := range v {
			v[j] = byte(i + j)
		}
		recs[i] = testRecord{value: v}
	}
	return makeBatch(ts, 0, recs...)
}

// makeCompacted builds a batch as the log cleaner leaves it: records with the
// given offset deltas, and lastOffsetDelta unchanged.
func makeCompacted(deltas []int64, lastDelta int32) []byte {
	var body []byte
	for _, d := range deltas {
		var rec []byte
		rec = append(rec, 0)
		rec = binary.AppendVarint(rec, 0)
		rec = binary.AppendVarint(rec, d)
		rec = binary.AppendVarint(rec, -1)
		rec = binary.AppendVarint(rec, 1)
		rec = append(rec, 'v')
		rec = binary.AppendVarint(rec, 0)
		body = binary.AppendVarint(body, int64(len(rec)))
		body = append(body, rec...)
	}
	b := makeBatch(1, 0, testRecord{value: []byte("x")})[:BatchHeaderSize]
	b = append(b, body...)
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-batchOverhead))
	binary.BigEndian.PutUint32(b[offLastOffsetDelta:], uint32(lastDelta))
	binary.BigEndian.PutUint32(b[offNumRecords:], uint32(len(deltas)))
	fixCRC(b)
	return b
}
