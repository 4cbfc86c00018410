package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The data directory belongs to one broker process at a time. New takes an
// exclusive, non-blocking flock(2) on DATA-DIR/.lock (as Kafka does with
// log.dirs/.lock) before it opens anything else there, and writes its pid
// into the file so that a second broker can say who holds it. The kernel
// drops the lock when the holder exits, however it exits, so a stale file
// after a crash never blocks a restart; Close releases it last.
//
// Without it, a second broker on the same directory would block forever
// inside the metadata log's own (blocking) lock.

// ErrDataDirInUse is returned by New when another process holds the data
// directory.
var ErrDataDirInUse = errors.New("broker: data directory in use")

const lockFileName = ".lock"

// dataDirInUseError names the directory and its holder; errors.Is matches
// it to ErrDataDirInUse.
type dataDirInUseError struct{ msg string }

func (e *dataDirInUseError) Error() string        { return e.msg }
func (e *dataDirInUseError) Is(target error) bool { return target == ErrDataDirInUse }

type dirLock struct{ f *os.File }

func lockDataDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("broker: data directory: %w", err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("broker: data directory lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if b, rerr := os.ReadFile(path); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
					holder = "pid " + strconv.Itoa(pid)
				}
			}
			abs, aerr := filepath.Abs(dir)
			if aerr != nil {
				abs = dir
			}
			return nil, &dataDirInUseError{msg: fmt.Sprintf("broker: data directory %s is in use by %s (it holds %s); stop that broker or choose another data-dir",
				abs, holder, filepath.Join(abs, lockFileName))}
		}
		return nil, fmt.Errorf("broker: lock data directory %s: %w", dir, err)
	}
	// Ours: record who holds it (a diagnostic, the flock is the lock).
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// release drops the lock; the file stays (removing it would race with a
// broker that just opened it).
func (l *dirLock) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
