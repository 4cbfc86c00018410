package txn

import (
	"context"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The requests. Each public method checks what it can outside the loop,
// then runs on the loop. Every Kafka-level failure is an error code in the
// answer; the error return is ctx.Err() or ErrClosed.

// lookup finds the partition and the state of an id, or the code that
// answers instead. It must run on the loop.
func (c *Coordinator) lookup(id string) (*partition, *txnMeta, int16) {
	p := c.partitions[c.PartitionFor(id)]
	if p == nil {
		return nil, nil, kerr.NotCoordinator.Code
	}
	if !p.ready {
		return nil, nil, kerr.CoordinatorLoadInProgress.Code
	}
	return p, p.txns[id], 0
}

// checkProducer is the check of AddPartitions, AddOffsets and EndTxn.
func checkProducer(t *txnMeta, producerID int64, epoch int16) int16 {
	switch {
	case t == nil || t.producerID != producerID:
		return kerr.InvalidProducerIDMapping.Code
	case epoch != t.epoch:
		return kerr.ProducerFenced.Code
	case t.pending:
		return kerr.ConcurrentTransactions.Code
	}
	return 0
}

// InitResult answers InitProducerId.
type InitResult struct {
	ErrorCode  int16
	ProducerID int64
	Epoch      int16
}

// InitProducerID serves InitProducerId for a transactional id. producerID
// and epoch are -1 unless the client asks for a bump of the ones it has
// (KIP-360, v3+).
func (c *Coordinator) InitProducerID(ctx context.Context, id string, timeoutMs int32, producerID int64, epoch int16) (InitResult, error) {
	if id == "" {
		return InitResult{ErrorCode: kerr.InvalidRequest.Code, ProducerID: -1, Epoch: -1}, nil
	}
	if timeoutMs <= 0 || time.Duration(timeoutMs)*time.Millisecond > c.cfg.MaxTimeout {
		return InitResult{ErrorCode: kerr.InvalidTransactionTimeout.Code, ProducerID: -1, Epoch: -1}, nil
	}
	return submit(ctx, c, func(reply func(InitResult)) {
		fail := func(code int16) { reply(InitResult{ErrorCode: code, ProducerID: -1, Epoch: -1}) }
		var body func()
		body = func() { c.initProducerID(id, timeoutMs, producerID, epoch, reply, fail, body) }
		body()
	})
}

func (c *Coordinator) initProducerID(id string, timeoutMs int32, producerID int64, epoch int16, reply func(InitResult), fail func(int16), body func()) {
	p, t, code := c.lookup(id)
	if code != 0 {
		fail(code)
		return
	}
	if t == nil {
		t = &txnMeta{id: id, producerID: -1, epoch: -1, lastEpoch: -1, prevProducerID: -1, state: kmsg.TransactionStateEmpty, startMs: -1}
		p.txns[id] = t
		c.newProducerID(p, t, timeoutMs, false, reply)
		return
	}
	if t.pending {
		c.park(p, id, body, func() { fail(kerr.ConcurrentTransactions.Code) })
		return
	}
	if producerID >= 0 {
		rotated := t.prevProducerID >= 0
		switch {
		case rotated && producerID == t.prevProducerID:
			// The id this one replaced (Kafka's isValidProducerId: a
			// previous id is valid with an exhausted epoch).
			switch {
			case epoch == t.lastEpoch && t.state != kmsg.TransactionStateOngoing:
				// A retry of the rotation whose answer was lost.
				reply(InitResult{ProducerID: t.producerID, Epoch: t.epoch})
			case epoch >= math.MaxInt16-1:
				fail(kerr.ProducerFenced.Code)
			default:
				fail(kerr.InvalidProducerIDMapping.Code)
			}
			return
		case producerID != t.producerID:
			fail(kerr.InvalidProducerIDMapping.Code)
			return
		case !rotated && epoch == t.lastEpoch && t.state != kmsg.TransactionStateOngoing:
			// A retry whose answer was lost: the bump happened.
			reply(InitResult{ProducerID: t.producerID, Epoch: t.epoch})
			return
		case epoch != t.epoch:
			fail(kerr.ProducerFenced.Code)
			return
		}
	}
	switch t.state {
	case kmsg.TransactionStatePrepareCommit, kmsg.TransactionStatePrepareAbort:
		fail(kerr.ConcurrentTransactions.Code)
	case kmsg.TransactionStateOngoing:
		// Fence the previous instance and abort what it left open;
		// the client retries and gets the epoch after this one.
		c.fenceAbort(p, t, func(err error) {
			if err != nil {
				fail(appendErrCode(err))
				return
			}
			fail(kerr.ConcurrentTransactions.Code)
		})
	default:
		if t.epoch >= math.MaxInt16-1 {
			// The producer's own request (its id and epoch) may be
			// retried at the id and epoch it had.
			c.newProducerID(p, t, timeoutMs, producerID >= 0, reply)
			return
		}
		next := *t
		// Only the producer's own bump (KIP-360: its id and epoch) may be
		// retried at the epoch before it. A new instance's bump fences
		// every earlier epoch (Kafka's prepareIncrementProducerEpoch with
		// no expected epoch sets the last epoch to -1): otherwise the
		// fenced instance's KIP-360 InitProducerId would be answered with
		// the new instance's epoch.
		next.lastEpoch, next.prevProducerID = -1, -1
		if producerID >= 0 {
			next.lastEpoch = t.epoch
		}
		next.epoch = t.epoch + 1
		next.endBumped, next.nextProducerID = false, 0
		next.timeoutMs = timeoutMs
		next.state = kmsg.TransactionStateEmpty
		next.parts = nil
		next.startMs = -1
		next.updateMs = c.nowMs()
		c.write(p, t, next, func(err error) {
			if err != nil {
				fail(appendErrCode(err))
				return
			}
			reply(InitResult{ProducerID: t.producerID, Epoch: t.epoch})
		})
	}
}

// newProducerID gives t a fresh producer id at epoch 0 (a new id, or an
// epoch about to overflow). retryable: the producer asked for it with its
// id and epoch (KIP-360), so a retry of that request gets the new id.
func (c *Coordinator) newProducerID(p *partition, t *txnMeta, timeoutMs int32, retryable bool, reply func(InitResult)) {
	t.pending = true
	var pid int64
	c.goAsync(p, "txn-producer-id", func(ctx context.Context) error {
		var err error
		pid, err = c.cfg.Broker.ProducerID(ctx)
		return err
	}, func(err error) {
		t.pending = false
		if err != nil {
			if t.producerID < 0 && p.txns[t.id] == t {
				delete(p.txns, t.id)
			}
			reply(InitResult{ErrorCode: appendErrCode(err), ProducerID: -1, Epoch: -1})
			c.wake(p, t.id, false)
			return
		}
		next := *t
		next.producerID, next.epoch, next.lastEpoch, next.prevProducerID = pid, 0, -1, -1
		if retryable && t.producerID >= 0 {
			next.lastEpoch, next.prevProducerID = t.epoch, t.producerID
		}
		next.endBumped, next.nextProducerID = false, 0
		next.timeoutMs = timeoutMs
		next.state = kmsg.TransactionStateEmpty
		next.parts = nil
		next.startMs = -1
		next.updateMs = c.nowMs()
		c.write(p, t, next, func(err error) {
			if err != nil {
				if t.producerID < 0 && p.txns[t.id] == t {
					delete(p.txns, t.id)
				}
				reply(InitResult{ErrorCode: appendErrCode(err), ProducerID: -1, Epoch: -1})
				return
			}
			reply(InitResult{ProducerID: t.producerID, Epoch: t.epoch})
		})
	})
}

// AddPartitions adds partitions to the open transaction of id (starting
// one if none is open). It returns one code per partition, in order.
func (c *Coordinator) AddPartitions(ctx context.Context, id string, producerID int64, epoch int16, parts []TopicPartition) ([]int16, error) {
	codes := make([]int16, len(parts))
	bad := false
	for i, tp := range parts {
		if n, ok := c.cfg.Broker.Partitions(tp.Topic); !ok || tp.Partition < 0 || tp.Partition >= n {
			codes[i] = kerr.UnknownTopicOrPartition.Code
			bad = true
		}
	}
	if bad {
		for i := range codes {
			if codes[i] == 0 {
				codes[i] = kerr.OperationNotAttempted.Code
			}
		}
		return codes, nil
	}
	code, err := submit(ctx, c, func(reply func(int16)) {
		var body func()
		body = func() { c.addPartitions(id, producerID, epoch, parts, reply, body) }
		body()
	})
	for i := range codes {
		codes[i] = code
	}
	return codes, err
}

func (c *Coordinator) addPartitions(id string, producerID int64, epoch int16, parts []TopicPartition, reply func(int16), body func()) {
	p, t, code := c.lookup(id)
	if code == 0 {
		code = checkProducer(t, producerID, epoch)
	}
	if code == kerr.ConcurrentTransactions.Code {
		c.park(p, id, body, func() { reply(code) })
		return
	}
	if code != 0 {
		reply(code)
		return
	}
	switch t.state {
	case kmsg.TransactionStatePrepareCommit, kmsg.TransactionStatePrepareAbort:
		reply(kerr.ConcurrentTransactions.Code)
		return
	case kmsg.TransactionStateDead:
		reply(kerr.InvalidTxnState.Code)
		return
	}
	next := *t
	next.parts = append([]TopicPartition(nil), t.parts...)
	added := false
	for _, tp := range parts {
		if !next.has(tp) {
			next.parts = append(next.parts, tp)
			added = true
		}
	}
	if t.state == kmsg.TransactionStateOngoing && !added {
		reply(0)
		return
	}
	now := c.nowMs()
	if t.state != kmsg.TransactionStateOngoing {
		next.startMs = now
	}
	next.state = kmsg.TransactionStateOngoing
	next.updateMs = now
	c.write(p, t, next, func(err error) { reply(appendErrCode(err)) })
}

// EndResult answers EndTxn.
type EndResult struct {
	ErrorCode int16
	// ProducerID and Epoch are what the producer goes on with after an
	// EndTxn with bump (v5): the epoch after the one it ended with, or a
	// new producer id at epoch 0 once the epoch is exhausted. -1 otherwise.
	ProducerID int64
	Epoch      int16
}

// EndTxn commits or aborts the open transaction of id. It answers once the
// decision (PrepareCommit/PrepareAbort) is in the log; the markers follow.
//
// With bump (EndTxn v5, transaction.version 2, KIP-890 part 2) the epoch is
// bumped by every end: the prepare record and the markers carry epoch+1,
// which the producer gets in the answer and uses for its next transaction,
// so a delayed EndTxn or write of this transaction can never land in the
// next one (PRODUCER_FENCED). An abort with no transaction open is then
// legal and bumps the epoch too; an EndTxn at the previous epoch right after
// an EndTxn bump is a retry and gets the same answer.
func (c *Coordinator) EndTxn(ctx context.Context, id string, producerID int64, epoch int16, commit, bump bool) (EndResult, error) {
	return submit(ctx, c, func(reply func(EndResult)) {
		var body func()
		body = func() { c.endTxn(id, producerID, epoch, commit, bump, reply, body) }
		body()
	})
}

func (c *Coordinator) endTxn(id string, producerID int64, epoch int16, commit, bump bool, reply func(EndResult), body func()) {
	fail := func(code int16) { reply(EndResult{ErrorCode: code, ProducerID: -1, Epoch: -1}) }
	p, t, code := c.lookup(id)
	if code == 0 {
		code = checkProducer(t, producerID, epoch)
	}
	if code == kerr.ConcurrentTransactions.Code {
		c.park(p, id, body, func() { fail(code) })
		return
	}
	if bump && code == kerr.ProducerFenced.Code && t.endBumped && epoch == t.lastEpoch && t.epoch == epoch+1 {
		// A retry of the EndTxn that bumped the epoch (its answer was
		// lost): the same answer if it asks the same, never an end of
		// the transaction that may have begun since.
		switch {
		case commit && (t.state == kmsg.TransactionStatePrepareCommit || t.state == kmsg.TransactionStateCompleteCommit),
			!commit && (t.state == kmsg.TransactionStatePrepareAbort || t.state == kmsg.TransactionStateCompleteAbort):
			reply(c.endAnswer(t))
			return
		}
	}
	if code != 0 {
		fail(code)
		return
	}
	if bump {
		c.endTxnBump(p, t, commit, reply, fail)
		return
	}
	ok := func(code int16) { reply(EndResult{ErrorCode: code, ProducerID: -1, Epoch: -1}) }
	switch t.state {
	case kmsg.TransactionStateOngoing:
		next := *t
		next.state = kmsg.TransactionStatePrepareAbort
		if commit {
			next.state = kmsg.TransactionStatePrepareCommit
		}
		next.updateMs = c.nowMs()
		c.write(p, t, next, func(err error) {
			if err != nil {
				fail(appendErrCode(err))
				return
			}
			ok(0)
			c.sendMarkers(p, t)
		})
	case kmsg.TransactionStateCompleteCommit:
		ok(okIf(commit))
	case kmsg.TransactionStateCompleteAbort:
		ok(okIf(!commit))
	case kmsg.TransactionStatePrepareCommit:
		if commit {
			fail(kerr.ConcurrentTransactions.Code)
		} else {
			fail(kerr.InvalidTxnState.Code)
		}
	case kmsg.TransactionStatePrepareAbort:
		if !commit {
			fail(kerr.ConcurrentTransactions.Code)
		} else {
			fail(kerr.InvalidTxnState.Code)
		}
	default:
		fail(kerr.InvalidTxnState.Code)
	}
}

// endAnswer is what the producer goes on with after an EndTxn bump of t.
func (c *Coordinator) endAnswer(t *txnMeta) EndResult {
	if t.nextProducerID > 0 {
		return EndResult{ProducerID: t.nextProducerID, Epoch: 0}
	}
	return EndResult{ProducerID: t.producerID, Epoch: t.epoch}
}

// endTxnBump is EndTxn under transaction.version 2: the prepare record and
// the markers carry the next epoch. t is not pending and the producer
// matches.
func (c *Coordinator) endTxnBump(p *partition, t *txnMeta, commit bool, reply func(EndResult), fail func(int16)) {
	switch t.state {
	case kmsg.TransactionStateOngoing:
	case kmsg.TransactionStateEmpty, kmsg.TransactionStateCompleteCommit, kmsg.TransactionStateCompleteAbort:
		if commit {
			fail(kerr.InvalidTxnState.Code)
			return
		}
		// An abort with nothing open: legal under KIP-890 part 2 (a
		// client that is unsure whether its produces registered the
		// partitions aborts to be sure); it bumps the epoch like any end.
	case kmsg.TransactionStatePrepareCommit, kmsg.TransactionStatePrepareAbort:
		fail(kerr.ConcurrentTransactions.Code)
		return
	default:
		fail(kerr.InvalidTxnState.Code)
		return
	}
	prepare := func(nextPID int64) {
		next := *t
		next.lastEpoch, next.prevProducerID = t.epoch, -1
		next.epoch = bumpEpoch(t.epoch)
		next.endBumped = true
		next.nextProducerID = nextPID
		next.state = kmsg.TransactionStatePrepareAbort
		if commit {
			next.state = kmsg.TransactionStatePrepareCommit
		}
		if t.state != kmsg.TransactionStateOngoing {
			next.parts = nil
		}
		next.updateMs = c.nowMs()
		c.write(p, t, next, func(err error) {
			if err != nil {
				fail(appendErrCode(err))
				return
			}
			reply(c.endAnswer(t))
			c.sendMarkers(p, t)
		})
	}
	if t.epoch < math.MaxInt16-1 {
		prepare(0)
		return
	}
	// The markers take the last epoch; the producer goes on with a new id.
	t.pending = true
	var pid int64
	c.goAsync(p, "txn-producer-id", func(ctx context.Context) error {
		var err error
		pid, err = c.cfg.Broker.ProducerID(ctx)
		return err
	}, func(err error) {
		t.pending = false
		if err != nil {
			fail(appendErrCode(err))
			c.wake(p, t.id, false)
			return
		}
		prepare(pid)
	})
}

func okIf(ok bool) int16 {
	if ok {
		return 0
	}
	return kerr.InvalidTxnState.Code
}

// CheckProducer answers whether (producerID, epoch) is the current
// producer of id with a transaction open that includes tp: TxnOffsetCommit
// asks this before writing offsets for a transaction.
func (c *Coordinator) CheckProducer(ctx context.Context, id string, producerID int64, epoch int16, tp TopicPartition) (int16, error) {
	return submit(ctx, c, func(reply func(int16)) {
		_, t, code := c.lookup(id)
		if code == 0 && (t == nil || t.producerID != producerID) {
			code = kerr.InvalidProducerIDMapping.Code
		}
		if code == 0 && epoch != t.epoch {
			code = kerr.ProducerFenced.Code
		}
		if code == 0 && (t.state != kmsg.TransactionStateOngoing || !t.has(tp)) {
			code = kerr.InvalidTxnState.Code
		}
		reply(code)
	})
}

// appendErrCode maps a failed append or allocation.
func appendErrCode(err error) int16 {
	switch {
	case err == nil:
		return 0
	case isNotLeader(err):
		return kerr.NotCoordinator.Code
	default:
		return kerr.CoordinatorNotAvailable.Code
	}
}

// TxnState is one transaction as DescribeTransactions shows it.
type TxnState struct {
	ErrorCode       int16
	TransactionalID string
	State           string
	TimeoutMs       int32
	StartMs         int64
	ProducerID      int64
	Epoch           int16
	Partitions      []TopicPartition
}

// Describe returns the state of each id.
func (c *Coordinator) Describe(ctx context.Context, ids []string) ([]TxnState, error) {
	return submit(ctx, c, func(reply func([]TxnState)) {
		out := make([]TxnState, 0, len(ids))
		for _, id := range ids {
			s := TxnState{TransactionalID: id, ProducerID: -1, Epoch: -1, StartMs: -1}
			_, t, code := c.lookup(id)
			switch {
			case code != 0:
				s.ErrorCode = code
			case t == nil || t.producerID < 0:
				s.ErrorCode = kerr.TransactionalIDNotFound.Code
			default:
				s = describe(t)
			}
			out = append(out, s)
		}
		reply(out)
	})
}

func describe(t *txnMeta) TxnState {
	return TxnState{
		TransactionalID: t.id, State: t.state.String(), TimeoutMs: t.timeoutMs, StartMs: t.startMs,
		ProducerID: t.producerID, Epoch: t.epoch, Partitions: append([]TopicPartition(nil), t.parts...),
	}
}

// ListFilter selects transactions for List.
type ListFilter struct {
	States      []string // Kafka's state names; empty: all
	ProducerIDs []int64  // empty: all
	MinDuration time.Duration
	Pattern     string // a substring; empty: all (Kafka takes a regex)
}

// List returns the transactions of every loaded partition that match f,
// sorted by id.
func (c *Coordinator) List(ctx context.Context, f ListFilter) ([]TxnState, error) {
	return submit(ctx, c, func(reply func([]TxnState)) {
		now := c.nowMs()
		var out []TxnState
		for _, p := range c.partitions {
			if !p.ready {
				continue
			}
			for _, t := range p.txns {
				if t.producerID < 0 {
					continue
				}
				if len(f.States) > 0 && !containsFold(f.States, t.state.String()) {
					continue
				}
				if len(f.ProducerIDs) > 0 && !containsInt(f.ProducerIDs, t.producerID) {
					continue
				}
				if f.MinDuration > 0 && (t.startMs < 0 || now-t.startMs < f.MinDuration.Milliseconds()) {
					continue
				}
				if f.Pattern != "" && !strings.Contains(t.id, f.Pattern) {
					continue
				}
				out = append(out, describe(t))
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].TransactionalID < out[j].TransactionalID })
		reply(out)
	})
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func containsInt(list []int64, n int64) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}

// Abort aborts the open transaction of id as an admin action (a hanging
// transaction), fencing its producer.
func (c *Coordinator) Abort(ctx context.Context, id string) (int16, error) {
	return submit(ctx, c, func(reply func(int16)) {
		p, t, code := c.lookup(id)
		if code == 0 && t == nil {
			code = kerr.TransactionalIDNotFound.Code
		}
		if code == 0 && t.pending {
			code = kerr.ConcurrentTransactions.Code
		}
		if code == 0 && t.state != kmsg.TransactionStateOngoing {
			code = kerr.InvalidTxnState.Code
		}
		if code != 0 {
			reply(code)
			return
		}
		c.fenceAbort(p, t, func(err error) { reply(appendErrCode(err)) })
	})
}
