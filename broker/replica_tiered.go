package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sediment-io/sediment/tiering"
)

// A follower whose fetch offset is below the leader's local log start on a
// topic with a remote log is answered OFFSET_MOVED_TO_TIERED_STORAGE
// (KIP-405): the records it lacks are in the bucket, and copying them back
// to local disk would cost a new replica the whole remote history (years,
// for a long-retention topic) only for local retention to delete it again.
// The follower instead starts its log at the remote log's end, as Kafka's
// follower does with follower.fetch.last.tiered.offset.enable (KIP-1023):
// the leader keeps every offset from there locally (local retention only
// deletes below the remote end), and the follower rebuilds what the log
// below would have given it (Kafka's TierStateMachine.buildRemoteLogAuxState)
// from the bucket: the producer state (the last remote segment's producer
// snapshot, taken when it rolled) and the leader epoch of the last remote
// batch. The aborted transactions below the start stay in the bucket's
// transaction indexes, where reads of those offsets find them.

// errRemoteTailBehind: the bucket's committed end is not past this
// replica's log end although the leader answered
// OFFSET_MOVED_TO_TIERED_STORAGE (this broker's metadata has not yet seen
// the leader's latest commit): the fetcher waits and asks again.
var errRemoteTailBehind = errors.New("broker: the remote log end is not past the replica's log end yet")

// startAtRemoteEnd empties p's log and restarts it at the remote log's end
// with the producer state and leader epoch there, while this broker still
// follows in epoch. It returns the new log start.
func (p *partition) startAtRemoteEnd(ctx context.Context, tp *tiering.Partition, epoch int32) (int64, error) {
	since := int64(0)
	if p.producerIDExpiration > 0 {
		since = time.Now().Add(-p.producerIDExpiration).UnixMilli()
	}
	tail, err := tp.Tail(ctx, since)
	if err != nil {
		return -1, err
	}
	if end := p.log.LogEndOffset(); tail.End <= end {
		return -1, fmt.Errorf("%w (remote end %d, log end %d)", errRemoteTailBehind, tail.End, end)
	}
	st := newProducerState()
	if tail.Snapshot != nil {
		if st, err = unmarshalProducerState(tail.Snapshot); err != nil {
			return -1, fmt.Errorf("broker: producer snapshot at %d in the bucket: %w", tail.From, err)
		}
		st.legacyAborted = nil // the bucket's transaction indexes hold them
	}
	if err := replayRemote(ctx, tp, st, tail.From, tail.End); err != nil {
		return -1, err
	}
	if p.producerIDExpiration > 0 {
		st.expire(since)
	}
	p.role.RLock()
	defer p.role.RUnlock()
	if !p.follows(epoch) {
		return -1, errRoleChanged
	}
	var firstErr error
	if err := p.log.StartAt(tail.End, tail.Epoch, st.marshal()); err != nil {
		firstErr = err
	}
	p.resetDurableEnd()
	if err := p.loadProducers(); err != nil {
		firstErr = keepFirst(firstErr, err)
	}
	return tail.End, firstErr
}

// replayRemote applies the remote batches [from, to) to st (applyBatches,
// as loadProducers replays the local log after its snapshot).
func replayRemote(ctx context.Context, tp *tiering.Partition, st *producerState, from, to int64) error {
	for from < to {
		res, err := tp.Read(ctx, from, 1<<20, to)
		if err != nil {
			return fmt.Errorf("broker: replaying the producer state from the bucket at %d: %w", from, err)
		}
		b, err := res.Bytes()
		next := res.NextOffset
		res.Release()
		if err != nil {
			return fmt.Errorf("broker: replaying the producer state from the bucket at %d: %w", from, err)
		}
		// The remote end is a segment end: no batch read here passes it.
		// The aborted transactions stay in the bucket's indexes.
		next = max(next, applyBatches(st, b, from, nil))
		if next <= from {
			return fmt.Errorf("broker: replaying the producer state from the bucket: no progress at %d", from)
		}
		from = next
	}
	return nil
}

// startAtRemoteEnd is the fetcher's answer to OFFSET_MOVED_TO_TIERED_STORAGE
// for p, which it follows in epoch.
func (f *fetcher) startAtRemoteEnd(ctx context.Context, p *partition, epoch int32) error {
	b := f.r.s.b
	g := b.tier()
	if g == nil {
		return errors.New("the leader's records before its local log start are in the bucket, and this broker has no bucket configured")
	}
	tp := g.tierPartition(p)
	if tp == nil {
		return errors.New("no tiering state for the partition")
	}
	from := p.log.LogEndOffset()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start, err := p.startAtRemoteEnd(ctx, tp, epoch)
	if err != nil {
		return err
	}
	b.metrics.replicaRemoteStarts.Inc()
	p.logger.Info("replica starts its log at the remote log end: the records before it are in the bucket",
		"log_end_was", from, "log_start", start, "leader", f.leader, "leader_epoch", epoch)
	return nil
}
