package s3

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sediment-io/sediment/objectstore"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32cBase64(sum uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], sum)
	return base64.StdEncoding.EncodeToString(b[:])
}

// CreateObject implements objectstore.Store.
func (s *Store) CreateObject(ctx context.Context, key string, opts objectstore.CreateOptions) (objectstore.Writer, error) {
	if err := s.check(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &writer{s: s, ctx: ctx, key: key, opts: opts, sem: make(chan struct{}, s.cfg.Concurrency)}
	w.buf = make([]byte, 0, s.initialBuffer(opts.SizeHint))
	return w, nil
}

// initialBuffer sizes the first buffer: the object if it is known to be
// small, else a whole part.
func (s *Store) initialBuffer(hint int64) int64 {
	if hint > 0 && hint < s.cfg.PartSize {
		return hint
	}
	return s.cfg.PartSize
}

type writer struct {
	s    *Store
	ctx  context.Context
	key  string
	opts objectstore.CreateOptions
	buf  []byte

	uploadID string
	partNum  int32
	sem      chan struct{} // bounds parts in flight
	wg       sync.WaitGroup
	mu       struct {
		sync.Mutex
		parts []types.CompletedPart // by part number - 1
		err   error                 // first part upload error
	}
	total int64 // bytes written
	err   error // sticky
	done  bool  // committed or aborted
}

func (w *writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, objectstore.ErrClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	written := 0
	for len(p) > 0 {
		if int64(len(w.buf)) == w.s.cfg.PartSize {
			if err := w.flushPart(); err != nil {
				w.err = err
				return written, err
			}
		}
		room := int(w.s.cfg.PartSize) - len(w.buf)
		if cap(w.buf) < int(w.s.cfg.PartSize) && len(w.buf)+len(p) > cap(w.buf) {
			// The size hint was low; grow to a whole part.
			grown := make([]byte, len(w.buf), w.s.cfg.PartSize)
			copy(grown, w.buf)
			w.buf = grown
		}
		n := min(room, len(p))
		w.buf = append(w.buf, p[:n]...)
		p = p[n:]
		written += n
		w.total += int64(n)
	}
	return written, nil
}

// flushPart starts uploading the full buffer as the next part.
func (w *writer) flushPart() error {
	if err := w.partErr(); err != nil {
		return err
	}
	if w.uploadID == "" {
		out, err := w.s.client.CreateMultipartUpload(w.ctx, &s3.CreateMultipartUploadInput{
			Bucket:            &w.s.cfg.Bucket,
			Key:               w.s.objectKey(w.key),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c,
		})
		if err != nil {
			return mapErr("create", w.key, err)
		}
		w.uploadID = aws.ToString(out.UploadId)
	}
	if w.partNum == maxParts {
		return fmt.Errorf("s3: create %q: more than %d parts of %d bytes", w.key, maxParts, w.s.cfg.PartSize)
	}
	w.partNum++
	num, data := w.partNum, w.buf
	w.buf = make([]byte, 0, w.s.cfg.PartSize)
	select {
	case w.sem <- struct{}{}:
	case <-w.ctx.Done():
		return fmt.Errorf("s3: create %q: %w", w.key, w.ctx.Err())
	}
	w.wg.Go(func() {
		defer func() { <-w.sem }()
		out, err := w.s.client.UploadPart(w.ctx, &s3.UploadPartInput{
			Bucket:            &w.s.cfg.Bucket,
			Key:               w.s.objectKey(w.key),
			UploadId:          &w.uploadID,
			PartNumber:        aws.Int32(num),
			Body:              bytes.NewReader(data),
			ContentLength:     aws.Int64(int64(len(data))),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c,
		})
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			if w.mu.err == nil {
				w.mu.err = mapErr(fmt.Sprintf("upload part %d of", num), w.key, err)
			}
			return
		}
		for int(num) > len(w.mu.parts) {
			w.mu.parts = append(w.mu.parts, types.CompletedPart{})
		}
		w.mu.parts[num-1] = types.CompletedPart{PartNumber: aws.Int32(num), ETag: out.ETag, ChecksumCRC32C: out.ChecksumCRC32C}
	})
	return nil
}

func (w *writer) partErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.err
}

func (w *writer) Close() error {
	if w.done {
		return objectstore.ErrClosed
	}
	if w.err == nil {
		w.err = w.commit()
	}
	if w.err != nil {
		w.abort()
		return w.err
	}
	w.done = true
	w.buf = nil
	return nil
}

func (w *writer) commit() error {
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("s3: create %q: %w", w.key, err)
	}
	if w.s.closed.Load() {
		return objectstore.ErrClosed
	}
	var ifNoneMatch *string
	if w.opts.NoOverwrite {
		ifNoneMatch = aws.String("*")
	}
	if w.uploadID == "" {
		sum := crc32cBase64(crc32.Checksum(w.buf, castagnoli))
		_, err := w.s.client.PutObject(w.ctx, &s3.PutObjectInput{
			Bucket:            &w.s.cfg.Bucket,
			Key:               w.s.objectKey(w.key),
			Body:              bytes.NewReader(w.buf),
			ContentLength:     aws.Int64(int64(len(w.buf))),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c,
			IfNoneMatch:       ifNoneMatch,
		})
		if err != nil && isPreconditionFailed(err) {
			return w.landed(sum, int64(len(w.buf)))
		}
		return mapErr("create", w.key, err)
	}
	if len(w.buf) > 0 {
		if err := w.flushPart(); err != nil {
			return err
		}
	}
	w.wg.Wait()
	if err := w.partErr(); err != nil {
		return err
	}
	// The composite checksum S3 reports for a multipart object: the
	// CRC32C of the parts' CRC32Cs, then "-" and the part count.
	var sums []byte
	var size int64
	for _, p := range w.mu.parts {
		raw, err := base64.StdEncoding.DecodeString(aws.ToString(p.ChecksumCRC32C))
		if err != nil || len(raw) != 4 {
			return fmt.Errorf("s3: create %q: part %d came back without a CRC32C", w.key, aws.ToInt32(p.PartNumber))
		}
		sums = append(sums, raw...)
	}
	size = w.total
	composite := fmt.Sprintf("%s-%d", crc32cBase64(crc32.Checksum(sums, castagnoli)), len(w.mu.parts))
	_, err := w.s.client.CompleteMultipartUpload(w.ctx, &s3.CompleteMultipartUploadInput{
		Bucket:          &w.s.cfg.Bucket,
		Key:             w.s.objectKey(w.key),
		UploadId:        &w.uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: w.mu.parts},
		IfNoneMatch:     ifNoneMatch,
	})
	if err != nil {
		_, code := errKind(err)
		if isPreconditionFailed(err) || code == "NoSuchUpload" {
			// Taken by someone else, or completed by an earlier attempt
			// whose answer was lost.
			return w.landed(composite, size)
		}
		return mapErr("create", w.key, err)
	}
	w.uploadID = "" // completed: nothing to abort
	return nil
}

// landed decides, after a conditional commit failed or a completed upload
// vanished, whether the object now under the key is ours (an earlier
// attempt of this very request landed and its answer was lost): same size
// and same CRC32C. If so the commit succeeded; else the key is taken.
func (w *writer) landed(checksum string, size int64) error {
	out, err := w.s.client.HeadObject(w.ctx, &s3.HeadObjectInput{
		Bucket:       &w.s.cfg.Bucket,
		Key:          w.s.objectKey(w.key),
		ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		return mapErr("create", w.key, err)
	}
	if aws.ToInt64(out.ContentLength) == size && aws.ToString(out.ChecksumCRC32C) == checksum {
		w.uploadID = ""
		return nil
	}
	return fmt.Errorf("s3: create %q: %w", w.key, objectstore.ErrExists)
}

func (w *writer) Abort() error {
	if w.done {
		return nil
	}
	return w.abort()
}

func (w *writer) abort() error {
	w.done = true
	w.buf = nil
	w.wg.Wait()
	if w.uploadID == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), time.Minute)
	defer cancel()
	_, err := w.s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket:   &w.s.cfg.Bucket,
		Key:      w.s.objectKey(w.key),
		UploadId: &w.uploadID,
	})
	w.uploadID = ""
	if err != nil {
		if _, code := errKind(err); code == "NoSuchUpload" {
			return nil
		}
		return mapErr("abort", w.key, err)
	}
	return nil
}
