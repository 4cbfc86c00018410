package hotlog

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/sediment-io/sediment/internal/vfs"
)

// The transaction index (.txnindex) of a segment lists the transactions
// aborted by a marker in that segment, Kafka's AbortedTxn entries:
//
//	+0  version int16 = 0
//	+2  producerId int64
//	+10 firstOffset int64       the transaction's first offset in the partition
//	+18 lastOffset int64        the abort marker's offset (in this segment)
//	+26 lastStableOffset int64  the partition's LSO once this abort completed
//
// 34 bytes per entry, big-endian, in marker order. The file exists only for
// segments with at least one entry. hotlog does not interpret control
// batches: the caller (the broker's producer state) says which transaction a
// marker aborts, through AppendOptions.Aborted, and AddAbortedTxn on
// recovery.

// TxnIndexEntrySize is the size of one .txnindex entry.
const TxnIndexEntrySize = 34

// AbortedTxn is one aborted transaction of a partition.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64 // first offset of the transaction
	LastOffset  int64 // offset of its abort marker
	// LastStableOffset is the partition's last stable offset right after the
	// abort: the first offset of the oldest transaction still open, or
	// LastOffset+1. A fetch up to an offset at or below it needs no entry
	// of a later marker (Kafka's early stop).
	LastStableOffset int64
}

func (a AbortedTxn) valid() bool {
	return a.ProducerID >= 0 && a.FirstOffset >= 0 && a.FirstOffset <= a.LastOffset &&
		a.LastStableOffset >= 0 && a.LastStableOffset <= a.LastOffset+1
}

// AppendTxnIndex appends the entries' encoding to b.
func AppendTxnIndex(b []byte, entries []AbortedTxn) []byte {
	for _, a := range entries {
		b = binary.BigEndian.AppendUint16(b, 0)
		b = binary.BigEndian.AppendUint64(b, uint64(a.ProducerID))
		b = binary.BigEndian.AppendUint64(b, uint64(a.FirstOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(a.LastOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(a.LastStableOffset))
	}
	return b
}

// DecodeTxnIndex decodes a whole .txnindex file: whole entries of version 0,
// each consistent (producer id and offsets not negative, first ≤ last, LSO ≤
// last+1) and markers strictly increasing. Anything else is ErrCorruptBatch.
func DecodeTxnIndex(b []byte) ([]AbortedTxn, error) {
	out, n := decodeTxnIndexPrefix(b)
	if n != len(b) {
		return nil, fmt.Errorf("%w: transaction index damaged at byte %d of %d", ErrCorruptBatch, n, len(b))
	}
	return out, nil
}

// decodeTxnIndexPrefix decodes the longest valid prefix of b and returns it
// with its length in bytes (recovery keeps the prefix of a torn file).
func decodeTxnIndexPrefix(b []byte) ([]AbortedTxn, int) {
	var out []AbortedTxn
	n := 0
	for len(b)-n >= TxnIndexEntrySize {
		e := b[n : n+TxnIndexEntrySize]
		if binary.BigEndian.Uint16(e) != 0 {
			break
		}
		a := AbortedTxn{
			ProducerID:       int64(binary.BigEndian.Uint64(e[2:])),
			FirstOffset:      int64(binary.BigEndian.Uint64(e[10:])),
			LastOffset:       int64(binary.BigEndian.Uint64(e[18:])),
			LastStableOffset: int64(binary.BigEndian.Uint64(e[26:])),
		}
		if !a.valid() || (len(out) > 0 && a.LastOffset <= out[len(out)-1].LastOffset) {
			break
		}
		out = append(out, a)
		n += TxnIndexEntrySize
	}
	return out, n
}

// CollectAborted appends to out the entries that a read of [from, to) must
// know: those whose marker is at or after from and that began before to. It
// reports complete once an entry's LastStableOffset reaches to: no later
// marker can end a transaction that began before to, so later segments need
// not be read (Kafka's TransactionIndex.collectAbortedTxns).
func CollectAborted(entries []AbortedTxn, from, to int64, out []AbortedTxn) ([]AbortedTxn, bool) {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].LastOffset >= from })
	for _, a := range entries[i:] {
		if a.FirstOffset < to {
			out = append(out, a)
		}
		if a.LastStableOffset >= to {
			return out, true
		}
	}
	return out, false
}

// txnEntries returns the segment's transaction index, reading its file on
// first use. The slice is never changed in place.
func (s *segment) txnEntries() ([]AbortedTxn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.txnsLoaded {
		return s.txns, nil
	}
	data, err := vfs.ReadFile(s.fs, s.path(txnIndexSuffix), maxIndexFileBytes)
	if vfs.IsNotExist(err) {
		s.txnsLoaded = true
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hotlog: read transaction index of segment %d: %w", s.base, err)
	}
	entries, err := DecodeTxnIndex(data)
	if err != nil {
		return nil, fmt.Errorf("segment %d: %w", s.base, err)
	}
	if n := len(entries); n > 0 && (entries[0].LastOffset < s.base || (s.relLimit >= 0 && entries[n-1].LastOffset-s.base >= s.relLimit)) {
		return nil, fmt.Errorf("%w: transaction index of segment %d has markers outside it", ErrCorruptBatch, s.base)
	}
	s.txns, s.txnsLoaded = entries, true
	return entries, nil
}

func (s *segment) setTxns(entries []AbortedTxn) {
	s.mu.Lock()
	s.txns, s.txnsLoaded = entries, true
	s.mu.Unlock()
}

// AbortedTxns returns the aborted transactions that a read_committed read of
// [from, to) must be told about (so that the client drops their records):
// every transaction whose abort marker is at or after from and that began
// before to, in marker order. It reads the transaction indexes of the
// segment holding from and of later segments until an entry's last stable
// offset shows that no later one can matter. Entries are as complete as the
// log: below the log start they are gone with their segments.
func (l *Log) AbortedTxns(from, to int64) ([]AbortedTxn, error) {
	if from >= to {
		return nil, nil
	}
	set := *l.segs.Load()
	var out []AbortedTxn
	for i := segmentFor(set, from); i < len(set); i++ {
		s := set[i]
		if !s.tryRef() {
			continue // deleted meanwhile: its entries are below the log start
		}
		entries, err := s.txnEntries()
		s.unref()
		if err != nil {
			return nil, err
		}
		var complete bool
		if out, complete = CollectAborted(entries, from, to, out); complete {
			break
		}
	}
	return out, nil
}

// appendTxnsLocked adds entries (for markers among the offsets [first,
// last] being appended) to the active segment's transaction index, durably,
// before the batches are written: a marker that survives a crash always has
// its entry (Open drops entries past the recovered end). It returns the
// previous entries for undoTxnsLocked.
func (l *Log) appendTxnsLocked(entries []AbortedTxn, first, last int64) ([]AbortedTxn, error) {
	seg := l.active
	old, err := seg.txnEntries()
	if err != nil {
		return nil, err
	}
	prev := int64(-1)
	if len(old) > 0 {
		prev = old[len(old)-1].LastOffset
	}
	for _, a := range entries {
		if !a.valid() || a.LastOffset < first || a.LastOffset > last || a.LastOffset <= prev {
			return nil, fmt.Errorf("hotlog: aborted transaction %+v does not fit the append [%d, %d] after %d", a, first, last, prev)
		}
		prev = a.LastOffset
	}
	if err := l.writeTxnIndexLocked(seg, old, AppendTxnIndex(nil, entries)); err != nil {
		return nil, err
	}
	seg.setTxns(append(old[:len(old):len(old)], entries...))
	return old, nil
}

// writeTxnIndexLocked appends data to seg's .txnindex (which holds old) and
// syncs it, and the directory if the file is new.
func (l *Log) writeTxnIndexLocked(seg *segment, old []AbortedTxn, data []byte) error {
	path := seg.path(txnIndexSuffix)
	f, err := l.fs.OpenForAppend(path)
	if err != nil {
		return fmt.Errorf("hotlog: open transaction index: %w", err)
	}
	defer f.Close()
	at := int64(len(old)) * TxnIndexEntrySize
	// Cut whatever a failed earlier write left past the known entries.
	if err := f.Truncate(at); err != nil {
		return fmt.Errorf("hotlog: write transaction index: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Truncate(at)
		return fmt.Errorf("hotlog: write transaction index: %w", err)
	}
	if err := f.Sync(); err != nil {
		return l.fail(fmt.Errorf("hotlog: sync transaction index: %w", err))
	}
	if len(old) == 0 {
		if err := vfs.SyncDir(l.fs, l.dir); err != nil {
			return l.fail(fmt.Errorf("hotlog: sync %s: %w", l.dir, err))
		}
	}
	return nil
}

// undoTxnsLocked takes back appendTxnsLocked after a failed write of the
// batches.
func (l *Log) undoTxnsLocked(old []AbortedTxn) {
	seg := l.active
	seg.setTxns(old)
	if err := rewriteTxnIndex(l.fs, seg, old); err != nil {
		l.fail(fmt.Errorf("hotlog: take back transaction index entries: %w", err))
	}
}

// rewriteTxnIndex replaces seg's .txnindex with entries, atomically (or
// removes it when there are none).
func rewriteTxnIndex(fs vfs.FS, seg *segment, entries []AbortedTxn) error {
	path := seg.path(txnIndexSuffix)
	if len(entries) == 0 {
		if err := fs.Remove(path); err != nil && !vfs.IsNotExist(err) {
			return err
		}
		return vfs.SyncDir(fs, seg.dir)
	}
	return vfs.WriteFileAtomic(fs, path, AppendTxnIndex(nil, entries))
}

// AddAbortedTxn adds an entry to the transaction index of the segment that
// holds its marker, unless it is there already (a marker's entry is written
// before the marker, so this is for rebuilding: the broker calls it for every
// abort it replays from the log on open, and for entries it kept elsewhere
// before the index existed). It reports whether the entry was added. A
// marker below the log start is ignored; one at or past the log end is an
// error.
func (l *Log) AddAbortedTxn(a AbortedTxn) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return false, ErrClosed
	}
	if err := l.failure(); err != nil {
		return false, err
	}
	if !a.valid() || a.LastOffset >= l.logEnd.Load() {
		return false, fmt.Errorf("hotlog: aborted transaction %+v outside the log (end %d)", a, l.logEnd.Load())
	}
	if a.LastOffset < l.logStart.Load() {
		return false, nil
	}
	set := *l.segs.Load()
	seg := set[segmentFor(set, a.LastOffset)]
	old, err := seg.txnEntries()
	if err != nil {
		return false, err
	}
	i := sort.Search(len(old), func(i int) bool { return old[i].LastOffset >= a.LastOffset })
	if i < len(old) && old[i].LastOffset == a.LastOffset {
		return false, nil
	}
	next := make([]AbortedTxn, 0, len(old)+1)
	next = append(append(append(next, old[:i]...), a), old[i:]...)
	if i == len(old) {
		err = l.writeTxnIndexLocked(seg, old, AppendTxnIndex(nil, []AbortedTxn{a}))
	} else {
		err = rewriteTxnIndex(l.fs, seg, next)
	}
	if err != nil {
		return false, err
	}
	seg.setTxns(next)
	return true, nil
}

// cutTxnsLocked drops seg's entries whose marker is at or after end (a
// truncation or a recovered torn tail). A damaged file keeps its valid
// prefix (a torn last entry).
func (l *Log) cutTxnsLocked(seg *segment, end int64) error {
	entries, err := seg.txnEntries()
	damaged := false
	if err != nil {
		data, rerr := vfs.ReadFile(l.fs, seg.path(txnIndexSuffix), maxIndexFileBytes)
		if rerr != nil {
			return err
		}
		entries, _ = decodeTxnIndexPrefix(data)
		lo := sort.Search(len(entries), func(i int) bool { return entries[i].LastOffset >= seg.base })
		entries = entries[lo:]
		damaged = true
		l.logger.Warn("hotlog: keeping the valid part of a damaged transaction index", "segment", seg.base, "entries", len(entries), "err", err)
	}
	keep := sort.Search(len(entries), func(i int) bool { return entries[i].LastOffset >= end })
	if keep == len(entries) && !damaged {
		return nil
	}
	entries = entries[:keep:keep]
	if err := rewriteTxnIndex(l.fs, seg, entries); err != nil {
		return err
	}
	seg.setTxns(entries)
	return nil
}
