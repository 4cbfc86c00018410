package hotlog

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
)

// TestDiskFullAppendRefusedThenRecovers: while the disk is full (ENOSPC on
// every write to a segment and on creating a new one), appends fail with
// ErrIO, not ErrLogFailed: nothing of them stays, the log end does not
// move, one warning is logged however many fail. Once space is back the
// log takes appends again at the same offsets, rolls included, and reads
// back whole. (The broker answers ErrIO with KAFKA_STORAGE_ERROR, which
// clients retry; it used to be UNKNOWN_SERVER_ERROR, with no log line.)
func TestDiskFullAppendRefusedThenRecovers(t *testing.T) {
	full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if (op == errorfs.OpFileWrite || op == errorfs.OpCreate) && filepath.Ext(path) == ".log" {
			return syscall.ENOSPC
		}
		return nil
	})}
	var logged bytes.Buffer
	l, err := Open(Options{FS: errorfs.Wrap(vfs.NewMem(), full), Dir: "/p", Config: Config{SegmentBytes: 1024},
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 5 {
		if _, err := l.Append(simpleBatch(1, 100, 1), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	end := l.LogEndOffset()

	full.On()
	for i := range 20 { // about 2 KB: both a write into the segment and a roll refused
		_, err := l.Append(simpleBatch(1, 100, 1), AppendOptions{})
		if !errors.Is(err, ErrIO) || errors.Is(err, ErrLogFailed) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("append %d with the disk full: %v, want ErrIO wrapping ENOSPC", i, err)
		}
	}
	if got := l.LogEndOffset(); got != end {
		t.Fatalf("log end %d after refused appends, want %d", got, end)
	}
	if n := strings.Count(logged.String(), "append refused after an I/O error"); n != 1 {
		t.Fatalf("%d warnings for 20 refused appends, want 1:\n%s", n, logged.String())
	}

	full.Off()
	for i := range 20 {
		res, err := l.Append(simpleBatch(1, 100, 1), AppendOptions{})
		if err != nil {
			t.Fatalf("append %d after space came back: %v", i, err)
		}
		if res.FirstOffset != end+int64(i) {
			t.Fatalf("append %d at offset %d, want %d", i, res.FirstOffset, end+int64(i))
		}
	}
	if hdrs, err := ValidateReplicatedBatches(readAll(t, l)); err != nil || len(hdrs) != 25 {
		t.Fatalf("read back %d batches (%v), want 25", len(hdrs), err)
	}
}

// TestUncleanOpenFullDiskEpochsUnchanged: a log opened after an unclean
// stop on a full disk opens when its leader-epoch checkpoint already says
// what the recovery finds: the checkpoint was rewritten on every unclean
// open, the write failed, and the partition could not open at all (an
// operator review: every Produce and ListOffsets UNKNOWN_SERVER_ERROR).
func TestUncleanOpenFullDiskEpochsUnchanged(t *testing.T) {
	mem := vfs.NewMem()
	l, err := Open(Options{FS: mem, Dir: "/p", Config: Config{SegmentBytes: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := l.Append(simpleBatch(1, 100, 1), AppendOptions{LeaderEpoch: 3}); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.CrashClone() // no clean shutdown
	l.Close()
	full := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if (op == errorfs.OpFileWrite || op == errorfs.OpCreate) && strings.Contains(path, epochCheckpointFile) {
			return syscall.ENOSPC
		}
		return nil
	})
	l2, err := Open(Options{FS: errorfs.Wrap(crashed, full), Dir: "/p", Config: Config{SegmentBytes: 1024}})
	if err != nil {
		t.Fatalf("unclean open with the disk full and the epochs unchanged: %v", err)
	}
	defer l2.Close()
	if e, end, _ := l2.EndOffsetForEpoch(3); e != 3 || end != 5 {
		t.Fatalf("epoch 3 ends at %d (epoch %d), want 5", end, e)
	}
}
