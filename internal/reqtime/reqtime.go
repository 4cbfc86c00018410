// Package reqtime tells how long a request's handler worked, as Kafka's
// request quota (KIP-124, request_percentage) counts the time of a request
// handler thread: a Kafka request that waits (a Fetch long poll, a Produce
// for its replicas, a JoinGroup for its rebalance, a controller request for
// the quorum, a remote read) is parked in a purgatory and holds no thread,
// so the time it waits is not charged to the client. A Sediment handler is
// a goroutine that waits in place; it marks those waits with Wait, and the
// quota middleware charges the handler's time less the marked waits.
//
// Waits may nest and overlap (a handler's partitions waiting on several
// goroutines): the clock counts the time during which at least one wait is
// open, once.
package reqtime

import (
	"context"
	"sync"
	"time"
)

// Clock accumulates the waiting time of one request.
type Clock struct {
	mu     sync.Mutex
	open   int       // waits in progress
	since  time.Time // when open went from 0 to 1
	waited time.Duration
	now    func() time.Time
}

type clockKey struct{}

// With returns a context carrying a new clock for one request.
func With(ctx context.Context) (context.Context, *Clock) {
	c := &Clock{now: time.Now}
	return context.WithValue(ctx, clockKey{}, c), c
}

// Wait marks the caller as waiting, from now until the returned function is
// called (once; later calls do nothing). Without a clock in ctx it does
// nothing.
func Wait(ctx context.Context) (done func()) {
	c, _ := ctx.Value(clockKey{}).(*Clock)
	if c == nil {
		return func() {}
	}
	c.mu.Lock()
	if c.open == 0 {
		c.since = c.now()
	}
	c.open++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.open--; c.open == 0 {
				c.waited += c.now().Sub(c.since)
			}
		})
	}
}

// Waited returns the time spent waiting so far, including a wait still
// open.
func (c *Clock) Waited() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waited
	if c.open > 0 {
		w += c.now().Sub(c.since)
	}
	return w
}

// Working returns how much of the elapsed time since start the request
// spent not waiting (never negative).
func (c *Clock) Working(start time.Time) time.Duration {
	return max(c.now().Sub(start)-c.Waited(), 0)
}
