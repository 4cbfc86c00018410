// Package mem is an in-memory objectstore.Store for unit tests of other
// packages. It follows the same key rules and error contract as the fs and
// s3 backends (the conformance suite checks it). A Reader keeps reading the
// version it opened, like fs.
package mem

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/internal/listing"
)

// Store keeps objects in a map. The zero value is not usable; call New.
type Store struct {
	now func() time.Time
	mu  struct {
		sync.Mutex
		objects map[string]object
		closed  bool
	}
}

type object struct {
	data    []byte // never modified after commit
	modTime time.Time
}

var _ objectstore.Store = (*Store)(nil)

// New returns an empty Store. now, if non-nil, replaces time.Now for
// modification times.
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	s := &Store{now: now}
	s.mu.objects = map[string]object{}
	return s
}

func (s *Store) get(key string) (object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return object{}, objectstore.ErrClosed
	}
	o, ok := s.mu.objects[key]
	if !ok {
		return object{}, fmt.Errorf("mem: %q: %w", key, objectstore.ErrNotExist)
	}
	return o, nil
}

// ReadObject implements objectstore.Store.
func (s *Store) ReadObject(ctx context.Context, key string) (objectstore.Reader, int64, error) {
	if err := objectstore.CheckKey(key); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	o, err := s.get(key)
	if err != nil {
		return nil, 0, err
	}
	return &reader{data: o.data}, int64(len(o.data)), nil
}

// CreateObject implements objectstore.Store.
func (s *Store) CreateObject(ctx context.Context, key string, opts objectstore.CreateOptions) (objectstore.Writer, error) {
	if err := objectstore.CheckKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &writer{s: s, ctx: ctx, key: key, opts: opts}, nil
}

// Head implements objectstore.Store.
func (s *Store) Head(ctx context.Context, key string) (objectstore.ObjectInfo, error) {
	if err := objectstore.CheckKey(key); err != nil {
		return objectstore.ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return objectstore.ObjectInfo{}, err
	}
	o, err := s.get(key)
	if err != nil {
		return objectstore.ObjectInfo{}, err
	}
	return objectstore.ObjectInfo{Key: key, Size: int64(len(o.data)), ModTime: o.modTime}, nil
}

// List implements objectstore.Store.
func (s *Store) List(ctx context.Context, prefix, delimiter string) (objectstore.Listing, error) {
	if err := objectstore.CheckPrefix(prefix); err != nil {
		return objectstore.Listing{}, err
	}
	if err := ctx.Err(); err != nil {
		return objectstore.Listing{}, err
	}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return objectstore.Listing{}, objectstore.ErrClosed
	}
	var objs []objectstore.ObjectInfo
	for k, o := range s.mu.objects {
		if strings.HasPrefix(k, prefix) {
			objs = append(objs, objectstore.ObjectInfo{Key: k, Size: int64(len(o.data)), ModTime: o.modTime})
		}
	}
	s.mu.Unlock()
	return listing.Group(objs, prefix, delimiter), nil
}

// Delete implements objectstore.Store.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := objectstore.CheckKey(k); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return objectstore.ErrClosed
	}
	for _, k := range keys {
		delete(s.mu.objects, k)
	}
	return nil
}

// IsNotExistError implements objectstore.Store.
func (s *Store) IsNotExistError(err error) bool { return objectstore.IsNotExist(err) }

// Close implements objectstore.Store. Open Readers keep working.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.closed = true
	return nil
}

func (s *Store) commit(key string, data []byte, noOverwrite bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return objectstore.ErrClosed
	}
	if _, ok := s.mu.objects[key]; ok && noOverwrite {
		return fmt.Errorf("mem: %q: %w", key, objectstore.ErrExists)
	}
	// "a" and "a/b" cannot both exist (as on fs and MinIO).
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			if _, ok := s.mu.objects[key[:i]]; ok {
				return fmt.Errorf("mem: %q: %w: %q is an object", key, objectstore.ErrInvalidKey, key[:i])
			}
		}
	}
	for k := range s.mu.objects {
		if strings.HasPrefix(k, key+"/") {
			return fmt.Errorf("mem: %q: %w: it is a prefix of %q", key, objectstore.ErrInvalidKey, k)
		}
	}
	s.mu.objects[key] = object{data: data, modTime: s.now()}
	return nil
}

type reader struct {
	data []byte
}

func (r *reader) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := objectstore.CheckRange(off, int64(len(p)), int64(len(r.data))); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	copy(p, r.data[off:])
	return nil
}

func (r *reader) ReadRange(ctx context.Context, off, length int64) (io.ReadCloser, error) {
	if err := objectstore.CheckRange(off, length, int64(len(r.data))); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(r.data[off : off+length])), nil
}

func (r *reader) Close() error { return nil }

type writer struct {
	s    *Store
	ctx  context.Context
	key  string
	opts objectstore.CreateOptions
	buf  bytes.Buffer
	done bool // committed or aborted
}

func (w *writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, objectstore.ErrClosed
	}
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	return w.buf.Write(p)
}

func (w *writer) Close() error {
	if w.done {
		return objectstore.ErrClosed
	}
	if err := w.ctx.Err(); err != nil {
		return err
	}
	data := bytes.Clone(w.buf.Bytes())
	if err := w.s.commit(w.key, data, w.opts.NoOverwrite); err != nil {
		return err
	}
	w.done = true
	w.buf = bytes.Buffer{}
	return nil
}

func (w *writer) Abort() error {
	w.done = true
	w.buf = bytes.Buffer{}
	return nil
}
