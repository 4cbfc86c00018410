package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/hotlog"
)

func TestProducerStateSequences(t *testing.T) {
	s := newProducerState()
	b := func(epoch int16, seq, n int32) batchInfo {
		return batchInfo{producerID: 1, producerEpoch: epoch, baseSequence: seq, records: n}
	}
	// An unknown producer (expired, say) is accepted at any sequence.
	if err := s.check(b(0, 3, 1)); err != nil {
		t.Fatalf("unknown producer at seq 3: %v", err)
	}
	off := int64(0)
	for seq := int32(0); seq < 40; seq += 4 {
		if err := s.check(b(0, seq, 4)); err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		s.apply(b(0, seq, 4), off, off+3, 1000)
		off += 4
	}
	// The last five batches are duplicates answered with their offsets.
	for i, seq := range []int32{20, 24, 28, 32, 36} {
		var dup *duplicateError
		if err := s.check(b(0, seq, 4)); !errors.As(err, &dup) || dup.firstOffset != int64(20+4*i) {
			t.Fatalf("seq %d: want duplicate at %d, got %v", seq, 20+4*i, err)
		}
	}
	if err := s.check(b(0, 16, 4)); !errors.Is(err, errOutOfOrderSequence) {
		t.Fatalf("a batch older than the last five: %v", err)
	}
	if err := s.check(b(0, 44, 1)); !errors.Is(err, errOutOfOrderSequence) {
		t.Fatalf("gap: %v", err)
	}
	if err := s.check(b(1, 5, 1)); !errors.Is(err, errOutOfOrderSequence) {
		t.Fatalf("new epoch not at 0: %v", err)
	}
	if err := s.check(b(1, 0, 1)); err != nil {
		t.Fatalf("new epoch at 0: %v", err)
	}
	s.apply(b(1, 0, 1), off, off, 2000)
	if err := s.check(b(0, 40, 1)); !errors.Is(err, errProducerFenced) {
		t.Fatalf("old epoch: %v", err)
	}
	// Wrap-around at MaxInt32.
	w := newProducerState()
	w.apply(batchInfo{producerID: 2, baseSequence: 0, records: 1}, 0, 0, 1000)
	w.m[2].batches[0].lastSeq = 1<<31 - 1
	if err := w.check(batchInfo{producerID: 2, baseSequence: 0, records: 1}); err != nil {
		t.Fatalf("sequence wrap: %v", err)
	}
	st, err := unmarshalProducerState(s.marshal())
	if err != nil || len(st.m) != 1 || st.m[1].epoch != 1 {
		t.Fatalf("snapshot round trip: %v %+v", err, st)
	}
	// Expiry: producer 1 appended last at 2000, producer 2 at 1000.
	s.apply(batchInfo{producerID: 2, baseSequence: 0, records: 1}, 50, 50, 1000)
	if n := s.expire(1500); n != 1 || s.m[1] == nil || s.m[2] != nil {
		t.Fatalf("expire(1500) removed %d, left %v", n, s.m)
	}
	// Producer 2 goes on after its expiry with its next sequence: accepted,
	// and the sequence after it is checked again.
	if err := s.check(batchInfo{producerID: 2, baseSequence: 1, records: 2}); err != nil {
		t.Fatalf("expired producer resuming: %v", err)
	}
	s.apply(batchInfo{producerID: 2, baseSequence: 1, records: 2}, 51, 52, 3000)
	if err := s.check(batchInfo{producerID: 2, baseSequence: 5, records: 1}); !errors.Is(err, errOutOfOrderSequence) {
		t.Fatalf("gap after resuming: %v", err)
	}
	if err := s.check(batchInfo{producerID: 2, baseSequence: 3, records: 1}); err != nil {
		t.Fatalf("next after resuming: %v", err)
	}
}

func TestProducerStateTransactions(t *testing.T) {
	s := newProducerState()
	data := func(pid int64, epoch int16, seq int32) batchInfo {
		return batchInfo{producerID: pid, producerEpoch: epoch, baseSequence: seq, records: 2, transactional: true}
	}
	marker := func(pid int64, epoch int16, commit bool) batchInfo {
		return batchInfo{producerID: pid, producerEpoch: epoch, baseSequence: -1, records: 1, transactional: true, control: true, commit: commit}
	}
	if s.firstUnstable() != -1 {
		t.Fatal("empty state has an open transaction")
	}
	s.apply(data(1, 0, 0), 10, 11, 1000)
	s.apply(data(2, 0, 0), 12, 13, 1000)
	s.apply(data(1, 0, 2), 14, 15, 1000)
	if got := s.firstUnstable(); got != 10 {
		t.Fatalf("first unstable %d, want 10", got)
	}
	// Abort producer 1's [10, 16]: the index entry, with producer 2's
	// transaction holding the LSO at 12.
	if a, ok := s.aborts(marker(1, 0, false), 16); !ok || a != (hotlog.AbortedTxn{ProducerID: 1, FirstOffset: 10, LastOffset: 16, LastStableOffset: 12}) {
		t.Fatalf("abort entry %+v %v", a, ok)
	}
	if _, ok := s.aborts(marker(1, 0, true), 16); ok {
		t.Fatal("a commit made an abort entry")
	}
	s.apply(marker(1, 0, false), 16, 16, 1000)
	if _, ok := s.aborts(marker(1, 0, false), 17); ok {
		t.Fatal("an abort with no open transaction made an entry")
	}
	if got := s.firstUnstable(); got != 12 {
		t.Fatalf("first unstable %d, want 12", got)
	}
	s.apply(marker(2, 0, true), 17, 17, 1000)
	if got := s.firstUnstable(); got != -1 {
		t.Fatalf("first unstable %d after both ended", got)
	}
	// A marker with a bumped epoch (a fenced abort) fences the old one.
	s.apply(data(3, 0, 0), 18, 19, 1000)
	if a, ok := s.aborts(marker(3, 1, false), 20); !ok || a.LastStableOffset != 21 {
		t.Fatalf("abort entry with nothing else open: %+v", a)
	}
	if err := s.check(marker(3, 1, false)); err != nil {
		t.Fatal(err)
	}
	s.apply(marker(3, 1, false), 20, 20, 1000)
	if err := s.check(data(3, 0, 2)); !errors.Is(err, errTxnProducerFenced) {
		t.Fatalf("write of the fenced epoch: %v", err)
	}
	if err := s.check(marker(3, 0, true)); !errors.Is(err, errTxnProducerFenced) {
		t.Fatalf("stale marker: %v", err)
	}
	// While producer 6's transaction is open, its plain writes are
	// refused, at its epoch or a newer one (only a marker ends it), after
	// the sequence checks; a retry of a batch it wrote is still a
	// duplicate; once the marker is in they go in.
	s.apply(data(6, 0, 0), 40, 41, 1000)
	plain := func(epoch int16, seq int32) batchInfo {
		return batchInfo{producerID: 6, producerEpoch: epoch, baseSequence: seq, records: 1}
	}
	for _, b := range []batchInfo{plain(0, 2), plain(1, 0)} {
		if err := s.check(b); !errors.Is(err, errTxnWriteExpected) {
			t.Fatalf("plain write at epoch %d in an open transaction: %v", b.producerEpoch, err)
		}
	}
	if err := s.check(plain(0, 5)); !errors.Is(err, errOutOfOrderSequence) {
		t.Fatalf("plain write out of sequence in an open transaction: %v", err)
	}
	if err := s.check(batchInfo{producerID: 6, producerEpoch: 0, baseSequence: 0, records: 2}); !errors.As(err, new(*duplicateError)) {
		t.Fatalf("retry in an open transaction: %v", err)
	}
	s.apply(marker(6, 0, true), 42, 42, 1000)
	if err := s.check(plain(0, 2)); err != nil {
		t.Fatalf("plain write after the marker: %v", err)
	}
	// Expiry keeps a producer whose transaction is open.
	s.apply(data(5, 0, 0), 30, 31, 1)
	if s.expire(1500) == 0 || s.m[5] == nil {
		t.Fatalf("expiry: producer with an open transaction dropped (%v)", s.m[5])
	}
	s.apply(marker(5, 0, false), 32, 32, 1)
	if s.expire(1500); s.m[5] != nil {
		t.Fatal("expiry kept an idle producer without a transaction")
	}
	// The snapshot keeps open transactions.
	s.apply(data(4, 0, 0), 21, 22, 1000)
	st, err := unmarshalProducerState(s.marshal())
	if err != nil {
		t.Fatal(err)
	}
	if st.firstUnstable() != 21 || st.legacyAborted != nil {
		t.Fatalf("snapshot round trip: first unstable %d aborted %+v", st.firstUnstable(), st.legacyAborted)
	}
	// A version 2 snapshot's aborted list is read for the index.
	v2 := append([]byte{2}, marshalProducerStateV3(s)[1:]...)
	v2 = binary.AppendUvarint(v2, 2)
	for _, a := range [][3]int64{{1, 10, 16}, {3, 18, 20}} {
		for _, x := range a {
			v2 = binary.BigEndian.AppendUint64(v2, uint64(x))
		}
	}
	st, err = unmarshalProducerState(v2)
	if err != nil {
		t.Fatal(err)
	}
	if st.firstUnstable() != 21 || len(st.legacyAborted) != 2 || st.legacyAborted[1] != (hotlog.AbortedTxn{ProducerID: 3, FirstOffset: 18, LastOffset: 20}) {
		t.Fatalf("v2 snapshot: first unstable %d aborted %+v", st.firstUnstable(), st.legacyAborted)
	}
}

func TestControlBatch(t *testing.T) {
	for _, commit := range []bool{true, false} {
		b := encodeMarkerBatch(5, 2, commit, 7, 1000)
		h, err := hotlog.ParseBatchHeader(b)
		if err != nil || !h.IsControl() || !h.IsTransactional() || h.ProducerID != 5 || h.ProducerEpoch != 2 {
			t.Fatalf("header %+v %v", h, err)
		}
		if _, err := hotlog.ValidateBatches(b); err != nil {
			t.Fatal(err)
		}
		got, coordinatorEpoch, ok := controlType(b)
		if !ok || got != commit || coordinatorEpoch != 7 {
			t.Fatalf("control type %v %v coordinator epoch %d, want %v 7", got, ok, coordinatorEpoch, commit)
		}
		info, ok := batchInfoOf(b, h)
		if !ok || !info.control || info.commit != commit || info.coordinatorEpoch != 7 {
			t.Fatalf("batch info %+v %v", info, ok)
		}
	}
	// A marker whose value cannot be read still ends the transaction,
	// with no coordinator epoch (-1).
	b := encodeBatch([]group.Record{{
		Key:   (&kmsg.ControlRecordKey{Type: kmsg.ControlRecordKeyTypeAbort}).AppendTo(nil),
		Value: []byte{0, 0, 1},
	}}, 5, 2, attrTransactional|attrControl, 1000)
	if commit, coordinatorEpoch, ok := controlType(b); !ok || commit || coordinatorEpoch != -1 {
		t.Fatalf("short marker value: %v %d %v", commit, coordinatorEpoch, ok)
	}
}

// marshalProducerStateV3 is the version 3 snapshot encoding (no
// coordinator epoch), as brokers before version 4 wrote it.
func marshalProducerStateV3(s *producerState) []byte { return s.marshalVersion(3) }

// TestProducerStateCoordinatorEpoch: markers record their coordinator
// epoch per producer; a marker from an older coordinator epoch is fenced
// (the same or a newer one passes); the epoch survives the snapshot, and
// older snapshot versions load with -1.
func TestProducerStateCoordinatorEpoch(t *testing.T) {
	s := newProducerState()
	data := func(pid int64, epoch int16, seq int32) batchInfo {
		return batchInfo{producerID: pid, producerEpoch: epoch, baseSequence: seq, records: 1, transactional: true}
	}
	marker := func(pid int64, epoch int16, coordinatorEpoch int32) batchInfo {
		return batchInfo{producerID: pid, producerEpoch: epoch, baseSequence: -1, records: 1, transactional: true, control: true, commit: true, coordinatorEpoch: coordinatorEpoch}
	}
	// Producer 1: a transaction committed by coordinator epoch 3.
	s.apply(data(1, 0, 0), 0, 0, 1000)
	if s.m[1].coordinatorEpoch != -1 {
		t.Fatalf("coordinator epoch %d before any marker, want -1", s.m[1].coordinatorEpoch)
	}
	// With no marker yet, any coordinator epoch is taken (-1 too: an
	// admin tool's abort of a producer never marked).
	if err := s.check(marker(1, 0, -1)); err != nil {
		t.Fatalf("first marker at -1: %v", err)
	}
	if err := s.check(marker(1, 0, 3)); err != nil {
		t.Fatal(err)
	}
	s.apply(marker(1, 0, 3), 1, 1, 1000)
	if s.m[1].coordinatorEpoch != 3 {
		t.Fatalf("coordinator epoch %d, want 3", s.m[1].coordinatorEpoch)
	}
	// A retry of the same marker (same coordinator epoch) passes; a newer
	// coordinator (after a move) passes; an older one is fenced.
	if err := s.check(marker(1, 0, 3)); err != nil {
		t.Fatalf("retried marker: %v", err)
	}
	if err := s.check(marker(1, 0, 4)); err != nil {
		t.Fatalf("newer coordinator: %v", err)
	}
	if err := s.check(marker(1, 0, 2)); !errors.Is(err, errTxnCoordinatorFenced) {
		t.Fatalf("older coordinator: %v", err)
	}
	if code := errCode(fmt.Errorf("wrapped: %w", errTxnCoordinatorFenced)); code != kerr.TransactionCoordinatorFenced.Code {
		t.Fatalf("error code %d", code)
	}
	// The producer epoch is checked first (a stale producer epoch is
	// skipped by writeMarker, not reported as a coordinator fencing).
	s.apply(marker(1, 1, 4), 2, 2, 1000)
	if err := s.check(marker(1, 0, 2)); !errors.Is(err, errTxnProducerFenced) {
		t.Fatalf("stale producer and coordinator epoch: %v", err)
	}
	// Data batches carry no coordinator epoch and neither check nor
	// change it.
	if err := s.check(data(1, 1, 0)); err != nil {
		t.Fatal(err)
	}
	s.apply(data(1, 1, 0), 3, 3, 1000)
	if s.m[1].coordinatorEpoch != 4 {
		t.Fatalf("a data batch changed the coordinator epoch to %d", s.m[1].coordinatorEpoch)
	}
	// Followers and the replay take what the leader wrote, even older
	// (as Kafka's replication does); a negative epoch is kept as -1.
	s.apply(marker(1, 1, 2), 4, 4, 1000)
	if s.m[1].coordinatorEpoch != 2 {
		t.Fatalf("replicated marker: coordinator epoch %d, want 2", s.m[1].coordinatorEpoch)
	}
	s.apply(data(2, 0, 0), 5, 5, 1000)
	s.apply(marker(2, 0, -7), 6, 6, 1000)
	if s.m[2].coordinatorEpoch != -1 {
		t.Fatalf("negative coordinator epoch recorded as %d", s.m[2].coordinatorEpoch)
	}
	// Producer 3 never had a marker; producer 4 has an open transaction
	// after one.
	s.apply(batchInfo{producerID: 3, baseSequence: 0, records: 1}, 7, 7, 1000)
	s.apply(data(4, 0, 0), 8, 8, 1000)
	s.apply(marker(4, 0, 9), 9, 9, 1000)
	s.apply(data(4, 0, 1), 10, 10, 1000)

	want := map[int64]int32{1: 2, 2: -1, 3: -1, 4: 9}
	st, err := unmarshalProducerState(s.marshal())
	if err != nil {
		t.Fatal(err)
	}
	if s.marshal()[0] != producerSnapshotVersion || producerSnapshotVersion != 4 {
		t.Fatalf("snapshot version %d", s.marshal()[0])
	}
	for id, ce := range want {
		e := st.m[id]
		if e == nil || e.coordinatorEpoch != ce || e.txnFirstOffset != s.m[id].txnFirstOffset || e.epoch != s.m[id].epoch || e.lastSeq() != s.m[id].lastSeq() {
			t.Fatalf("v4 round trip of producer %d: %+v, want coordinator epoch %d like %+v", id, e, ce, s.m[id])
		}
	}
	// The fencing holds after the round trip.
	if err := st.check(marker(4, 0, 8)); !errors.Is(err, errTxnCoordinatorFenced) {
		t.Fatalf("after the round trip, older coordinator: %v", err)
	}
	// Version 3 (and 1, 2) snapshots load with -1 for every producer.
	st, err = unmarshalProducerState(marshalProducerStateV3(s))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.m) != len(want) || st.firstUnstable() != 10 {
		t.Fatalf("v3 snapshot: %d producers, first unstable %d", len(st.m), st.firstUnstable())
	}
	for id, e := range st.m {
		if e.coordinatorEpoch != -1 {
			t.Fatalf("v3 snapshot: producer %d has coordinator epoch %d", id, e.coordinatorEpoch)
		}
	}
	if err := st.check(marker(4, 0, 0)); err != nil {
		t.Fatalf("v3 snapshot fences %v", err)
	}
	v1 := []byte{1}
	v1 = binary.AppendUvarint(v1, 1)
	v1 = binary.BigEndian.AppendUint64(v1, 3)
	v1 = binary.BigEndian.AppendUint16(v1, 0)
	v1 = binary.BigEndian.AppendUint64(v1, 1000)
	v1 = append(v1, 0)
	if st, err := unmarshalProducerState(v1); err != nil || st.m[3] == nil || st.m[3].coordinatorEpoch != -1 || st.m[3].txnFirstOffset != -1 {
		t.Fatalf("v1 snapshot: %+v %v", st, err)
	}
	// A version 4 snapshot cut short, or with an epoch below -1, is
	// refused; so is a version from the future.
	v4 := s.marshal()
	for _, bad := range [][]byte{
		v4[:len(v4)-1],
		append(append([]byte(nil), v4[:len(v4)-4]...), 0xff, 0xff, 0xff, 0xfe),
		append([]byte{producerSnapshotVersion + 1}, v4[1:]...),
	} {
		if _, err := unmarshalProducerState(bad); !errors.Is(err, errBadSnapshot) {
			t.Fatalf("bad snapshot accepted: %v", err)
		}
	}
}

// TestOpenTxnSet: the set of open transactions the last stable offset is
// computed from stays the producers whose transaction is open, through
// appends, markers, expiry and a snapshot round trip; firstUnstable and
// aborts answer as a scan of every producer would.
func TestOpenTxnSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newProducerState()
	scan := func(st *producerState, except int64) int64 {
		first := int64(-1)
		for id, e := range st.m {
			if id != except && e.txnFirstOffset >= 0 && (first < 0 || e.txnFirstOffset < first) {
				first = e.txnFirstOffset
			}
		}
		return first
	}
	check := func(st *producerState, step int) {
		t.Helper()
		n := 0
		for id, e := range st.m {
			if _, ok := st.open[id]; ok != (e.txnFirstOffset >= 0) {
				t.Fatalf("step %d: producer %d open=%v but txnFirstOffset=%d", step, id, ok, e.txnFirstOffset)
			}
			if e.txnFirstOffset >= 0 {
				n++
			}
		}
		if len(st.open) != n {
			t.Fatalf("step %d: %d open entries, %d open transactions", step, len(st.open), n)
		}
		if got, want := st.firstUnstable(), scan(st, -1); got != want {
			t.Fatalf("step %d: firstUnstable %d, want %d", step, got, want)
		}
	}
	offset := int64(0)
	for step := 0; step < 5000; step++ {
		id := int64(rng.IntN(40))
		b := batchInfo{producerID: id, baseSequence: -1, records: 1, maxTimestamp: offset}
		switch rng.IntN(4) {
		case 0, 1:
			b.transactional = true
		case 2:
			b.control, b.commit = true, rng.IntN(2) == 0
			if a, ok := s.aborts(b, offset); ok {
				want := offset + 1
				if f := scan(s, id); f >= 0 && f < want {
					want = f
				}
				if a.LastStableOffset != want {
					t.Fatalf("step %d: abort's last stable offset %d, want %d", step, a.LastStableOffset, want)
				}
			}
		default:
			if rng.IntN(50) == 0 {
				s.expire(offset - 100)
				check(s, step)
			}
		}
		s.apply(b, offset, offset, offset)
		offset++
		check(s, step)
		if step%500 == 0 {
			again, err := unmarshalProducerState(s.marshal())
			if err != nil {
				t.Fatal(err)
			}
			check(again, step)
			s = again
		}
	}
}

// The verification guard is per producer epoch: a late marker of an older
// epoch (a fenced transaction's abort, retried after a coordinator
// failover) does not end the newer epoch's verification, nor does a
// zombie's request take the guard over; a marker of the guard's epoch ends
// it. Before, any marker of the producer id removed it, and the live
// producer's verified TxnOffsetCommit was refused INVALID_TXN_STATE.
func TestVerificationGuardIsPerEpoch(t *testing.T) {
	s := newProducerState()
	g := s.verification(7, 10, 1000)
	if z := s.verification(7, 4, 1000); z == g || s.verifying[7] != g {
		t.Fatal("an older epoch's verification took the guard over")
	}
	if again := s.verification(7, 10, 1000); again != g {
		t.Fatal("the same epoch got another guard")
	}
	s.apply(batchInfo{producerID: 7, producerEpoch: 5, baseSequence: -1, records: 1, transactional: true, control: true}, 0, 0, 1000)
	if s.verifying[7] != g {
		t.Fatal("a marker of an older epoch ended the guard")
	}
	verified := batchInfo{producerID: 7, producerEpoch: 10, baseSequence: 0, records: 1, transactional: true, verify: true, guard: g}
	if err := s.check(verified); err != nil {
		t.Fatalf("the verified write of epoch 10 after an old marker: %v", err)
	}
	s.apply(batchInfo{producerID: 7, producerEpoch: 10, baseSequence: -1, records: 1, transactional: true, control: true}, 1, 1, 1000)
	if s.verifying[7] != nil {
		t.Fatal("a marker of the guard's epoch left it")
	}
	if err := s.check(verified); !errors.Is(err, errTxnNotOpen) {
		t.Fatalf("a write verified before its epoch's marker: %v, want errTxnNotOpen", err)
	}
	// A newer epoch supersedes an older guard.
	old := s.verification(8, 3, 1000)
	if nw := s.verification(8, 4, 1000); nw == old || s.verifying[8] != nw {
		t.Fatal("a newer epoch did not supersede the older guard")
	}
}
