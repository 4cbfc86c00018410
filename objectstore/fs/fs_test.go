package fs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
