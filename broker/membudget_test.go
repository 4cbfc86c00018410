package broker

import (
	"context"
	"testing"
)

func TestMemBudget(t *testing.T) {
	m := newMemBudget(100)
	ctx := context.Background()
	if !m.acquire(ctx, 60) || !m.acquire(ctx, 40) {
		t.Fatal("acquire within the limit failed")
	}
	got := make(chan bool)
	go func() { got <- m.acquire(ctx, 50) }()
	m.release(40) // 60 used: 50 does not fit yet
	m.release(60)
	if !<-got {
		t.Fatal("acquire after release failed")
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { got <- m.acquire(cctx, 80) }()
	cancel()
	if <-got {
		t.Fatal("acquire succeeded over the limit after its context ended")
	}
	// A broker with a tiny budget still serves requests one at a time.
	b := startBroker(t, "", func(c *Config) { c.SocketRequestMaxBytes = 1 << 20; c.QueuedMaxRequestBytes = 1 })
	if b.cfg.QueuedMaxRequestBytes != 1<<20 {
		t.Fatalf("budget %d below the frame bound", b.cfg.QueuedMaxRequestBytes)
	}
	createTopic(t, b, "budget", 2, nil)
	cl := newClient(t, b)
	want := produceAll(t, cl, makeRecords("budget", 300, "b"))
	sameRecords(t, want, consumeN(t, b, "budget", 300))
	m = b.budget
	m.mu.Lock()
	used, limit := m.used, m.limit
	m.mu.Unlock()
	if used > limit {
		t.Fatalf("budget overrun: %d > %d", used, limit)
	}
}
