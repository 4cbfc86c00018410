// Package s3 is an objectstore.Store on any S3-compatible service (AWS S3,
// MinIO, R2, GCS interoperability) through aws-sdk-go-v2.
//
// Writes: a Writer buffers up to Config.PartSize; an object that fits is
// sent with one PutObject, a larger one as a multipart upload whose parts
// (Config.Concurrency at a time) go out while the caller keeps writing.
// Every PUT and part carries a CRC32C checksum that the service verifies,
// so bytes corrupted on the way are refused (and sent again by the
// retryer) rather than stored. NoOverwrite uses If-None-Match: * on the PUT
// or on CompleteMultipartUpload; if a retried commit finds the key taken,
// the Writer compares the stored object's checksum with its own and
// reports success when they match (its own earlier attempt had landed).
//
// Reads: ReadObject sends a HEAD for the size and ETag; ReadAt and
// ReadRange send ranged GETs with If-Match: ETag, so a replaced object is
// reported (ErrNotExist) instead of mixing versions. A body cut short is
// resumed from where it stopped, a few times, before ErrUnavailable.
//
// Retries: the SDK's standard retryer, configured with Config.MaxAttempts
// and full-jitter exponential backoff, retries 5xx, throttling, timeouts,
// dropped connections and checksum mismatches; what is left after that
// wraps objectstore.ErrUnavailable.
package s3

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sediment-io/sediment/objectstore"
)

// Store is a bucket on an S3-compatible service.
type Store struct {
	cfg        Config
	client     *s3.Client
	httpClient *http.Client // ours to close, nil if the caller's
	closed     atomic.Bool
}

var _ objectstore.Store = (*Store)(nil)

// New returns a Store for cfg.Bucket. It does not contact the service;
// the first request does.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	client, httpClient, err := cfg.newClient(ctx)
	if err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, client: client, httpClient: httpClient}, nil
}

// Client returns the underlying SDK client.
func (s *Store) Client() *s3.Client { return s.client }

func (s *Store) objectKey(key string) *string { return aws.String(s.cfg.Prefix + key) }

func (s *Store) check(key string) error {
	if s.closed.Load() {
		return objectstore.ErrClosed
	}
	return objectstore.CheckKey(key)
}

// errKind classifies an SDK error.
func errKind(err error) (status int, code string) {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	return status, code
}

// mapErr turns an SDK error about key into one of objectstore's.
func mapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("s3: %s %q: %w", op, key, err)
	}
	status, code := errKind(err)
	var sentinel error
	switch {
	case code == "NoSuchKey" || code == "NotFound" || (status == http.StatusNotFound && code != "NoSuchBucket"):
		sentinel = objectstore.ErrNotExist
	case code == "XMinioParentIsObject" || code == "XMinioObjectExistsAsDirectory" || code == "KeyTooLongError":
		sentinel = objectstore.ErrInvalidKey
	case status == http.StatusForbidden || code == "AccessDenied" || code == "SignatureDoesNotMatch" || code == "InvalidAccessKeyId":
		sentinel = objectstore.ErrAccessDenied
	case status >= 500 || status == http.StatusTooManyRequests || isThrottle(code):
		sentinel = objectstore.ErrUnavailable
	case errors.As(err, new(*retry.MaxAttemptsError)):
		sentinel = objectstore.ErrUnavailable
	default:
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, errTruncated) {
			sentinel = objectstore.ErrUnavailable
		} else if _, ok := retryableCodes[code]; ok {
			sentinel = objectstore.ErrUnavailable
		}
	}
	if sentinel == nil {
		return fmt.Errorf("s3: %s %q: %w", op, key, err)
	}
	return fmt.Errorf("s3: %s %q: %w: %w", op, key, sentinel, err)
}

func isThrottle(code string) bool {
	_, ok := retry.DefaultThrottleErrorCodes[code]
	return ok
}

func isPreconditionFailed(err error) bool {
	status, code := errKind(err)
	return status == http.StatusPreconditionFailed || code == "PreconditionFailed"
}

// ReadObject implements objectstore.Store.
func (s *Store) ReadObject(ctx context.Context, key string) (objectstore.Reader, int64, error) {
	if err := s.check(key); err != nil {
		return nil, 0, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.cfg.Bucket, Key: s.objectKey(key)})
	if err != nil {
		return nil, 0, mapErr("read", key, err)
	}
	size := aws.ToInt64(out.ContentLength)
	return &reader{s: s, key: key, size: size, etag: aws.ToString(out.ETag)}, size, nil
}

// Head implements objectstore.Store.
func (s *Store) Head(ctx context.Context, key string) (objectstore.ObjectInfo, error) {
	if err := s.check(key); err != nil {
		return objectstore.ObjectInfo{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.cfg.Bucket, Key: s.objectKey(key)})
	if err != nil {
		return objectstore.ObjectInfo{}, mapErr("head", key, err)
	}
	return objectstore.ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

// List implements objectstore.Store.
func (s *Store) List(ctx context.Context, prefix, delimiter string) (objectstore.Listing, error) {
	if s.closed.Load() {
		return objectstore.Listing{}, objectstore.ErrClosed
	}
	if err := objectstore.CheckPrefix(prefix); err != nil {
		return objectstore.Listing{}, err
	}
	in := &s3.ListObjectsV2Input{Bucket: &s.cfg.Bucket, Prefix: aws.String(s.cfg.Prefix + prefix)}
	if delimiter != "" {
		in.Delimiter = aws.String(delimiter)
	}
	var res objectstore.Listing
	pages := s3.NewListObjectsV2Paginator(s.client, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return objectstore.Listing{}, mapErr("list", prefix, err)
		}
		for _, o := range page.Contents {
			key := strings.TrimPrefix(aws.ToString(o.Key), s.cfg.Prefix)
			res.Objects = append(res.Objects, objectstore.ObjectInfo{Key: key, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
		for _, p := range page.CommonPrefixes {
			res.Prefixes = append(res.Prefixes, strings.TrimPrefix(aws.ToString(p.Prefix), s.cfg.Prefix))
		}
	}
	return res, nil
}

// Delete implements objectstore.Store. One key is one DeleteObject; more go
// in DeleteObjects batches of up to 1000.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := s.check(k); err != nil {
			return err
		}
	}
	if len(keys) == 1 {
		_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.cfg.Bucket, Key: s.objectKey(keys[0])})
		if err != nil && !errors.Is(mapErr("delete", keys[0], err), objectstore.ErrNotExist) {
			return mapErr("delete", keys[0], err)
		}
		return nil
	}
	var errs []error
	for len(keys) > 0 {
		batch := keys[:min(len(keys), deleteBatch)]
		keys = keys[len(batch):]
		ids := make([]types.ObjectIdentifier, len(batch))
		for i, k := range batch {
			ids[i] = types.ObjectIdentifier{Key: s.objectKey(k)}
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &s.cfg.Bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return errors.Join(append(errs, mapErr("delete", batch[0], err))...)
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) == "NoSuchKey" {
				continue
			}
			errs = append(errs, fmt.Errorf("s3: delete %q: %s: %s", strings.TrimPrefix(aws.ToString(e.Key), s.cfg.Prefix),
				aws.ToString(e.Code), aws.ToString(e.Message)))
		}
	}
	return errors.Join(errs...)
}

// IsNotExistError implements objectstore.Store.
func (s *Store) IsNotExistError(err error) bool { return objectstore.IsNotExist(err) }

// Close implements objectstore.Store.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.httpClient != nil {
		s.httpClient.CloseIdleConnections()
	}
	return nil
}
