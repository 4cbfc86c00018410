package compaction

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/tiering"
)

// Tiered compaction: the log cleaner over a partition's remote log (the
// segments in the bucket), for topics with remote.storage.enable and
// cleanup.policy=compact. A pass, run by the worker holding the partition's
// LeaseCompact lease (RunLeased), is two steps:
//
//	plan, err := c.PrepareRemote(ctx, RemoteTarget{Remote: tp, Local: l, Config: cfg, Txn: txns})
//	err = plan.Commit(ctx, tiering.Fence{Kind: "compact", Resource: name, Holder: lease.Holder, Token: lease.Token})
//
// PrepareRemote reads the committed manifest, builds the key map over the
// remote log's dirty part (from the manifest's CleanedUpTo) and then over the
// local log's cleanable data above the remote end (newer data: its keys
// win), downloads the remote segments below the mapped end in groups (the
// local cleaner's grouping rule, by SegmentMeta.Size), rewrites each group
// with the same filter as the local cleaner and uploads the result as a new
// segment (fresh unique keys: nothing is overwritten). Commit swaps the groups
// for their results in one compare-and-set manifest commit carrying the
// lease's fencing token; the metadata log refuses it if the lease was taken
// over (ErrLeaseLost) and tiering refuses it if a group left the manifest
// meanwhile (tiering.ErrConflict); either way the uploads are deleted and
// nothing changed. The replaced objects stay in the bucket for the orphan
// grace (readers in flight), then the orphan cleaner deletes them.
//
// Transactions: the remote log's aborted-transaction state is not at hand,
// so the remote cleaner is conservative: transactional data never enters
// the key map (a committed transactional value does not hide an older one:
// both stay), transactional tombstones and control markers are always kept.
// Non-transactional records are compacted exactly as locally.

// RemoteLog is what tiered compaction needs of a partition's remote log;
// *tiering.Partition implements it.
type RemoteLog interface {
	Manifest(ctx context.Context) (*tiering.Manifest, error)
	LeaderEpoch() (int32, bool)
	OpenSegment(ctx context.Context, seg tiering.SegmentMeta) (io.ReadCloser, error)
	NewSegmentUpload(ctx context.Context, epoch int32) *tiering.SegmentUpload
	ReadSnapshot(ctx context.Context, seg tiering.SegmentMeta) ([]byte, error)
	ReadTxnIndex(ctx context.Context, seg tiering.SegmentMeta) ([]byte, error)
	ReplaceSegments(ctx context.Context, reps []tiering.Replacement, cleanedUpTo int64, fence tiering.Fence) error
	DeleteSegments(ctx context.Context, segs []tiering.SegmentMeta) error
}

var _ RemoteLog = (*tiering.Partition)(nil)

// RemoteTarget is one partition for PrepareRemote.
type RemoteTarget struct {
	Remote RemoteLog
	// Local is the partition's local log (nil: none): its cleanable data
	// above the remote end is mapped too, so that newer values drop older
	// remote ones.
	Local  *hotlog.Log
	Config TopicConfig
	// Txn bounds the local part at the first unstable offset (nil: none).
	Txn Transactions
}

// RemoteRange is the compaction state of a remote log, from its manifest.
type RemoteRange struct {
	FirstDirty             int64 // the manifest's CleanedUpTo, at least its start
	CleanBytes, DirtyBytes int64 // by whole segments
}

// DirtyRatio is dirty / (clean + dirty) bytes.
func (r RemoteRange) DirtyRatio() float64 {
	if r.CleanBytes+r.DirtyBytes == 0 {
		return 0
	}
	return float64(r.DirtyBytes) / float64(r.CleanBytes+r.DirtyBytes)
}

// RemoteCleanableRange computes a remote log's clean and dirty bytes.
func RemoteCleanableRange(m *tiering.Manifest) RemoteRange {
	r := RemoteRange{FirstDirty: max(m.CleanedUpTo, m.StartOffset)}
	for _, s := range m.Segments {
		if s.EndOffset <= r.FirstDirty {
			r.CleanBytes += s.Size
		} else {
			r.DirtyBytes += s.Size
		}
	}
	return r
}

// RemoteDirtyTimestamp returns the max timestamp of the remote log's first
// dirty batch (the first batch at or past the manifest's CleanedUpTo: its
// oldest uncleaned data), as CleanableRange reads the local log's for
// max.compaction.lag.ms, with the segment that holds it (stem "" and -1 if
// nothing is dirty). It reads the first dirty segment's .log object from its
// start up to that batch's header only (the first batch, unless a pass
// stopped inside the segment), checking each header it passes.
func RemoteDirtyTimestamp(ctx context.Context, remote RemoteLog, m *tiering.Manifest) (stem string, ts int64, err error) {
	firstDirty := max(m.CleanedUpTo, m.StartOffset)
	for _, seg := range m.Segments {
		if seg.EndOffset <= firstDirty {
			continue
		}
		r, err := remote.OpenSegment(ctx, seg)
		if err != nil {
			return "", -1, err
		}
		defer r.Close()
		var hdr [headerSize]byte
		for pos := int64(0); pos < seg.Size; {
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				return "", -1, fmt.Errorf("compaction: read remote segment %s: %w", seg.Stem, err)
			}
			h, err := hotlog.ParseBatchHeader(hdr[:])
			if err != nil || pos+h.Size() > seg.Size {
				return "", -1, fmt.Errorf("%w: remote segment %s at %d: %v", ErrCorrupt, seg.Stem, pos, err)
			}
			if h.LastOffset() >= firstDirty {
				return seg.Stem, h.MaxTimestamp, nil
			}
			if _, err := io.CopyN(io.Discard, r, h.Size()-headerSize); err != nil {
				return "", -1, fmt.Errorf("compaction: read remote segment %s: %w", seg.Stem, err)
			}
			pos += h.Size()
		}
		return "", -1, nil
	}
	return "", -1, nil
}

// RemoteForced reports whether max.compaction.lag.ms forces a remote pass
// at now, whatever the remote dirty ratio: the remote log's oldest
// uncleaned batch (dirtyTs, from RemoteDirtyTimestamp) is older than
// now - cfg.MaxCompactionLag.
func RemoteForced(cfg TopicConfig, dirtyTs int64, now time.Time) bool {
	return cfg.MaxCompactionLag > 0 && dirtyTs >= 0 && dirtyTs < now.Add(-cfg.MaxCompactionLag).UnixMilli()
}

// RemotePlan is a prepared remote pass: uploaded segments waiting for their
// swap. Commit or Abort it.
type RemotePlan struct {
	remote   RemoteLog
	reps     []tiering.Replacement
	uploaded []tiering.SegmentMeta
	mapEnd   int64
	changed  bool
	// Stats describes the pass (MapEnd is the new remote checkpoint).
	Stats Stats
	// BytesBefore and BytesAfter are the replaced groups' bytes and their
	// replacements'.
	BytesBefore, BytesAfter int64
}

// Uploaded returns the segments the plan uploaded (not yet committed).
func (pl *RemotePlan) Uploaded() []tiering.SegmentMeta {
	return append([]tiering.SegmentMeta(nil), pl.uploaded...)
}

// Commit swaps the compacted segments into the manifest under fence (the
// lease the pass ran under). On a refusal the uploads are deleted; the
// error wraps tiering.ErrLeaseLost (ErrLeaseLost too) or tiering.ErrConflict.
func (pl *RemotePlan) Commit(ctx context.Context, fence tiering.Fence) error {
	if !pl.changed {
		return nil
	}
	err := pl.remote.ReplaceSegments(ctx, pl.reps, pl.mapEnd, fence)
	if err != nil {
		if errors.Is(err, tiering.ErrLeaseLost) || errors.Is(err, tiering.ErrConflict) {
			pl.Abort(ctx)
		}
		if errors.Is(err, tiering.ErrLeaseLost) {
			return fmt.Errorf("%w: %w", ErrLeaseLost, err)
		}
		return err
	}
	pl.changed = false
	return nil
}

// Abort deletes the plan's uploads (best effort: the orphan cleaner finds
// what is left).
func (pl *RemotePlan) Abort(ctx context.Context) {
	if len(pl.uploaded) > 0 {
		pl.remote.DeleteSegments(ctx, pl.uploaded)
		pl.uploaded = nil
	}
	pl.changed = false
}

// CleanRemote prepares and commits one remote pass under fence.
func (c *Cleaner) CleanRemote(ctx context.Context, t RemoteTarget, fence tiering.Fence) (*RemotePlan, error) {
	pl, err := c.PrepareRemote(ctx, t)
	if err != nil {
		return pl, err
	}
	return pl, pl.Commit(ctx, fence)
}

// PrepareRemote maps, rewrites and uploads (see the comment at the top of
// remote.go); nothing is visible to readers until the plan's Commit.
func (c *Cleaner) PrepareRemote(ctx context.Context, t RemoteTarget) (pl *RemotePlan, err error) {
	begin := c.now()
	pl = &RemotePlan{remote: t.Remote, Stats: Stats{NextDeleteHorizon: -1}}
	c.stats, c.remote = &pl.Stats, true
	defer func() {
		c.stats, c.remote = nil, false
		if err != nil {
			pl.Abort(context.WithoutCancel(ctx))
		}
	}()
	epoch, ok := t.Remote.LeaderEpoch()
	if !ok {
		return pl, tiering.ErrNotLeader
	}
	m, err := t.Remote.Manifest(ctx)
	if err != nil {
		return pl, err
	}
	if len(m.Segments) == 0 {
		return pl, nil
	}
	cfg := t.Config.withDefaults()
	firstDirty := max(m.CleanedUpTo, m.StartOffset)
	pl.Stats.FirstDirty = firstDirty

	// The key map: the remote dirty part, then the local data above it.
	// min.compaction.lag.ms ends it, as the local cleaner's
	// CleanableRange does, at the first segment holding a record younger
	// than the lag: nothing from there on is mapped or dropped (before,
	// remote data was compacted seconds after its upload whatever the
	// lag; a compaction review).
	c.clearMap()
	mapEnd, stopped := firstDirty, false // stopped: the map ends before the remote end (full, or the lag)
	for _, seg := range m.Segments {
		if seg.EndOffset <= firstDirty {
			continue
		}
		if cfg.MinCompactionLag > 0 && seg.MaxTimestamp > begin.Add(-cfg.MinCompactionLag).UnixMilli() {
			stopped = true
			break
		}
		err := c.scanRemote(ctx, t.Remote, seg, func(h *hotlog.BatchHeader, batch []byte) (bool, error) {
			if h.LastOffset() < firstDirty {
				return true, nil
			}
			if !h.IsControl() && !h.IsTransactional() {
				more, err := c.mapBatch(h, batch, false)
				if err != nil || !more {
					stopped = true
					return false, err
				}
			}
			mapEnd = h.LastOffset() + 1
			c.mapPrev = mapEnd
			return true, nil
		})
		if err != nil {
			return pl, err
		}
		if stopped {
			break
		}
		mapEnd = seg.EndOffset
	}
	if !stopped && t.Local != nil {
		from := m.EndOffset
		r, err := CleanableRange(Target{Log: t.Local, Config: t.Config, Txn: t.Txn, FirstDirty: from}, begin)
		if err != nil {
			return pl, err
		}
		if r.FirstDirty == from && from < r.FirstUncleanable {
			err = c.scan(ctx, t.Local, from, r.FirstUncleanable, func(h *hotlog.BatchHeader, batch []byte) (bool, error) {
				if h.IsControl() || h.IsTransactional() {
					c.mapPrev = h.LastOffset() + 1
					return true, nil
				}
				return c.mapBatch(h, batch, false)
			})
			if err != nil && !errors.Is(err, hotlog.ErrOffsetOutOfRange) {
				return pl, err
			}
		}
	}
	pl.mapEnd = mapEnd
	pl.Stats.MapEnd, pl.Stats.MapEntries, pl.Stats.MapSlots, pl.Stats.MapBytes = mapEnd, c.omap.entries, c.omap.slots(), c.omap.bytes()
	pl.changed = mapEnd > m.CleanedUpTo

	// Rewrite the groups below the mapped end.
	nowMs := begin.UnixMilli()
	newHorizon := nowMs + cfg.DeleteRetention.Milliseconds()
	tr := newTxnTracker(nil)
	for i := 0; i < len(m.Segments) && m.Segments[i].BaseOffset < mapEnd; {
		j := i + 1
		size := m.Segments[i].Size
		for j < len(m.Segments) && m.Segments[j].BaseOffset < mapEnd && size+m.Segments[j].Size <= cfg.SegmentBytes &&
			m.Segments[j].EndOffset-1-m.Segments[i].BaseOffset <= math.MaxInt32 {
			size += m.Segments[j].Size
			j++
		}
		if err := c.rewriteRemoteGroup(ctx, t, pl, m, i, j, epoch, mapEnd, nowMs, newHorizon, tr); err != nil {
			return pl, err
		}
		i = j
	}
	pl.Stats.Duration = c.now().Sub(begin)
	return pl, nil
}

// rewriteRemoteGroup rewrites m.Segments[i:j] into one uploaded segment.
func (c *Cleaner) rewriteRemoteGroup(ctx context.Context, t RemoteTarget, pl *RemotePlan, m *tiering.Manifest, i, j int,
	epoch int32, mapEnd, nowMs, newHorizon int64, tr *txnTracker) error {
	group := m.Segments[i:j]
	up := t.Remote.NewSegmentUpload(ctx, epoch)
	defer up.Abort()
	rewritten, dropped := c.stats.BatchesRewritten, c.stats.RecordsDropped
	c.out = c.out[:0]
	flush := func() error {
		if len(c.out) == 0 {
			return nil
		}
		if err := up.Write(c.out); err != nil {
			return fmt.Errorf("compaction: upload compacted segment: %w", err)
		}
		c.stats.BytesWritten += int64(len(c.out))
		err := c.throttle.wait(ctx, int64(len(c.out)))
		c.out = c.out[:0]
		return err
	}
	target := Target{Config: t.Config}
	for _, seg := range group {
		err := c.scanRemote(ctx, t.Remote, seg, func(h *hotlog.BatchHeader, batch []byte) (bool, error) {
			if err := c.filterBatch(target, tr, h, batch, mapEnd, nowMs, newHorizon); err != nil {
				return false, err
			}
			if int64(len(c.out)) >= c.cfg.ReadChunk {
				return true, flush()
			}
			return true, nil
		})
		if err != nil {
			return err
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if len(group) == 1 && c.stats.BatchesRewritten == rewritten && c.stats.RecordsDropped == dropped {
		c.stats.SegmentsUnchanged++
		return nil // nothing changed and nothing merges
	}
	rep := tiering.Replacement{}
	for _, s := range group {
		rep.Old = append(rep.Old, s.Stem)
		pl.BytesBefore += s.Size
	}
	if !up.Empty() {
		snap, err := t.Remote.ReadSnapshot(ctx, group[len(group)-1])
		if err != nil {
			return fmt.Errorf("compaction: read producer snapshot: %w", err)
		}
		// The aborted transactions of the group stay (the remote cleaner
		// keeps transactional data), so its transaction indexes carry over.
		var txnIndex []byte
		for _, s := range group {
			b, err := t.Remote.ReadTxnIndex(ctx, s)
			if err != nil {
				return fmt.Errorf("compaction: read transaction index: %w", err)
			}
			txnIndex = append(txnIndex, b...)
		}
		meta, err := up.Finish(group[len(group)-1].EndOffset, m.Segments[:i], snap, txnIndex)
		if err != nil {
			return err
		}
		pl.uploaded = append(pl.uploaded, meta)
		rep.New = []tiering.SegmentMeta{meta}
		pl.BytesAfter += meta.Size
	}
	pl.reps = append(pl.reps, rep)
	pl.changed = true
	c.stats.SegmentsBefore += len(group)
	c.stats.SegmentsAfter += len(rep.New)
	return nil
}

// scanRemote calls fn with each whole batch of a remote segment, streamed
// (batch aliases a buffer reused after fn returns); fn returns false to stop.
func (c *Cleaner) scanRemote(ctx context.Context, remote RemoteLog, seg tiering.SegmentMeta,
	fn func(h *hotlog.BatchHeader, batch []byte) (bool, error)) error {
	r, err := remote.OpenSegment(ctx, seg)
	if err != nil {
		return err
	}
	defer r.Close()
	if int64(len(c.rbuf)) < c.cfg.ReadChunk {
		c.rbuf = make([]byte, c.cfg.ReadChunk)
	}
	pending, eof := 0, false
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !eof && pending < len(c.rbuf) {
			n, err := io.ReadFull(r, c.rbuf[pending:])
			pending += n
			c.stats.BytesRead += int64(n)
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				eof = true
			} else if err != nil {
				return fmt.Errorf("compaction: read remote segment %s: %w", seg.Stem, err)
			}
			if err := c.throttle.wait(ctx, int64(n)); err != nil {
				return err
			}
		}
		buf := c.rbuf[:pending]
		need := 0
		for len(buf) >= headerSize {
			h, err := hotlog.ParseBatchHeader(buf)
			if err != nil {
				return fmt.Errorf("%w: remote segment %s: %v", ErrCorrupt, seg.Stem, err)
			}
			if h.Size() > int64(len(buf)) {
				if h.Size() > int64(c.cfg.MaxBatchBytes)+headerSize {
					return fmt.Errorf("%w: remote segment %s: batch of %d bytes", ErrCorrupt, seg.Stem, h.Size())
				}
				need = int(h.Size())
				break
			}
			batch := buf[:h.Size()]
			if crc32.Checksum(batch[offAttributes:], castagnoli) != h.CRC {
				return fmt.Errorf("%w: CRC mismatch in remote batch at offset %d", ErrCorrupt, h.BaseOffset)
			}
			more, err := fn(&h, batch)
			if err != nil || !more {
				return err
			}
			buf = buf[h.Size():]
		}
		if eof {
			if len(buf) != 0 {
				return fmt.Errorf("%w: remote segment %s ends inside a batch", ErrCorrupt, seg.Stem)
			}
			return nil
		}
		consumed := pending - len(buf)
		copy(c.rbuf, buf)
		pending -= consumed
		if need > len(c.rbuf) {
			nb := make([]byte, need)
			copy(nb, c.rbuf[:pending])
			c.rbuf = nb
		}
	}
}
