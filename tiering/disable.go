package tiering

import (
	"context"
	"fmt"
)

// Turning remote storage off (KIP-950, Kafka 3.9+): remote.storage.enable
// goes false only together with remote.log.delete.on.disable=true, and the
// partition's remote log is then deleted: its log start becomes the local
// log start, and it goes on as a local-only partition. Kafka's leader does
// it in RemoteLogManager.stopPartitions (deleteRemoteLog); here the
// leader's round does it in two steps, in this order:
//
//  1. One commit (under the partition's retention lease when leases are
//     set): a manifest without segments whose range is empty, at
//     max(local log start, remote start). From this commit on no reader
//     is sent to the bucket: the log start of both tiers is the local one
//     (EarliestOffset), a fetch below it is out of range.
//  2. The segments' objects are deleted. A crash or a failed DELETE in
//     between leaves orphans, which CleanOrphans removes after the grace
//     period, as for any object the manifest no longer names; reads in
//     flight that still use the old manifest meet missing objects and
//     answer a retriable error, after which they find the new log start.
//
// The commit may take the remote end back (down to the local log start),
// which no other commit may: hence its own metadata command version
// (RemoteLogDeleter). Re-enabling remote storage uploads again from the
// local log start of that time (upload never starts below the log start).

// RemoteLogDeleter is implemented by a Committer that can commit the
// deletion of a remote log (the broker's: metadata.CommitRemoteLog with
// DeleteRemoteLog). CommitRemoteLogDeleted is CommitRemoteLog (and
// CommitRemoteLogFenced when fence is not zero) of the empty range
// [start, start), which may end below the current remote end but never
// start below the current remote start.
type RemoteLogDeleter interface {
	CommitRemoteLogDeleted(ctx context.Context, tp TopicPartition, leaderEpoch int32, expectedManifestVersion int64,
		newManifestKey string, start int64, fence Fence) error
}

// empty reports whether the remote log holds nothing: no segment, and no
// range left by compaction emptying its segments.
func (st *remoteState) empty() bool {
	return len(st.manifest.Segments) == 0 && st.ptr.StartOffset >= st.ptr.EndOffset
}

// deleteRemoteLog deletes the partition's remote log (see above) and
// returns the new state. Only the leader calls it, in a round.
func (p *Partition) deleteRemoteLog(ctx context.Context, epoch int32, st *remoteState) (*remoteState, error) {
	d, ok := p.m.opts.Committer.(RemoteLogDeleter)
	if !ok {
		return st, fmt.Errorf("tiering: %s: remote storage is off, and the committer cannot delete the remote log", p.tp)
	}
	start := max(p.log.LogStartOffset(), st.ptr.StartOffset, st.manifest.StartOffset)
	nm := st.manifest.clone()
	dropped := nm.Segments
	nm.Segments = nil
	nm.StartOffset, nm.EndOffset = start, start
	nm.CleanedUpTo = 0 // the compaction checkpoint was of the deleted data
	_, fenced := d.(FencedCommitter)
	ns, err := p.underLease(ctx, st, LeaseRetention, fenced, func(ctx context.Context, fence Fence) (*remoteState, error) {
		return p.commitWith(ctx, epoch, st, nm, func(key string, expected int64) error {
			return d.CommitRemoteLogDeleted(ctx, p.tp, epoch, expected, key, start, fence)
		})
	})
	if err != nil {
		return st, err // nothing deleted
	}
	var keys []string
	for i := range dropped {
		keys = append(keys, dropped[i].Keys()...)
	}
	p.m.opts.Logger.Info("tiering: remote storage turned off: remote log deleted", "partition", p.tp.String(),
		"segments", len(dropped), "remote_was", fmt.Sprintf("[%d,%d)", st.ptr.StartOffset, st.ptr.EndOffset), "log_start", start)
	if len(keys) > 0 {
		if err := p.m.store.Delete(ctx, keys...); err != nil {
			// Orphans now: CleanOrphans finds them.
			return ns, fmt.Errorf("tiering: %s: delete the remote log's segments: %w", p.tp, err)
		}
	}
	p.m.metrics.SegmentsDeletedOnDisable.Add(int64(len(dropped)))
	return ns, nil
}
