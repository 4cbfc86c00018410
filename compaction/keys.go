package compaction

import (
	"errors"
	"fmt"
	"sync"

	"github.com/sediment-io/sediment/hotlog"
)

// ErrMissingKey is returned by CheckKeys for a record without a key: the
// cleaner would drop it, so Kafka refuses it on a compacted topic
// (INVALID_RECORD at the broker edge).
var ErrMissingKey = errors.New("compaction: record without a key in a compacted topic")

// MissingKeysError is CheckKeys' error for keyless records: Indexes are
// their positions in the batch (0 for its first record), as Kafka lists them
// in a Produce response's record errors (KIP-467). It matches ErrMissingKey.
type MissingKeysError struct{ Indexes []int32 }

func (e *MissingKeysError) Error() string {
	return fmt.Sprintf("%v: %d of the batch's records (the first at index %d)", ErrMissingKey, len(e.Indexes), e.Indexes[0])
}

func (e *MissingKeysError) Is(target error) bool { return target == ErrMissingKey }

// keyCodecs reuses decompressors across CheckKeys calls (their zstd
// decoders are synchronous: no goroutines to stop).
var keyCodecs = sync.Pool{New: func() any { return new(codecs) }}

// CheckKeys checks that every record of one whole v2 batch (a Produce
// partition's records) has a key, as Kafka requires for compacted topics.
// Control batches pass. The payload is decompressed up to maxBytes; a batch
// that does not parse or decompress returns ErrCorrupt, a malformed record
// errBadRecord (wrapped in ErrCorrupt), keyless records a *MissingKeysError
// (which is ErrMissingKey).
func CheckKeys(batch []byte, maxBytes int) error {
	h, err := hotlog.ParseBatchHeader(batch)
	if err != nil || int64(len(batch)) < h.Size() {
		return fmt.Errorf("%w: batch header: %v", ErrCorrupt, err)
	}
	if h.IsControl() {
		return nil
	}
	payload := batch[headerSize:h.Size()]
	if h.Compression() != codecNone {
		c := keyCodecs.Get().(*codecs)
		buf, err := c.decompress(h.Compression(), payload, nil, maxBytes)
		keyCodecs.Put(c)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		payload = buf
	}
	var missing []int32
	var i int32
	if err := recordKeys(payload, h.NumRecords, h.LastOffsetDelta, func(_ int32, key []byte, _ bool) {
		if key == nil {
			missing = append(missing, i)
		}
		i++
	}); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if len(missing) > 0 {
		return &MissingKeysError{Indexes: missing}
	}
	return nil
}
