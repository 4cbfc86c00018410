package hotlog

import "errors"

// Sentinel errors. Callers test them with errors.Is; the broker maps them to
// Kafka error codes (in parentheses).
var (
	// ErrOffsetOutOfRange: an offset below the log start or past the log end
	// (OFFSET_OUT_OF_RANGE).
	ErrOffsetOutOfRange = errors.New("hotlog: offset out of range")
	// ErrCorruptBatch: a CRC mismatch, impossible lengths, a bad magic byte
	// (CORRUPT_MESSAGE).
	ErrCorruptBatch = errors.New("hotlog: corrupt record batch")
	// ErrInvalidRecord: counts that lie, offset deltas out of order, an empty
	// batch (INVALID_RECORD).
	ErrInvalidRecord = errors.New("hotlog: invalid record")
	// ErrInvalidTimestamp: a batch timestamp outside the configured window
	// (INVALID_TIMESTAMP).
	ErrInvalidTimestamp = errors.New("hotlog: invalid timestamp")
	// ErrBatchTooLarge: a batch larger than Config.MaxMessageBytes
	// (MESSAGE_TOO_LARGE).
	ErrBatchTooLarge = errors.New("hotlog: record batch too large")
	// ErrUnexpectedOffset: a replicated batch whose offsets do not continue the
	// log (the follower must truncate or reset; UNKNOWN_SERVER_ERROR if it leaks).
	ErrUnexpectedOffset = errors.New("hotlog: replicated batch does not continue the log")
	// ErrLogFailed: an earlier write or fsync failed and the log no longer
	// accepts appends; reopen it to recover (KAFKA_STORAGE_ERROR).
	ErrLogFailed = errors.New("hotlog: log failed after an I/O error")
	// ErrIO: a write to the log's files failed (the disk is full or failing)
	// and nothing of the append stays: the log is as before and a later
	// append may succeed (KAFKA_STORAGE_ERROR, which clients retry).
	ErrIO = errors.New("hotlog: I/O error")
	// ErrClosed: the log is closed.
	ErrClosed = errors.New("hotlog: log closed")
)
