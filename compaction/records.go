package compaction

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Record is one record of a v2 batch as decoded. Key, Value and Headers alias
// the decoded buffer. A nil Key is a null key; a nil Value is a null value
// (a tombstone when the key is set).
type Record struct {
	Attributes     int8
	TimestampDelta int64
	OffsetDelta    int32
	Key            []byte
	Value          []byte
	// Headers is the encoded header block (count varint, then the headers),
	// kept verbatim.
	Headers []byte
	// Framed is the whole record as it was in the batch, length prefix
	// included: a record kept unchanged is copied from it.
	Framed []byte
}

// errBadRecord marks malformed records inside a batch.
var errBadRecord = errors.New("compaction: malformed record")

type reader struct {
	b   []byte
	bad bool
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad, r.b = true, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) take(n int64) []byte {
	if n < 0 || n > int64(len(r.b)) {
		r.bad, r.b = true, nil
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

// nullable reads a varint length and that many bytes; -1 is null (nil).
func (r *reader) nullable() []byte {
	n := r.varint()
	if n == -1 {
		return nil
	}
	b := r.take(n)
	if b == nil && !r.bad {
		return []byte{}
	}
	return b
}

// decodeRecords walks the records of a batch's (decompressed) record bytes:
// exactly count records, each framed by a varint length that must fit, with
// every field inside its frame, offset deltas strictly increasing in
// [0, lastOffsetDelta], and nothing left over. fn sees each record; the Record
// is reused between calls. Every length is checked against the bytes that
// remain before it is used, so a hostile batch costs no more than its size.
func decodeRecords(b []byte, count int32, lastOffsetDelta int32, fn func(*Record) error) error {
	if count < 0 {
		return fmt.Errorf("%w: record count %d", errBadRecord, count)
	}
	r := reader{b: b}
	var rec Record
	prev := int64(-1)
	for i := int32(0); i < count; i++ {
		if len(r.b) == 0 {
			return fmt.Errorf("%w: %d records, header says %d", errBadRecord, i, count)
		}
		start := r.b
		length := r.varint()
		if r.bad || length <= 0 || length > int64(len(r.b)) {
			return fmt.Errorf("%w: record %d: bad length", errBadRecord, i)
		}
		prefix := len(start) - len(r.b)
		body := reader{b: r.b[:length]}
		rec.Framed = start[:prefix+int(length)]
		r.b = r.b[length:]
		attrs := body.take(1)
		if body.bad {
			return fmt.Errorf("%w: record %d: no attributes", errBadRecord, i)
		}
		rec.Attributes = int8(attrs[0])
		rec.TimestampDelta = body.varint()
		od := body.varint()
		rec.Key = body.nullable()
		rec.Value = body.nullable()
		hstart := body.b
		nh := body.varint()
		if nh < 0 || nh > int64(len(body.b)) {
			body.bad = true
		}
		for h := int64(0); h < nh && !body.bad; h++ {
			if k := body.varint(); k < 0 {
				body.bad = true // header keys are not nullable
			} else {
				body.take(k)
			}
			body.nullable()
		}
		if body.bad || len(body.b) != 0 {
			return fmt.Errorf("%w: record %d: fields do not fit its length", errBadRecord, i)
		}
		rec.Headers = hstart[:len(hstart)-len(body.b)]
		if od <= prev || od > int64(lastOffsetDelta) {
			return fmt.Errorf("%w: record %d: offset delta %d after %d (last %d)", errBadRecord, i, od, prev, lastOffsetDelta)
		}
		prev = od
		rec.OffsetDelta = int32(od)
		if err := fn(&rec); err != nil {
			return err
		}
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d bytes after the last record", errBadRecord, len(r.b))
	}
	return nil
}

// appendRecord encodes rec with timestamp delta tsDelta (the other fields as
// they are) and appends it, length-prefixed, to dst.
func appendRecord(dst []byte, rec *Record, tsDelta int64) []byte {
	var scratch [3 * binary.MaxVarintLen64]byte
	n := 1
	n += binary.PutVarint(scratch[:], tsDelta)
	n += binary.PutVarint(scratch[:], int64(rec.OffsetDelta))
	n += nullableLen(rec.Key) + nullableLen(rec.Value) + len(rec.Headers)
	dst = binary.AppendVarint(dst, int64(n))
	dst = append(dst, byte(rec.Attributes))
	dst = binary.AppendVarint(dst, tsDelta)
	dst = binary.AppendVarint(dst, int64(rec.OffsetDelta))
	dst = appendNullable(dst, rec.Key)
	dst = appendNullable(dst, rec.Value)
	return append(dst, rec.Headers...)
}

func nullableLen(b []byte) int {
	var scratch [binary.MaxVarintLen64]byte
	if b == nil {
		return binary.PutVarint(scratch[:], -1)
	}
	return binary.PutVarint(scratch[:], int64(len(b))) + len(b)
}

func appendNullable(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	return append(binary.AppendVarint(dst, int64(len(b))), b...)
}

// Control record types (the key of a control batch's record: version int16,
// type int16).
const (
	controlAbort  = 0
	controlCommit = 1
)

// controlType parses a control record's key; ok is false if it is malformed.
func controlType(key []byte) (int16, bool) {
	if len(key) < 4 {
		return 0, false
	}
	return int16(binary.BigEndian.Uint16(key[2:])), true
}

// varintAt decodes the zigzag varint at b[p:end]; np is 0 if it is
// malformed or passes end. One-byte varints (lengths and deltas under 64,
// most of them) take the inlined fast path.
func varintAt(b []byte, p, end int) (v int64, np int) {
	if p < end && b[p] < 0x80 {
		c := b[p]
		return int64(c>>1) ^ -int64(c&1), p + 1
	}
	return varintSlow(b, p, end)
}

func varintSlow(b []byte, p, end int) (v int64, np int) {
	if p < end {
		v, n := binary.Varint(b[p:end])
		if n > 0 {
			return v, p + n
		}
	}
	return 0, 0
}

// skipNullable skips a varint length (-1: null) and that many bytes at
// b[p:end]; null reports a null; np is 0 if it is malformed.
func skipNullable(b []byte, p, end int) (np int, start int, null bool) {
	n, p := varintAt(b, p, end)
	if p == 0 {
		return 0, 0, false
	}
	if n == -1 {
		return p, p, true
	}
	if n < 0 || n > int64(end-p) {
		return 0, 0, false
	}
	return p + int(n), p, false
}

// recordKeys walks records as decodeRecords does, with the same checks (it
// accepts exactly what decodeRecords accepts, so a malformed batch fails a
// pass before anything is written), but hands fn only each record's offset
// delta, key and whether it is a tombstone (null value), the key map's
// needs, and jumps over values and headers by their lengths.
func recordKeys(b []byte, count int32, lastOffsetDelta int32, fn func(offsetDelta int32, key []byte, tombstone bool)) error {
	if count < 0 {
		return fmt.Errorf("%w: record count %d", errBadRecord, count)
	}
	prev := int64(-1)
	p := 0
	// One-byte varints (most lengths and deltas) are decoded inline.
	for i := int32(0); i < count; i++ {
		var length int64
		if p < len(b) && b[p] < 0x80 {
			length, p = int64(b[p]>>1)^-int64(b[p]&1), p+1
		} else if length, p = varintSlow(b, p, len(b)); p == 0 {
			return fmt.Errorf("%w: record %d: bad length", errBadRecord, i)
		}
		if length <= 0 || length > int64(len(b)-p) {
			return fmt.Errorf("%w: record %d: bad length", errBadRecord, i)
		}
		end := p + int(length)
		p++ // the attributes byte
		var od, kl, vl int64
		bad := false
		if p < end && b[p] < 0x80 { // timestamp delta
			p++
		} else if _, p = varintSlow(b, p, end); p == 0 {
			bad = true
		}
		if bad {
		} else if p < end && b[p] < 0x80 {
			od, p = int64(b[p]>>1)^-int64(b[p]&1), p+1
		} else if od, p = varintSlow(b, p, end); p == 0 {
			bad = true
		}
		if bad {
		} else if p < end && b[p] < 0x80 {
			kl, p = int64(b[p]>>1)^-int64(b[p]&1), p+1
		} else if kl, p = varintSlow(b, p, end); p == 0 {
			bad = true
		}
		var key []byte
		if !bad && kl != -1 {
			if kl < 0 || kl > int64(end-p) {
				bad = true
			} else {
				key = b[p : p+int(kl) : p+int(kl)]
				p += int(kl)
			}
		}
		if bad {
		} else if p < end && b[p] < 0x80 {
			vl, p = int64(b[p]>>1)^-int64(b[p]&1), p+1
		} else if vl, p = varintSlow(b, p, end); p == 0 {
			bad = true
		}
		tombstone := vl == -1
		if !bad && !tombstone {
			if vl < 0 || vl > int64(end-p) {
				bad = true
			} else {
				p += int(vl)
			}
		}
		if !bad {
			var nh int64
			if p < end && b[p] < 0x80 {
				nh, p = int64(b[p]>>1)^-int64(b[p]&1), p+1
			} else if nh, p = varintSlow(b, p, end); p == 0 {
				bad = true
			}
			if nh < 0 || nh > int64(end-p) {
				bad = true
			}
			for h := int64(0); h < nh && !bad; h++ {
				var k int64
				if k, p = varintAt(b, p, end); p == 0 || k < 0 || k > int64(end-p) {
					bad = true
					break
				}
				p += int(k)
				if p, _, _ = skipNullable(b, p, end); p == 0 {
					bad = true
				}
			}
		}
		if bad || p != end {
			return fmt.Errorf("%w: record %d: fields do not fit its length", errBadRecord, i)
		}
		if od <= prev || od > int64(lastOffsetDelta) {
			return fmt.Errorf("%w: record %d: offset delta %d after %d (last %d)", errBadRecord, i, od, prev, lastOffsetDelta)
		}
		prev = od
		fn(int32(od), key, tombstone)
	}
	if p != len(b) {
		return fmt.Errorf("%w: %d bytes after the last record", errBadRecord, len(b)-p)
	}
	return nil
}
