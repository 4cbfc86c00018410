package metadata

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// ErrLogDamaged: the Raft log on disk cannot be read back. Open returns it
// (with the directory and how to recover) instead of letting raft panic while
// it replays the log.
var ErrLogDamaged = errors.New("metadata: raft log on disk is damaged")

// openWAL opens the raft-wal log and stable store in dir. The node owns the
// returned meta store and closes it after the WAL (closing it twice is safe).
// Tests pass a segment filer (to inject crashes) and a small segment size; the
// node passes nil and 0 (raft-wal's defaults: the OS file system, 64 MiB).
//
// Before raft-wal opens dir, sealRecoveredTail finishes a rotation a crash
// interrupted; after, verifyLog reads every entry back.
//
// raft-wal must be v0.4.1 or later: v0.4.0 marked the tail segment sealed in
// its meta store on a tail truncation (raft's "clearing log suffix", when a
// follower's uncommitted entries conflict with a new leader's) without writing
// the segment's index block, so the next open failed on every read of that
// segment with "sealed segment has no index block" (hashicorp/raft-wal#31,
// fixed by #33). See TestWALCrashStates.
func openWAL(dir string, hlog hclog.Logger, sf types.SegmentFiler, segmentSize int) (*wal.WAL, *metadb.BoltMetaDB, error) {
	if did, err := sealRecoveredTail(dir, segmentSize); err != nil {
		return nil, nil, err
	} else if did != "" {
		hlog.Warn("repaired a segment rotation interrupted by a crash: " + did)
	}
	meta := &metadb.BoltMetaDB{}
	// A nil filer and a zero size leave raft-wal's defaults in place.
	w, err := wal.Open(dir, wal.WithLogger(hlog), wal.WithMetaStore(meta),
		wal.WithSegmentFiler(sf), wal.WithSegmentSize(segmentSize))
	if err != nil {
		meta.Close()
		return nil, nil, err
	}
	if err := verifyLog(w); err != nil {
		w.Close()
		meta.Close()
		return nil, nil, err
	}
	return w, meta, nil
}

// sealRecoveredTail finishes a segment rotation that a crash interrupted, before
// raft-wal opens dir. raft-wal (v0.4.1, and its main branch as of 2026) seals a
// full tail segment in two steps: the Append that fills it writes the last
// entries, the segment's index block and a commit frame in one write and fsyncs
// it; then a background goroutine records the seal in the meta store and
// creates the next segment. A process killed between the two leaves a tail that
// the meta store calls unsealed but whose file is sealed. raft-wal's Open
// recovers that writer as sealed and never rotates it, so every later append
// fails with "segment is sealed" and the voter cannot take a single entry.
//
// The repair is the step that was missed. The recovered tail reports where its
// index block starts; the frames there (raft-wal's segment/format.go) tell
// which case this is:
//
//   - the index frame covers exactly the committed entries and a commit frame
//     follows it: the seal was written whole. Record it in the meta store at the
//     last committed index and add the next segment, as raft-wal's rotation
//     does; Open then creates that segment's file. No entry is dropped: every
//     entry of the segment was in a committed, fsynced batch.
//   - the index frame covers more entries than are committed, or no commit frame
//     follows it: the process died inside the sealing write (a SIGKILL can stop
//     a write between pages) and that batch was never acknowledged. raft-wal's
//     recovery already rewound past it but still sees the index frame and
//     thinks the segment sealed. Zero the index frame and what follows it of
//     that write; the segment is then an ordinary unsealed tail ending at its
//     last commit, and raft-wal overwrites the rest.
//
// Anything else (an index covering fewer entries than are committed) is
// ErrLogDamaged. It returns what it did, for the log, or "".
func sealRecoveredTail(dir string, segmentSize int) (did string, err error) {
	if _, statErr := os.Stat(filepath.Join(dir, metadb.FileName)); statErr != nil {
		return "", nil // a new log: nothing to recover
	}
	meta := &metadb.BoltMetaDB{}
	defer func() {
		if cerr := meta.Close(); err == nil {
			err = cerr
		}
	}()
	st, err := meta.Load(dir)
	if err != nil {
		return "", err
	}
	if len(st.Segments) == 0 {
		return "", nil
	}
	tail := st.Segments[len(st.Segments)-1]
	if !tail.SealTime.IsZero() {
		return "", nil
	}
	sw, err := segment.NewFiler(dir, fs.New()).RecoverTail(tail)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil // raft-wal creates it
	}
	if err != nil {
		return "", err
	}
	isSealed, indexStart, err := sw.Sealed()
	last := sw.LastIndex()
	if cerr := sw.Close(); err == nil {
		err = cerr
	}
	if err != nil || !isSealed {
		return "", err
	}
	committed := uint64(0)
	if last >= tail.BaseIndex {
		committed = last - tail.BaseIndex + 1
	}
	name := segment.FileName(tail)
	whole, err := checkSeal(filepath.Join(dir, name), indexStart, committed)
	if err != nil {
		return "", fmt.Errorf("%w: tail segment %s is sealed but %v", ErrLogDamaged, name, err)
	}
	if !whole {
		return "discarded the torn index block of an unacknowledged sealing write in " + name, nil
	}
	if segmentSize <= 0 {
		segmentSize = wal.DefaultSegmentSize
	}
	now := time.Now()
	tail.SealTime, tail.MaxIndex, tail.IndexStart = now, last, indexStart
	st.Segments[len(st.Segments)-1] = tail
	st.Segments = append(st.Segments, types.SegmentInfo{
		ID: st.NextSegmentID, BaseIndex: last + 1, MinIndex: last + 1,
		SizeLimit: uint32(segmentSize), Codec: wal.CodecBinaryV1, CreateTime: now,
	})
	st.NextSegmentID++
	return "sealed the tail segment " + name + " in the meta store", meta.CommitState(st)
}

// checkSeal looks at the frames from indexStart-8 in the segment file at path,
// whose last commit covers committed entries. Frame header: | type u8 | 3
// reserved | length (or CRC) u32 LE |; type 2 = index (length = 4 × entries),
// 3 = commit; payloads are padded to 8 bytes. It reports whole when the index
// frame covers exactly the committed entries and a commit frame follows; when
// the seal is torn (more entries than committed, or no commit frame after it)
// it zeroes the index frame and the commit frame's place, syncs, and reports
// false.
func checkSeal(path string, indexStart, committed uint64) (whole bool, err error) {
	const frameHeaderLen, frameIndex, frameCommit = 8, 2, 3
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	size := uint64(fi.Size())
	if indexStart < frameHeaderLen || indexStart > size {
		return false, fmt.Errorf("its index block is said to start at %d of %d bytes", indexStart, size)
	}
	var h [frameHeaderLen]byte
	if _, err := f.ReadAt(h[:], int64(indexStart-frameHeaderLen)); err != nil {
		return false, fmt.Errorf("reading its index frame: %v", err)
	}
	entries := uint64(binary.LittleEndian.Uint32(h[4:])) / 4
	if h[0] != frameIndex {
		return false, fmt.Errorf("no index frame at %d (type %d)", indexStart-frameHeaderLen, h[0])
	}
	if entries < committed {
		return false, fmt.Errorf("its index frame covers %d entries, fewer than its %d committed ones", entries, committed)
	}
	payload := entries * 4
	payload += (frameHeaderLen - payload%frameHeaderLen) % frameHeaderLen
	end := min(indexStart+payload+frameHeaderLen, size) // past the commit frame's header
	if entries == committed && indexStart+payload+frameHeaderLen <= size {
		if _, err := f.ReadAt(h[:], int64(indexStart+payload)); err != nil {
			return false, fmt.Errorf("reading the commit frame after its index: %v", err)
		}
		if h[0] == frameCommit {
			return true, nil
		}
	}
	// Torn: the sealing write was not committed. Its index frame and
	// commit frame go; raft-wal rewrites from its last commit.
	if _, err := f.WriteAt(make([]byte, end-(indexStart-frameHeaderLen)), int64(indexStart-frameHeaderLen)); err != nil {
		return false, err
	}
	return false, f.Sync()
}

// verifyLog reads every entry of the log once. raft.NewRaft reads the entries
// after the latest snapshot and panics on an error; a damaged log found here
// becomes an error that says what to do. The log is short (raft keeps
// TrailingLogs entries after a snapshot), so this costs milliseconds.
func verifyLog(s raft.LogStore) error {
	first, err := s.FirstIndex()
	if err != nil {
		return fmt.Errorf("%w: first index: %v", ErrLogDamaged, err)
	}
	last, err := s.LastIndex()
	if err != nil {
		return fmt.Errorf("%w: last index: %v", ErrLogDamaged, err)
	}
	if last == 0 {
		return nil
	}
	var l raft.Log
	for i := first; i <= last; i++ {
		if err := s.GetLog(i, &l); err != nil {
			return fmt.Errorf("%w: entry %d of [%d, %d]: %v", ErrLogDamaged, i, first, last, err)
		}
		if l.Index != i {
			return fmt.Errorf("%w: entry %d reads back as index %d", ErrLogDamaged, i, l.Index)
		}
	}
	return nil
}

// logDamagedHelp is appended to ErrLogDamaged by Open.
func logDamagedHelp(dir string) string {
	return fmt.Sprintf("this voter cannot rejoin with this log. Recover it from the other voters: "+
		"stop it, remove it from the quorum on a healthy node (sediment cluster voters remove <id>), "+
		"move %s aside, start it again with an empty metadata directory and without bootstrapping "+
		"(a broker: --voters listing the other voters only, so that it joins), "+
		"and add it back (sediment cluster voters add <id> <raft-address>); "+
		"it installs a snapshot from the leader. A quorum of one has no other copy: "+
		"keep the directory for analysis (raft-wal's waldump reads it)", filepath.Clean(dir))
}
