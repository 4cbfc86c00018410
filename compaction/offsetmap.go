package compaction

import (
	"math"
	"math/bits"
	"runtime"

	"github.com/zeebo/xxh3"
)

// offsetMap maps a key's 128-bit digest to the latest offset seen for it, in
// a fixed amount of memory (log.cleaner.dedupe.buffer.size): Kafka's
// SkimpyOffsetMap, with xxh3-128 instead of MD5, 16-byte slots instead of
// 24, and per-offset bitmaps that spare the rewrite its map probes.
//
// The table is an array of 64-byte buckets (one cache line each, the array
// is page-aligned as every large Go allocation), four 16-byte slots a
// bucket:
//
//	slot: tag uint64 (digest high half) | check uint32 (digest low 32 bits) | off uint32 (offset-base+1; 0: empty)
//
// The digest's low half picks the home bucket (Lemire's range reduction of
// its top bits); a key lives in the first bucket of home, home+1, ... (linear
// over buckets, wrapping) with a free slot or its own. Neighbouring buckets
// are neighbouring cache lines, which the hardware prefetches: at the 90%
// load limit a probe touches 1.2 lines on average where double hashing over
// single slots touched 2.6 random ones. A key is told by 96 stored digest
// bits plus the bits that chose its home bucket: two keys are taken for one
// with probability about n²/2^(97+log2 buckets). Offsets are stored relative
// to the map's base (the first batch mapped); mapping stops (the map is
// "full") before an offset 2³²-2 past it. The table never grows: past 90%
// load it reports full and the cleaner stops mapping there (the next pass
// continues).
//
// Bitmaps, one bit per offset from the base, for cover offsets:
//
//	mapped  the offset is a record the map phase put
//	dead    the record was superseded by a later mapped record of its key,
//	        or the offset is a gap inside or between mapped batches
//	look    the record is a tombstone, or its batch must be read whatever
//	        happens (transactional, or its producer's last batch)
//
// With them the rewrite decides a mapped record (keep iff not dead) without
// hashing or probing, keeps or drops whole batches from popcounts, and skips
// reading runs of dead offsets (see Cleaner.cleanGroup). Records outside the
// cover (or not mapped) are decided by a probe, as before.
//
// Not safe for concurrent use.
type offsetMap struct {
	buckets  []mapBucket
	free     func() // releases buckets (allocBuckets), once
	entries  int
	maxEntry int
	base     int64 // offset of slot value 1; -1 until the first put
	latest   int64 // the largest offset put, -1 if none

	mapped, dead, look []uint64
	cover              int64 // offsets the bitmaps cover from base
	usedWords          int   // bitmap words possibly non-zero (for clear)
}

type mapSlot struct {
	tag   uint64
	check uint32
	off   uint32 // offset - base + 1; 0 marks an empty slot
}

type mapBucket [4]mapSlot

const (
	offsetMapSlotBytes = 16
	offsetMapLoad      = 0.9 // log.cleaner.io.buffer.load.factor
	// offsetMapBitmapShare of the memory goes to the three bitmaps.
	offsetMapBitmapShare = 4 // 1/4
	maxRelOffset         = 1<<32 - 2
)

// offsetMapBytes is the memory a map needs for keys keys at the load limit
// and offsets offsets covered by its bitmaps (the larger of the two shares).
func offsetMapBytes(keys, offsets int64) int64 {
	forKeys := int64(float64(keys)*offsetMapSlotBytes/offsetMapLoad) * offsetMapBitmapShare / (offsetMapBitmapShare - 1)
	forOffsets := (offsets*3/8 + 3*8) * offsetMapBitmapShare
	return max(forKeys, forOffsets) + 4*64
}

// newOffsetMap makes a map of at most memory bytes (at least four buckets).
func newOffsetMap(memory int64) *offsetMap {
	bitmapBytes := memory / offsetMapBitmapShare
	words := max(int(bitmapBytes/3/8), 1)
	nb := int(min(max((memory-int64(words)*3*8)/64, 4), math.MaxUint32)) // homes are uint32
	buckets, free := allocBuckets(nb)
	m := &offsetMap{buckets: buckets, free: func() {},
		mapped: make([]uint64, words), dead: make([]uint64, words), look: make([]uint64, words)}
	if free != nil {
		// Close frees the table; a map dropped without it is freed when
		// collected.
		cl := runtime.AddCleanup(m, func(free func()) { free() }, free)
		m.free = func() {
			cl.Stop()
			free()
		}
	}
	m.cover = int64(words) * 64
	m.maxEntry = max(int(float64(nb*4)*offsetMapLoad), 1)
	m.base, m.latest = -1, -1
	return m
}

// release frees the table; the map must not be used after.
func (m *offsetMap) release() {
	m.free()
	m.buckets, m.free = nil, func() {}
}

// hugeTableBytes: tables from this size on are mapped with huge pages where
// the platform has them (allocBuckets).
const hugeTableBytes = 4 << 20

// bytes is the memory held by the table and its bitmaps.
func (m *offsetMap) bytes() int64 { return int64(len(m.buckets))*64 + int64(len(m.mapped))*3*8 }

// slots is the number of slots.
func (m *offsetMap) slots() int { return len(m.buckets) * 4 }

func (m *offsetMap) clear() {
	if m.entries > 0 {
		clear(m.buckets)
	}
	clear(m.mapped[:m.usedWords])
	clear(m.dead[:m.usedWords])
	clear(m.look[:m.usedWords])
	m.entries, m.latest, m.base, m.usedWords = 0, -1, -1, 0
}

func (m *offsetMap) full() bool { return m.entries >= m.maxEntry }

// room reports whether a batch of n records over offsets [first, last] may
// be put: the map has room for n new keys and last is within 2³²-2 of the
// base. It sets the base at the first batch.
func (m *offsetMap) room(first, last int64, n int) bool {
	if m.entries+n > m.maxEntry {
		return false
	}
	if m.base < 0 {
		if last-first > maxRelOffset {
			return false
		}
		m.base = first
		return true
	}
	return first >= m.base && last-m.base < maxRelOffset
}

// home returns a digest's home bucket.
func (m *offsetMap) home(lo uint64) int {
	b, _ := bits.Mul64(lo, uint64(len(m.buckets)))
	return int(b)
}

// homes appends the home bucket of each key's digest to dst.
func (m *offsetMap) homes(dst []uint32, keys []keyOffset) []uint32 {
	for i := range keys {
		dst = append(dst, uint32(m.home(keys[i].digest.Lo)))
	}
	return dst
}

// prefetch brings the buckets homes into the cache, all misses in flight
// together (prefetchBuckets), and returns a value for the caller to keep.
func (m *offsetMap) prefetch(homes []uint32) uint32 { return prefetchBuckets(m.buckets, homes) }

// put records offset for the digest h; it returns the offset that offset
// superseded (the key's earlier one, or offset itself if the key already
// has a larger one), or -1 if the key was new. ok is false, doing nothing,
// if the key is new and the map is full, or offset is outside the base's
// range (the caller checks room first).
func (m *offsetMap) putHash(h xxh3.Uint128, offset int64) (old int64, ok bool) {
	return m.putHome(h, m.home(h.Lo), offset)
}

// putHome is putHash with the digest's home bucket b (m.home(h.Lo)) known.
func (m *offsetMap) putHome(h xxh3.Uint128, b int, offset int64) (old int64, ok bool) {
	if m.base < 0 {
		m.base = offset
	}
	rel := offset - m.base
	if rel < 0 || rel >= maxRelOffset {
		return -1, false
	}
	v := uint32(rel) + 1
	check := uint32(h.Lo)
	for {
		bk := &m.buckets[b]
		for i := range bk {
			s := &bk[i]
			if s.off == 0 {
				if m.entries >= m.maxEntry {
					return -1, false
				}
				*s = mapSlot{h.Hi, check, v}
				m.entries++
				m.latest = max(m.latest, offset)
				return -1, true
			}
			if s.tag == h.Hi && s.check == check {
				prev := m.base + int64(s.off) - 1
				if v > s.off {
					s.off = v
					m.latest = max(m.latest, offset)
					return prev, true
				}
				return offset, true
			}
		}
		if b++; b == len(m.buckets) {
			b = 0
		}
	}
}

// getHash returns the latest offset recorded for the digest h, or -1.
func (m *offsetMap) getHash(h xxh3.Uint128) int64 {
	check := uint32(h.Lo)
	b := m.home(h.Lo)
	for {
		bk := &m.buckets[b]
		for i := range bk {
			s := &bk[i]
			if s.off == 0 {
				return -1
			}
			if s.tag == h.Hi && s.check == check {
				return m.base + int64(s.off) - 1
			}
		}
		if b++; b == len(m.buckets) {
			b = 0
		}
	}
}

// put and get hash the key (tests).
func (m *offsetMap) put(key []byte, offset int64) bool {
	_, ok := m.putHash(xxh3.Hash128(key), offset)
	return ok
}

func (m *offsetMap) get(key []byte) int64 { return m.getHash(xxh3.Hash128(key)) }

// Bitmaps. rel converts an offset to a bit index; ok is false outside the
// cover.
func (m *offsetMap) rel(offset int64) (int64, bool) {
	if m.base < 0 {
		return 0, false
	}
	r := offset - m.base
	return r, r >= 0 && r < m.cover
}

// covers reports whether [first, last] is inside the bitmaps' cover.
func (m *offsetMap) covers(first, last int64) bool {
	_, ok1 := m.rel(first)
	_, ok2 := m.rel(last)
	return ok1 && ok2
}

func (m *offsetMap) use(r int64) {
	if w := int(r>>6) + 1; w > m.usedWords {
		m.usedWords = w
	}
}

func bitSet(bm []uint64, r int64)      { bm[r>>6] |= 1 << (r & 63) }
func bitClear(bm []uint64, r int64)    { bm[r>>6] &^= 1 << (r & 63) }
func bitGet(bm []uint64, r int64) bool { return bm[r>>6]&(1<<(r&63)) != 0 }

// wordMask returns the bitmap word holding bit a and the mask of the bits
// [a, b] within it; the range's next word starts at bit (w+1)<<6.
func wordMask(a, b int64) (w int64, mask uint64) {
	w = a >> 6
	lo, hi := uint(a&63), uint(63)
	if b>>6 == w {
		hi = uint(b & 63)
	}
	return w, (^uint64(0) >> (63 - hi)) &^ ((1 << lo) - 1)
}

// setRange sets bits [a, b] (relative, inside the cover).
func setRange(bm []uint64, a, b int64) {
	for a <= b {
		w, mask := wordMask(a, b)
		bm[w] |= mask
		a = (w + 1) << 6
	}
}

// countRange counts the set bits [a, b] of bm.
func countRange(bm []uint64, a, b int64) int {
	n := 0
	for a <= b {
		w, mask := wordMask(a, b)
		n += bits.OnesCount64(bm[w] & mask)
		a = (w + 1) << 6
	}
	return n
}

// countMappedDead counts the records of [a, b] (relative) that are mapped
// and dead.
func (m *offsetMap) countMappedDead(a, b int64) int {
	n := 0
	for a <= b {
		w, mask := wordMask(a, b)
		n += bits.OnesCount64(m.mapped[w] & m.dead[w] & mask)
		a = (w + 1) << 6
	}
	return n
}

// markBatch notes a batch about to be put into the map: every offset of
// [first, last] dead (the records then clear their bits in markRecord, so
// what stays dead are the gaps), and the gap since prevEnd (the end of the
// batch scanned before it, mapped or not) dead too; whole sets look over
// the batch.
func (m *offsetMap) markBatch(prevEnd, first, last int64, whole bool) {
	start := first
	if prevEnd >= m.base && prevEnd < first {
		start = prevEnd
	}
	a, ok := m.rel(start)
	if !ok {
		return
	}
	b := min(last-m.base, m.cover-1)
	m.use(b)
	setRange(m.dead, a, b)
	if whole {
		fa, _ := m.rel(first)
		if fa <= b {
			setRange(m.look, fa, b)
		}
	}
}

// markRecord notes a record put: mapped, live, a tombstone or not; and the
// record it superseded (old >= 0; old == offset if a larger offset of the
// key was already mapped) dead.
func (m *offsetMap) markRecord(offset, old int64, tombstone bool) {
	if r, ok := m.rel(offset); ok {
		bitSet(m.mapped, r)
		if old != offset {
			bitClear(m.dead, r)
		}
		if tombstone {
			bitSet(m.look, r)
		}
	}
	if old >= 0 && old != offset {
		if r, ok := m.rel(old); ok {
			bitSet(m.dead, r)
		}
	}
}

// nextLook returns the first offset in [offset, limit) that is not dead or
// is marked look (a record the rewrite must read), or limit; offsets outside
// the cover are never skipped.
func (m *offsetMap) nextLook(offset, limit int64) int64 {
	r, ok := m.rel(offset)
	if !ok {
		return offset
	}
	end := min(limit-m.base, m.cover, int64(m.usedWords)*64)
	for r < end {
		w := r >> 6
		skip := m.dead[w] &^ m.look[w]
		skip |= (1 << (r & 63)) - 1 // bits below r count as skippable
		if skip != ^uint64(0) {
			r = w<<6 + int64(bits.TrailingZeros64(^skip))
			return min(m.base+r, limit)
		}
		r = (w + 1) << 6
	}
	return min(m.base+end, limit)
}
