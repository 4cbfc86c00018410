package fs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/fs"
	"github.com/sediment-io/sediment/objectstore/objectstoretest"
)

func TestConformance(t *testing.T) {
	objectstoretest.Run(t, func(t *testing.T) objectstore.Store {
		s, err := fs.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, objectstoretest.Options{})
}

// FuzzKeyEscape checks that no key reaches outside the store's folder: a
// file beside the folder and a symbolic link inside it pointing out are
// never read, whatever the key; keys CheckKey refuses are refused; and the
// objects that exist are found under their own keys only.
func FuzzKeyEscape(f *testing.F) {
	for _, k := range append(append([]string{"a/b/c", "..a", "a/..b", "../outside/secret", "link/secret", "link", "inside/obj"},
		objectstoretest.KeyChars...), objectstoretest.InvalidKeys...) {
		f.Add(k)
	}
	parent := f.TempDir()
	dir := filepath.Join(parent, "store")
	if err := os.MkdirAll(filepath.Join(parent, "outside"), 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parent, "outside", "secret"), []byte("secret"), 0o644); err != nil {
		f.Fatal(err)
	}
	s, err := fs.New(dir)
	if err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink("../outside", filepath.Join(dir, "link")); err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	if err := objectstore.PutBytes(ctx, s, "inside/obj", []byte("inside"), objectstore.CreateOptions{}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key string) {
		valid := objectstore.CheckKey(key) == nil && !strings.HasPrefix(key, fs.TempDir)
		info, headErr := s.Head(ctx, key)
		b, readErr := objectstore.ReadAll(ctx, s, key, 1<<20)
		if !valid {
			if !errors.Is(headErr, objectstore.ErrInvalidKey) || !errors.Is(readErr, objectstore.ErrInvalidKey) {
				t.Fatalf("%q: head %v, read %v; want ErrInvalidKey", key, headErr, readErr)
			}
			return
		}
		if string(b) == "secret" || info.Size == 6 && key != "inside/obj" {
			t.Fatalf("%q reached the file outside the folder", key)
		}
		if key == "inside/obj" {
			if headErr != nil || string(b) != "inside" {
				t.Fatalf("inside/obj: %v %v", headErr, readErr)
			}
			return
		}
		if headErr == nil || readErr == nil {
			t.Fatalf("%q found an object (%+v)", key, info)
		}
		res, err := s.List(ctx, key, "/")
		if err != nil {
			return // os.Root refuses to follow "link" out of the folder
		}
		for _, o := range res.Objects {
			if o.Key != "inside/obj" {
				t.Fatalf("List(%q) found %q", key, o.Key)
			}
		}
	})
}

func TestLayoutAndTempFiles(t *testing.T) {
	dir := t.TempDir()
	// A temporary file left by a crash long ago goes at open; a fresh one stays.
	if err := os.MkdirAll(filepath.Join(dir, fs.TempDir), 0o755); err != nil {
		t.Fatal(err)
	}
	old, fresh := filepath.Join(dir, fs.TempDir, "old"), filepath.Join(dir, fs.TempDir, "fresh")
	os.WriteFile(old, []byte("x"), 0o644)
	os.WriteFile(fresh, []byte("x"), 0o644)
	longAgo := time.Now().Add(-2 * time.Hour)
	os.Chtimes(old, longAgo, longAgo)
	s, err := fs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("stale temporary file kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("fresh temporary file removed: %v", err)
	}
	os.Remove(fresh)

	ctx := t.Context()
	if err := objectstore.PutBytes(ctx, s, "a1/topic/0/00000.log", []byte("seg"), objectstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a1", "topic", "0", "00000.log")); err != nil || string(b) != "seg" {
		t.Fatalf("object not at DIR/key: %v", err)
	}
	// While a write is open its bytes live in the temporary folder, which
	// is never listed; Abort removes them.
	w, err := s.CreateObject(ctx, "pending", objectstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(make([]byte, 300<<10))
	if entries, _ := os.ReadDir(filepath.Join(dir, fs.TempDir)); len(entries) != 1 {
		t.Fatalf("%d temporary files, want 1", len(entries))
	}
	res, err := s.List(ctx, "", "")
	if err != nil || len(res.Objects) != 1 {
		t.Fatalf("List = %+v, %v", res, err)
	}
	w.Abort()
	if entries, _ := os.ReadDir(filepath.Join(dir, fs.TempDir)); len(entries) != 0 {
		t.Fatalf("%d temporary files after Abort", len(entries))
	}
	if _, err := s.Head(ctx, fs.TempDir+"/x"); !errors.Is(err, objectstore.ErrInvalidKey) {
		t.Fatalf("the temporary folder is reachable as a key: %v", err)
	}
	// Delete removes the folders it empties, not the store's own.
	if err := s.Delete(ctx, "a1/topic/0/00000.log"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a1")); !os.IsNotExist(err) {
		t.Fatalf("empty folders left: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}

// A Reader reads the version it opened, even after a replace or a delete.
func TestReaderKeepsVersion(t *testing.T) {
	s, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	objectstore.PutBytes(ctx, s, "k", []byte("old!"), objectstore.CreateOptions{})
	r, _, err := s.ReadObject(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	objectstore.PutBytes(ctx, s, "k", []byte("new version"), objectstore.CreateOptions{})
	p := make([]byte, 4)
	if err := r.ReadAt(ctx, p, 0); err != nil || string(p) != "old!" {
		t.Fatalf("got %q, %v", p, err)
	}
	s.Delete(ctx, "k")
	if err := r.ReadAt(ctx, p, 0); err != nil || string(p) != "old!" {
		t.Fatalf("got %q, %v", p, err)
	}
}
