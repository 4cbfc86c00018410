package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/metadata"
)

// partition is a partition this broker leads: its hotlog, its
// idempotent-producer state and the long-poll waiters of Fetch.
//
// Locks: mu guards the high watermark update, the producer state and the
// waiter set. The producer state is also changed inside hotlog's Check hook,
// which runs under the log's append lock; lock order is log append lock →
// p.mu (never the reverse: p.mu is not held while calling into the log).
type partition struct {
	topic   string
	topicID metadata.UUID
	id      int32
	dir     string
	log     *hotlog.Log
	repl    replState    // replication role and assignment (replication.go)
	logger  *slog.Logger // nil in tests that build a bare partition
	// isrChanges counts the ISR shrinks and expansions of the partition
	// while this broker leads it (nil in tests that build a bare
	// partition).
	isrChanges *isrCounters
	// role orders changes of the partition's role against its writes:
	// applyAssignment changes the role (leader or follower, and the
	// leader epoch) under role.Lock, and every append and truncation
	// holds role.RLock from its check of the role it was made for
	// through the write. Without it a leader's batch checked before a
	// leadership moved was written after, stamped with the new leader's
	// epoch, on a broker that now follows (its log diverged from the new
	// leader's under an epoch that leader never wrote there), and an old
	// leader's fetch response could be appended by a broker that had
	// just taken over.
	role sync.RWMutex
	// producerIDExpiration is the broker's producer.id.expiration.ms,
	// applied to the state loadProducers rebuilds (0: nothing expires).
	producerIDExpiration time.Duration
	// testHookTruncated, when set (tests only), runs in truncateTo
	// between the log's truncation and the producer state's rebuild.
	testHookTruncated func()

	// logConfig is what the log was last given (store.applyLogConfigs); a
	// leaf lock, never held while taking another.
	logConfig struct {
		sync.Mutex
		applied hotlog.Config
	}

	mu struct {
		sync.Mutex
		leaderEpoch int32
		producers   *producerState
		// stateEnd is the offset up to which producers has applied the
		// log. The log publishes a leader's append (its end moves, and
		// followers may read it) just before the producer state learns
		// of it (Written), so a transaction's first batch is in the log a
		// moment before it counts as open: the last stable offset never
		// passes stateEnd.
		stateEnd int64
		// snapshotEnd is the offset of a producer snapshot on disk that
		// holds producers exactly (loaded with nothing replayed after
		// it, or written since), -1 if none is known: a snapshot
		// at stateEnd is then not written again (snapshotProducers).
		snapshotEnd int64
		// rebuilding is set while a truncation cuts the log and the
		// producer state is rebuilt from what is left (truncateTo): the
		// state still has the cut tail's markers, so a transaction
		// whose abort marker was cut counts as closed although the log
		// (and its transaction index) has it open again. The last
		// stable offset is the log start meanwhile.
		rebuilding bool
		waiters    map[chan struct{}]struct{}
	}
}

func (p *partition) leaderEpoch() int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.leaderEpoch
}

// addWaiter registers ch to be signalled (non-blocking) on every append.
func (p *partition) addWaiter(ch chan struct{}) {
	p.mu.Lock()
	p.mu.waiters[ch] = struct{}{}
	p.mu.Unlock()
}

func (p *partition) removeWaiter(ch chan struct{}) {
	p.mu.Lock()
	delete(p.mu.waiters, ch)
	p.mu.Unlock()
}

func (p *partition) wake() {
	p.mu.Lock()
	for ch := range p.mu.waiters {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
}

// appendResult is the outcome of one Produce partition.
type appendResult struct {
	baseOffset    int64
	logAppendTime int64
}

// appendBatch appends one client batch: validation and offset assignment
// in hotlog, idempotence checks here, under the log's append lock.
// ordered is called once the batch has its place in the log (or failed).
//
// noSyncWait (acks=1 and acks=0 produce requests) returns once the batch is
// written, before the group-commit fsync that the flush policy runs; the
// high watermark passes the batch only once that fsync is done
// (onDurable).
//
// The batch is written only while this broker leads in epoch (the epoch it
// is stamped with), else errNotLeader.
func (p *partition) appendBatch(records []byte, maxMessageBytes int32, epoch int32, logAppendTime, noSyncWait bool, ordered func()) (appendResult, error) {
	return p.appendProduced(records, maxMessageBytes, epoch, logAppendTime, noSyncWait, txnWriteCheck{}, ordered)
}

// appendProduced is appendBatch for a Produce's batch, with what
// verifyTxnWrite found of its transaction (txns.go).
func (p *partition) appendProduced(records []byte, maxMessageBytes int32, epoch int32, logAppendTime, noSyncWait bool, v txnWriteCheck, ordered func()) (appendResult, error) {
	defer ordered()
	if int64(len(records)) > int64(maxMessageBytes) {
		return appendResult{}, fmt.Errorf("%w: batch of %d bytes, max.message.bytes %d", hotlog.ErrBatchTooLarge, len(records), maxMessageBytes)
	}
	h, err := hotlog.ParseBatchHeader(records)
	if err != nil {
		if len(records) >= 17 && records[16] != 2 {
			return appendResult{}, errUnsupportedMagic
		}
		return appendResult{}, err
	}
	if int64(len(records)) != h.Size() {
		return appendResult{}, errOneBatch
	}
	if h.IsControl() {
		// Transaction markers come only from the coordinator (txns.go).
		return appendResult{}, fmt.Errorf("%w: clients may not produce control batches", hotlog.ErrInvalidRecord)
	}
	info := batchInfo{
		producerID:    h.ProducerID,
		producerEpoch: h.ProducerEpoch,
		baseSequence:  h.BaseSequence,
		records:       h.NumRecords,
		maxTimestamp:  h.MaxTimestamp,
		transactional: h.IsTransactional(),
		verify:        v.verify,
		guard:         v.guard,
		written:       v.written,
	}
	return p.appendChecked(records, info, h, epoch, logAppendTime, noSyncWait, maxMessageBytes, ordered)
}

// appendChecked appends one validated batch with the producer-state check
// (also the path of transaction markers, txns.go), while this broker leads
// in epoch (else errNotLeader). ordered must be idempotent. A positive
// maxMessageBytes is the topic's current max.message.bytes, which the log's
// own config may not have caught up with (hotlog.AppendOptions).
func (p *partition) appendChecked(records []byte, info batchInfo, h hotlog.BatchHeader, epoch int32, logAppendTime, noSyncWait bool, maxMessageBytes int32, ordered func()) (appendResult, error) {
	p.role.RLock()
	defer p.role.RUnlock()
	if !p.isLeader(epoch) {
		return appendResult{}, errNotLeader
	}
	var dup *duplicateError
	// Check, then the abort's transaction index entry (written by hotlog
	// before the batch), then the state change once the batch is written:
	// all under the log's append lock, so in log order. A reader that sees
	// the transaction closed (the LSO moved) finds its index entry.
	opts := hotlog.AppendOptions{
		LeaderEpoch:     epoch,
		LogAppendTime:   logAppendTime,
		NoSyncWait:      noSyncWait,
		MaxMessageBytes: maxMessageBytes,
		Check: func(first int64, batches []hotlog.BatchHeader) error {
			defer ordered()
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.mu.producers.check(info)
		},
		Aborted: func(batches []hotlog.BatchHeader) []hotlog.AbortedTxn {
			p.mu.Lock()
			defer p.mu.Unlock()
			if a, ok := p.mu.producers.aborts(info, batches[0].BaseOffset); ok {
				return []hotlog.AbortedTxn{a}
			}
			return nil
		},
		Written: func(batches []hotlog.BatchHeader) {
			p.mu.Lock()
			defer p.mu.Unlock()
			first := batches[0].BaseOffset
			p.mu.producers.apply(info, first, first+int64(h.LastOffsetDelta), time.Now().UnixMilli())
			p.mu.stateEnd = max(p.mu.stateEnd, first+int64(h.LastOffsetDelta)+1)
			if info.written != nil {
				info.written()
			}
		},
	}
	res, err := p.log.Append(records, opts)
	if errors.As(err, &dup) {
		return appendResult{baseOffset: dup.firstOffset, logAppendTime: -1}, nil
	}
	if err != nil {
		return appendResult{}, err
	}
	if !res.SyncPending {
		// The log is durable to here (group commit flushed every earlier
		// offset too); the high watermark follows over the ISR.
		p.noteDurableEnd(res.LastOffset + 1)
		p.advanceHighWatermark()
	}
	// Followers read to the log end: they need not wait for the fsync.
	p.wake()
	lat := int64(-1)
	if logAppendTime {
		lat = res.LogAppendTime
	}
	return appendResult{baseOffset: res.FirstOffset, logAppendTime: lat}, nil
}

// snapshotProducers stores the producer state as of the offset it has
// applied the log to (stateEnd). Not the log end: a leader's append moves
// the log end just before its Written hook applies the batch, so a
// snapshot taken in between and recorded at the log end would lack that
// batch for good (the replay on open starts after it; a transaction it
// began would be unknown, its records below the last stable offset with
// no aborted entry). Batches after stateEnd are replayed on open. Leaders
// and followers alike apply a batch only once it is written (Written), so
// stateEnd never passes the log end. The state is read under the log's
// lock (as by RollSnapshot): a follower's truncation cannot come between
// reading it and writing it, which would store the cut tail's producers at
// an offset the log reaches again.
//
// A state already on disk as the snapshot at stateEnd (nothing applied or
// expired since it was loaded or written) is not written again: a broker
// with thousands of idle partitions would otherwise write and fsync a
// snapshot of each at every shutdown and at the periodic loop's first pass.
func (p *partition) snapshotProducers() error {
	written := int64(-1)
	rebuilding := false
	err := p.log.WriteProducerSnapshotFunc(func() (int64, []byte) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.mu.snapshotEnd == p.mu.stateEnd && p.log.HasProducerSnapshot(p.mu.stateEnd) {
			return -1, nil
		}
		if p.mu.stateEnd > p.log.LogEndOffset() {
			// A follower's divergent tail was just cut and the state
			// describes it until loadProducers rebuilds it: nothing to
			// write (the log would refuse it) and nothing wrong.
			rebuilding = true
			return -1, nil
		}
		written = p.mu.stateEnd
		return p.mu.stateEnd, p.mu.producers.marshal()
	})
	if err == nil && written >= 0 {
		p.mu.Lock()
		p.mu.snapshotEnd = written
		p.mu.Unlock()
	}
	if err == nil && rebuilding {
		return errStateRebuilding
	}
	return err
}

// errStateRebuilding: snapshotProducers found the producer state ahead of
// a log whose tail was just cut, before it is rebuilt; try again later.
var errStateRebuilding = errors.New("producer state being rebuilt after a truncation")

// batchInfoOf describes one whole batch for the producer state; ok is
// false for batches that do not change it (no producer, or a control batch
// that is not a transaction marker).
func batchInfoOf(batch []byte, h hotlog.BatchHeader) (info batchInfo, ok bool) {
	if h.ProducerID < 0 {
		return info, false
	}
	info = batchInfo{producerID: h.ProducerID, producerEpoch: h.ProducerEpoch,
		baseSequence: h.BaseSequence, records: h.NumRecords, maxTimestamp: h.MaxTimestamp,
		transactional: h.IsTransactional()}
	if h.IsControl() {
		// A transaction marker (txns.go); other control batches change
		// nothing.
		info.commit, info.coordinatorEpoch, info.control = controlType(batch)
		return info, info.control
	}
	return info, true
}

// loadProducers rebuilds the producer state: the latest snapshot, then the
// batches after it. The aborts it replays are handed to the log's
// transaction index, which adds those it lacks (hotlog writes an entry
// before its marker, so this only matters for a damaged or lost index, and
// for the aborted list of a version 2 snapshot).
//
// Producers idle for longer than producerIDExpiration (judged by their last
// batch timestamp) are dropped at once, as Kafka's loadFromSnapshot does,
// rather than at the first periodic check (store.snapshotLoop); a producer
// with an open transaction stays.
func (p *partition) loadProducers() error {
	st := newProducerState()
	from := p.log.LogStartOffset()
	off, data, err := p.log.LatestProducerSnapshot()
	snapshotEnd := int64(-1)
	if err == nil && data != nil {
		if s, derr := unmarshalProducerState(data); derr == nil && off >= from {
			st, from, snapshotEnd = s, off, off
		}
	}
	rebuilt := st.legacyAborted
	st.legacyAborted = nil
	end := p.log.LogEndOffset()
	for from < end {
		b, err := p.log.ReadBytes(from, 1<<20, end)
		if err != nil {
			return fmt.Errorf("broker: replaying producer state of %s-%d: %w", p.topic, p.id, err)
		}
		if len(b) == 0 {
			break
		}
		next := applyBatches(st, b, from, func(a hotlog.AbortedTxn) { rebuilt = append(rebuilt, a) })
		if next <= from {
			break
		}
		from = next
	}
	for _, a := range rebuilt {
		if a.LastOffset >= end {
			continue
		}
		if _, err := p.log.AddAbortedTxn(a); err != nil {
			return fmt.Errorf("broker: rebuilding the transaction index of %s-%d: %w", p.topic, p.id, err)
		}
	}
	if p.producerIDExpiration > 0 && st.expire(time.Now().Add(-p.producerIDExpiration).UnixMilli()) > 0 {
		snapshotEnd = -1
	}
	if snapshotEnd != end || len(rebuilt) > 0 {
		snapshotEnd = -1 // batches replayed after it, or a version 2 snapshot's aborts moved out
	}
	p.mu.Lock()
	p.mu.producers = st
	p.mu.stateEnd = end
	p.mu.snapshotEnd = snapshotEnd
	p.mu.rebuilding = false
	p.mu.Unlock()
	return nil
}

// applyBatches applies the whole batches at the start of b, read from
// offset from, to the producer state st, as a replay of the log does,
// handing each abort marker's aborted transaction to onAbort; it returns
// the offset after the last batch (from if there was none).
func applyBatches(st *producerState, b []byte, from int64, onAbort func(hotlog.AbortedTxn)) int64 {
	next := from
	for len(b) >= hotlog.BatchHeaderSize {
		h, err := hotlog.ParseBatchHeader(b)
		if err != nil || int64(len(b)) < h.Size() {
			break
		}
		if info, ok := batchInfoOf(b[:h.Size()], h); ok {
			if a, ok := st.aborts(info, h.BaseOffset); ok && onAbort != nil {
				onAbort(a)
			}
			st.apply(info, h.BaseOffset, h.LastOffset(), h.MaxTimestamp)
		}
		next = h.LastOffset() + 1
		b = b[h.Size():]
	}
	return next
}

// topicConfigs returns the topic's config overrides in st.
func (p *partition) topicConfigs(st *metadata.State) map[string]string {
	if t, ok := st.TopicByID(p.topicID); ok {
		return t.Configs
	}
	return nil
}
