package compaction

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeLeases is a lease table in memory: one holder per (kind, partition),
// a fencing token per grant, renewals that can be made to fail (a fault
// injected by the test).
type fakeLeases struct {
	mu        sync.Mutex
	ttl       time.Duration
	holder    string
	tokens    map[string]uint64
	held      map[string]Lease
	failRenew bool
	renewals  int
	released  int
}

func newFakeLeases(holder string, ttl time.Duration) *fakeLeases {
	return &fakeLeases{holder: holder, ttl: ttl, tokens: map[string]uint64{}, held: map[string]Lease{}}
}

func (f *fakeLeases) Acquire(_ context.Context, kind LeaseKind, p string) (Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := string(kind) + "/" + p
	if l, ok := f.held[k]; ok && l.Expires.After(time.Now()) {
		return Lease{}, ErrLeaseHeld
	}
	f.tokens[k]++
	l := Lease{Kind: kind, Partition: p, Holder: f.holder, Token: f.tokens[k], Expires: time.Now().Add(f.ttl)}
	f.held[k] = l
	return l, nil
}

func (f *fakeLeases) Renew(_ context.Context, l Lease) (Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := string(l.Kind) + "/" + l.Partition
	if f.failRenew || f.held[k].Token != l.Token {
		return Lease{}, ErrLeaseLost
	}
	f.renewals++
	l.Expires = time.Now().Add(f.ttl)
	f.held[k] = l
	return l, nil
}

func (f *fakeLeases) Release(_ context.Context, l Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := string(l.Kind) + "/" + l.Partition
	if f.held[k].Token == l.Token {
		delete(f.held, k)
		f.released++
	}
	return nil
}

func TestRunLeasedRenewsAndReleases(t *testing.T) {
	// The lease must still be held (by wall clock) when the job tries the
	// second acquire: a TTL with room for a stalled goroutine on a loaded
	// machine.
	f := newFakeLeases("b1", time.Second)
	err := RunLeased(context.Background(), f, LeaseCompact, "t-0", nil, func(ctx context.Context, l Lease) error {
		if l.Token != 1 {
			t.Errorf("token %d", l.Token)
		}
		// A second worker cannot take it meanwhile.
		if _, err := f.Acquire(ctx, LeaseCompact, "t-0"); !errors.Is(err, ErrLeaseHeld) {
			t.Errorf("second acquire: %v", err)
		}
		waitFor(t, "renewals", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.renewals >= 3 })
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.released != 1 {
		t.Fatal("lease not released")
	}
	// The next grant has a larger token.
	l, err := f.Acquire(context.Background(), LeaseCompact, "t-0")
	if err != nil || l.Token != 2 {
		t.Fatalf("next grant: %+v %v", l, err)
	}
}

func TestRunLeasedLostLeaseCancelsJob(t *testing.T) {
	f := newFakeLeases("b1", 300*time.Millisecond)
	err := RunLeased(context.Background(), f, LeaseRetention, "t-1", nil, func(ctx context.Context, l Lease) error {
		f.mu.Lock()
		f.failRenew = true
		f.mu.Unlock()
		<-ctx.Done() // cancelled when the renewal fails
		return ctx.Err()
	})
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("lost lease: %v", err)
	}
	if f.released != 0 {
		t.Fatal("a lost lease was released")
	}
}
