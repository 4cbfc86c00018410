package broker

import (
	"context"
	"sync"
)

// memBudget bounds the bytes of requests read but not yet handled, across
// all connections (Kafka's queued.max.request.bytes). A reader acquires a
// frame's size before allocating it and the handler's completion releases
// it, so a flood of large requests waits instead of exhausting memory.
type memBudget struct {
	mu    sync.Mutex
	cond  *sync.Cond
	limit int64
	used  int64
}

func newMemBudget(limit int64) *memBudget {
	m := &memBudget{limit: limit}
	m.cond = sync.NewCond(&m.mu)
	return m
}

// acquire waits until n bytes fit (n ≤ limit is guaranteed by the caller's
// frame bound) or ctx ends.
func (m *memBudget) acquire(ctx context.Context, n int64) bool {
	stop := context.AfterFunc(ctx, func() {
		m.mu.Lock()
		m.cond.Broadcast()
		m.mu.Unlock()
	})
	defer stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.used+n > m.limit {
		if ctx.Err() != nil {
			return false
		}
		m.cond.Wait()
	}
	m.used += n
	return true
}

// overdraw takes n bytes without waiting, past the limit if need be: the
// growth of a frame partly read (readFrame), which is real bytes come from
// the network, must not wait for other frames partly read, or they could
// all wait for each other.
func (m *memBudget) overdraw(n int64) {
	m.mu.Lock()
	m.used += n
	m.mu.Unlock()
}

func (m *memBudget) release(n int64) {
	m.mu.Lock()
	m.used -= n
	m.mu.Unlock()
	m.cond.Broadcast()
}
