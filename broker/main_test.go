package broker

import (
	"bytes"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package when a test leaves a broker running: its
// goroutines (the metadata log's WAL, the cleaners, the listeners) would
// otherwise live on through every later test, slowing them and hiding
// which test forgot to close what.
func TestMain(m *testing.M) {
	code := m.Run()
	if leaked := leakedBrokerGoroutines(5 * time.Second); leaked != "" {
		fmt.Fprintf(os.Stderr, "FAIL: broker goroutines left running after every test ended:\n%s", leaked)
		code = 1
	}
	os.Exit(code)
}

// leakedBrokerGoroutines returns the stacks of goroutines that belong to a
// broker (metadata raft-wal, compaction cleaners, broker loops) still
// running after wait, or "" when there are none.
func leakedBrokerGoroutines(wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for {
		var buf bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
		var leaked []string
		for _, g := range strings.Split(buf.String(), "\n\n") {
			if strings.Contains(g, "raft-wal.(*WAL).runRotate") || strings.Contains(g, "compaction.(*Manager).cleanLoop") ||
				strings.Contains(g, "sediment/broker.(*Broker)") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n") + "\n"
		}
		time.Sleep(50 * time.Millisecond)
	}
}
