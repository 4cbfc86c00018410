package faulty_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/faulty"
	"github.com/sediment-io/sediment/objectstore/fs"
	"github.com/sediment-io/sediment/objectstore/mem"
	"github.com/sediment-io/sediment/objectstore/objectstoretest"
)

func newFS(t *testing.T) objectstore.Store {
	s, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// With no rules the wrapper is transparent.
func TestConformanceNoFaults(t *testing.T) {
	objectstoretest.Run(t, func(t *testing.T) objectstore.Store { return faulty.Wrap(newFS(t), 1) }, objectstoretest.Options{})
}

// With transient faults on every retryable call, WithRetry makes the
// wrapper pass the whole suite: retries recover from injected faults.
func TestConformanceRetriedFaults(t *testing.T) {
	var stores []*faulty.Store
	objectstoretest.Run(t, func(t *testing.T) objectstore.Store {
		f := faulty.Wrap(newFS(t), 42,
			faulty.Rule{Ops: faulty.OpReadAt | faulty.OpReadRange, Probability: 0.2, Truncate: true},
			faulty.Rule{Ops: faulty.OpRead | faulty.OpHead | faulty.OpList | faulty.OpDelete | faulty.OpCreate, Probability: 0.25},
			faulty.Rule{Ops: faulty.OpHead | faulty.OpList, Probability: 0.2, Throttle: true, Latency: time.Millisecond},
		)
		stores = append(stores, f)
		return objectstore.WithRetry(f, objectstore.RetryOptions{MaxAttempts: 12, BaseBackoff: time.Microsecond, MaxBackoff: time.Millisecond})
	}, objectstoretest.Options{})
	total := 0
	for _, f := range stores {
		total += f.Injected(faulty.OpAll)
	}
	if total < 50 {
		t.Fatalf("only %d faults injected; the test proves little", total)
	}
	t.Logf("%d faults injected and recovered from", total)
}

func TestRulesAfterTimes(t *testing.T) {
	ctx := t.Context()
	f := faulty.Wrap(mem.New(nil), 1, faulty.Rule{Ops: faulty.OpHead, After: 2, Times: 3})
	objectstore.PutBytes(ctx, f, "k", []byte("v"), objectstore.CreateOptions{})
	var pattern []bool
	for range 8 {
		_, err := f.Head(ctx, "k")
		if err != nil && !errors.Is(err, faulty.ErrInjected) {
			t.Fatal(err)
		}
		pattern = append(pattern, err != nil)
	}
	want := []bool{false, false, true, true, true, false, false, false}
	for i := range want {
		if pattern[i] != want[i] {
			t.Fatalf("failures %v, want %v", pattern, want)
		}
	}
	if f.Injected(faulty.OpHead) != 3 || f.Injected(faulty.OpList) != 0 {
		t.Fatalf("Injected = %d", f.Injected(faulty.OpHead))
	}
	if _, err := f.Head(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(faulty.ErrInjected, objectstore.ErrUnavailable) || !errors.Is(faulty.ErrThrottled, objectstore.ErrUnavailable) {
		t.Fatal("injected errors must be transient")
	}
}

func TestSeedDeterminism(t *testing.T) {
	run := func(seed uint64) []bool {
		f := faulty.Wrap(mem.New(nil), seed, faulty.Rule{Probability: 0.5})
		var out []bool
		for range 64 {
			_, err := f.Head(t.Context(), "k")
			out = append(out, errors.Is(err, faulty.ErrInjected))
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	same := func(x, y []bool) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Fatal("same seed, different faults")
	}
	if same(a, c) {
		t.Fatal("different seeds, same 64 faults")
	}
}

func TestKeyPrefixAndSetRules(t *testing.T) {
	ctx := t.Context()
	f := faulty.Wrap(mem.New(nil), 1, faulty.Rule{KeyPrefix: "bad/"})
	if err := objectstore.PutBytes(ctx, f, "good/x", []byte("v"), objectstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := objectstore.PutBytes(ctx, f, "bad/x", []byte("v"), objectstore.CreateOptions{}); !errors.Is(err, objectstore.ErrUnavailable) {
		t.Fatalf("put bad/x = %v", err)
	}
	f.SetRules() // the bucket is back
	if err := objectstore.PutBytes(ctx, f, "bad/x", []byte("v"), objectstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestCommitFaults(t *testing.T) {
	ctx := t.Context()
	inner := mem.New(nil)
	f := faulty.Wrap(inner, 1, faulty.Rule{Ops: faulty.OpCommit, Times: 1})
	if err := objectstore.PutBytes(ctx, f, "a", []byte("v"), objectstore.CreateOptions{}); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("commit = %v", err)
	}
	if _, err := inner.Head(ctx, "a"); !objectstore.IsNotExist(err) {
		t.Fatalf("a failed commit left an object: %v", err)
	}
	// A lost acknowledgement: the object is there, the caller heard an error.
	f.SetRules(faulty.Rule{Ops: faulty.OpCommit, LostAck: true, Times: 1})
	if err := objectstore.PutBytes(ctx, f, "b", []byte("v"), objectstore.CreateOptions{}); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("commit = %v", err)
	}
	if got, err := objectstore.ReadAll(ctx, inner, "b", 10); err != nil || string(got) != "v" {
		t.Fatalf("after a lost ack: %q %v", got, err)
	}
	f.SetRules(faulty.Rule{Ops: faulty.OpWrite, After: 1, Times: 1})
	w, _ := f.CreateObject(ctx, "c", objectstore.CreateOptions{})
	if _, err := w.Write([]byte("1")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("2")); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("second write = %v", err)
	}
	w.Abort()
}

func TestReadFaults(t *testing.T) {
	ctx := t.Context()
	data := objectstoretest.Data(1, 1000)
	f := faulty.Wrap(mem.New(nil), 1)
	objectstore.PutBytes(ctx, f, "k", data, objectstore.CreateOptions{})
	r, _, err := f.ReadObject(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	f.SetRules(faulty.Rule{Ops: faulty.OpReadAt, Truncate: true, Times: 1})
	p := make([]byte, 100)
	if err := r.ReadAt(ctx, p, 0); !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, objectstore.ErrUnavailable) {
		t.Fatalf("truncated ReadAt = %v", err)
	}
	f.SetRules(faulty.Rule{Ops: faulty.OpReadRange, Truncate: true, Times: 1})
	rc, err := r.ReadRange(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != 500 || !bytes.Equal(got, data[:500]) {
		t.Fatalf("truncated ReadRange: %d bytes, %v", len(got), err)
	}
	f.SetRules(faulty.Rule{Ops: faulty.OpReadAt | faulty.OpReadRange, Corrupt: true})
	if err := r.ReadAt(ctx, p, 0); err != nil || bytes.Equal(p, data[:100]) {
		t.Fatalf("corrupt ReadAt: %v, equal %v", err, bytes.Equal(p, data[:100]))
	}
	rc, _ = r.ReadRange(ctx, 0, 1000)
	got, err = io.ReadAll(rc)
	rc.Close()
	if err != nil || len(got) != 1000 || bytes.Equal(got, data) {
		t.Fatalf("corrupt ReadRange: %d bytes, %v", len(got), err)
	}
	// Latency ends with the context.
	f.SetRules(faulty.Rule{Ops: faulty.OpHead, Latency: time.Hour})
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := f.Head(cctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Head with latency = %v", err)
	}
}

// WithRetry gives up after MaxAttempts and keeps the cause.
func TestRetryGivesUp(t *testing.T) {
	f := faulty.Wrap(mem.New(nil), 1, faulty.Rule{Ops: faulty.OpList})
	s := objectstore.WithRetry(f, objectstore.RetryOptions{MaxAttempts: 4, BaseBackoff: time.Microsecond})
	_, err := s.List(t.Context(), "", "")
	if !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("List = %v", err)
	}
	if n := f.Injected(faulty.OpList); n != 4 {
		t.Fatalf("%d attempts, want 4", n)
	}
	// Permanent errors are not retried.
	f.SetRules(faulty.Rule{Ops: faulty.OpList, Err: objectstore.ErrInvalidKey})
	if _, err := s.List(t.Context(), "", ""); !errors.Is(err, objectstore.ErrInvalidKey) {
		t.Fatal(err)
	}
	if n := f.Injected(faulty.OpList); n != 5 {
		t.Fatalf("%d attempts in all, want 5", n)
	}
}

// A held call waits until the hold is released (then goes on), or until its
// context ends.
func TestHold(t *testing.T) {
	ctx := t.Context()
	f := faulty.Wrap(mem.New(nil), 1)
	if err := objectstore.PutBytes(ctx, f, "k", []byte("v"), objectstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	f.SetRules(faulty.Rule{Ops: faulty.OpHead, Hold: hold})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.Head(cctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("held Head with its context done = %v", err)
	}
	type result struct {
		info objectstore.ObjectInfo
		err  error
	}
	done := make(chan result, 1)
	go func() {
		info, err := f.Head(ctx, "k")
		done <- result{info, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Head not held: %+v %v", r.info, r.err)
	case <-time.After(20 * time.Millisecond): // can only miss a call not held
	}
	close(hold)
	if r := <-done; r.err != nil || r.info.Size != 1 {
		t.Fatalf("Head once released: %+v %v", r.info, r.err)
	}
	if n := f.Injected(faulty.OpHead); n != 2 {
		t.Fatalf("%d held calls counted, want 2", n)
	}
}
