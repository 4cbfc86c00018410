package tiering

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// The uploaded .index and .timeindex objects use hotlog's formats: 8-byte
// offset-index entries (relativeOffset uint32 | position uint32) and 12-byte
// time-index entries (timestamp int64 | relativeOffset uint32), big-endian,
// both strictly increasing. The uploader builds them from the bytes it
// uploads, one entry per indexInterval bytes, so they always match the .log
// object.

type indexEntry struct {
	rel uint32
	pos uint32
}

// offsetIndex is a decoded, checked offset index.
type offsetIndex []indexEntry

// decodeOffsetIndex checks and decodes an .index object of a segment of
// logSize bytes whose offsets span relLimit (EndOffset - BaseOffset).
func decodeOffsetIndex(b []byte, logSize, relLimit int64) (offsetIndex, error) {
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("%w: offset index of %d bytes", ErrCorruptObject, len(b))
	}
	x := make(offsetIndex, len(b)/8)
	for i := range x {
		e := indexEntry{rel: binary.BigEndian.Uint32(b[8*i:]), pos: binary.BigEndian.Uint32(b[8*i+4:])}
		if int64(e.rel) >= relLimit || int64(e.pos) >= logSize || (i > 0 && (e.rel <= x[i-1].rel || e.pos <= x[i-1].pos)) {
			return nil, fmt.Errorf("%w: offset index entry %d (%d, %d)", ErrCorruptObject, i, e.rel, e.pos)
		}
		x[i] = e
	}
	return x, nil
}

// floor returns the position of the last entry whose relative offset is at or
// below rel (0 if none).
func (x offsetIndex) floor(rel int64) int64 {
	i := sort.Search(len(x), func(i int) bool { return int64(x[i].rel) > rel }) - 1
	if i < 0 {
		return 0
	}
	return int64(x[i].pos)
}

type timeEntry struct {
	ts  int64
	rel uint32
}

// decodeTimeIndex checks and decodes a .timeindex object.
func decodeTimeIndex(b []byte, relLimit int64) ([]timeEntry, error) {
	if len(b)%12 != 0 {
		return nil, fmt.Errorf("%w: time index of %d bytes", ErrCorruptObject, len(b))
	}
	x := make([]timeEntry, len(b)/12)
	for i := range x {
		e := timeEntry{ts: int64(binary.BigEndian.Uint64(b[12*i:])), rel: binary.BigEndian.Uint32(b[12*i+8:])}
		if int64(e.rel) >= relLimit || (i > 0 && (e.ts <= x[i-1].ts || e.rel < x[i-1].rel)) {
			return nil, fmt.Errorf("%w: time index entry %d", ErrCorruptObject, i)
		}
		x[i] = e
	}
	return x, nil
}

// indexBuilder builds both indexes while a segment is scanned.
type indexBuilder struct {
	base      int64
	interval  int64
	sinceLast int64
	offsets   []byte
	times     []byte
	maxTs     int64
	maxTsRel  uint32
	lastTs    int64
}

func newIndexBuilder(base int64, interval int64) *indexBuilder {
	return &indexBuilder{base: base, interval: interval, maxTs: -1, lastTs: -1 << 63, sinceLast: interval}
}

// add notes a batch at pos (before it is counted).
func (b *indexBuilder) add(baseOffset, maxTs int64, pos, size int64) {
	rel := uint32(baseOffset - b.base)
	if maxTs > b.maxTs {
		b.maxTs, b.maxTsRel = maxTs, rel
	}
	if b.sinceLast >= b.interval {
		b.offsets = binary.BigEndian.AppendUint32(b.offsets, rel)
		b.offsets = binary.BigEndian.AppendUint32(b.offsets, uint32(pos))
		b.appendTime()
		b.sinceLast = 0
	}
	b.sinceLast += size
}

func (b *indexBuilder) appendTime() {
	if b.maxTs > b.lastTs && b.maxTs >= 0 {
		b.times = binary.BigEndian.AppendUint64(b.times, uint64(b.maxTs))
		b.times = binary.BigEndian.AppendUint32(b.times, b.maxTsRel)
		b.lastTs = b.maxTs
	}
}

func (b *indexBuilder) finish() { b.appendTime() }
