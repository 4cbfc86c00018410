// Package objectstore is Sediment's bucket: a small interface to a flat
// namespace of immutable objects (Store), sized like Pebble's
// objstorage/remote.Storage, and the helpers around it.
//
// Backends live side by side in sub-packages:
//
//	objectstore/fs      a local folder (the embedded default)
//	objectstore/s3      any S3-compatible service through aws-sdk-go-v2
//	objectstore/mem     in memory, for unit tests of other packages
//	objectstore/faulty  a fault-injecting wrapper (errors, latency,
//	                    throttling, truncated reads) and a faulty
//	                    http.RoundTripper for the s3 backend
//
// WithLogging (this package) decorates any Store and logs every call.
// objectstore/objectstoretest holds the conformance suite that every backend
// passes.
//
// # Keys
//
// A key is 1 to 1024 bytes of UTF-8, made of segments separated by '/':
//
//	<segment> ( "/" <segment> )*
//
// No segment is empty, "." or "..", and no byte is a control character or a
// backslash (CheckKey). The same rules hold on every backend, so a key that
// works on the local folder works on S3. Portable callers never make a key
// the "folder" of another ("a" and "a/b"): fs and mem refuse the second of
// the two, MinIO refuses "a/b" below an object "a", and AWS S3 takes both.
//
// # Objects
//
// Objects are written once, through a Writer whose Close commits the whole
// object atomically: a reader sees either nothing or every byte. With
// CreateOptions.NoOverwrite the commit fails with ErrExists if the key is
// taken, so a retried or zombie upload never replaces another's object.
//
// # Errors
//
// Every error a Store returns can be tested with errors.Is against the
// sentinels below; messages start with "objectstore: " or the backend's name.
//
//	ErrNotExist     the object does not exist (also IsNotExistError)
//	ErrExists       NoOverwrite and the key is taken
//	ErrInvalidKey   CheckKey refused the key
//	ErrOutOfRange   a read past the end of the object
//	ErrUnavailable  transient: throttling, 5xx, timeouts, a truncated or
//	                corrupted transfer, after the backend's own retries;
//	                the caller may try again later
//	ErrClosed       the Store, Reader or Writer was closed
package objectstore
