package tiering

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/objectstore"
)

// chunkKey names one chunk of one segment's .log object.
type chunkKey struct {
	stem  string
	index int
}

// chunk is a cache entry: a file holding one downloaded, checked chunk.
type chunk struct {
	key   chunkKey
	ready chan struct{} // closed when the download ended (err says how)
	err   error
	file  vfs.File
	path  string
	size  int64
	born  int64 // Options.Now in unix nanos when the download ended

	// guarded by chunkCache.mu
	refs    int
	evicted bool
	elem    *list.Element
}

// chunkCache is a bounded LRU of chunk files on local disk. Entries in use
// by readers (refs > 0) are never closed or removed: eviction takes them out
// of the index and the file goes when the last reader releases it.
type chunkCache struct {
	fs      vfs.FS
	dir     string
	max     int64
	metrics *Metrics
	now     func() time.Time

	mu struct {
		sync.Mutex
		entries map[chunkKey]*chunk
		lru     *list.List // front: most recently used; only ready, good chunks
		bytes   int64
		seq     int64
		closed  bool
	}
}

func newChunkCache(fs vfs.FS, dir string, max int64, m *Metrics, now func() time.Time) (*chunkCache, error) {
	if err := fs.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("tiering: empty chunk cache %s: %w", dir, err)
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tiering: chunk cache %s: %w", dir, err)
	}
	c := &chunkCache{fs: fs, dir: dir, max: max, metrics: m, now: now}
	c.mu.entries = map[chunkKey]*chunk{}
	c.mu.lru = list.New()
	return c, nil
}

// lookup returns the entry for key with a reference taken, creating it if
// missing (created says so: the caller must then start its download).
// With ref false no reference is taken (prefetch).
func (c *chunkCache) lookup(key chunkKey, ref bool) (ch *chunk, created bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, false, ErrClosed
	}
	if ch, ok := c.mu.entries[key]; ok {
		if ref {
			ch.refs++
		}
		if ch.elem != nil {
			c.mu.lru.MoveToFront(ch.elem)
		}
		return ch, false, nil
	}
	c.mu.seq++
	ch = &chunk{key: key, ready: make(chan struct{}), path: filepath.Join(c.dir, fmt.Sprintf("%016x.chunk", c.mu.seq))}
	if ref {
		ch.refs = 1
	}
	c.mu.entries[key] = ch
	return ch, true, nil
}

// done records the end of ch's download.
func (c *chunkCache) done(ch *chunk, file vfs.File, size int64, err error) {
	c.mu.Lock()
	ch.file, ch.size, ch.err = file, size, err
	ch.born = c.now().UnixNano()
	if err != nil || c.mu.closed || ch.evicted {
		if c.mu.entries[ch.key] == ch {
			delete(c.mu.entries, ch.key)
		}
		ch.evicted = true
		if ch.err == nil {
			ch.err = ErrClosed
		}
		if ch.refs == 0 {
			c.dropLocked(ch)
		}
	} else {
		ch.elem = c.mu.lru.PushFront(ch)
		c.mu.bytes += size
		c.evictLocked()
	}
	c.mu.Unlock()
	close(ch.ready)
}

// has says whether key is cached or on its way.
func (c *chunkCache) has(key chunkKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.mu.entries[key]
	return ok
}

// forget takes ch out of the cache (a bad cache file, a failed request).
func (c *chunkCache) forget(ch *chunk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(ch)
}

func (c *chunkCache) removeLocked(ch *chunk) {
	if c.mu.entries[ch.key] == ch {
		delete(c.mu.entries, ch.key)
	}
	if ch.elem != nil {
		c.mu.lru.Remove(ch.elem)
		ch.elem = nil
		c.mu.bytes -= ch.size
	}
	if !ch.evicted {
		ch.evicted = true
		if ch.refs == 0 {
			c.dropLocked(ch)
		}
	}
}

func (c *chunkCache) evictLocked() {
	for c.mu.bytes > c.max {
		back := c.mu.lru.Back()
		if back == nil {
			return
		}
		c.removeLocked(back.Value.(*chunk))
		c.metrics.CacheEvictions.Add(1)
	}
}

// dropLocked closes and removes an evicted chunk's file (refs == 0).
func (c *chunkCache) dropLocked(ch *chunk) {
	if ch.file != nil {
		ch.file.Close()
		c.fs.Remove(ch.path)
		ch.file = nil
	}
}

// release drops a reference taken by lookup.
func (c *chunkCache) release(ch *chunk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch.refs--
	if ch.refs == 0 && ch.evicted {
		c.dropLocked(ch)
	}
}

// close removes every file not in use.
func (c *chunkCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.closed = true
	for _, ch := range c.mu.entries {
		select {
		case <-ch.ready:
			c.removeLocked(ch)
		default:
		}
	}
	return nil
}

// Bytes is the size of the cached chunks.
func (c *chunkCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.bytes
}

// errNotStarted ends a download that never started (a prefetch that found
// the pool busy, a request whose context ended in the queue); a reader that
// joined it asks again.
var errNotStarted = errors.New("tiering: prefetch skipped")

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// download fetches chunk ch of seg into a new cache file, checking it against
// the manifest's chunk CRC; a mismatch or a cut transfer is retried twice.
func (m *Manager) download(ctx context.Context, seg *SegmentMeta, ch *chunk) (vfs.File, int64, error) {
	off := int64(ch.key.index) * seg.ChunkSize
	length := min(seg.ChunkSize, seg.Size-off)
	want, ok := seg.chunkCRC(ch.key.index)
	if !ok || length <= 0 {
		return nil, 0, fmt.Errorf("%w: chunk %d of %s", ErrCorruptObject, ch.key.index, seg.Stem)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if ctx.Err() != nil {
			break
		}
		rc, err := m.openRange(ctx, seg, off, length)
		if err != nil {
			if objectstore.IsNotExist(err) || errors.Is(err, ErrCorruptObject) {
				return nil, 0, err // a missing object, or one that is not the manifest's size
			}
			lastErr = err
			continue
		}
		f, err := m.cache.fs.Create(ch.path)
		if err != nil {
			rc.Close()
			return nil, 0, err
		}
		h := crc32.New(castagnoli)
		buf := copyBuffers.Get().(*[]byte)
		n, err := io.CopyBuffer(io.MultiWriter(f, h), rc, *buf)
		copyBuffers.Put(buf)
		rc.Close()
		m.metrics.BytesDownloaded.Add(n)
		if err == nil && n != length {
			err = fmt.Errorf("%w: chunk %d of %s: %d bytes, want %d", ErrCorruptObject, ch.key.index, seg.Stem, n, length)
		}
		if err == nil && h.Sum32() != want {
			m.metrics.CorruptChunks.Add(1)
			err = fmt.Errorf("%w: chunk %d of %s: CRC32C %08x, the manifest says %08x", ErrCorruptObject, ch.key.index, seg.Stem, h.Sum32(), want)
		}
		if err == nil {
			return f, length, nil
		}
		f.Close()
		m.cache.fs.Remove(ch.path)
		lastErr = err
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	return nil, 0, lastErr
}

// prefetch starts the download of chunks [from, to) of seg, up to the first
// one already cached or on its way, as one run (one ranged GET for many
// chunks: fewer requests per GB, and on a busy store one long stream beats
// many short ones). It never blocks: if the pool is busy the run is
// skipped, and a reader that needs one of its chunks asks for it itself.
// It reports whether a run was started; done, if not nil, is called when
// that run ends, with whether it delivered all its chunks.
func (m *Manager) prefetch(seg *SegmentMeta, from, to int, done func(ok bool)) bool {
	var run []*chunk
	for c := from; c < to; c++ {
		ch, created, err := m.cache.lookup(chunkKey{seg.Stem, c}, false)
		if err != nil || !created {
			break
		}
		m.metrics.CacheMisses.Add(1)
		run = append(run, ch)
	}
	if len(run) == 0 {
		return false
	}
	segCopy := *seg
	job := func() {
		ok := m.downloadRun(&segCopy, run)
		if done != nil {
			done(ok)
		}
	}
	select {
	case m.jobs <- job:
		m.metrics.Prefetches.Add(int64(len(run)))
		return true
	default:
		for _, ch := range run {
			m.cache.done(ch, nil, 0, errNotStarted)
		}
		return false
	}
}

// downloadRun fetches consecutive chunks of seg with one ranged GET, each
// into its cache file and checked against the manifest's chunk CRC as it
// arrives, so that a reader waiting for the first chunk of the run does not
// wait for the others. If anything fails, the chunks not yet done end with
// errNotStarted: a reader that needs one fetches it alone (download, with its
// own retries). It reports whether every chunk was delivered.
func (m *Manager) downloadRun(seg *SegmentMeta, chs []*chunk) bool {
	ctx, cancel := context.WithTimeout(m.ctx, m.opts.ReadTimeout*time.Duration(len(chs)))
	defer cancel()
	next := 0
	defer func() {
		for _, ch := range chs[next:] {
			m.cache.done(ch, nil, 0, errNotStarted)
		}
	}()
	if len(chs) == 1 {
		f, size, err := m.download(ctx, seg, chs[0])
		m.cache.done(chs[0], f, size, err)
		next = 1
		return err == nil
	}
	first, last := int64(chs[0].key.index), int64(chs[len(chs)-1].key.index)
	if last-first+1 != int64(len(chs)) {
		return false
	}
	off, end := first*seg.ChunkSize, min((last+1)*seg.ChunkSize, seg.Size)
	if off >= end {
		return false
	}
	rc, err := m.openRange(ctx, seg, off, end-off)
	if err != nil {
		return false
	}
	defer rc.Close()
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	for ; next < len(chs); next++ {
		ch := chs[next]
		length := min(seg.ChunkSize, seg.Size-int64(ch.key.index)*seg.ChunkSize)
		want, ok := seg.chunkCRC(ch.key.index)
		if !ok {
			return false
		}
		f, err := m.cache.fs.Create(ch.path)
		if err != nil {
			return false
		}
		h := crc32.New(castagnoli)
		n, err := io.CopyBuffer(io.MultiWriter(f, h), io.LimitReader(rc, length), *buf)
		m.metrics.BytesDownloaded.Add(n)
		if err == nil && (n != length || h.Sum32() != want) {
			if n == length {
				m.metrics.CorruptChunks.Add(1)
			}
			err = ErrCorruptObject
		}
		if err != nil {
			f.Close()
			m.cache.fs.Remove(ch.path)
			return false
		}
		m.cache.done(ch, f, length, nil)
	}
	return true
}

// openRange streams [off, off+length) of seg's .log object with one ranged
// GET (objectstore.OpenRange: no HEAD first on s3). An object that is not
// the manifest's size is ErrCorruptObject.
func (m *Manager) openRange(ctx context.Context, seg *SegmentMeta, off, length int64) (io.ReadCloser, error) {
	key := seg.Stem + SuffixLog
	rc, size, err := objectstore.OpenRange(ctx, m.store, key, off, length)
	if errors.Is(err, objectstore.ErrOutOfRange) {
		return nil, fmt.Errorf("%w: %s: [%d, +%d) is past its end, the manifest says %d bytes: %v", ErrCorruptObject, key, off, length, seg.Size, err)
	}
	if err != nil {
		return nil, err
	}
	if size != seg.Size {
		rc.Close()
		return nil, fmt.Errorf("%w: %s is %d bytes, the manifest says %d", ErrCorruptObject, key, size, seg.Size)
	}
	return rc, nil
}

// request makes sure chunk index of seg is cached or on its way and returns
// the entry with a reference (wait for it, then release it). Prefetches go
// through prefetch instead.
func (m *Manager) request(ctx context.Context, seg *SegmentMeta, index int) (*chunk, error) {
	ch, created, err := m.cache.lookup(chunkKey{seg.Stem, index}, true)
	if err != nil {
		return nil, err
	}
	if !created {
		m.metrics.CacheHits.Add(1)
		return ch, nil
	}
	m.metrics.CacheMisses.Add(1)
	segCopy := *seg
	job := func() {
		dctx, cancel := context.WithTimeout(m.ctx, m.opts.ReadTimeout)
		defer cancel()
		f, size, err := m.download(dctx, &segCopy, ch)
		m.cache.done(ch, f, size, err)
	}
	select {
	case m.jobs <- job:
		return ch, nil
	case <-ctx.Done():
		m.cache.done(ch, nil, 0, errNotStarted)
		m.cache.release(ch)
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
	case <-m.ctx.Done():
		m.cache.done(ch, nil, 0, ErrClosed)
		m.cache.release(ch)
		return nil, ErrClosed
	}
}
