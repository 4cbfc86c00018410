package hotlog

import (
	"encoding/binary"
	"math"
	"sort"
)

// Index entry layouts (big-endian):
//
//	.index      relativeOffset uint32 | position uint32          (8 bytes)
//	.timeindex  timestamp int64 | relativeOffset uint32          (12 bytes)
//
// relativeOffset is a batch's base offset minus the segment's base offset;
// position is the byte position of that batch in the .log file.
const (
	offsetIndexEntrySize = 8
	timeIndexEntrySize   = 12
)

// offsetIndex is the sparse offset index of one segment, in entry bytes. Its
// entries have strictly increasing relative offsets and positions.
type offsetIndex []byte

func (x offsetIndex) len() int { return len(x) / offsetIndexEntrySize }

func (x offsetIndex) entry(i int) (rel uint32, pos uint32) {
	e := x[i*offsetIndexEntrySize:]
	return binary.BigEndian.Uint32(e), binary.BigEndian.Uint32(e[4:])
}

// lookup returns the position of the last indexed batch whose relative offset
// is at most rel (0 if none): the place to start scanning for rel.
func (x offsetIndex) lookup(rel int64) int64 {
	i := sort.Search(x.len(), func(i int) bool {
		r, _ := x.entry(i)
		return int64(r) > rel
	})
	if i == 0 {
		return 0
	}
	_, pos := x.entry(i - 1)
	return int64(pos)
}

// floorPosition returns the last entry whose position is at most pos (rel, pos
// of the entry), or ok false.
func (x offsetIndex) floorPosition(pos int64) (rel int64, p int64, ok bool) {
	i := sort.Search(x.len(), func(i int) bool {
		_, q := x.entry(i)
		return int64(q) > pos
	})
	if i == 0 {
		return 0, 0, false
	}
	r, q := x.entry(i - 1)
	return int64(r), int64(q), true
}

// timeIndex is the sparse time index of one segment: strictly increasing
// timestamps (each the segment's max timestamp so far) with the relative base
// offset of the batch that holds it.
type timeIndex []byte

func (x timeIndex) len() int { return len(x) / timeIndexEntrySize }

func (x timeIndex) entry(i int) (ts int64, rel uint32) {
	e := x[i*timeIndexEntrySize:]
	return int64(binary.BigEndian.Uint64(e)), binary.BigEndian.Uint32(e[8:])
}

// lookupBefore returns the relative offset of the last entry with timestamp
// strictly below ts: every batch up to and including that one has a max
// timestamp below ts, so the search for ts may start there. ok is false if no
// entry is below ts.
func (x timeIndex) lookupBefore(ts int64) (rel int64, ok bool) {
	i := sort.Search(x.len(), func(i int) bool {
		t, _ := x.entry(i)
		return t >= ts
	})
	if i == 0 {
		return 0, false
	}
	_, r := x.entry(i - 1)
	return int64(r), true
}

// last returns the last entry, or ok false.
func (x timeIndex) last() (ts int64, rel uint32, ok bool) {
	if x.len() == 0 {
		return 0, 0, false
	}
	ts, rel = x.entry(x.len() - 1)
	return ts, rel, true
}

// indexBuilder accumulates the index entries of a segment as batches are
// appended (or found by a recovery scan), Kafka's way: a batch gets an offset
// index entry when more than interval bytes were appended since the last
// entry, and the time index gets the max timestamp so far at the same points
// (and once more when the segment is sealed).
type indexBuilder struct {
	base          int64
	interval      int
	idx           offsetIndex
	tidx          timeIndex
	sinceLast     int64
	maxTs         int64 // max timestamp so far (-1 none)
	maxTsOffset   int64 // base offset of the batch holding maxTs
	lastIndexedTs int64
	size          int64 // bytes of the segment so far
	next          int64 // next offset after the last batch
}

func newIndexBuilder(base int64, interval int) *indexBuilder {
	return &indexBuilder{base: base, interval: interval, maxTs: -1, maxTsOffset: base, lastIndexedTs: math.MinInt64, next: base}
}

// add records the batch h, which starts at position pos.
func (b *indexBuilder) add(h *BatchHeader, pos int64) {
	if h.MaxTimestamp > b.maxTs {
		b.maxTs = h.MaxTimestamp
		b.maxTsOffset = h.BaseOffset
	}
	if b.sinceLast > int64(b.interval) {
		b.idx = binary.BigEndian.AppendUint32(b.idx, uint32(h.BaseOffset-b.base))
		b.idx = binary.BigEndian.AppendUint32(b.idx, uint32(pos))
		b.appendTime()
		b.sinceLast = 0
	}
	b.sinceLast += h.Size()
	b.size = pos + h.Size()
	b.next = h.LastOffset() + 1
}

// appendTime adds the max timestamp so far to the time index if it grew.
func (b *indexBuilder) appendTime() {
	if b.maxTs > b.lastIndexedTs && b.maxTs >= 0 {
		b.tidx = binary.BigEndian.AppendUint64(b.tidx, uint64(b.maxTs))
		b.tidx = binary.BigEndian.AppendUint32(b.tidx, uint32(b.maxTsOffset-b.base))
		b.lastIndexedTs = b.maxTs
	}
}

// full reports whether one more entry would pass maxBytes in either index.
func (b *indexBuilder) full(maxBytes int) bool {
	return len(b.idx)+offsetIndexEntrySize > maxBytes || len(b.tidx)+2*timeIndexEntrySize > maxBytes
}

// validOffsetIndex checks an index file's entries against its segment: whole
// entries, strictly increasing, positions inside the log, relative offsets
// below limit (the next segment's base minus this one's, or no limit if < 0).
func validOffsetIndex(x []byte, logSize int64, relLimit int64) bool {
	if len(x)%offsetIndexEntrySize != 0 {
		return false
	}
	idx := offsetIndex(x)
	var prevRel, prevPos int64 = -1, -1
	for i := 0; i < idx.len(); i++ {
		r, p := idx.entry(i)
		if int64(r) <= prevRel || int64(p) <= prevPos || int64(p)+BatchHeaderSize > logSize {
			return false
		}
		if relLimit >= 0 && int64(r) >= relLimit {
			return false
		}
		prevRel, prevPos = int64(r), int64(p)
	}
	return true
}

// validTimeIndex checks a time index file the same way.
func validTimeIndex(x []byte, relLimit int64) bool {
	if len(x)%timeIndexEntrySize != 0 {
		return false
	}
	tidx := timeIndex(x)
	prevTs := int64(math.MinInt64)
	var prevRel int64 = -1
	for i := 0; i < tidx.len(); i++ {
		ts, r := tidx.entry(i)
		if ts <= prevTs || int64(r) < prevRel || (relLimit >= 0 && int64(r) >= relLimit) {
			return false
		}
		prevTs, prevRel = ts, int64(r)
	}
	return true
}
