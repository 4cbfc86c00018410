package tiering

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sediment-io/sediment/hotlog"
)

// retention applies total retention (retention.ms, retention.bytes) across
// both tiers, oldest data first: remote segments past it leave the manifest
// (a new manifest, committed) and then the bucket; local segments past it are
// deleted. Then local retention (local.retention.*) deletes local segments,
// but only those wholly below the committed remote end offset.
func (p *Partition) retention(ctx context.Context, epoch int32, st *remoteState, cfg TopicConfig) error {
	now := p.m.opts.Now().UnixMilli()
	segs := p.log.Segments()
	var errs []error

	// Total retention. Units oldest first: the remote segments, then the
	// local segments past the remote end (the active one excluded).
	if cfg.RetentionMs >= 0 || cfg.RetentionBytes >= 0 {
		type unit struct {
			end, size, maxTs int64
			remote           bool
		}
		var units []unit
		var total int64
		for _, s := range st.manifest.Segments {
			units = append(units, unit{end: s.EndOffset, size: s.Size, maxTs: s.MaxTimestamp, remote: true})
			total += s.Size
		}
		for _, s := range segs {
			if s.NextOffset <= st.manifest.EndOffset {
				continue
			}
			total += localOnlySize(s, st.manifest.EndOffset)
			if s.Sealed {
				units = append(units, unit{end: s.NextOffset, size: localOnlySize(s, st.manifest.EndOffset), maxTs: s.MaxTimestamp})
			}
		}
		newStart, dropRemote := int64(-1), 0
		for _, u := range units {
			expired := (cfg.RetentionBytes >= 0 && total-u.size >= cfg.RetentionBytes) ||
				(cfg.RetentionMs >= 0 && u.maxTs >= 0 && u.maxTs < now-cfg.RetentionMs)
			if !expired {
				break
			}
			total -= u.size
			newStart = u.end
			if u.remote {
				dropRemote++
			}
		}
		if newStart >= 0 {
			// A remote log deleted when remote storage turned off
			// (empty, remote storage off) is not moved along: the
			// local log start is the log start.
			keep := cfg.RemoteStorageEnable || len(st.manifest.Segments) > 0
			if newStart > st.manifest.StartOffset && (st.ptr.ManifestVersion > 0 || len(st.manifest.Segments) > 0) && keep {
				nm := st.manifest.clone()
				dropped := append([]SegmentMeta(nil), nm.Segments[:dropRemote]...)
				nm.Segments = nm.Segments[dropRemote:]
				nm.StartOffset = newStart
				nm.EndOffset = max(nm.EndOffset, newStart)
				ns, err := p.commitLeased(ctx, epoch, st, nm, LeaseRetention)
				if err != nil {
					return err // nothing deleted anywhere
				}
				st = ns
				var keys []string
				for i := range dropped {
					keys = append(keys, dropped[i].Keys()...)
				}
				if err := p.m.store.Delete(ctx, keys...); err != nil {
					// Orphans now: the cleaner finds them.
					errs = append(errs, fmt.Errorf("tiering: %s: delete expired segments: %w", p.tp, err))
				}
				p.m.metrics.SegmentsExpired.Add(int64(len(dropped)))
			}
			if newStart > p.log.LogStartOffset() {
				if err := p.log.DeleteBefore(min(newStart, p.log.LogEndOffset())); err != nil {
					errs = append(errs, fmt.Errorf("tiering: %s: total retention: %w", p.tp, err))
				}
			}
		}
	}

	// The committed remote log start is the partition's log start: local
	// data below it was deleted (DeleteRecords, or retention, whose local
	// step did not happen before a crash).
	if st.ptr.ManifestVersion > 0 && st.manifest.StartOffset > p.log.LogStartOffset() {
		if err := p.log.DeleteBefore(min(st.manifest.StartOffset, p.log.LogEndOffset())); err != nil {
			errs = append(errs, fmt.Errorf("tiering: %s: raise the local log start to the remote one: %w", p.tp, err))
		}
	}
	if err := p.localRetention(st, cfg, now); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// localOnlySize is the part of local segment s above the remote end, which
// the remote segments do not already count. A segment straddles the end
// when leadership moved: the new leader's segments were rolled where its
// own appends fell, and its active segment (never uploaded) can hold the
// old leader's last uploaded offsets. Records are not all one size, so the
// part is estimated by offsets; counting the whole segment would count the
// remote part twice and expire remote data that retention.bytes keeps.
func localOnlySize(s hotlog.SegmentInfo, remoteEnd int64) int64 {
	if s.BaseOffset >= remoteEnd || s.NextOffset <= s.BaseOffset {
		return s.Size
	}
	if s.NextOffset <= remoteEnd {
		return 0
	}
	return int64(float64(s.Size) * float64(s.NextOffset-remoteEnd) / float64(s.NextOffset-s.BaseOffset))
}

// localRetention deletes local segments past local.retention.* that lie
// wholly below the committed remote end offset (st). The leader runs it after
// its uploads; a follower runs it alone (followerRound), so that its copy is
// trimmed as the leader's is, and never above what the bucket holds.
func (p *Partition) localRetention(st *remoteState, cfg TopicConfig, now int64) error {
	if !cfg.RemoteStorageEnable {
		return nil
	}
	segs := p.log.Segments()
	lms, lbytes := cfg.localMs(), cfg.localBytes()
	var size int64
	for _, s := range segs {
		size += s.Size
	}
	// Never past where the bucket stops being this replica's history
	// (lineage.go): after an unclean election the committed end can
	// still be the lost history's until the new leader cuts it back.
	remoteEnd := min(st.ptr.EndOffset, p.lineageBound(st))
	deleteTo := int64(-1)
	deleted := 0
	for _, s := range segs {
		if !s.Sealed || s.NextOffset > remoteEnd {
			break
		}
		if !((lbytes >= 0 && size-s.Size >= lbytes) || (lms >= 0 && s.MaxTimestamp >= 0 && s.MaxTimestamp < now-lms)) {
			break
		}
		size -= s.Size
		deleteTo = s.NextOffset
		deleted++
	}
	if deleteTo > p.log.LogStartOffset() {
		if err := p.log.DeleteBefore(deleteTo); err != nil {
			return fmt.Errorf("tiering: %s: local retention: %w", p.tp, err)
		}
		p.m.metrics.LocalSegmentsDeleted.Add(int64(deleted)) // segments, not passes
	}
	return nil
}

// followerRound is a round on a partition this broker follows: it uploads
// nothing and commits nothing (only the leader does, fenced by its epoch),
// but applies local retention below the remote end the leader committed in
// the metadata log, as Kafka's followers do. It returns ErrNotLeader when it
// did its work, so that callers that need the leader still see it.
//
// It re-reads the pointer also while remote storage is off: a follower
// serving consumers (KIP-392) answers their log start and remote reads
// from that state, which must not outlive the leader's deletion of the
// remote log (disable.go).
func (p *Partition) followerRound(ctx context.Context) error {
	cfg := p.Config()
	st, err := p.refresh(ctx)
	if err != nil {
		return err
	}
	if err := p.localRetention(st, cfg, p.m.opts.Now().UnixMilli()); err != nil {
		return err
	}
	return ErrNotLeader
}

// CleanOrphans deletes the partition's objects that the committed manifest
// does not reference (uploads cut short by a crash, uploads whose commit was
// refused, expired segments whose delete failed, superseded manifests) and
// that are older than Options.OrphanGrace. Objects of compacted segments
// still held by a compaction pass in progress (Partition.held) are kept
// whatever their age: ReplaceSegments may commit them. Only the leader
// cleans. It returns how many objects it deleted.
//
// It lists the bucket before it reads the committed pointer, so that an
// object listed and committed meanwhile is seen as referenced; commits on
// this broker (ReplaceSegments, rounds) wait for runMu, which it holds.
func (p *Partition) CleanOrphans(ctx context.Context) (int, error) {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	if p.removed.Load() {
		return 0, ErrClosed
	}
	if _, ok := p.m.opts.Leadership.LeaderEpoch(p.tp); !ok {
		return 0, ErrNotLeader
	}
	list, err := p.m.store.List(ctx, p.prefix, "")
	if err != nil {
		return 0, fmt.Errorf("tiering: %s: list for orphans: %w", p.tp, err)
	}
	// Always the pointer as committed now, never a cached one.
	st, err := p.refresh(ctx)
	if err != nil {
		return 0, err
	}
	keep := map[string]bool{st.ptr.ManifestKey: true}
	stems := map[string]bool{}
	for _, s := range st.manifest.Segments {
		stems[s.Stem] = true
	}
	graceMs := p.m.opts.Now().Add(-p.m.opts.OrphanGrace).UnixMilli()
	for _, r := range st.manifest.Retired {
		if r.RetiredMs >= graceMs {
			stems[r.Stem] = true // replaced by compaction; reads in flight may still use it
		}
	}
	cutoff := p.m.opts.Now().Add(-p.m.opts.OrphanGrace)
	var orphans []string
	for _, o := range list.Objects {
		if keep[o.Key] || !o.ModTime.Before(cutoff) {
			continue
		}
		if k, err := ParseKey(o.Key); err == nil && k.Kind == 's' {
			if stems[k.Stem] {
				continue
			}
			if _, held := p.heldEpoch(k.Stem); held {
				continue
			}
		}
		if !strings.HasPrefix(o.Key, p.prefix) {
			continue
		}
		orphans = append(orphans, o.Key)
	}
	if len(orphans) == 0 {
		return 0, nil
	}
	if err := p.m.store.Delete(ctx, orphans...); err != nil {
		return 0, fmt.Errorf("tiering: %s: delete orphans: %w", p.tp, err)
	}
	p.m.metrics.OrphansDeleted.Add(int64(len(orphans)))
	p.m.opts.Logger.Info("tiering: deleted orphans", "partition", p.tp.String(), "objects", len(orphans))
	return len(orphans), nil
}

// DeleteRecordsBefore raises the log start of both tiers to offset (Kafka's
// DeleteRecords): remote segments wholly below it leave the manifest (a new
// manifest with StartOffset = offset, committed, EndOffset raised to offset
// if it was below) and then the bucket; the local log start is raised too.
// The remote commit comes first: should the local step not happen (a
// crash), EarliestOffset still answers offset and the leader's next round
// raises the local log start to the remote one. Only the leader may call it.
func (p *Partition) DeleteRecordsBefore(ctx context.Context, offset int64) error {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	epoch, ok := p.m.opts.Leadership.LeaderEpoch(p.tp)
	if !ok {
		return ErrNotLeader
	}
	st, err := p.refresh(ctx)
	if err != nil {
		return err
	}
	if p.log != nil {
		offset = min(offset, p.log.LogEndOffset())
	}
	// Once a manifest is committed, the remote log start is the partition's
	// log start: it moves to offset even past the remote end (an empty
	// remote log [offset, offset)), so that no upload, restart or new
	// leader can put it back below offset. Before the first manifest, the
	// local log start (checkpointed by hotlog) bounds the first upload.
	if st.ptr.ManifestVersion > 0 && offset > st.manifest.StartOffset {
		nm := st.manifest.clone()
		var dropped []SegmentMeta
		for len(nm.Segments) > 0 && nm.Segments[0].EndOffset <= offset {
			dropped = append(dropped, nm.Segments[0])
			nm.Segments = nm.Segments[1:]
		}
		nm.StartOffset = offset
		nm.EndOffset = max(nm.EndOffset, offset)
		if _, err := p.commit(ctx, epoch, st, nm); err != nil {
			return err
		}
		var keys []string
		for i := range dropped {
			keys = append(keys, dropped[i].Keys()...)
		}
		if len(keys) > 0 {
			if err := p.m.store.Delete(ctx, keys...); err != nil {
				p.m.opts.Logger.Warn("tiering: deleting records' segments; the cleaner will", "partition", p.tp.String(), "err", err)
			}
		}
	}
	if p.log != nil && offset > p.log.LogStartOffset() {
		return p.log.DeleteBefore(min(offset, p.log.LogEndOffset()))
	}
	return nil
}
