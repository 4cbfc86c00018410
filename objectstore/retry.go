package objectstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// RetryOptions tune WithRetry.
type RetryOptions struct {
	// MaxAttempts is how many times a call is tried (default 5).
	MaxAttempts int
	// Backoff between attempts grows from BaseBackoff (default 10ms) by
	// doubling, up to MaxBackoff (default 1s), with full jitter.
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// Retryable decides which errors are worth another attempt; default
	// errors.Is(err, ErrUnavailable). Context errors are never retried.
	Retryable func(error) bool
}

// WithRetry returns a Store that retries the idempotent calls of s on
// transient errors: ReadObject, Head, List, Delete, CreateObject (the call,
// not the writes), Reader.ReadAt and Reader.ReadRange, whose stream is
// resumed from where it stopped when it is cut short. Writes and commits
// are not retried: the caller still has the data and decides (re-upload
// under the same key, or a new one). The s3 backend retries its requests
// itself; WithRetry is for fs and the faulty wrapper, and for callers
// that want a longer horizon on top.
func WithRetry(s Store, opts RetryOptions) Store {
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 5
	}
	if opts.BaseBackoff <= 0 {
		opts.BaseBackoff = 10 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = time.Second
	}
	if opts.Retryable == nil {
		opts.Retryable = func(err error) bool { return errors.Is(err, ErrUnavailable) }
	}
	return &retryStore{s: s, opts: opts}
}

type retryStore struct {
	s    Store
	opts RetryOptions
}

var _ Store = (*retryStore)(nil)

// wait sleeps before attempt+1, or returns the context's error.
func (o *RetryOptions) wait(ctx context.Context, attempt int) error {
	ceiling := o.MaxBackoff
	if attempt < 30 {
		if d := o.BaseBackoff << attempt; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	t := time.NewTimer(rand.N(ceiling + 1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (o *RetryOptions) do(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; attempt < o.MaxAttempts; attempt++ {
		if err = fn(); err == nil || !o.Retryable(err) || ctx.Err() != nil {
			return err
		}
		if attempt+1 < o.MaxAttempts {
			if werr := o.wait(ctx, attempt); werr != nil {
				return errors.Join(err, werr)
			}
		}
	}
	return fmt.Errorf("objectstore: gave up after %d attempts: %w", o.MaxAttempts, err)
}

func (r *retryStore) ReadObject(ctx context.Context, key string) (Reader, int64, error) {
	var rd Reader
	var size int64
	err := r.opts.do(ctx, func() (err error) {
		rd, size, err = r.s.ReadObject(ctx, key)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return &retryReader{r: rd, opts: &r.opts}, size, nil
}

func (r *retryStore) CreateObject(ctx context.Context, key string, opts CreateOptions) (Writer, error) {
	var w Writer
	err := r.opts.do(ctx, func() (err error) {
		w, err = r.s.CreateObject(ctx, key, opts)
		return err
	})
	return w, err
}

func (r *retryStore) Head(ctx context.Context, key string) (ObjectInfo, error) {
	var info ObjectInfo
	err := r.opts.do(ctx, func() (err error) {
		info, err = r.s.Head(ctx, key)
		return err
	})
	return info, err
}

func (r *retryStore) List(ctx context.Context, prefix, delimiter string) (Listing, error) {
	var res Listing
	err := r.opts.do(ctx, func() (err error) {
		res, err = r.s.List(ctx, prefix, delimiter)
		return err
	})
	return res, err
}

func (r *retryStore) Delete(ctx context.Context, keys ...string) error {
	return r.opts.do(ctx, func() error { return r.s.Delete(ctx, keys...) })
}

func (r *retryStore) IsNotExistError(err error) bool { return r.s.IsNotExistError(err) }
func (r *retryStore) Close() error                   { return r.s.Close() }

type retryReader struct {
	r    Reader
	opts *RetryOptions
}

func (r *retryReader) ReadAt(ctx context.Context, p []byte, off int64) error {
	return r.opts.do(ctx, func() error { return r.r.ReadAt(ctx, p, off) })
}

func (r *retryReader) ReadRange(ctx context.Context, off, length int64) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := r.opts.do(ctx, func() (err error) {
		rc, err = r.r.ReadRange(ctx, off, length)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &resumingRange{r: r, ctx: ctx, rc: rc, off: off, left: length}, nil
}

func (r *retryReader) Close() error { return r.r.Close() }

// resumingRange reopens the range where it stopped when a read fails
// with a retryable error.
type resumingRange struct {
	r       *retryReader
	ctx     context.Context
	rc      io.ReadCloser
	off     int64
	left    int64
	resumes int
}

func (rr *resumingRange) Read(p []byte) (int, error) {
	for {
		if rr.left == 0 {
			return 0, io.EOF
		}
		if rr.rc == nil {
			rc, err := rr.r.r.ReadRange(rr.ctx, rr.off, rr.left)
			if err != nil {
				if rr.r.opts.Retryable(err) && rr.resumes+1 < rr.r.opts.MaxAttempts && rr.ctx.Err() == nil {
					if werr := rr.r.opts.wait(rr.ctx, rr.resumes); werr != nil {
						return 0, werr
					}
					rr.resumes++
					continue
				}
				return 0, err
			}
			rr.rc = rc
		}
		if int64(len(p)) > rr.left {
			p = p[:rr.left]
		}
		n, err := rr.rc.Read(p)
		rr.off += int64(n)
		rr.left -= int64(n)
		if err == nil || (err == io.EOF && rr.left == 0) {
			if rr.left == 0 {
				return n, io.EOF
			}
			return n, nil
		}
		if err == io.EOF {
			err = fmt.Errorf("%w: %w", ErrUnavailable, io.ErrUnexpectedEOF)
		}
		if !rr.r.opts.Retryable(err) || rr.resumes+1 >= rr.r.opts.MaxAttempts || rr.ctx.Err() != nil {
			return n, err
		}
		rr.rc.Close()
		rr.rc = nil
		rr.resumes++
		if werr := rr.r.opts.wait(rr.ctx, rr.resumes-1); werr != nil {
			return n, werr
		}
		if n > 0 {
			return n, nil
		}
	}
}

func (rr *resumingRange) Close() error {
	if rr.rc == nil {
		return nil
	}
	err := rr.rc.Close()
	rr.rc = nil
	return err
}
