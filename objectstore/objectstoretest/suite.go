// Package objectstoretest is the conformance suite that every
// objectstore.Store backend passes. Other packages run it on their own
// wrappers:
//
//	func TestConformance(t *testing.T) {
//		objectstoretest.Run(t, func(t *testing.T) objectstore.Store { return mem.New(nil) }, objectstoretest.Options{})
//	}
package objectstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/sediment-io/sediment/objectstore"
)

// Options tune the suite for a backend.
type Options struct {
	// LargeSize is the size of the object written in small pieces by the
	// large-object test; backends with multipart uploads set it above two
	// parts. Defaults to 3 MiB.
	LargeSize int
	// AllowPrefixConflict skips the check that "a" and "a/b" cannot both
	// exist (true for AWS S3, which allows it).
	AllowPrefixConflict bool
}

// Run runs every conformance test; open returns a new, empty Store for each
// and the suite closes it.
func Run(t *testing.T, open func(t *testing.T) objectstore.Store, opts Options) {
	if opts.LargeSize <= 0 {
		opts.LargeSize = 3 << 20
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s objectstore.Store, opts Options)
	}{
		{"RoundTrip", testRoundTrip},
		{"ReadAtEdges", testReadAtEdges},
		{"ReadRange", testReadRange},
		{"ConcurrentReadAt", testConcurrentReadAt},
		{"NotExist", testNotExist},
		{"Overwrite", testOverwrite},
		{"NoOverwrite", testNoOverwrite},
		{"NoOverwriteRace", testNoOverwriteRace},
		{"InvisibleUntilClose", testInvisibleUntilClose},
		{"Abort", testAbort},
		{"LargeObject", testLargeObject},
		{"List", testList},
		{"ListPrefixDelimiter", testListPrefixDelimiter},
		{"Delete", testDelete},
		{"KeyCharacters", testKeyCharacters},
		{"InvalidKeys", testInvalidKeys},
		{"PrefixConflict", testPrefixConflict},
		{"CancelledContext", testCancelledContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			defer func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
			tc.fn(t, s, opts)
		})
	}
}

// Data returns n deterministic pseudo-random bytes for seed.
func Data(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func put(t *testing.T, s objectstore.Store, key string, data []byte) {
	t.Helper()
	if err := objectstore.PutBytes(t.Context(), s, key, data, objectstore.CreateOptions{}); err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
}

func get(t *testing.T, s objectstore.Store, key string) []byte {
	t.Helper()
	b, err := objectstore.ReadAll(t.Context(), s, key, 1<<30)
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	return b
}

func testRoundTrip(t *testing.T, s objectstore.Store, _ Options) {
	for i, n := range []int{0, 1, 7, 4096, 100_003} {
		key := fmt.Sprintf("rt/obj-%d", i)
		want := Data(uint64(i), n)
		put(t, s, key, want)
		if got := get(t, s, key); !bytes.Equal(got, want) {
			t.Fatalf("%q: read %d bytes, not the %d written", key, len(got), len(want))
		}
		info, err := s.Head(t.Context(), key)
		if err != nil {
			t.Fatalf("head %q: %v", key, err)
		}
		if info.Key != key || info.Size != int64(n) || info.ModTime.IsZero() {
			t.Fatalf("head %q = %+v, want size %d and a time", key, info, n)
		}
	}
}

func testReadAtEdges(t *testing.T, s objectstore.Store, _ Options) {
	const n = 10_000
	data := Data(1, n)
	put(t, s, "edges", data)
	r, size, err := s.ReadObject(t.Context(), "edges")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if size != n {
		t.Fatalf("size %d, want %d", size, n)
	}
	ok := []struct{ off, n int64 }{{0, 0}, {0, 1}, {0, n}, {n - 1, 1}, {n, 0}, {1, n - 1}, {4095, 4097}, {n / 2, n / 2}}
	for _, c := range ok {
		p := make([]byte, c.n)
		if err := r.ReadAt(t.Context(), p, c.off); err != nil {
			t.Fatalf("ReadAt(off %d, len %d): %v", c.off, c.n, err)
		}
		if !bytes.Equal(p, data[c.off:c.off+c.n]) {
			t.Fatalf("ReadAt(off %d, len %d): wrong bytes", c.off, c.n)
		}
	}
	bad := []struct{ off, n int64 }{{n, 1}, {n - 1, 2}, {0, n + 1}, {-1, 1}, {n + 5, 0}}
	for _, c := range bad {
		p := make([]byte, c.n)
		if err := r.ReadAt(t.Context(), p, c.off); !errors.Is(err, objectstore.ErrOutOfRange) {
			t.Fatalf("ReadAt(off %d, len %d) = %v, want ErrOutOfRange", c.off, c.n, err)
		}
	}
}

func testReadRange(t *testing.T, s objectstore.Store, _ Options) {
	const n = 300_000
	data := Data(2, n)
	put(t, s, "range", data)
	r, _, err := s.ReadObject(t.Context(), "range")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, c := range []struct{ off, n int64 }{{0, n}, {0, 0}, {n - 1, 1}, {12345, 200_000}, {n, 0}} {
		rc, err := r.ReadRange(t.Context(), c.off, c.n)
		if err != nil {
			t.Fatalf("ReadRange(%d, %d): %v", c.off, c.n, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("ReadRange(%d, %d): read: %v", c.off, c.n, err)
		}
		if !bytes.Equal(got, data[c.off:c.off+c.n]) {
			t.Fatalf("ReadRange(%d, %d): %d bytes, wrong", c.off, c.n, len(got))
		}
	}
	for _, c := range []struct{ off, n int64 }{{n, 1}, {0, n + 1}, {-1, 2}, {5, -1}} {
		if _, err := r.ReadRange(t.Context(), c.off, c.n); !errors.Is(err, objectstore.ErrOutOfRange) {
			t.Fatalf("ReadRange(%d, %d) = %v, want ErrOutOfRange", c.off, c.n, err)
		}
	}
}

func testConcurrentReadAt(t *testing.T, s objectstore.Store, _ Options) {
	const n = 1 << 20
	data := Data(3, n)
	put(t, s, "conc", data)
	r, _, err := s.ReadObject(t.Context(), "conc")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 4 {
				off := int64((g*4 + i) * (n / 32))
				p := make([]byte, n/32)
				if err := r.ReadAt(t.Context(), p, off); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(p, data[off:off+int64(len(p))]) {
					errs <- fmt.Errorf("wrong bytes at %d", off)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testNotExist(t *testing.T, s objectstore.Store, _ Options) {
	ctx := t.Context()
	check := func(op string, err error) {
		t.Helper()
		if err == nil || !s.IsNotExistError(err) || !errors.Is(err, objectstore.ErrNotExist) {
			t.Fatalf("%s of a missing object: %v, want a not-exist error", op, err)
		}
	}
	_, _, err := s.ReadObject(ctx, "missing/object")
	check("ReadObject", err)
	_, err = s.Head(ctx, "missing/object")
	check("Head", err)
	put(t, s, "dir/file", []byte("x"))
	_, err = s.Head(ctx, "dir") // a prefix is not an object
	check("Head of a prefix", err)
	_, _, err = s.ReadObject(ctx, "dir")
	check("ReadObject of a prefix", err)
	_, err = s.Head(ctx, "dir/file/below")
	check("Head below an object", err)
	if s.IsNotExistError(errors.New("other")) || s.IsNotExistError(nil) {
		t.Fatal("IsNotExistError true for an unrelated error")
	}
	res, err := s.List(ctx, "missing/", "")
	if err != nil || len(res.Objects)+len(res.Prefixes) != 0 {
		t.Fatalf("List of a missing prefix = %+v, %v; want empty", res, err)
	}
}

func testOverwrite(t *testing.T, s objectstore.Store, _ Options) {
	put(t, s, "ow", []byte("first version"))
	put(t, s, "ow", []byte("second"))
	if got := get(t, s, "ow"); string(got) != "second" {
		t.Fatalf("got %q after overwrite", got)
	}
}

func testNoOverwrite(t *testing.T, s objectstore.Store, _ Options) {
	ctx := t.Context()
	no := objectstore.CreateOptions{NoOverwrite: true}
	if err := objectstore.PutBytes(ctx, s, "once", []byte("first"), no); err != nil {
		t.Fatalf("first NoOverwrite put: %v", err)
	}
	err := objectstore.PutBytes(ctx, s, "once", []byte("zombie"), no)
	if !errors.Is(err, objectstore.ErrExists) {
		t.Fatalf("second NoOverwrite put = %v, want ErrExists", err)
	}
	if got := get(t, s, "once"); string(got) != "first" {
		t.Fatalf("got %q, want the first object intact", got)
	}
	if err := objectstore.PutBytes(ctx, s, "once", []byte("forced"), objectstore.CreateOptions{}); err != nil {
		t.Fatalf("overwrite without NoOverwrite: %v", err)
	}
	if got := get(t, s, "once"); string(got) != "forced" {
		t.Fatalf("got %q", got)
	}
}

func testNoOverwriteRace(t *testing.T, s objectstore.Store, _ Options) {
	const n = 6
	var wg sync.WaitGroup
	results := make([]error, n)
	for i := range n {
		wg.Go(func() {
			results[i] = objectstore.PutBytes(t.Context(), s, "race/winner", []byte{byte(i)}, objectstore.CreateOptions{NoOverwrite: true})
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range results {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, objectstore.ErrExists):
			t.Fatalf("writer %d: %v, want nil or ErrExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer won")
	}
	if got := get(t, s, "race/winner"); len(got) != 1 || int(got[0]) != winner {
		t.Fatalf("object holds %v, winner was %d", got, winner)
	}
}

func testInvisibleUntilClose(t *testing.T, s objectstore.Store, _ Options) {
	ctx := t.Context()
	w, err := s.CreateObject(ctx, "pending/obj", objectstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(Data(4, 1000)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Head(ctx, "pending/obj"); !s.IsNotExistError(err) {
		t.Fatalf("Head before Close = %v, want not-exist", err)
	}
	res, err := s.List(ctx, "", "")
	if err != nil || len(res.Objects) != 0 {
		t.Fatalf("List before Close = %+v, %v; want nothing", res, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatalf("Abort after Close: %v", err)
	}
	if got := get(t, s, "pending/obj"); !bytes.Equal(got, Data(4, 1000)) {
		t.Fatal("wrong bytes after Close")
	}
}

func testAbort(t *testing.T, s objectstore.Store, _ Options) {
	ctx := t.Context()
	w, err := s.CreateObject(ctx, "aborted", objectstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(Data(5, 5000)); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close after Abort succeeded")
	}
	if _, err := s.Head(ctx, "aborted"); !s.IsNotExistError(err) {
		t.Fatalf("Head after Abort = %v, want not-exist", err)
	}
	// Aborting a replacement leaves the old object.
	put(t, s, "kept", []byte("old"))
	w, err = s.CreateObject(ctx, "kept", objectstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("new"))
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "kept"); string(got) != "old" {
		t.Fatalf("got %q after an aborted replacement", got)
	}
	// A cancelled context aborts too.
	cctx, cancel := context.WithCancel(ctx)
	w, err = s.CreateObject(cctx, "cancelled", objectstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("data"))
	cancel()
	if err := w.Close(); err == nil {
		t.Fatal("Close with a cancelled context succeeded")
	}
	w.Abort()
	if _, err := s.Head(ctx, "cancelled"); !s.IsNotExistError(err) {
		t.Fatalf("Head after cancelled Close = %v, want not-exist", err)
	}
}

func testLargeObject(t *testing.T, s objectstore.Store, opts Options) {
	data := Data(6, opts.LargeSize)
	w, err := s.CreateObject(t.Context(), "large/object", objectstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Odd-sized writes, so that parts never line up with them.
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 77_777)
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "large/object"); !bytes.Equal(got, data) {
		t.Fatalf("large object: read %d bytes, wrong", len(got))
	}
	r, size, err := s.ReadObject(t.Context(), "large/object")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if size != int64(len(data)) {
		t.Fatalf("size %d", size)
	}
	// Ranges across the middle and to the very end.
	for _, off := range []int64{size/2 - 3, size - 1000} {
		p := make([]byte, size-off)
		if err := r.ReadAt(t.Context(), p, off); err != nil || !bytes.Equal(p, data[off:]) {
			t.Fatalf("ReadAt(%d): %v", off, err)
		}
	}
}

func keysOf(objs []objectstore.ObjectInfo) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

func testList(t *testing.T, s objectstore.Store, _ Options) {
	keys := []string{"b/5", "a", "b/4", "c/d/e", "b-x", "b/6/7"}
	for i, k := range keys {
		put(t, s, k, Data(uint64(i), i+1))
	}
	res, err := s.List(t.Context(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(keys))
	if got := keysOf(res.Objects); !slices.Equal(got, want) || len(res.Prefixes) != 0 {
		t.Fatalf("List = %v %v, want %v", got, res.Prefixes, want)
	}
	for _, o := range res.Objects {
		i := slices.Index(keys, o.Key)
		if o.Size != int64(i+1) || o.ModTime.IsZero() {
			t.Fatalf("List entry %+v: want size %d and a time", o, i+1)
		}
	}
}

func testListPrefixDelimiter(t *testing.T, s objectstore.Store, _ Options) {
	for _, k := range []string{"a", "b/4", "b/5", "b/6/7", "b-x", "c/d/e", "c/d/f", "cd", "t/0001-a/x", "t/0001-b", "t/0002/y"} {
		put(t, s, k, []byte(k))
	}
	cases := []struct {
		prefix, delim string
		objects       []string
		prefixes      []string
	}{
		{"", "/", []string{"a", "b-x", "cd"}, []string{"b/", "c/", "t/"}},
		{"b/", "/", []string{"b/4", "b/5"}, []string{"b/6/"}},
		{"b/", "", []string{"b/4", "b/5", "b/6/7"}, nil},
		{"b", "/", []string{"b-x"}, []string{"b/"}},
		{"c", "/", []string{"cd"}, []string{"c/"}},
		{"c/d/", "/", []string{"c/d/e", "c/d/f"}, nil},
		{"c/d/e", "/", []string{"c/d/e"}, nil},
		{"b/6", "/", nil, []string{"b/6/"}},
		{"b/6/7", "", []string{"b/6/7"}, nil},
		{"zzz", "/", nil, nil},
		{"t/", "-", []string{"t/0002/y"}, []string{"t/0001-"}},
		{"t/0", "/", []string{"t/0001-b"}, []string{"t/0001-a/", "t/0002/"}},
		{"t/0001", "/", []string{"t/0001-b"}, []string{"t/0001-a/"}},
	}
	for _, c := range cases {
		res, err := s.List(t.Context(), c.prefix, c.delim)
		if err != nil {
			t.Fatalf("List(%q, %q): %v", c.prefix, c.delim, err)
		}
		if got := keysOf(res.Objects); !slices.Equal(got, c.objects) || !slices.Equal(res.Prefixes, c.prefixes) {
			t.Errorf("List(%q, %q) = objects %q prefixes %q; want %q %q", c.prefix, c.delim, got, res.Prefixes, c.objects, c.prefixes)
		}
	}
}

func testDelete(t *testing.T, s objectstore.Store, _ Options) {
	ctx := t.Context()
	var keys []string
	for i := range 25 {
		k := fmt.Sprintf("del/%02d/obj", i)
		keys = append(keys, k)
		put(t, s, k, []byte{byte(i)})
	}
	put(t, s, "del/keep", []byte("keep"))
	if err := s.Delete(ctx, keys[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Head(ctx, keys[0]); !s.IsNotExistError(err) {
		t.Fatalf("Head after Delete = %v", err)
	}
	// Idempotent, and many at once (including already-deleted and never-existing keys).
	for range 2 {
		if err := s.Delete(ctx, append(slices.Clone(keys), "del/never", "other/never")...); err != nil {
			t.Fatalf("Delete many: %v", err)
		}
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatalf("Delete of nothing: %v", err)
	}
	res, err := s.List(ctx, "", "/")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Prefixes, []string{"del/"}) || len(res.Objects) != 0 {
		t.Fatalf("after delete: %+v", res)
	}
	res, err = s.List(ctx, "del/", "/")
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(res.Objects); !slices.Equal(got, []string{"del/keep"}) || len(res.Prefixes) != 0 {
		t.Fatalf("after delete: %v %v, want only del/keep", got, res.Prefixes)
	}
	// A deleted key can be written again, even with NoOverwrite.
	if err := objectstore.PutBytes(ctx, s, keys[3], []byte("again"), objectstore.CreateOptions{NoOverwrite: true}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, keys[3]); string(got) != "again" {
		t.Fatalf("got %q", got)
	}
}

// KeyChars are keys with characters that URL and signature code get wrong.
var KeyChars = []string{
	"sp ace/x y", "plus+sign", "per%cent", "q?uery", "hash#tag", "eq=ual&amp", "tilde~", "uni/cödé/日本",
	"colon:semi;", "quote'dq\"", "star*", "brace{}[]", "comma,", "at@dollar$", "-dash/_under/.dot",
}

func testKeyCharacters(t *testing.T, s objectstore.Store, _ Options) {
	for i, k := range KeyChars {
		put(t, s, k, []byte(k))
		if got := get(t, s, k); string(got) != k {
			t.Fatalf("key %q: got %q", k, got)
		}
		if _, err := s.Head(t.Context(), k); err != nil {
			t.Fatalf("head %q: %v", k, err)
		}
		_ = i
	}
	res, err := s.List(t.Context(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keysOf(res.Objects), slices.Sorted(slices.Values(KeyChars)); !slices.Equal(got, want) {
		t.Fatalf("List = %q, want %q", got, want)
	}
	if err := s.Delete(t.Context(), KeyChars...); err != nil {
		t.Fatal(err)
	}
	res, err = s.List(t.Context(), "", "")
	if err != nil || len(res.Objects) != 0 {
		t.Fatalf("after delete: %+v %v", res, err)
	}
}

// InvalidKeys are keys every backend refuses with ErrInvalidKey.
var InvalidKeys = []string{"", "/abs", "a//b", "trail/", "../up", "a/../b", "a/./b", ".", "..", "back\\slash", "nul\x00", "tab\t", "\xff\xfe", string(make([]byte, 1025))}

func testInvalidKeys(t *testing.T, s objectstore.Store, _ Options) {
	ctx := t.Context()
	for _, k := range InvalidKeys {
		if _, err := s.CreateObject(ctx, k, objectstore.CreateOptions{}); !errors.Is(err, objectstore.ErrInvalidKey) {
			t.Errorf("CreateObject(%q) = %v, want ErrInvalidKey", k, err)
		}
		if _, _, err := s.ReadObject(ctx, k); !errors.Is(err, objectstore.ErrInvalidKey) {
			t.Errorf("ReadObject(%q) = %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Head(ctx, k); !errors.Is(err, objectstore.ErrInvalidKey) {
			t.Errorf("Head(%q) = %v, want ErrInvalidKey", k, err)
		}
		if err := s.Delete(ctx, "fine", k); !errors.Is(err, objectstore.ErrInvalidKey) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

func testPrefixConflict(t *testing.T, s objectstore.Store, opts Options) {
	if opts.AllowPrefixConflict {
		t.Skip("backend allows a key to be a folder of another")
	}
	put(t, s, "p/q", []byte("x"))
	if err := objectstore.PutBytes(t.Context(), s, "p", []byte("y"), objectstore.CreateOptions{}); err == nil {
		t.Fatal(`"p" written while "p/q" exists`)
	}
	if err := objectstore.PutBytes(t.Context(), s, "p/q/r", []byte("y"), objectstore.CreateOptions{}); err == nil {
		t.Fatal(`"p/q/r" written while "p/q" exists`)
	}
	if got := get(t, s, "p/q"); string(got) != "x" {
		t.Fatalf("got %q", got)
	}
}

func testCancelledContext(t *testing.T, s objectstore.Store, _ Options) {
	put(t, s, "ctx", []byte("data"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := s.ReadObject(ctx, "ctx"); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadObject = %v, want context.Canceled", err)
	}
	if _, err := s.Head(ctx, "ctx"); !errors.Is(err, context.Canceled) {
		t.Errorf("Head = %v, want context.Canceled", err)
	}
	if _, err := s.List(ctx, "", ""); !errors.Is(err, context.Canceled) {
		t.Errorf("List = %v, want context.Canceled", err)
	}
	if err := s.Delete(ctx, "ctx"); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete = %v, want context.Canceled", err)
	}
	r, _, err := s.ReadObject(t.Context(), "ctx")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.ReadAt(ctx, make([]byte, 2), 0); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadAt = %v, want context.Canceled", err)
	}
	if got := get(t, s, "ctx"); string(got) != "data" {
		t.Fatalf("got %q", got)
	}
}
