package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/sediment-io/sediment/hotlog"
)

// Idempotent-producer state of one partition (the leader's copy).
//
// For each producer id the partition keeps the producer's epoch and the
// metadata of its last five batches (Kafka's max.in.flight limit for
// idempotence), so that a retried batch is recognised and answered with the
// offset it got the first time. The state changes only under the log's
// append lock (hotlog's AppendOptions.Check), so it follows log order.
//
// Snapshot format (stored through hotlog's producer snapshots, as of an
// offset; on open the tail after that offset is replayed). Version 2 added
// the open transaction's first offset and the aborted transactions; version
// 3 drops the aborted list, which lives in hotlog's per-segment transaction
// index now; version 4 adds the coordinator epoch of the producer's last
// transaction marker. Versions 1 to 3 are still read (coordinator epoch -1;
// a v2 list is handed to the index once, see loadProducers).
//
//	+---------+-----------+------------------------------------------------+
//	| version | producers | per producer:                                  |
//	| u8 = 4  | uvarint   |  id i64 | epoch i16 | last ts i64 | n u8 (≤5)  |
//	|         |           |  n × [first seq i32 | last seq i32 |           |
//	|         |           |       first offset i64 | last offset i64]      |
//	|         |           |  txn first offset i64 (-1: none)   (v2+ only)  |
//	|         |           |  coordinator epoch i32 (-1: none)  (v4+ only)  |
//	+---------+-----------+------------------------------------------------+
//	| aborted uvarint | per aborted transaction (v2 only):                 |
//	|                 |  producer id i64 | first offset i64 | marker i64   |
//	+-----------------+----------------------------------------------------+
//
// All integers big-endian except the uvarint count.

const producerBatchesKept = 5

// producerSnapshotVersion is the version marshal writes.
const producerSnapshotVersion = 4

type batchMeta struct {
	firstSeq, lastSeq       int32
	firstOffset, lastOffset int64
}

type producerEntry struct {
	id            int64
	epoch         int16
	lastTimestamp int64
	batches       []batchMeta // oldest first, at most producerBatchesKept
	// txnFirstOffset is the first offset of the producer's open
	// transaction in this partition, -1 if none (snapshot v2).
	txnFirstOffset int64
	// coordinatorEpoch is the coordinator epoch of the producer's last
	// transaction marker in this partition, -1 if none (snapshot v4):
	// DescribeProducers answers it, and a marker from an older
	// coordinator epoch is fenced (check), as by Kafka's
	// ProducerStateEntry.
	coordinatorEpoch int32
	// lastAppendMs is the broker's clock at the producer's last append
	// (after a restart: its last batch timestamp), for expiry.
	lastAppendMs int64
}

func (e *producerEntry) lastSeq() int32 {
	if len(e.batches) == 0 {
		return -1
	}
	return e.batches[len(e.batches)-1].lastSeq
}

type producerState struct {
	m map[int64]*producerEntry
	// open holds the entries of m with an open transaction
	// (txnFirstOffset >= 0), as Kafka's ongoingTxns: the last stable
	// offset, computed on every fetch, looks at these only, not at every
	// idempotent producer the partition has seen.
	open map[int64]*producerEntry
	// legacyAborted is the aborted list of a version 2 snapshot, for the
	// transaction index (loadProducers); nil otherwise.
	legacyAborted []hotlog.AbortedTxn
	// verifying holds, per producer id, the guard of the transaction
	// verification in progress or verified (Kafka's VerificationStateEntry,
	// KIP-890 part 1): a Produce's transactional batch that would open a
	// transaction here is appended only with the guard it verified under,
	// still current. A marker or the transaction's first batch removes it,
	// so a verification answered before its transaction ended (and its
	// marker was written here) cannot open a transaction after the marker
	// that nothing would ever end. Leader only, never snapshotted.
	verifying map[int64]*txnVerification
}

// txnVerification is one verification guard: compared by identity. epoch
// is the producer epoch it was made for.
type txnVerification struct {
	createdMs int64
	epoch     int16
}

func newProducerState() *producerState {
	return &producerState{m: make(map[int64]*producerEntry), open: make(map[int64]*producerEntry),
		verifying: make(map[int64]*txnVerification)}
}

// verification returns the producer's current verification guard for
// epoch, a new one if it has none or one of an older epoch (which the newer
// epoch supersedes). A request of an older epoch than the guard's (a
// zombie's) gets a guard of its own that is never current, and leaves the
// newer epoch's in place.
func (s *producerState) verification(producerID int64, epoch int16, nowMs int64) *txnVerification {
	g := s.verifying[producerID]
	switch {
	case g == nil || g.epoch < epoch:
		g = &txnVerification{createdMs: nowMs, epoch: epoch}
		s.verifying[producerID] = g
	case g.epoch > epoch:
		return &txnVerification{createdMs: nowMs, epoch: epoch}
	}
	return g
}

// dropVerification removes g if it is still the producer's guard (its
// verification failed).
func (s *producerState) dropVerification(producerID int64, g *txnVerification) {
	if g != nil && s.verifying[producerID] == g {
		delete(s.verifying, producerID)
	}
}

// endVerification removes the producer's guard when a batch of epoch
// starts or ends its transaction here. A marker of an older epoch (a
// fenced transaction's abort, retried late, after a coordinator failover)
// ends nothing the guard was made for: it stays, and the newer epoch's
// verified write goes through. Before, such a marker removed it and the
// live producer's TxnOffsetCommit was refused INVALID_TXN_STATE (seen once
// in a review's zombie runs).
func (s *producerState) endVerification(producerID int64, epoch int16) {
	if g := s.verifying[producerID]; g != nil && g.epoch <= epoch {
		delete(s.verifying, producerID)
	}
}

// txnOpen reports whether the producer has a transaction open here at
// epoch.
func (s *producerState) txnOpen(producerID int64, epoch int16) bool {
	e := s.m[producerID]
	return e != nil && e.epoch == epoch && e.txnFirstOffset >= 0
}

var (
	errOutOfOrderSequence = errors.New("broker: out of order sequence number")
	errProducerFenced     = errors.New("broker: producer epoch is older than the current one")
	// errTxnProducerFenced is errProducerFenced for a transactional
	// batch: clients must treat it as fatal (PRODUCER_FENCED).
	errTxnProducerFenced = errors.New("broker: transactional producer fenced by a newer epoch")
	// errTxnCoordinatorFenced: a transaction marker from a coordinator
	// epoch older than the producer's last marker here, i.e. from a
	// coordinator that has been replaced (TRANSACTION_COORDINATOR_FENCED).
	errTxnCoordinatorFenced = errors.New("broker: transaction marker from an older coordinator epoch")
	// errTxnWriteExpected: a non-transactional batch from a producer
	// with a transaction open in the partition (INVALID_TXN_STATE, as
	// Kafka's "Expected transactional write from producer").
	errTxnWriteExpected = errors.New("broker: expected a transactional write from the producer")
)

// duplicateError reports a batch that was already appended.
type duplicateError struct{ firstOffset, lastOffset int64 }

func (d *duplicateError) Error() string {
	return fmt.Sprintf("broker: duplicate batch already at offset %d", d.firstOffset)
}

type batchInfo struct {
	producerID    int64
	producerEpoch int16
	baseSequence  int32
	records       int32
	maxTimestamp  int64
	transactional bool
	// control: a transaction marker; commit tells which, and
	// coordinatorEpoch is the marker's (from its control record value).
	control, commit  bool
	coordinatorEpoch int32
	// verify: a client's transactional batch (Produce with a
	// transactional id) that may open a transaction here only with
	// guard, the producer's verification guard it was verified under
	// (nil: not verified).
	verify bool
	guard  *txnVerification
	// written runs once the batch is written (appendChecked), if set.
	written func()
}

func nextSeq(seq int32, n int32) int32 {
	// Sequences wrap from MaxInt32 to 0.
	return int32((int64(seq) + int64(n)) % (1 << 31))
}

// check validates a batch against the state without changing it.
func (s *producerState) check(b batchInfo) error {
	if err := s.checkSequence(b); err != nil {
		return err
	}
	if !b.control && !b.transactional && b.producerID >= 0 {
		// Kafka's ProducerAppendInfo.appendDataBatch: while the producer
		// id has a transaction open here (at any epoch: only a marker
		// ends it), its writes must be transactional: a plain batch
		// there is a client bug (a producer that mixes the two), and
		// its records would sit inside a transaction that its marker
		// then commits or aborts around them.
		if e := s.m[b.producerID]; e != nil && e.txnFirstOffset >= 0 {
			return fmt.Errorf("%w: producer %d epoch %d has a transaction open since offset %d", errTxnWriteExpected, b.producerID, b.producerEpoch, e.txnFirstOffset)
		}
	}
	if b.verify && b.transactional && !b.control && !s.txnOpen(b.producerID, b.producerEpoch) &&
		(b.guard == nil || s.verifying[b.producerID] != b.guard) {
		// Kafka's UnifiedLog.batchMissingRequiredVerification: the
		// transaction it was verified in has ended here since.
		return fmt.Errorf("%w: producer %d epoch %d: the transaction verified for it has ended", errTxnNotOpen, b.producerID, b.producerEpoch)
	}
	return nil
}

// checkSequence is check's epoch and sequence part (duplicates included).
func (s *producerState) checkSequence(b batchInfo) error {
	if b.producerID < 0 {
		return nil
	}
	e := s.m[b.producerID]
	if b.control || b.baseSequence == -1 {
		// Markers and the coordinator's own transactional writes
		// (TxnOffsetCommit) carry no sequence: only the epoch counts.
		// A client's batch without one never gets here
		// (checkProducedSequence, INVALID_RECORD).
		if e != nil && b.producerEpoch < e.epoch {
			return fmt.Errorf("%w: epoch %d < %d for producer %d", errTxnProducerFenced, b.producerEpoch, e.epoch, b.producerID)
		}
		// Then, as Kafka's ProducerAppendInfo.checkCoordinatorEpoch, a
		// marker from an older coordinator epoch than the last one here
		// (a coordinator that lost its __transaction_state partition).
		// The same epoch passes: a retried marker is written again.
		if b.control && e != nil && b.coordinatorEpoch < e.coordinatorEpoch {
			return fmt.Errorf("%w: coordinator epoch %d < %d for producer %d", errTxnCoordinatorFenced, b.coordinatorEpoch, e.coordinatorEpoch, b.producerID)
		}
		return nil
	}
	if e == nil {
		// A producer this partition has no state of (expired, or its
		// records all deleted) is accepted at any sequence and goes on
		// from there, as Kafka does since 2.5 (ProducerAppendInfo's
		// checkSequence): refusing it would make an idempotent client
		// reset its producer and resend, which is where duplicates
		// come from.
		return nil
	}
	switch {
	case b.producerEpoch < e.epoch:
		err := errProducerFenced
		if b.transactional {
			err = errTxnProducerFenced
		}
		return fmt.Errorf("%w: epoch %d < %d for producer %d", err, b.producerEpoch, e.epoch, b.producerID)
	case b.producerEpoch > e.epoch:
		if b.baseSequence != 0 {
			return fmt.Errorf("%w: new epoch %d must start at sequence 0, got %d", errOutOfOrderSequence, b.producerEpoch, b.baseSequence)
		}
		return nil
	}
	last := nextSeq(b.baseSequence, b.records-1)
	for _, m := range e.batches {
		if m.firstSeq == b.baseSequence && m.lastSeq == last {
			return &duplicateError{firstOffset: m.firstOffset, lastOffset: m.lastOffset}
		}
	}
	if want := nextSeq(e.lastSeq(), 1); b.baseSequence != want {
		return fmt.Errorf("%w: producer %d expected sequence %d, got %d", errOutOfOrderSequence, b.producerID, want, b.baseSequence)
	}
	return nil
}

// apply records an appended batch at the broker's time nowMs. It checks
// nothing: followers and the replay at open apply what the leader wrote (a
// marker's coordinator epoch is taken as it is, as Kafka's replication
// does).
func (s *producerState) apply(b batchInfo, firstOffset, lastOffset, nowMs int64) {
	if b.producerID < 0 {
		return
	}
	e := s.m[b.producerID]
	if e == nil {
		e = &producerEntry{id: b.producerID, txnFirstOffset: -1, coordinatorEpoch: -1}
		s.m[b.producerID] = e
	}
	if b.producerEpoch != e.epoch {
		e.epoch = b.producerEpoch
		e.batches = e.batches[:0]
	}
	if b.maxTimestamp > e.lastTimestamp {
		e.lastTimestamp = b.maxTimestamp
	}
	if nowMs > e.lastAppendMs {
		e.lastAppendMs = nowMs
	}
	if b.control {
		e.txnFirstOffset = -1
		delete(s.open, e.id)
		s.endVerification(e.id, b.producerEpoch)
		e.coordinatorEpoch = max(b.coordinatorEpoch, -1)
		return
	}
	if b.transactional && e.txnFirstOffset < 0 {
		e.txnFirstOffset = firstOffset
		s.open[e.id] = e
		s.endVerification(e.id, b.producerEpoch)
	}
	if b.baseSequence == -1 {
		return
	}
	if len(e.batches) == producerBatchesKept {
		copy(e.batches, e.batches[1:])
		e.batches = e.batches[:producerBatchesKept-1]
	}
	e.batches = append(e.batches, batchMeta{
		firstSeq: b.baseSequence, lastSeq: nextSeq(b.baseSequence, b.records-1),
		firstOffset: firstOffset, lastOffset: lastOffset,
	})
}

// firstUnstable is the first offset of the oldest open transaction, or
// -1: the last stable offset is the smaller of it and the high watermark.
func (s *producerState) firstUnstable() int64 {
	first := int64(-1)
	for _, e := range s.open {
		if e.txnFirstOffset >= 0 && (first < 0 || e.txnFirstOffset < first) {
			first = e.txnFirstOffset
		}
	}
	return first
}

// aborts returns the transaction index entry for b, a batch about to be
// applied at offset, if it is an abort marker that ends an open transaction:
// the producer, the transaction's first offset, the marker, and the last
// stable offset once it is applied (the oldest other open transaction's
// first offset, or the offset after the marker).
func (s *producerState) aborts(b batchInfo, offset int64) (hotlog.AbortedTxn, bool) {
	return s.abortsOver(nil, b, offset)
}

// txnFirst is the first offset of producer id's open transaction (-1:
// none), as open (changes not applied to s yet: id → first offset, -1
// closed) has it, else as s has it.
func (s *producerState) txnFirst(open map[int64]int64, id int64) int64 {
	if f, ok := open[id]; ok {
		return f
	}
	if e := s.m[id]; e != nil {
		return e.txnFirstOffset
	}
	return -1
}

// abortsOver is aborts on the state as open changes it (see txnFirst): a
// follower computes the entries of a fetched run of batches before it
// applies them.
func (s *producerState) abortsOver(open map[int64]int64, b batchInfo, offset int64) (hotlog.AbortedTxn, bool) {
	if !b.control || b.commit || b.producerID < 0 {
		return hotlog.AbortedTxn{}, false
	}
	first := s.txnFirst(open, b.producerID)
	if first < 0 {
		return hotlog.AbortedTxn{}, false
	}
	lso := offset + 1
	consider := func(id, f int64) {
		if id != b.producerID && f >= 0 && f < lso {
			lso = f
		}
	}
	for id, e := range s.open {
		if _, over := open[id]; !over {
			consider(id, e.txnFirstOffset)
		}
	}
	for id, f := range open {
		consider(id, f)
	}
	return hotlog.AbortedTxn{ProducerID: b.producerID, FirstOffset: first, LastOffset: offset, LastStableOffset: lso}, true
}

// expire forgets producers that have not appended since cutoffMs (Kafka's
// producer.id.expiration.ms, KIP-854): the state, and its snapshots, stay
// bounded by the producers active recently. An expired producer that writes
// again is accepted at whatever sequence it goes on with (check), as by
// Kafka, so its client carries on unaware; only a retry of a batch written
// before the expiry is no longer recognised as a duplicate.
func (s *producerState) expire(cutoffMs int64) int {
	for id, g := range s.verifying {
		// Verified, or refused, long ago and never appended.
		if g.createdMs < cutoffMs {
			delete(s.verifying, id)
		}
	}
	n := 0
	for id, e := range s.m {
		// A producer with an open transaction stays until its marker.
		if e.lastAppendMs < cutoffMs && e.txnFirstOffset < 0 {
			delete(s.m, id)
			n++
		}
	}
	return n
}

// entries returns the producers sorted by id.
func (s *producerState) entries() []*producerEntry {
	out := make([]*producerEntry, 0, len(s.m))
	for _, e := range s.m {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (s *producerState) marshal() []byte { return s.marshalVersion(producerSnapshotVersion) }

// marshalVersion encodes the snapshot at version v (3 or later): version 3
// has no coordinator epoch. Only marshal's version is written; the older one
// is for tests of loading what earlier brokers wrote.
func (s *producerState) marshalVersion(v byte) []byte {
	out := []byte{v}
	out = binary.AppendUvarint(out, uint64(len(s.m)))
	for _, e := range s.entries() {
		out = binary.BigEndian.AppendUint64(out, uint64(e.id))
		out = binary.BigEndian.AppendUint16(out, uint16(e.epoch))
		out = binary.BigEndian.AppendUint64(out, uint64(e.lastTimestamp))
		out = append(out, byte(len(e.batches)))
		for _, m := range e.batches {
			out = binary.BigEndian.AppendUint32(out, uint32(m.firstSeq))
			out = binary.BigEndian.AppendUint32(out, uint32(m.lastSeq))
			out = binary.BigEndian.AppendUint64(out, uint64(m.firstOffset))
			out = binary.BigEndian.AppendUint64(out, uint64(m.lastOffset))
		}
		out = binary.BigEndian.AppendUint64(out, uint64(e.txnFirstOffset))
		if v >= 4 {
			out = binary.BigEndian.AppendUint32(out, uint32(e.coordinatorEpoch))
		}
	}
	return out
}

var errBadSnapshot = errors.New("broker: malformed producer snapshot")

func unmarshalProducerState(b []byte) (*producerState, error) {
	s := newProducerState()
	if len(b) < 1 || b[0] < 1 || b[0] > producerSnapshotVersion {
		return nil, errBadSnapshot
	}
	v2, withTxns, withCoordinator := b[0] == 2, b[0] >= 2, b[0] >= 4
	b = b[1:]
	n, k := binary.Uvarint(b)
	// Each producer takes at least 19 bytes: bound the count by the input.
	if k <= 0 || n > uint64(len(b)/19+1) {
		return nil, errBadSnapshot
	}
	b = b[k:]
	for i := uint64(0); i < n; i++ {
		if len(b) < 19 {
			return nil, errBadSnapshot
		}
		e := &producerEntry{
			id:               int64(binary.BigEndian.Uint64(b)),
			epoch:            int16(binary.BigEndian.Uint16(b[8:])),
			lastTimestamp:    int64(binary.BigEndian.Uint64(b[10:])),
			txnFirstOffset:   -1,
			coordinatorEpoch: -1,
		}
		e.lastAppendMs = e.lastTimestamp
		nb := int(b[18])
		b = b[19:]
		if nb > producerBatchesKept || len(b) < nb*24 {
			return nil, errBadSnapshot
		}
		for j := 0; j < nb; j++ {
			e.batches = append(e.batches, batchMeta{
				firstSeq:    int32(binary.BigEndian.Uint32(b)),
				lastSeq:     int32(binary.BigEndian.Uint32(b[4:])),
				firstOffset: int64(binary.BigEndian.Uint64(b[8:])),
				lastOffset:  int64(binary.BigEndian.Uint64(b[16:])),
			})
			b = b[24:]
		}
		if withTxns {
			if len(b) < 8 {
				return nil, errBadSnapshot
			}
			e.txnFirstOffset = int64(binary.BigEndian.Uint64(b))
			b = b[8:]
			if e.txnFirstOffset < -1 {
				return nil, errBadSnapshot
			}
		}
		if withCoordinator {
			if len(b) < 4 {
				return nil, errBadSnapshot
			}
			e.coordinatorEpoch = int32(binary.BigEndian.Uint32(b))
			b = b[4:]
			if e.coordinatorEpoch < -1 {
				return nil, errBadSnapshot
			}
		}
		if e.id < 0 {
			return nil, errBadSnapshot
		}
		s.m[e.id] = e
		if e.txnFirstOffset >= 0 {
			s.open[e.id] = e
		} else {
			delete(s.open, e.id)
		}
	}
	if v2 {
		n, k := binary.Uvarint(b)
		// Bound the count by what follows the count itself.
		if k <= 0 || n > uint64(len(b[k:])/24) {
			return nil, errBadSnapshot
		}
		b = b[k:]
		for i := uint64(0); i < n; i++ {
			// Version 2 kept no LSO: 0 never ends a read's index scan early.
			a := hotlog.AbortedTxn{
				ProducerID:  int64(binary.BigEndian.Uint64(b)),
				FirstOffset: int64(binary.BigEndian.Uint64(b[8:])),
				LastOffset:  int64(binary.BigEndian.Uint64(b[16:])),
			}
			b = b[24:]
			if a.ProducerID < 0 || a.FirstOffset < 0 || a.LastOffset < a.FirstOffset || (len(s.legacyAborted) > 0 && a.LastOffset <= s.legacyAborted[len(s.legacyAborted)-1].LastOffset) {
				return nil, errBadSnapshot
			}
			s.legacyAborted = append(s.legacyAborted, a)
		}
	}
	if len(b) != 0 {
		return nil, errBadSnapshot
	}
	return s, nil
}
