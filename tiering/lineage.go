package tiering

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/sediment-io/sediment/hotlog"
)

// The remote log is the history of the leaders that uploaded it. After an
// unclean leader election (or a leader restored from an old copy of its
// data directory) the new leader's log can end below the bucket's end, or
// leave an epoch earlier than the bucket does: the bucket then holds records
// of a history the partition no longer has. Left alone, the new leader would
// upload only from the bucket's end on, so the offsets it appended between
// the point where the histories part and the bucket's end would never go
// up, local retention would delete them as if they had, and reads of them
// would return the lost history's records from the bucket.
//
// Kafka's remote log manager compares the leader's leader-epoch cache with
// the remote segments' epochs and copies from where they part. Here the
// leader does the same at its first round in each leader epoch
// (reconcileLineage): it finds where the manifest stops being its history
// (lineageEnd, the follower's OffsetForLeaderEpoch walk of KIP-101/KIP-279
// run against its own log), and commits a manifest cut back there
// (TruncateRemoteLog), after which its own records go up from that point.
// Followers never delete local data past that point either
// (localRetention), whatever the committed end says.

// RemoteLogTruncator is implemented by a Committer that can commit a
// remote log cut back (the broker's: metadata.CommitRemoteLog with
// TruncateRemoteLog). CommitRemoteLogTruncated is CommitRemoteLog whose end
// may be below the current end; its start is the current start.
type RemoteLogTruncator interface {
	CommitRemoteLogTruncated(ctx context.Context, tp TopicPartition, leaderEpoch int32, expectedManifestVersion int64,
		newManifestKey string, start, end int64) error
}

// remoteEpochs returns the leader epochs of m's segments, one entry per
// epoch change, epochs and offsets ascending (an entry that would break
// the order, which no valid log has, is left out).
func remoteEpochs(m *Manifest) []EpochStart {
	var out []EpochStart
	for i := range m.Segments {
		for _, e := range m.Segments[i].LeaderEpochs {
			if n := len(out); n > 0 && (e.Epoch <= out[n-1].Epoch || e.StartOffset < out[n-1].StartOffset) {
				continue
			}
			out = append(out, e)
		}
	}
	return out
}

// localEndForEpoch answers OffsetForLeaderEpoch from local, a leader-epoch
// cache of a log ending at logEnd, as Kafka's LeaderEpochFileCache.endOffsetFor
// (and hotlog's EndOffsetForEpoch): the largest epoch at most epoch that
// local knows and where it ended, or (-1, -1).
func localEndForEpoch(local []hotlog.LeaderEpoch, epoch int32, logEnd int64) (int32, int64) {
	if epoch < 0 || len(local) == 0 {
		return -1, -1
	}
	if local[len(local)-1].Epoch == epoch {
		return epoch, logEnd
	}
	for i, l := range local {
		if l.Epoch > epoch {
			if i == 0 {
				return epoch, l.StartOffset
			}
			return local[i-1].Epoch, l.StartOffset
		}
	}
	return -1, -1
}

// lineageEnd returns the offset up to which the remote log (its epochs
// remote, ending at remoteEnd) is the history of the local log (its
// leader-epoch cache local, ending at localEnd): remoteEnd if all of it is.
// It is the truncation a follower holding the remote log would do against
// a leader holding the local one, asking for the end of its latest epoch
// until the answer stops moving (KIP-279): an epoch the local log never
// had ends where the local log's previous epoch ended, or where the remote
// log's did, whichever is first.
//
// Remote epochs are read from the batches uploaded, and compaction may
// have removed every batch of an epoch: the answer may then be below the
// true one, never above it. Below is safe (the leader uploads that part
// again from its own log, reconcileLineage never cuts below its local log
// start), above would not be.
func lineageEnd(remote []EpochStart, remoteEnd int64, local []hotlog.LeaderEpoch, localEnd int64) int64 {
	end := remoteEnd
	for {
		n := len(remote)
		for n > 0 && remote[n-1].StartOffset >= end {
			n--
		}
		remote = remote[:n]
		if n == 0 {
			return end
		}
		last := remote[n-1]
		e, u := localEndForEpoch(local, last.Epoch, localEnd)
		var cand int64
		switch {
		case e < 0: // newer than every epoch the local log has
			cand = min(last.StartOffset, localEnd)
		case e == last.Epoch:
			cand = u
		default: // the local log never had last.Epoch
			next := end
			if i := sort.Search(len(remote), func(i int) bool { return remote[i].Epoch > e }); i < len(remote) {
				next = remote[i].StartOffset
			}
			cand = min(u, next)
		}
		if cand >= end {
			return end
		}
		end = cand
	}
}

// lineageBound is the offset below which the committed remote log (st) is
// this replica's history: its end, or less where they part. A replica
// never deletes local data at or past it on the strength of the bucket.
func (p *Partition) lineageBound(st *remoteState) int64 {
	local, leo := p.log.LeaderEpochs()
	return lineageEnd(st.leaderEpochs(), st.manifest.EndOffset, local, leo)
}

// reconcileLineage cuts the committed remote log back to where it stops
// being this leader's history (see above), if it does before its end: the
// segments past that point leave the manifest (retired: readers in flight
// keep them for the orphan grace), and a segment across it is replaced by
// its first part, rewritten from the bucket, when this broker's log no
// longer holds that part. The cut is never below the local log start, so
// nothing this broker cannot upload again leaves the remote log.
func (p *Partition) reconcileLineage(ctx context.Context, epoch int32, st *remoteState) (*remoteState, error) {
	m := st.manifest
	if len(m.Segments) == 0 {
		return st, nil
	}
	local, leo := p.log.LeaderEpochs()
	logStart := p.log.LogStartOffset()
	parts := lineageEnd(st.leaderEpochs(), m.EndOffset, local, leo)
	cut := max(parts, logStart)
	if cut >= m.EndOffset {
		return st, nil
	}
	tr, ok := p.m.opts.Committer.(RemoteLogTruncator)
	if !ok {
		return st, fmt.Errorf("tiering: %s: the remote log [%d, %d) is not this leader's history past %d, and the committer cannot cut it back", p.tp, m.StartOffset, m.EndOffset, cut)
	}
	var keep, drop []SegmentMeta
	var across *SegmentMeta
	for i := range m.Segments {
		s := m.Segments[i]
		switch {
		case s.EndOffset <= cut:
			keep = append(keep, s)
		case s.BaseOffset < cut && s.BaseOffset < logStart:
			across = &m.Segments[i]
			drop = append(drop, s)
		default:
			drop = append(drop, s)
			if s.BaseOffset < cut {
				cut = s.BaseOffset // this broker uploads all of it again
			}
		}
	}
	var rewritten *SegmentMeta
	if across != nil {
		meta, end, err := p.rewritePrefix(ctx, epoch, *across, keep, cut)
		if err != nil {
			return st, err
		}
		cut = end
		if meta.Stem != "" {
			rewritten = &meta
			keep = append(keep, meta)
		}
	}
	nm := m.clone()
	nm.Segments = keep
	nm.EndOffset = max(cut, nm.StartOffset)
	nm.CleanedUpTo = min(nm.CleanedUpTo, nm.EndOffset)
	nowMs := p.m.opts.Now().UnixMilli()
	var retired []RetiredSegment
	for _, r := range m.Retired {
		if r.RetiredMs >= nowMs-p.m.opts.OrphanGrace.Milliseconds() {
			retired = append(retired, r)
		}
	}
	for _, s := range drop {
		retired = append(retired, RetiredSegment{Stem: s.Stem, RetiredMs: nowMs})
	}
	nm.Retired = retired
	ns, err := p.commitWith(ctx, epoch, st, nm, func(key string, expected int64) error {
		return tr.CommitRemoteLogTruncated(ctx, p.tp, epoch, expected, key, nm.StartOffset, nm.EndOffset)
	})
	if rewritten != nil {
		if err != nil {
			_ = p.DeleteSegments(ctx, []SegmentMeta{*rewritten}) // releases it; what it misses is the cleaner's
		} else {
			p.release(rewritten.Stem)
		}
	}
	if err != nil {
		return st, err
	}
	p.m.opts.Logger.Warn("tiering: the bucket held records past this leader's history (an unclean leader election, or a replica restored from an old copy): the remote log is cut back to it; this leader's records from there go up again",
		"partition", p.tp.String(), "leader_epoch", epoch, "histories_part_at", parts, "remote_end_was", m.EndOffset, "remote_end", nm.EndOffset,
		"segments_retired", len(drop), "segment_rewritten", rewritten != nil)
	return ns, nil
}

// rewritePrefix uploads the batches of remote segment seg that end at or
// below limit as a new segment (its objects held until the caller commits
// or deletes it), and returns its manifest entry (zero if seg has no such
// batch) and the offset the rewritten part stands for up to: limit, or the
// base of the first batch past it if that is lower.
func (p *Partition) rewritePrefix(ctx context.Context, epoch int32, seg SegmentMeta, before []SegmentMeta, limit int64) (SegmentMeta, int64, error) {
	rc, err := p.OpenSegment(ctx, seg)
	if err != nil {
		return SegmentMeta{}, 0, err
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 64<<10)
	u := p.NewSegmentUpload(ctx, epoch)
	w := uploadWriter{u}
	end := limit
	var pos int64
	for pos < seg.Size {
		var hdr [hotlog.BatchHeaderSize]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			u.Abort()
			return SegmentMeta{}, 0, fmt.Errorf("%w: %s: segment %s at byte %d: %v", ErrCorruptObject, p.tp, seg.Stem, pos, err)
		}
		h, err := hotlog.ParseBatchHeader(hdr[:])
		if err != nil || pos+h.Size() > seg.Size {
			u.Abort()
			return SegmentMeta{}, 0, fmt.Errorf("%w: %s: segment %s: batch at byte %d of %d: %v", ErrCorruptObject, p.tp, seg.Stem, pos, seg.Size, err)
		}
		if h.LastOffset() >= limit {
			end = min(end, h.BaseOffset)
			break
		}
		// Streamed: the upload checks the batch's CRC as it goes.
		if err := u.Write(hdr[:]); err != nil {
			u.Abort()
			return SegmentMeta{}, 0, err
		}
		if _, err := io.CopyN(w, br, h.Size()-hotlog.BatchHeaderSize); err != nil {
			u.Abort()
			return SegmentMeta{}, 0, fmt.Errorf("tiering: %s: rewrite segment %s at byte %d: %w", p.tp, seg.Stem, pos, err)
		}
		pos += h.Size()
	}
	if u.Empty() {
		return SegmentMeta{}, seg.BaseOffset, nil
	}
	var txn []byte
	if raw, err := p.ReadTxnIndex(ctx, seg); err != nil {
		u.Abort()
		return SegmentMeta{}, 0, err
	} else if raw != nil {
		entries, err := hotlog.DecodeTxnIndex(raw)
		if err != nil {
			u.Abort()
			return SegmentMeta{}, 0, fmt.Errorf("%w: %s: %s%s: %v", ErrCorruptObject, p.tp, seg.Stem, SuffixTxnIndex, err)
		}
		var kept []hotlog.AbortedTxn
		for _, a := range entries {
			if a.LastOffset < end {
				kept = append(kept, a)
			}
		}
		if len(kept) > 0 {
			txn = hotlog.AppendTxnIndex(nil, kept)
		}
	}
	meta, err := u.Finish(end, before, nil, txn)
	if err != nil {
		return SegmentMeta{}, 0, err
	}
	return meta, end, nil
}

// uploadWriter is a SegmentUpload as an io.Writer.
type uploadWriter struct{ u *SegmentUpload }

func (w uploadWriter) Write(b []byte) (int, error) {
	if err := w.u.Write(b); err != nil {
		return 0, err
	}
	return len(b), nil
}
