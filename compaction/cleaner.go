package compaction

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"runtime"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/sediment-io/sediment/hotlog"
)

// Sentinel errors.
var (
	// ErrCorrupt: a batch in the log does not check out (CRC, framing,
	// decompression); the log is not cleaned.
	ErrCorrupt = errors.New("compaction: corrupt batch in log")
	// ErrMapTooSmall: one batch holds more keys than the key map can.
	ErrMapTooSmall = errors.New("compaction: key map too small for one batch")
	// ErrClosed: the Manager is closed.
	ErrClosed = errors.New("compaction: closed")
)

// Batch header layout (Kafka v2; see hotlog's doc.go).
const (
	offBatchLength   = 8
	offCRC           = 17
	offAttributes    = 21
	offBaseTimestamp = 27
	offMaxTimestamp  = 35
	offNumRecords    = 57
	headerSize       = hotlog.BatchHeaderSize

	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
	// attrDeleteHorizon (KIP-534): the batch's base timestamp holds its delete
	// horizon; tombstones and markers in it may go once the horizon passed.
	attrDeleteHorizon = 0x40
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Target is one log for Clean: the log, its settings, its transaction state
// and its cleaner checkpoint.
type Target struct {
	Log    *hotlog.Log
	Config TopicConfig
	Txn    Transactions // nil: no transactions
	// FirstDirty is the cleaner checkpoint: offsets below it were cleaned
	// by an earlier pass (0 if never).
	FirstDirty int64
}

// Range is the cleanable part of a log, as LogCleanerManager computes it.
type Range struct {
	// FirstDirty is where the dirty (not yet cleaned) part starts, and
	// FirstUncleanable where cleaning must stop: the active segment, the
	// high watermark, the first unstable offset, or the first segment
	// younger than min.compaction.lag.ms, whichever comes first.
	FirstDirty, FirstUncleanable int64
	CleanBytes, DirtyBytes       int64 // by whole segments
	// Forced is set when max.compaction.lag.ms says the log must be cleaned
	// whatever its dirty ratio.
	Forced bool
}

// DirtyRatio is dirty / (clean + dirty) bytes.
func (r Range) DirtyRatio() float64 {
	if r.CleanBytes+r.DirtyBytes == 0 {
		return 0
	}
	return float64(r.DirtyBytes) / float64(r.CleanBytes+r.DirtyBytes)
}

// CleanableRange computes t's cleanable range at now.
func CleanableRange(t Target, now time.Time) (Range, error) {
	l := t.Log
	cfg := t.Config.withDefaults()
	segs := l.Segments()
	start := l.LogStartOffset()
	r := Range{FirstDirty: max(t.FirstDirty, start)}
	if len(segs) == 0 {
		return r, nil
	}
	uncleanable := segs[len(segs)-1].BaseOffset // the active segment
	uncleanable = min(uncleanable, l.HighWatermark())
	if t.Txn != nil {
		if fuo := t.Txn.FirstUnstableOffset(); fuo >= 0 {
			uncleanable = min(uncleanable, fuo)
		}
	}
	if cfg.MinCompactionLag > 0 {
		horizon := now.Add(-cfg.MinCompactionLag).UnixMilli()
		for _, s := range segs {
			if s.Sealed && s.NextOffset > r.FirstDirty && s.MaxTimestamp > horizon {
				uncleanable = min(uncleanable, s.BaseOffset)
				break
			}
		}
	}
	if r.FirstDirty > uncleanable {
		r.FirstDirty = uncleanable
	}
	r.FirstUncleanable = uncleanable
	for _, s := range segs {
		if !s.Sealed {
			break
		}
		switch {
		case s.NextOffset <= r.FirstDirty:
			r.CleanBytes += s.Size
		case s.BaseOffset < r.FirstUncleanable:
			r.DirtyBytes += s.Size
		}
	}
	if cfg.MaxCompactionLag > 0 && r.FirstDirty < r.FirstUncleanable {
		b, err := l.ReadBytes(r.FirstDirty, 1, r.FirstUncleanable)
		if err != nil && !errors.Is(err, hotlog.ErrOffsetOutOfRange) {
			return r, err
		}
		if len(b) >= headerSize {
			if h, err := hotlog.ParseBatchHeader(b); err == nil && h.MaxTimestamp >= 0 &&
				h.MaxTimestamp < now.Add(-cfg.MaxCompactionLag).UnixMilli() {
				r.Forced = true
			}
		}
	}
	return r, nil
}

// Stats describes one cleaning pass.
type Stats struct {
	FirstDirty, MapEnd int64 // the pass mapped [FirstDirty, MapEnd); MapEnd is the next checkpoint
	BytesRead          int64
	BytesWritten       int64
	RecordsRead        int64
	RecordsDropped     int64
	BatchesRewritten   int64
	SegmentsBefore     int // segments replaced
	SegmentsAfter      int // segments that replaced them
	SegmentsUnchanged  int // single-segment groups that lost nothing (not swapped)
	MapEntries         int
	MapSlots           int   // the key map's slots (MapEntries/MapSlots is its load)
	MapBytes           int64 // the key map's memory, bitmaps included
	// NextDeleteHorizon is the earliest delete horizon (Unix ms) still
	// ahead of a tombstone or marker the pass kept, or -1: the log must be
	// cleaned again then to drop it, dirty or not. It is never before the
	// pass's start: a marker kept past its horizon (its transaction still
	// has data) is not counted, only a dirty pass can drop it.
	NextDeleteHorizon int64
	Duration          time.Duration
	MapDuration       time.Duration // of Duration, building the key map
	// OffsetsSkipped counts the offsets the rewrite passed over without
	// reading them (runs of superseded records and gaps).
	OffsetsSkipped int64
}

type keyOffset struct {
	digest    xxh3.Uint128
	offset    int64
	tombstone bool
}

// recInfo is what filterBatch needs of one record.
type recInfo struct {
	framed    []byte
	tsDelta   int64
	offset    int64
	digest    xxh3.Uint128
	latest    int64 // the map's offset for the key, -1 if none
	hasKey    bool
	tombstone bool
}

// Cleaner cleans logs one pass at a time. It is not safe for concurrent use;
// a Manager runs one per cleaner goroutine.
type Cleaner struct {
	cfg      CleanerConfig
	now      func() time.Time
	throttle *throttler
	omap     *offsetMap
	codecs   codecs

	rbuf  []byte // read chunk
	dbuf  []byte // decompressed records
	rec   []byte // re-encoded records
	cbuf  []byte // recompressed records
	out   []byte // output batches, flushed to the segment writer
	keys  []keyOffset
	homes []uint32 // home buckets of keys
	recs  []recInfo
	stats *Stats
	// remote is set while cleaning a remote log (remote.go): transaction
	// state is not known there, so markers and transactional tombstones
	// are kept and transactional data does not enter the key map.
	remote bool
	// mapPrev is the end of the last batch the map phase scanned (-1 at
	// first): the gap up to the next mapped batch is marked dead.
	mapPrev int64
	// pipeline runs the local map phase on two goroutines (mappipe.go):
	// set when GOMAXPROCS > 1.
	pipeline bool
	// skipped counts the offsets the rewrite passed over without reading.
	skipped int64
	// prefetchSink keeps offsetMap.prefetch's loads (where they are loads).
	prefetchSink uint32
}

// NewCleaner makes a cleaner with its key map (cfg.DedupeBufferBytes). now
// is the clock [time.Now].
func NewCleaner(cfg CleanerConfig, now func() time.Time) *Cleaner {
	if now == nil {
		now = time.Now
	}
	cfg = cfg.WithDefaults()
	return newCleaner(cfg, now, newThrottler(cfg.IOMaxBytesPerSecond, now))
}

func newCleaner(cfg CleanerConfig, now func() time.Time, th *throttler) *Cleaner {
	return &Cleaner{cfg: cfg, now: now, throttle: th, omap: newOffsetMap(cfg.DedupeBufferBytes), mapPrev: -1,
		pipeline: runtime.GOMAXPROCS(0) > 1}
}

// Close releases the cleaner's codec resources and its key map; the
// cleaner must not be used after.
func (c *Cleaner) Close() {
	c.codecs.close()
	c.omap.release()
}

// Clean runs one pass over t, as Kafka's Cleaner.doClean: it maps the keys of
// the dirty range (as far as the key map holds), then rewrites every segment
// from the log start to the end of the mapped range, in groups merged into
// one segment each, keeping for every key only its latest record, and swaps
// each group in with hotlog's ReplaceSegments. Stats.MapEnd is the new
// checkpoint. A pass with nothing dirty still rewrites the clean part
// (dropping tombstones and markers whose delete horizon passed); the Manager
// calls it only when the dirty ratio, max.compaction.lag.ms or a passed
// horizon asks for it.
func (c *Cleaner) Clean(ctx context.Context, t Target) (Stats, error) {
	begin := c.now()
	st := Stats{NextDeleteHorizon: -1}
	c.stats = &st
	defer func() { c.stats = nil }()
	r, err := CleanableRange(t, begin)
	if err != nil {
		return st, err
	}
	st.FirstDirty, st.MapEnd = r.FirstDirty, r.FirstDirty
	cfg := t.Config.withDefaults()
	mapEnd := r.FirstDirty
	c.clearMap()
	if r.FirstDirty < r.FirstUncleanable {
		if mapEnd, err = c.buildMap(ctx, t, r.FirstDirty, r.FirstUncleanable); err != nil {
			return st, err
		}
	}
	st.MapEnd, st.MapEntries, st.MapSlots, st.MapBytes = mapEnd, c.omap.entries, c.omap.slots(), c.omap.bytes()
	st.MapDuration = c.now().Sub(begin)
	// Tombstones and markers whose horizon passed go; new ones get one.
	nowMs := begin.UnixMilli()
	for _, group := range groupSegments(t.Log.Segments(), mapEnd, cfg.SegmentBytes) {
		if err := c.cleanGroup(ctx, t, group, mapEnd, nowMs, nowMs+cfg.DeleteRetention.Milliseconds()); err != nil {
			return st, err
		}
	}
	st.Duration = c.now().Sub(begin)
	return st, nil
}

// groupSegments splits the sealed segments below end into runs to merge:
// each run's total size at most maxBytes, its offsets within 2³¹ of its base.
func groupSegments(segs []hotlog.SegmentInfo, end int64, maxBytes int64) [][]hotlog.SegmentInfo {
	var groups [][]hotlog.SegmentInfo
	for i := 0; i < len(segs) && segs[i].Sealed && segs[i].BaseOffset < end; {
		g := []hotlog.SegmentInfo{segs[i]}
		size := segs[i].Size
		i++
		for i < len(segs) && segs[i].Sealed && segs[i].BaseOffset < end &&
			size+segs[i].Size <= maxBytes && segs[i].NextOffset-1-g[0].BaseOffset <= math.MaxInt32 {
			g = append(g, segs[i])
			size += segs[i].Size
			i++
		}
		groups = append(groups, g)
	}
	return groups
}

// scan calls fn with each whole batch of l in [from, to) (batch aliases a
// buffer reused after fn returns); fn returns false to stop.
func (c *Cleaner) scan(ctx context.Context, l *hotlog.Log, from, to int64, fn func(h *hotlog.BatchHeader, batch []byte) (bool, error)) error {
	return c.scanSkip(ctx, l, from, to, nil, fn)
}

// scanSkip is scan that does not read what sk says it may pass over:
// sk.next(o) is the first offset at or after o that must be read (o if o
// must). Where the rest of a chunk may be passed over, the next read starts
// at that offset instead. sk.passed(from, to) is told of each stretch of
// offsets passed over ([from, to) held no batch that was read).
func (c *Cleaner) scanSkip(ctx context.Context, l *hotlog.Log, from, to int64, sk *skipper,
	fn func(h *hotlog.BatchHeader, batch []byte) (bool, error)) error {
	off := max(from, l.LogStartOffset())
	skipFrom := int64(-1) // start of a stretch passed over, until the next read lands
	for off < to {
		if err := ctx.Err(); err != nil {
			return err
		}
		if sk != nil {
			if t := sk.next(off); t > off {
				if skipFrom < 0 {
					skipFrom = off
				}
				if off = t; off >= to {
					break
				}
			}
		}
		res, err := l.Read(off, c.cfg.ReadChunk, to)
		if err != nil {
			return err
		}
		if skipFrom >= 0 {
			landed := to
			if res.FirstOffset >= 0 {
				landed = res.FirstOffset
			}
			sk.passed(skipFrom, landed)
			skipFrom = -1
		}
		if res.Size == 0 {
			res.Release()
			return nil
		}
		if int64(cap(c.rbuf)) < res.Size {
			c.rbuf = make([]byte, res.Size)
		}
		buf := c.rbuf[:res.Size]
		p := buf
		for _, reg := range res.Regions {
			if _, err := reg.File.ReadAt(p[:reg.Len], reg.Pos); err != nil {
				res.Release()
				return fmt.Errorf("compaction: read log: %w", err)
			}
			p = p[reg.Len:]
		}
		next := res.NextOffset
		res.Release()
		c.stats.BytesRead += int64(len(buf))
		if err := c.throttle.wait(ctx, int64(len(buf))); err != nil {
			return err
		}
		for len(buf) > 0 {
			h, err := hotlog.ParseBatchHeader(buf)
			if err != nil || h.Size() > int64(len(buf)) {
				return fmt.Errorf("%w: at offset %d: %v", ErrCorrupt, off, err)
			}
			batch := buf[:h.Size()]
			if crc32.Checksum(batch[offAttributes:], castagnoli) != h.CRC {
				return fmt.Errorf("%w: CRC mismatch in batch at offset %d", ErrCorrupt, h.BaseOffset)
			}
			more, err := fn(&h, batch)
			if err != nil || !more {
				return err
			}
			buf = buf[h.Size():]
			if sk != nil && len(buf) > 0 {
				// Pass over the rest of the chunk if it may all be skipped.
				if t := sk.next(h.LastOffset() + 1); t >= next {
					skipFrom, next = h.LastOffset()+1, t
					break
				}
			}
		}
		if next <= off {
			return fmt.Errorf("compaction: read at %d made no progress", off)
		}
		off = next
	}
	if skipFrom >= 0 {
		sk.passed(skipFrom, to)
	}
	return nil
}

// skipper tells the rewrite which offsets it need not read: runs of mapped
// records that were superseded and of gaps (the key map's bitmaps), up to
// limit. It remembers the last run found, so asking again inside it is
// free.
type skipper struct {
	c           *Cleaner
	limit       int64
	from, until int64
}

func (s *skipper) next(o int64) int64 {
	if o >= s.from && o < s.until {
		return s.until
	}
	t := s.c.omap.nextLook(o, s.limit)
	if t > o {
		s.from, s.until = o, t
	}
	return t
}

// passed counts the records of [from, to) that the scan passed over: each
// one mapped and superseded (gaps are not records), all dropped.
func (s *skipper) passed(from, to int64) {
	om := s.c.omap
	a, ok := om.rel(from)
	if !ok || to <= from {
		return
	}
	b := min(to-om.base, om.cover) - 1
	n := int64(om.countMappedDead(a, b))
	s.c.stats.RecordsRead += n
	s.c.stats.RecordsDropped += n
	s.c.skipped += to - from
	s.c.stats.OffsetsSkipped += to - from
}

// payload returns a batch's record bytes, decompressed into c.dbuf if needed.
func (c *Cleaner) payload(h *hotlog.BatchHeader, batch []byte) ([]byte, error) {
	payload := batch[headerSize:]
	if h.Compression() != codecNone {
		var err error
		if c.dbuf, err = c.codecs.decompress(h.Compression(), payload, c.dbuf, c.cfg.MaxBatchBytes); err != nil {
			return nil, fmt.Errorf("%w: batch at offset %d: %v", ErrCorrupt, h.BaseOffset, err)
		}
		payload = c.dbuf
	}
	return payload, nil
}

// records decompresses a batch's records into c.dbuf and walks them.
func (c *Cleaner) records(h *hotlog.BatchHeader, batch []byte, fn func(*Record) error) error {
	payload, err := c.payload(h, batch)
	if err != nil {
		return err
	}
	if err := decodeRecords(payload, h.NumRecords, h.LastOffsetDelta, fn); err != nil {
		if errors.Is(err, errBadRecord) {
			return fmt.Errorf("%w: batch at offset %d: %v", ErrCorrupt, h.BaseOffset, err)
		}
		return err
	}
	return nil
}

// buildMap maps the keys of [from, to) to their latest offsets, skipping
// aborted transactions and control batches, until the map is full. It
// returns the end of the mapped range (a batch boundary).
func (c *Cleaner) buildMap(ctx context.Context, t Target, from, to int64) (int64, error) {
	c.clearMap()
	txns, err := abortedTxns(t, from, to)
	if err != nil {
		return from, err
	}
	tr := newTxnTracker(txns)
	end := max(from, t.Log.LogStartOffset())
	var p *mapPipeline
	if c.pipeline {
		p = c.startMapPipeline(end)
	}
	err = c.scan(ctx, t.Log, from, to, func(h *hotlog.BatchHeader, batch []byte) (bool, error) {
		passOver := false
		if h.IsControl() {
			key, ok := c.controlKey(h, batch)
			tr.onControl(h.ProducerID, h.LastOffset(), key, ok)
			passOver = true
		} else {
			passOver = tr.onData(h.ProducerID, h.IsTransactional(), h.LastOffset())
		}
		if passOver {
			if p != nil {
				return p.skip(h.LastOffset()), nil
			}
			end = h.LastOffset() + 1
			c.mapPrev = end
			return true, nil
		}
		// A transactional batch and a producer's last batch are always read
		// by the rewrite (the transaction tracker, the kept header).
		whole := h.IsTransactional()
		if !whole && t.Txn != nil && h.ProducerID >= 0 {
			last, ok := t.Txn.ProducerLastOffset(h.ProducerID)
			whole = ok && last == h.LastOffset()
		}
		if p != nil {
			return p.batch(h, batch, whole)
		}
		more, err := c.mapBatch(h, batch, whole)
		if more {
			end = h.LastOffset() + 1
		}
		return more, err
	})
	if p != nil {
		return p.finish(err)
	}
	return end, err
}

// clearMap empties the key map before a pass.
func (c *Cleaner) clearMap() {
	c.omap.clear()
	c.mapPrev = -1
}

// mapBatch puts the keys of one data batch into the key map and marks its
// offsets in the map's bitmaps (whole: the rewrite must read the batch);
// more is false (and nothing is put) when the map has no room for the batch.
func (c *Cleaner) mapBatch(h *hotlog.BatchHeader, batch []byte, whole bool) (more bool, err error) {
	if ok, err := c.roomFor(h.BaseOffset, h.LastOffset(), h.NumRecords); !ok {
		return false, err
	}
	if c.keys, err = c.batchKeys(h, batch, c.keys[:0]); err != nil {
		return false, err
	}
	c.putKeys(h.BaseOffset, h.LastOffset(), whole || h.NumRecords == 0, c.keys)
	return true, nil
}

// roomFor reports whether the key map has room for a batch of records
// records over [first, last] (offsetMap.room); when it has not, err is
// ErrMapTooSmall if the map is empty and still too small, else nil (full:
// the next pass continues at this batch).
func (c *Cleaner) roomFor(first, last int64, records int32) (bool, error) {
	om := c.omap
	if om.room(first, last, int(records)) {
		return true, nil
	}
	if om.entries == 0 && int(records) > om.maxEntry {
		return false, fmt.Errorf("%w: %d records in the batch at %d, room for %d", ErrMapTooSmall, records, first, om.maxEntry)
	}
	return false, nil
}

// batchKeys appends the digest, offset and tombstone flag of every keyed
// record of a data batch to dst.
func (c *Cleaner) batchKeys(h *hotlog.BatchHeader, batch []byte, dst []keyOffset) ([]keyOffset, error) {
	payload, err := c.payload(h, batch)
	if err != nil {
		return dst, err
	}
	base := h.BaseOffset
	err = recordKeys(payload, h.NumRecords, h.LastOffsetDelta, func(od int32, key []byte, tombstone bool) {
		if key != nil {
			dst = append(dst, keyOffset{xxh3.Hash128(key), base + int64(od), tombstone})
		}
	})
	if err != nil {
		return dst, fmt.Errorf("%w: batch at offset %d: %v", ErrCorrupt, h.BaseOffset, err)
	}
	return dst, nil
}

// putKeys puts the keys of the batch [first, last] (roomFor said yes) into
// the key map and marks its offsets in the bitmaps (whole: the rewrite must
// read the batch). The keys were hashed first; their buckets are
// prefetched together, then probed: the cache misses of a large map
// overlap.
func (c *Cleaner) putKeys(first, last int64, whole bool, keys []keyOffset) {
	om := c.omap
	om.markBatch(c.mapPrev, first, last, whole)
	c.mapPrev = last + 1
	c.homes = om.homes(c.homes[:0], keys)
	c.prefetchSink += om.prefetch(c.homes)
	for i := range keys {
		k := &keys[i]
		old, _ := om.putHome(k.digest, int(c.homes[i]), k.offset)
		om.markRecord(k.offset, old, k.tombstone)
	}
}

// controlKey returns a control batch's marker type.
func (c *Cleaner) controlKey(h *hotlog.BatchHeader, batch []byte) (int16, bool) {
	var typ int16
	ok := false
	err := c.records(h, batch, func(rec *Record) error {
		if !ok {
			typ, ok = controlType(rec.Key)
		}
		return nil
	})
	return typ, ok && err == nil
}

func abortedTxns(t Target, from, to int64) ([]AbortedTxn, error) {
	if t.Txn == nil {
		return nil, nil
	}
	txns, err := t.Txn.AbortedTransactions(from, to)
	if err != nil {
		return nil, fmt.Errorf("compaction: aborted transactions: %w", err)
	}
	return txns, nil
}

// cleanGroup rewrites one group of segments into one and swaps it in.
func (c *Cleaner) cleanGroup(ctx context.Context, t Target, group []hotlog.SegmentInfo, mapEnd, nowMs, newHorizon int64) error {
	l := t.Log
	from, to := group[0].BaseOffset, group[len(group)-1].NextOffset
	txns, err := abortedTxns(t, from, to)
	if err != nil {
		return err
	}
	tr := newTxnTracker(txns)
	w, err := l.NewSegmentWriter(from)
	if err != nil {
		return err
	}
	rewritten, dropped, skipped := c.stats.BatchesRewritten, c.stats.RecordsDropped, c.skipped
	c.out = c.out[:0]
	flush := func() error {
		if len(c.out) == 0 {
			return nil
		}
		if err := w.Write(c.out); err != nil {
			return err
		}
		c.stats.BytesWritten += int64(len(c.out))
		err := c.throttle.wait(ctx, int64(len(c.out)))
		c.out = c.out[:0]
		return err
	}
	// Runs of superseded records are not read at all (the key map's
	// bitmaps); a transactional batch or a producer's last batch is never in
	// such a run, so the transaction tracker and the kept headers see every
	// batch they need.
	sk := &skipper{c: c, limit: min(to, mapEnd), until: -1}
	err = c.scanSkip(ctx, l, from, to, sk, func(h *hotlog.BatchHeader, batch []byte) (bool, error) {
		if err := c.filterBatch(t, tr, h, batch, mapEnd, nowMs, newHorizon); err != nil {
			return false, err
		}
		if int64(len(c.out)) >= c.cfg.ReadChunk {
			return true, flush()
		}
		return true, nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		w.Abort()
		return err
	}
	if len(group) == 1 && c.stats.BatchesRewritten == rewritten && c.stats.RecordsDropped == dropped &&
		c.skipped == skipped && w.Size() == group[0].Size {
		// Nothing changed and nothing merges: keep the segment as it is.
		w.Abort()
		c.stats.SegmentsUnchanged++
		return nil
	}
	old := make([]int64, len(group))
	for i, s := range group {
		old[i] = s.BaseOffset
	}
	if err := l.ReplaceSegments(old, w); err != nil {
		return fmt.Errorf("compaction: swap segments %v: %w", old, err)
	}
	c.stats.SegmentsBefore += len(group)
	c.stats.SegmentsAfter++
	return nil
}

// filterBatch appends what is left of one batch to c.out: the batch as it is
// if every record stays and nothing changes, a rewritten batch (same base
// offset, last offset delta, producer fields and codec; new record count,
// max timestamp and CRC) if some go, an empty header if all go but the batch
// is its producer's last, or nothing.
//
// Records at or past mapEnd (the part of the group's last segment the key
// map did not reach) are kept as they are, tombstones and markers included,
// whatever their horizon: the map does not know them, so dropping a
// tombstone there could bring back an older value of its key that this pass
// kept. Only aborted-transaction data goes there too.
func (c *Cleaner) filterBatch(t Target, tr *txnTracker, h *hotlog.BatchHeader, batch []byte, mapEnd, nowMs, newHorizon int64) error {
	hasHorizon := h.Attributes&attrDeleteHorizon != 0
	horizonPassed := hasHorizon && h.BaseTimestamp <= nowMs && h.LastOffset() < mapEnd
	var discardAll bool
	if h.IsControl() {
		typ, ok := c.controlKey(h, batch)
		discardAll = tr.onControl(h.ProducerID, h.LastOffset(), typ, ok) && horizonPassed && !c.remote
	} else {
		discardAll = tr.onData(h.ProducerID, h.IsTransactional(), h.LastOffset())
	}
	control := h.IsControl()
	om := c.omap
	if !control && !discardAll && h.NumRecords > 0 && h.LastOffset() < mapEnd && om.covers(h.BaseOffset, h.LastOffset()) {
		// Whole-batch decisions from the bitmaps, without decoding: every
		// record mapped and superseded (dropped), or every record mapped,
		// live and no tombstone and no reason to look (copied as it is).
		a, b := h.BaseOffset-om.base, h.LastOffset()-om.base
		if countRange(om.mapped, a, b) == int(h.NumRecords) {
			if countRange(om.dead, a, b) == int(b-a+1) {
				c.stats.RecordsRead += int64(h.NumRecords)
				c.stats.RecordsDropped += int64(h.NumRecords)
				c.stats.BatchesRewritten++
				c.keepProducerHeader(t, h, batch)
				return nil
			}
			if countRange(om.look, a, b) == 0 && om.countMappedDead(a, b) == 0 {
				c.stats.RecordsRead += int64(h.NumRecords)
				c.out = append(c.out, batch...)
				return nil
			}
		}
	}
	c.rec = c.rec[:0]
	kept, dropped := 0, 0
	needHorizon := false
	maxTs := int64(-1)
	// First walk: the records' fields, and the key digests of records the
	// bitmaps do not decide; then the map probes, together (they overlap);
	// then the decisions.
	c.recs = c.recs[:0]
	probes := false
	err := c.records(h, batch, func(rec *Record) error {
		ri := recInfo{framed: rec.Framed, tsDelta: rec.TimestampDelta, offset: h.BaseOffset + int64(rec.OffsetDelta),
			hasKey: rec.Key != nil, tombstone: rec.Value == nil, latest: -2}
		if ri.hasKey && !control && !discardAll {
			if r, ok := om.rel(ri.offset); ok && bitGet(om.mapped, r) {
				ri.latest = ri.offset // mapped: the latest unless superseded
				if bitGet(om.dead, r) {
					ri.latest++
				}
			} else {
				ri.digest = xxh3.Hash128(rec.Key)
				probes = true
			}
		}
		c.recs = append(c.recs, ri)
		return nil
	})
	if err != nil {
		return err
	}
	if probes {
		for i := range c.recs {
			if ri := &c.recs[i]; ri.hasKey && ri.latest == -2 {
				ri.latest = om.getHash(ri.digest)
			}
		}
	}
	// Decide, and collect kept records' framed bytes (with their original
	// timestamp deltas) in c.rec.
	for i := range c.recs {
		ri := &c.recs[i]
		c.stats.RecordsRead++
		keep := !discardAll
		beyond := ri.offset >= mapEnd
		if keep && !control && !beyond {
			if !ri.hasKey {
				keep = false // a compacted topic cannot hold keyless records (Kafka drops them)
			} else {
				// Remote logs (c.remote) keep transactional tombstones: the
				// key map leaves transactional data out there, so an
				// older value of the key may not be dropped.
				keep = ri.offset >= ri.latest && (!ri.tombstone || !horizonPassed || (c.remote && h.IsTransactional()))
				if keep && ri.tombstone {
					needHorizon = true
				}
			}
		}
		if control && keep && !beyond {
			needHorizon = true
		}
		if !keep {
			dropped++
			continue
		}
		kept++
		if ts := h.BaseTimestamp + ri.tsDelta; ts > maxTs {
			maxTs = ts
		}
		c.rec = append(c.rec, ri.framed...)
	}
	c.stats.RecordsDropped += int64(dropped)
	setHorizon := needHorizon && !hasHorizon
	// The pass notes when the log must be cleaned again for this batch: at
	// the horizon it sets now, or at the one it has if that is still ahead.
	// A horizon that has passed is not noted: the only records kept past
	// their horizon are markers whose transaction still has data here (a
	// tombstone past its horizon goes), and no pass at a set time can drop
	// those; one can only after their data went, and that data goes only
	// when newer records of its keys make the log dirty, so the next dirty
	// pass looks at them again. Noting the passed horizon made the Manager
	// clean the log again at once, and again after that, for ever
	// (TestKeptMarkerPastHorizonNotedNoMore).
	//
	// A remote pass never drops markers or transactional tombstones (see
	// above): their horizons would call for passes that drop nothing
	// (the broker's remote worker runs one when NextDeleteHorizon passes).
	if !c.remote || (!control && !h.IsTransactional()) {
		if setHorizon {
			c.noteHorizon(newHorizon)
		} else if needHorizon && h.BaseTimestamp > nowMs {
			c.noteHorizon(h.BaseTimestamp)
		}
	}
	if dropped == 0 && !setHorizon {
		c.out = append(c.out, batch...)
		return nil
	}
	c.stats.BatchesRewritten++
	if kept == 0 {
		c.keepProducerHeader(t, h, batch)
		return nil
	}
	baseTs := h.BaseTimestamp
	records := c.rec
	if setHorizon {
		// Re-encode with timestamp deltas from the horizon (KIP-534).
		var re []byte
		if err := decodeRecords(c.rec, int32(kept), h.LastOffsetDelta, func(r *Record) error {
			re = appendRecord(re, r, h.BaseTimestamp+r.TimestampDelta-newHorizon)
			return nil
		}); err != nil {
			return fmt.Errorf("compaction: re-reading kept records: %w", err)
		}
		records, baseTs = re, newHorizon
	}
	codec := h.Compression()
	payload := records
	if codec != codecNone {
		xerial := codec == codecSnappy && len(batch) >= headerSize+16 && string(batch[headerSize:headerSize+8]) == string(xerialPrefix)
		if c.cbuf, err = c.codecs.compress(codec, xerial, records, c.cbuf); err != nil {
			return fmt.Errorf("compaction: recompress: %w", err)
		}
		payload = c.cbuf
	}
	start := len(c.out)
	c.out = append(c.out, batch[:headerSize]...)
	c.out = append(c.out, payload...)
	nb := c.out[start:]
	be := binary.BigEndian
	be.PutUint32(nb[offBatchLength:], uint32(len(nb)-12))
	attrs := uint16(h.Attributes)
	if setHorizon {
		attrs |= attrDeleteHorizon
	}
	be.PutUint16(nb[offAttributes:], attrs)
	be.PutUint64(nb[offBaseTimestamp:], uint64(baseTs))
	if !h.LogAppendTime() && maxTs >= 0 {
		be.PutUint64(nb[offMaxTimestamp:], uint64(maxTs))
	}
	be.PutUint32(nb[offNumRecords:], uint32(kept))
	be.PutUint32(nb[offCRC:], crc32.Checksum(nb[offAttributes:], castagnoli))
	return nil
}

// keepProducerHeader keeps the header of a batch that lost every record if
// it is its producer's last batch.
func (c *Cleaner) keepProducerHeader(t Target, h *hotlog.BatchHeader, batch []byte) {
	if t.Txn != nil && h.ProducerID >= 0 {
		if last, ok := t.Txn.ProducerLastOffset(h.ProducerID); ok && last == h.LastOffset() {
			c.appendEmptyHeader(batch)
		}
	}
}

// appendEmptyHeader keeps a batch's header with no records (and no codec).
func (c *Cleaner) appendEmptyHeader(batch []byte) {
	start := len(c.out)
	c.out = append(c.out, batch[:headerSize]...)
	nb := c.out[start:]
	be := binary.BigEndian
	be.PutUint32(nb[offBatchLength:], uint32(headerSize-12))
	be.PutUint16(nb[offAttributes:], be.Uint16(nb[offAttributes:])&^attrCodecMask)
	be.PutUint32(nb[offNumRecords:], 0)
	be.PutUint32(nb[offCRC:], crc32.Checksum(nb[offAttributes:], castagnoli))
}

func (c *Cleaner) noteHorizon(ms int64) {
	if c.stats.NextDeleteHorizon < 0 || ms < c.stats.NextDeleteHorizon {
		c.stats.NextDeleteHorizon = ms
	}
}
