package reqtime

import (
	"context"
	"testing"
	"time"
)

// fakeNow is a clock the test moves by hand.
type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time          { return f.t }
func (f *fakeNow) advance(d time.Duration) { f.t = f.t.Add(d) }
func withFake(ctx context.Context) (context.Context, *Clock, *fakeNow) {
	ctx, c := With(ctx)
	f := &fakeNow{t: time.Unix(1000, 0)}
	c.now = f.now
	return ctx, c, f
}

func TestWaitsAreSubtracted(t *testing.T) {
	ctx, c, f := withFake(context.Background())
	start := f.now()
	f.advance(3 * time.Millisecond) // working
	done := Wait(ctx)
	f.advance(100 * time.Millisecond) // a long poll
	if got := c.Working(start); got != 3*time.Millisecond {
		t.Fatalf("working during an open wait = %v, want 3ms", got)
	}
	done()
	done() // a second call changes nothing
	f.advance(2 * time.Millisecond)
	if got := c.Waited(); got != 100*time.Millisecond {
		t.Fatalf("waited = %v, want 100ms", got)
	}
	if got := c.Working(start); got != 5*time.Millisecond {
		t.Fatalf("working = %v, want 5ms", got)
	}
}

func TestOverlappingWaitsCountOnce(t *testing.T) {
	ctx, c, f := withFake(context.Background())
	start := f.now()
	a := Wait(ctx)
	f.advance(10 * time.Millisecond)
	b := Wait(ctx) // a second partition's wait, overlapping the first
	f.advance(10 * time.Millisecond)
	a()
	f.advance(10 * time.Millisecond)
	b()
	f.advance(1 * time.Millisecond)
	if got := c.Waited(); got != 30*time.Millisecond {
		t.Fatalf("waited = %v, want 30ms (the union of the two waits)", got)
	}
	if got := c.Working(start); got != time.Millisecond {
		t.Fatalf("working = %v, want 1ms", got)
	}
}

func TestWaitWithoutClock(t *testing.T) {
	done := Wait(context.Background())
	done() // nothing to count, nothing to panic about
}
