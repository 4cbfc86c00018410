package objectstore

import (
	"context"
	"errors"
	"io"
	"time"
)

// Sentinel errors. Backends wrap them (fmt.Errorf("...: %w", ErrNotExist)) so
// that callers test them with errors.Is.
var (
	ErrNotExist    = errors.New("objectstore: object does not exist")
	ErrExists      = errors.New("objectstore: object already exists")
	ErrInvalidKey  = errors.New("objectstore: invalid key")
	ErrOutOfRange  = errors.New("objectstore: read beyond the end of the object")
	ErrUnavailable = errors.New("objectstore: store unavailable (transient)")
	ErrClosed      = errors.New("objectstore: closed")
	// ErrAccessDenied: the store refused the credentials or their
	// permissions (S3's 403: AccessDenied, SignatureDoesNotMatch,
	// InvalidAccessKeyId). Retrying does not help until an operator acts.
	ErrAccessDenied = errors.New("objectstore: access denied (credentials or permissions)")
)

// Store is a bucket of immutable objects.
//
// Concurrency: every method may be called from many goroutines at once,
// including on the same key. Operations on one key are linearizable on the
// fs and mem backends and follow S3's strong read-after-write consistency on
// s3: once a Writer's Close has returned nil, every later ReadObject, Head
// and List sees the object; once Delete has returned nil, none does.
//
// Errors: see the package documentation. A context that is cancelled or
// past its deadline makes a call return promptly with an error that wraps
// ctx.Err().
type Store interface {
	// ReadObject opens key for ranged reads and returns its size. The
	// returned Reader reads the version of the object that was current when
	// ReadObject ran; if that version is deleted or replaced meanwhile,
	// reads fail (with ErrNotExist) rather than mix versions, on backends
	// that can tell (s3 with ETags; fs keeps reading the opened file).
	// A missing object gives an error for which IsNotExistError is true.
	ReadObject(ctx context.Context, key string) (Reader, int64, error)

	// CreateObject returns a Writer for key. Nothing is visible until the
	// Writer's Close returns nil; Abort (or a cancelled ctx, which the
	// Writer keeps) discards everything. Without NoOverwrite an existing
	// object is replaced atomically.
	CreateObject(ctx context.Context, key string, opts CreateOptions) (Writer, error)

	// Head returns the object's size and modification time, or an error
	// for which IsNotExistError is true.
	Head(ctx context.Context, key string) (ObjectInfo, error)

	// List returns the objects whose keys start with prefix, sorted by key
	// (byte order). With a non-empty delimiter, keys that contain the
	// delimiter after the prefix are grouped: Prefixes holds each distinct
	// key[:len(prefix)+i+len(delimiter)] (i the index of the delimiter after
	// the prefix) once, sorted, and those keys are not in Objects. Keys are
	// never trimmed. With objects a, b/4, b/5 and c/d/e:
	//
	//	List("", "")    → Objects a, b/4, b/5, c/d/e
	//	List("", "/")   → Objects a;        Prefixes b/, c/
	//	List("b/", "/") → Objects b/4, b/5
	//	List("c", "/")  → Prefixes c/
	//
	// The whole listing is returned at once (backends page internally), so
	// callers narrow it with prefix. Objects created or deleted while List
	// runs may or may not appear.
	List(ctx context.Context, prefix, delimiter string) (Listing, error)

	// Delete removes the given objects. Deleting a missing object is not an
	// error, so Delete is idempotent. Backends may batch keys (S3 deletes up
	// to 1000 per request); on failure the error names the keys that may
	// remain and the others are gone.
	Delete(ctx context.Context, keys ...string) error

	// IsNotExistError reports whether err, returned by this Store or one of
	// its Readers, means that the object does not exist. It is
	// errors.Is(err, ErrNotExist) on every backend of this module.
	IsNotExistError(err error) bool

	// Close releases the Store's resources. Readers and Writers still open
	// fail afterwards with ErrClosed or finish, depending on the backend;
	// callers close them first.
	Close() error
}

// Reader reads ranges of one object.
//
// Concurrency: ReadAt and ReadRange may be called concurrently from many
// goroutines. Close must be called once, after every other call returned.
type Reader interface {
	// ReadAt reads exactly len(p) bytes at offset off. It never returns a
	// partial result: a range past the end of the object fails with
	// ErrOutOfRange before any transfer, and a transfer that ends early
	// (after the backend's retries) fails with an error wrapping
	// ErrUnavailable and io.ErrUnexpectedEOF.
	ReadAt(ctx context.Context, p []byte, off int64) error

	// ReadRange streams length bytes starting at off, for copying large
	// ranges without holding them in memory. The range must lie within
	// the object (else ErrOutOfRange). The stream ends with io.EOF after
	// exactly length bytes; if the transfer is cut short it ends with an
	// error wrapping io.ErrUnexpectedEOF instead, never with a short io.EOF.
	// The caller closes the stream.
	ReadRange(ctx context.Context, off, length int64) (io.ReadCloser, error)

	// Close releases the Reader.
	Close() error
}

// Writer writes one object. It is not safe for concurrent use.
type Writer interface {
	// Write appends p to the object. Backends may buffer or upload while
	// writing; an error from Write is final (call Abort).
	io.Writer

	// Close commits the object atomically and returns nil only once the
	// object is durable (fs: fsynced file and folder; s3: the PUT or
	// CompleteMultipartUpload was acknowledged). On error nothing was
	// committed; with NoOverwrite and a taken key the error wraps ErrExists.
	Close() error

	// Abort discards the object. It may be called after a failed Write or
	// Close, and is a no-op after a successful Close.
	Abort() error
}

// CreateOptions tune CreateObject.
type CreateOptions struct {
	// NoOverwrite makes the commit fail with ErrExists when the key exists
	// (fs: link(2); s3: If-None-Match: *).
	NoOverwrite bool
	// SizeHint, if positive, is the expected size; backends may use it to
	// choose between a single PUT and a multipart upload.
	SizeHint int64
}

// ObjectInfo describes one object.
type ObjectInfo struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Listing is the result of Store.List.
type Listing struct {
	Objects  []ObjectInfo // sorted by Key
	Prefixes []string     // common prefixes, each ending with the delimiter, sorted
}

// IsNotExist reports whether err means that an object does not exist.
func IsNotExist(err error) bool { return errors.Is(err, ErrNotExist) }
