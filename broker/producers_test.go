package broker

import (
	"errors"
	"testing"
)

func TestProducerStateSequences(t *testing.T) {
	s := newProducerState()
	b := func(epoch int16, seq, n int32) batchInfo {
		return batchInfo{producerID: 1, producerEpoch: epoch, baseSequence: seq, records: n}
	}
	if err := s.check(b(0, 3, 1)); !errors.Is(err, errOutOfOrderSequence) {
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
}
