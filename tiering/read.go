package tiering

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/objectstore"
)

// ReadResult is a remote read: whole batches in chunk-cache files, as file
// regions the broker can sendfile (Region.File.Fd()) or copy. The chunks
// stay on disk until Release.
type ReadResult struct {
	Regions []hotlog.Region
	Size    int64
	// FirstOffset is the first batch's base offset (-1 if none); NextOffset
	// the offset to read next.
	FirstOffset, NextOffset int64

	cache    *chunkCache
	chunks   []*chunk
	released atomic.Bool
}

// Release lets go of the result's chunks. It may be called more than once.
func (r *ReadResult) Release() {
	if r == nil || !r.released.CompareAndSwap(false, true) {
		return
	}
	for _, ch := range r.chunks {
		r.cache.release(ch)
	}
	r.chunks = nil
}

// WriteTo copies the regions' bytes to w.
func (r *ReadResult) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for _, reg := range r.Regions {
		n, err := io.Copy(w, io.NewSectionReader(reg.File, reg.Pos, reg.Len))
		total += n
		if err != nil {
			return total, err
		}
		if n != reg.Len {
			return total, fmt.Errorf("tiering: region of %d bytes gave %d", reg.Len, n)
		}
	}
	return total, nil
}

// Bytes returns a copy of the result's bytes.
func (r *ReadResult) Bytes() ([]byte, error) {
	buf := make([]byte, 0, r.Size)
	w := &sliceWriter{buf}
	_, err := r.WriteTo(w)
	return w.b, err
}

type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// errRetry marks a read to try again with fresh state (a segment object or
// a cache file went bad under us).
var errRetry = errors.New("tiering: retry read")

// Read serves a read below the local log start from the bucket: whole
// batches starting with the one that holds offset (or, where compaction
// removed it, the first one after it, in the next segments if need be), up
// to maxBytes (at least one whole batch), never a batch at or past
// maxOffset, from one remote segment. An offset in the remote log past its
// last batch (a tail that compaction emptied) gets no batches and
// NextOffset = the remote end offset: the caller reads on from there (the
// local log). An offset outside the remote log is ErrOffsetOutOfRange; a
// read that cannot be served with checked bytes in time (ctx) fails with an
// error wrapping ErrUnavailable. The caller must Release the result.
func (p *Partition) Read(ctx context.Context, offset, maxBytes, maxOffset int64) (*ReadResult, error) {
	if maxBytes < 1 {
		maxBytes = 1
	}
	p.m.metrics.RemoteReads.Add(1)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		var st *remoteState
		var err error
		if attempt == 0 {
			st, err = p.current(ctx)
		} else {
			st, err = p.refresh(ctx)
		}
		if err != nil {
			p.m.metrics.ReadErrors.Add(1) // the state unreadable: a failed read too
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		res, err := p.read(ctx, st, offset, maxBytes, maxOffset)
		if err == nil {
			return res, nil
		}
		if !errors.Is(err, errRetry) {
			if errors.Is(err, ErrOffsetOutOfRange) || errors.Is(err, ErrClosed) {
				return nil, err
			}
			p.m.metrics.ReadErrors.Add(1)
			if errors.Is(err, ErrUnavailable) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		lastErr = err
	}
	p.m.metrics.ReadErrors.Add(1)
	return nil, fmt.Errorf("%w: %v", ErrUnavailable, lastErr)
}

func (p *Partition) read(ctx context.Context, st *remoteState, offset, maxBytes, maxOffset int64) (*ReadResult, error) {
	m := st.manifest
	if offset < m.StartOffset || offset >= m.EndOffset {
		return nil, fmt.Errorf("%w: %d not in the remote log [%d, %d)", ErrOffsetOutOfRange, offset, m.StartOffset, m.EndOffset)
	}
	res := &ReadResult{FirstOffset: -1, NextOffset: offset, cache: p.m.cache}
	if offset >= maxOffset {
		return res, nil
	}
	ok := false
	defer func() {
		if !ok {
			res.Release()
		}
	}()
	for i := m.find(offset); i >= 0 && i < len(m.Segments); i++ {
		found, err := p.readSegment(ctx, m, i, res, offset, maxBytes, maxOffset)
		if err != nil {
			return nil, err
		}
		if found {
			ok = true
			return res, nil
		}
	}
	// No batch at or after offset in the bucket, though offset is inside
	// the remote log: compaction emptied its end (the last segments, or
	// the last batches of the last one, or every segment). As a compacted
	// log's read does,
	// move on: nothing here, the next offset is the remote end, where the
	// local log goes on.
	res.NextOffset = m.EndOffset
	ok = true
	return res, nil
}

// readSegment fills res from seg; found is false if seg holds no batch at or
// after offset (a gap at its end).
func (p *Partition) readSegment(ctx context.Context, m *Manifest, i int, res *ReadResult, offset, maxBytes, maxOffset int64) (found bool, err error) {
	seg := &m.Segments[i]
	v := &segView{m: p.m, seg: seg, res: res, held: map[int]*chunk{}}
	defer v.releaseUnused()
	pos := int64(0)
	if last := p.lastRead.Load(); offset > seg.BaseOffset && last != nil && last.stem == seg.Stem && last.next == offset {
		pos = last.pos // a sequential reader: no index needed
	} else if offset > seg.BaseOffset {
		idx, err := p.m.offsetIndex(ctx, seg)
		if err != nil {
			return false, err
		}
		pos = idx.floor(offset - seg.BaseOffset)
	}
	first := int(pos / seg.ChunkSize)
	last := int(min(pos+maxBytes, seg.Size-1) / seg.ChunkSize)
	// A sequential reader (this read starts where the last one ended, or at
	// a segment's start) has a window of ReadAhead chunks from this read's
	// first one on, into the next segments, fetched as one stream of long
	// ranged GETs that this read's chunks are the start of.
	if p.lastReadEnd.Load() == offset || offset <= seg.BaseOffset {
		p.readAhead(m, i, first)
	}
	// Fetch what this read needs and the window does not hold, in parallel,
	// while the batches are walked.
	for c := first; c <= last; c++ {
		if _, err := v.chunk(ctx, c, false); err != nil {
			return false, err
		}
	}
	// Find the batch holding offset.
	var h hotlog.BatchHeader
	for ; pos < seg.Size; pos += h.Size() {
		if h, err = v.header(ctx, pos); err != nil {
			return false, err
		}
		if h.LastOffset() >= offset {
			break
		}
	}
	if pos >= seg.Size {
		return false, nil
	}
	start, end := pos, pos
	for end < seg.Size {
		h, err := v.header(ctx, end)
		if err != nil {
			return false, err
		}
		if h.BaseOffset >= maxOffset || (end > start && end+h.Size()-start > maxBytes) {
			break
		}
		if res.FirstOffset < 0 {
			res.FirstOffset = h.BaseOffset
		}
		end += h.Size()
		res.NextOffset = h.LastOffset() + 1
	}
	if end == start {
		return true, nil // the first batch reaches maxOffset
	}
	if err := v.regions(ctx, start, end); err != nil {
		return false, err
	}
	if !p.m.opts.SkipBatchCRC && v.recheck(start, end) {
		if err := v.verify(start, end); err != nil {
			return false, err
		}
	}
	p.lastReadEnd.Store(res.NextOffset)
	p.lastRead.Store(&readPos{stem: seg.Stem, next: res.NextOffset, pos: end})
	p.m.metrics.BytesServed.Add(res.Size)
	return true, nil
}

// readPos is where a remote read ended: the next offset and the position of
// the batch after the last one served, in segment stem.
type readPos struct {
	stem      string
	next, pos int64
}

// readAhead is a sequential reader's read-ahead: a window of ReadAhead
// chunks from the reader's position on (into the next segments) fetched by
// a stream of runs, each a run of consecutive chunks of one segment fetched
// with one ranged GET, at most ReadStreams at once. A run that ends starts
// the next one at once, so that the GETs follow each other without a gap
// while the window has room; a new run starts only once half of the window
// is left to fetch or when it reaches its segment's end, so that runs stay
// long (few requests per GB). The stream never fetches a chunk twice for
// one window: it goes on from its frontier (the first chunk it has not
// asked for), so chunks evicted before the reader got to them (a cache
// smaller than the windows) are the reader's to fetch, not a loop of GETs.
type readAhead struct {
	mu       sync.Mutex
	mf       *Manifest
	win      chunkPos // the window's first chunk (the reader's)
	next     chunkPos // the stream's frontier
	inflight int      // runs on their way
}

// chunkPos is chunk chk of segment seg of a manifest.
type chunkPos struct{ seg, chk int }

// readAhead moves p's window to chunk c of segment i of mf and fills it.
func (p *Partition) readAhead(mf *Manifest, i, c int) {
	a := &p.ahead
	a.mu.Lock()
	win := chunkPos{i, c}
	if a.mf != mf || win.seg > a.next.seg || win.seg == a.next.seg && win.chk > a.next.chk {
		a.next = win // a new manifest, or the reader passed the frontier
	}
	a.mf, a.win = mf, win
	a.mu.Unlock()
	p.fillWindow()
}

// fillWindow starts runs for the window's chunks past the frontier, up to
// ReadStreams on their way.
func (p *Partition) fillWindow() {
	m := p.m
	a := &p.ahead
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.mf != nil && a.inflight < m.opts.ReadStreams && !p.removed.Load() {
		run, ok, inWindow := m.nextRun(a.mf, a.win, a.next)
		if !inWindow {
			a.next = a.win // the frontier is past the window (the reader went back)
			continue
		}
		if !ok {
			return
		}
		if !m.prefetch(&a.mf.Segments[run.seg], run.from, run.to, p.runDone) {
			return
		}
		a.next = chunkPos{run.seg, run.to}
		a.inflight++
	}
}

// runDone ends a read-ahead run and starts the next, unless it failed: then
// the readers fetch the chunks it did not deliver one by one (with retries,
// and the error if that fails), and their next reads move the window on.
func (p *Partition) runDone(ok bool) {
	p.ahead.mu.Lock()
	p.ahead.inflight--
	p.ahead.mu.Unlock()
	if ok {
		p.fillWindow()
	}
}

// aheadRun is chunks [from, to) of segment seg.
type aheadRun struct{ seg, from, to int }

// nextRun finds the stream's next run in the window of ReadAhead chunks
// from win: from the first chunk at or past the frontier next that is
// neither cached nor on its way, up to the first present chunk, the
// segment's end or the window's end. ok is false if there is none, or if
// half of the window or more is behind it and it would stop before its
// segment's end (wait for a longer run). inWindow is false if next lies
// past the window's end.
func (m *Manager) nextRun(mf *Manifest, win, next chunkPos) (run aheadRun, ok, inWindow bool) {
	left := m.opts.ReadAhead
	have := 0
	for i, c := win.seg, win.chk; left > 0 && i < len(mf.Segments); i, c = i+1, 0 {
		s := &mf.Segments[i]
		n := s.numChunks()
		for ; left > 0 && c < n; c++ {
			if !inWindow && (i > next.seg || i == next.seg && c >= next.chk) {
				inWindow = true
			}
			if !inWindow || m.cache.has(chunkKey{s.Stem, c}) {
				have++
				left--
				continue
			}
			to := c
			for to < n && left > 0 && (to == c || !m.cache.has(chunkKey{s.Stem, to})) {
				to++
				left--
			}
			if have >= max(1, m.opts.ReadAhead/2) && to < n {
				return aheadRun{}, false, true
			}
			return aheadRun{i, c, to}, true, true
		}
	}
	// The window is all behind the frontier: fine if the frontier is just
	// past the window's end (or the log's), else it is further on.
	return aheadRun{}, false, inWindow || left == 0 && frontierAt(mf, win, next, m.opts.ReadAhead) || left > 0
}

// frontierAt says whether next is the chunk n chunks after win.
func frontierAt(mf *Manifest, win, next chunkPos, n int) bool {
	i, c := win.seg, win.chk
	for n > 0 && i < len(mf.Segments) {
		k := min(n, mf.Segments[i].numChunks()-c)
		n -= k
		c += k
		if c >= mf.Segments[i].numChunks() {
			i, c = i+1, 0
		}
	}
	if next.seg < len(mf.Segments) && next.chk >= mf.Segments[next.seg].numChunks() {
		next = chunkPos{next.seg + 1, 0}
	}
	return next == chunkPos{i, c}
}

// segView reads one segment's bytes through the chunk cache for one read.
type segView struct {
	m    *Manager
	seg  *SegmentMeta
	res  *ReadResult
	held map[int]*chunk // chunks this read holds a reference on
	used map[int]bool   // chunks in the result's regions
}

// chunk returns chunk c with a reference held by the view; with wait false it
// only starts the download.
func (v *segView) chunk(ctx context.Context, c int, wait bool) (*chunk, error) {
	for attempt := 0; ; attempt++ {
		ch, ok := v.held[c]
		if !ok {
			var err error
			if ch, err = v.m.request(ctx, v.seg, c); err != nil {
				return nil, err
			}
			v.held[c] = ch
		}
		if !wait {
			return ch, nil
		}
		select {
		case <-ch.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
		}
		if ch.err == nil {
			return ch, nil
		}
		delete(v.held, c)
		v.m.cache.release(ch)
		switch {
		case errors.Is(ch.err, errNotStarted) && attempt < 3:
			continue // joined a download that never started: ask for it ourselves
		case objectstore.IsNotExist(ch.err):
			return nil, fmt.Errorf("%w: %v", errRetry, ch.err)
		}
		return nil, ch.err
	}
}

// readAt reads len(p) bytes of the segment at pos.
func (v *segView) readAt(ctx context.Context, p []byte, pos int64) error {
	if pos < 0 || pos+int64(len(p)) > v.seg.Size {
		return fmt.Errorf("%w: read [%d, +%d) past %s's %d bytes", ErrCorruptObject, pos, len(p), v.seg.Stem, v.seg.Size)
	}
	for len(p) > 0 {
		c := int(pos / v.seg.ChunkSize)
		ch, err := v.chunk(ctx, c, true)
		if err != nil {
			return err
		}
		in := pos - int64(c)*v.seg.ChunkSize
		n := min(int64(len(p)), ch.size-in)
		if _, err := ch.file.ReadAt(p[:n], in); err != nil {
			return fmt.Errorf("tiering: read cache file: %w", err)
		}
		p, pos = p[n:], pos+n
	}
	return nil
}

// header parses the batch header at pos and checks that the batch fits.
func (v *segView) header(ctx context.Context, pos int64) (hotlog.BatchHeader, error) {
	var b [hotlog.BatchHeaderSize]byte
	if pos+int64(len(b)) > v.seg.Size {
		return hotlog.BatchHeader{}, fmt.Errorf("%w: %s: a header at %d passes the end", ErrCorruptObject, v.seg.Stem, pos)
	}
	if err := v.readAt(ctx, b[:], pos); err != nil {
		return hotlog.BatchHeader{}, err
	}
	h, err := hotlog.ParseBatchHeader(b[:])
	if err == nil && (pos+h.Size() > v.seg.Size || h.LastOffsetDelta < 0) {
		err = fmt.Errorf("%w: %s: the batch at %d passes the end", ErrCorruptObject, v.seg.Stem, pos)
	}
	if err != nil {
		return h, v.bad(pos, pos+hotlog.BatchHeaderSize, err)
	}
	return h, nil
}

// bad forgets the cache chunks under [from, to) so that the retry fetches
// them again.
func (v *segView) bad(from, to int64, err error) error {
	for c := int(from / v.seg.ChunkSize); int64(c)*v.seg.ChunkSize < to; c++ {
		if ch, ok := v.held[c]; ok {
			v.m.cache.forget(ch)
		}
	}
	v.m.metrics.CorruptReads.Add(1)
	return fmt.Errorf("%w: %v", errRetry, err)
}

// regions adds [start, end) to the result as regions of chunk files.
func (v *segView) regions(ctx context.Context, start, end int64) error {
	v.used = map[int]bool{}
	for pos := start; pos < end; {
		c := int(pos / v.seg.ChunkSize)
		ch, err := v.chunk(ctx, c, true)
		if err != nil {
			return err
		}
		in := pos - int64(c)*v.seg.ChunkSize
		n := min(end-pos, ch.size-in)
		v.res.Regions = append(v.res.Regions, hotlog.Region{File: ch.file, Pos: in, Len: n})
		v.res.Size += n
		v.used[c] = true
		pos += n
	}
	return nil
}

// recheck says whether a chunk under [start, end) is older than
// RecheckAfter (younger ones were checked against the manifest as they were
// written).
func (v *segView) recheck(start, end int64) bool {
	if v.m.opts.RecheckAfter < 0 {
		return true
	}
	limit := v.m.opts.Now().Add(-v.m.opts.RecheckAfter).UnixNano()
	for c := int(start / v.seg.ChunkSize); int64(c)*v.seg.ChunkSize < end; c++ {
		if ch, ok := v.held[c]; !ok || ch.born <= limit {
			return true
		}
	}
	return false
}

// verify checks the CRC-32C of every batch in [start, end).
func (v *segView) verify(start, end int64) error {
	buf := make([]byte, 0, 256<<10)
	for pos := start; pos < end; {
		h, err := v.header(context.Background(), pos)
		if err != nil {
			return err
		}
		crc := uint32(0)
		for at := pos + 21; at < pos+h.Size(); {
			n := min(int64(cap(buf)), pos+h.Size()-at)
			if err := v.readAt(context.Background(), buf[:n], at); err != nil {
				return err
			}
			crc = crc32.Update(crc, castagnoli, buf[:n])
			at += n
		}
		if crc != h.CRC {
			return v.bad(pos, pos+h.Size(), fmt.Errorf("%w: %s: batch at %d fails its CRC", ErrCorruptObject, v.seg.Stem, pos))
		}
		pos += h.Size()
	}
	return nil
}

// releaseUnused hands the chunks in the regions to the result and releases
// the others.
func (v *segView) releaseUnused() {
	for c, ch := range v.held {
		if v.used != nil && v.used[c] {
			v.res.chunks = append(v.res.chunks, ch)
		} else {
			v.m.cache.release(ch)
		}
	}
	v.held = map[int]*chunk{}
}

// offsetIndex returns seg's offset index (nil if it has none), cached in
// memory.
func (m *Manager) offsetIndex(ctx context.Context, seg *SegmentMeta) (offsetIndex, error) {
	if seg.IndexSize == 0 {
		return nil, nil
	}
	if x, ok := m.indexes.get(seg.Stem); ok {
		return x, nil
	}
	b, err := objectstore.ReadAll(ctx, m.store, seg.Stem+SuffixIndex, seg.IndexSize)
	if err != nil {
		if objectstore.IsNotExist(err) {
			return nil, fmt.Errorf("%w: %v", errRetry, err)
		}
		return nil, err
	}
	x, err := decodeOffsetIndex(b, seg.Size, seg.EndOffset-seg.BaseOffset)
	if err != nil || int64(len(b)) != seg.IndexSize {
		// A bad index costs a longer scan, never wrong bytes.
		m.opts.Logger.Warn("tiering: bad remote offset index; scanning the segment", "stem", seg.Stem, "err", err)
		m.metrics.CorruptReads.Add(1)
		x = nil
	}
	m.indexes.put(seg.Stem, x)
	return x, nil
}

// indexCache is a small LRU of decoded offset indexes.
type indexCache struct {
	mu      sync.Mutex
	max     int
	lru     *list.List
	entries map[string]*list.Element
}

type indexCacheEntry struct {
	stem string
	x    offsetIndex
}

func (c *indexCache) get(stem string) (offsetIndex, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[stem]; ok {
		c.lru.MoveToFront(e)
		return e.Value.(*indexCacheEntry).x, true
	}
	return nil, false
}

func (c *indexCache) put(stem string, x offsetIndex) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries, c.lru = map[string]*list.Element{}, list.New()
	}
	if _, ok := c.entries[stem]; ok {
		return
	}
	c.entries[stem] = c.lru.PushFront(&indexCacheEntry{stem, x})
	for c.lru.Len() > c.max {
		e := c.lru.Back()
		c.lru.Remove(e)
		delete(c.entries, e.Value.(*indexCacheEntry).stem)
	}
}
