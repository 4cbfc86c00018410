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

// keyCodecs reuses decompressors across CheckKeys calls (their zstd
// decoders are synchronous: no goroutines to stop).
var keyCodecs = sync.Pool{New: func() any { return new(codecs) }}

// CheckKeys checks that every record of one whole v2 batch (a Produce
// partition's records) has a key, as Kafka requires for compacted topics.
// Control batches pass. The payload is decompressed up to maxBytes; a batch
// that does not parse or decompress returns ErrCorrupt, a malformed record
// errBadRecord (wrapped in ErrCorrupt), a keyless record ErrMissingKey.
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
	missing := false
	if err := recordKeys(payload, h.NumRecords, h.LastOffsetDelta, func(_ int32, key []byte, _ bool) {
		missing = missing || key == nil
	}); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if missing {
		return ErrMissingKey
	}
	return nil
}
