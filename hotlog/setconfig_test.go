package hotlog

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sediment-io/sediment/internal/vfs"
)

// TestSetConfigLive: segment.bytes, segment.ms and max.message.bytes
// changed on an open log take effect at the next append, without reopening;
// the broker's flush policy stays.
func TestSetConfigLive(t *testing.T) {
	var nowMs atomic.Int64
	nowMs.Store(1_700_000_000_000)
	l, err := Open(Options{FS: vfs.NewMem(), Dir: "/p", Logger: quiet,
		Config: Config{SegmentBytes: 1 << 20, Flush: FlushOS},
		Now:    func() time.Time { return time.UnixMilli(nowMs.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	batch := simpleBatch(1, 1000, nowMs.Load())
	size := int64(len(batch))
	for range 10 {
		if _, err := l.Append(batch, AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(l.Segments()); n != 1 {
		t.Fatalf("%d segments before SetConfig", n)
	}

	// segment.bytes: 3 batches per segment from the next append on.
	l.SetConfig(Config{SegmentBytes: 3 * size, Flush: FlushEveryCommit})
	if c := l.Config(); c.SegmentBytes != 3*size || c.Flush != FlushOS || c.SegmentMs != defaultSegmentAge {
		t.Fatalf("config %+v", c)
	}
	for range 9 {
		if _, err := l.Append(batch, AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	segs := l.Segments()
	// The 10-batch segment was rolled at the first append after SetConfig
	// (not rewritten), then 3 + 3 + 3.
	if len(segs) != 4 || segs[0].Size != 10*size {
		t.Fatalf("segments after segment.bytes=%d: %+v", 3*size, segs)
	}
	for _, s := range segs[1:] {
		if s.Size != 3*size {
			t.Fatalf("segment of %d bytes, want %d: %+v", s.Size, 3*size, segs)
		}
	}

	// segment.ms: the next append after the age rolls.
	l.SetConfig(Config{SegmentBytes: 1 << 20, SegmentMs: time.Minute})
	if _, err := l.Append(batch, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	before := len(l.Segments())
	if _, err := l.Append(batch, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(l.Segments()); n != before {
		t.Fatalf("rolled before segment.ms: %d -> %d segments", before, n)
	}
	nowMs.Add(2 * time.Minute.Milliseconds())
	if _, err := l.Append(batch, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(l.Segments()); n != before+1 {
		t.Fatalf("no roll after segment.ms: %d -> %d segments", before, n)
	}

	// max.message.bytes.
	l.SetConfig(Config{MaxMessageBytes: int32(size - 1)})
	if _, err := l.Append(batch, AppendOptions{}); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("append over the new max.message.bytes: %v", err)
	}
	readAll(t, l)
}

// TestSetConfigConcurrent: SetConfig races with appends and reads (run
// with -race); every append lands and the log reads back whole.
func TestSetConfigConcurrent(t *testing.T) {
	l := openMem(t, vfs.NewMem(), Config{SegmentBytes: 4096, Flush: FlushOS})
	defer l.Close()
	batch := simpleBatch(2, 300, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			l.SetConfig(Config{SegmentBytes: int64(2048 + 1024*(i%4)), IndexIntervalBytes: 100 + i%500})
			l.Segments()
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 500; i++ {
			if _, err := l.Append(batch, AppendOptions{}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for l.LogEndOffset() < 1000 && !t.Failed() {
		res, err := l.Read(0, 1<<20, l.LogEndOffset())
		if err != nil {
			t.Fatal(err)
		}
		res.Release()
	}
	close(stop)
	wg.Wait()
	if len(l.Segments()) < 2 {
		t.Fatalf("no rolls: %+v", l.Segments())
	}
	readAll(t, l)
}
