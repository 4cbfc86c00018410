package group

import "time"

// Clock is the coordinator's source of time. Session, rebalance, sync and
// retention timeouts all go through it, so tests drive them with a fake.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine (or, for a fake clock, from
	// the goroutine that advances time) once d has passed. stop prevents a
	// call that has not started and reports whether it did.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
