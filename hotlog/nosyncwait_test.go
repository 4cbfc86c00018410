package hotlog

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
)

// TestNoSyncWait: under FlushEveryCommit a NoSyncWait append returns while
// its fsync is held up, the durable end stays behind until that fsync
// finishes, and then OnDurable reports it; a waiting append is durable when
// it returns. A truncation resets the durable end to the new log end.
func TestNoSyncWait(t *testing.T) {
	var hold atomic.Bool
	release := make(chan struct{})
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpFileSync && strings.HasSuffix(path, ".log") && hold.Load() {
			<-release
		}
		return nil
	}))
	durable := make(chan int64, 100)
	l, err := Open(Options{FS: fs, Dir: "/p", Config: Config{Flush: FlushEveryCommit}, Logger: quiet,
		OnDurable: func(end int64) { durable <- end }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	res, err := l.Append(simpleBatch(3, 10, 1), AppendOptions{})
	if err != nil || res.SyncPending {
		t.Fatalf("waiting append: %+v %v", res, err)
	}
	if got := l.DurableEnd(); got != 3 {
		t.Fatalf("durable end after a waiting append %d, want 3", got)
	}

	hold.Store(true)
	done := make(chan AppendResult, 1)
	go func() {
		res, err := l.Append(simpleBatch(2, 10, 2), AppendOptions{NoSyncWait: true})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var res2 AppendResult
	select {
	case res2 = <-done: // returned although the fsync is held
	case <-time.After(10 * time.Second):
		t.Fatal("NoSyncWait append waited for the held fsync")
	}
	if !res2.SyncPending || res2.LastOffset != 4 || l.LogEndOffset() != 5 {
		t.Fatalf("NoSyncWait append: %+v, log end %d", res2, l.LogEndOffset())
	}
	if got := l.DurableEnd(); got != 3 {
		t.Fatalf("durable end %d before the fsync finished, want 3", got)
	}
	hold.Store(false)
	close(release)
	testutil.WaitFor(t, 10*time.Second, "OnDurable(5)", func() bool {
		for {
			select {
			case end := <-durable:
				if end == 5 {
					return true
				}
			default:
				return false
			}
		}
	})
	if got := l.DurableEnd(); got != 5 {
		t.Fatalf("durable end %d after the fsync, want 5", got)
	}

	// Another append, then a truncation below it: the durable end follows
	// the cut, never above the log end.
	if _, err := l.Append(simpleBatch(2, 10, 3), AppendOptions{NoSyncWait: true}); err != nil {
		t.Fatal(err)
	}
	if err := l.TruncateTo(3); err != nil {
		t.Fatal(err)
	}
	if got := l.DurableEnd(); got != 3 || l.LogEndOffset() != 3 {
		t.Fatalf("after truncation: durable end %d, log end %d, want 3", got, l.LogEndOffset())
	}
	// The next append's fsync moves it on from there.
	if _, err := l.Append(simpleBatch(2, 10, 4), AppendOptions{NoSyncWait: true}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "durable end 5 after the truncation", func() bool { return l.DurableEnd() == 5 })
}
