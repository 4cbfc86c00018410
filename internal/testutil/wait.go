// Package testutil holds small helpers shared by the tests of several rooms.
// It imports nothing of ours, so every room's tests may use it.
package testutil

import (
	"testing"
	"time"
)

// WaitFor polls cond every few milliseconds until it holds, and fails the
// test naming what if timeout passes first. It is for conditions that become
// true as a side effect of other goroutines or processes; it never replaces
// a channel or a WaitGroup where one is available.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}
