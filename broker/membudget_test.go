package broker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"net"
	"testing"
	"testing/iotest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestMemBudget(t *testing.T) {
	m := newMemBudget(100)
	ctx := context.Background()
	if !m.acquire(ctx, 60) || !m.acquire(ctx, 40) {
		t.Fatal("acquire within the limit failed")
	}
	got := make(chan bool)
	go func() { got <- m.acquire(ctx, 50) }()
	m.release(40) // 60 used: 50 does not fit yet
	m.release(60)
	if !<-got {
		t.Fatal("acquire after release failed")
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { got <- m.acquire(cctx, 80) }()
	cancel()
	if <-got {
		t.Fatal("acquire succeeded over the limit after its context ended")
	}
	// A broker with a tiny budget still serves requests one at a time.
	b := startBroker(t, "", func(c *Config) { c.SocketRequestMaxBytes = 1 << 20; c.QueuedMaxRequestBytes = 1 })
	if b.cfg.QueuedMaxRequestBytes != 1<<20 {
		t.Fatalf("budget %d below the frame bound", b.cfg.QueuedMaxRequestBytes)
	}
	createTopic(t, b, "budget", 2, nil)
	cl := newClient(t, b)
	want := produceAll(t, cl, makeRecords("budget", 300, "b"))
	sameRecords(t, want, consumeN(t, b, "budget", 300))
	m = b.budget
	m.mu.Lock()
	used, limit := m.used, m.limit
	m.mu.Unlock()
	if used > limit {
		t.Fatalf("budget overrun: %d > %d", used, limit)
	}
}

// TestStalledFramesHoldLittleBudget: connections that announce frames as
// large as socket.request.max.bytes and send a few bytes of them hold at
// most eagerFrame each of the request budget, so other clients are served.
// The whole announced size used to be reserved before any of it came: six
// such connections (5 × 100 MiB + 12 MiB, the 512 MiB default budget) held
// it for the idle timeout, and every other client, replication included,
// waited (protocol review). A large frame that does come is read whole, and
// its bytes go back to the budget.
func TestStalledFramesHoldLittleBudget(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "big", 1, map[string]*string{"max.message.bytes": kmsg.StringPtr("8388608")})
	used := func() int64 {
		b.budget.mu.Lock()
		defer b.budget.mu.Unlock()
		return b.budget.used
	}
	var stalled []net.Conn
	for i, size := range []uint32{100 << 20, 100 << 20, 100 << 20, 100 << 20, 100 << 20, 12 << 20} {
		nc := dial(t, b)
		defer nc.Close()
		frame := binary.BigEndian.AppendUint32(nil, size)
		frame = append(frame, 0, 0, 0, 12, 0, 0, 0, byte(i), 0, 0) // a header's first bytes
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, nc)
	}
	waitCond(t, func() bool { return used() >= int64(len(stalled))*eagerFrame })
	if u := used(); u > int64(len(stalled))*eagerFrame {
		t.Fatalf("%d stalled frames hold %d bytes of the budget, want at most %d each", len(stalled), u, eagerFrame)
	}
	// Served meanwhile: a 3 MiB record, read in growing steps.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a bound, not a wait
	defer cancel()
	cl := newClient(t, b, kgo.ProducerBatchMaxBytes(4<<20), kgo.MaxBufferedBytes(8<<20))
	v := make([]byte, 3<<20)
	rand.Read(v) // incompressible: the frame is 3 MiB
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "big", Value: v}).FirstErr(); err != nil {
		t.Fatalf("a 3 MiB record beside the stalled frames: %v", err)
	}
	got := consumeN(t, b, "big", 1, kgo.FetchMaxBytes(8<<20), kgo.FetchMaxPartitionBytes(8<<20))
	if !bytes.Equal(got[0][0].Value, v) {
		t.Fatal("the 3 MiB record read back differs")
	}
	for _, nc := range stalled {
		nc.Close()
	}
	// Given back (the consumer's long-polled Fetch may hold its own few
	// bytes meanwhile).
	waitCond(t, func() bool { return used() < 64<<10 })
}

// TestReadFrameGrows: frames below, at and above eagerFrame read whole and
// exactly, from a reader that gives a few bytes at a time, with as many
// bytes taken from the budget as the frame has; a frame cut short gives
// them all back.
func TestReadFrameGrows(t *testing.T) {
	for _, size := range []int{8, eagerFrame - 1, eagerFrame, eagerFrame + 1, 3*eagerFrame + 5} {
		body := make([]byte, size)
		rand.Read(body)
		frame := binary.BigEndian.AppendUint32(nil, uint32(size))
		frame = append(frame, body...)
		for _, cut := range []bool{false, true} {
			in := frame
			if cut {
				in = frame[:len(frame)-1]
			}
			var held int64
			reserve := func(n int64) bool { held += n; return true }
			overdraw := func(n int64) { held += n }
			var sizeBuf [4]byte
			fr, err := readFrame(iotest.HalfReader(bytes.NewReader(in)), &sizeBuf,
				func() (int32, int32) { return 8, 100 << 20 }, reserve, overdraw)
			switch {
			case cut && (err == nil || held != 0):
				t.Errorf("size %d cut short: err %v, %d bytes still held", size, err, held)
			case !cut && (err != nil || !bytes.Equal(fr.b, body) || held != int64(size)):
				t.Errorf("size %d: err %v, equal %v, held %d", size, err, err == nil && bytes.Equal(fr.b, body), held)
			}
			if fr != nil {
				fr.release()
			}
		}
	}
}
