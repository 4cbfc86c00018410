package compaction

import (
	"math/bits"

	"github.com/zeebo/xxh3"
)

// offsetMap maps a key's 128-bit digest to the latest offset seen for it, in
// a fixed amount of memory: Kafka's SkinnyOffsetMap, with xxh3-128 instead of
// MD5. It is an open-addressing table with double hashing over a prime
// number of slots (the digest's low half picks the slot, its high half the
// step, so a probe sequence visits every slot and clusters do not form at
// 90% load as they do with linear probing); each slot is a digest (16
// bytes) and an offset (8 bytes), 24 bytes in all. The table
// never grows: past loadFactor it reports full and the cleaner stops
// mapping there (the next pass continues). Two keys with the same 128-bit
// digest would be taken for one (probability ~n²/2¹²⁹: for a billion keys
// about 10⁻²¹). Not safe for concurrent use.
type offsetMap struct {
	slots    []mapSlot
	entries  int
	maxEntry int
	latest   int64 // the largest offset put, -1 if none
}

// mapSlot is one slot: a probe touches one cache line at most twice.
type mapSlot struct {
	hi, lo uint64
	off    int64 // offset+1; 0 marks an empty slot
}

const (
	offsetMapSlotBytes = 24
	offsetMapLoad      = 0.9 // log.cleaner.io.buffer.load.factor
)

// newOffsetMap makes a map of at most memory bytes (at least 16 slots).
func newOffsetMap(memory int64) *offsetMap {
	slots := prevPrime(max(int(memory/offsetMapSlotBytes), 17))
	m := &offsetMap{slots: make([]mapSlot, slots)}
	m.maxEntry = max(int(float64(slots)*offsetMapLoad), 1)
	m.latest = -1
	return m
}

// bytes is the memory held by the table.
func (m *offsetMap) bytes() int64 { return int64(len(m.slots)) * offsetMapSlotBytes }

func (m *offsetMap) clear() {
	clear(m.slots)
	m.entries, m.latest = 0, -1
}

func (m *offsetMap) full() bool { return m.entries >= m.maxEntry }

// probe returns a digest's first slot and its step (in [1, n-1]).
func (m *offsetMap) probe(hi, lo uint64) (int, int) {
	n := uint64(len(m.slots))
	// Lemire's range reductions of each half.
	s, _ := bits.Mul64(lo, n)
	step, _ := bits.Mul64(hi, n-1)
	return int(s), int(step) + 1
}

// prevPrime is the largest prime at most n (n >= 2).
func prevPrime(n int) int {
	for ; n > 2; n-- {
		if n%2 == 0 {
			continue
		}
		prime := true
		for d := 3; d*d <= n; d += 2 {
			if n%d == 0 {
				prime = false
				break
			}
		}
		if prime {
			return n
		}
	}
	return 2
}

// put records offset for key (keeping the larger if the key is there). It
// returns false, doing nothing, if the key is new and the map is full.
func (m *offsetMap) put(key []byte, offset int64) bool {
	return m.putHash(xxh3.Hash128(key), offset)
}

// putHash is put with the key's digest.
func (m *offsetMap) putHash(h xxh3.Uint128, offset int64) bool {
	i, step := m.probe(h.Hi, h.Lo)
	for {
		s := &m.slots[i]
		if s.off == 0 {
			if m.entries >= m.maxEntry {
				return false
			}
			*s = mapSlot{h.Hi, h.Lo, offset + 1}
			m.entries++
			break
		}
		if s.hi == h.Hi && s.lo == h.Lo {
			if offset+1 > s.off {
				s.off = offset + 1
			}
			break
		}
		if i += step; i >= len(m.slots) {
			i -= len(m.slots)
		}
	}
	if offset > m.latest {
		m.latest = offset
	}
	return true
}

// get returns the latest offset recorded for key, or -1.
func (m *offsetMap) get(key []byte) int64 {
	return m.getHash(xxh3.Hash128(key))
}

// getHash is get with the key's digest.
func (m *offsetMap) getHash(h xxh3.Uint128) int64 {
	i, step := m.probe(h.Hi, h.Lo)
	for {
		s := &m.slots[i]
		if s.off == 0 {
			return -1
		}
		if s.hi == h.Hi && s.lo == h.Lo {
			return s.off - 1
		}
		if i += step; i >= len(m.slots) {
			i -= len(m.slots)
		}
	}
}
