// Package failpoint stops a process at a named point of its work, for tests
// that drive real broker processes (e2e): the test learns that the process
// reached the point, does what it needs (SIGKILL it, SIGSTOP it, move
// leadership away), and lets it go on, without guessing the moment with
// sleeps.
//
// It is off, and Pause returns at once, unless the environment variable
// SEDIMENT_FAILPOINT_DIR names a folder when the process starts. Then:
//
//	DIR/<name>                  created by the test: the failpoint is armed
//	DIR/<name>.<pid>.claimed    the process that reached it first renamed the
//	                            arm file to this (rename is atomic: one claim)
//	DIR/<name>.<pid>.paused     written by that process (the detail, e.g.
//	                            JSON) once it waits; the test deletes it to
//	                            let the process go on
//
// One arming pauses one process once; a process that finds no arm file goes
// on. Production code calls Pause only at points named in
// docs/operations.md ("Failpoints").
package failpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// EnvDir is the environment variable that turns failpoints on.
const EnvDir = "SEDIMENT_FAILPOINT_DIR"

var dir = os.Getenv(EnvDir)

// Enabled reports whether failpoints are on in this process.
func Enabled() bool { return dir != "" }

// Pause stops the caller at failpoint name if a test armed it: it writes
// detail() (called only then) to the paused file and waits until the test
// deletes that file or ctx ends. It returns at once when failpoints are off
// or name is not armed.
func Pause(ctx context.Context, name string, detail func() []byte) {
	if dir == "" {
		return
	}
	pid := os.Getpid()
	claimed := filepath.Join(dir, fmt.Sprintf("%s.%d.claimed", name, pid))
	if err := os.Rename(filepath.Join(dir, name), claimed); err != nil {
		return // not armed, or another process claimed it
	}
	paused := filepath.Join(dir, fmt.Sprintf("%s.%d.paused", name, pid))
	var data []byte
	if detail != nil {
		data = detail()
	}
	tmp := paused + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil || os.Rename(tmp, paused) != nil {
		return
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(paused); os.IsNotExist(err) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
