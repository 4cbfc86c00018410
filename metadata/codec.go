package metadata

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// maxCollection bounds every count read from a command or a snapshot before
// anything is allocated for it. The real bound is always the bytes left in the
// input (each element takes at least one byte); this is a second fence.
const maxCollection = 1 << 24

// encoder appends the primitive encodings documented in doc.go.
type encoder struct{ buf []byte }

func (e *encoder) u8(v uint8)       { e.buf = append(e.buf, v) }
func (e *encoder) bool(v bool)      { e.buf = append(e.buf, boolByte(v)) }
func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) varint(v int64)   { e.buf = binary.AppendVarint(e.buf, v) }
func (e *encoder) u32(v uint32)     { e.buf = binary.BigEndian.AppendUint32(e.buf, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.buf = append(e.buf, s...) }
func (e *encoder) uuid(u UUID)      { e.buf = append(e.buf, u[:]...) }

func (e *encoder) int32s(v []int32) {
	e.uvarint(uint64(len(v)))
	for _, x := range v {
		e.varint(int64(x))
	}
}

// strMap writes a map in sorted key order so that encodings are deterministic.
func (e *encoder) strMap(m map[string]string) {
	keys := sortedKeys(m)
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.str(k)
		e.str(m[k])
	}
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

var errTruncated = errors.New("truncated")

// decoder reads what encoder writes. The first error sticks; every later read
// returns a zero value, so callers check err once at the end.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) u8() uint8 {
	if d.err != nil || len(d.buf) < 1 {
		d.fail(errTruncated)
		return 0
	}
	v := d.buf[0]
	d.buf = d.buf[1:]
	return v
}

func (d *decoder) bool() bool {
	switch d.u8() {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail(errors.New("bad boolean"))
		return false
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail(errTruncated)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail(errTruncated)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) int32() int32 {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail(fmt.Errorf("value %d out of int32 range", v))
		return 0
	}
	return int32(v)
}

func (d *decoder) int16() int16 {
	v := d.varint()
	if v < math.MinInt16 || v > math.MaxInt16 {
		d.fail(fmt.Errorf("value %d out of int16 range", v))
		return 0
	}
	return int16(v)
}

func (d *decoder) u32() uint32 {
	if d.err != nil || len(d.buf) < 4 {
		d.fail(errTruncated)
		return 0
	}
	v := binary.BigEndian.Uint32(d.buf)
	d.buf = d.buf[4:]
	return v
}

// count reads a collection length and checks it against the bytes left,
// assuming each element takes at least minSize bytes.
func (d *decoder) count(minSize int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > maxCollection || n*uint64(minSize) > uint64(len(d.buf)) {
		d.fail(fmt.Errorf("count %d exceeds remaining %d bytes", n, len(d.buf)))
		return 0
	}
	return int(n)
}

func (d *decoder) rawBytes() []byte {
	n := d.count(1)
	if d.err != nil {
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) str() string { return string(d.rawBytes()) }

func (d *decoder) uuid() UUID {
	var u UUID
	if d.err != nil || len(d.buf) < 16 {
		d.fail(errTruncated)
		return u
	}
	copy(u[:], d.buf)
	d.buf = d.buf[16:]
	return u
}

func (d *decoder) int32s() []int32 {
	n := d.count(1)
	if d.err != nil || n == 0 {
		return nil
	}
	v := make([]int32, n)
	for i := range v {
		v[i] = d.int32()
	}
	return v
}

func (d *decoder) strMap() map[string]string {
	n := d.count(2)
	if d.err != nil || n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := d.str()
		m[k] = d.str()
	}
	return m
}
