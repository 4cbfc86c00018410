package objectstore_test

import (
	"errors"
	"path"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/objectstoretest"
)

func TestCheckKey(t *testing.T) {
	for _, k := range append([]string{"a", "a/b", "topic/0/00000000000000000000.log", "x..y", ".hidden", "a/.b/c..", strings.Repeat("k", 1024)}, objectstoretest.KeyChars...) {
		if err := objectstore.CheckKey(k); err != nil {
			t.Errorf("CheckKey(%q) = %v", k, err)
		}
	}
	for _, k := range objectstoretest.InvalidKeys {
		if err := objectstore.CheckKey(k); !errors.Is(err, objectstore.ErrInvalidKey) {
			t.Errorf("CheckKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

// FuzzCheckKey checks that every accepted key is a clean, relative,
// slash-separated path that cannot leave a folder, and fits S3.
func FuzzCheckKey(f *testing.F) {
	for _, k := range append(append([]string{"a/b", "a/../b", "/", "a\\b"}, objectstoretest.KeyChars...), objectstoretest.InvalidKeys...) {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if objectstore.CheckKey(key) != nil {
			return
		}
		if len(key) == 0 || len(key) > objectstore.MaxKeyLen || !utf8.ValidString(key) {
			t.Fatalf("accepted %q: length or encoding", key)
		}
		if path.Clean(key) != key || path.IsAbs(key) {
			t.Fatalf("accepted %q, which is not a clean relative path (%q)", key, path.Clean(key))
		}
		for _, seg := range strings.Split(key, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("accepted %q with segment %q", key, seg)
			}
		}
		if strings.ContainsAny(key, "\\\x00\n\r") {
			t.Fatalf("accepted %q", key)
		}
		if objectstore.CheckPrefix(key) != nil {
			t.Fatalf("a valid key %q is not a valid prefix", key)
		}
	})
}

func TestCheckRange(t *testing.T) {
	for _, c := range [][4]int64{{0, 0, 0, 1}, {0, 10, 10, 1}, {10, 0, 10, 1}, {5, 5, 10, 1}, {11, 0, 10, 0}, {-1, 1, 10, 0}, {5, 6, 10, 0}, {1, -1, 10, 0}, {1, 1 << 62, 10, 0}, {1 << 62, 1 << 62, 1 << 62, 0}} {
		err := objectstore.CheckRange(c[0], c[1], c[2])
		if (err == nil) != (c[3] == 1) || (err != nil && !errors.Is(err, objectstore.ErrOutOfRange)) {
			t.Errorf("CheckRange(%d, %d, %d) = %v", c[0], c[1], c[2], err)
		}
	}
}
