package broker

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDataDirLock: a second broker on a held data directory fails at once
// with ErrDataDirInUse naming the holder's pid; after Close the directory
// opens again. (cmd/sediment tests the same with two processes.)
func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	_, err := New(Config{DataDir: dir, Listeners: []Listener{{Addr: "127.0.0.1:0"}}, Logger: testLogger(t)})
	if !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("second New: %v, want ErrDataDirInUse", err)
	}
	if want := "in use by pid " + strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q lacks %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "meta")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	startBroker(t, dir) // released by Close
}
