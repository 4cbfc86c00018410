package hotlog

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sediment-io/sediment/internal/vfs"
)

// File name suffixes in a partition directory.
const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	txnIndexSuffix  = ".txnindex" // see txnindex.go
	snapshotSuffix  = ".snapshot"
	deletedSuffix   = ".deleted"
	tmpSuffix       = ".tmp"

	cleanShutdownFile   = "clean-shutdown"
	epochCheckpointFile = "leader-epoch-checkpoint"
	logStartOffsetFile  = "log-start-offset-checkpoint"
	maxIndexFileBytes   = 64 << 20 // refuse larger index files as damaged
)

// baseName is a segment's base offset as Kafka names it: 20 digits.
func baseName(base int64) string { return fmt.Sprintf("%020d", base) }

// parseBaseName parses "00000000000000000042.log" style names: the 20-digit
// base offset and the suffix.
func parseBaseName(name string) (base int64, suffix string, ok bool) {
	if len(name) < 21 || name[20] != '.' {
		return 0, "", false
	}
	for _, c := range name[:20] {
		if c < '0' || c > '9' {
			return 0, "", false
		}
	}
	v, err := strconv.ParseInt(name[:20], 10, 64)
	if err != nil {
		return 0, "", false
	}
	return v, name[20:], true
}

// segment is one .log file with its indexes. A segment is shared by the log's
// segment set and by readers; refs counts them, and the files are closed (and,
// if the segment was deleted, removed) when it drops to zero.
type segment struct {
	fs   vfs.FS
	dir  string
	base int64

	refs    atomic.Int64
	deleted atomic.Bool // remove the (renamed) files when refs reaches zero

	// size is the number of bytes readers may see; -1 until known (sealed
	// segments are stat'ed on first use).
	size atomic.Int64

	mu sync.Mutex // guards the lazily loaded state below
	// file is the .log file: the append handle of the active segment, or a
	// read-only handle opened on first use.
	file   vfs.File
	loaded bool        // idx and tidx are loaded
	idx    offsetIndex // never changed in place once readers may hold it
	tidx   timeIndex
	maxTs  int64 // max timestamp (-1 none); valid when maxTsKnown
	// maxTsKnown survives the eviction of idx and tidx from the cache.
	maxTsKnown bool
	// active is set while this is the log's active segment, whose indexes are
	// never evicted.
	active atomic.Bool
	cache  *indexCache
	// relLimit bounds relative offsets for index validation (-1: unknown).
	relLimit int64
	// txns is the transaction index (copy-on-write; see txnindex.go), valid
	// when txnsLoaded. It is small and never evicted.
	txns       []AbortedTxn
	txnsLoaded bool
	// renamed is set once the files were renamed with delSuffix.
	renamed atomic.Bool
	// Set by Log.retireLocked before the files are renamed (and so before
	// renamed and deleted are stored): the log's deleter, the suffix the
	// files take (.deleted or .<n>.deleted), and the time from which they
	// may be removed (zero: at the last release). See deleter.go.
	del       *deleter
	delSuffix string
	deleteAt  time.Time
}

func newSegment(fs vfs.FS, dir string, base int64, cache *indexCache) *segment {
	s := &segment{fs: fs, dir: dir, base: base, maxTs: -1, relLimit: -1, cache: cache}
	s.refs.Store(1)
	s.size.Store(-1)
	return s
}

func (s *segment) path(suffix string) string {
	p := filepath.Join(s.dir, baseName(s.base)+suffix)
	if s.renamed.Load() {
		p += s.delSuffix
	}
	return p
}

// tryRef takes a reference unless the segment is already released.
func (s *segment) tryRef() bool {
	for {
		r := s.refs.Load()
		if r <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// unref drops a reference; the last one closes the file and hands a deleted
// segment to its log's deleter, which removes its files now (no delay) or when
// the delay has passed (deleter.go).
func (s *segment) unref() {
	if s.refs.Add(-1) != 0 {
		return
	}
	s.mu.Lock()
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
	s.mu.Unlock()
	if s.deleted.Load() {
		s.del.released(s)
	}
}

// logFile returns the .log file, opening it if needed.
func (s *segment) logFile() (vfs.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logFileLocked()
}

func (s *segment) logFileLocked() (vfs.File, error) {
	if s.file != nil {
		return s.file, nil
	}
	f, err := s.fs.Open(s.path(logSuffix))
	if err != nil {
		return nil, err
	}
	s.file = f
	return f, nil
}

// visibleSize returns the bytes readers may read, stat'ing a sealed segment on
// first use.
func (s *segment) visibleSize() (int64, error) {
	if n := s.size.Load(); n >= 0 {
		return n, nil
	}
	f, err := s.logFile()
	if err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	s.size.CompareAndSwap(-1, st.Size())
	return s.size.Load(), nil
}

// indexes returns the segment's indexes and max timestamp, loading and
// checking a sealed segment's files on first use and rebuilding them from the
// log if they are missing or damaged.
func (s *segment) indexes(interval int) (offsetIndex, timeIndex, int64, error) {
	s.mu.Lock()
	if s.loaded {
		idx, tidx, maxTs := s.idx, s.tidx, s.maxTs
		s.mu.Unlock()
		return idx, tidx, maxTs, nil
	}
	s.mu.Unlock()
	size, err := s.visibleSize()
	if err != nil {
		return nil, nil, -1, err
	}
	s.mu.Lock()
	if s.loaded {
		idx, tidx, maxTs := s.idx, s.tidx, s.maxTs
		s.mu.Unlock()
		return idx, tidx, maxTs, nil
	}
	idx, tidx, maxTs, rebuilt, err := s.loadLocked(size, interval)
	if err != nil {
		s.mu.Unlock()
		return nil, nil, -1, err
	}
	s.idx, s.tidx, s.maxTs, s.loaded, s.maxTsKnown = idx, tidx, maxTs, true, true
	if rebuilt && !s.renamed.Load() {
		// Best effort: write the rebuilt files so the next open need not
		// scan. Under s.mu, which the log takes to rename a segment's files
		// away (renameFilesLocked): a compaction's swap must not find its
		// new segment's index overwritten by this old one's.
		writeIndexFile(s.fs, s.path(indexSuffix), idx)
		writeIndexFile(s.fs, s.path(timeIndexSuffix), tidx)
	}
	s.mu.Unlock()
	s.cache.add(s, len(idx)+len(tidx))
	return idx, tidx, maxTs, nil
}

// loadLocked reads and checks the index files, or rebuilds them from the log.
func (s *segment) loadLocked(size int64, interval int) (offsetIndex, timeIndex, int64, bool, error) {
	idx, ierr := vfs.ReadFile(s.fs, s.path(indexSuffix), maxIndexFileBytes)
	tidx, terr := vfs.ReadFile(s.fs, s.path(timeIndexSuffix), maxIndexFileBytes)
	ok := ierr == nil && terr == nil && validOffsetIndex(idx, size, s.relLimit) && validTimeIndex(tidx, s.relLimit)
	if ok && size > 0 && len(tidx) == 0 {
		// A sealed segment has a final time index entry unless every
		// timestamp is negative; rebuild to be sure.
		ok = false
	}
	if ok {
		maxTs := int64(-1)
		if ts, _, has := timeIndex(tidx).last(); has {
			maxTs = ts
		}
		return idx, tidx, maxTs, false, nil
	}
	f, err := s.logFileLocked()
	if err != nil {
		return nil, nil, -1, false, err
	}
	b, _, err := scanSegment(f, s.base, size, interval, false, nil)
	if err != nil {
		return nil, nil, -1, false, err
	}
	b.appendTime()
	return b.idx, b.tidx, b.maxTs, true, nil
}

// evict drops the loaded indexes (not of the active segment).
func (s *segment) evict() {
	s.mu.Lock()
	if !s.active.Load() {
		s.idx, s.tidx, s.loaded = nil, nil, false
	}
	s.mu.Unlock()
}

// maxTimestamp is the segment's max timestamp. If it was never known it reads
// just the last time index entry (a sealed segment's max timestamp), and
// loads (or rebuilds) the indexes only if that file looks wrong.
func (s *segment) maxTimestamp(interval int) (int64, error) {
	s.mu.Lock()
	if s.maxTsKnown {
		ts := s.maxTs
		s.mu.Unlock()
		return ts, nil
	}
	if ts, ok := s.lastTimeEntryLocked(); ok {
		s.maxTs, s.maxTsKnown = ts, true
		s.mu.Unlock()
		return ts, nil
	}
	s.mu.Unlock()
	_, _, ts, err := s.indexes(interval)
	return ts, err
}

// lastTimeEntryLocked reads the last entry of the .timeindex file.
func (s *segment) lastTimeEntryLocked() (int64, bool) {
	f, err := s.fs.Open(s.path(timeIndexSuffix))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 || st.Size()%timeIndexEntrySize != 0 || st.Size() > maxIndexFileBytes {
		return 0, false
	}
	var e [timeIndexEntrySize]byte
	if _, err := f.ReadAt(e[:], st.Size()-timeIndexEntrySize); err != nil {
		return 0, false
	}
	ts, _ := timeIndex(e[:]).entry(0)
	return ts, ts >= 0
}

// indexCache bounds the memory held by the loaded indexes of sealed segments:
// past maxBytes, the least recently loaded are dropped (and read again from
// their files when next needed). Readers that hold an index slice keep it.
type indexCache struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	entries  []cacheEntry // load order, oldest first
}

type cacheEntry struct {
	seg   *segment
	bytes int
}

const defaultIndexCacheBytes = 64 << 20

// add records that s loaded n bytes of indexes, and evicts the oldest others
// while the cache is over its budget. The caller must not hold s.mu.
func (c *indexCache) add(s *segment, n int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.entries = append(c.entries, cacheEntry{s, n})
	c.bytes += n
	var evict []*segment
	for c.bytes > c.maxBytes && len(c.entries) > 1 {
		e := c.entries[0]
		c.entries = c.entries[1:]
		c.bytes -= e.bytes
		evict = append(evict, e.seg)
	}
	c.mu.Unlock()
	for _, e := range evict {
		e.evict()
	}
}

// writeIndexFile writes an index file whole or not at all: a crash while it
// is written must not leave a prefix, which checks out as a valid index (a
// time index without its last entry understates the segment's max timestamp,
// so time retention would delete it early). The data is written to a .tmp
// file (Open removes leftovers), synced and renamed over name. The directory
// is not synced: a rename lost in a crash leaves the old file or none, and a
// missing index is rebuilt from the log.
func writeIndexFile(fs vfs.FS, name string, data []byte) error {
	return vfs.WriteFileReplace(fs, name, data)
}

// readHeader reads the batch header at pos of f, which has size bytes, and
// checks that the whole batch fits.
func readHeader(f vfs.File, pos, size int64, buf *[BatchHeaderSize]byte) (BatchHeader, error) {
	if pos+BatchHeaderSize > size {
		return BatchHeader{}, fmt.Errorf("%w: header at %d past the end %d", ErrCorruptBatch, pos, size)
	}
	if _, err := f.ReadAt(buf[:], pos); err != nil {
		return BatchHeader{}, err
	}
	h, err := ParseBatchHeader(buf[:])
	if err != nil {
		return h, err
	}
	if pos+h.Size() > size {
		return h, fmt.Errorf("%w: batch at %d of %d bytes passes the end %d", ErrCorruptBatch, pos, h.Size(), size)
	}
	return h, nil
}

// scanSegment reads the batch headers of f from the start to size and builds
// its indexes. With checkCRC it also verifies every batch's CRC and header and
// stops at the first bad or torn batch instead of failing: valid is then the
// length of the good prefix. Without checkCRC a bad header is an error.
// onBatch, if set, sees every good batch.
func scanSegment(f vfs.File, base, size int64, interval int, checkCRC bool, onBatch func(*BatchHeader)) (b *indexBuilder, valid int64, err error) {
	b = newIndexBuilder(base, interval)
	var hbuf [BatchHeaderSize]byte
	var crcBuf []byte
	if checkCRC {
		crcBuf = make([]byte, 256<<10)
	}
	next := base
	for pos := int64(0); pos < size; {
		h, err := readHeader(f, pos, size, &hbuf)
		if err == nil {
			err = checkHeader(&h, false)
		}
		if err == nil && (h.BaseOffset < next || h.LastOffset()-base > 1<<31-1) {
			err = fmt.Errorf("%w: batch at %d has base offset %d, expected at least %d", ErrCorruptBatch, pos, h.BaseOffset, next)
		}
		if err == nil && checkCRC {
			err = checkCRCAt(f, pos, &h, crcBuf)
		}
		if err != nil {
			if checkCRC && (errors.Is(err, ErrCorruptBatch) || errors.Is(err, ErrInvalidRecord) || errors.Is(err, io.EOF)) {
				return b, pos, nil
			}
			return nil, pos, err
		}
		b.add(&h, pos)
		if onBatch != nil {
			onBatch(&h)
		}
		next = h.LastOffset() + 1
		pos += h.Size()
	}
	return b, size, nil
}

// checkCRCAt computes the CRC-32C of the batch at pos in chunks of buf.
func checkCRCAt(f vfs.File, pos int64, h *BatchHeader, buf []byte) error {
	crc := uint32(0)
	end := pos + h.Size()
	for p := pos + offAttributes; p < end; {
		n := int64(len(buf))
		if end-p < n {
			n = end - p
		}
		if _, err := f.ReadAt(buf[:n], p); err != nil {
			return err
		}
		crc = crc32.Update(crc, castagnoli, buf[:n])
		p += n
	}
	if crc != h.CRC {
		return fmt.Errorf("%w: CRC mismatch at %d", ErrCorruptBatch, pos)
	}
	return nil
}

// isSegmentFile reports whether name belongs to a segment (by suffix).
func isSegmentFile(suffix string) bool {
	switch suffix {
	case logSuffix, indexSuffix, timeIndexSuffix, txnIndexSuffix:
		return true
	}
	return false
}

func hasAnySuffix(name string, suffixes ...string) bool {
	for _, s := range suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}
