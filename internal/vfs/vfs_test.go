package vfs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

func mustWrite(t *testing.T, f File, s string) {
	t.Helper()
	if _, err := f.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

func content(t *testing.T, fsys FS, name string) string {
	t.Helper()
	b, err := ReadFile(fsys, name, 1<<20)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

// testFS runs the behaviour every FS must share.
func testFS(t *testing.T, fsys FS, dir string) {
	if err := fsys.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, "a", "f")
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, f, "hello ")
	mustWrite(t, f, "world")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if n, err := f.ReadAt(buf, 6); err != nil || n != 5 || string(buf) != "world" {
		t.Fatalf("ReadAt = %d %v %q", n, err, buf)
	}
	if n, err := f.ReadAt(buf, 8); n != 3 || !errors.Is(err, io.EOF) {
		t.Fatalf("short ReadAt = %d %v", n, err)
	}
	if err := f.Truncate(5); err != nil {
		t.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil || st.Size() != 5 {
		t.Fatalf("Stat = %v %v", st, err)
	}
	f.Close()

	a, err := fsys.OpenForAppend(name)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, a, "!")
	a.Close()
	if got := content(t, fsys, name); got != "hello!" {
		t.Fatalf("after append: %q", got)
	}
	rw, err := fsys.OpenReadWrite(name)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, rw, "J")
	rw.Close()
	if got := content(t, fsys, name); got != "Jello!" {
		t.Fatalf("after OpenReadWrite: %q", got)
	}

	if err := fsys.Rename(name, filepath.Join(dir, "a", "g")); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Stat(name); !IsNotExist(err) {
		t.Fatalf("Stat of renamed file: %v", err)
	}
	names, err := fsys.List(filepath.Join(dir, "a"))
	if err != nil || len(names) != 2 || names[0] != "b" || names[1] != "g" {
		t.Fatalf("List = %v %v", names, err)
	}
	if _, err := fsys.Open(filepath.Join(dir, "nope")); !IsNotExist(err) {
		t.Fatalf("Open missing: %v", err)
	}
	if err := WriteFileAtomic(fsys, filepath.Join(dir, "a", "atomic"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got := content(t, fsys, filepath.Join(dir, "a", "atomic")); got != "x" {
		t.Fatalf("atomic: %q", got)
	}
	if err := SyncDir(fsys, filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Remove(filepath.Join(dir, "a", "g")); err != nil {
		t.Fatal(err)
	}
	if err := fsys.RemoveAll(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Stat(filepath.Join(dir, "a")); !IsNotExist(err) {
		t.Fatalf("after RemoveAll: %v", err)
	}
}

func TestOS(t *testing.T) {
	testFS(t, Default, t.TempDir())
	f, err := Default.Create(filepath.Join(t.TempDir(), "fd"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Fd() == InvalidFd {
		t.Fatal("OS file has no descriptor")
	}
}

func TestMem(t *testing.T) {
	m := NewMem()
	testFS(t, m, "/data")
	f, _ := m.Create("/x")
	if f.Fd() != InvalidFd {
		t.Fatal("mem file has a descriptor")
	}
}

func TestCrashCloneDropsUnsynced(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f, _ := m.Create("/d/log")
	mustWrite(t, f, "durable")
	f.Sync()
	mustWrite(t, f, "-lost")
	// The file's entry is not durable until the directory is synced.
	if _, err := m.CrashClone().Stat("/d/log"); !IsNotExist(err) {
		t.Fatalf("unsynced directory entry survived: %v", err)
	}
	if err := SyncDir(m, "/d"); err != nil {
		t.Fatal(err)
	}
	c := m.CrashClone()
	if got := content(t, c, "/d/log"); got != "durable" {
		t.Fatalf("crash clone: %q", got)
	}
	if got := content(t, m, "/d/log"); got != "durable-lost" {
		t.Fatalf("original changed: %q", got)
	}

	// A truncation below the synced length, then new bytes: the crash keeps the
	// synced content, not a mix.
	f.Truncate(3)
	f, _ = m.OpenForAppend("/d/log")
	mustWrite(t, f, "XYZW")
	if got := content(t, m.CrashClone(), "/d/log"); got != "durable" {
		t.Fatalf("after overwrite: %q", got)
	}
	f.Sync()
	if got := content(t, m.CrashClone(), "/d/log"); got != "durXYZW" {
		t.Fatalf("after sync: %q", got)
	}

	// An unsynced rename is undone by a crash; a synced one is kept.
	m.Rename("/d/log", "/d/log2")
	if _, err := m.CrashClone().Stat("/d/log"); err != nil {
		t.Fatalf("unsynced rename was kept: %v", err)
	}
	SyncDir(m, "/d")
	c = m.CrashClone()
	if _, err := c.Stat("/d/log"); !IsNotExist(err) {
		t.Fatal("old name survived a synced rename")
	}
	if _, err := c.Stat("/d/log2"); err != nil {
		t.Fatal(err)
	}
	// Unsynced removal is undone too.
	m.Remove("/d/log2")
	if _, err := m.CrashClone().Stat("/d/log2"); err != nil {
		t.Fatalf("unsynced remove was kept: %v", err)
	}
}

func TestCrashCloneTornTail(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d", 0o755)
	f, _ := m.Create("/d/f")
	SyncDir(m, "/d")
	mustWrite(t, f, "abc")
	f.Sync()
	mustWrite(t, f, "defghij")
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	for range 200 {
		got := content(t, m.CrashCloneWith(CrashOptions{Rand: rng}), "/d/f")
		if !bytes.HasPrefix([]byte("abcdefghij"), []byte(got)) || len(got) < 3 {
			t.Fatalf("torn clone %q is not a prefix holding the synced bytes", got)
		}
		seen[got] = true
	}
	if len(seen) < 4 {
		t.Fatalf("only %d distinct tails", len(seen))
	}
}

func TestMemConcurrentReadAt(t *testing.T) {
	m := NewMem()
	f, _ := m.Create("/f")
	mustWrite(t, f, "0123456789")
	done := make(chan bool)
	for range 4 {
		go func() {
			b := make([]byte, 2)
			for i := range 100 {
				f.ReadAt(b, int64(i%8))
			}
			done <- true
		}()
	}
	for range 100 {
		f.Write([]byte("x"))
	}
	for range 4 {
		<-done
	}
}
