//go:build unix

package compaction

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) the process used so far: on a
// shared machine the benchmark compares CPU times beside wall times, since
// a long pass loses more of its wall time to other jobs than a short read.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
