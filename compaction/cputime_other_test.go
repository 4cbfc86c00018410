//go:build !unix

package compaction

import "time"

// cpuTime is not measured here (0: the CPU figures are left out).
func cpuTime() time.Duration { return 0 }
