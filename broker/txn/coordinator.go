package txn

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/internal/reqtime"
)

// Defaults, Kafka's names in comments.
const (
	StateTopic            = "__transaction_state"
	DefaultPartitions     = 50                 // transaction.state.log.num.partitions
	DefaultMaxTimeout     = 15 * time.Minute   // transaction.max.timeout.ms
	DefaultAbortInterval  = 10 * time.Second   // transaction.abort.timed.out.transaction.cleanup.interval.ms
	DefaultIDExpiration   = 7 * 24 * time.Hour // transactional.id.expiration.ms
	DefaultExpireInterval = time.Hour          // transaction.remove.expired.transaction.cleanup.interval.ms
)

// expireBatch bounds the tombstones of one append when ids expire.
const expireBatch = 500

var (
	// ErrClosed is returned by every method once Close has begun.
	ErrClosed = errors.New("txn: coordinator closed")
	// ErrNotLeader, wrapped, from a Log means leadership of the partition
	// was lost.
	ErrNotLeader = errors.New("txn: not the leader of the transaction state partition")
)

// Record is one key/value of __transaction_state (nil Value: tombstone).
type Record struct {
	Key, Value []byte
}

// Log is one partition of __transaction_state as the coordinator sees it.
type Log interface {
	// Append writes the records as one batch and returns once they are
	// committed. It may be called from several goroutines, but never twice
	// at once for one transactional id.
	Append(ctx context.Context, records []Record) error
	// Replay calls fn for every record from the log start to the log end
	// as of the call, in offset order. fn's slices are valid only during
	// the call.
	Replay(ctx context.Context, fn func(key, value []byte) error) error
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Marker is one transaction's end, to be written to its partitions.
type Marker struct {
	ProducerID       int64
	ProducerEpoch    int16
	Commit           bool
	CoordinatorEpoch int32
	Partitions       []TopicPartition
}

// Broker is what the coordinator needs of the broker. Methods are called
// from goroutines the coordinator owns, never from its loop, and may block
// until ctx ends.
type Broker interface {
	// ProducerID allocates a fresh producer id.
	ProducerID(ctx context.Context) (int64, error)
	// WriteMarkers writes the marker to every partition (on whichever
	// broker leads it) and returns nil once all are written. Partitions
	// that no longer exist count as written. An error is retried.
	WriteMarkers(ctx context.Context, m Marker) error
	// Partitions returns a topic's partition count (ok false: unknown).
	// It must not block.
	Partitions(topic string) (n int32, ok bool)
}

// Clock is the coordinator's source of time (tests inject a fake one).
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once d has passed; stop prevents a call that has
	// not started.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Config configures a Coordinator.
type Config struct {
	// Partitions of __transaction_state (transaction.state.log.num.partitions).
	Partitions int32
	// PartitionCount, if set, returns the partition count of the existing
	// __transaction_state topic (0 while there is none). It wins over
	// Partitions, as Kafka maps ids by the topic's own count once it
	// exists: a broker started with another
	// transaction.state.log.num.partitions must not look for an id's
	// state in another partition. It must not block.
	PartitionCount func() int32
	// MaxTimeout bounds the transaction.timeout.ms a producer may ask for.
	MaxTimeout time.Duration
	// AbortInterval is how often open transactions are checked for timeout.
	AbortInterval time.Duration
	// IDExpiration removes a transactional id whose last transaction has
	// ended (or that never began one: Empty, CompleteCommit,
	// CompleteAbort) and whose state has not changed for this long
	// (transactional.id.expiration.ms). An open transaction never expires.
	IDExpiration time.Duration
	// ExpireInterval is how often ids are checked for expiry
	// (transaction.remove.expired.transaction.cleanup.interval.ms).
	ExpireInterval time.Duration
	// MarkerRetry is the pause between failed marker rounds (default 100ms).
	MarkerRetry time.Duration
	// ClassicOnly makes the broker advertise the transaction.version
	// feature at level 0 instead of 2 (KIP-890 part 2), so that clients
	// use the classic flow (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
	// without epoch bumps). The coordinator itself serves both.
	ClassicOnly bool
	Broker      Broker
	Clock       Clock
	Logger      *slog.Logger
}

// Stats counts transactions since start (for metrics).
type Stats struct {
	Open                         int
	Committed, Aborted, TimedOut int64
	// Expired counts transactional ids removed by IDExpiration.
	Expired                       int64
	LoadedPartitions, Transaction int
}

// Coordinator is the transaction coordinator for the __transaction_state
// partitions this broker leads.
type Coordinator struct {
	cfg    Config
	clock  Clock
	logger *slog.Logger

	events  chan func()
	stop    chan struct{}
	stopped chan struct{}
	wg      sync.WaitGroup
	once    sync.Once

	// Owned by run.
	partitions map[int32]*partition
	tickStop   func() bool
	expireStop func() bool
	expired    int64
	committed  int64
	aborted    int64
	timedOut   int64
}

type partition struct {
	id    int32
	epoch int32 // leader epoch: the coordinator epoch of markers
	log   Log
	ready bool // replay finished
	gone  bool
	txns  map[string]*txnMeta
	// waiters holds, per id, requests that found it pending and run
	// again when it is not (see park).
	waiters map[string][]*waiter
	ctx     context.Context
	cancel  context.CancelFunc
}

// txnMeta is the state of one transactional id.
type txnMeta struct {
	id         string
	producerID int64
	epoch      int16
	lastEpoch  int16 // the epoch before the last bump (-1): an InitProducerId retry
	// prevProducerID is the id this one replaced when the producer's own
	// KIP-360 InitProducerId found its epoch exhausted; lastEpoch is then
	// the epoch it had at that id, and a retry of that request (its answer
	// lost) gets the new id, as Kafka's (TransactionMetadata's
	// prevProducerId and lastProducerEpoch). -1: none. Not logged, as
	// lastEpoch: after a takeover such a retry is refused.
	prevProducerID int64
	timeoutMs      int32
	state          kmsg.TransactionState
	parts          []TopicPartition
	startMs        int64 // -1 when no transaction is open
	updateMs       int64

	// endBumped: the last epoch bump was an EndTxn's (transaction.version
	// 2), so an EndTxn of the same kind at lastEpoch is a retry whose
	// answer was lost. Not logged: after a takeover such a retry is fenced.
	endBumped bool
	// nextProducerID is the producer id the transaction being ended under
	// transaction.version 2 hands over to when its epoch is exhausted
	// (-1 or 0: none); it takes effect when the end is logged complete.
	nextProducerID int64

	// pending: an append or a marker round is in flight.
	pending bool
	// timedOut marks an abort begun by the timeout check (for stats).
	timedOut bool
}

func (t *txnMeta) has(tp TopicPartition) bool {
	for _, x := range t.parts {
		if x == tp {
			return true
		}
	}
	return false
}

// New starts a coordinator that owns no partition until Load.
func New(cfg Config) *Coordinator {
	if cfg.Partitions <= 0 {
		cfg.Partitions = DefaultPartitions
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = DefaultMaxTimeout
	}
	if cfg.AbortInterval <= 0 {
		cfg.AbortInterval = DefaultAbortInterval
	}
	if cfg.IDExpiration <= 0 {
		cfg.IDExpiration = DefaultIDExpiration
	}
	if cfg.ExpireInterval <= 0 {
		cfg.ExpireInterval = DefaultExpireInterval
	}
	if cfg.MarkerRetry <= 0 {
		cfg.MarkerRetry = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Coordinator{
		cfg: cfg, clock: cfg.Clock, logger: cfg.Logger,
		events: make(chan func()), stop: make(chan struct{}), stopped: make(chan struct{}),
		partitions: make(map[int32]*partition),
	}
	if c.clock == nil {
		c.clock = realClock{}
	}
	c.wg.Add(1)
	go pprof.Do(context.Background(), pprof.Labels("sediment", "txn-coordinator"), func(context.Context) {
		defer c.wg.Done()
		c.run()
	})
	return c
}

// Close stops the loop and waits for every goroutine the coordinator
// started (appends and marker rounds in flight are cancelled; a new
// coordinator finishes them from the log).
func (c *Coordinator) Close() error {
	c.once.Do(func() { close(c.stop) })
	c.wg.Wait()
	return nil
}

// Partitions is the partition count of __transaction_state.
func (c *Coordinator) Partitions() int32 { return c.cfg.Partitions }

// PartitionFor returns the __transaction_state partition of an id: Kafka's
// abs(javaStringHashCode(id)) % partitions, the existing topic's count
// once there is one (Config.PartitionCount).
func (c *Coordinator) PartitionFor(id string) int32 {
	n := c.cfg.Partitions
	if c.cfg.PartitionCount != nil {
		if m := c.cfg.PartitionCount(); m > 0 {
			n = m
		}
	}
	return PartitionFor(id, n)
}

// PartitionFor is Kafka's Utils.abs(id.hashCode()) % partitions.
func PartitionFor(id string, partitions int32) int32 {
	var h int32
	for _, r := range id {
		if r >= 0x10000 { // a surrogate pair in Java's UTF-16
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10))
			h = 31*h + int32(0xDC00+(r&0x3FF))
			continue
		}
		h = 31*h + int32(r)
	}
	if h == -1<<31 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % partitions
}

func (c *Coordinator) run() {
	defer close(c.stopped)
	c.tickStop = c.after(c.cfg.AbortInterval, c.tick)
	c.expireStop = c.after(c.cfg.ExpireInterval, c.expireTick)
	for {
		select {
		case fn := <-c.events:
			fn()
		case <-c.stop:
			if c.tickStop != nil {
				c.tickStop()
			}
			if c.expireStop != nil {
				c.expireStop()
			}
			for _, p := range c.partitions {
				c.drop(p)
			}
			return
		}
	}
}

// inLoop runs fn on the loop and waits for it; false if the loop stopped.
func (c *Coordinator) inLoop(fn func()) bool {
	done := make(chan struct{})
	select {
	case c.events <- func() { fn(); close(done) }:
	case <-c.stop:
		return false
	}
	select {
	case <-done:
		return true
	case <-c.stopped:
		return false
	}
}

func (c *Coordinator) after(d time.Duration, fn func()) func() bool {
	return c.clock.AfterFunc(d, func() { c.inLoop(fn) })
}

// submit runs fn on the loop; fn or what it schedules calls reply once.
func submit[T any](ctx context.Context, c *Coordinator, fn func(reply func(T))) (T, error) {
	var zero T
	ch := make(chan T, 1)
	select {
	case c.events <- func() { fn(func(r T) { ch <- r }) }:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-c.stop:
		return zero, ErrClosed
	}
	// The loop does the work; this request waits for it (not charged
	// to a request quota).
	defer reqtime.Wait(ctx)()
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-c.stopped:
		select {
		case r := <-ch:
			return r, nil
		default:
			return zero, ErrClosed
		}
	}
}

// goAsync runs work in an owned goroutine with the partition's context and
// then, on the loop, then(err). If the partition was unloaded meanwhile,
// then gets ErrNotLeader.
func (c *Coordinator) goAsync(p *partition, name string, work func(ctx context.Context) error, then func(error)) {
	c.wg.Add(1)
	go pprof.Do(p.ctx, pprof.Labels("sediment", name, "partition", strconv.Itoa(int(p.id))), func(ctx context.Context) {
		defer c.wg.Done()
		err := work(ctx)
		if !c.inLoop(func() {
			if p.gone {
				err = ErrNotLeader
			}
			then(err)
		}) {
			// Stopped: the loop is gone; nobody waits on then.
			return
		}
	})
}

// Load makes the coordinator the owner of a __transaction_state partition
// at a leader epoch: it replays the log in the background (requests for
// its ids answer COORDINATOR_LOAD_IN_PROGRESS meanwhile), then finishes
// every transaction that was preparing. The channel gets the replay's
// result.
func (c *Coordinator) Load(partitionID, leaderEpoch int32, log Log) <-chan error {
	res := make(chan error, 1)
	ok := c.inLoop(func() {
		if old := c.partitions[partitionID]; old != nil {
			c.drop(old)
		}
		ctx, cancel := context.WithCancel(context.Background())
		p := &partition{id: partitionID, epoch: leaderEpoch, log: log, txns: make(map[string]*txnMeta), waiters: make(map[string][]*waiter), ctx: ctx, cancel: cancel}
		c.partitions[partitionID] = p
		loaded := make(map[string]*txnMeta)
		c.goAsync(p, "txn-load", func(ctx context.Context) error {
			return log.Replay(ctx, func(key, value []byte) error { return replayRecord(loaded, key, value) })
		}, func(err error) {
			if err != nil {
				// Leadership moving on during the replay (brokers
				// stopping together) is routine, not a failure.
				level := slog.LevelError
				if errors.Is(err, ErrNotLeader) || errors.Is(err, context.Canceled) {
					level = slog.LevelInfo
				}
				c.logger.Log(context.Background(), level, "txn: partition load failed", "partition", partitionID, "err", err)
				c.drop(p)
				res <- err
				return
			}
			c.finishLoad(p, loaded)
			res <- nil
		})
	})
	if !ok {
		res <- ErrClosed
	}
	return res
}

func (c *Coordinator) finishLoad(p *partition, loaded map[string]*txnMeta) {
	p.txns = loaded
	p.ready = true
	n := 0
	for _, t := range p.txns {
		switch t.state {
		case kmsg.TransactionStatePrepareCommit, kmsg.TransactionStatePrepareAbort:
			// The old coordinator logged the decision; finish it.
			c.sendMarkers(p, t)
			n++
		}
	}
	c.logger.Info("txn: partition loaded", "partition", p.id, "transactional_ids", len(p.txns), "resumed", n)
}

// Unload gives a partition up (leadership moved).
func (c *Coordinator) Unload(partitionID int32) {
	c.inLoop(func() {
		if p := c.partitions[partitionID]; p != nil {
			c.drop(p)
		}
	})
}

// Loaded reports whether a partition is loaded and ready, and at which
// leader epoch.
func (c *Coordinator) Loaded(partitionID int32) (epoch int32, ready, ok bool) {
	c.inLoop(func() {
		if p := c.partitions[partitionID]; p != nil {
			epoch, ready, ok = p.epoch, p.ready, true
		}
	})
	return epoch, ready, ok
}

func (c *Coordinator) drop(p *partition) {
	if p.gone {
		return
	}
	p.gone = true
	p.cancel()
	if c.partitions[p.id] == p {
		delete(c.partitions, p.id)
	}
	// Parked requests run again and find the partition gone.
	for id := range p.waiters {
		c.wake(p, id, true)
	}
}

// parkTimeout bounds how long a request waits for a pending id before it
// is answered CONCURRENT_TRANSACTIONS (and the client retries).
const parkTimeout = 5 * time.Second

type waiter struct {
	run  func()
	busy func()
	stop func() bool
	done bool
}

// park makes a request that found id pending run again (body, from the
// start) once it is not, instead of answering CONCURRENT_TRANSACTIONS at
// once: a client's next AddPartitions right after EndTxn waits for the
// markers rather than backing off. After parkTimeout busy answers it.
func (c *Coordinator) park(p *partition, id string, body, busy func()) {
	w := &waiter{run: body, busy: busy}
	w.stop = c.after(parkTimeout, func() {
		if w.done {
			return
		}
		w.done = true
		list := p.waiters[id]
		for i, x := range list {
			if x == w {
				p.waiters[id] = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(p.waiters[id]) == 0 {
			delete(p.waiters, id)
		}
		busy()
	})
	p.waiters[id] = append(p.waiters[id], w)
}

// wake runs the parked requests of id while it is not pending (all of
// them if force).
func (c *Coordinator) wake(p *partition, id string, force bool) {
	for len(p.waiters[id]) > 0 {
		if t := p.txns[id]; !force && t != nil && t.pending {
			return
		}
		w := p.waiters[id][0]
		p.waiters[id] = p.waiters[id][1:]
		if len(p.waiters[id]) == 0 {
			delete(p.waiters, id)
		}
		if w.done {
			continue
		}
		w.done = true
		w.stop()
		w.run()
	}
}

// Stats returns counters for metrics.
func (c *Coordinator) Stats() Stats {
	var s Stats
	c.inLoop(func() {
		s.Committed, s.Aborted, s.TimedOut, s.Expired = c.committed, c.aborted, c.timedOut, c.expired
		s.LoadedPartitions = len(c.partitions)
		for _, p := range c.partitions {
			s.Transaction += len(p.txns)
			for _, t := range p.txns {
				if t.state == kmsg.TransactionStateOngoing || t.state == kmsg.TransactionStatePrepareCommit || t.state == kmsg.TransactionStatePrepareAbort {
					s.Open++
				}
			}
		}
	})
	return s
}

func (c *Coordinator) nowMs() int64 { return c.clock.Now().UnixMilli() }

// write logs next as the state of t. While the append runs t is pending;
// on success t takes next's fields. done runs on the loop.
func (c *Coordinator) write(p *partition, t *txnMeta, next txnMeta, done func(error)) {
	t.pending = true
	rec := Record{Key: encodeKey(t.id), Value: encodeValue(&next)}
	c.goAsync(p, "txn-append", func(ctx context.Context) error {
		return p.log.Append(ctx, []Record{rec})
	}, func(err error) {
		t.pending = false
		if err == nil {
			next.pending = false
			next.timedOut = t.timedOut
			*t = next
		}
		done(err)
		c.wake(p, t.id, false)
	})
}

// markerRetriesQuiet is how many failed attempts to write a transaction's
// markers are logged at INFO before the next ones are WARNs.
const markerRetriesQuiet = 5

// sendMarkers writes the markers of a prepared transaction and then logs
// its completion. t stays pending throughout.
func (c *Coordinator) sendMarkers(p *partition, t *txnMeta) {
	commit := t.state == kmsg.TransactionStatePrepareCommit
	m := Marker{ProducerID: t.producerID, ProducerEpoch: t.epoch, Commit: commit, CoordinatorEpoch: p.epoch, Partitions: append([]TopicPartition(nil), t.parts...)}
	t.pending = true
	c.goAsync(p, "txn-markers", func(ctx context.Context) error {
		for attempt := 1; ; attempt++ {
			err := c.cfg.Broker.WriteMarkers(ctx, m)
			if err == nil {
				return nil
			}
			// The first retries are routine (a partition's leader
			// moved: NOT_LEADER_OR_FOLLOWER until the metadata
			// catches up); a failure that persists is a WARN.
			level := slog.LevelInfo
			if attempt > markerRetriesQuiet {
				level = slog.LevelWarn
			}
			c.logger.Log(context.Background(), level, "txn: writing markers failed; retrying", "transactional_id", t.id, "attempt", attempt, "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(c.cfg.MarkerRetry):
			}
		}
	}, func(err error) {
		t.pending = false
		if err != nil {
			c.wake(p, t.id, false)
			return // unloaded or closing: the next owner finishes it
		}
		next := *t
		next.state = kmsg.TransactionStateCompleteAbort
		if commit {
			next.state = kmsg.TransactionStateCompleteCommit
		}
		next.parts = nil
		next.startMs = -1
		next.updateMs = c.nowMs()
		if t.nextProducerID > 0 {
			// The epoch was exhausted: the producer goes on with the
			// id it was handed at EndTxn (transaction.version 2).
			next.producerID, next.epoch, next.lastEpoch, next.nextProducerID = t.nextProducerID, 0, -1, 0
			next.prevProducerID = -1
		}
		c.write(p, t, next, func(err error) {
			if err != nil {
				if !p.gone {
					// Try the whole round again: markers are idempotent.
					c.sendMarkers(p, t)
				}
				return
			}
			if commit {
				c.committed++
			} else {
				c.aborted++
				if t.timedOut {
					c.timedOut++
					t.timedOut = false
				}
			}
		})
	})
}

// tick aborts transactions open longer than their timeout, fencing their
// producers (the abort carries a bumped epoch).
func (c *Coordinator) tick() {
	c.checkTimeouts()
	c.tickStop = c.after(c.cfg.AbortInterval, c.tick)
}

func (c *Coordinator) checkTimeouts() {
	now := c.nowMs()
	for _, p := range c.partitions {
		if !p.ready {
			continue
		}
		for _, t := range p.txns {
			if t.pending || t.state != kmsg.TransactionStateOngoing || t.startMs < 0 {
				continue
			}
			if now-t.startMs <= int64(t.timeoutMs) {
				continue
			}
			c.logger.Info("txn: aborting timed-out transaction", "transactional_id", t.id, "producer_id", t.producerID, "epoch", t.epoch)
			t.timedOut = true
			c.fenceAbort(p, t, func(error) {})
		}
	}
}

// fenceAbort bumps the epoch of an open transaction and aborts it with the
// new epoch, so the producer holding the old one is fenced everywhere.
func (c *Coordinator) fenceAbort(p *partition, t *txnMeta, done func(error)) {
	next := *t
	next.lastEpoch = -1 // the fenced epoch is no retry (Kafka's prepareFenceProducerEpoch)
	next.prevProducerID = -1
	next.epoch = bumpEpoch(t.epoch)
	next.endBumped = false
	next.state = kmsg.TransactionStatePrepareAbort
	next.updateMs = c.nowMs()
	c.write(p, t, next, func(err error) {
		if err == nil {
			c.sendMarkers(p, t)
		} else {
			t.timedOut = false
		}
		done(err)
	})
}

// bumpEpoch is the epoch after e; at the largest epoch it stays (the
// markers then carry it, and the producer's next InitProducerId gets a new
// producer id), never wrapping to a negative epoch that every partition
// would refuse as older.
func bumpEpoch(e int16) int16 {
	if e == math.MaxInt16 {
		return e
	}
	return e + 1
}

// AbortTimedOut runs the timeout check now (admin tools and tests).
func (c *Coordinator) AbortTimedOut() { c.inLoop(c.checkTimeouts) }

func isNotLeader(err error) bool { return errors.Is(err, ErrNotLeader) }

// expireTick removes idle transactional ids (transactional.id.expiration.ms).
func (c *Coordinator) expireTick() {
	c.expireIdle()
	c.expireStop = c.after(c.cfg.ExpireInterval, c.expireTick)
}

// expirable: t's last transaction has ended (or none began) and its state
// has not changed since cutoffMs. Kafka's shouldExpire.
func expirable(t *txnMeta, cutoffMs int64) bool {
	if t.pending || t.producerID < 0 || t.updateMs > cutoffMs {
		return false
	}
	switch t.state {
	case kmsg.TransactionStateEmpty, kmsg.TransactionStateCompleteCommit, kmsg.TransactionStateCompleteAbort:
		return true
	}
	return false
}

// expireIdle logs a tombstone for every expirable id of the loaded
// partitions (at most expireBatch per append) and forgets each id once
// its tombstone is in the log, so the id stays gone after a replay (a
// restart or a new coordinator) and compaction drops its records. While
// the tombstone is written the id is pending: its requests wait, then find
// it gone (InitProducerId starts it afresh with a new producer id).
func (c *Coordinator) expireIdle() {
	cutoff := c.nowMs() - c.cfg.IDExpiration.Milliseconds()
	for _, p := range c.partitions {
		if !p.ready {
			continue
		}
		var batch []*txnMeta
		for _, t := range p.txns {
			if !expirable(t, cutoff) {
				continue
			}
			batch = append(batch, t)
			if len(batch) == expireBatch {
				c.tombstone(p, batch)
				batch = nil
			}
		}
		if len(batch) > 0 {
			c.tombstone(p, batch)
		}
	}
}

func (c *Coordinator) tombstone(p *partition, ts []*txnMeta) {
	recs := make([]Record, len(ts))
	for i, t := range ts {
		t.pending = true
		recs[i] = Record{Key: encodeKey(t.id)}
	}
	c.goAsync(p, "txn-expire", func(ctx context.Context) error {
		return p.log.Append(ctx, recs)
	}, func(err error) {
		if err != nil && !isNotLeader(err) {
			c.logger.Warn("txn: logging expired transactional ids failed; next check retries", "partition", p.id, "ids", len(ts), "err", err)
		}
		for _, t := range ts {
			t.pending = false
			if err == nil && p.txns[t.id] == t {
				delete(p.txns, t.id)
				c.expired++
			}
			c.wake(p, t.id, false)
		}
		if err == nil {
			c.logger.Info("txn: expired idle transactional ids", "partition", p.id, "ids", len(ts))
		}
	})
}
