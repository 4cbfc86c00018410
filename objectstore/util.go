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

// RangeOpener is implemented by stores that can stream a range of an object
// without opening it first: on s3 one ranged GET, where ReadObject costs a
// HEAD before it. OpenRange uses it when the store has it.
type RangeOpener interface {
	// OpenRange streams length bytes (length > 0) of key from off, as
	// Reader.ReadRange does (resumed if cut, never mixing versions of the
	// object), and returns the object's size. A range past the object's
	// end fails with an error wrapping ErrOutOfRange; a missing object
	// with one for which IsNotExistError is true.
	OpenRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, int64, error)
}

// OpenRange streams length bytes (length > 0) of key from off and returns
// the object's size: with one request on a store that is a RangeOpener,
// else with ReadObject and ReadRange (the Reader is closed with the stream).
func OpenRange(ctx context.Context, s Store, key string, off, length int64) (io.ReadCloser, int64, error) {
	if ro, ok := s.(RangeOpener); ok {
		return ro.OpenRange(ctx, key, off, length)
	}
	r, size, err := s.ReadObject(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	if err := CheckRange(off, length, size); err != nil {
		r.Close()
		return nil, 0, err
	}
	rc, err := r.ReadRange(ctx, off, length)
	if err != nil {
		r.Close()
		return nil, 0, err
	}
	return &rangeStream{ReadCloser: rc, r: r}, size, nil
}

// rangeStream closes its Reader with the stream.
type rangeStream struct {
	io.ReadCloser
	r Reader
}

func (s *rangeStream) Close() error { return errors.Join(s.ReadCloser.Close(), s.r.Close()) }
