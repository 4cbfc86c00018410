package tiering

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/objectstore"
)

// What tiered compaction (package compaction) needs of a partition's remote
// log: the committed manifest, a checked stream of a remote segment's bytes,
// an upload of a rewritten segment from a stream of batches, and one
// compare-and-set commit that swaps a run of segments for the rewritten ones,
// fenced by the worker's lease. The replaced segments stay in the bucket
// (Manifest.Retired) until Options.OrphanGrace has passed since the swap, so
// that reads in flight finish; the orphan cleaner then deletes them.

// Fence names the lease a commit is made under (metadata's AcquireLease): the
// commit is refused, with an error wrapping ErrLeaseLost, unless that lease
// still stands with this holder and token.
type Fence struct {
	Kind, Resource, Holder string
	Token                  uint64
}

// FencedCommitter is implemented by a Committer that can carry a lease's
// fencing token with a commit (the broker's, over the metadata log). Without
// it, ReplaceSegments fails.
type FencedCommitter interface {
	// CommitRemoteLogFenced is Committer.CommitRemoteLog, also refused
	// (an error wrapping ErrLeaseLost) unless fence's lease stands.
	CommitRemoteLogFenced(ctx context.Context, tp TopicPartition, leaderEpoch int32, expectedManifestVersion int64,
		newManifestKey string, remoteStart, remoteEnd int64, fence Fence) error
}

// JobLeases runs a remote job under the lease of kind on a partition (the
// broker implements it with compaction.RunLeased over the metadata log).
// RunLeased returns an error wrapping ErrLeaseLost if the lease was lost
// while job ran, and the lease's refusal if another holder has it.
type JobLeases interface {
	RunLeased(ctx context.Context, tp TopicPartition, kind string, job func(ctx context.Context, fence Fence) error) error
}

// Lease kinds of remote jobs.
const (
	LeaseRetention = "retention"
	LeaseCompact   = "compact"
)

// commitLeased is commit under the partition's lease of kind, when
// Options.Leases is set.
func (p *Partition) commitLeased(ctx context.Context, epoch int32, st *remoteState, nm *Manifest, kind string) (*remoteState, error) {
	fc, _ := p.m.opts.Committer.(FencedCommitter)
	return p.underLease(ctx, st, kind, fc != nil, func(ctx context.Context, fence Fence) (*remoteState, error) {
		if fence == (Fence{}) {
			return p.commit(ctx, epoch, st, nm)
		}
		return p.commitWith(ctx, epoch, st, nm, func(key string, expected int64) error {
			return fc.CommitRemoteLogFenced(ctx, p.tp, epoch, expected, key, nm.StartOffset, nm.EndOffset, fence)
		})
	})
}

// underLease runs commit under the partition's lease of kind with its
// fence, when Options.Leases is set and the committer can carry a fence
// (fenced); otherwise with the zero Fence. It returns commit's state (st
// if commit did not run).
func (p *Partition) underLease(ctx context.Context, st *remoteState, kind string, fenced bool,
	commit func(ctx context.Context, fence Fence) (*remoteState, error)) (*remoteState, error) {
	if p.m.opts.Leases == nil || !fenced {
		return commit(ctx, Fence{})
	}
	ns := st
	err := p.m.opts.Leases.RunLeased(ctx, p.tp, kind, func(ctx context.Context, fence Fence) error {
		var err error
		ns, err = commit(ctx, fence)
		return err
	})
	return ns, err
}

// RetiredSegment is a segment replaced by compaction whose objects stay in
// the bucket until RetiredMs + Options.OrphanGrace.
type RetiredSegment struct {
	Stem      string `json:"stem"`
	RetiredMs int64  `json:"retired_ms"`
}

// Manifest returns a copy of the partition's committed manifest, re-read
// from the metadata log's pointer (an empty manifest, Version 0, when nothing
// was ever committed).
func (p *Partition) Manifest(ctx context.Context) (*Manifest, error) {
	st, err := p.refresh(ctx)
	if err != nil {
		return nil, err
	}
	m := st.manifest.clone()
	m.Version = st.ptr.ManifestVersion
	return m, nil
}

// LeaderEpoch returns the partition's leader epoch if this broker leads it.
func (p *Partition) LeaderEpoch() (int32, bool) { return p.m.opts.Leadership.LeaderEpoch(p.tp) }

// OpenSegment streams a remote segment's .log object. The stream fails with
// an error wrapping ErrCorruptObject at its end if the bytes do not match the
// manifest's size and CRC32C. The caller closes it.
func (p *Partition) OpenSegment(ctx context.Context, seg SegmentMeta) (io.ReadCloser, error) {
	r, size, err := p.m.store.ReadObject(ctx, seg.Stem+SuffixLog)
	if err != nil {
		return nil, fmt.Errorf("tiering: %s: open segment %s: %w", p.tp, seg.Stem, err)
	}
	if size != seg.Size {
		r.Close()
		return nil, fmt.Errorf("%w: segment %s is %d bytes, the manifest says %d", ErrCorruptObject, seg.Stem, size, seg.Size)
	}
	rc, err := r.ReadRange(ctx, 0, size)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("tiering: %s: read segment %s: %w", p.tp, seg.Stem, err)
	}
	p.m.metrics.BytesDownloaded.Add(size)
	return &checkedStream{rc: rc, obj: r, want: seg.CRC32C, size: size, stem: seg.Stem}, nil
}

type checkedStream struct {
	rc   io.ReadCloser
	obj  objectstore.Reader
	crc  uint32
	want uint32
	n    int64
	size int64
	stem string
}

func (s *checkedStream) Read(b []byte) (int, error) {
	n, err := s.rc.Read(b)
	s.crc = crc32.Update(s.crc, castagnoli, b[:n])
	s.n += int64(n)
	if errors.Is(err, io.EOF) && (s.n != s.size || s.crc != s.want) {
		return n, fmt.Errorf("%w: segment %s: %d bytes with CRC32C %08x, the manifest says %d, %08x",
			ErrCorruptObject, s.stem, s.n, s.crc, s.size, s.want)
	}
	return n, err
}

func (s *checkedStream) Close() error { return errors.Join(s.rc.Close(), s.obj.Close()) }

// SegmentUpload uploads one rewritten segment: whole batches in offset
// order, checked and indexed as they stream (as an upload of a local
// segment). It is not safe for concurrent use.
type SegmentUpload struct {
	p     *Partition
	ctx   context.Context
	epoch int32
	stem  string
	w     objectstore.Writer
	sc    *segmentScanner
	done  bool
}

// NewSegmentUpload starts the upload of a segment written by this broker as
// leader in epoch. Nothing is created in the bucket until the first Write.
func (p *Partition) NewSegmentUpload(ctx context.Context, epoch int32) *SegmentUpload {
	return &SegmentUpload{p: p, ctx: ctx, epoch: epoch}
}

// Write appends whole batches (the first Write fixes the segment's base
// offset: its first batch's).
func (u *SegmentUpload) Write(batches []byte) error {
	if u.done {
		return errors.New("tiering: write to a finished segment upload")
	}
	if len(batches) == 0 {
		return nil
	}
	if u.w == nil {
		if len(batches) < 8 {
			return fmt.Errorf("%w: first write of %d bytes", ErrCorruptObject, len(batches))
		}
		base := int64(0)
		for _, b := range batches[:8] {
			base = base<<8 | int64(b)
		}
		if base < 0 {
			return fmt.Errorf("%w: base offset %d", ErrCorruptObject, base)
		}
		u.stem = segmentStem(u.p.prefix, base, u.epoch)
		// Held before the first object exists: the orphan cleaner keeps
		// it until ReplaceSegments, DeleteSegments or a failure lets go.
		u.p.hold(u.stem, u.epoch)
		w, err := u.p.m.store.CreateObject(u.ctx, u.stem+SuffixLog, objectstore.CreateOptions{NoOverwrite: true})
		if err != nil {
			u.p.release(u.stem)
			return err
		}
		u.w = w
		u.sc = newSegmentScanner(base, u.p.m.opts.IndexIntervalBytes, u.p.m.opts.ChunkSize)
	}
	if err := u.sc.write(batches); err != nil {
		return err
	}
	_, err := u.w.Write(batches)
	return err
}

// Empty reports whether nothing was written.
func (u *SegmentUpload) Empty() bool { return u.w == nil }

// Finish completes the upload of a segment that stands for the offsets up to
// end (exclusive; at least its last batch's end) and returns its manifest
// entry. The leader-epoch checkpoint uploaded with it continues before's
// epochs (the manifest's segments that precede it); snapshot, if not nil, is
// uploaded as its producer snapshot, txnIndex (hotlog's .txnindex format:
// the replaced segments' aborted transactions) as its transaction index.
func (u *SegmentUpload) Finish(end int64, before []SegmentMeta, snapshot, txnIndex []byte) (meta SegmentMeta, err error) {
	if u.w == nil {
		return SegmentMeta{}, errors.New("tiering: finishing an empty segment upload")
	}
	u.done = true
	defer func() {
		if err != nil {
			u.p.release(u.stem) // what went up is the cleaner's
		}
	}()
	if _, err := hotlog.DecodeTxnIndex(txnIndex); err != nil || int64(len(txnIndex)) > maxTxnIndexBytes {
		return SegmentMeta{}, errors.Join(fmt.Errorf("%w: transaction index of a compacted segment: %v", ErrCorruptObject, err), u.w.Abort())
	}
	sc := u.sc
	if err := sc.finish(); err != nil {
		return SegmentMeta{}, errors.Join(err, u.w.Abort())
	}
	if sc.end > end {
		return SegmentMeta{}, errors.Join(fmt.Errorf("%w: segment holds offsets up to %d, past %d", ErrCorruptObject, sc.end, end), u.w.Abort())
	}
	if err := u.w.Close(); err != nil {
		return SegmentMeta{}, errors.Join(err, u.w.Abort())
	}
	p := u.p
	meta = SegmentMeta{
		Stem: u.stem, BaseOffset: sc.first, EndOffset: end, Size: sc.pos, CRC32C: sc.crc,
		ChunkSize: p.m.opts.ChunkSize, ChunkCRC32C: hex.EncodeToString(sc.chunkCRCs), MaxTimestamp: sc.idx.maxTs,
		LeaderEpochs: sc.epochs, UploadEpoch: u.epoch, UploadedMs: p.m.opts.Now().UnixMilli(),
		IndexSize: int64(len(sc.idx.offsets)), TimeIndexSize: int64(len(sc.idx.times)), SnapshotSize: int64(len(snapshot)),
		TxnIndexSize: int64(len(txnIndex)),
	}
	epochs := epochCheckpoint(&Manifest{Segments: before}, nil, meta.LeaderEpochs)
	meta.EpochsSize = int64(len(epochs))
	put := func(suffix string, data []byte) func() error {
		return func() error {
			if len(data) == 0 {
				return nil
			}
			return objectstore.PutBytes(u.ctx, p.m.store, u.stem+suffix, data, objectstore.CreateOptions{NoOverwrite: true})
		}
	}
	if err := parallel(put(SuffixIndex, sc.idx.offsets), put(SuffixTimeIndex, sc.idx.times), put(SuffixSnapshot, snapshot),
		put(SuffixEpochs, epochs), put(SuffixTxnIndex, txnIndex)); err != nil {
		return SegmentMeta{}, fmt.Errorf("tiering: %s: upload compacted segment: %w", p.tp, err)
	}
	p.m.metrics.BytesUploaded.Add(meta.Size)
	return meta, nil
}

// Abort discards what was uploaded of the .log object (objects already
// complete are left to the orphan cleaner).
func (u *SegmentUpload) Abort() {
	if u.w != nil && !u.done {
		u.done = true
		u.w.Abort()
		u.p.release(u.stem)
	}
}

// hold marks stem as an upload in progress (see Partition.held).
func (p *Partition) hold(stem string, epoch int32) {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	if p.held == nil {
		p.held = map[string]int32{}
	}
	p.held[stem] = epoch
}

// release lets go of stems: from now on the committed manifest alone
// decides whether the orphan cleaner deletes their objects.
func (p *Partition) release(stems ...string) {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	for _, s := range stems {
		delete(p.held, s)
	}
}

// heldEpoch returns the epoch stem was uploaded in, if it is still held.
func (p *Partition) heldEpoch(stem string) (int32, bool) {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	e, ok := p.held[stem]
	return e, ok
}

// ReadSnapshot returns a remote segment's producer snapshot (nil if it has
// none).
func (p *Partition) ReadSnapshot(ctx context.Context, seg SegmentMeta) ([]byte, error) {
	if seg.SnapshotSize == 0 {
		return nil, nil
	}
	return objectstore.ReadAll(ctx, p.m.store, seg.Stem+SuffixSnapshot, 1<<30)
}

// ReadTxnIndex returns a remote segment's transaction index object (nil if
// it has none).
func (p *Partition) ReadTxnIndex(ctx context.Context, seg SegmentMeta) ([]byte, error) {
	if seg.TxnIndexSize == 0 {
		return nil, nil
	}
	return objectstore.ReadAll(ctx, p.m.store, seg.Stem+SuffixTxnIndex, seg.TxnIndexSize)
}

// DeleteSegments deletes the objects of uploaded segments that were never
// committed (a refused swap), at once.
func (p *Partition) DeleteSegments(ctx context.Context, segs []SegmentMeta) error {
	var keys []string
	for i := range segs {
		keys = append(keys, segs[i].Keys()...)
	}
	defer func() { // after the delete: what it missed is the cleaner's
		for i := range segs {
			p.release(segs[i].Stem)
		}
	}()
	if len(keys) == 0 {
		return nil
	}
	return p.m.store.Delete(ctx, keys...)
}

// Replacement swaps a run of adjacent segments of the manifest for the
// segments that compacting them produced.
type Replacement struct {
	Old []string      // stems of the replaced run, in manifest order
	New []SegmentMeta // in offset order, within the run's offsets; may be empty
}

// ReplaceSegments commits, under fence, a manifest in which each
// replacement's run is swapped for its new segments, and the compaction
// checkpoint (Manifest.CleanedUpTo) is raised to cleanedUpTo. It serialises
// with the partition's rounds and commits only as the partition's leader.
// Every run must still be in the committed manifest as it was read
// (uploads may have added segments since, retention may not have dropped any
// of them); otherwise nothing is committed and the error wraps ErrConflict.
// A refused lease gives an error wrapping ErrLeaseLost. The replaced
// segments are kept (Manifest.Retired) for Options.OrphanGrace; retired
// entries older than that leave the manifest (the orphan cleaner deletes
// their objects).
//
// The new segments must have been uploaded with this Partition's
// SegmentUpload in the current leader epoch and still be held (not
// released); their objects are checked with HEAD under runMu, which the
// orphan cleaner holds too. So a commit never references an object the
// cleaner may have deleted, however long the compaction pass took: while
// this broker leads in the same epoch its cleaner skips held uploads, and a
// pass that spans a leader change (another leader's cleaner knows nothing of
// them) is refused with ErrConflict. Whatever the outcome, the new segments
// are released: from then on the committed manifest decides.
func (p *Partition) ReplaceSegments(ctx context.Context, reps []Replacement, cleanedUpTo int64, fence Fence) error {
	fc, ok := p.m.opts.Committer.(FencedCommitter)
	if !ok {
		return errors.New("tiering: the Committer cannot carry a lease (no FencedCommitter)")
	}
	p.runMu.Lock()
	defer p.runMu.Unlock()
	var newSegs []SegmentMeta
	for _, rep := range reps {
		newSegs = append(newSegs, rep.New...)
	}
	defer func() {
		for i := range newSegs {
			p.release(newSegs[i].Stem)
		}
	}()
	if p.removed.Load() {
		return ErrClosed
	}
	epoch, ok := p.m.opts.Leadership.LeaderEpoch(p.tp)
	if !ok {
		return ErrNotLeader
	}
	if err := p.checkUploads(ctx, epoch, newSegs); err != nil {
		return err
	}
	st, err := p.refresh(ctx)
	if err != nil {
		return err
	}
	nm := st.manifest.clone()
	nowMs := p.m.opts.Now().UnixMilli()
	var retired []RetiredSegment
	for _, r := range st.manifest.Retired {
		if r.RetiredMs >= nowMs-p.m.opts.OrphanGrace.Milliseconds() {
			retired = append(retired, r)
		}
	}
	for _, rep := range reps {
		i := -1
		for j := range nm.Segments {
			if len(rep.Old) > 0 && nm.Segments[j].Stem == rep.Old[0] {
				i = j
				break
			}
		}
		if i < 0 || i+len(rep.Old) > len(nm.Segments) {
			return fmt.Errorf("%w: %s: a compacted run is no longer in the manifest", ErrConflict, p.tp)
		}
		for k, stem := range rep.Old {
			if nm.Segments[i+k].Stem != stem {
				return fmt.Errorf("%w: %s: a compacted run changed in the manifest", ErrConflict, p.tp)
			}
			retired = append(retired, RetiredSegment{Stem: stem, RetiredMs: nowMs})
		}
		first, last := nm.Segments[i].BaseOffset, nm.Segments[i+len(rep.Old)-1].EndOffset
		for _, s := range rep.New {
			if s.BaseOffset < first || s.EndOffset > last {
				return fmt.Errorf("tiering: %s: compacted segment [%d, %d) outside its run [%d, %d)", p.tp, s.BaseOffset, s.EndOffset, first, last)
			}
		}
		segs := append([]SegmentMeta(nil), nm.Segments[:i]...)
		segs = append(segs, rep.New...)
		nm.Segments = append(segs, nm.Segments[i+len(rep.Old):]...)
	}
	nm.Retired = retired
	nm.CleanedUpTo = max(nm.CleanedUpTo, min(cleanedUpTo, nm.EndOffset))
	_, err = p.commitWith(ctx, epoch, st, nm, func(key string, expected int64) error {
		return fc.CommitRemoteLogFenced(ctx, p.tp, epoch, expected, key, nm.StartOffset, nm.EndOffset, fence)
	})
	return err
}

// checkUploads checks, under runMu, that every compacted segment about to be
// committed is still held from an upload in epoch and that its objects are
// in the bucket; otherwise it returns an error wrapping ErrConflict.
func (p *Partition) checkUploads(ctx context.Context, epoch int32, segs []SegmentMeta) error {
	for i := range segs {
		s := &segs[i]
		e, ok := p.heldEpoch(s.Stem)
		switch {
		case !ok:
			return fmt.Errorf("%w: %s: compacted segment %s is not an upload in progress of this broker", ErrConflict, p.tp, s.Stem)
		case e != epoch || s.UploadEpoch != epoch:
			return fmt.Errorf("%w: %s: compacted segment %s was uploaded in leader epoch %d, now %d", ErrConflict, p.tp, s.Stem, e, epoch)
		}
	}
	for i := range segs {
		var fns []func() error
		for _, key := range segs[i].Keys() {
			fns = append(fns, func() error {
				_, err := p.m.store.Head(ctx, key)
				if p.m.store.IsNotExistError(err) {
					return fmt.Errorf("%w: %s: compacted segment object %s is gone: %w", ErrConflict, p.tp, key, err)
				}
				return err
			})
		}
		if err := parallel(fns...); err != nil {
			return err
		}
	}
	return nil
}
