package compaction

import (
	"context"
	"sync"
	"time"
)

// throttler limits the cleaners' I/O to a rate (log.cleaner.io.max.bytes.per.second),
// shared by every cleaner of a Manager, as Kafka's Throttler: bytes are
// counted as they are read or written, and a caller that runs ahead of the
// rate waits until the rate catches up. Safe for concurrent use.
type throttler struct {
	rate  float64 // bytes per second; <= 0: no limit (under mu: setRate)
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu    sync.Mutex
	start time.Time // of the current window
	bytes float64   // counted in the window
}

const throttleWindow = 300 * time.Millisecond

func newThrottler(rate float64, now func() time.Time) *throttler {
	return &throttler{rate: rate, now: now, sleep: sleepCtx}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// delay counts n bytes and returns how long the caller must wait to stay
// under the rate.
func (t *throttler) delay(n int64) time.Duration {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rate <= 0 {
		return 0
	}
	now := t.now()
	if t.start.IsZero() {
		t.start = now
	}
	t.bytes += float64(n)
	elapsed := now.Sub(t.start)
	if elapsed < throttleWindow && t.bytes < t.rate*throttleWindow.Seconds() {
		return 0
	}
	need := time.Duration(t.bytes / t.rate * float64(time.Second))
	wait := need - elapsed
	// Start a new window from when the wait ends.
	t.start, t.bytes = now.Add(max(wait, 0)), 0
	return max(wait, 0)
}

// setRate changes the rate (bytes per second, <= 0: no limit) from the next
// window on.
func (t *throttler) setRate(rate float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if rate != t.rate {
		t.rate, t.start, t.bytes = rate, time.Time{}, 0
	}
}

// wait counts n bytes and sleeps as long as the rate requires.
func (t *throttler) wait(ctx context.Context, n int64) error {
	d := t.delay(n)
	if d <= 0 {
		return ctx.Err()
	}
	return t.sleep(ctx, d)
}
