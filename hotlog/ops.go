package hotlog

import (
	"fmt"
	"sort"

	"github.com/sediment-io/sediment/internal/vfs"
)

// renameDeletedLocked renames a segment's files with the .deleted suffix and
// syncs the directory, so that after a crash they are gone (Open removes
// .deleted files) even if readers kept the segment alive. They are removed
// when the delay has passed and readers let go (deleter.go).
func (l *Log) renameDeletedLocked(seg *segment) error {
	l.retireLocked(seg)
	if err := l.renameFilesLocked(seg); err != nil {
		return err
	}
	if err := vfs.SyncDir(l.fs, l.dir); err != nil {
		return fmt.Errorf("hotlog: sync %s: %w", l.dir, err)
	}
	return nil
}

// renameFilesLocked renames seg's files away (retireLocked chose the
// suffix) and marks it renamed and deleted. It holds seg.mu meanwhile: an
// index rebuilt by a reader is written under it, so never over a file a
// swap has put in place of seg's.
func (l *Log) renameFilesLocked(seg *segment) error {
	seg.mu.Lock()
	defer seg.mu.Unlock()
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, txnIndexSuffix} {
		from := seg.path(suf)
		if err := l.fs.Rename(from, from+seg.delSuffix); err != nil && !vfs.IsNotExist(err) {
			return fmt.Errorf("hotlog: rename %s: %w", from, err)
		}
	}
	seg.renamed.Store(true)
	seg.deleted.Store(true)
	return nil
}

// TruncateTo removes everything at and after offset (a follower whose tail
// diverged). If offset falls inside a batch the whole batch goes, so the new
// log end offset is that batch's base offset. An offset at or past the log end
// is a no-op; one below the log start is ErrOffsetOutOfRange. Crash-safe:
// later segments are renamed away newest first, then the segment holding
// offset is cut and synced; a crash in between leaves a prefix of the log.
// Readers holding regions past the cut may see short reads.
func (l *Log) TruncateTo(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	if err := l.failure(); err != nil {
		return err
	}
	if offset >= l.logEnd.Load() {
		return nil
	}
	l.rewrites++
	if offset < l.logStart.Load() {
		return fmt.Errorf("%w: truncate to %d below log start %d", ErrOffsetOutOfRange, offset, l.logStart.Load())
	}
	set := *l.segs.Load()
	i := segmentFor(set, offset)
	// Drop whole segments after the one holding offset, newest first.
	for j := len(set) - 1; j > i; j-- {
		if err := l.renameDeletedLocked(set[j]); err != nil {
			return l.fail(err)
		}
		rest := append([]*segment(nil), set[:j]...)
		l.segs.Store(&rest)
		set[j].unref()
	}
	set = set[:i+1]
	seg := set[i]
	if seg != l.active {
		// The segment becomes the active one again: open it for appending.
		f, err := l.fs.OpenForAppend(seg.path(logSuffix))
		if err != nil {
			return l.fail(fmt.Errorf("hotlog: reopen segment: %w", err))
		}
		fresh := newSegment(l.fs, l.dir, seg.base, l.cache)
		fresh.file = f
		rest := append(append([]*segment(nil), set[:i]...), fresh)
		l.segs.Store(&rest)
		seg.unref()
		seg = fresh
	}
	f := seg.file
	size, err := seg.visibleSize()
	if err != nil {
		return l.fail(err)
	}
	// Find the cut: the first batch whose last offset reaches offset.
	idx, _, _, err := seg.indexes(l.config().IndexIntervalBytes)
	if err != nil {
		return l.fail(err)
	}
	cut, h, found, err := findBatch(f, idx, seg.base, offset, size)
	if err != nil {
		return l.fail(err)
	}
	newEnd := l.logEnd.Load()
	if found {
		newEnd = h.BaseOffset
	} else {
		cut = size
	}
	if err := f.Truncate(cut); err != nil {
		return l.fail(fmt.Errorf("hotlog: truncate: %w", err))
	}
	if err := f.Sync(); err != nil {
		return l.fail(fmt.Errorf("hotlog: sync after truncate: %w", err))
	}
	// The index files of the (now active) segment are stale; they are
	// rewritten when it seals, and recovery rebuilds its index anyway.
	l.fs.Remove(seg.path(indexSuffix))
	l.fs.Remove(seg.path(timeIndexSuffix))
	b, _, err := scanSegment(f, seg.base, cut, l.config().IndexIntervalBytes, false, nil)
	if err != nil {
		return l.fail(err)
	}
	if !found {
		newEnd = b.next
	}
	seg.mu.Lock()
	seg.idx, seg.tidx, seg.maxTs, seg.loaded, seg.maxTsKnown = b.idx, b.tidx, b.maxTs, true, true
	seg.relLimit = -1
	seg.mu.Unlock()
	seg.size.Store(cut)
	if err := l.cutTxnsLocked(seg, newEnd); err != nil {
		return l.fail(fmt.Errorf("hotlog: truncate transaction index: %w", err))
	}
	l.setActiveLocked(seg, seg.base, newEnd)
	l.builder = b
	l.logEnd.Store(newEnd)
	if l.logStart.Load() > newEnd {
		// The cut removed the batch holding the log start: the log is empty
		// at newEnd, which becomes the start.
		if err := vfs.WriteFileAtomic(l.fs, l.path(logStartOffsetFile), encodeLogStart(newEnd)); err != nil {
			return l.fail(fmt.Errorf("hotlog: write log start checkpoint: %w", err))
		}
		l.logStart.Store(newEnd)
	}
	if l.hw.Load() > newEnd {
		l.hw.Store(newEnd)
	}
	if epochs, changed := truncateEpochsFromEnd(*l.epochs.Load(), newEnd); changed {
		if err := vfs.WriteFileAtomic(l.fs, l.path(epochCheckpointFile), encodeEpochs(epochs)); err != nil {
			return l.fail(fmt.Errorf("hotlog: write leader-epoch checkpoint: %w", err))
		}
		l.epochs.Store(&epochs)
	}
	for _, off := range l.snapshotOffsets() {
		if off > newEnd {
			l.fs.Remove(l.snapshotPath(off))
		}
	}
	return nil
}

// DeleteBefore raises the log start offset to offset (retention,
// DeleteRecords) and deletes the segments wholly below it. offset past the log
// end is ErrOffsetOutOfRange; at or below the log start it is a no-op.
// Crash-safe: the new log start is checkpointed first; Open finishes an
// interrupted delete. Files of deleted segments stay until readers release.
func (l *Log) DeleteBefore(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	if err := l.failure(); err != nil {
		return err
	}
	if offset > l.logEnd.Load() {
		return fmt.Errorf("%w: delete before %d past log end %d", ErrOffsetOutOfRange, offset, l.logEnd.Load())
	}
	if offset <= l.logStart.Load() {
		return nil
	}
	if err := vfs.WriteFileAtomic(l.fs, l.path(logStartOffsetFile), encodeLogStart(offset)); err != nil {
		return fmt.Errorf("hotlog: write log start checkpoint: %w", err)
	}
	l.logStart.Store(offset)
	if l.hw.Load() < offset {
		l.hw.Store(offset)
	}
	// Everything below offset goes: if that is the whole active segment,
	// start a new one at the log end first.
	if offset == l.logEnd.Load() && l.active.base < offset && l.active.size.Load() > 0 {
		if err := l.rollLocked(offset); err != nil {
			return err
		}
	}
	set := *l.segs.Load()
	n := 0
	for n+1 < len(set) && set[n+1].base <= offset {
		n++
	}
	if n > 0 {
		rest := append([]*segment(nil), set[n:]...)
		l.segs.Store(&rest)
		for _, seg := range set[:n] {
			if err := l.renameDeletedLocked(seg); err != nil {
				// The checkpoint is written: Open will finish the job.
				l.logger.Warn("hotlog: deleting segment", "segment", seg.base, "err", err)
			}
			seg.unref()
		}
	}
	if epochs, changed := truncateEpochsFromStart(*l.epochs.Load(), offset); changed {
		if err := vfs.WriteFileAtomic(l.fs, l.path(epochCheckpointFile), encodeEpochs(epochs)); err != nil {
			return fmt.Errorf("hotlog: write leader-epoch checkpoint: %w", err)
		}
		l.epochs.Store(&epochs)
	}
	// Keep the newest producer snapshot at or below the new start; older
	// ones describe deleted data.
	offs := l.snapshotOffsets()
	keep := int64(-1)
	for _, off := range offs {
		if off <= offset {
			keep = off
		}
	}
	for _, off := range offs {
		if off < keep {
			l.fs.Remove(l.snapshotPath(off))
		}
	}
	return nil
}

func (l *Log) snapshotPath(offset int64) string { return l.path(baseName(offset) + snapshotSuffix) }

// snapshotOffsets lists the producer snapshot files, ascending.
func (l *Log) snapshotOffsets() []int64 {
	names, err := l.fs.List(l.dir)
	if err != nil {
		return nil
	}
	var offs []int64
	for _, name := range names {
		if off, suffix, ok := parseBaseName(name); ok && suffix == snapshotSuffix {
			offs = append(offs, off)
		}
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	return offs
}

// maxSnapshotBytes bounds a producer snapshot.
const maxSnapshotBytes = 256 << 20

// WriteProducerSnapshot durably stores data (opaque producer state owned by the
// broker) as the snapshot at offset, which must not pass the log end. The two
// newest snapshots are kept, and those at a segment's base (written at rolls,
// see Options.RollSnapshot); older ones are removed.
func (l *Log) WriteProducerSnapshot(offset int64, data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	return l.writeSnapshotLocked(offset, data)
}

// WriteProducerSnapshotFunc is WriteProducerSnapshot of what state returns,
// called under the log's lock: no truncation or restart of the log comes
// between reading the state and writing it, so a snapshot taken as a
// follower's tail is cut never describes the cut tail (an offset past the
// new log end is refused with ErrOffsetOutOfRange, and the log grows past it
// again only after the owner reloaded its state).
//
// A negative offset from state writes nothing (the owner's state is on
// disk already).
func (l *Log) WriteProducerSnapshotFunc(state func() (offset int64, data []byte)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	offset, data := state()
	if offset < 0 {
		return nil
	}
	return l.writeSnapshotLocked(offset, data)
}

// HasProducerSnapshot reports whether a producer snapshot file exists at
// offset (it is not read; the caller may hold the log's lock, as state
// does in WriteProducerSnapshotFunc).
func (l *Log) HasProducerSnapshot(offset int64) bool {
	_, err := l.fs.Stat(l.snapshotPath(offset))
	return err == nil
}

func (l *Log) writeSnapshotLocked(offset int64, data []byte) error {
	if offset < 0 || offset > l.logEnd.Load() {
		return fmt.Errorf("%w: snapshot at %d past log end %d", ErrOffsetOutOfRange, offset, l.logEnd.Load())
	}
	return l.putSnapshotLocked(offset, data)
}

// putSnapshotLocked is writeSnapshotLocked without its check of the offset:
// for rollLocked, whose offset is the new active segment's base, past the
// log end when a follower's first batch after a compaction gap rolls the
// log (nothing lies between the two, so the state at the log end is the
// state at the base).
func (l *Log) putSnapshotLocked(offset int64, data []byte) error {
	if len(data) > maxSnapshotBytes-snapshotHeaderSize {
		return fmt.Errorf("hotlog: producer snapshot of %d bytes is too large", len(data))
	}
	if err := vfs.WriteFileAtomic(l.fs, l.snapshotPath(offset), encodeSnapshot(data)); err != nil {
		return fmt.Errorf("hotlog: write producer snapshot: %w", err)
	}
	offs := l.snapshotOffsets()
	set := *l.segs.Load()
	for i := 0; i+2 < len(offs); i++ {
		if j := segmentFor(set, offs[i]); set[j].base == offs[i] && offs[i] > l.logStart.Load() {
			continue // the state at the end of the segment before it
		}
		l.fs.Remove(l.snapshotPath(offs[i]))
	}
	return nil
}

// LatestProducerSnapshot returns the newest intact producer snapshot at or
// below the log end, or offset -1 and nil data if there is none.
func (l *Log) LatestProducerSnapshot() (offset int64, data []byte, err error) {
	if l.closed.Load() {
		return -1, nil, ErrClosed
	}
	offs := l.snapshotOffsets()
	end := l.logEnd.Load()
	for i := len(offs) - 1; i >= 0; i-- {
		if offs[i] > end {
			continue
		}
		b, err := vfs.ReadFile(l.fs, l.snapshotPath(offs[i]), maxSnapshotBytes)
		if err != nil {
			if vfs.IsNotExist(err) {
				continue
			}
			return -1, nil, fmt.Errorf("hotlog: read producer snapshot: %w", err)
		}
		if data, ok := decodeSnapshot(b); ok {
			return offs[i], data, nil
		}
		l.logger.Warn("hotlog: skipping damaged producer snapshot", "offset", offs[i])
	}
	return -1, nil, nil
}

// TruncateFullyAndStartAt empties the log and restarts it at offset, the
// follower's answer when the leader's log starts past its own end (and the
// start of a log restored from the bucket). Crash-safe: the old segments are
// renamed away newest first, then the empty segment at offset is created; a
// crash in between leaves a prefix of the old log or the empty new one.
func (l *Log) TruncateFullyAndStartAt(offset int64) error {
	return l.StartAt(offset, -1, nil)
}

// StartAt is TruncateFullyAndStartAt for a log that begins where another
// copy of the log (the bucket's) ends: the log also takes the leader epoch
// of the batch before offset (epoch; -1: none) as its first epoch entry,
// and snapshot (nil: none) as its producer snapshot at offset, so that the
// producer state and the epochs answered to OffsetForLeaderEpoch go on from
// what the log below offset held. The snapshot and the epoch checkpoint are
// written before the segment at offset is created: a crash leaves a prefix
// of the old log (whose snapshots past its end the reopen drops), or the
// empty log at offset with the snapshot there, never without it.
func (l *Log) StartAt(offset int64, epoch int32, snapshot []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	if err := l.failure(); err != nil {
		return err
	}
	if offset < 0 {
		return fmt.Errorf("%w: start at %d", ErrOffsetOutOfRange, offset)
	}
	if len(snapshot) > maxSnapshotBytes-snapshotHeaderSize {
		return fmt.Errorf("hotlog: producer snapshot of %d bytes is too large", len(snapshot))
	}
	return l.truncateFullyLocked(offset, epoch, snapshot)
}

func (l *Log) truncateFullyLocked(offset int64, epoch int32, snapshot []byte) error {
	l.rewrites++
	set := *l.segs.Load()
	for j := len(set) - 1; j >= 0; j-- {
		if err := l.renameDeletedLocked(set[j]); err != nil {
			return l.fail(err)
		}
	}
	// The new log's snapshot and epochs go down before its segment: once
	// the segment at offset exists (the reopen's log start is at least its
	// base), they are there.
	for _, off := range l.snapshotOffsets() {
		l.fs.Remove(l.snapshotPath(off))
	}
	if snapshot != nil {
		if err := vfs.WriteFileAtomic(l.fs, l.snapshotPath(offset), encodeSnapshot(snapshot)); err != nil {
			return l.fail(fmt.Errorf("hotlog: write producer snapshot: %w", err))
		}
	}
	epochs := []epochEntry{}
	if epoch >= 0 {
		epochs = append(epochs, epochEntry{epoch, offset})
	}
	if err := vfs.WriteFileAtomic(l.fs, l.path(epochCheckpointFile), encodeEpochs(epochs)); err != nil {
		return l.fail(fmt.Errorf("hotlog: write leader-epoch checkpoint: %w", err))
	}
	seg, err := l.createSegmentLocked(offset)
	if err != nil {
		return l.fail(err)
	}
	fresh := []*segment{seg}
	l.segs.Store(&fresh)
	for _, s := range set {
		s.unref()
	}
	l.setActiveLocked(seg, offset, offset)
	l.logEnd.Store(offset)
	l.logStart.Store(offset)
	l.hw.Store(offset)
	l.epochs.Store(&epochs)
	if err := vfs.WriteFileAtomic(l.fs, l.path(logStartOffsetFile), encodeLogStart(offset)); err != nil {
		return l.fail(fmt.Errorf("hotlog: write log start checkpoint: %w", err))
	}
	return nil
}
