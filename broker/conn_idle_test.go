package broker

import (
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestIdleConnectionMemory: a connection that has been answered and is idle
// holds no write buffer (it takes one from a pool while it has replies to
// send): 300 idle connections cost well under 64 KiB each on the heap. Each
// held a 64 KiB bufio.Writer for its life (an operator review: about
// 130 KB of heap per idle connection, 2 000 of them 260 MB).
func TestIdleConnectionMemory(t *testing.T) {
	b := startBroker(t, "")
	const n = 300
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := range n {
		nc := dial(t, b)
		rawRequest(t, nc, kmsg.NewPtrApiVersionsRequest(), int32(i))
	}
	after := heap()
	per := int64(after-before) / n
	t.Logf("heap per idle connection: %d bytes (%d connections)", per, n)
	if per > 40<<10 {
		t.Fatalf("%d bytes of heap per idle connection, want well under the 64 KiB write buffer", per)
	}
}
