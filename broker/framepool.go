package broker

import (
	"math/bits"
	"sync"
)

// Request frame buffers. A producer sends requests of up to its batch size
// times its partitions (1 MiB and more); reading each into a fresh buffer
// cost the zeroing of the buffer and garbage collections driven by frames
// (two thirds of the bytes the produce benchmark allocated, client
// included). Frames of APIs whose handlers keep nothing of the request
// after they return (apiEntry.reuseFrame; Produce) give their buffer back
// to a free list then.
//
// Classes: four per power of two (sizes 1, 1.25, 1.5 and 1.75 times 2^k),
// so a new buffer is at most a quarter larger than its frame: a frame of
// 1 MiB and a few hundred bytes takes a 1.25 MiB buffer. A frame takes a
// free buffer of its class or of up to frameFallbackClasses classes above
// (at most twice its size): requests spanning several partitions vary in
// size, and an exact class would rarely be free. Frames below
// minPooledFrame (nearly every request but Produce) are allocated as
// before; frames above maxPooledFrame too (rare, and a free list would keep
// their memory).
//
// The free list keeps at most maxIdleFrameBytes; a buffer released beyond
// that is left to the garbage collector. (A sync.Pool per class kept few:
// the collector empties it every other cycle, and the producer's own
// allocations run several cycles per second.) Memory for frames is thus at
// most twice what the memory budget (memBudget) lets in, plus the idle
// maximum.
const (
	minPooledFrame       = 64 << 10
	maxPooledFrame       = 16 << 20
	maxIdleFrameBytes    = 32 << 20
	frameFallbackClasses = 4
)

var (
	minFrameExp     = bits.Len(uint(minPooledFrame-1)) - 1
	frameClassCount = frameClassOf(maxPooledFrame) + 1
)

var framePool struct {
	mu   sync.Mutex
	free [][]*requestFrame // by class
	idle int               // bytes in free
}

func init() { framePool.free = make([][]*requestFrame, frameClassCount) }

// frameClassOf returns the class of a frame of n bytes in
// [minPooledFrame, maxPooledFrame].
func frameClassOf(n int) int {
	e := bits.Len(uint(n-1)) - 1 // 2^e < n <= 2^(e+1)
	step := 1 << e / 4
	q := (n - 1<<e + step - 1) / step // 1..4
	return (e-minFrameExp)*4 + q - 1
}

// frameClassSize is the buffer size of a class.
func frameClassSize(class int) int {
	e := class/4 + minFrameExp
	q := class%4 + 1
	return 1<<e + q*(1<<e/4)
}

// requestFrame is one request frame read from a connection.
type requestFrame struct {
	b     []byte // the frame: header and body
	class int    // the buffer's class; -1: not pooled
}

// newRequestFrame returns a frame of n bytes, with a free buffer when one
// fits. Its contents are not zeroed: the reader fills all n bytes.
func newRequestFrame(n int) *requestFrame {
	if n < minPooledFrame || n > maxPooledFrame {
		return &requestFrame{b: make([]byte, n), class: -1}
	}
	c := frameClassOf(n)
	framePool.mu.Lock()
	for k := c; k < min(c+frameFallbackClasses+1, frameClassCount); k++ {
		if l := len(framePool.free[k]); l > 0 {
			f := framePool.free[k][l-1]
			framePool.free[k][l-1] = nil
			framePool.free[k] = framePool.free[k][:l-1]
			framePool.idle -= cap(f.b)
			framePool.mu.Unlock()
			f.b = f.b[:n]
			return f
		}
	}
	framePool.mu.Unlock()
	return &requestFrame{b: make([]byte, n, frameClassSize(c)), class: c}
}

// release gives the buffer back once nothing refers to the frame's bytes:
// the decoded request (kmsg's []byte fields, a Produce's records, alias
// the frame) and every slice of it must be dead. Under the race detector the
// buffer is overwritten first, so a use after release reads garbage (a
// test fails on the contents) and is reported as a race with that write;
// a second release of one frame panics.
func (f *requestFrame) release() {
	if f == nil || f.class < 0 {
		return
	}
	b := f.b[:cap(f.b)]
	if raceEnabled {
		for i := range b {
			b[i] = 0xdb
		}
	}
	f.b = b
	framePool.mu.Lock()
	defer framePool.mu.Unlock()
	if raceEnabled {
		for _, g := range framePool.free[f.class] {
			if g == f {
				panic("broker: request frame released twice")
			}
		}
	}
	if framePool.idle+cap(b) > maxIdleFrameBytes {
		return
	}
	framePool.free[f.class] = append(framePool.free[f.class], f)
	framePool.idle += cap(b)
}
