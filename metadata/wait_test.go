package metadata

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRejectedCommandWakesVersionWaiters: a rejected command moves the
// state's version (to its index) without changing anything else, and
// WaitForVersion, and so a follower's Sync (which waits for the version the
// leader last applied, often a rejection: the broker syncs after each refused
// proposal), must wake for it. Before the fix a waiter that had looked at the
// version just before the rejection was applied slept until the next accepted
// command (a heartbeat, or nothing in an idle cluster) or its deadline.
func TestRejectedCommandWakesVersionWaiters(t *testing.T) {
	cfg := fastConfig(t, 1, t.TempDir())
	cfg.Bootstrap = true
	cfg.DisableController = true // nothing else commits meanwhile
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx := testContext(t, 10*time.Second)
	if err := n.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	mustPropose(t, n, &SetClusterID{ClusterID: "c"})

	// What WaitForVersion holds while it waits: the notify channel taken
	// before it found the version short.
	n.watch.Lock()
	notify := n.watch.notify
	n.watch.Unlock()
	before := n.State().Version

	res, err := n.Propose(ctx, &DeleteTopic{Name: "no-such-topic"})
	if !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("DeleteTopic of a missing topic: %v", err)
	}
	if res.Version <= before || n.State().Version < res.Version {
		t.Fatalf("rejection at index %d, state version %d (was %d)", res.Version, n.State().Version, before)
	}
	// Propose returns once the FSM applied the entry, so the waiter must
	// have been woken by now.
	select {
	case <-notify:
	default:
		t.Fatalf("applying the rejection at index %d did not wake the version waiters", res.Version)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := n.WaitForVersion(wctx, res.Version); err != nil {
		t.Fatal(err)
	}
}
