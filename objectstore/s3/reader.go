package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sediment-io/sediment/objectstore"
)

// maxResumes is how many times a read cut short is resumed.
const maxResumes = 5

var errTruncated = fmt.Errorf("transfer cut short: %w", io.ErrUnexpectedEOF)

type reader struct {
	s    *Store
	key  string
	size int64
	etag string
}

// get sends one ranged GET for [off, off+length), length > 0.
func (r *reader) get(ctx context.Context, off, length int64) (io.ReadCloser, error) {
	in := &s3.GetObjectInput{
		Bucket: &r.s.cfg.Bucket,
		Key:    r.s.objectKey(r.key),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+length-1)),
	}
	if r.etag != "" {
		in.IfMatch = aws.String(r.etag)
	}
	out, err := r.s.client.GetObject(ctx, in)
	if err != nil {
		if isPreconditionFailed(err) {
			return nil, fmt.Errorf("s3: read %q: %w: the object was replaced after ReadObject", r.key, objectstore.ErrNotExist)
		}
		return nil, mapErr("read", r.key, err)
	}
	if n := aws.ToInt64(out.ContentLength); n != length {
		out.Body.Close()
		return nil, fmt.Errorf("s3: read %q: asked for %d bytes at %d, the response has %d", r.key, length, off, n)
	}
	return out.Body, nil
}

// pause waits before resuming a cut read.
func (r *reader) pause(ctx context.Context, attempt int) error {
	d, _ := jitterBackoff{base: r.s.cfg.BaseBackoff, max: r.s.cfg.MaxBackoff}.BackoffDelay(attempt, nil)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (r *reader) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := objectstore.CheckRange(off, int64(len(p)), r.size); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.s.closed.Load() {
		return objectstore.ErrClosed
	}
	done := 0
	for attempt := 0; ; attempt++ {
		if done == len(p) {
			return nil
		}
		body, err := r.get(ctx, off+int64(done), int64(len(p)-done))
		if err != nil {
			return err
		}
		n, err := io.ReadFull(body, p[done:])
		body.Close()
		done += n
		if err == nil {
			continue
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("s3: read %q: %w", r.key, ctxErr)
		}
		if attempt >= maxResumes {
			return mapErr("read", r.key, fmt.Errorf("%w after %d resumes (%v)", errTruncated, attempt, err))
		}
		if err := r.pause(ctx, attempt); err != nil {
			return err
		}
	}
}

func (r *reader) ReadRange(ctx context.Context, off, length int64) (io.ReadCloser, error) {
	if err := objectstore.CheckRange(off, length, r.size); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.s.closed.Load() {
		return nil, objectstore.ErrClosed
	}
	if length == 0 {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	body, err := r.get(ctx, off, length)
	if err != nil {
		return nil, err
	}
	return &rangeReader{r: r, ctx: ctx, off: off, left: length, body: body}, nil
}

func (r *reader) Close() error { return nil }

// OpenRange implements objectstore.RangeOpener: one ranged GET, without the
// HEAD of ReadObject. The object's size comes from the response's
// Content-Range and its ETag pins the version that resumes read.
func (s *Store) OpenRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, int64, error) {
	if err := s.check(key); err != nil {
		return nil, 0, err
	}
	if off < 0 || length <= 0 {
		return nil, 0, fmt.Errorf("s3: read %q: %w: [%d, %d+%d)", key, objectstore.ErrOutOfRange, off, off, length)
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if s.closed.Load() {
		return nil, 0, objectstore.ErrClosed
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: &s.cfg.Bucket,
		Key:    s.objectKey(key),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+length-1)),
	})
	if err != nil {
		if status, code := errKind(err); status == http.StatusRequestedRangeNotSatisfiable || code == "InvalidRange" {
			return nil, 0, fmt.Errorf("s3: read %q: %w: [%d, %d+%d): %v", key, objectstore.ErrOutOfRange, off, off, length, err)
		}
		return nil, 0, mapErr("read", key, err)
	}
	size, ok := contentRangeSize(aws.ToString(out.ContentRange))
	if !ok {
		out.Body.Close()
		return nil, 0, fmt.Errorf("s3: read %q: response without a usable Content-Range (%q)", key, aws.ToString(out.ContentRange))
	}
	if err := objectstore.CheckRange(off, length, size); err != nil {
		out.Body.Close()
		return nil, 0, fmt.Errorf("s3: read %q: %w", key, err)
	}
	if n := aws.ToInt64(out.ContentLength); n != length {
		out.Body.Close()
		return nil, 0, fmt.Errorf("s3: read %q: asked for %d bytes at %d, the response has %d", key, length, off, n)
	}
	r := &reader{s: s, key: key, size: size, etag: aws.ToString(out.ETag)}
	return &rangeReader{r: r, ctx: ctx, off: off, left: length, body: out.Body}, size, nil
}

// contentRangeSize returns the complete length of a Content-Range header
// ("bytes 0-99/1234" → 1234).
func contentRangeSize(h string) (int64, bool) {
	i := strings.LastIndexByte(h, '/')
	if i < 0 || !strings.HasPrefix(h, "bytes ") {
		return 0, false
	}
	n, err := strconv.ParseInt(h[i+1:], 10, 64)
	return n, err == nil && n >= 0
}

// rangeReader streams a range and resumes it (a new ranged GET from where
// it stopped) when the connection drops or the body ends early.
type rangeReader struct {
	r       *reader
	ctx     context.Context
	off     int64
	left    int64
	body    io.ReadCloser
	resumes int
	err     error // sticky
}

func (rr *rangeReader) Read(p []byte) (int, error) {
	for {
		if rr.err != nil {
			return 0, rr.err
		}
		if rr.left == 0 {
			return 0, io.EOF
		}
		if rr.body == nil {
			body, err := rr.r.get(rr.ctx, rr.off, rr.left)
			if err != nil {
				rr.err = err
				return 0, err
			}
			rr.body = body
		}
		if int64(len(p)) > rr.left {
			p = p[:rr.left]
		}
		n, err := rr.body.Read(p)
		rr.off += int64(n)
		rr.left -= int64(n)
		if rr.left == 0 {
			rr.body.Close()
			rr.body = nil
			return n, io.EOF
		}
		if err == nil {
			return n, nil
		}
		// Cut short (io.EOF with bytes left) or a broken connection.
		rr.body.Close()
		rr.body = nil
		if ctxErr := rr.ctx.Err(); ctxErr != nil {
			rr.err = fmt.Errorf("s3: read %q: %w", rr.r.key, ctxErr)
		} else if rr.resumes >= maxResumes {
			rr.err = mapErr("read", rr.r.key, fmt.Errorf("%w after %d resumes (%v)", errTruncated, rr.resumes, err))
		} else if pauseErr := rr.r.pause(rr.ctx, rr.resumes); pauseErr != nil {
			rr.err = pauseErr
		}
		rr.resumes++
		if n > 0 {
			return n, nil
		}
	}
}

func (rr *rangeReader) Close() error {
	var err error
	if rr.body != nil {
		err = rr.body.Close()
		rr.body = nil
	}
	if rr.err == nil {
		rr.err = errors.New("s3: read from a closed range")
	}
	return err
}
