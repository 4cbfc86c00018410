package hotlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Layout of a v2 record batch header (Kafka's RecordBatch, magic 2). All
// integers are big-endian.
const (
	offBaseOffset      = 0  // int64
	offBatchLength     = 8  // int32: bytes after this field
	offLeaderEpoch     = 12 // int32
	offMagic           = 16 // int8
	offCRC             = 17 // uint32: CRC-32C of bytes [offAttributes, end)
	offAttributes      = 21 // int16
	offLastOffsetDelta = 23 // int32
	offBaseTimestamp   = 27 // int64
	offMaxTimestamp    = 35 // int64
	offProducerID      = 43 // int64
	offProducerEpoch   = 51 // int16
	offBaseSequence    = 53 // int32
	offNumRecords      = 57 // int32

	// BatchHeaderSize is the size of a v2 batch header, records excluded.
	BatchHeaderSize = 61
	// batchOverhead is the bytes before the batch length counts: base offset
	// and the length itself.
	batchOverhead = 12
	// minBatchLength is the smallest legal BatchLength.
	minBatchLength = BatchHeaderSize - batchOverhead

	attrCompressionMask = 0x07
	attrTimestampType   = 0x08 // set: LogAppendTime
	attrTransactional   = 0x10
	attrControl         = 0x20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BatchHeader is the parsed 61-byte v2 record batch header.
type BatchHeader struct {
	BaseOffset           int64
	BatchLength          int32
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// Size is the batch's size in bytes, header included.
func (h *BatchHeader) Size() int64 { return batchOverhead + int64(h.BatchLength) }

// LastOffset is the offset of the batch's last record.
func (h *BatchHeader) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// Compression is the codec number (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
func (h *BatchHeader) Compression() int { return int(h.Attributes & attrCompressionMask) }

// IsTransactional reports the transactional attribute.
func (h *BatchHeader) IsTransactional() bool { return h.Attributes&attrTransactional != 0 }

// IsControl reports the control attribute (transaction markers).
func (h *BatchHeader) IsControl() bool { return h.Attributes&attrControl != 0 }

// LogAppendTime reports whether the timestamp type is LogAppendTime.
func (h *BatchHeader) LogAppendTime() bool { return h.Attributes&attrTimestampType != 0 }

// ParseBatchHeader parses the header at the start of b. It checks only what the
// header alone can show: that b holds a whole header, the magic byte, and that
// BatchLength is at least a header. It does not check the CRC or that b holds
// the whole batch.
func ParseBatchHeader(b []byte) (BatchHeader, error) {
	if len(b) < BatchHeaderSize {
		return BatchHeader{}, fmt.Errorf("%w: %d bytes, short of a %d-byte header", ErrCorruptBatch, len(b), BatchHeaderSize)
	}
	h := BatchHeader{
		BaseOffset:           int64(binary.BigEndian.Uint64(b[offBaseOffset:])),
		BatchLength:          int32(binary.BigEndian.Uint32(b[offBatchLength:])),
		PartitionLeaderEpoch: int32(binary.BigEndian.Uint32(b[offLeaderEpoch:])),
		Magic:                int8(b[offMagic]),
		CRC:                  binary.BigEndian.Uint32(b[offCRC:]),
		Attributes:           int16(binary.BigEndian.Uint16(b[offAttributes:])),
		LastOffsetDelta:      int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:])),
		BaseTimestamp:        int64(binary.BigEndian.Uint64(b[offBaseTimestamp:])),
		MaxTimestamp:         int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])),
		ProducerID:           int64(binary.BigEndian.Uint64(b[offProducerID:])),
		ProducerEpoch:        int16(binary.BigEndian.Uint16(b[offProducerEpoch:])),
		BaseSequence:         int32(binary.BigEndian.Uint32(b[offBaseSequence:])),
		NumRecords:           int32(binary.BigEndian.Uint32(b[offNumRecords:])),
	}
	if h.Magic != 2 {
		return h, fmt.Errorf("%w: magic %d, only magic 2 is supported", ErrCorruptBatch, h.Magic)
	}
	if h.BatchLength < minBatchLength {
		return h, fmt.Errorf("%w: batch length %d below the header's %d", ErrCorruptBatch, h.BatchLength, minBatchLength)
	}
	return h, nil
}

// checkHeader holds the header checks that need no record bytes: offsets and
// counts that agree. strict is for batches from producers: exactly
// lastOffsetDelta+1 records. Otherwise (replicated batches, the log's own
// bytes) a compacted batch may hold fewer records, even none, as Kafka's
// cleaner leaves them.
func checkHeader(h *BatchHeader, strict bool) error {
	if h.LastOffsetDelta < 0 {
		return fmt.Errorf("%w: last offset delta %d", ErrInvalidRecord, h.LastOffsetDelta)
	}
	if strict && h.NumRecords <= 0 {
		return fmt.Errorf("%w: record count %d", ErrInvalidRecord, h.NumRecords)
	}
	if strict && int64(h.NumRecords) != int64(h.LastOffsetDelta)+1 {
		return fmt.Errorf("%w: record count %d but last offset delta %d", ErrInvalidRecord, h.NumRecords, h.LastOffsetDelta)
	}
	if h.NumRecords < 0 || int64(h.NumRecords) > int64(h.LastOffsetDelta)+1 {
		return fmt.Errorf("%w: record count %d but last offset delta %d", ErrInvalidRecord, h.NumRecords, h.LastOffsetDelta)
	}
	if h.Compression() > 4 {
		return fmt.Errorf("%w: unknown compression codec %d", ErrCorruptBatch, h.Compression())
	}
	if h.BaseOffset < 0 || h.BaseOffset > maxOffset-int64(h.LastOffsetDelta) {
		return fmt.Errorf("%w: base offset %d", ErrCorruptBatch, h.BaseOffset)
	}
	return nil
}

const maxOffset = 1<<63 - 1

// ValidateBatches checks one or more concatenated v2 batches (a Produce
// partition's records) completely: each header, that every length fits, the
// CRC-32C, that the record count matches lastOffsetDelta and, for uncompressed
// batches, that the records themselves are well framed, as many as the header
// says, with offset deltas 0, 1, 2, .... Compressed records are not opened.
//
// It returns the parsed headers; on any failure it returns an error wrapping
// ErrCorruptBatch or ErrInvalidRecord, and no headers.
func ValidateBatches(records []byte) ([]BatchHeader, error) {
	return validateBatches(records, true)
}

// ValidateReplicatedBatches is ValidateBatches for batches a leader already
// wrote (the follower path): the CRC and every length are checked the same
// way, but a batch may hold fewer records than lastOffsetDelta+1 (compacted),
// with offset deltas increasing instead of 0, 1, 2, ....
func ValidateReplicatedBatches(records []byte) ([]BatchHeader, error) {
	return validateBatches(records, false)
}

func validateBatches(records []byte, strict bool) ([]BatchHeader, error) {
	if len(records) == 0 {
		return nil, fmt.Errorf("%w: no record batches", ErrInvalidRecord)
	}
	var hdrs []BatchHeader
	for pos := 0; pos < len(records); {
		h, err := validateBatch(records[pos:], strict)
		if err != nil {
			return nil, fmt.Errorf("batch at byte %d: %w", pos, err)
		}
		hdrs = append(hdrs, h)
		pos += int(h.Size())
	}
	return hdrs, nil
}

// validateBatch validates the batch at the start of b (b may hold more after it).
func validateBatch(b []byte, strict bool) (BatchHeader, error) {
	h, err := ParseBatchHeader(b)
	if err != nil {
		return h, err
	}
	if h.Size() > int64(len(b)) {
		return h, fmt.Errorf("%w: batch of %d bytes, only %d present", ErrCorruptBatch, h.Size(), len(b))
	}
	batch := b[:h.Size()]
	if crc := crc32.Checksum(batch[offAttributes:], castagnoli); crc != h.CRC {
		return h, fmt.Errorf("%w: CRC %08x, computed %08x", ErrCorruptBatch, h.CRC, crc)
	}
	if err := checkHeader(&h, strict); err != nil {
		return h, err
	}
	if h.Compression() == 0 {
		if err := checkRecords(batch[BatchHeaderSize:], h.NumRecords, h.LastOffsetDelta, strict); err != nil {
			return h, err
		}
	} else if len(batch) == BatchHeaderSize && h.NumRecords > 0 {
		return h, fmt.Errorf("%w: compressed batch with no payload", ErrCorruptBatch)
	}
	return h, nil
}

// recordReader reads the varint-framed fields of uncompressed records.
type recordReader struct {
	b   []byte
	err bool
}

func (r *recordReader) varint() int64 {
	if len(r.b) > 0 && r.b[0] < 0x80 { // one byte: the common case
		x := uint64(r.b[0])
		r.b = r.b[1:]
		return int64(x>>1) ^ -int64(x&1)
	}
	if len(r.b) > 1 && r.b[1] < 0x80 { // two bytes: lengths and deltas below 8 KiB
		x := uint64(r.b[0]&0x7f) | uint64(r.b[1])<<7
		r.b = r.b[2:]
		return int64(x>>1) ^ -int64(x&1)
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = true
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) skip(n int64) {
	if n < 0 || n > int64(len(r.b)) {
		r.err = true
		r.b = nil
		return
	}
	r.b = r.b[n:]
}

// bytesField skips a nullable length-prefixed field.
func (r *recordReader) bytesField(nullable bool) {
	n := r.varint()
	if n == -1 && nullable {
		return
	}
	r.skip(n)
}

// checkRecords walks uncompressed records: each is framed by a varint length
// and must be well formed inside it, and there must be exactly want of them,
// with offset deltas 0..want-1 (strict) or increasing up to lastDelta.
func checkRecords(b []byte, want, lastDelta int32, strict bool) error {
	r := recordReader{b: b}
	var count int32
	prevDelta := int64(-1)
	for len(r.b) > 0 {
		length := r.varint()
		if r.err || length <= 0 || length > int64(len(r.b)) {
			return fmt.Errorf("%w: record %d: bad length", ErrCorruptBatch, count)
		}
		rec := recordReader{b: r.b[:length]}
		r.b = r.b[length:]
		rec.skip(1)  // attributes
		rec.varint() // timestamp delta
		offsetDelta := rec.varint()
		rec.bytesField(true) // key
		rec.bytesField(true) // value
		headers := rec.varint()
		if headers < 0 || headers > int64(len(rec.b)) {
			rec.err = true
		}
		for i := int64(0); i < headers && !rec.err; i++ {
			rec.bytesField(false) // header key
			rec.bytesField(true)  // header value
		}
		if rec.err || len(rec.b) != 0 {
			return fmt.Errorf("%w: record %d: malformed", ErrCorruptBatch, count)
		}
		if (strict && offsetDelta != int64(count)) || offsetDelta <= prevDelta || offsetDelta > int64(lastDelta) {
			return fmt.Errorf("%w: record %d has offset delta %d", ErrInvalidRecord, count, offsetDelta)
		}
		prevDelta = offsetDelta
		count++
		if count > want {
			return fmt.Errorf("%w: more records than the header's %d", ErrInvalidRecord, want)
		}
	}
	if count != want {
		return fmt.Errorf("%w: %d records, header says %d", ErrInvalidRecord, count, want)
	}
	return nil
}

// recordTimestamps calls fn with each uncompressed record's offset delta and
// timestamp, stopping when fn returns false. The batch must have been validated.
func recordTimestamps(batch []byte, baseTimestamp int64, fn func(delta int64, ts int64) bool) {
	r := recordReader{b: batch[BatchHeaderSize:]}
	for len(r.b) > 0 && !r.err {
		length := r.varint()
		if r.err || length <= 0 || length > int64(len(r.b)) {
			return
		}
		rec := recordReader{b: r.b[:length]}
		r.b = r.b[length:]
		rec.skip(1)
		tsDelta := rec.varint()
		offsetDelta := rec.varint()
		if rec.err || !fn(offsetDelta, baseTimestamp+tsDelta) {
			return
		}
	}
}

// putBaseOffset and putLeaderEpoch stamp fields outside the CRC.
func putBaseOffset(b []byte, off int64) { binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(off)) }
func putLeaderEpoch(b []byte, epoch int32) {
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(epoch))
}

// setLogAppendTime sets the timestamp type to LogAppendTime and the max
// timestamp to ts, and recomputes the CRC (both fields are inside it).
func setLogAppendTime(batch []byte, ts int64) {
	attrs := binary.BigEndian.Uint16(batch[offAttributes:])
	binary.BigEndian.PutUint16(batch[offAttributes:], attrs|attrTimestampType)
	binary.BigEndian.PutUint64(batch[offMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint32(batch[offCRC:], crc32.Checksum(batch[offAttributes:], castagnoli))
}
