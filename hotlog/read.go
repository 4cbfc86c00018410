package hotlog

import (
	"fmt"
	"io"
	"sort"
	"sync/atomic"

	"github.com/sediment-io/sediment/internal/vfs"
)

// Region is a run of whole batches in a segment file, ready for sendfile(2)
// (File.Fd() != vfs.InvalidFd) or for a copy through File.ReadAt.
type Region struct {
	File vfs.File
	Pos  int64
	Len  int64
}

// ReadResult is what Read found. It holds its segments until Release: a
// segment deleted meanwhile keeps its files (and Region.File stays open) until
// every result that holds it is released.
type ReadResult struct {
	Regions []Region
	Size    int64 // the regions' total length
	// FirstOffset is the base offset of the first batch (-1 if none);
	// NextOffset is the offset to read next (the requested offset if none).
	FirstOffset, NextOffset int64
	// LogStartOffset, LogEndOffset and HighWatermark as the read saw them.
	LogStartOffset, LogEndOffset, HighWatermark int64

	segs     []*segment
	released atomic.Bool
}

// Release lets go of the result's segments. It may be called more than once.
func (r *ReadResult) Release() {
	if r == nil || !r.released.CompareAndSwap(false, true) {
		return
	}
	for _, s := range r.segs {
		s.unref()
	}
	r.segs = nil
}

// WriteTo copies the regions' bytes to w (the path for callers that cannot use
// sendfile).
func (r *ReadResult) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for _, reg := range r.Regions {
		n, err := io.Copy(w, io.NewSectionReader(reg.File, reg.Pos, reg.Len))
		total += n
		if err != nil {
			return total, err
		}
		if n != reg.Len {
			return total, fmt.Errorf("hotlog: region of %d bytes gave %d", reg.Len, n)
		}
	}
	return total, nil
}

// Read returns whole batches starting with the batch that contains offset, up
// to maxBytes (but at least one whole batch, as Kafka does), never a batch that
// reaches maxOffset (exclusive, e.g. the high watermark). An offset below the
// log start or past the log end is ErrOffsetOutOfRange; at the log end (or at
// maxOffset) the result is empty. The caller must Release the result.
func (l *Log) Read(offset int64, maxBytes int64, maxOffset int64) (*ReadResult, error) {
	if maxBytes < 1 {
		maxBytes = 1
	}
	for {
		if l.closed.Load() {
			return nil, ErrClosed
		}
		set := *l.segs.Load()
		start, end := l.logStart.Load(), l.logEnd.Load()
		if offset < start || offset > end {
			return nil, fmt.Errorf("%w: %d not in [%d, %d]", ErrOffsetOutOfRange, offset, start, end)
		}
		res := &ReadResult{FirstOffset: -1, NextOffset: offset, LogStartOffset: start, LogEndOffset: end, HighWatermark: l.hw.Load()}
		if maxOffset > end {
			maxOffset = end
		}
		if offset >= maxOffset {
			return res, nil
		}
		ok, err := l.readFrom(res, set, offset, maxBytes, maxOffset)
		if err != nil {
			res.Release()
			return nil, err
		}
		if !ok {
			res.Release() // a segment went away under us: look again
			continue
		}
		return res, nil
	}
}

// segmentFor returns the index of the segment that holds offset.
func segmentFor(set []*segment, offset int64) int {
	i := sort.Search(len(set), func(i int) bool { return set[i].base > offset }) - 1
	if i < 0 {
		i = 0
	}
	return i
}

// findBatch returns the position and header of the first batch in the segment
// whose last offset is at least offset, or found false.
func findBatch(f vfs.File, idx offsetIndex, base, offset, size int64) (int64, BatchHeader, bool, error) {
	var hbuf [BatchHeaderSize]byte
	pos := idx.lookup(offset - base)
	for pos < size {
		h, err := readHeader(f, pos, size, &hbuf)
		if err != nil {
			return 0, h, false, err
		}
		if h.LastOffset() >= offset {
			return pos, h, true, nil
		}
		pos += h.Size()
	}
	return 0, BatchHeader{}, false, nil
}

// readFrom fills res; ok is false if a segment was released concurrently.
func (l *Log) readFrom(res *ReadResult, set []*segment, offset, maxBytes, maxOffset int64) (bool, error) {
	var hbuf [BatchHeaderSize]byte
	first := true
	for i := segmentFor(set, offset); i < len(set); i++ {
		seg := set[i]
		if !seg.tryRef() {
			return false, nil
		}
		res.segs = append(res.segs, seg)
		f, err := seg.logFile()
		if err != nil {
			return true, err
		}
		size, err := seg.visibleSize()
		if err != nil {
			return true, err
		}
		idx, _, _, err := seg.indexes(l.config().IndexIntervalBytes)
		if err != nil {
			return true, err
		}
		var pos int64
		if first {
			p, h, found, err := findBatch(f, idx, seg.base, offset, size)
			if err != nil {
				return true, err
			}
			if !found {
				continue
			}
			if h.LastOffset() >= maxOffset {
				return true, nil
			}
			first = false
			pos = p
			res.FirstOffset = h.BaseOffset
		}
		regionStart := pos
		done := false
		for pos < size {
			taken := res.Size + pos - regionStart
			// Skip whole batches through the index: every batch before an
			// entry ends before the entry's offset.
			if taken > 0 {
				if rel, p, ok := idx.floorPosition(regionStart + maxBytes - res.Size); ok && p > pos && p <= size && seg.base+rel <= maxOffset {
					pos = p
					res.NextOffset = seg.base + rel
					continue
				}
			}
			h, err := readHeader(f, pos, size, &hbuf)
			if err != nil {
				return true, err
			}
			if h.LastOffset() >= maxOffset || (taken > 0 && taken+h.Size() > maxBytes) {
				done = true
				break
			}
			if res.FirstOffset < 0 {
				res.FirstOffset = h.BaseOffset
			}
			pos += h.Size()
			res.NextOffset = h.LastOffset() + 1
		}
		if pos > regionStart {
			res.Regions = append(res.Regions, Region{File: f, Pos: regionStart, Len: pos - regionStart})
			res.Size += pos - regionStart
		}
		if done || res.Size >= maxBytes {
			break
		}
	}
	return true, nil
}

// copyAlign: a copy from the page cache runs at full speed only when the
// destination has the same alignment as the file position (a misaligned
// 1 MiB pread measured up to 3x slower), so ReadBytes aligns its buffer.
const copyAlign = 4096

// ReadBytes is Read, copied into one buffer (for callers that need bytes).
func (l *Log) ReadBytes(offset int64, maxBytes int64, maxOffset int64) ([]byte, error) {
	res, err := l.Read(offset, maxBytes, maxOffset)
	if err != nil {
		return nil, err
	}
	defer res.Release()
	if res.Size == 0 {
		return []byte{}, nil
	}
	skew := res.Regions[0].Pos % copyAlign
	buf := make([]byte, skew+res.Size)[skew:]
	p := buf
	for _, reg := range res.Regions {
		if _, err := reg.File.ReadAt(p[:reg.Len], reg.Pos); err != nil {
			return nil, fmt.Errorf("hotlog: read: %w", err)
		}
		p = p[reg.Len:]
	}
	return buf, nil
}

// maxTimestampParse bounds the batch size OffsetForTimestamp reads to find the
// exact record in an uncompressed batch.
const maxTimestampParse = 16 << 20

// OffsetForTimestamp finds the first batch whose max timestamp is at least ts
// (through the time index). For an uncompressed CreateTime batch it returns the
// first record in it with timestamp >= ts and that timestamp; otherwise the
// batch's base offset and max timestamp (a compressed batch is not opened
// here). (-1, -1, nil) if no batch qualifies. Kafka's special timestamps (-1
// latest, -2 earliest) are the caller's to answer.
func (l *Log) OffsetForTimestamp(ts int64) (offset int64, timestamp int64, err error) {
	return l.OffsetForTimestampFrom(ts, 0)
}

// OffsetForTimestampFrom is OffsetForTimestamp for records at or past from
// (and the log start): a caller that opened the batch found and saw no
// record qualify, its matches being below the log start (a compressed
// batch DeleteRecords cut into), goes on from the batch's end.
func (l *Log) OffsetForTimestampFrom(ts, from int64) (offset int64, timestamp int64, err error) {
	if l.closed.Load() {
		return -1, -1, ErrClosed
	}
	set := *l.segs.Load()
	start := max(l.logStart.Load(), from)
	for _, seg := range set[segmentFor(set, start):] {
		if !seg.tryRef() {
			continue
		}
		off, t, found, err := l.offsetForTimestampIn(seg, ts, start)
		seg.unref()
		if err != nil {
			return -1, -1, err
		}
		if found {
			return max(off, start), t, nil
		}
	}
	return -1, -1, nil
}

// offsetForTimestampIn searches one segment, ignoring records below start.
func (l *Log) offsetForTimestampIn(seg *segment, ts, start int64) (int64, int64, bool, error) {
	f, err := seg.logFile()
	if err != nil {
		return 0, 0, false, err
	}
	if maxTs, err := seg.maxTimestamp(l.config().IndexIntervalBytes); err != nil || maxTs < ts {
		return 0, 0, false, err
	}
	size, err := seg.visibleSize()
	if err != nil {
		return 0, 0, false, err
	}
	idx, tidx, _, err := seg.indexes(l.config().IndexIntervalBytes)
	if err != nil {
		return 0, 0, false, err
	}
	from := seg.base
	if rel, ok := tidx.lookupBefore(ts); ok {
		from = seg.base + rel
	}
	pos := idx.lookup(max(from, start) - seg.base)
	var hbuf [BatchHeaderSize]byte
	for pos < size {
		h, err := readHeader(f, pos, size, &hbuf)
		if err != nil {
			return 0, 0, false, err
		}
		if h.MaxTimestamp >= ts && h.LastOffset() >= start {
			off, t := h.BaseOffset, h.MaxTimestamp
			if h.Compression() == 0 && !h.LogAppendTime() && h.Size() <= maxTimestampParse {
				batch := make([]byte, h.Size())
				if _, err := f.ReadAt(batch, pos); err != nil {
					return 0, 0, false, err
				}
				found := false
				recordTimestamps(batch, h.BaseTimestamp, func(delta, rts int64) bool {
					if rts >= ts && h.BaseOffset+delta >= start {
						off, t, found = h.BaseOffset+delta, rts, true
						return false
					}
					return true
				})
				if !found && h.BaseOffset < start {
					// Its only matches are below the start: as
					// Kafka's searchForTimestamp, the next batch.
					pos += h.Size()
					continue
				}
			}
			return off, t, true, nil
		}
		pos += h.Size()
	}
	return 0, 0, false, nil
}
