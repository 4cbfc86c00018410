package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/broker/txn"
	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/metadata"
)

// The glue between the broker and its transaction coordinator (broker/txn):
// the __transaction_state topic and which of its partitions this broker
// leads (loaded into the coordinator), txn.Log on a partition, txn.Broker
// (producer ids, topic sizes, and writing markers: locally, or with
// WriteTxnMarkers to the leader elsewhere), the partition side of
// transactions (markers, last stable offset, aborted transactions), and
// the transactional offsets of __consumer_offsets that wait for their
// marker. Handler files 22 and 24-28, 65, 66 call into it.

// txns owns the coordinator, follows leadership of __transaction_state
// for it (leadership.go), and holds the transactional offsets waiting for
// their marker.
type txns struct {
	b     *Broker
	c     *txn.Coordinator
	parts *coordinatorPartitions

	mu struct {
		sync.Mutex
		// offsets holds, per __consumer_offsets partition and producer
		// id, the transactional offset records being written or written
		// and not yet ended by a marker, a batch (one TxnOffsetCommit) an
		// entry.
		offsets map[int32]map[int64][]*txnOffsetBatch
		client  *kgo.Client // for WriteTxnMarkers to other brokers
	}
}

func newTxns(b *Broker) *txns {
	cfg := b.cfg.Transactions
	cfg.Broker = txnBroker{b}
	cfg.PartitionCount = func() int32 {
		if t, ok := b.meta.State().Topic(txn.StateTopic); ok {
			return int32(len(t.Partitions))
		}
		return 0
	}
	if cfg.Logger == nil {
		cfg.Logger = b.log
	}
	t := &txns{b: b, c: txn.New(cfg)}
	t.parts = newCoordinatorPartitions(b, txn.StateTopic, "transaction state", txnLoader{t})
	t.mu.offsets = make(map[int32]map[int64][]*txnOffsetBatch)
	b.metrics.reg.MustRegister(&txnCollector{c: t.c})
	return t
}

// txnLoader is partitionLoader for the transaction coordinator.
type txnLoader struct{ t *txns }

func (l txnLoader) load(p, leaderEpoch int32) <-chan error {
	return l.t.c.Load(p, leaderEpoch, &txnStateLog{b: l.t.b, part: p})
}
func (l txnLoader) unload(p int32)               { l.t.c.Unload(p) }
func (l txnLoader) partitionFor(id string) int32 { return l.t.c.PartitionFor(id) }

// start begins following leadership of __transaction_state, so that
// timeouts fire and a new leader finishes what the previous one prepared
// even when no request arrives. New calls it once both coordinators exist,
// since completing a transaction writes its offsets through b.groups.
func (t *txns) start() { t.parts.start() }

func (t *txns) close() {
	t.parts.stop()
	t.c.Close()
	t.mu.Lock()
	cl := t.mu.client
	t.mu.client = nil
	t.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
}

func (t *txns) ensureAll() { t.parts.ensureAll() }

// ensure loads or unloads the partition of a transactional id by the
// current leadership.
func (t *txns) ensure(id string) { t.parts.ensure(id) }

// ensureWait is ensure, then a short wait for the load, so the request
// that follows FindCoordinator is not told COORDINATOR_LOAD_IN_PROGRESS.
func (t *txns) ensureWait(ctx context.Context, id string, d time.Duration) {
	t.parts.ensureWait(ctx, id, d)
}

// createStateTopic creates __transaction_state on first use.
func (b *Broker) createTxnStateTopic(ctx context.Context) (*metadata.State, error) {
	st := b.meta.State()
	if _, ok := st.Topic(txn.StateTopic); ok {
		return st, nil
	}
	rf := b.internalReplicationFactor(txn.StateTopic, "transaction.state.log.replication.factor", b.cfg.TransactionStateReplicationFactor)
	nst, err := b.createTopic(ctx, createTopicSpec{
		name:              txn.StateTopic,
		partitions:        b.txns.c.Partitions(),
		replicationFactor: rf,
		configs: map[string]string{"cleanup.policy": "compact", "segment.bytes": "104857600",
			// transaction.state.log.min.isr, as Kafka sets it.
			"min.insync.replicas": strconv.Itoa(int(min(b.cfg.TransactionStateMinISR, rf)))},
	})
	if errors.Is(err, metadata.ErrTopicExists) {
		if nst == nil { // not caught up with the quorum
			nst = b.meta.State()
		}
		return nst, nil
	}
	return nst, err
}

// txnCoordinator finds the leader of an id's __transaction_state partition.
func txnCoordinator(b *Broker, st *metadata.State, key, listener string) (node int32, host string, port int32, code int16) {
	t, ok := st.Topic(txn.StateTopic)
	if !ok {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code
	}
	p := b.txns.c.PartitionFor(key)
	if int(p) >= len(t.Partitions) {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code
	}
	return brokerAddress(st, t.Partitions[p].Leader, listener)
}

func brokerAddress(st *metadata.State, id int32, listener string) (int32, string, int32, int16) {
	br, ok := st.Broker(id)
	if !ok || br.Fenced || len(br.Listeners) == 0 {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code
	}
	l := br.Listeners[0]
	for _, bl := range br.Listeners {
		if bl.Name == listener {
			l = bl
		}
	}
	return br.ID, l.Host, l.Port, 0
}

// txnStateLog is txn.Log on one partition of __transaction_state.
type txnStateLog struct {
	b    *Broker
	part int32
}

func (l *txnStateLog) partition() (*partition, error) {
	p, err := l.b.store.partition(l.b.meta.State(), txn.StateTopic, l.part)
	if errors.Is(err, errNotLeader) || errors.Is(err, errUnknownTopicOrPartition) {
		return nil, fmt.Errorf("%w: %v", txn.ErrNotLeader, err)
	}
	return p, err
}

func (l *txnStateLog) Append(ctx context.Context, records []txn.Record) error {
	p, err := l.partition()
	if err != nil {
		return err
	}
	kv := make([]group.Record, len(records))
	for i, r := range records {
		kv[i] = group.Record{Key: r.Key, Value: r.Value}
	}
	// Answered once the ISR has it (acks=-1, replication.go).
	err = p.appendInternal(ctx, encodeOffsetsBatch(kv, time.Now().UnixMilli()), l.b.stopping)
	if errors.Is(err, hotlog.ErrClosed) || errors.Is(err, errNotLeader) {
		return fmt.Errorf("%w: %v", txn.ErrNotLeader, err)
	}
	return err
}

// Replay reads the partition from its start to its log end, as Kafka's
// coordinators load (see replayLog).
func (l *txnStateLog) Replay(ctx context.Context, fn func(key, value []byte) error) error {
	p, err := l.partition()
	if err != nil {
		return err
	}
	_, err = replayLog(ctx, p, p.log.LogStartOffset(), func(data []byte, off int64) (int64, error) {
		return replayBatches(data, off, fn)
	})
	return err
}

// replayLog feeds a coordinator's load the partition's batches from off to
// its log end (whole batches; replay returns the offset after the last one
// it used) and returns the offset it reached. The load reads to the log
// end, not the high watermark: it runs when this broker has just become the
// leader, and a new leader's high watermark lags its log end until the
// followers fetch again, while everything in its log up to the end is the
// partition's from now on (a leader never truncates its own log). Records
// the previous leader acknowledged (an offset commit, a transaction's state,
// its commit marker) can sit in that gap: a replay that stopped at the high
// watermark lost them from the coordinator's memory for good, and a group
// went back to older offsets (records consumed twice through an exactly-once
// chain under rolling restarts).
func replayLog(ctx context.Context, p *partition, off int64, replay func(data []byte, off int64) (int64, error)) (int64, error) {
	end := p.log.LogEndOffset()
	for off < end {
		if err := ctx.Err(); err != nil {
			return off, err
		}
		data, err := p.log.ReadBytes(off, 1<<20, end)
		if err != nil {
			return off, err
		}
		if len(data) == 0 {
			return off, nil
		}
		next, err := replay(data, off)
		if err != nil {
			return off, err
		}
		if next <= off {
			return off, fmt.Errorf("broker: replay of %s-%d made no progress at offset %d", p.topic, p.id, off)
		}
		off = next
	}
	return off, nil
}

// txnBroker is txn.Broker.
type txnBroker struct{ b *Broker }

func (tb txnBroker) ProducerID(ctx context.Context) (int64, error) { return tb.b.store.producerID(ctx) }

func (tb txnBroker) Partitions(topic string) (int32, bool) {
	t, ok := tb.b.meta.State().Topic(topic)
	if !ok {
		return 0, false
	}
	return int32(len(t.Partitions)), true
}

// WriteMarkers writes the marker to every partition: those led here
// directly, the others through WriteTxnMarkers to their leader, all at
// once (each append waits for its own fsync).
func (tb txnBroker) WriteMarkers(ctx context.Context, m txn.Marker) error {
	b := tb.b
	st := b.meta.State()
	remote := map[int32][]txn.TopicPartition{}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for _, tp := range m.Partitions {
		t, ok := st.Topic(tp.Topic)
		if !ok || tp.Partition >= int32(len(t.Partitions)) {
			continue // deleted: nothing to mark
		}
		if leader := t.Partitions[tp.Partition].Leader; leader != b.cfg.NodeID {
			if leader == metadata.NoLeader {
				// The others are written meanwhile (as Kafka's marker
				// channel retries only the partitions without a leader);
				// the round fails and is retried after every write
				// started here has finished, never beside them.
				fail(fmt.Errorf("broker: %s-%d has no leader", tp.Topic, tp.Partition))
				continue
			}
			remote[leader] = append(remote[leader], tp)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.txns.writeMarker(st, tp, m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch); err != nil {
				fail(err)
			}
		}()
	}
	for leader, tps := range remote {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.txns.sendMarkers(ctx, leader, m, tps); err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeMarker appends a marker to a partition led here; for
// __consumer_offsets it then ends the producer's pending offsets. A marker
// from an older coordinator epoch than the producer's last one here fails
// with errTxnCoordinatorFenced: our coordinator retries its round until it
// is unloaded (a fenced coordinator has lost its partition of
// __transaction_state), as its epoch is the partition's leader epoch,
// which every leader change raises.
func (t *txns) writeMarker(st *metadata.State, tp txn.TopicPartition, producerID int64, epoch int16, commit bool, coordinatorEpoch int32) error {
	p, err := t.b.store.partition(st, tp.Topic, tp.Partition)
	if errors.Is(err, errUnknownTopicOrPartition) {
		return nil
	}
	if err != nil {
		return err
	}
	err = p.appendMarker(producerID, epoch, commit, coordinatorEpoch, t.b.stopping)
	if errors.Is(err, errTxnProducerFenced) {
		// A marker older than what the partition saw: the producer moved
		// on (a newer epoch ended this transaction already).
		t.b.log.Warn("stale transaction marker skipped", "topic", tp.Topic, "partition", tp.Partition, "producer_id", producerID, "epoch", epoch)
		return nil
	}
	if errors.Is(err, errTxnCoordinatorFenced) {
		t.b.log.Info("transaction marker of a replaced coordinator refused", "topic", tp.Topic, "partition", tp.Partition, "producer_id", producerID, "coordinator_epoch", coordinatorEpoch, "err", err)
		return err
	}
	if err != nil {
		return err
	}
	if tp.Topic == offsetsTopic {
		t.endOffsets(tp.Partition, producerID, commit)
	}
	return nil
}

func (t *txns) sendMarkers(ctx context.Context, leader int32, m txn.Marker, tps []txn.TopicPartition) error {
	cl, err := t.client()
	if err != nil {
		return err
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	rm := kmsg.NewWriteTxnMarkersRequestMarker()
	rm.ProducerID, rm.ProducerEpoch, rm.Committed, rm.CoordinatorEpoch = m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch
	for _, g := range groupByTopic(tps) {
		rt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		rt.Topic, rt.Partitions = g.topic, g.partitions
		rm.Topics = append(rm.Topics, rt)
	}
	req.Markers = append(req.Markers, rm)
	resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
	if err != nil {
		return err
	}
	for _, rm := range resp.Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					return fmt.Errorf("broker: marker for %s-%d on broker %d: %w", rt.Topic, rp.Partition, leader, kerr.ErrorForCode(rp.ErrorCode))
				}
			}
		}
	}
	return nil
}

func (t *txns) client() (*kgo.Client, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.client != nil {
		return t.mu.client, nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(t.b.Addr()), kgo.ClientID("sediment-txn-markers")}, t.b.peerClientOpts()...)...)
	if err != nil {
		return nil, err
	}
	t.mu.client = cl
	return cl, nil
}

// txnOffsetBatch is the records of one TxnOffsetCommit, waiting for their
// transaction's marker.
type txnOffsetBatch struct {
	part       int32
	producerID int64
	recs       []group.Record
	// written: the batch is in the log (set by its append, in log order,
	// or by the replay). A marker ends only written batches: one refused
	// at its append because that marker came first (its verification
	// guard gone) is taken back by its handler.
	written atomic.Bool
}

// addOffsets registers transactional offset records of an offsets
// partition before they are appended (Kafka's prepareTxnOffsetCommit), so
// that a marker written once they are in the log finds them, however the
// append's return and the marker race.
func (t *txns) addOffsets(part int32, producerID int64, recs []group.Record) *txnOffsetBatch {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.mu.offsets[part]
	if m == nil {
		m = make(map[int64][]*txnOffsetBatch)
		t.mu.offsets[part] = m
	}
	ob := &txnOffsetBatch{part: part, producerID: producerID, recs: recs}
	m[producerID] = append(m[producerID], ob)
	return ob
}

// takeBackOffsets unregisters ob after its append failed. It reports
// whether ob was still waiting; if not, a marker has ended it already (and
// released the group's pending counts).
func (t *txns) takeBackOffsets(ob *txnOffsetBatch) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.mu.offsets[ob.part]
	for i, o := range m[ob.producerID] {
		if o == ob {
			m[ob.producerID] = append(m[ob.producerID][:i:i], m[ob.producerID][i+1:]...)
			if len(m[ob.producerID]) == 0 {
				delete(m, ob.producerID)
			}
			return true
		}
	}
	return false
}

// endOffsets hands a producer's pending offsets of a partition to the group
// coordinator with the transaction's outcome.
func (t *txns) endOffsets(part int32, producerID int64, commit bool) {
	t.mu.Lock()
	var recs []group.Record
	var unwritten []*txnOffsetBatch
	for _, ob := range t.mu.offsets[part][producerID] {
		if !ob.written.Load() {
			// Not in the log before this marker: its append is refused.
			unwritten = append(unwritten, ob)
			continue
		}
		recs = append(recs, ob.recs...)
	}
	if len(unwritten) > 0 {
		t.mu.offsets[part][producerID] = unwritten
	} else {
		delete(t.mu.offsets[part], producerID)
	}
	t.mu.Unlock()
	if len(recs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := t.b.groups.c.EndTxnOffsets(ctx, part, recs, commit); err != nil {
		t.b.log.Warn("ending transactional offsets", "partition", part, "err", err)
	}
}

// replayOffsets replays a __consumer_offsets partition with transactions
// in mind: a transactional record takes effect at its producer's commit
// marker (and is dropped at an abort), and those still open at the end are
// kept for the marker to come (endOffsets). The last stretch of the log is
// read under t.mu, which endOffsets also takes: a marker appended before
// that read is seen by the replay; one appended after it finds its records
// kept (and the group coordinator, still loading, applies them once
// loaded).
func (t *txns) replayOffsets(ctx context.Context, p *partition, part int32, fn func(key, value []byte) error) error {
	r := &offsetsReplay{pending: make(map[int64][]group.Record)}
	replay := func(data []byte, off int64) (int64, error) { return r.replay(data, off, fn) }
	off, err := replayLog(ctx, p, p.log.LogStartOffset(), replay)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := replayLog(ctx, p, off, replay); err != nil {
		return err
	}
	pending := make(map[int64][]*txnOffsetBatch, len(r.pending))
	for pid, recs := range r.pending {
		ob := &txnOffsetBatch{part: part, producerID: pid, recs: recs}
		ob.written.Store(true)
		pending[pid] = []*txnOffsetBatch{ob}
	}
	t.mu.offsets[part] = pending
	var open []group.Record
	for _, recs := range r.pending {
		open = append(open, recs...)
	}
	if len(open) > 0 {
		// Still open: pending for RequireStable readers until the marker.
		return t.b.groups.c.PendingTxnOffsets(ctx, part, open)
	}
	return nil
}

type offsetsReplay struct {
	pending map[int64][]group.Record
}

func (r *offsetsReplay) replay(data []byte, off int64, fn func(key, value []byte) error) (int64, error) {
	next := off
	for len(data) >= hotlog.BatchHeaderSize {
		h, err := hotlog.ParseBatchHeader(data)
		if err != nil {
			return next, err
		}
		if h.Size() > int64(len(data)) {
			break
		}
		batch := data[:h.Size()]
		data = data[h.Size():]
		switch {
		case h.IsControl() && h.IsTransactional():
			if commit, _, ok := controlType(batch); ok {
				recs := r.pending[h.ProducerID]
				delete(r.pending, h.ProducerID)
				for _, rec := range recs {
					if commit {
						if err := fn(rec.Key, rec.Value); err != nil {
							return next, err
						}
					}
				}
			}
			next = h.LastOffset() + 1
		case h.IsTransactional():
			pid := h.ProducerID
			n, err := replayBatches(batch, h.BaseOffset, func(k, v []byte) error {
				r.pending[pid] = append(r.pending[pid], group.Record{Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)})
				return nil
			})
			if err != nil {
				return next, err
			}
			next = n
		default:
			n, err := replayBatches(batch, h.BaseOffset, fn)
			if err != nil {
				return next, err
			}
			next = n
		}
	}
	return next, nil
}

// Control batches (transaction markers), as Kafka writes them: attributes
// transactional|control, no sequence, one record whose key is
// (version int16 = 0, type int16: 0 abort, 1 commit) and whose value is
// (version int16 = 0, coordinator epoch int32).

const (
	attrTransactional = 0x10
	attrControl       = 0x20
)

func encodeMarkerBatch(producerID int64, epoch int16, commit bool, coordinatorEpoch int32, now int64) []byte {
	typ := kmsg.ControlRecordKeyTypeAbort
	if commit {
		typ = kmsg.ControlRecordKeyTypeCommit
	}
	key := (&kmsg.ControlRecordKey{Version: 0, Type: typ}).AppendTo(nil)
	value := (&kmsg.EndTxnMarker{Version: 0, CoordinatorEpoch: coordinatorEpoch}).AppendTo(nil)
	return encodeBatch([]group.Record{{Key: key, Value: value}}, producerID, epoch, attrTransactional|attrControl, now)
}

// encodeBatch is one uncompressed v2 batch of a producer with no sequence.
func encodeBatch(records []group.Record, producerID int64, epoch int16, attrs int16, now int64) []byte {
	var body []byte
	for i, r := range records {
		rec := kmsg.Record{OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
		enc := rec.AppendTo(nil)
		rec.Length = int32(len(enc) - 1)
		body = rec.AppendTo(body)
	}
	rb := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: attrs,
		LastOffsetDelta: int32(len(records) - 1), FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: producerID, ProducerEpoch: epoch, FirstSequence: -1,
		NumRecords: int32(len(records)), Records: body,
	}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

// controlType reads a control batch's marker type and the coordinator
// epoch in its value; ok is false for a control record that is not a
// transaction marker. A marker whose value cannot be read (none of our
// writers makes one) has coordinator epoch -1, which fences nothing.
func controlType(batch []byte) (commit bool, coordinatorEpoch int32, ok bool) {
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(batch); err != nil || rb.Attributes&0x07 != 0 || rb.NumRecords < 1 {
		return false, -1, false
	}
	l, n := binary.Varint(rb.Records)
	if n <= 0 || l < 0 || int64(n)+l > int64(len(rb.Records)) {
		return false, -1, false
	}
	var rec kmsg.Record
	if err := rec.ReadFrom(rb.Records[:int64(n)+l]); err != nil {
		return false, -1, false
	}
	var k kmsg.ControlRecordKey
	if err := k.ReadFrom(rec.Key); err != nil {
		return false, -1, false
	}
	switch k.Type {
	case kmsg.ControlRecordKeyTypeCommit:
		commit = true
	case kmsg.ControlRecordKeyTypeAbort:
	default:
		return false, -1, false
	}
	coordinatorEpoch = -1
	var v kmsg.EndTxnMarker
	if err := v.ReadFrom(rec.Value); err == nil && v.CoordinatorEpoch >= 0 {
		coordinatorEpoch = v.CoordinatorEpoch
	}
	return commit, coordinatorEpoch, true
}

// appendMarker appends a transaction marker: it ends the producer's open
// transaction here (recording it as aborted, or not) and fences older
// epochs.
// It returns once the ISR has the marker (as Kafka appends markers with
// acks=-1), so that the coordinator completes the transaction only when no
// leader change can lose them.
func (p *partition) appendMarker(producerID int64, epoch int16, commit bool, coordinatorEpoch int32, stopping <-chan struct{}) error {
	batch := encodeMarkerBatch(producerID, epoch, commit, coordinatorEpoch, time.Now().UnixMilli())
	h, err := hotlog.ParseBatchHeader(batch)
	if err != nil {
		return err
	}
	info := batchInfo{producerID: producerID, producerEpoch: epoch, baseSequence: -1, records: 1,
		maxTimestamp: h.MaxTimestamp, transactional: true, control: true, commit: commit,
		coordinatorEpoch: coordinatorEpoch}
	leaderEpoch := p.leaderEpoch()
	res, err := p.appendChecked(batch, info, h, leaderEpoch, false, false, 0, func() {})
	if err != nil {
		return err
	}
	return p.waitInternal(context.Background(), leaderEpoch, res.baseOffset, batch, stopping)
}

// lastStableOffset is the first offset of the oldest open transaction, or
// the high watermark if that is smaller. It never falls below the log start:
// an open transaction whose first records were deleted (DeleteRecords,
// retention) holds it at the log start, as Kafka's
// maybeIncrementFirstUnstableOffset does, so read_committed consumers are
// never sent below the log.
func (p *partition) lastStableOffset() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	start := p.log.LogStartOffset()
	hw := min(p.log.HighWatermark(), p.mu.stateEnd)
	if p.mu.rebuilding {
		hw = min(hw, start)
	}
	if first := p.mu.producers.firstUnstable(); first >= 0 && first < hw {
		return max(first, start)
	}
	return hw
}

// abortedTxns lists the aborted transactions a read_committed fetch of
// [from, to) must know, from the log's transaction index (hotlog).
func (p *partition) abortedTxns(from, to int64) ([]kmsg.FetchResponseTopicPartitionAbortedTransaction, error) {
	list, err := p.log.AbortedTxns(from, to)
	if err != nil {
		return nil, err
	}
	return fetchAborted(list), nil
}

// fetchAborted renders index entries for a Fetch response (never null:
// an empty list tells read_committed clients there is nothing to drop).
func fetchAborted(list []hotlog.AbortedTxn) []kmsg.FetchResponseTopicPartitionAbortedTransaction {
	out := make([]kmsg.FetchResponseTopicPartitionAbortedTransaction, 0, len(list))
	for _, a := range list {
		at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
		out = append(out, at)
	}
	return out
}

// txnCollector exports the coordinator's counters.
type txnCollector struct{ c *txn.Coordinator }

var (
	txnOpenDesc    = prometheus.NewDesc("sediment_transactions_open", "Transactions open (ongoing or preparing) on this coordinator.", nil, nil)
	txnEndedDesc   = prometheus.NewDesc("sediment_transactions_total", "Transactions ended by this coordinator since start, by outcome (timed_out is also counted in aborted).", []string{"outcome"}, nil)
	txnExpiredDesc = prometheus.NewDesc("sediment_transactional_ids_expired_total", "Transactional ids removed by this coordinator since start after transactional.id.expiration.ms idle.", nil, nil)
)

func (tc *txnCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- txnOpenDesc
	ch <- txnEndedDesc
	ch <- txnExpiredDesc
}

func (tc *txnCollector) Collect(ch chan<- prometheus.Metric) {
	s := tc.c.Stats()
	ch <- prometheus.MustNewConstMetric(txnOpenDesc, prometheus.GaugeValue, float64(s.Open))
	for outcome, n := range map[string]int64{"committed": s.Committed, "aborted": s.Aborted, "timed_out": s.TimedOut} {
		ch <- prometheus.MustNewConstMetric(txnEndedDesc, prometheus.CounterValue, float64(n), outcome)
	}
	ch <- prometheus.MustNewConstMetric(txnExpiredDesc, prometheus.CounterValue, float64(s.Expired))
}

var errTxnNotOpen = errors.New("broker: transactional write outside the producer's open transaction")

// errTxnVerifyRetriable: a transactional write whose transaction could not
// be verified at the coordinator now (it moves or loads); the producer
// retries (Kafka's NOT_ENOUGH_REPLICAS for it).
var errTxnVerifyRetriable = errors.New("broker: transactional write not verified yet")

// addToTxn adds partitions to the open transaction of id (starting it) at
// the id's coordinator, for KIP-890 part 2's implicit adds (Produce v12+,
// TxnOffsetCommit v5+): in process when this broker is the coordinator,
// otherwise with AddPartitionsToTxn v4 (the broker-to-broker form) to the
// leader of the id's __transaction_state partition. It returns a Kafka
// error code (COORDINATOR_NOT_AVAILABLE when the coordinator is unknown or
// unreachable: retriable).
func (b *Broker) addToTxn(ctx context.Context, id string, producerID int64, epoch int16, tps []txn.TopicPartition) int16 {
	return b.atTxnCoordinator(ctx, id, producerID, epoch, tps, false)
}

// verifyInTxn asks the id's coordinator, wherever it is, whether the
// partitions are in the producer's open transaction (KIP-890 part 1's
// verification, AddPartitionsToTxn v4 with VerifyOnly when the coordinator
// is another broker): 0, or INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
// INVALID_TXN_STATE, or a coordinator error (NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE).
func (b *Broker) verifyInTxn(ctx context.Context, id string, producerID int64, epoch int16, tps []txn.TopicPartition) int16 {
	return b.atTxnCoordinator(ctx, id, producerID, epoch, tps, true)
}

func (b *Broker) atTxnCoordinator(ctx context.Context, id string, producerID int64, epoch int16, tps []txn.TopicPartition, verifyOnly bool) int16 {
	b.txns.ensure(id)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	part := b.txns.c.PartitionFor(id)
	st := b.meta.State()
	top, ok := st.Topic(txn.StateTopic)
	if !ok || int(part) >= len(top.Partitions) || top.Partitions[part].Leader == metadata.NoLeader {
		return kerr.CoordinatorNotAvailable.Code
	}
	leader := top.Partitions[part].Leader
	worst := func(codes []int16) int16 {
		for _, c := range codes {
			if c != 0 {
				return c
			}
		}
		return 0
	}
	if leader == b.cfg.NodeID {
		var codes []int16
		var err error
		if verifyOnly {
			for _, tp := range tps {
				var code int16
				if code, err = b.txns.c.CheckProducer(ctx, id, producerID, epoch, tp); err != nil {
					break
				}
				codes = append(codes, code)
			}
		} else {
			codes, err = b.txns.c.AddPartitions(ctx, id, producerID, epoch, tps)
		}
		if err != nil {
			return kerr.CoordinatorNotAvailable.Code
		}
		return worst(codes)
	}
	cl, err := b.txns.client()
	if err != nil {
		return kerr.CoordinatorNotAvailable.Code
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 4
	tr := kmsg.NewAddPartitionsToTxnRequestTransaction()
	tr.TransactionalID, tr.ProducerID, tr.ProducerEpoch, tr.VerifyOnly = id, producerID, epoch, verifyOnly
	for _, g := range groupByTopic(tps) {
		rt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		rt.Topic, rt.Partitions = g.topic, g.partitions
		tr.Topics = append(tr.Topics, rt)
	}
	req.Transactions = append(req.Transactions, tr)
	resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
	if err != nil {
		return kerr.CoordinatorNotAvailable.Code
	}
	if resp.ErrorCode != 0 {
		return resp.ErrorCode
	}
	var codes []int16
	for _, rt := range resp.Transactions {
		for _, t := range rt.Topics {
			for _, p := range t.Partitions {
				codes = append(codes, p.ErrorCode)
			}
		}
	}
	if len(codes) == 0 {
		return kerr.CoordinatorNotAvailable.Code
	}
	return worst(codes)
}

// txnWriteCheck is what verifyTxnWrite (or a TxnOffsetCommit) found for
// a transactional batch, for the producer-state check of its append
// (producers.go): verify (a transactional batch with a transactional id)
// makes the append refuse to open a transaction unless guard, the
// verification guard taken before the coordinator was asked, is still the
// producer's (no marker came since). written, if set, runs once the batch
// is in the log, under the log's append lock (so before any later
// marker's append).
type txnWriteCheck struct {
	verify  bool
	guard   *txnVerification
	written func()
}

// verifyTxnWrite is KIP-890 part 1's check of a transactional batch: the
// producer's first batch in a partition must belong to its open
// transaction, which must include the partition, as the id's coordinator
// says (on this broker, or asked with AddPartitionsToTxn v4 VerifyOnly
// wherever it is, as Kafka's AddPartitionsToTxnManager). A write that
// comes after its transaction ended (a delayed retry) is refused instead of
// opening a transaction that no marker will end; a coordinator that cannot
// answer now (moving, loading) makes the write retriable. An EndTxn that
// completes between this check and the append is caught at the append: a
// verification guard, taken before the coordinator is asked and removed by
// the marker, must still be there (Kafka's VerificationGuard).
//
// With implicitAdd (Produce v12+, KIP-890 part 2) the first batch instead
// adds the partition to the transaction at the coordinator (wherever it
// is), as the client sends no AddPartitionsToTxn.
func (b *Broker) verifyTxnWrite(txnID *string, p *partition, records []byte, implicitAdd bool) (txnWriteCheck, error) {
	if txnID == nil || len(records) < hotlog.BatchHeaderSize {
		return txnWriteCheck{}, nil
	}
	h, err := hotlog.ParseBatchHeader(records)
	if err != nil || !h.IsTransactional() || h.IsControl() {
		return txnWriteCheck{}, nil
	}
	verified, err := b.verifyUnderGuard(p, h.ProducerID, h.ProducerEpoch, false, func() error {
		return b.verifyTxnAt(*txnID, p, h, implicitAdd)
	})
	if errors.Is(err, errTxnGuardLost) {
		return txnWriteCheck{}, fmt.Errorf("%w: transaction of %q ended at %s-%d while it was verified", errTxnVerifyRetriable, *txnID, p.topic, p.id)
	}
	if err == nil && verified.guard != nil {
		b.txnVerifiedHook()
	}
	return verified, err
}

// errTxnGuardLost: verifyUnderGuard's guard was removed (a marker of the
// producer came) each time the coordinator was asked.
var errTxnGuardLost = errors.New("broker: transaction ended here while it was verified")

// verifyUnderGuard runs verify, the producer's transaction at epoch checked
// (or p added to it) at the transactional id's coordinator, under a
// verification guard of p's producer state, and returns what the append
// must check (txnWriteCheck). With the transaction open in p already,
// there is no guard (the append needs it still open) and verify is run
// only if always. A marker that comes while the coordinator is asked
// removes the guard: the previous transaction's, when the coordinator held
// the answer until its markers were written (an implicit add right after
// an EndTxn). The coordinator is then asked again under a new guard, and
// after three such rounds errTxnGuardLost.
func (b *Broker) verifyUnderGuard(p *partition, producerID int64, epoch int16, always bool, verify func() error) (txnWriteCheck, error) {
	for range 3 {
		p.mu.Lock()
		open := p.mu.producers.txnOpen(producerID, epoch)
		var guard *txnVerification
		if !open {
			guard = p.mu.producers.verification(producerID, epoch, time.Now().UnixMilli())
		}
		p.mu.Unlock()
		if open && !always {
			// No guard: the append still needs the transaction open then.
			return txnWriteCheck{verify: true}, nil
		}
		err := verify()
		p.mu.Lock()
		current := p.mu.producers.verifying[producerID] == guard
		if err != nil {
			p.mu.producers.dropVerification(producerID, guard)
		}
		p.mu.Unlock()
		if err != nil {
			return txnWriteCheck{}, err
		}
		if open || current {
			return txnWriteCheck{verify: true, guard: guard}, nil
		}
	}
	return txnWriteCheck{}, errTxnGuardLost
}

// verifyTxnAt asks the coordinator of id about the producer's transaction
// (see verifyTxnWrite).
func (b *Broker) verifyTxnAt(txnID string, p *partition, h hotlog.BatchHeader, implicitAdd bool) error {
	if implicitAdd {
		code := b.addToTxn(context.Background(), txnID, h.ProducerID, h.ProducerEpoch, []txn.TopicPartition{{Topic: p.topic, Partition: p.id}})
		switch {
		case code == 0:
			return nil
		case code == kerr.ProducerFenced.Code:
			return fmt.Errorf("%w: producer %d epoch %d of %q", errTxnProducerFenced, h.ProducerID, h.ProducerEpoch, txnID)
		default:
			return kerr.ErrorForCode(code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code := b.verifyInTxn(ctx, txnID, h.ProducerID, h.ProducerEpoch, []txn.TopicPartition{{Topic: p.topic, Partition: p.id}})
	switch code {
	case 0:
		return nil
	case kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code, kerr.ConcurrentTransactions.Code:
		// Not verified now: retriable, as Kafka answers
		// NOT_ENOUGH_REPLICAS for these, and never accepted unverified.
		return fmt.Errorf("%w: transaction of %q not verified at its coordinator: %v", errTxnVerifyRetriable, txnID, kerr.ErrorForCode(code))
	case kerr.ProducerFenced.Code:
		return fmt.Errorf("%w: producer %d epoch %d of %q", errTxnProducerFenced, h.ProducerID, h.ProducerEpoch, txnID)
	default:
		return fmt.Errorf("%w: producer %d epoch %d of %q in %s-%d", errTxnNotOpen, h.ProducerID, h.ProducerEpoch, txnID, p.topic, p.id)
	}
}

func (b *Broker) txnVerifiedHook() {
	if b.testHooks.txnWriteVerified != nil {
		b.testHooks.txnWriteVerified()
	}
}

// topicPartitions is one topic's partitions of a request.
type topicPartitions struct {
	topic      string
	partitions []int32
}

// groupByTopic groups partitions by topic, topics in first-seen order, as
// the requests that name a topic once with its partitions want them.
func groupByTopic(tps []txn.TopicPartition) []topicPartitions {
	var out []topicPartitions
	index := map[string]int{}
	for _, tp := range tps {
		i, ok := index[tp.Topic]
		if !ok {
			i = len(out)
			index[tp.Topic] = i
			out = append(out, topicPartitions{topic: tp.Topic})
		}
		out[i].partitions = append(out[i].partitions, tp.Partition)
	}
	return out
}
