package hotlog

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/sediment-io/sediment/internal/vfs"
)

func openMem(t *testing.T, fs vfs.FS, cfg Config) *Log {
	t.Helper()
	l, err := Open(Options{FS: fs, Dir: "/p", Config: cfg})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func TestAppendRead(t *testing.T) {
	fs := vfs.NewMem()
	l := openMem(t, fs, Config{})
	var want [][]byte
	for i := range 10 {
		b := simpleBatch(3, 100, int64(1000+i))
		res, err := l.Append(b, AppendOptions{LeaderEpoch: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.FirstOffset != int64(3*i) || res.LastOffset != int64(3*i+2) {
			t.Fatalf("append %d: %+v", i, res)
		}
		want = append(want, b)
	}
	if l.LogEndOffset() != 30 {
		t.Fatalf("LEO %d", l.LogEndOffset())
	}
	got, err := l.ReadBytes(4, 1<<20, 30)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Join(want[1:], nil)) {
		t.Fatalf("read mismatch: %d bytes vs %d", len(got), len(bytes.Join(want[1:], nil)))
	}
	if _, err := l.Read(31, 100, 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openMem(t, fs, Config{})
	defer l.Close()
	if l.LogEndOffset() != 30 {
		t.Fatalf("reopen LEO %d", l.LogEndOffset())
	}
	got, err = l.ReadBytes(0, 1<<20, 30)
	if err != nil || !bytes.Equal(got, bytes.Join(want, nil)) {
		t.Fatalf("reopen read: %v", err)
	}
	_ = time.Second
}
