package compaction

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Work on a partition's remote log (remote retention, tiered compaction) is
// done by whichever broker holds the partition's lease of that kind. Leases
// live in the metadata log (AcquireLease, RenewLease, ReleaseLease
// commands); the broker implements Leases over its metadata node, since
// compaction may not import metadata.

// LeaseKind names a kind of leased job.
type LeaseKind string

// The leased jobs.
const (
	LeaseCompact   LeaseKind = "compact"   // tiered compaction of a partition's remote log
	LeaseRetention LeaseKind = "retention" // remote retention of a partition
)

// Lease is a granted lease. Token is the fencing token: it grows with every
// grant of the same (kind, partition), and a commit made under the lease
// carries it, so that the metadata state machine refuses the commit of a
// holder whose lease was taken over (a pause, a partition).
type Lease struct {
	Kind      LeaseKind
	Partition string
	Holder    string
	Token     uint64
	Expires   time.Time
}

// Lease errors.
var (
	// ErrLeaseHeld: another holder's lease has not expired.
	ErrLeaseHeld = errors.New("compaction: lease held by another worker")
	// ErrLeaseLost: the lease expired or was taken over; the work done under
	// it must not be committed.
	ErrLeaseLost = errors.New("compaction: lease lost")
)

// Leases grants leases. Methods are safe for concurrent use, block until the
// metadata log answered (or ctx ends), and return errors wrapping
// ErrLeaseHeld or ErrLeaseLost for the refusals above; any other error
// leaves the outcome unknown (the caller retries or gives up the job).
type Leases interface {
	// Acquire takes the lease of kind on partition, for the implementation's
	// lease duration.
	Acquire(ctx context.Context, kind LeaseKind, partition string) (Lease, error)
	// Renew extends a lease, returning it with its new expiry.
	Renew(ctx context.Context, lease Lease) (Lease, error)
	// Release gives the lease up early.
	Release(ctx context.Context, lease Lease) error
}

// RunLeased runs job while holding the lease of kind on partition: it
// acquires the lease, renews it a third of the way to each expiry from a
// goroutine it owns, cancels job's context when a renewal fails or the lease
// would expire before the renewal came back, and releases the lease when job
// returns. It returns job's error, or an error wrapping ErrLeaseLost if the
// lease was lost while job ran (job must then not have committed: it commits
// with lease.Token, which the metadata log refuses once superseded).
func RunLeased(ctx context.Context, leases Leases, kind LeaseKind, partition string, now func() time.Time,
	job func(ctx context.Context, lease Lease) error) error {
	if now == nil {
		now = time.Now
	}
	lease, err := leases.Acquire(ctx, kind, partition)
	if err != nil {
		return err
	}
	jobCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		lost error
		cur  = lease
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			mu.Lock()
			l := cur
			mu.Unlock()
			wait := max(l.Expires.Sub(now())/3, time.Millisecond)
			t := time.NewTimer(wait)
			select {
			case <-done:
				t.Stop()
				return
			case <-jobCtx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			renewCtx, rc := context.WithDeadline(jobCtx, l.Expires)
			next, err := leases.Renew(renewCtx, l)
			rc()
			if err == nil && !next.Expires.After(now()) {
				err = ErrLeaseLost
			}
			if err != nil {
				mu.Lock()
				lost = fmt.Errorf("%w: %s lease of %s: %v", ErrLeaseLost, kind, partition, err)
				mu.Unlock()
				cancel()
				return
			}
			mu.Lock()
			cur = next
			mu.Unlock()
		}
	}()
	jobErr := job(jobCtx, lease)
	close(done)
	wg.Wait()
	mu.Lock()
	l, lostErr := cur, lost
	mu.Unlock()
	if lostErr == nil {
		releaseCtx, rc := context.WithTimeout(context.Background(), 5*time.Second)
		leases.Release(releaseCtx, l) // best effort: an unreleased lease expires
		rc()
		return jobErr
	}
	return lostErr
}
