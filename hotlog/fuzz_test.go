package hotlog

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sediment-io/sediment/internal/vfs"
)

// FuzzRecovery writes arbitrary bytes as the active segment (after a sealed
// one of good batches), opens the log as after a crash, and checks that what
// it serves is valid, that it takes new appends, and that a second open agrees.
func FuzzRecovery(f *testing.F) {
	good := append(simpleBatch(2, 10, 5), simpleBatch(1, 3, 6)...)
	f.Add([]byte{}, false)
	f.Add(good, false)
	f.Add(good[:len(good)-3], true)
	f.Add(append(append([]byte(nil), good...), 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff), true)
	f.Fuzz(func(t *testing.T, data []byte, withIndex bool) {
		fs := vfs.NewMem()
		fs.MkdirAll("/p", 0o755)
		// A sealed segment 0 with offsets 0..2, and the fuzzed active segment at 3.
		sealed := simpleBatch(3, 7, 1)
		w := func(name string, b []byte) {
			f, _ := fs.Create("/p/" + name)
			f.Write(b)
			f.Close()
		}
		w(baseName(0)+logSuffix, sealed)
		w(baseName(3)+logSuffix, data)
		if withIndex {
			// Arbitrary index files for the fuzzed segment too.
			w(baseName(3)+indexSuffix, data[:len(data)/2])
			w(baseName(3)+timeIndexSuffix, data[len(data)/2:])
			w(epochCheckpointFile, data)
			w(cleanShutdownFile, data)
		}
		l, err := Open(Options{FS: fs, Dir: "/p", Logger: quiet})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		got := readAll(t, l)
		if !bytes.HasPrefix(got, sealed) {
			t.Fatal("sealed segment lost")
		}
		if !bytes.HasPrefix(data, got[len(sealed):]) {
			t.Fatal("recovered bytes are not a prefix of the segment")
		}
		// Batch by batch (offsets may jump far), reading each batch's first
		// and last offsets.
		for off := l.LogStartOffset(); off < l.LogEndOffset(); {
			res, err := l.Read(off, 1, l.LogEndOffset())
			if err != nil {
				t.Fatalf("read %d: %v", off, err)
			}
			res.Release()
			if res.NextOffset <= off {
				t.Fatalf("read %d made no progress", off)
			}
			if _, err := l.ReadBytes(res.NextOffset-1, 1, l.LogEndOffset()); err != nil {
				t.Fatalf("read %d: %v", res.NextOffset-1, err)
			}
			off = res.NextOffset
		}
		l.OffsetForTimestamp(3)
		l.EndOffsetForEpoch(0)
		if _, err := l.Append(simpleBatch(1, 1, 1), AppendOptions{LeaderEpoch: 1}); err != nil {
			t.Fatalf("append after recovery: %v", err)
		}
		want := readAll(t, l)
		l.Close()
		l, err = Open(Options{FS: fs, Dir: "/p", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if !bytes.Equal(readAll(t, l), want) {
			t.Fatal("second open differs")
		}
	})
}

// FuzzSealedSegment serves arbitrary bytes as a sealed segment (which
// recovery does not scan): reads may fail with ErrCorruptBatch but must not
// panic, hang or return bytes outside the file.
func FuzzSealedSegment(f *testing.F) {
	f.Add(simpleBatch(2, 10, 5), []byte{})
	f.Add(simpleBatch(2, 10, 5), []byte{0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data, index []byte) {
		fs := vfs.NewMem()
		fs.MkdirAll("/p", 0o755)
		w := func(name string, b []byte) {
			f, _ := fs.Create("/p/" + name)
			f.Write(b)
			f.Close()
		}
		w(baseName(0)+logSuffix, data)
		w(baseName(0)+indexSuffix, index)
		w(baseName(100)+logSuffix, simpleBatch(1, 1, 1))
		l, err := Open(Options{FS: fs, Dir: "/p", Logger: quiet})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer l.Close()
		for off := int64(0); off < 101; off += 7 { // the log ends at 101
			b, err := l.ReadBytes(off, 1<<20, 101)
			if err != nil && !errors.Is(err, ErrCorruptBatch) && !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("read %d: %v", off, err)
			}
			if len(b) > len(data)+100 {
				t.Fatalf("read %d bytes", len(b))
			}
		}
		l.OffsetForTimestamp(0)
		l.Segments()
	})
}
