// Package fs is an objectstore.Store on a local folder: the embedded
// default bucket. Keys map to paths below the folder ('/' separates
// sub-folders); all access goes through an os.Root, so no key (and no
// symbolic link) reaches outside the folder.
//
// Layout:
//
//	DIR/
//	  .objectstore-tmp/   objects being written (never listed)
//	  a/b/c               the object "a/b/c"
//
// A Writer writes to a fresh file in .objectstore-tmp, and Close makes it
// durable and visible: fsync the file, rename(2) it over the key's path
// (link(2) for NoOverwrite, which fails if the key exists), then fsync the
// folder, and every folder up to DIR if new ones were made. A crash leaves
// either the old state or the new object, plus at worst a temporary file,
// which New removes once it is an hour old. Delete removes the file and the
// folders it leaves empty. A Reader keeps the opened file, so it reads the
// version it opened even if the key is replaced or deleted meanwhile.
package fs

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/internal/listing"
)

// TempDir is the folder, below the store's folder, for objects being
// written. Keys may not start with it.
const TempDir = ".objectstore-tmp"

// staleTemp is the age after which New removes a temporary file.
const staleTemp = time.Hour

// Store is a local-folder bucket.
type Store struct {
	root   *os.Root
	dir    string
	closed atomic.Bool
}

var _ objectstore.Store = (*Store)(nil)

// New opens (creating if needed) the folder dir as a Store and removes
// temporary files left by a crash more than an hour ago.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fs: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("fs: %w", err)
	}
	if err := root.MkdirAll(TempDir, 0o755); err != nil {
		root.Close()
		return nil, fmt.Errorf("fs: %w", err)
	}
	s := &Store{root: root, dir: dir}
	if entries, err := iofs.ReadDir(root.FS(), TempDir); err == nil {
		for _, e := range entries {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTemp {
				_ = root.Remove(path.Join(TempDir, e.Name()))
			}
		}
	}
	return s, nil
}

// Dir returns the store's folder.
func (s *Store) Dir() string { return s.dir }

func (s *Store) check(key string) error {
	if s.closed.Load() {
		return objectstore.ErrClosed
	}
	if err := objectstore.CheckKey(key); err != nil {
		return err
	}
	if key == TempDir || strings.HasPrefix(key, TempDir+"/") {
		return fmt.Errorf("%w %q: reserved by the fs backend", objectstore.ErrInvalidKey, key)
	}
	return nil
}

// wrap turns an OS error about key into one of objectstore's.
func wrap(op, key string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, iofs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("fs: %s %q: %w (%v)", op, key, objectstore.ErrNotExist, err)
	default:
		return fmt.Errorf("fs: %s %q: %w", op, key, err)
	}
}

func (s *Store) openFile(key string) (*os.File, os.FileInfo, error) {
	f, err := s.root.Open(key)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, nil, iofs.ErrNotExist // a folder is a prefix, not an object
	}
	return f, info, nil
}

// ReadObject implements objectstore.Store.
func (s *Store) ReadObject(ctx context.Context, key string) (objectstore.Reader, int64, error) {
	if err := s.check(key); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	f, info, err := s.openFile(key)
	if err != nil {
		return nil, 0, wrap("read", key, err)
	}
	return &reader{f: f, key: key, size: info.Size()}, info.Size(), nil
}

// Head implements objectstore.Store.
func (s *Store) Head(ctx context.Context, key string) (objectstore.ObjectInfo, error) {
	if err := s.check(key); err != nil {
		return objectstore.ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return objectstore.ObjectInfo{}, err
	}
	info, err := s.root.Stat(key)
	if err == nil && !info.Mode().IsRegular() {
		err = iofs.ErrNotExist
	}
	if err != nil {
		return objectstore.ObjectInfo{}, wrap("head", key, err)
	}
	return objectstore.ObjectInfo{Key: key, Size: info.Size(), ModTime: info.ModTime()}, nil
}

// List implements objectstore.Store.
func (s *Store) List(ctx context.Context, prefix, delimiter string) (objectstore.Listing, error) {
	if s.closed.Load() {
		return objectstore.Listing{}, objectstore.ErrClosed
	}
	if err := objectstore.CheckPrefix(prefix); err != nil {
		return objectstore.Listing{}, err
	}
	// Walk from the deepest folder the prefix names in full.
	base := "."
	if i := strings.LastIndexByte(prefix, '/'); i > 0 {
		base = prefix[:i]
		if objectstore.CheckKey(base) != nil {
			return objectstore.Listing{}, nil // no key can start with this prefix
		}
	}
	var objs []objectstore.ObjectInfo
	var prefixes []string
	err := iofs.WalkDir(s.root.FS(), base, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				return nil // raced with a Delete, or the base is missing
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			if p == "." {
				return nil
			}
			if p == TempDir {
				return iofs.SkipDir
			}
			dirKey := p + "/"
			switch {
			case delimiter == "/" && strings.HasPrefix(p, prefix):
				// The first '/' after the prefix ends p: every key
				// below is folded into dirKey. Report it once if
				// anything lives below, and do not descend.
				if s.hasFile(p) {
					prefixes = append(prefixes, dirKey)
				}
				return iofs.SkipDir
			case strings.HasPrefix(dirKey, prefix), strings.HasPrefix(prefix, dirKey):
				return nil
			default:
				return iofs.SkipDir
			}
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(p, prefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				return nil
			}
			return err
		}
		objs = append(objs, objectstore.ObjectInfo{Key: p, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return objectstore.Listing{}, fmt.Errorf("fs: list %q: %w", prefix, err)
	}
	res := listing.Group(objs, prefix, delimiter)
	if len(prefixes) > 0 {
		res.Prefixes = append(res.Prefixes, prefixes...)
		res = objectstore.Listing{Objects: res.Objects, Prefixes: sortedUnique(res.Prefixes)}
	}
	return res, nil
}

// hasFile reports whether folder p holds a regular file at any depth.
func (s *Store) hasFile(p string) bool {
	found := errors.New("found")
	err := iofs.WalkDir(s.root.FS(), p, func(_ string, d iofs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			return found
		}
		return nil
	})
	return err == found
}

// Delete implements objectstore.Store.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := s.check(k); err != nil {
			return err
		}
	}
	var errs []error
	for _, key := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		info, err := s.root.Lstat(key)
		if err != nil || info.IsDir() {
			if err != nil && !errors.Is(err, iofs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
				errs = append(errs, wrap("delete", key, err))
			}
			continue // missing: nothing to do
		}
		if err := s.root.Remove(key); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			errs = append(errs, wrap("delete", key, err))
			continue
		}
		parent := path.Dir(key)
		// Remove the folders the key leaves empty, then make the
		// removal durable in the nearest folder that stays.
		for parent != "." {
			if s.root.Remove(parent) != nil {
				break // not empty (or raced with a writer): keep it
			}
			parent = path.Dir(parent)
		}
		if err := s.syncDir(parent); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			errs = append(errs, wrap("delete", key, err))
		}
	}
	return errors.Join(errs...)
}

// IsNotExistError implements objectstore.Store.
func (s *Store) IsNotExistError(err error) bool { return objectstore.IsNotExist(err) }

// Close implements objectstore.Store. Open Readers keep their files.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.root.Close()
}

func (s *Store) syncDir(dir string) error {
	f, err := s.root.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.Join(err, f.Close())
}

// CreateObject implements objectstore.Store.
func (s *Store) CreateObject(ctx context.Context, key string, opts objectstore.CreateOptions) (objectstore.Writer, error) {
	if err := s.check(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tmp := path.Join(TempDir, rand.Text())
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, wrap("create", key, err)
	}
	return &writer{s: s, ctx: ctx, key: key, opts: opts, tmp: tmp, f: f, bw: bufio.NewWriterSize(f, 256<<10)}, nil
}

type writer struct {
	s    *Store
	ctx  context.Context
	key  string
	opts objectstore.CreateOptions
	tmp  string
	f    *os.File
	bw   *bufio.Writer
	err  error // sticky
	done bool  // committed or aborted
}

func (w *writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, objectstore.ErrClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	if err := w.ctx.Err(); err != nil {
		w.err = err
		return 0, err
	}
	n, err := w.bw.Write(p)
	if err != nil {
		w.err = wrap("write", w.key, err)
	}
	return n, w.err
}

func (w *writer) Close() error {
	if w.done {
		return objectstore.ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	err := w.commit()
	if err != nil {
		w.err = err
		return err
	}
	w.done = true
	return nil
}

func (w *writer) commit() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if w.s.closed.Load() {
		return objectstore.ErrClosed
	}
	if err := w.bw.Flush(); err != nil {
		return wrap("write", w.key, err)
	}
	if err := w.f.Sync(); err != nil {
		return wrap("sync", w.key, err)
	}
	if err := w.f.Close(); err != nil {
		w.f = nil
		return wrap("close", w.key, err)
	}
	w.f = nil
	root, parent := w.s.root, path.Dir(w.key)
	// A concurrent Delete may remove a folder we just made (it prunes
	// empty ones); try again a few times.
	var err error
	for range 5 {
		created := false
		if parent != "." {
			if _, statErr := root.Stat(parent); statErr != nil {
				created = true
			}
			if err = root.MkdirAll(parent, 0o755); err != nil {
				if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EEXIST) {
					return fmt.Errorf("fs: create %q: %w: a leading part of it is an object", w.key, objectstore.ErrInvalidKey)
				}
				return wrap("create", w.key, err)
			}
		}
		if info, statErr := root.Lstat(w.key); statErr == nil && info.IsDir() {
			return fmt.Errorf("fs: create %q: %w: it is a prefix of other keys", w.key, objectstore.ErrInvalidKey)
		}
		if w.opts.NoOverwrite {
			err = root.Link(w.tmp, w.key)
			if errors.Is(err, iofs.ErrExist) {
				return fmt.Errorf("fs: create %q: %w", w.key, objectstore.ErrExists)
			}
		} else {
			err = root.Rename(w.tmp, w.key)
		}
		if errors.Is(err, iofs.ErrNotExist) {
			continue
		}
		if err != nil {
			return wrap("create", w.key, err)
		}
		if w.opts.NoOverwrite {
			_ = root.Remove(w.tmp)
		}
		// Make the new name durable: its folder, and each folder we
		// created up to the store's folder.
		dirs := []string{parent}
		if created {
			for d := parent; d != "."; {
				d = path.Dir(d)
				dirs = append(dirs, d)
			}
		}
		for _, d := range dirs {
			if err := w.s.syncDir(d); err != nil {
				return wrap("sync folder", w.key, err)
			}
		}
		return nil
	}
	return wrap("create", w.key, err)
}

func (w *writer) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	if err := w.s.root.Remove(w.tmp); err != nil && !errors.Is(err, iofs.ErrNotExist) && !w.s.closed.Load() {
		return wrap("abort", w.key, err)
	}
	return nil
}

type reader struct {
	f    *os.File
	key  string
	size int64
}

func (r *reader) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := objectstore.CheckRange(off, int64(len(p)), r.size); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	n, err := r.f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // the file shrank: impossible unless tampered with
	}
	return wrap("read", r.key, err)
}

func (r *reader) ReadRange(ctx context.Context, off, length int64) (io.ReadCloser, error) {
	if err := objectstore.CheckRange(off, length, r.size); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &rangeReader{ctx: ctx, r: io.NewSectionReader(r.f, off, length), left: length}, nil
}

func (r *reader) Close() error { return r.f.Close() }

type rangeReader struct {
	ctx  context.Context
	r    *io.SectionReader
	left int64
}

func (rr *rangeReader) Read(p []byte) (int, error) {
	if err := rr.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := rr.r.Read(p)
	rr.left -= int64(n)
	if err == io.EOF && rr.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (rr *rangeReader) Close() error { return nil }

func sortedUnique(s []string) []string {
	out := make([]string, 0, len(s))
	seen := map[string]bool{}
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}
