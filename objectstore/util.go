package objectstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
)

// Put writes data from r as key in one call: CreateObject, copy, Close, and
// Abort on any failure.
func Put(ctx context.Context, s Store, key string, r io.Reader, opts CreateOptions) error {
	w, err := s.CreateObject(ctx, key, opts)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		return errors.Join(err, w.Abort())
	}
	if err := w.Close(); err != nil {
		return errors.Join(err, w.Abort())
	}
	return nil
}

// PutBytes is Put with a byte slice (and its length as the size hint).
func PutBytes(ctx context.Context, s Store, key string, data []byte, opts CreateOptions) error {
	if opts.SizeHint <= 0 {
		opts.SizeHint = int64(len(data))
	}
	return Put(ctx, s, key, bytes.NewReader(data), opts)
}

// ReadAll returns the whole object, refusing objects larger than maxSize
// (so a bad key or a huge object never becomes an unbounded allocation).
func ReadAll(ctx context.Context, s Store, key string, maxSize int64) ([]byte, error) {
	r, size, err := s.ReadObject(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if size > maxSize {
		return nil, fmt.Errorf("objectstore: %q is %d bytes, more than the %d allowed", key, size, maxSize)
	}
	buf := make([]byte, size)
	if size == 0 {
		return buf, nil
	}
	if err := r.ReadAt(ctx, buf, 0); err != nil {
		return nil, err
	}
	return buf, nil
}

// CheckRange returns an error wrapping ErrOutOfRange unless [off, off+length)
// lies within an object of the given size. Backends use it before any
// transfer.
func CheckRange(off, length, size int64) error {
	if off < 0 || length < 0 || off > size || length > size-off {
		return fmt.Errorf("%w: [%d, %d+%d) of %d bytes", ErrOutOfRange, off, off, length, size)
	}
	return nil
}
