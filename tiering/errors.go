package tiering

import "errors"

// Sentinel errors. Callers test them with errors.Is; the broker maps them to
// Kafka error codes (in parentheses).
var (
	// ErrOffsetOutOfRange: the offset is not in the remote log
	// (OFFSET_OUT_OF_RANGE).
	ErrOffsetOutOfRange = errors.New("tiering: offset out of range")
	// ErrUnavailable: the bucket did not answer in time, or a read could
	// not be served with verified bytes; try again (a retriable code, e.g.
	// REQUEST_TIMED_OUT or KAFKA_STORAGE_ERROR, never wrong bytes).
	ErrUnavailable = errors.New("tiering: remote data unavailable")
	// ErrCorruptObject: an object read from the bucket failed its checks
	// (CRC, sizes, format). Reads retry once; then ErrUnavailable wraps it.
	ErrCorruptObject = errors.New("tiering: corrupt object in the bucket")
	// ErrFenced: the committer refused a commit because the leader epoch
	// is stale (the Committer wraps it: metadata.ErrStaleEpoch).
	ErrFenced = errors.New("tiering: leader epoch fenced")
	// ErrConflict: the committer refused a commit because the manifest
	// version moved (metadata.ErrManifestConflict).
	ErrConflict = errors.New("tiering: manifest version conflict")
	// ErrLeaseLost: the committer refused a commit made under a lease
	// (Fence) that no longer stands (metadata.ErrLeaseLost).
	ErrLeaseLost = errors.New("tiering: lease lost")
	// ErrNotLeader: this broker does not lead the partition.
	ErrNotLeader = errors.New("tiering: not the partition leader")
	// ErrClosed: the Manager is closed or the partition was removed.
	ErrClosed = errors.New("tiering: closed")
	// ErrUnknownPartition: the Committer no longer knows the partition
	// (its topic was deleted; the owner removes the Partition next). A
	// background round that meets it stops quietly
	// (UNKNOWN_TOPIC_OR_PARTITION).
	ErrUnknownPartition = errors.New("tiering: unknown partition")
)
