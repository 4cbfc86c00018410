package broker

// Replication: the broker side of broker/replica (see docs/replication.md).
//
// Every broker opens the partitions it is a replica of. The leader appends
// client batches and serves fetches; followers fetch from it (one fetcher
// goroutine per leader broker, requests built with kmsg and sent through a
// kgo client) and append what they get with hotlog's AppendReplicated. A
// follower's fetch offset tells the leader its durable log end; the leader
// keeps those in a replica.Tracker, raises the high watermark to the
// smallest end over the ISR and asks the controller to shrink or expand the
// ISR (ChangeLeaderAndISR) from a loop that runs every lag/4.
//
// Locks: partition.repl.mu guards the role and assignment; it is never held
// while calling into the log or the metadata node, and never together with
// partition.mu.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/replica"
	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/reqtime"
	"github.com/sediment-io/sediment/metadata"
)

// replState is a partition's replication role and assignment.
type replState struct {
	// durableEnd is the local log end that the flush policy has made
	// durable (what the leader counts for itself in the high watermark).
	durableEnd atomic.Int64
	// durableMu orders onDurable's raise of durableEnd against
	// resetDurableEnd (a leaf lock).
	durableMu sync.Mutex

	mu struct {
		sync.Mutex
		version        uint64 // metadata version last applied
		applied        bool   // an assignment was applied (at any version)
		leader         int32
		leaderEpoch    int32
		partitionEpoch int32
		replicas, isr  []int32
		tracker        *replica.Tracker // non-nil while this broker leads
		epochStart     int64            // log end when this leadership began
		isrPending     bool             // an ISR change is being proposed
		// isrProposal is the last ISR change proposed whose fate the
		// leader does not know yet (no answer, or refused as stale before
		// this broker applied the change that made it stale). It may
		// still commit, so it is proposed again, unchanged, until it
		// commits or is refused, or the partition epoch moves past it.
		isrProposal *metadata.ChangeLeaderAndISR
	}
}

// applyAssignment applies the partition's metadata (idempotent; older
// versions are ignored). It reports whether this broker became a follower of
// a (new) leader or leader epoch, which needs a truncation before fetching.
func (p *partition) applyAssignment(self int32, mp *metadata.Partition, version uint64) {
	r := &p.repl
	stale := func() bool {
		// Version 0 (a lookup that opened the partition) applies only
		// to a partition that has no assignment yet.
		return (version == 0 && r.mu.applied) || (version != 0 && version <= r.mu.version)
	}
	roleChanges := func() bool {
		return !r.mu.applied || (mp.Leader == self) != (r.mu.tracker != nil) || mp.LeaderEpoch != r.mu.leaderEpoch
	}
	r.mu.Lock()
	if stale() {
		r.mu.Unlock()
		return // the common case (every lookup applies version 0): no role lock
	}
	if roleChanges() {
		// The role changes only between writes (partition.role). Other
		// changes (the ISR, the replicas: every metadata version
		// reapplies them) need not wait for the writes in flight.
		r.mu.Unlock()
		p.role.Lock()
		defer p.role.Unlock()
		r.mu.Lock()
		if stale() {
			r.mu.Unlock()
			return
		}
	}
	wasApplied := r.mu.applied
	r.mu.version, r.mu.applied = version, true
	now := time.Now()
	wasLeader := r.mu.tracker != nil
	newEpoch := mp.LeaderEpoch != r.mu.leaderEpoch
	oldISR := r.mu.isr
	r.mu.leader, r.mu.leaderEpoch, r.mu.partitionEpoch = mp.Leader, mp.LeaderEpoch, mp.PartitionEpoch
	r.mu.replicas, r.mu.isr = slices.Clone(mp.Replicas), slices.Clone(mp.ISR)
	r.mu.isrPending = false
	switch {
	case mp.Leader == self && (!wasLeader || newEpoch):
		r.mu.tracker = replica.NewTracker(self)
		r.mu.tracker.Reset(mp.Replicas, mp.ISR, now)
		r.mu.epochStart = p.log.LogEndOffset()
	case mp.Leader == self:
		r.mu.tracker.SetAssignment(mp.Replicas, mp.ISR, now)
	default:
		r.mu.tracker = nil
	}
	leads := r.mu.tracker != nil
	r.mu.Unlock()
	p.mu.Lock()
	p.mu.leaderEpoch = mp.LeaderEpoch
	p.mu.Unlock()
	p.logRoleChange(self, mp, wasApplied, wasLeader, newEpoch, oldISR)
	if leads && wasLeader && !newEpoch && p.isrChanges != nil {
		p.isrChanges.count(oldISR, mp.ISR)
	}
	if leads && p.rebuildPending() {
		// A follower's truncation whose producer-state rebuild failed
		// is retried by its fetcher; a leader has none, and its last
		// stable offset would stay at the log start. Rebuild now (the
		// role lock is held: no write is in flight).
		if err := p.loadProducers(); err != nil && p.logger != nil {
			p.logger.Warn("rebuilding the producer state on taking the leadership failed", "err", err)
		}
	}
	p.advanceHighWatermark()
	// Waiters (acks=all, long polls) look again: the role or ISR changed.
	p.wake()
}

// logRoleChange logs, as Kafka's brokers do, a leadership this broker takes
// or loses, and an ISR change of a partition it leads (its own proposals,
// and the controller's when it fences a broker).
func (p *partition) logRoleChange(self int32, mp *metadata.Partition, wasApplied, wasLeader, newEpoch bool, oldISR []int32) {
	if p.logger == nil {
		return
	}
	leads := mp.Leader == self
	switch {
	case leads && (!wasLeader || newEpoch):
		p.logger.Info("leading the partition", "leader_epoch", mp.LeaderEpoch, "isr", mp.ISR, "log_end_offset", p.log.LogEndOffset())
	case wasLeader && !leads:
		p.logger.Info("no longer leading the partition", "leader", mp.Leader, "leader_epoch", mp.LeaderEpoch)
	case leads && wasApplied && !slices.Equal(oldISR, mp.ISR):
		p.logger.Info("ISR changed", "from", oldISR, "to", mp.ISR, "partition_epoch", mp.PartitionEpoch)
	}
}

// endOffsetForEpoch answers OffsetForLeaderEpoch as the leader: the log's
// epoch checkpoint, with the current leader epoch counted as beginning at the
// log end when the leadership began (epochStart) even before anything is
// written in it, as Kafka's leader records it on becoming leader
// (Partition.makeLeader). Without it an epoch past the log's last one (a
// follower that led in between, writing records this leader never had) was
// UNDEFINED, and the follower cut its log to its high watermark, below
// records the ISR had committed.
func (p *partition) endOffsetForEpoch(epoch int32) (int32, int64, error) {
	p.repl.mu.Lock()
	leads, current, start := p.repl.mu.tracker != nil, p.repl.mu.leaderEpoch, p.repl.mu.epochStart
	p.repl.mu.Unlock()
	le, end, err := p.log.EndOffsetForEpoch(epoch)
	if err != nil || le >= 0 || !leads || epoch < 0 || epoch > current {
		return le, end, err
	}
	// Nothing of epoch, nor of any later one, is in the log (else the
	// checkpoint had answered): the log's epochs end before it, and
	// current, unwritten, begins at start.
	switch latest := p.log.LatestEpoch(); {
	case latest >= epoch:
		// Written in since the checkpoint was read: it answers now.
		return p.log.EndOffsetForEpoch(epoch)
	case epoch == current:
		return current, p.log.LogEndOffset(), nil
	case latest >= 0:
		return latest, start, nil
	default:
		return epoch, start, nil
	}
}

// isLeader reports whether this broker leads the partition in epoch
// (any epoch when epoch < 0).
func (p *partition) isLeader(epoch int32) bool {
	p.repl.mu.Lock()
	defer p.repl.mu.Unlock()
	return p.repl.mu.tracker != nil && (epoch < 0 || p.repl.mu.leaderEpoch == epoch)
}

// hasFollower reports whether broker id is a follower of the partition this
// broker leads (a replica other than the leader).
func (p *partition) hasFollower(id int32) bool {
	p.repl.mu.Lock()
	defer p.repl.mu.Unlock()
	return p.repl.mu.tracker != nil && id != p.repl.mu.leader && slices.Contains(p.repl.mu.replicas, id)
}

// follows reports whether this broker follows the partition's leader in
// epoch.
func (p *partition) follows(epoch int32) bool {
	p.repl.mu.Lock()
	defer p.repl.mu.Unlock()
	return p.repl.mu.tracker == nil && p.repl.mu.leaderEpoch == epoch
}

// errRoleChanged: a follower's write (a fetched batch, a truncation) made
// for a leader epoch this broker no longer follows in; it is dropped (the
// fetcher starts over in the new role).
var errRoleChanged = errors.New("broker: the partition's role or leader epoch changed")

// isrSize is the size of the committed ISR.
func (p *partition) isrSize() int {
	p.repl.mu.Lock()
	defer p.repl.mu.Unlock()
	return len(p.repl.mu.isr)
}

// noteDurableEnd records that the log is durable up to end.
func (p *partition) noteDurableEnd(end int64) {
	for {
		cur := p.repl.durableEnd.Load()
		if end <= cur || p.repl.durableEnd.CompareAndSwap(cur, end) {
			return
		}
	}
}

// resetDurableEnd sets the durable end after opening or truncating the log.
func (p *partition) resetDurableEnd() {
	p.repl.durableMu.Lock()
	defer p.repl.durableMu.Unlock()
	p.repl.durableEnd.Store(p.log.LogEndOffset())
}

// onDurable is the log's report that a background fsync (started by an
// acks=1 or acks=0 append) made it durable to end: the high watermark may
// move. It re-reads the log's durable end under durableMu, as
// resetDurableEnd does, so that a report computed before a truncation
// cannot raise the durable end past the truncated log's.
func (p *partition) onDurable(int64) {
	p.repl.durableMu.Lock()
	p.noteDurableEnd(p.log.DurableEnd())
	p.repl.durableMu.Unlock()
	p.advanceHighWatermark()
}

// advanceHighWatermark raises the leader's high watermark to the smallest
// durable log end over the ISR, waking waiters when it moved.
func (p *partition) advanceHighWatermark() {
	p.repl.mu.Lock()
	tr := p.repl.mu.tracker
	p.repl.mu.Unlock()
	if tr == nil {
		return
	}
	hw := tr.HighWatermark(min(p.repl.durableEnd.Load(), p.log.LogEndOffset()))
	p.mu.Lock()
	moved := hw > p.log.HighWatermark()
	if moved {
		p.log.SetHighWatermark(hw)
	}
	p.mu.Unlock()
	if moved {
		p.wake()
	}
}

// recordFollowerFetch notes a follower's fetch offset (its durable log end),
// sent by its incarnation brokerEpoch (-1 unknown).
// recordFollowerFetch notes follower id's fetch at offset; joinable is set
// when the follower, out of the ISR, has caught up (the ISR loop should look
// now, as Kafka's leader expands the ISR at such a fetch).
func (p *partition) recordFollowerFetch(id int32, brokerEpoch, offset int64) (joinable bool) {
	p.repl.mu.Lock()
	tr := p.repl.mu.tracker
	p.repl.mu.Unlock()
	if tr == nil {
		return false
	}
	if tr.RecordFetch(id, brokerEpoch, offset, p.log.LogEndOffset(), time.Now()) {
		p.advanceHighWatermark()
	}
	return tr.Joinable(id, p.log.HighWatermark())
}

// waitCommitted waits until the high watermark passes last (acks=all),
// while this broker leads in epoch. It fails with NOT_LEADER_OR_FOLLOWER
// when leadership moves, REQUEST_TIMED_OUT at the deadline.
func (p *partition) waitCommitted(last int64, epoch int32, deadline time.Time, stopping <-chan struct{}) error {
	return p.waitCommittedCtx(nil, last, epoch, deadline, stopping)
}

// waitCommittedCtx is waitCommitted that also ends (with the context's
// error) when done is closed; a nil done never is.
func (p *partition) waitCommittedCtx(done <-chan struct{}, last int64, epoch int32, deadline time.Time, stopping <-chan struct{}) error {
	wake := make(chan struct{}, 1)
	p.addWaiter(wake)
	defer p.removeWaiter(wake)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		// The high watermark counts only while this broker still leads
		// in epoch once it is read (as Kafka's
		// checkEnoughReplicasReachOffset): after the leadership moved it
		// is the new leader's, over a log that may have cut last and
		// taken another batch at that offset.
		hw := p.log.HighWatermark()
		if !p.isLeader(epoch) {
			return errNotLeader
		}
		if hw > last {
			return nil
		}
		select {
		case <-wake:
		case <-t.C:
			return kerr.RequestTimedOut
		case <-stopping:
			return errNotLeader
		case <-done:
			return context.Canceled
		}
	}
}

// loneWritesWait bounds awaitLoneWrites: a disk that takes longer to fsync
// gets the high watermark as it is.
const loneWritesWait = 5 * time.Second

// awaitLoneWrites gives read-your-writes to ListOffsets and DeleteRecords
// on a partition whose ISR is the leader alone: it waits until the high
// watermark reaches the log end as of the call, i.e. until the fsync that
// acks=1 and acks=0 appends started (log-flush commit) is done. Kafka moves
// such a partition's high watermark with the append, so there an acks=1
// answer means the records are counted by a ListOffsets that follows, and
// clients rely on it (kafkajs's deleteRecords and fetchTopicsOffset tests,
// sarama's TestFuncAdminDeleteRecords and TestFuncAdminListOffsets: produce,
// then at once read the latest offset or delete up to it). Here the high
// watermark passes only fsynced records, so without the wait the latest
// offset trailed acks=1 for an fsync's time. The produce path keeps
// answering acks=1 before the fsync. With more in-sync replicas Kafka's
// high watermark trails too (the followers move it), and the other flush
// policies do not fsync at once: no wait.
func (b *Broker) awaitLoneWrites(ctx context.Context, p *partition) {
	if b.cfg.LogFlush != "commit" || p.isrSize() != 1 {
		return
	}
	end := p.log.LogEndOffset()
	if p.log.HighWatermark() >= end {
		return
	}
	defer reqtime.Wait(ctx)()
	_ = p.waitCommittedCtx(ctx.Done(), end-1, p.leaderEpoch(), time.Now().Add(loneWritesWait), b.stopping)
}

// internalWriteTimeout bounds how long a write of the broker's own (group
// and transaction coordinator records, transaction markers) waits for the
// ISR when its context has no earlier deadline.
const internalWriteTimeout = 30 * time.Second

// appendInternal appends one batch the broker writes itself to a partition
// it leads and waits until the ISR has it (the high watermark passed it), as
// Kafka's coordinators write with acks=-1. Answering a client, or moving a
// transaction on, after a local append only let a leader change drop an
// acknowledged offset commit or transaction state (the new leader, an ISR
// member, need not have the tail), so committed offsets and producer epochs
// went back (franz-go's TestTxnEtl under rolling restarts: PRODUCER_FENCED,
// records consumed twice). Waiting fails with errNotLeader when the
// leadership moves, kerr.RequestTimedOut at the deadline; the batch may stay
// in the log then, as in Kafka.
func (p *partition) appendInternal(ctx context.Context, batch []byte, stopping <-chan struct{}) error {
	return p.appendInternalTxn(ctx, batch, txnWriteCheck{}, stopping)
}

// appendInternalTxn is appendInternal for a TxnOffsetCommit's transactional
// batch, checked at the append with v as a Produce's batch is (txns.go).
func (p *partition) appendInternalTxn(ctx context.Context, batch []byte, v txnWriteCheck, stopping <-chan struct{}) error {
	epoch := p.leaderEpoch()
	res, err := p.appendProduced(batch, math.MaxInt32, epoch, false, false, v, func() {})
	if err != nil {
		return err
	}
	return p.waitInternal(ctx, epoch, res.baseOffset, batch, stopping)
}

// waitInternal waits until the ISR has batch, appended at base while this
// broker led in epoch (see appendInternal).
func (p *partition) waitInternal(ctx context.Context, epoch int32, base int64, batch []byte, stopping <-chan struct{}) error {
	h, err := hotlog.ParseBatchHeader(batch)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(internalWriteTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	defer reqtime.Wait(ctx)()
	return p.waitCommittedCtx(ctx.Done(), base+int64(h.LastOffsetDelta), epoch, deadline, stopping)
}

// appendReplicated appends a leader's batches on a follower, keeping the
// producer state current so that this replica can lead.
// Transactions are followed too (markers close them, aborts go to the
// transaction index), so that the follower's index and LSO are right when
// it leads or its segments are uploaded. The batches came from the leader
// of epoch: they are written only while this broker still follows in it
// (else errRoleChanged: a response that arrives after this broker took over
// or moved on to a newer leader is not its log's to take).
func (p *partition) appendReplicated(records []byte, epoch int32) error {
	p.role.RLock()
	defer p.role.RUnlock()
	if !p.follows(epoch) {
		return errRoleChanged
	}
	res, err := p.log.AppendReplicated(records, hotlog.AppendOptions{
		// The transaction index entries of the abort markers among the
		// batches, computed on the state as the earlier batches of this
		// append change it (an overlay: the state itself is not touched
		// yet). hotlog writes them before the batches.
		Aborted: func([]hotlog.BatchHeader) []hotlog.AbortedTxn {
			var out []hotlog.AbortedTxn
			open := map[int64]int64{}
			p.mu.Lock()
			defer p.mu.Unlock()
			eachBatch(records, func(batch []byte, h hotlog.BatchHeader) {
				info, ok := batchInfoOf(batch, h)
				if !ok {
					return
				}
				if a, ok := p.mu.producers.abortsOver(open, info, h.BaseOffset); ok {
					out = append(out, a)
				}
				switch first := p.mu.producers.txnFirst(open, info.producerID); {
				case info.control:
					open[info.producerID] = -1
				case info.transactional && first < 0:
					open[info.producerID] = h.BaseOffset
				}
			})
			return out
		},
		// The state changes once the batches are written, after their
		// index entries, as a leader's does (appendChecked): a reader
		// that sees a transaction closed (the last stable offset moved;
		// followers serve read_committed fetches too, KIP-392) finds its
		// entry, and a failed write changes nothing.
		Written: func([]hotlog.BatchHeader) {
			p.mu.Lock()
			defer p.mu.Unlock()
			eachBatch(records, func(batch []byte, h hotlog.BatchHeader) {
				if info, ok := batchInfoOf(batch, h); ok {
					p.mu.producers.apply(info, h.BaseOffset, h.LastOffset(), h.MaxTimestamp)
				}
				p.mu.stateEnd = max(p.mu.stateEnd, h.LastOffset()+1)
			})
		},
	})
	if err != nil {
		return err
	}
	p.noteDurableEnd(res.LastOffset + 1)
	p.wake()
	return nil
}

// truncateTo cuts a follower's divergent tail and rebuilds the producer
// state from what is left. From the cut until the rebuilt state is in
// place the old state still counts the transactions whose markers were cut
// as closed, while the log and its transaction index (cut too) have them
// open again: the last stable offset stays at the log start meanwhile
// (rebuilding), or a read_committed fetch (a long poll begun while this
// broker led) could hand out a transaction's records below the high
// watermark with no aborted entry for them although it is then aborted.
//
// An offset below the log start (the leader's log ends below it: an
// unclean election, or a leader restored from an old backup, while this
// log restarted at the bucket's end) empties the log and starts it again at
// offset, as Kafka's UnifiedLog.truncateTo does (truncateFullyAndStartAt):
// its leader-epoch entries and producer snapshots go with its records (the
// producer state is rebuilt empty). Cutting to the log start instead left
// it empty above the leader's end: the leader answered every fetch
// OFFSET_OUT_OF_RANGE, and the follower stayed out of the ISR for good.
//
// The truncation was decided with the leader of epoch, and runs only while
// this broker still follows in it (else errRoleChanged).
func (p *partition) truncateTo(offset int64, epoch int32) error {
	p.role.RLock()
	defer p.role.RUnlock()
	if !p.follows(epoch) {
		return errRoleChanged
	}
	p.mu.Lock()
	// A failed attempt leaves rebuilding set; the fetcher's next one
	// rebuilds even if the log needs no further cut.
	pending := p.mu.rebuilding
	p.mu.rebuilding = pending || offset < p.log.LogEndOffset()
	p.mu.Unlock()
	if !pending && offset >= p.log.LogEndOffset() {
		return nil
	}
	if offset < p.log.LogEndOffset() {
		cut := p.log.TruncateTo
		if offset < p.log.LogStartOffset() {
			cut = p.log.TruncateFullyAndStartAt
		}
		if err := cut(offset); err != nil {
			return err
		}
	}
	if p.testHookTruncated != nil {
		p.testHookTruncated()
	}
	p.resetDurableEnd()
	return p.loadProducers()
}

// restartAt empties a follower's log to start again at offset, the log
// start of the leader of epoch (which deleted what the follower would fetch
// next), while this broker still follows in epoch (else errRoleChanged).
func (p *partition) restartAt(offset int64, epoch int32) error {
	p.role.RLock()
	defer p.role.RUnlock()
	if !p.follows(epoch) {
		return errRoleChanged
	}
	var firstErr error
	if err := p.log.TruncateFullyAndStartAt(offset); err != nil {
		firstErr = err
	}
	p.resetDurableEnd()
	// The producer state of the emptied log, and the offset it is current
	// to (which bounds the last stable offset), start again at the new log
	// start.
	if err := p.loadProducers(); err != nil {
		firstErr = keepFirst(firstErr, err)
	}
	return firstErr
}

// followerHighWatermark raises a follower's high watermark to hw, the
// leader of epoch's (bounded by what this replica has), while this broker
// still follows in epoch; it wakes consumers' long polls when it moved.
func (p *partition) followerHighWatermark(hw int64, epoch int32) {
	p.role.RLock()
	defer p.role.RUnlock()
	if !p.follows(epoch) {
		return
	}
	p.mu.Lock()
	moved := false
	if hw = min(hw, p.log.LogEndOffset()); hw > p.log.HighWatermark() {
		p.log.SetHighWatermark(hw)
		moved = true
	}
	p.mu.Unlock()
	if moved {
		p.wake() // consumers' long polls on this follower (KIP-392)
	}
}

// followerLogStart adopts the leader's log start offset (its DeleteRecords
// and retention), as Kafka's fetcher does with the log_start_offset of each
// response: else records deleted on the leader would come back when this
// replica leads. Only up to the high watermark (never past what this
// replica knows to be committed); -1 (the leader could not tell: its bucket
// is down) changes nothing.
func (p *partition) followerLogStart(start int64, epoch int32) error {
	p.role.RLock()
	defer p.role.RUnlock()
	if !p.follows(epoch) {
		return nil
	}
	start = min(start, p.log.HighWatermark())
	if start <= p.log.LogStartOffset() {
		return nil
	}
	return p.log.DeleteBefore(start)
}

// rebuildPending reports a truncation whose producer state rebuild failed
// (truncateTo must run again).
func (p *partition) rebuildPending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.rebuilding
}

// replicator runs the follower fetchers and the leader's ISR loop. It is
// owned by the store: started by start, stopped by close.
type replicator struct {
	s      *store
	client *kgo.Client
	lag    time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		fetchers map[int32]*fetcher // by leader broker id
	}
	// isrKick wakes the ISR loop: a follower out of the ISR caught up.
	isrKick chan struct{}
}

// kickISR has the ISR loop look at once (at most every isrKickGap).
func (r *replicator) kickISR() {
	select {
	case r.isrKick <- struct{}{}:
	default:
	}
}

// isrKickGap is the least time between two ISR passes woken by kicks: a
// follower that stays joinable (its change pending or refused) kicks at
// every fetch.
const isrKickGap = 100 * time.Millisecond

func newReplicator(s *store) (*replicator, error) {
	b := s.b
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(b.addrs[0].Addr),
		kgo.ClientID(fmt.Sprintf("sediment-replica-%d", b.cfg.NodeID)),
		kgo.RetryTimeout(time.Second),
	}, b.peerClientOpts()...)...)
	if err != nil {
		return nil, fmt.Errorf("broker: replica client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replicator{s: s, client: cl, lag: b.cfg.ReplicaLagTimeMax, ctx: ctx, cancel: cancel, isrKick: make(chan struct{}, 1)}
	r.mu.fetchers = map[int32]*fetcher{}
	r.wg.Add(1)
	go pprof.Do(ctx, pprof.Labels("sediment", "isr"), func(ctx context.Context) {
		defer r.wg.Done()
		r.isrLoop(ctx)
	})
	return r, nil
}

func (r *replicator) close() {
	r.cancel()
	r.mu.Lock()
	fs := r.mu.fetchers
	r.mu.fetchers = map[int32]*fetcher{}
	r.mu.Unlock()
	for _, f := range fs {
		f.stop()
	}
	r.wg.Wait()
	r.client.Close()
}

// assign gives each fetcher the partitions this broker follows from its
// leader; fetchers left with none stop.
func (r *replicator) assign(follow map[*partition]followTarget) {
	byLeader := map[int32]map[*partition]followTarget{}
	for p, ft := range follow {
		if byLeader[ft.leader] == nil {
			byLeader[ft.leader] = map[*partition]followTarget{}
		}
		byLeader[ft.leader][p] = ft
	}
	r.mu.Lock()
	if r.ctx.Err() != nil {
		r.mu.Unlock()
		return
	}
	var stop []*fetcher
	for id, f := range r.mu.fetchers {
		if _, ok := byLeader[id]; !ok {
			stop = append(stop, f)
			delete(r.mu.fetchers, id)
		}
	}
	for id, parts := range byLeader {
		f := r.mu.fetchers[id]
		if f == nil {
			f = r.newFetcher(id)
			r.mu.fetchers[id] = f
		}
		f.set(parts)
	}
	r.mu.Unlock()
	for _, f := range stop {
		f.stop()
	}
}

// isrLoop asks the controller to shrink or expand the ISR of partitions
// this broker leads: every quarter of the lag time (shrinks), and at once
// when a follower out of the ISR catches up (kickISR). Expansions waited
// for the tick before, 6-30 s for a restarted broker's partitions under
// load (7.5 s ticks at the default 30 s lag); Kafka's leader expands the
// ISR at the fetch that catches up.
func (r *replicator) isrLoop(ctx context.Context) {
	t := time.NewTicker(max(r.lag/4, 50*time.Millisecond))
	defer t.Stop()
	self := r.s.b.cfg.NodeID
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.isrKick:
			if d := isrKickGap - time.Since(last); d > 0 {
				gap := time.NewTimer(d)
				select {
				case <-ctx.Done():
					gap.Stop()
					return
				case <-gap.C:
				}
			}
		}
		last = time.Now()
		// Only followers the controller would accept join (Kafka's
		// Partition.isReplicaIsrEligible): it refuses a change adding any
		// other, and with it the shrink the change carries.
		eligible := r.s.meta.State().ISREligible
		for _, p := range r.s.partitions() {
			p.repl.mu.Lock()
			tr := p.repl.mu.tracker
			if tr == nil || p.repl.mu.isrPending {
				p.repl.mu.Unlock()
				continue
			}
			cmd := p.repl.mu.isrProposal
			if isrProposalDecided(cmd, p.repl.mu.leaderEpoch, p.repl.mu.partitionEpoch) {
				cmd, p.repl.mu.isrProposal = nil, nil
			}
			if cmd == nil {
				// The tracker holds the high watermark for the followers of
				// an expansion it plans until the next plan; a proposal
				// whose fate is unknown is therefore proposed again as it
				// was (Kafka retries AlterPartition likewise), not planned
				// anew.
				isr, changed := tr.PlanISR(p.log.HighWatermark(), p.repl.mu.epochStart, time.Now(), r.lag, eligible)
				if !changed {
					p.repl.mu.Unlock()
					continue
				}
				cmd = &metadata.ChangeLeaderAndISR{TopicID: p.topicID, Partition: p.id, LeaderEpoch: p.repl.mu.leaderEpoch,
					PartitionEpoch: p.repl.mu.partitionEpoch, Leader: self, ISR: isr}
				// KIP-841: each follower added with the broker epoch its
				// fetches carried; refused if it registered again since.
				if epochs := tr.PlannedBrokerEpochs(isr); slices.ContainsFunc(epochs, func(e int64) bool { return e >= 0 }) {
					cmd.BrokerEpochs = epochs
				}
			}
			isr := cmd.ISR
			p.repl.mu.isrPending = true
			p.repl.mu.isrProposal = cmd
			p.repl.mu.Unlock()
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := r.s.meta.Propose(pctx, cmd)
			cancel()
			if err != nil {
				r.s.b.log.Info("ISR change refused", "topic", p.topic, "partition", p.id, "isr", isr, "broker_epochs", cmd.BrokerEpochs, "err", err)
				p.repl.mu.Lock()
				if isrChangeRefused(err) {
					// Refused by the state machine at the partition epoch
					// it was made for: nothing committed, and nothing of it
					// can. The followers it added stop holding the high
					// watermark.
					tr.ProposalFailed()
					if p.repl.mu.isrProposal == cmd {
						p.repl.mu.isrProposal = nil
					}
				}
				p.repl.mu.isrPending = false
				p.repl.mu.Unlock()
			}
		}
	}
}

// isrProposalDecided reports whether an ISR change proposed at its epochs
// can no longer be pending, the partition being at leaderEpoch and
// partitionEpoch: it committed (which moved the partition epoch) or never
// can (the state machine refuses other epochs).
func isrProposalDecided(cmd *metadata.ChangeLeaderAndISR, leaderEpoch, partitionEpoch int32) bool {
	return cmd != nil && (cmd.LeaderEpoch != leaderEpoch || cmd.PartitionEpoch < partitionEpoch)
}

// isrChangeRefused reports whether a ChangeLeaderAndISR proposal was
// refused by the metadata state machine with the partition at the epochs it
// was made for (so neither it nor an earlier copy of it committed). A stale
// epoch is not such a refusal: an earlier copy may be what moved the epoch.
// Any other error (no answer in time, no quorum, a forwarding failure) leaves
// the proposal's fate unknown.
func isrChangeRefused(err error) bool {
	return errors.Is(err, metadata.ErrIneligibleReplica) || errors.Is(err, metadata.ErrInvalidRequest) ||
		errors.Is(err, metadata.ErrUnknownTopic) || errors.Is(err, metadata.ErrUnknownPartition)
}

// followTarget is whom a follower partition fetches from.
type followTarget struct {
	leader int32
	epoch  int32
}

// fetcher replicates the partitions led by one broker. Its goroutine is
// started by newFetcher and stopped by stop.
type fetcher struct {
	r      *replicator
	leader int32
	cancel context.CancelFunc
	done   chan struct{}
	wakeCh chan struct{}

	mu struct {
		sync.Mutex
		parts map[*partition]*fetchState
	}
}

type fetchState struct {
	epoch     int32
	truncated bool // the divergent tail was cut for this epoch
}

func (r *replicator) newFetcher(leader int32) *fetcher {
	ctx, cancel := context.WithCancel(r.ctx)
	f := &fetcher{r: r, leader: leader, cancel: cancel, done: make(chan struct{}), wakeCh: make(chan struct{}, 1)}
	f.mu.parts = map[*partition]*fetchState{}
	r.wg.Add(1)
	go pprof.Do(ctx, pprof.Labels("sediment", "fetcher", "leader", fmt.Sprint(leader)), func(ctx context.Context) {
		defer r.wg.Done()
		defer close(f.done)
		f.run(ctx)
	})
	return f
}

func (f *fetcher) stop() {
	f.cancel()
	<-f.done
}

func (f *fetcher) set(parts map[*partition]followTarget) {
	f.mu.Lock()
	for p, st := range f.mu.parts {
		if ft, ok := parts[p]; !ok || ft.epoch != st.epoch {
			delete(f.mu.parts, p)
		}
	}
	for p, ft := range parts {
		if _, ok := f.mu.parts[p]; !ok {
			f.mu.parts[p] = &fetchState{epoch: ft.epoch}
		}
	}
	f.mu.Unlock()
	select {
	case f.wakeCh <- struct{}{}:
	default:
	}
}

func (f *fetcher) snapshot() map[*partition]fetchState {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[*partition]fetchState, len(f.mu.parts))
	for p, st := range f.mu.parts {
		out[p] = *st
	}
	return out
}

func (f *fetcher) markTruncated(p *partition, epoch int32) {
	f.mu.Lock()
	if st := f.mu.parts[p]; st != nil && st.epoch == epoch {
		st.truncated = true
	}
	f.mu.Unlock()
}

func (f *fetcher) needTruncation(p *partition, epoch int32) {
	f.mu.Lock()
	if st := f.mu.parts[p]; st != nil && st.epoch == epoch {
		st.truncated = false
	}
	f.mu.Unlock()
}

func (f *fetcher) pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-f.wakeCh:
	}
}

func (f *fetcher) run(ctx context.Context) {
	log := f.r.s.b.log.With("leader", f.leader)
	var failing fetchFailures
	for ctx.Err() == nil {
		parts := f.snapshot()
		if len(parts) == 0 {
			f.pause(ctx, time.Second)
			continue
		}
		if err := f.truncate(ctx, parts); err != nil {
			if ctx.Err() == nil {
				log.Debug("follower truncation failed; retrying", "err", err)
				failing.failed(log, err, time.Now())
				f.pause(ctx, 200*time.Millisecond)
			}
			continue
		}
		if err := f.fetch(ctx, parts); err != nil {
			if ctx.Err() == nil {
				log.Debug("replica fetch failed; retrying", "err", err)
				failing.failed(log, err, time.Now())
				f.pause(ctx, 200*time.Millisecond)
			}
			continue
		}
		failing.succeeded(log)
	}
}

// replicaFailingAfter is how long a fetcher's requests fail, without one
// that succeeds, before it says so at WARN (then once a replicaFailingEvery):
// a leader change or a restart ends within it; what outlasts it keeps
// replicas out of the ISR (before, only DEBUG said why a replica never
// caught up).
const (
	replicaFailingAfter = 30 * time.Second
	replicaFailingEvery = time.Minute
)

// fetchFailures tracks a fetcher's run of failed rounds.
type fetchFailures struct {
	since, warned time.Time
}

func (ff *fetchFailures) failed(log *slog.Logger, err error, now time.Time) {
	if ff.since.IsZero() {
		ff.since = now
	}
	if now.Sub(ff.since) < replicaFailingAfter || (!ff.warned.IsZero() && now.Sub(ff.warned) < replicaFailingEvery) {
		return
	}
	ff.warned = now
	log.Warn("replication from this leader keeps failing; retrying (logged once a minute)", "failing_for", now.Sub(ff.since).Round(time.Second), "err", err)
}

func (ff *fetchFailures) succeeded(log *slog.Logger) {
	if !ff.warned.IsZero() {
		log.Info("replication from this leader works again", "failed_for", time.Since(ff.since).Round(time.Second))
	}
	*ff = fetchFailures{}
}

// truncate cuts each newly followed partition's divergent tail (KIP-101,
// KIP-279): it asks the leader where the follower's latest epoch ends, and
// truncates to the smaller of that and its own end of the epoch the leader
// answered with. When this log lacks that epoch, the cut is a step: the
// partition is not marked truncated, and the next call asks again with the
// (older) epoch the log now ends in.
func (f *fetcher) truncate(ctx context.Context, parts map[*partition]fetchState) error {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = f.r.s.b.cfg.NodeID
	byName := map[string]map[int32]*partition{}
	for p, st := range parts {
		if st.truncated {
			continue
		}
		if byName[p.topic] == nil {
			byName[p.topic] = map[int32]*partition{}
			rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
			rt.Topic = p.topic
			req.Topics = append(req.Topics, rt)
		}
		byName[p.topic][p.id] = p
		rt := &req.Topics[len(req.Topics)-1]
		for i := range req.Topics {
			if req.Topics[i].Topic == p.topic {
				rt = &req.Topics[i]
			}
		}
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = p.id, st.epoch, p.log.LatestEpoch()
		rt.Partitions = append(rt.Partitions, rp)
	}
	if len(req.Topics) == 0 {
		return nil
	}
	resp, err := req.RequestWith(ctx, f.r.client.Broker(int(f.leader)))
	if err != nil {
		return err
	}
	var firstErr error
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			p := byName[rt.Topic][rp.Partition]
			if p == nil {
				continue
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				firstErr = keepFirst(firstErr, fmt.Errorf("%s-%d: %w", p.topic, p.id, err))
				continue
			}
			end := p.log.LogEndOffset()
			again := false
			if rp.LeaderEpoch >= 0 {
				end = min(end, rp.EndOffset)
				if ownEpoch, own, err := p.log.EndOffsetForEpoch(rp.LeaderEpoch); err == nil && own >= 0 {
					end = min(end, own)
					// KIP-279: this log lacks the epoch the leader
					// answered with; own is where an older one of
					// ours ends, whose records the leader may have
					// under other epochs. Cut there and ask again
					// with that epoch (Kafka's intermediate
					// truncation, truncationCompleted = false),
					// when that cuts (our latest epoch goes down,
					// so the rounds end).
					again = ownEpoch != rp.LeaderEpoch && own < p.log.LogEndOffset()
				}
			} else if p.log.LatestEpoch() >= 0 {
				// The leader knows no epoch at or below ours: nothing
				// we hold past its log start can be trusted.
				end = min(end, max(p.log.LogStartOffset(), p.log.HighWatermark()))
			}
			if end < p.log.LogStartOffset() {
				again = false // emptied: nothing of ours is left to ask about
			}
			if end < p.log.LogEndOffset() || p.rebuildPending() {
				switch start := p.log.LogStartOffset(); {
				case end < start:
					f.r.s.b.log.Warn("log starts past the leader's end (unclean election or restored leader): emptying it to start again at the leader's end",
						"topic", p.topic, "partition", p.id, "log_start", start, "log_end", p.log.LogEndOffset(), "to", end, "leader_epoch", rp.LeaderEpoch)
				case end < p.log.LogEndOffset():
					f.r.s.b.log.Info("truncating divergent tail", "topic", p.topic, "partition", p.id,
						"from", p.log.LogEndOffset(), "to", end, "leader_epoch", rp.LeaderEpoch)
				}
				if err := p.truncateTo(end, parts[p].epoch); err != nil {
					if !errors.Is(err, errRoleChanged) {
						firstErr = keepFirst(firstErr, err)
					}
					continue
				}
			}
			if again {
				continue
			}
			f.markTruncated(p, parts[p].epoch)
		}
	}
	return firstErr
}

func keepFirst(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// fetch sends one replica Fetch to the leader and appends what it returns.
func (f *fetcher) fetch(ctx context.Context, parts map[*partition]fetchState) error {
	b := f.r.s.b
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = b.cfg.NodeID
	req.ReplicaState.ID = b.cfg.NodeID
	req.ReplicaState.Epoch = f.r.s.brokerEpoch
	req.MaxWaitMillis = int32(b.cfg.ReplicaFetchMaxWait / time.Millisecond)
	req.MinBytes = 1
	req.MaxBytes = 16 << 20
	req.SessionID, req.SessionEpoch = 0, -1
	type key struct {
		topic string
		id    int32
	}
	index := map[key]*partition{}
	topicIdx := map[string]int{}
	// The follower side's replication throttle (replication_throttle.go):
	// a throttled replica out of the ISR is left out of the request while
	// the quota is used up.
	ms := b.meta.State()
	rate, _ := throttleRate(ms, b.cfg.NodeID, cfgFollowerThrottledRate)
	throttled := map[*partition]bool{}
	var skipped bool
	var wait time.Duration
	now := time.Now()
	for p, st := range parts {
		if !st.truncated {
			continue
		}
		if !unlimitedRate(rate) && throttledReplica(ms, p.topic, cfgFollowerThrottledReplicas, p.id, b.cfg.NodeID) && !p.inISR(b.cfg.NodeID) {
			if over, d := b.followerQuota.exceeded(rate, now); over {
				b.metrics.throttledSkips.WithLabelValues("follower").Inc()
				skipped, wait = true, max(wait, d)
				continue
			}
			throttled[p] = true
		}
		i, ok := topicIdx[p.topic]
		if !ok {
			i = len(req.Topics)
			topicIdx[p.topic] = i
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = p.topic, p.topicID
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch = p.id, st.epoch
		rp.FetchOffset, rp.LogStartOffset = p.log.LogEndOffset(), p.log.LogStartOffset()
		rp.LastFetchedEpoch = -1
		rp.PartitionMaxBytes = 4 << 20
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
		index[key{p.topic, p.id}] = p
	}
	if len(req.Topics) == 0 {
		if skipped {
			f.pause(ctx, min(wait, time.Second))
		}
		return nil
	}
	resp, err := req.RequestWith(ctx, f.r.client.Broker(int(f.leader)))
	if err != nil {
		return err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return err
	}
	byID := map[metadata.UUID]string{}
	for p := range parts {
		byID[p.topicID] = p.topic
	}
	var firstErr error
	for _, rt := range resp.Topics {
		name := rt.Topic
		if name == "" {
			name = byID[metadata.UUID(rt.TopicID)]
		}
		for _, rp := range rt.Partitions {
			p := index[key{name, rp.Partition}]
			if p == nil {
				continue
			}
			epoch := parts[p].epoch
			switch err := kerr.ErrorForCode(rp.ErrorCode); {
			case err == nil:
			case errors.Is(err, kerr.OffsetOutOfRange):
				if end := p.log.LogEndOffset(); end < rp.LogStartOffset {
					// The leader deleted what we would fetch next: start over at its log start.
					if err := p.restartAt(rp.LogStartOffset, epoch); err != nil && !errors.Is(err, errRoleChanged) {
						firstErr = keepFirst(firstErr, err)
					}
				} else {
					// Our end is past the leader's: truncate again. A
					// failed round, so that a follower which keeps
					// coming back here says so (fetchFailures) rather
					// than staying out of the ISR in silence.
					firstErr = keepFirst(firstErr, fmt.Errorf("%s-%d: fetch at %d: %w (leader's log start %d); truncating again",
						p.topic, p.id, end, err, rp.LogStartOffset))
				}
				f.needTruncation(p, epoch)
				continue
			case errors.Is(err, kerr.OffsetMovedToTieredStorage):
				// The leader's local log starts past our end and the
				// records between are in the bucket: start at the
				// remote log's end (replica_tiered.go).
				if err := f.startAtRemoteEnd(ctx, p, epoch); err != nil && !errors.Is(err, errRoleChanged) {
					firstErr = keepFirst(firstErr, fmt.Errorf("%s-%d: %w", p.topic, p.id, err))
				}
				continue
			default:
				// Not leader, fenced epoch…: wait for the metadata to tell us more.
				firstErr = keepFirst(firstErr, fmt.Errorf("%s-%d: %w", p.topic, p.id, err))
				continue
			}
			if throttled[p] {
				n := int64(len(rp.RecordBatches))
				b.followerQuota.record(rate, n, time.Now())
				b.metrics.throttledBytes.WithLabelValues("follower").Add(float64(n))
			}
			if len(rp.RecordBatches) > 0 {
				if err := p.appendFetched(wholeBatches(rp.RecordBatches), epoch); err != nil {
					if errors.Is(err, errRoleChanged) {
						continue
					}
					if errors.Is(err, hotlog.ErrUnexpectedOffset) {
						f.needTruncation(p, epoch)
					}
					firstErr = keepFirst(firstErr, fmt.Errorf("%s-%d: %w", p.topic, p.id, err))
					continue
				}
			}
			p.followerHighWatermark(rp.HighWatermark, epoch)
			if err := p.followerLogStart(rp.LogStartOffset, epoch); err != nil {
				firstErr = keepFirst(firstErr, fmt.Errorf("%s-%d: log start %d: %w", p.topic, p.id, rp.LogStartOffset, err))
			}
		}
	}
	return firstErr
}

// appendFetched appends a fetch response's batches (appendReplicated). An
// empty log whose end lies inside the first batch (it started over at the
// leader's log start, which DeleteRecords put inside a batch; the leader
// reads from the batch that holds the offset) restarts at that batch's base
// first, as Kafka's follower does (Partition's UnexpectedAppendOffsetException
// handling); the leader's log start, adopted after the append, cuts it back.
// Refused, the same batch came back at every fetch and the follower never
// caught up.
func (p *partition) appendFetched(batches []byte, epoch int32) error {
	err := p.appendReplicated(batches, epoch)
	if !errors.Is(err, hotlog.ErrUnexpectedOffset) || len(batches) < hotlog.BatchHeaderSize {
		return err
	}
	h, herr := hotlog.ParseBatchHeader(batches)
	end := p.log.LogEndOffset()
	if herr != nil || end != p.log.LogStartOffset() || h.BaseOffset >= end || h.LastOffset() < end {
		return err
	}
	if err := p.restartAt(h.BaseOffset, epoch); err != nil {
		return err
	}
	return p.appendReplicated(batches, epoch)
}

// eachBatch calls f with each whole batch of b and its header.
func eachBatch(b []byte, f func(batch []byte, h hotlog.BatchHeader)) {
	for len(b) >= hotlog.BatchHeaderSize {
		h, err := hotlog.ParseBatchHeader(b)
		if err != nil || int64(len(b)) < h.Size() {
			return
		}
		f(b[:h.Size()], h)
		b = b[h.Size():]
	}
}

// wholeBatches drops a trailing partial batch (a leader may cut one at its
// size limit).
func wholeBatches(b []byte) []byte {
	n := 0
	for rest := b; len(rest) >= hotlog.BatchHeaderSize; {
		h, err := hotlog.ParseBatchHeader(rest)
		if err != nil || int64(len(rest)) < h.Size() {
			break
		}
		n += int(h.Size())
		rest = rest[h.Size():]
	}
	return b[:n]
}

// reconcileReplicas opens every partition this broker is a replica of,
// applies its assignment, and points the fetchers at the leaders.
func (s *store) reconcileReplicas(st *metadata.State) {
	if s.repl == nil || s.b.isStopping() {
		return
	}
	me := s.b.cfg.NodeID
	type replica struct {
		t   *metadata.Topic
		idx int32
	}
	var mine []replica
	for _, t := range st.Topics() {
		for idx, mp := range t.Partitions {
			if slices.Contains(mp.Replicas, me) {
				mine = append(mine, replica{t, int32(idx)})
			}
		}
	}
	// Partitions not open yet (all of them at startup) open in parallel
	// (store.openLocked opens outside the store's lock).
	var mu sync.Mutex
	follow := map[*partition]followTarget{}
	parallelDo(len(mine), partitionIOWorkers, func(i int) {
		t, idx := mine[i].t, mine[i].idx
		mp := t.Partitions[idx]
		p, err := s.openReplica(t, idx, st.Version)
		if err != nil {
			return // a failed open logs itself, once per backoff (openLocked)
		}
		if mp.Leader != me && mp.Leader != metadata.NoLeader {
			mu.Lock()
			follow[p] = followTarget{leader: mp.Leader, epoch: mp.LeaderEpoch}
			mu.Unlock()
		}
	})
	s.repl.assign(follow)
}

// controlledShutdown moves leadership away from this broker before it stops
// (Kafka's controlled shutdown), when there are other brokers to take it.
func (b *Broker) controlledShutdown() {
	s := b.store
	if s == nil {
		return
	}
	if err := s.meta.Err(); err != nil {
		// Its state is frozen: it would wait for ever to see its
		// leaderships go. fenceSelf has moved them (or the session
		// timeout will).
		b.log.Info("controlled shutdown skipped: the metadata state machine stopped", "err", err)
		return
	}
	st := s.meta.State()
	others := false
	for _, br := range st.Brokers() {
		others = others || (br.ID != b.cfg.NodeID && !br.Fenced)
	}
	if !others {
		return
	}
	// This node's state may list a broker that has stopped: its fence,
	// committed as it left, reaches a follower only with the leader's
	// next heartbeat, which a leader that left never sends. Waiting out
	// the timeout for a quorum whose voters refuse connections helps
	// nobody (every broker of a cluster stopped one after the other met
	// it at the last one).
	if !s.meta.QuorumReachable(time.Second) {
		b.log.Warn("controlled shutdown skipped: too few metadata voters accept connections for a quorum")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ControlledShutdownTimeout)
	defer cancel()
	if _, err := s.meta.Propose(ctx, &metadata.ControlledShutdown{BrokerID: b.cfg.NodeID, BrokerEpoch: s.brokerEpoch}); err != nil {
		b.log.Warn("controlled shutdown refused", "err", err)
		return
	}
	for {
		st = s.meta.State()
		leads := 0
		for _, t := range st.Topics() {
			for _, p := range t.Partitions {
				if p.Leader == b.cfg.NodeID {
					leads++
				}
			}
		}
		if leads == 0 {
			// Done: fence this broker now, as Kafka's controller does when a
			// controlled shutdown completes (SHUTDOWN_NOW), so that Metadata
			// and FindCoordinator stop naming it before the process exits.
			// Until then it stayed listed while its listeners closed, and
			// clients sent requests for "any broker" (FindCoordinator, say)
			// to it and got a refused dial until the controller's liveness
			// probe fenced it, seconds later (kgo failed EndTxn and
			// TxnOffsetCommit that way under rolling restarts).
			_, err := s.meta.Propose(ctx, &metadata.FenceBroker{BrokerID: b.cfg.NodeID, BrokerEpoch: s.brokerEpoch})
			if err != nil {
				b.log.Warn("controlled shutdown: leadership moved away; fencing this broker failed (the controller fences it when it is gone)", "err", err)
			} else {
				b.log.Info("controlled shutdown: leadership moved away; this broker is fenced")
			}
			return
		}
		wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		s.meta.WaitForVersion(wctx, st.Version+1)
		wcancel()
		if ctx.Err() != nil {
			b.log.Warn("controlled shutdown: still leading partitions", "count", leads)
			return
		}
	}
}

func splitHostPort(addr string) (string, uint16, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return host, uint16(p), err == nil
}

// leaderHint is KIP-951's current leader of a partition for a
// NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH answer: (-1, -1) otherwise
// or when unknown.
func leaderHint(st *metadata.State, topic string, id [16]byte, byID bool, partition int32, code int16) (int32, int32) {
	if code != kerr.NotLeaderForPartition.Code && code != kerr.FencedLeaderEpoch.Code {
		return -1, -1
	}
	var t *metadata.Topic
	var ok bool
	if byID {
		t, ok = st.TopicByID(metadata.UUID(id))
	} else {
		t, ok = st.Topic(topic)
	}
	if !ok || partition < 0 || int(partition) >= len(t.Partitions) {
		return -1, -1
	}
	mp := t.Partitions[partition]
	if mp.Leader == metadata.NoLeader {
		return -1, -1
	}
	return mp.Leader, mp.LeaderEpoch
}

// leaderEndpoint finds a broker's address on the client's listener.
func leaderEndpoint(b *Broker, st *metadata.State, listener string, id int32) (kmsg.MetadataResponseBroker, bool) {
	for _, br := range brokerList(b, st, listener) {
		if br.NodeID == id {
			return br, true
		}
	}
	return kmsg.MetadataResponseBroker{}, false
}

// produceLeaderEndpoints lists the brokers named in CurrentLeader fields.
func produceLeaderEndpoints(b *Broker, st *metadata.State, listener string, resp *kmsg.ProduceResponse) []kmsg.ProduceResponseBroker {
	var out []kmsg.ProduceResponseBroker
	seen := map[int32]bool{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			id := p.CurrentLeader.LeaderID
			if id < 0 || seen[id] {
				continue
			}
			seen[id] = true
			if br, ok := leaderEndpoint(b, st, listener, id); ok {
				pb := kmsg.NewProduceResponseBroker()
				pb.NodeID, pb.Host, pb.Port, pb.Rack = br.NodeID, br.Host, br.Port, br.Rack
				out = append(out, pb)
			}
		}
	}
	return out
}

// addFetchLeaderEndpoint adds broker id's endpoint to a Fetch response's
// node endpoints once.
func addFetchLeaderEndpoint(b *Broker, st *metadata.State, listener string, brokers []kmsg.FetchResponseBroker, id int32) []kmsg.FetchResponseBroker {
	if id < 0 {
		return brokers
	}
	for _, br := range brokers {
		if br.NodeID == id {
			return brokers
		}
	}
	if br, ok := leaderEndpoint(b, st, listener, id); ok {
		fb := kmsg.NewFetchResponseBroker()
		fb.NodeID, fb.Host, fb.Port, fb.Rack = br.NodeID, br.Host, br.Port, br.Rack
		brokers = append(brokers, fb)
	}
	return brokers
}

var (
	underReplicatedDesc = prometheus.NewDesc("sediment_under_replicated_partitions",
		"Partitions this broker leads whose ISR is smaller than their replica set (Kafka's UnderReplicatedPartitions).", nil, nil)
	leaderCountDesc = prometheus.NewDesc("sediment_leader_partitions", "Partitions this broker leads.", nil, nil)
	hwDesc          = prometheus.NewDesc("sediment_high_watermark", "High watermark per partition replica.", []string{"topic", "partition"}, nil)
)

// replicationCollector reports replication state at scrape time.
type replicationCollector struct{ b *Broker }

func (c *replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- underReplicatedDesc
	ch <- leaderCountDesc
	ch <- hwDesc
}

func (c *replicationCollector) Collect(ch chan<- prometheus.Metric) {
	under, leads := 0, 0
	for _, p := range c.b.allPartitions() {
		p.repl.mu.Lock()
		if p.repl.mu.tracker != nil {
			leads++
			if len(p.repl.mu.isr) < len(p.repl.mu.replicas) {
				under++
			}
		}
		p.repl.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(hwDesc, prometheus.GaugeValue, float64(p.log.HighWatermark()), p.topic, strconv.Itoa(int(p.id)))
	}
	ch <- prometheus.MustNewConstMetric(underReplicatedDesc, prometheus.GaugeValue, float64(under))
	ch <- prometheus.MustNewConstMetric(leaderCountDesc, prometheus.GaugeValue, float64(leads))
}

// partitions lists the open partitions (the store's own view: usable from
// goroutines the store starts before New has published b.store).
func (s *store) partitions() []*partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*partition
	for _, ps := range s.mu.parts {
		for _, p := range ps {
			out = append(out, p)
		}
	}
	return out
}

// retryMetadata retries f while the metadata quorum is between leaders (in
// a multi-voter quorum an election may happen while a broker starts), until
// ctx ends.
func retryMetadata(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil || !(errors.Is(err, metadata.ErrNotLeader) || errors.Is(err, metadata.ErrNoQuorum)) {
			return err
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// followerPartition finds an open partition this broker follows, for a
// consumer's fetch from a follower (KIP-392).
func (s *store) followerPartition(st *metadata.State, topic string, id [16]byte, byID bool, idx int32) (*partition, error) {
	var t *metadata.Topic
	var ok bool
	if byID {
		t, ok = st.TopicByID(metadata.UUID(id))
	} else {
		t, ok = st.Topic(topic)
	}
	if !ok || idx < 0 || int(idx) >= len(t.Partitions) || !slices.Contains(t.Partitions[idx].Replicas, s.b.cfg.NodeID) {
		return nil, errNotLeader
	}
	s.mu.Lock()
	p := s.mu.parts[t.ID][idx]
	s.mu.Unlock()
	if p == nil {
		return nil, errNotLeader
	}
	p.repl.mu.Lock()
	following := p.repl.mu.tracker == nil && p.repl.mu.leader >= 0 && p.repl.mu.leader != s.b.cfg.NodeID
	p.repl.mu.Unlock()
	if !following {
		return nil, errNotLeader
	}
	return p, nil
}

// preferredReadReplica is KIP-392's choice for a consumer's fetch on the
// leader: an in-sync replica, other than this broker, whose broker is in the
// client's rack (and this broker is not) and has the fetch offset; -1 when
// the leader should serve (no rack given, same rack, none fits, a follower
// answering, or a follower's own fetch).
func (b *Broker) preferredReadReplica(st *metadata.State, p *partition, follower bool, req *kmsg.FetchRequest, version int16, offset int64) int32 {
	if follower || version < 11 || req.Rack == "" || req.ReplicaID >= 0 || (version >= 15 && req.ReplicaState.ID >= 0) {
		return -1
	}
	if self, ok := st.Broker(b.cfg.NodeID); !ok || self.Rack == req.Rack {
		return -1
	}
	p.repl.mu.Lock()
	tr := p.repl.mu.tracker
	isr := slices.Clone(p.repl.mu.isr)
	p.repl.mu.Unlock()
	if tr == nil {
		return -1
	}
	// The partition's log start across both tiers, as Kafka checks the
	// replica's log start (KIP-392 with KIP-405): a follower serves the
	// bucket's history as the leader does. With the local start alone,
	// every replay of history was served by the leader, across racks (a
	// replay review).
	low := p.log.LogStartOffset()
	if b.tier() != nil {
		if mp, ok := st.Partition(p.topicID, p.id); ok && mp.Remote.ManifestVersion > 0 && mp.Remote.StartOffset < low {
			low = mp.Remote.StartOffset
		}
	}
	for _, id := range isr {
		if id == b.cfg.NodeID {
			continue
		}
		br, ok := st.Broker(id)
		if !ok || br.Fenced || br.Rack != req.Rack {
			continue
		}
		if end := tr.FollowerEnd(id); end >= offset && offset >= low {
			return id
		}
	}
	return -1
}
