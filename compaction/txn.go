package compaction

// Transactions is what the cleaner needs of a partition's transaction and
// producer state. The broker's transaction machinery (issue 8) implements it;
// a nil Transactions means no transactions and no idempotent producers to
// keep state for. Methods may be called from a cleaner goroutine while the
// partition takes appends; they must be safe for that.
type Transactions interface {
	// FirstUnstableOffset is the first offset of the oldest open
	// transaction (the last stable offset), or -1 if none is open. The
	// cleaner never cleans at or past it.
	FirstUnstableOffset() int64
	// AbortedTransactions returns the aborted transactions with records in
	// [from, to) (LastOffset >= from and FirstOffset < to), ordered by
	// FirstOffset. LastOffset is the offset of the abort marker.
	AbortedTransactions(from, to int64) ([]AbortedTxn, error)
	// ProducerLastOffset is the last offset of the producer's latest batch
	// still in the log, or ok false if the producer is unknown. The cleaner
	// keeps that batch's header (with no records) when it drops all of its
	// records, so that the producer's sequence state can still be rebuilt
	// from the log, as Kafka does.
	ProducerLastOffset(producerID int64) (offset int64, ok bool)
}

// AbortedTxn is one aborted transaction of a producer: its first offset and
// the offset of its abort marker.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
	LastOffset  int64
}

// txnTracker follows transactions through a run of batches in offset order,
// Kafka's CleanedTransactionMetadata: it tells which data batches belong to
// aborted transactions and which control batches may go.
type txnTracker struct {
	aborted          []AbortedTxn
	next             int
	ongoingAborted   map[int64]*abortedState
	ongoingCommitted map[int64]bool
}

type abortedState struct {
	txn AbortedTxn
	// sawData is set when a batch of the transaction was seen (and dropped)
	// in this run: the marker must then stay until a later run finds none.
	sawData bool
}

func newTxnTracker(aborted []AbortedTxn) *txnTracker {
	return &txnTracker{aborted: aborted, ongoingAborted: map[int64]*abortedState{}, ongoingCommitted: map[int64]bool{}}
}

func (t *txnTracker) consumeUpTo(offset int64) {
	for t.next < len(t.aborted) && t.aborted[t.next].FirstOffset <= offset {
		a := t.aborted[t.next]
		if _, ok := t.ongoingAborted[a.ProducerID]; !ok {
			t.ongoingAborted[a.ProducerID] = &abortedState{txn: a}
		}
		t.next++
	}
}

// onData is called for a data batch; it reports whether the batch belongs to
// an aborted transaction (and must be dropped).
func (t *txnTracker) onData(producerID int64, transactional bool, lastOffset int64) bool {
	t.consumeUpTo(lastOffset)
	if !transactional {
		return false
	}
	if a, ok := t.ongoingAborted[producerID]; ok {
		a.sawData = true
		return true
	}
	t.ongoingCommitted[producerID] = true
	return false
}

// onControl is called for a control batch with its marker type (ok false
// for an empty or malformed control batch); it reports whether the marker
// may be dropped (once its delete horizon has passed).
func (t *txnTracker) onControl(producerID int64, lastOffset int64, typ int16, ok bool) bool {
	t.consumeUpTo(lastOffset)
	if !ok {
		return true
	}
	switch typ {
	case controlAbort:
		a, found := t.ongoingAborted[producerID]
		delete(t.ongoingAborted, producerID)
		// Keep the marker while this run still found data of the transaction.
		return !(found && a.sawData)
	case controlCommit:
		saw := t.ongoingCommitted[producerID]
		delete(t.ongoingCommitted, producerID)
		return !saw
	}
	return false
}
