package hotlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"strings"

	"github.com/sediment-io/sediment/internal/vfs"
)

// Replacing sealed segments (the log cleaner's swap).
//
// The cleaner writes one replacement segment for a run of adjacent sealed
// segments (a "group") with a SegmentWriter, then calls ReplaceSegments. On
// disk the protocol is Kafka's .cleaned/.swap protocol, with the swap made a
// single atomic step:
//
//  1. <base>.log.cleaned, .index.cleaned, .timeindex.cleaned are written and
//     synced, and the directory is synced (a crash now: Open removes them;
//     the old segments stay).
//  2. The commit point: <base>.swap is written atomically (tmp, sync, rename,
//     directory sync). It holds the range [base, end) it replaces:
//
//     "SWAP" | version uint8 (1) | base int64 | end int64 |
//     new size int64 | new crc32c uint32 | crc32c of the above uint32
//
//  3. The old segments' files are renamed to *.deleted, the .cleaned files are
//     renamed to their final names, the directory is synced, the marker is
//     removed.
//
// Open completes a swap whose marker it finds (roll forward): if the .cleaned
// log file is still there, every segment file with a base in [base, end) is
// removed and the .cleaned files are renamed in; if it is gone and the file
// <base>.log has the marker's size and CRC, the rename already happened and
// only the old segments in (base, end) left over are removed; if neither, the
// marker is stale (a marker write that failed after its rename, the .cleaned
// files then dropped) and is removed, the old segments standing. Without a
// marker, .cleaned files are removed (roll back). So after a crash the
// directory holds either all the old segments of the group or the new one,
// never a mix. A failed marker write is taken back (removed, directory
// synced) before the .cleaned files are dropped; if that fails too the log
// fails and Open decides.
//
// Step 1 (the new segment's fsyncs) runs before the append lock is taken;
// steps 2 and 3 under it. Readers are safe: ReplaceSegments swaps the
// copy-on-write segment set under the append lock, and readers holding old
// segments keep reading them (their files are opened, and their indexes
// loaded, before the rename) until they release them. The *.deleted files are
// removed file.delete.delay.ms after the swap, and not before the last reader
// released them (deleter.go).

const (
	cleanedSuffix = ".cleaned"
	swapSuffix    = ".swap"
	swapMagic     = "SWAP"
	swapFileSize  = 4 + 1 + 8 + 8 + 8 + 4 + 4
)

// swapMarker is the content of a <base>.swap file: the range [Base, End) it
// replaces and the new segment's size and CRC-32C, by which Open recognises
// the new file once the .cleaned one was renamed.
type swapMarker struct {
	Base, End int64
	Size      int64
	CRC       uint32
}

// ErrSegmentsChanged is returned by ReplaceSegments when the segments to
// replace are no longer the log's (deleted by retention, truncated, or
// replaced meanwhile). Nothing was changed; the caller starts over.
var ErrSegmentsChanged = errors.New("hotlog: segments to replace changed")

func encodeSwap(m swapMarker) []byte {
	b := make([]byte, 0, swapFileSize)
	b = append(b, swapMagic...)
	b = append(b, 1)
	b = binary.BigEndian.AppendUint64(b, uint64(m.Base))
	b = binary.BigEndian.AppendUint64(b, uint64(m.End))
	b = binary.BigEndian.AppendUint64(b, uint64(m.Size))
	b = binary.BigEndian.AppendUint32(b, m.CRC)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeSwap(b []byte) (swapMarker, bool) {
	if len(b) != swapFileSize || string(b[:4]) != swapMagic || b[4] != 1 {
		return swapMarker{}, false
	}
	if crc32.Checksum(b[:swapFileSize-4], castagnoli) != binary.BigEndian.Uint32(b[swapFileSize-4:]) {
		return swapMarker{}, false
	}
	be := binary.BigEndian
	m := swapMarker{Base: int64(be.Uint64(b[5:])), End: int64(be.Uint64(b[13:])), Size: int64(be.Uint64(b[21:])), CRC: be.Uint32(b[29:])}
	return m, m.Base >= 0 && m.End > m.Base && m.Size >= 0
}

// SegmentWriter writes one replacement segment for ReplaceSegments. It is not
// safe for concurrent use. Abort (or ReplaceSegments) must be called.
type SegmentWriter struct {
	l    *Log
	base int64
	f    vfs.File
	b    *indexBuilder
	last int64 // last offset written, base-1 at first
	gen  int64 // the log's rewrites count when the writer was made
	crc  uint32
	done bool
	// markers are the offsets of the control batches written, increasing:
	// the old segments' transaction index entries whose marker is among
	// them carry over to the new segment.
	markers []int64
}

// NewSegmentWriter starts a replacement segment with base offset base (the
// base of the first segment it will replace), as <base>.log.cleaned in the
// log's directory, replacing any leftover of an earlier attempt. Make the
// writer before reading the segments it replaces: a truncation or another
// swap after it makes ReplaceSegments refuse it (ErrSegmentsChanged), since
// the bytes read may no longer be the log's.
func (l *Log) NewSegmentWriter(base int64) (*SegmentWriter, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	l.mu.Lock()
	gen := l.rewrites
	l.mu.Unlock()
	f, err := l.fs.Create(l.path(baseName(base) + logSuffix + cleanedSuffix))
	if err != nil {
		return nil, fmt.Errorf("hotlog: create cleaned segment: %w", err)
	}
	return &SegmentWriter{l: l, base: base, f: f, b: newIndexBuilder(base, l.config().IndexIntervalBytes), last: base - 1, gen: gen}, nil
}

// Write appends whole v2 batches (one or more, concatenated) whose offsets
// increase from the base offset; gaps are allowed. Headers are checked
// (ParseBatchHeader, counts, order); CRCs are the caller's.
func (w *SegmentWriter) Write(batches []byte) error {
	if w.done {
		return errors.New("hotlog: segment writer finished")
	}
	var hdrs []BatchHeader
	last := w.last
	for pos := 0; pos < len(batches); {
		h, err := ParseBatchHeader(batches[pos:])
		if err == nil {
			err = checkHeader(&h, false)
		}
		if err != nil {
			return err
		}
		if int64(pos)+h.Size() > int64(len(batches)) {
			return fmt.Errorf("%w: batch passes the end of the buffer", ErrCorruptBatch)
		}
		if h.BaseOffset <= last || h.LastOffset()-w.base > 1<<31-1 {
			return fmt.Errorf("%w: batch offset %d after %d in a segment at %d", ErrCorruptBatch, h.BaseOffset, last, w.base)
		}
		if w.b.size+int64(pos)+h.Size() > 1<<32-1 {
			return fmt.Errorf("%w: cleaned segment too large", ErrBatchTooLarge)
		}
		last = h.LastOffset()
		hdrs = append(hdrs, h)
		if h.IsControl() {
			w.markers = append(w.markers, h.BaseOffset)
		}
		pos += int(h.Size())
	}
	if _, err := w.f.Write(batches); err != nil {
		return fmt.Errorf("hotlog: write cleaned segment: %w", err)
	}
	w.crc = crc32.Update(w.crc, castagnoli, batches)
	pos := w.b.size
	for i := range hdrs {
		w.b.add(&hdrs[i], pos)
		pos += hdrs[i].Size()
	}
	w.last = last
	return nil
}

// Size is the number of bytes written so far.
func (w *SegmentWriter) Size() int64 { return w.b.size }

// LastOffset is the last offset written, or base-1.
func (w *SegmentWriter) LastOffset() int64 { return w.last }

// Abort removes the partial segment.
func (w *SegmentWriter) Abort() {
	if w.done {
		return
	}
	w.done = true
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, txnIndexSuffix} {
		w.l.fs.Remove(w.l.path(baseName(w.base) + suf + cleanedSuffix))
	}
}

// finish makes the segment's files durable (step 1 of the protocol).
func (w *SegmentWriter) finish() error {
	w.b.appendTime()
	if err := w.f.Sync(); err != nil {
		return err
	}
	if err := w.f.Close(); err != nil {
		return err
	}
	w.f = nil
	name := baseName(w.base)
	if err := writeIndexFile(w.l.fs, w.l.path(name+indexSuffix+cleanedSuffix), w.b.idx); err != nil {
		return err
	}
	if err := writeIndexFile(w.l.fs, w.l.path(name+timeIndexSuffix+cleanedSuffix), w.b.tidx); err != nil {
		return err
	}
	return vfs.SyncDir(w.l.fs, w.l.dir)
}

// ReplaceSegments atomically replaces the adjacent sealed segments whose base
// offsets are old (ascending, old[0] the writer's base) with the segment w
// wrote, whose offsets must lie below the base of the segment after them. On
// success w is consumed; on any error w is aborted and the log is unchanged
// (ErrSegmentsChanged if old are no longer a run of sealed segments), unless
// the error wraps ErrLogFailed (an I/O error past the commit point: reopen
// the log, which completes the swap).
func (l *Log) ReplaceSegments(old []int64, w *SegmentWriter) error {
	if w.done {
		return errors.New("hotlog: segment writer finished")
	}
	// The new segment's fsyncs (the whole file) happen before the append
	// lock is taken: appends wait only for the marker and the renames.
	if err := w.finish(); err != nil {
		w.Abort()
		return fmt.Errorf("hotlog: write cleaned segment: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.replaceLocked(old, w)
	if err != nil && !w.done {
		w.Abort()
	}
	return err
}

func (l *Log) replaceLocked(old []int64, w *SegmentWriter) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if err := l.failure(); err != nil {
		return err
	}
	if w.gen != l.rewrites {
		return fmt.Errorf("%w: the log was truncated or swapped since the writer was made", ErrSegmentsChanged)
	}
	set := *l.segs.Load()
	if len(old) == 0 || old[0] != w.base {
		return fmt.Errorf("%w: writer base %d does not start the group", ErrSegmentsChanged, w.base)
	}
	i := segmentFor(set, old[0])
	j := i + len(old) // the segment after the group
	if set[i].base != old[0] || j >= len(set) {
		return fmt.Errorf("%w: %v not a run of sealed segments", ErrSegmentsChanged, old)
	}
	for k, b := range old {
		if set[i+k].base != b {
			return fmt.Errorf("%w: %v not a run of sealed segments", ErrSegmentsChanged, old)
		}
	}
	end := set[j].base
	if w.last >= end {
		return fmt.Errorf("hotlog: cleaned segment reaches offset %d, past the group end %d", w.last, end)
	}
	// Readers that hold the old segments must not need their paths again.
	group := set[i:j]
	for _, s := range group {
		if !s.tryRef() {
			return fmt.Errorf("%w: segment %d released", ErrSegmentsChanged, s.base)
		}
		defer s.unref()
		if _, err := s.logFile(); err != nil {
			return fmt.Errorf("hotlog: open segment %d: %w", s.base, err)
		}
		if _, _, _, err := s.indexes(l.config().IndexIntervalBytes); err != nil {
			return fmt.Errorf("hotlog: load indexes of segment %d: %w", s.base, err)
		}
	}
	// The aborted transactions whose markers the cleaner kept stay indexed
	// (one whose marker it dropped must go: a client told of it would drop
	// the producer's later records until a marker that no longer exists).
	var txns []AbortedTxn
	for _, s := range group {
		entries, err := s.txnEntries()
		if err != nil {
			return err
		}
		for _, a := range entries {
			k := sort.Search(len(w.markers), func(k int) bool { return w.markers[k] >= a.LastOffset })
			if k < len(w.markers) && w.markers[k] == a.LastOffset {
				txns = append(txns, a)
			}
		}
	}
	if len(txns) > 0 {
		// Made durable by the marker write's directory sync below.
		if err := writeIndexFile(l.fs, l.path(baseName(w.base)+txnIndexSuffix+cleanedSuffix), AppendTxnIndex(nil, txns)); err != nil {
			return fmt.Errorf("hotlog: write cleaned transaction index: %w", err)
		}
	}
	marker := l.path(baseName(w.base) + swapSuffix)
	if err := vfs.WriteFileAtomic(l.fs, marker, encodeSwap(swapMarker{Base: w.base, End: end, Size: w.b.size, CRC: w.crc})); err != nil {
		// The marker may be in place all the same (a failed directory
		// sync): take it back before dropping the .cleaned files, or leave
		// both to Open, which then completes the swap or ignores the marker.
		if rerr := l.fs.Remove(marker); rerr != nil && !vfs.IsNotExist(rerr) {
			w.done = true
			return l.fail(fmt.Errorf("hotlog: write swap marker: %w (and removing it: %v)", err, rerr))
		}
		if serr := vfs.SyncDir(l.fs, l.dir); serr != nil {
			w.done = true
			return l.fail(fmt.Errorf("hotlog: write swap marker: %w (and syncing its removal: %v)", err, serr))
		}
		return fmt.Errorf("hotlog: write swap marker: %w", err)
	}
	// Committed: from here a failure leaves the swap to Open.
	w.done = true
	l.rewrites++
	for _, s := range group {
		l.retireLocked(s)
		if err := l.renameFilesLocked(s); err != nil {
			return l.fail(err)
		}
	}
	name := baseName(w.base)
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, txnIndexSuffix} {
		if suf == txnIndexSuffix && len(txns) == 0 {
			continue
		}
		if err := l.fs.Rename(l.path(name+suf+cleanedSuffix), l.path(name+suf)); err != nil {
			return l.fail(fmt.Errorf("hotlog: rename cleaned segment: %w", err))
		}
	}
	if err := vfs.SyncDir(l.fs, l.dir); err != nil {
		return l.fail(fmt.Errorf("hotlog: sync %s: %w", l.dir, err))
	}
	seg := newSegment(l.fs, l.dir, w.base, l.cache)
	seg.relLimit = end - w.base
	seg.size.Store(w.b.size)
	seg.idx, seg.tidx, seg.maxTs, seg.loaded, seg.maxTsKnown = w.b.idx, w.b.tidx, w.b.maxTs, true, true
	seg.txns, seg.txnsLoaded = txns, true
	next := make([]*segment, 0, len(set)-len(group)+1)
	next = append(append(append(next, set[:i]...), seg), set[j:]...)
	l.segs.Store(&next)
	for _, s := range group {
		s.unref() // the log's reference; readers keep theirs
	}
	l.cache.add(seg, len(seg.idx)+len(seg.tidx))
	if err := l.fs.Remove(marker); err != nil && !vfs.IsNotExist(err) {
		l.logger.Warn("hotlog: removing swap marker", "err", err) // Open finishes it
	}
	return nil
}

// isSwapResult reports whether the file name is the new segment the marker
// describes (its size and CRC-32C match).
func (l *Log) isSwapResult(name string, m swapMarker) bool {
	f, err := l.fs.Open(l.path(name))
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() != m.Size {
		return false
	}
	crc := uint32(0)
	buf := make([]byte, 256<<10)
	for pos := int64(0); pos < m.Size; {
		n := min(int64(len(buf)), m.Size-pos)
		if _, err := f.ReadAt(buf[:n], pos); err != nil {
			return false
		}
		crc = crc32.Update(crc, castagnoli, buf[:n])
		pos += n
	}
	return crc == m.CRC
}

// recoverSwaps completes committed swaps and removes uncommitted .cleaned
// files; Open calls it before it lists the segments.
func (l *Log) recoverSwaps() error {
	names, err := l.fs.List(l.dir)
	if err != nil {
		return fmt.Errorf("hotlog: list %s: %w", l.dir, err)
	}
	has := map[string]bool{}
	for _, n := range names {
		has[n] = true
	}
	for _, n := range names {
		base, suffix, ok := parseBaseName(n)
		if !ok || suffix != swapSuffix {
			continue
		}
		data, rerr := vfs.ReadFile(l.fs, l.path(n), swapFileSize)
		m, valid := decodeSwap(data)
		if rerr != nil || !valid || m.Base != base {
			// A marker is written atomically: a damaged one was never committed.
			l.logger.Warn("hotlog: ignoring damaged swap marker", "file", n)
			l.fs.Remove(l.path(n))
			continue
		}
		name := baseName(base)
		if !has[name+logSuffix+cleanedSuffix] && !l.isSwapResult(name+logSuffix, m) {
			// Neither the new file nor a renamed one that matches it: the
			// swap never went past its marker (which a failed write may have
			// left); the old segments stand.
			l.logger.Warn("hotlog: ignoring a swap marker whose segment is missing", "file", n)
			l.fs.Remove(l.path(n))
			continue
		}
		for _, o := range names {
			ob, osuf, ok := parseBaseName(o)
			if !ok || !isSegmentFile(osuf) || ob < base || ob >= m.End {
				continue
			}
			// At base the files are replaced by the renames below, or are
			// already the new ones; but an old .txnindex stays in place (the
			// new segment may have none) until the old files were renamed
			// away, which happens before the .log.cleaned rename.
			if ob == base && (osuf != txnIndexSuffix || !has[name+logSuffix+cleanedSuffix]) {
				continue
			}
			if err := l.fs.Remove(l.path(o)); err != nil && !vfs.IsNotExist(err) {
				return fmt.Errorf("hotlog: complete swap: %w", err)
			}
		}
		// The .cleaned files are renamed log first: one still there replaces
		// the old file of its name (Rename replaces), one gone was renamed.
		for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, txnIndexSuffix} {
			if !has[name+suf+cleanedSuffix] {
				continue
			}
			if err := l.fs.Rename(l.path(name+suf+cleanedSuffix), l.path(name+suf)); err != nil {
				return fmt.Errorf("hotlog: complete swap: %w", err)
			}
		}
		if err := vfs.SyncDir(l.fs, l.dir); err != nil {
			return fmt.Errorf("hotlog: sync %s: %w", l.dir, err)
		}
		l.logger.Info("hotlog: completed an interrupted segment swap", "base", base, "end", m.End)
		if err := l.fs.Remove(l.path(n)); err != nil && !vfs.IsNotExist(err) {
			return err
		}
	}
	// What is left with .cleaned was never committed.
	names, err = l.fs.List(l.dir)
	if err != nil {
		return fmt.Errorf("hotlog: list %s: %w", l.dir, err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, cleanedSuffix) {
			l.fs.Remove(l.path(n))
		}
	}
	return nil
}
