package failpoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sediment-io/sediment/internal/testutil"
)

func TestPause(t *testing.T) {
	d := t.TempDir()
	old := dir
	dir = d
	t.Cleanup(func() { dir = old })
	ctx := context.Background()

	// Not armed: no pause, detail not computed.
	Pause(ctx, "point", func() []byte { t.Fatal("detail computed without arming"); return nil })

	if err := os.WriteFile(filepath.Join(d, "point"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Pause(ctx, "point", func() []byte { return []byte("hello") })
	}()
	var paused string
	testutil.WaitFor(t, 10*time.Second, "the pause", func() bool {
		m, _ := filepath.Glob(filepath.Join(d, "point.*.paused"))
		if len(m) == 1 {
			paused = m[0]
		}
		return paused != ""
	})
	if b, err := os.ReadFile(paused); err != nil || string(b) != "hello" {
		t.Fatalf("paused file: %q, %v", b, err)
	}
	select {
	case <-done:
		t.Fatal("Pause returned while the paused file exists")
	default:
	}
	// Disarmed after one claim: a second caller goes on at once.
	Pause(ctx, "point", nil)
	if err := os.Remove(paused); err != nil {
		t.Fatal(err)
	}
	<-done

	// ctx ends a pause.
	if err := os.WriteFile(filepath.Join(d, "point"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		Pause(cctx, "point", nil)
	}()
	testutil.WaitFor(t, 10*time.Second, "the second pause", func() bool {
		m, _ := filepath.Glob(filepath.Join(d, "point.*.paused"))
		return len(m) == 1
	})
	cancel()
	<-returned
}
