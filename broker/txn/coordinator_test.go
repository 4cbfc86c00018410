package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/internal/testutil"
)

var quiet = slog.New(slog.DiscardHandler)

// fakeClock moves only on Advance; due callbacks run before Advance returns.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	done bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.done
		t.done = true
		return was
	}
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		if t.done {
			continue
		}
		if !t.at.After(c.now) {
			t.done = true
			due = append(due, t)
		} else {
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

// memLog is an in-memory Log; fail makes appends fail.
type memLog struct {
	mu      sync.Mutex
	records []Record
	fail    error
	gate    chan struct{} // if set, Append waits for it to close
}

// waitGate waits until the channel *gate (read under mu) is closed, if it is
// set, or until ctx ends.
func waitGate(ctx context.Context, mu *sync.Mutex, gate *chan struct{}) error {
	mu.Lock()
	g := *gate
	mu.Unlock()
	if g == nil {
		return nil
	}
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *memLog) Append(ctx context.Context, recs []Record) error {
	if err := waitGate(ctx, &l.mu, &l.gate); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	l.records = append(l.records, recs...)
	return nil
}

func (l *memLog) Replay(_ context.Context, fn func(key, value []byte) error) error {
	l.mu.Lock()
	recs := append([]Record(nil), l.records...)
	l.mu.Unlock()
	for _, r := range recs {
		if err := fn(r.Key, r.Value); err != nil {
			return err
		}
	}
	return nil
}

func (l *memLog) states(t *testing.T, id string) []kmsg.TransactionState {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []kmsg.TransactionState
	for _, r := range l.records {
		rid, m, err := decodeRecord(r.Key, r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if rid == id && m != nil {
			out = append(out, m.state)
		}
	}
	return out
}

type fakeBroker struct {
	mu      sync.Mutex
	nextPID int64
	markers []Marker
	block   chan struct{} // if set, WriteMarkers waits for it
	fail    int           // WriteMarkers fails this many more times (NOT_LEADER_OR_FOLLOWER)
}

func (b *fakeBroker) ProducerID(context.Context) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextPID++
	return 1000 + b.nextPID, nil
}

func (b *fakeBroker) WriteMarkers(ctx context.Context, m Marker) error {
	if err := waitGate(ctx, &b.mu, &b.block); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail > 0 {
		b.fail--
		return fmt.Errorf("broker: marker for t-1 on broker 2: %w", kerr.NotLeaderForPartition)
	}
	b.markers = append(b.markers, m)
	return nil
}

func (b *fakeBroker) Partitions(topic string) (int32, bool) {
	if topic == "unknown" {
		return 0, false
	}
	return 3, true
}

func (b *fakeBroker) markerList() []Marker {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Marker(nil), b.markers...)
}

type env struct {
	t     *testing.T
	clock *fakeClock
	br    *fakeBroker
	log   *memLog
	c     *Coordinator
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, clock: newFakeClock(), br: &fakeBroker{}, log: &memLog{}}
	e.c = New(Config{Partitions: 1, Broker: e.br, Clock: e.clock, Logger: quiet, MarkerRetry: time.Millisecond})
	t.Cleanup(func() { e.c.Close() })
	e.load(e.c, 0)
	return e
}

func (e *env) load(c *Coordinator, epoch int32) {
	if err := <-c.Load(0, epoch, e.log); err != nil {
		e.t.Fatal(err)
	}
}

var ctx = context.Background()

func (e *env) init(id string, pid int64, epoch int16) InitResult {
	e.t.Helper()
	r, err := e.c.InitProducerID(ctx, id, 60000, pid, epoch)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) add(id string, r InitResult, tps ...TopicPartition) int16 {
	e.t.Helper()
	codes, err := e.c.AddPartitions(ctx, id, r.ProducerID, r.Epoch, tps)
	if err != nil {
		e.t.Fatal(err)
	}
	return codes[0]
}

func (e *env) end(id string, r InitResult, commit bool) int16 {
	e.t.Helper()
	res, err := e.c.EndTxn(ctx, id, r.ProducerID, r.Epoch, commit, false)
	code := res.ErrorCode
	if err != nil {
		e.t.Fatal(err)
	}
	return code
}

// waitState polls (with a deadline) until id reaches state.
func (e *env) waitState(c *Coordinator, id string, want kmsg.TransactionState) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := c.Describe(ctx, []string{id})
		if err != nil {
			e.t.Fatal(err)
		}
		if s[0].State == want.String() {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: state %s, want %s", id, s[0].State, want)
		}
		time.Sleep(time.Millisecond) // polling a condition, not synchronising
	}
}

func wantCode(t *testing.T, got int16, want *kerr.Error) {
	t.Helper()
	var w int16
	if want != nil {
		w = want.Code
	}
	if got != w {
		t.Fatalf("code %v, want %v", kerr.ErrorForCode(got), want)
	}
}

func TestInitBumpsEpoch(t *testing.T) {
	e := newEnv(t)
	r := e.init("a", -1, -1)
	wantCode(t, r.ErrorCode, nil)
	if r.Epoch != 0 || r.ProducerID < 0 {
		t.Fatalf("first init: %+v", r)
	}
	r2 := e.init("a", -1, -1)
	if r2.ProducerID != r.ProducerID || r2.Epoch != 1 {
		t.Fatalf("second init: %+v", r2)
	}
	// The second instance's bump fenced epoch 0: the first instance's
	// KIP-360 InitProducerId is not taken for a retry (Kafka sets the
	// last epoch to -1 on an InitProducerId without a producer id).
	wantCode(t, e.init("a", r.ProducerID, 0).ErrorCode, kerr.ProducerFenced)
	// KIP-360: the producer's own bump; a retry of it with the previous
	// epoch gets the current one; an older epoch is fenced.
	if r4 := e.init("a", r.ProducerID, 1); r4.Epoch != 2 {
		t.Fatalf("bump: %+v", r4)
	}
	if r5 := e.init("a", r.ProducerID, 1); r5.Epoch != 2 || r5.ErrorCode != 0 {
		t.Fatalf("retry: %+v", r5)
	}
	wantCode(t, e.init("a", r.ProducerID, 0).ErrorCode, kerr.ProducerFenced)
	wantCode(t, e.init("a", r.ProducerID+1, 2).ErrorCode, kerr.InvalidProducerIDMapping)
	if r, _ := e.c.InitProducerID(ctx, "a", 0, -1, -1); r.ErrorCode != kerr.InvalidTransactionTimeout.Code {
		t.Fatalf("timeout 0: %+v", r)
	}
}

func TestCommitTwoPhase(t *testing.T) {
	e := newEnv(t)
	r := e.init("a", -1, -1)
	tp := TopicPartition{"t", 1}
	wantCode(t, e.add("a", r, tp), nil)
	wantCode(t, e.add("a", r, tp), nil) // already in
	wantCode(t, e.end("a", r, true), nil)
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteCommit)
	ms := e.br.markerList()
	if len(ms) != 1 || !ms[0].Commit || ms[0].ProducerID != r.ProducerID || ms[0].ProducerEpoch != 0 || len(ms[0].Partitions) != 1 || ms[0].Partitions[0] != tp {
		t.Fatalf("markers %+v", ms)
	}
	got := e.log.states(t, "a")
	want := []kmsg.TransactionState{kmsg.TransactionStateEmpty, kmsg.TransactionStateOngoing, kmsg.TransactionStatePrepareCommit, kmsg.TransactionStateCompleteCommit}
	if len(got) != len(want) {
		t.Fatalf("logged %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logged %v, want %v", got, want)
		}
	}
	// A retried EndTxn succeeds; the opposite decision does not.
	wantCode(t, e.end("a", r, true), nil)
	wantCode(t, e.end("a", r, false), kerr.InvalidTxnState)
	// A second transaction with the same epoch (classic flow).
	wantCode(t, e.add("a", r, TopicPartition{"t", 2}), nil)
	wantCode(t, e.end("a", r, false), nil)
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteAbort)
	if s := e.c.Stats(); s.Committed != 1 || s.Aborted != 1 || s.Open != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestErrors(t *testing.T) {
	e := newEnv(t)
	r := e.init("a", -1, -1)
	codes, _ := e.c.AddPartitions(ctx, "a", r.ProducerID, r.Epoch, []TopicPartition{{"t", 0}, {"unknown", 0}, {"t", 9}})
	if codes[0] != kerr.OperationNotAttempted.Code || codes[1] != kerr.UnknownTopicOrPartition.Code || codes[2] != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("codes %v", codes)
	}
	wantCode(t, e.end("a", r, true), kerr.InvalidTxnState) // nothing open
	wantCode(t, e.add("b", r, TopicPartition{"t", 0}), kerr.InvalidProducerIDMapping)
	wantCode(t, e.add("a", InitResult{ProducerID: r.ProducerID, Epoch: 5}, TopicPartition{"t", 0}), kerr.ProducerFenced)
	// Not loaded here.
	c2 := New(Config{Partitions: 1, Broker: e.br, Clock: e.clock, Logger: quiet})
	defer c2.Close()
	if r, _ := c2.InitProducerID(ctx, "a", 1000, -1, -1); r.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("unloaded: %+v", r)
	}
	// A failing log answers a retriable code and leaves the state alone.
	e.log.mu.Lock()
	e.log.fail = errors.New("disk")
	e.log.mu.Unlock()
	wantCode(t, e.add("a", r, TopicPartition{"t", 0}), kerr.CoordinatorNotAvailable)
	e.log.mu.Lock()
	e.log.fail = ErrNotLeader
	e.log.mu.Unlock()
	wantCode(t, e.add("a", r, TopicPartition{"t", 0}), kerr.NotCoordinator)
	s, _ := e.c.Describe(ctx, []string{"a", "nope"})
	if s[0].State != "Empty" || s[1].ErrorCode != kerr.TransactionalIDNotFound.Code {
		t.Fatalf("describe %+v", s)
	}
}

func TestFencing(t *testing.T) {
	e := newEnv(t)
	old := e.init("a", -1, -1)
	wantCode(t, e.add("a", old, TopicPartition{"t", 0}), nil)
	// A new instance: the open transaction is aborted with a bumped epoch.
	wantCode(t, e.init("a", -1, -1).ErrorCode, kerr.ConcurrentTransactions)
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteAbort)
	ms := e.br.markerList()
	if len(ms) != 1 || ms[0].Commit || ms[0].ProducerEpoch != 1 {
		t.Fatalf("markers %+v", ms)
	}
	nw := e.init("a", -1, -1)
	if nw.ErrorCode != 0 || nw.Epoch != 2 || nw.ProducerID != old.ProducerID {
		t.Fatalf("new instance %+v", nw)
	}
	// The zombie's requests are refused.
	wantCode(t, e.add("a", old, TopicPartition{"t", 0}), kerr.ProducerFenced)
	wantCode(t, e.end("a", old, true), kerr.ProducerFenced)
	code, _ := e.c.CheckProducer(ctx, "a", old.ProducerID, old.Epoch, TopicPartition{"t", 0})
	wantCode(t, code, kerr.ProducerFenced)
	// The new one works.
	wantCode(t, e.add("a", nw, TopicPartition{"t", 0}), nil)
	code, _ = e.c.CheckProducer(ctx, "a", nw.ProducerID, nw.Epoch, TopicPartition{"t", 0})
	wantCode(t, code, nil)
	wantCode(t, e.end("a", nw, true), nil)
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteCommit)
}

func TestTimeoutAbortsAndFences(t *testing.T) {
	e := newEnv(t)
	r, _ := e.c.InitProducerID(ctx, "a", 1000, -1, -1)
	wantCode(t, e.add("a", r, TopicPartition{"t", 0}), nil)
	e.clock.Advance(DefaultAbortInterval) // 10s > 1s timeout
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteAbort)
	ms := e.br.markerList()
	if len(ms) != 1 || ms[0].Commit || ms[0].ProducerEpoch != r.Epoch+1 {
		t.Fatalf("markers %+v", ms)
	}
	wantCode(t, e.end("a", r, true), kerr.ProducerFenced)
	if s := e.c.Stats(); s.TimedOut != 1 || s.Aborted != 1 {
		t.Fatalf("stats %+v", s)
	}
	// A transaction within its timeout is left alone.
	r2, _ := e.c.InitProducerID(ctx, "b", 60000, -1, -1)
	wantCode(t, e.add("b", r2, TopicPartition{"t", 0}), nil)
	e.clock.Advance(DefaultAbortInterval)
	e.c.AbortTimedOut()
	e.waitState(e.c, "b", kmsg.TransactionStateOngoing)
}

func TestTakeoverFinishesPrepared(t *testing.T) {
	e := newEnv(t)
	block := make(chan struct{})
	e.br.mu.Lock()
	e.br.block = block
	e.br.mu.Unlock()
	r := e.init("a", -1, -1)
	wantCode(t, e.add("a", r, TopicPartition{"t", 0}, TopicPartition{"t", 1}), nil)
	wantCode(t, e.end("a", r, true), nil)
	// The coordinator dies with its markers unwritten.
	e.c.Close()
	e.br.mu.Lock()
	e.br.block = nil
	e.br.mu.Unlock()
	if len(e.br.markerList()) != 0 {
		t.Fatal("markers written before the takeover")
	}
	c2 := New(Config{Partitions: 1, Broker: e.br, Clock: e.clock, Logger: quiet, MarkerRetry: time.Millisecond})
	defer c2.Close()
	e.load(c2, 7)
	e.waitState(c2, "a", kmsg.TransactionStateCompleteCommit)
	ms := e.br.markerList()
	if len(ms) != 1 || !ms[0].Commit || ms[0].CoordinatorEpoch != 7 || len(ms[0].Partitions) != 2 {
		t.Fatalf("markers %+v", ms)
	}
	// The producer carries on with the new coordinator.
	e.c = c2
	wantCode(t, e.add("a", r, TopicPartition{"t", 2}), nil)
	l, _ := c2.List(ctx, ListFilter{States: []string{"Ongoing"}})
	if len(l) != 1 || l[0].TransactionalID != "a" || len(l[0].Partitions) != 1 {
		t.Fatalf("list %+v", l)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	m := &txnMeta{id: "x", producerID: 5, epoch: 3, timeoutMs: 100, state: kmsg.TransactionStateOngoing,
		parts: []TopicPartition{{"a", 1}, {"b", 0}, {"a", 2}}, startMs: 10, updateMs: 20}
	id, got, err := decodeRecord(encodeKey("x"), encodeValue(m))
	if err != nil || id != "x" {
		t.Fatal(id, err)
	}
	if got.producerID != 5 || got.epoch != 3 || got.state != m.state || len(got.parts) != 3 || got.startMs != 10 || got.updateMs != 20 {
		t.Fatalf("%+v", got)
	}
	// What only value version 1 holds: an EndTxn bump and the next
	// producer id.
	b := *m
	b.state, b.epoch, b.endBumped, b.nextProducerID = kmsg.TransactionStatePrepareCommit, 4, true, 9
	if _, got, err := decodeRecord(encodeKey("x"), encodeValue(&b)); err != nil || !got.endBumped || got.lastEpoch != 3 || got.nextProducerID != 9 {
		t.Fatalf("version 1: %+v %v", got, err)
	}
	if _, got, _ := decodeRecord(encodeKey("x"), encodeValue(m)); got.endBumped || got.lastEpoch != -1 || got.nextProducerID != 0 {
		t.Fatalf("version 0: %+v", got)
	}
	mm := map[string]*txnMeta{}
	if err := replayRecord(mm, encodeKey("x"), encodeValue(m)); err != nil || mm["x"] == nil {
		t.Fatal(err)
	}
	// A bump's record does not say whose bump it was (the producer's
	// own, or a fence): no previous epoch is taken for a retry, as Kafka
	// loads it as -1. An EndTxn bump of transaction version 2 does say.
	bumped := *m
	bumped.epoch, bumped.state = 4, kmsg.TransactionStateEmpty
	replayRecord(mm, encodeKey("x"), encodeValue(&bumped))
	bumped.state = kmsg.TransactionStateOngoing
	replayRecord(mm, encodeKey("x"), encodeValue(&bumped))
	if got := mm["x"]; got.epoch != 4 || got.lastEpoch != -1 {
		t.Fatalf("replayed: epoch %d, last epoch %d; want 4, -1", got.epoch, got.lastEpoch)
	}
	ended := *m
	ended.epoch, ended.state, ended.endBumped = 5, kmsg.TransactionStatePrepareCommit, true
	replayRecord(mm, encodeKey("x"), encodeValue(&ended))
	ended.state = kmsg.TransactionStateCompleteCommit
	replayRecord(mm, encodeKey("x"), encodeValue(&ended))
	if got := mm["x"]; got.epoch != 5 || got.lastEpoch != 4 {
		t.Fatalf("replayed EndTxn bump: epoch %d, last epoch %d; want 5, 4", got.epoch, got.lastEpoch)
	}
	if err := replayRecord(mm, encodeKey("x"), nil); err != nil || mm["x"] != nil {
		t.Fatal("tombstone kept the id", err)
	}
}

func TestPartitionFor(t *testing.T) {
	// Java: "txn-1".hashCode() = 110810510; % 50 = 10.
	for _, c := range []struct {
		id   string
		want int32
	}{{"txn-1", 10}, {"", 0}} {
		if got := PartitionFor(c.id, 50); got != c.want {
			t.Errorf("PartitionFor(%q) = %d, want %d", c.id, got, c.want)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	m := &txnMeta{id: "x", producerID: 5, epoch: 3, timeoutMs: 100, state: kmsg.TransactionStateOngoing, parts: []TopicPartition{{"a", 1}}}
	f.Add(encodeKey("x"), encodeValue(m))
	f.Add([]byte{0, 0, 0, 1, 'a'}, []byte{})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		id, got, err := decodeRecord(key, value)
		if err != nil || got == nil {
			return
		}
		// What decodes re-encodes to something that decodes the same.
		_, again, err := decodeRecord(encodeKey(id), encodeValue(got))
		if err != nil || again.producerID != got.producerID || again.state != got.state || len(again.parts) != len(got.parts) ||
			again.endBumped != got.endBumped || again.nextProducerID != got.nextProducerID {
			t.Fatalf("round trip: %+v vs %+v (%v)", got, again, err)
		}
	})
}

// TestParkedRequests: requests that find the id busy (markers being
// written) wait for it instead of failing, up to a bound.
func TestParkedRequests(t *testing.T) {
	e := newEnv(t)
	block := make(chan struct{})
	e.br.mu.Lock()
	e.br.block = block
	e.br.mu.Unlock()
	r := e.init("a", -1, -1)
	wantCode(t, e.add("a", r, TopicPartition{"t", 0}), nil)
	wantCode(t, e.end("a", r, true), nil)
	// The markers are blocked: the next AddPartitions waits for them.
	res := make(chan int16, 1)
	go func() { // e.add would call t.Fatal off the test goroutine
		codes, err := e.c.AddPartitions(ctx, "a", r.ProducerID, r.Epoch, []TopicPartition{{"t", 1}})
		if err != nil {
			t.Error(err)
			res <- -1
			return
		}
		res <- codes[0]
	}()
	select {
	case code := <-res:
		t.Fatalf("AddPartitions answered %v while the markers were pending", kerr.ErrorForCode(code))
	case <-time.After(20 * time.Millisecond): // a negative check: nothing may arrive
	}
	close(block)
	wantCode(t, <-res, nil)
	e.waitState(e.c, "a", kmsg.TransactionStateOngoing)

	// Bounded: with the markers blocked again, the wait ends after
	// parkTimeout with CONCURRENT_TRANSACTIONS.
	block = make(chan struct{})
	e.br.mu.Lock()
	e.br.block = block
	e.br.mu.Unlock()
	wantCode(t, e.end("a", r, false), nil)
	go func() { // e.end would call t.Fatal off the test goroutine
		r, err := e.c.EndTxn(ctx, "a", r.ProducerID, r.Epoch, false, false)
		if err != nil {
			t.Error(err)
			res <- -1
			return
		}
		res <- r.ErrorCode
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.clock.Advance(parkTimeout)
		select {
		case code := <-res:
			wantCode(t, code, kerr.ConcurrentTransactions)
			close(block)
			e.waitState(e.c, "a", kmsg.TransactionStateCompleteAbort)
			wantCode(t, e.end("a", r, false), nil)
			return
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("parked EndTxn never answered")
		}
	}
}

// TestEndTxnBump: transaction.version 2 (EndTxn v5). Every end bumps the
// epoch (prepare record and markers carry it, the producer gets it), a
// retry of the end gets the same answer, and a delayed EndTxn of the
// previous transaction cannot end the next one (KAFKA-17754).
func TestEndTxnBump(t *testing.T) {
	e := newEnv(t)
	r := e.init("a", -1, -1)
	tp := TopicPartition{"t", 0}
	end := func(epoch int16, commit bool) EndResult {
		t.Helper()
		res, err := e.c.EndTxn(ctx, "a", r.ProducerID, epoch, commit, true)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	wantCode(t, e.add("a", r, tp), nil)
	res := end(r.Epoch, true)
	if res.ErrorCode != 0 || res.ProducerID != r.ProducerID || res.Epoch != r.Epoch+1 {
		t.Fatalf("commit: %+v", res)
	}
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteCommit)
	if m := e.br.markerList(); len(m) != 1 || m[0].ProducerEpoch != r.Epoch+1 || !m[0].Commit {
		t.Fatalf("markers %+v", m)
	}
	// The retry of the commit (its answer lost) succeeds with the same
	// answer; an abort at the old epoch does not.
	if again := end(r.Epoch, true); again != res {
		t.Fatalf("retried commit: %+v, want %+v", again, res)
	}
	wantCode(t, end(r.Epoch, false).ErrorCode, kerr.ProducerFenced)

	// The next transaction runs at the bumped epoch.
	r2 := InitResult{ProducerID: res.ProducerID, Epoch: res.Epoch}
	wantCode(t, e.add("a", r2, tp), nil)
	// A delayed EndTxn of the first transaction, either kind, is fenced
	// and leaves the second one open.
	wantCode(t, end(r.Epoch, false).ErrorCode, kerr.ProducerFenced)
	wantCode(t, end(r.Epoch, true).ErrorCode, kerr.ProducerFenced)
	e.waitState(e.c, "a", kmsg.TransactionStateOngoing)
	// So is a write of the old epoch: AddPartitions.
	wantCode(t, e.add("a", r, TopicPartition{"t", 1}), kerr.ProducerFenced)
	res = end(r2.Epoch, false)
	if res.ErrorCode != 0 || res.Epoch != r2.Epoch+1 {
		t.Fatalf("abort: %+v", res)
	}
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteAbort)
	// An abort with nothing open is legal and bumps; a commit is not.
	res = end(r2.Epoch+1, false)
	if res.ErrorCode != 0 || res.Epoch != r2.Epoch+2 {
		t.Fatalf("empty abort: %+v", res)
	}
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteAbort)
	wantCode(t, end(r2.Epoch+2, true).ErrorCode, kerr.InvalidTxnState)
	// Without bump (v0-v4) the epoch stays.
	r3 := InitResult{ProducerID: res.ProducerID, Epoch: res.Epoch}
	wantCode(t, e.add("a", r3, tp), nil)
	wantCode(t, e.end("a", r3, true), nil)
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteCommit)
	if s, _ := e.c.Describe(ctx, []string{"a"}); s[0].Epoch != r3.Epoch {
		t.Fatalf("classic end bumped the epoch: %+v", s[0])
	}
}

// TestEndTxnBumpExhaustsEpoch: at the last epoch the markers take it and
// the producer goes on with a new producer id at epoch 0.
func TestEndTxnBumpExhaustsEpoch(t *testing.T) {
	e := newEnv(t)
	e.c.Close()
	log := &memLog{}
	log.Append(ctx, []Record{{Key: encodeKey("o"), Value: encodeValue(&txnMeta{id: "o", producerID: 77, epoch: math.MaxInt16 - 1,
		timeoutMs: 60000, state: kmsg.TransactionStateCompleteCommit, startMs: -1})}})
	e.log = log
	e.c = New(Config{Partitions: 1, Broker: e.br, Clock: e.clock, Logger: quiet, MarkerRetry: time.Millisecond})
	t.Cleanup(func() { e.c.Close() })
	e.load(e.c, 0)
	r := InitResult{ProducerID: 77, Epoch: math.MaxInt16 - 1}
	wantCode(t, e.add("o", r, TopicPartition{"t", 2}), nil)
	res, err := e.c.EndTxn(ctx, "o", 77, r.Epoch, true, true)
	if err != nil || res.ErrorCode != 0 || res.ProducerID == 77 || res.Epoch != 0 {
		t.Fatalf("end at the last epoch: %+v %v", res, err)
	}
	e.waitState(e.c, "o", kmsg.TransactionStateCompleteCommit)
	if m := e.br.markerList(); len(m) != 1 || m[0].ProducerID != 77 || m[0].ProducerEpoch != math.MaxInt16 {
		t.Fatalf("markers %+v", m)
	}
	s, _ := e.c.Describe(ctx, []string{"o"})
	if s[0].ProducerID != res.ProducerID || s[0].Epoch != 0 {
		t.Fatalf("after the end: %+v, want producer %d epoch 0", s[0], res.ProducerID)
	}
	// The new id works.
	wantCode(t, e.add("o", InitResult{ProducerID: res.ProducerID, Epoch: 0}, TopicPartition{"t", 2}), nil)
}

// TestEndTxnBumpRetryAfterTakeover: the coordinator dies after logging a
// transaction.version 2 end and before the producer reads the answer (a
// broker SIGKILL); the producer retries the EndTxn at its old epoch with the
// coordinator that replayed the log. The retry gets the answer it lost, as
// with Kafka, instead of PRODUCER_FENCED (franz-go's GroupTransactSession
// fails on that, and TestTxnPipelineSIGKILL's pipeline with it). A producer
// fenced by a timeout stays fenced across the takeover.
func TestEndTxnBumpRetryAfterTakeover(t *testing.T) {
	for _, tc := range []struct {
		name   string
		commit bool
		state  kmsg.TransactionState
	}{
		{"commit", true, kmsg.TransactionStateCompleteCommit},
		{"abort", false, kmsg.TransactionStateCompleteAbort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.init("a", -1, -1)
			tp := TopicPartition{"t", 0}
			wantCode(t, e.add("a", r, tp), nil)
			res, err := e.c.EndTxn(ctx, "a", r.ProducerID, r.Epoch, tc.commit, true)
			if err != nil || res.ErrorCode != 0 || res.Epoch != r.Epoch+1 {
				t.Fatalf("end: %+v %v", res, err)
			}
			e.waitState(e.c, "a", tc.state)
			e.c.Close()
			c2 := New(Config{Partitions: 1, Broker: e.br, Clock: e.clock, Logger: quiet, MarkerRetry: time.Millisecond})
			defer c2.Close()
			e.c = c2
			e.load(c2, 1)
			again, err := c2.EndTxn(ctx, "a", r.ProducerID, r.Epoch, tc.commit, true)
			if err != nil || again != res {
				t.Fatalf("retried end after the takeover: %+v %v, want %+v", again, err, res)
			}
			// The other kind at the old epoch is still fenced, and the
			// producer goes on at the bumped epoch.
			wantCode(t, func() int16 {
				res, _ := c2.EndTxn(ctx, "a", r.ProducerID, r.Epoch, !tc.commit, true)
				return res.ErrorCode
			}(), kerr.ProducerFenced)
			wantCode(t, e.add("a", InitResult{ProducerID: res.ProducerID, Epoch: res.Epoch}, tp), nil)
		})
	}
	t.Run("timeout fence", func(t *testing.T) {
		e := newEnv(t)
		r, _ := e.c.InitProducerID(ctx, "a", 1000, -1, -1)
		wantCode(t, e.add("a", r, TopicPartition{"t", 0}), nil)
		e.clock.Advance(DefaultAbortInterval)
		e.waitState(e.c, "a", kmsg.TransactionStateCompleteAbort)
		e.c.Close()
		c2 := New(Config{Partitions: 1, Broker: e.br, Clock: e.clock, Logger: quiet, MarkerRetry: time.Millisecond})
		defer c2.Close()
		e.load(c2, 1)
		for _, commit := range []bool{false, true} {
			res, err := c2.EndTxn(ctx, "a", r.ProducerID, r.Epoch, commit, true)
			if err != nil || res.ErrorCode != kerr.ProducerFenced.Code {
				t.Fatalf("end (commit %v) of the timed-out producer after the takeover: %+v %v, want PRODUCER_FENCED", commit, res, err)
			}
		}
	})
}

// TestEndTxnBumpExhaustsEpochTakeover: the coordinator dies between the
// prepare record of an end at the last epoch and its completion; the new
// coordinator completes it with the producer id the producer was handed.
func TestEndTxnBumpExhaustsEpochTakeover(t *testing.T) {
	e := newEnv(t)
	e.c.Close()
	log := &memLog{}
	log.Append(ctx, []Record{{Key: encodeKey("o"), Value: encodeValue(&txnMeta{id: "o", producerID: 77, epoch: math.MaxInt16 - 1,
		timeoutMs: 60000, state: kmsg.TransactionStateCompleteCommit, startMs: -1})}})
	e.log = log
	e.c = New(Config{Partitions: 1, Broker: e.br, Clock: e.clock, Logger: quiet, MarkerRetry: time.Millisecond})
	e.load(e.c, 0)
	block := make(chan struct{})
	e.br.mu.Lock()
	e.br.block = block
	e.br.mu.Unlock()
	r := InitResult{ProducerID: 77, Epoch: math.MaxInt16 - 1}
	wantCode(t, e.add("o", r, TopicPartition{"t", 2}), nil)
	res, err := e.c.EndTxn(ctx, "o", 77, r.Epoch, true, true)
	if err != nil || res.ErrorCode != 0 || res.ProducerID == 77 || res.Epoch != 0 {
		t.Fatalf("end at the last epoch: %+v %v", res, err)
	}
	// The coordinator dies with its markers unwritten.
	e.c.Close()
	e.br.mu.Lock()
	e.br.block = nil
	e.br.mu.Unlock()
	c2 := New(Config{Partitions: 1, Broker: e.br, Clock: e.clock, Logger: quiet, MarkerRetry: time.Millisecond})
	defer c2.Close()
	e.c = c2
	e.load(c2, 1)
	e.waitState(c2, "o", kmsg.TransactionStateCompleteCommit)
	s, _ := c2.Describe(ctx, []string{"o"})
	if s[0].ProducerID != res.ProducerID || s[0].Epoch != 0 {
		t.Fatalf("after the takeover: %+v, want producer %d epoch 0", s[0], res.ProducerID)
	}
	wantCode(t, e.add("o", InitResult{ProducerID: res.ProducerID, Epoch: 0}, TopicPartition{"t", 2}), nil)
}

// waitGone polls (with a deadline) until id is unknown to c.
func (e *env) waitGone(c *Coordinator, id string) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := c.Describe(ctx, []string{id})
		if err != nil {
			e.t.Fatal(err)
		}
		if s[0].ErrorCode == kerr.TransactionalIDNotFound.Code {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s still known: %+v", id, s[0])
		}
		time.Sleep(time.Millisecond) // polling a condition, not synchronising
	}
}

func TestTransactionalIDExpiration(t *testing.T) {
	e := &env{t: t, clock: newFakeClock(), br: &fakeBroker{}, log: &memLog{}}
	cfg := Config{Partitions: 1, Broker: e.br, Clock: e.clock, Logger: quiet, MarkerRetry: time.Millisecond,
		IDExpiration: time.Minute, ExpireInterval: 10 * time.Second}
	e.c = New(cfg)
	t.Cleanup(func() { e.c.Close() })
	e.load(e.c, 0)

	a := e.init("a", -1, -1)
	wantCode(t, e.add("a", a, TopicPartition{"t", 0}), nil)
	wantCode(t, e.end("a", a, true), nil)
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteCommit)
	e.init("b", -1, -1) // Empty
	long, _ := e.c.InitProducerID(ctx, "c", int32(DefaultMaxTimeout/time.Millisecond), -1, -1)
	wantCode(t, e.add("c", long, TopicPartition{"t", 1}), nil) // Ongoing

	// Not idle long enough yet.
	e.clock.Advance(30 * time.Second) // the check runs (every 10s)
	if l, _ := e.c.List(ctx, ListFilter{}); len(l) != 3 {
		t.Fatalf("before the expiration: %+v", l)
	}
	// Past it: the ended and the empty id go, the open transaction stays.
	e.clock.Advance(31 * time.Second)
	e.waitGone(e.c, "a")
	e.waitGone(e.c, "b")
	l, _ := e.c.List(ctx, ListFilter{})
	if len(l) != 1 || l[0].TransactionalID != "c" || l[0].State != "Ongoing" {
		t.Fatalf("after the expiration: %+v", l)
	}
	if s := e.c.Stats(); s.Expired != 2 {
		t.Fatalf("stats %+v", s)
	}
	// Their tombstones are in the log.
	tombs := map[string]bool{}
	e.log.mu.Lock()
	for _, r := range e.log.records {
		if id, m, err := decodeRecord(r.Key, r.Value); err == nil && m == nil {
			tombs[id] = true
		}
	}
	e.log.mu.Unlock()
	if len(tombs) != 2 || !tombs["a"] || !tombs["b"] {
		t.Fatalf("tombstones %v", tombs)
	}
	// The old producer's requests find no id.
	wantCode(t, e.add("a", a, TopicPartition{"t", 0}), kerr.InvalidProducerIDMapping)

	// A coordinator that takes over replays the tombstones.
	e.c.Close()
	c2 := New(cfg)
	defer c2.Close()
	e.load(c2, 1)
	e.c = c2
	e.waitGone(c2, "a")
	e.waitGone(c2, "b")
	e.waitState(c2, "c", kmsg.TransactionStateOngoing)
	// The expired id starts afresh: a new producer id at epoch 0.
	a2 := e.init("a", -1, -1)
	if a2.ErrorCode != 0 || a2.ProducerID == a.ProducerID || a2.Epoch != 0 {
		t.Fatalf("init after expiry: %+v (before %+v)", a2, a)
	}
	// The open transaction, once ended, expires too.
	wantCode(t, e.end("c", long, false), nil)
	e.waitState(c2, "c", kmsg.TransactionStateCompleteAbort)
	e.clock.Advance(61 * time.Second)
	e.waitGone(c2, "c")
	e.waitGone(c2, "a")
}

// An InitProducerId that arrives while the id's tombstone is being written
// waits for it and then starts the id afresh.
func TestTransactionalIDExpirationParksInit(t *testing.T) {
	e := &env{t: t, clock: newFakeClock(), br: &fakeBroker{}, log: &memLog{}}
	e.c = New(Config{Partitions: 1, Broker: e.br, Clock: e.clock, Logger: quiet, IDExpiration: time.Minute, ExpireInterval: time.Minute})
	t.Cleanup(func() { e.c.Close() })
	e.load(e.c, 0)
	old := e.init("a", -1, -1)
	gate := make(chan struct{})
	e.log.mu.Lock()
	e.log.gate = gate
	e.log.mu.Unlock()
	e.clock.Advance(time.Minute) // the check: the tombstone's append waits at the gate
	got := make(chan InitResult, 1)
	go func() {
		r, _ := e.c.InitProducerID(ctx, "a", 60000, -1, -1)
		got <- r
	}()
	// The init is parked on the pending id: nothing answers it yet.
	select {
	case r := <-got:
		t.Fatalf("init answered while the tombstone was pending: %+v", r)
	default:
	}
	e.log.mu.Lock()
	e.log.gate = nil
	e.log.mu.Unlock()
	close(gate)
	r := <-got
	if r.ErrorCode != 0 || r.ProducerID == old.ProducerID || r.Epoch != 0 {
		t.Fatalf("init after expiry: %+v (before %+v)", r, old)
	}
	if s := e.c.Stats(); s.Expired != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestZombieKIP360InitFenced: a new instance's InitProducerId (no producer
// id) fences every earlier epoch, so the old instance's KIP-360
// InitProducerId at its own epoch is PRODUCER_FENCED, not answered with the
// new instance's epoch (Kafka's prepareIncrementProducerEpoch sets the last
// epoch to -1 on a bump without an expected epoch). The same after a
// timeout's fence, and after a reload.
func TestZombieKIP360InitFenced(t *testing.T) {
	e := newEnv(t)
	a := e.init("a", -1, -1) // instance A: epoch 0
	tp := TopicPartition{"t", 0}
	wantCode(t, e.add("a", a, tp), nil)
	wantCode(t, e.end("a", a, true), nil)
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteCommit)
	b := e.init("a", -1, -1) // instance B: epoch 1, A is fenced
	if b.Epoch != a.Epoch+1 {
		t.Fatalf("B %+v", b)
	}
	if z := e.init("a", a.ProducerID, a.Epoch); z.ErrorCode != kerr.ProducerFenced.Code {
		t.Fatalf("zombie A's KIP-360 InitProducerId: %+v (B has %d/%d), want PRODUCER_FENCED", z, b.ProducerID, b.Epoch)
	}
	// B's transaction times out: the fence bumps to 2; B's KIP-360 at its
	// epoch 1 is fenced as well (its transaction was aborted under it).
	wantCode(t, e.add("a", b, tp), nil)
	e.clock.Advance(DefaultAbortInterval + time.Minute)
	e.c.AbortTimedOut()
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteAbort)
	if z := e.init("a", b.ProducerID, b.Epoch); z.ErrorCode != kerr.ProducerFenced.Code {
		t.Fatalf("KIP-360 InitProducerId at the epoch a timeout fenced: %+v, want PRODUCER_FENCED", z)
	}
}

// TestFenceAtLargestEpoch: a transaction at epoch 32767 that times out is
// aborted with markers at 32767, never at a wrapped negative epoch that the
// partitions would refuse as older (which left them open for ever), and the
// next InitProducerId moves to a new producer id.
func TestFenceAtLargestEpoch(t *testing.T) {
	e := newEnv(t)
	r := e.init("a", -1, -1)
	e.c.inLoop(func() { e.c.partitions[0].txns["a"].epoch = math.MaxInt16 })
	r.Epoch = math.MaxInt16
	tp := TopicPartition{"t", 0}
	wantCode(t, e.add("a", r, tp), nil)
	e.clock.Advance(DefaultAbortInterval + time.Minute)
	e.c.AbortTimedOut()
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteAbort)
	ms := e.br.markerList()
	if len(ms) == 0 {
		t.Fatal("no abort marker")
	}
	for _, m := range ms {
		if m.ProducerEpoch != math.MaxInt16 {
			t.Fatalf("marker at epoch %d, want %d", m.ProducerEpoch, math.MaxInt16)
		}
	}
	if n := e.init("a", -1, -1); n.ErrorCode != 0 || n.ProducerID == r.ProducerID || n.Epoch != 0 {
		t.Fatalf("InitProducerId after the largest epoch: %+v", n)
	}
}

// TestInitProducerIDRotationRetry: a producer's own InitProducerId (KIP-360:
// its id and epoch) at the last epoch gets a new producer id at epoch 0; a
// retry of that request (its answer lost) gets the same new id again, as
// Kafka's coordinator answers it (prevProducerId, lastProducerEpoch),
// instead of INVALID_PRODUCER_ID_MAPPING, which is fatal to the producer.
// The old id at another exhausted epoch is fenced, at any other epoch
// unknown; once the new id begins a transaction, or another instance takes
// over, the old request is no retry any more.
func TestInitProducerIDRotationRetry(t *testing.T) {
	e := newEnv(t)
	e.c.Close()
	log := &memLog{}
	last := int16(math.MaxInt16 - 1)
	log.Append(ctx, []Record{{Key: encodeKey("o"), Value: encodeValue(&txnMeta{id: "o", producerID: 77, epoch: last,
		timeoutMs: 60000, state: kmsg.TransactionStateCompleteAbort, startMs: -1})}})
	e.log = log
	e.c = New(Config{Partitions: 1, Broker: e.br, Clock: e.clock, Logger: quiet, MarkerRetry: time.Millisecond})
	t.Cleanup(func() { e.c.Close() })
	e.load(e.c, 0)

	rotated := e.init("o", 77, last)
	if rotated.ErrorCode != 0 || rotated.ProducerID == 77 || rotated.Epoch != 0 {
		t.Fatalf("InitProducerId at the last epoch: %+v, want a new id at epoch 0", rotated)
	}
	if again := e.init("o", 77, last); again != rotated {
		t.Fatalf("its retry: %+v, want %+v", again, rotated)
	}
	wantCode(t, e.init("o", 77, math.MaxInt16).ErrorCode, kerr.ProducerFenced)
	wantCode(t, e.init("o", 77, 5).ErrorCode, kerr.InvalidProducerIDMapping)
	wantCode(t, e.init("o", 78, last).ErrorCode, kerr.InvalidProducerIDMapping)

	// The new id goes on; a retry of the rotation is then fenced.
	wantCode(t, e.add("o", rotated, TopicPartition{"t", 0}), nil)
	wantCode(t, e.init("o", 77, last).ErrorCode, kerr.ProducerFenced)
	if _, err := e.c.EndTxn(ctx, "o", rotated.ProducerID, rotated.Epoch, false, false); err != nil {
		t.Fatal(err)
	}
	e.waitState(e.c, "o", kmsg.TransactionStateCompleteAbort)
	// Another instance (no id): a bump of the new id; the old id is unknown.
	other := e.init("o", -1, -1)
	if other.ErrorCode != 0 || other.ProducerID != rotated.ProducerID || other.Epoch != 1 {
		t.Fatalf("a new instance: %+v, want producer %d epoch 1", other, rotated.ProducerID)
	}
	wantCode(t, e.init("o", 77, last).ErrorCode, kerr.InvalidProducerIDMapping)
}

// A transaction's markers that fail to be written are retried; the first
// failures (a leader moved) are INFO, those past markerRetriesQuiet WARN.
func TestMarkerRetriesLogged(t *testing.T) {
	var logs testutil.Buffer
	e := &env{t: t, clock: newFakeClock(), br: &fakeBroker{fail: markerRetriesQuiet + 2}, log: &memLog{}}
	e.c = New(Config{Partitions: 1, Broker: e.br, Clock: e.clock, MarkerRetry: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	t.Cleanup(func() { e.c.Close() })
	e.load(e.c, 0)
	r := e.init("a", -1, -1)
	wantCode(t, e.add("a", r, TopicPartition{"t", 1}), nil)
	wantCode(t, e.end("a", r, true), nil)
	e.waitState(e.c, "a", kmsg.TransactionStateCompleteCommit)
	info := strings.Count(logs.String(), `level=INFO msg="txn: writing markers failed; retrying"`)
	warn := strings.Count(logs.String(), `level=WARN msg="txn: writing markers failed; retrying"`)
	if info != markerRetriesQuiet || warn != 2 || !strings.Contains(logs.String(), "NOT_LEADER_FOR_PARTITION") {
		t.Fatalf("%d INFO and %d WARN lines for %d failures, want %d and 2, with the error's name:\n%s", info, warn, markerRetriesQuiet+2, markerRetriesQuiet, logs.String())
	}
}
