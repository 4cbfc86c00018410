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
	return checkBatch(batch, maxBytes, true)
}

// CheckRecords checks that the records of one whole compressed v2 batch
// decompress (to at most maxBytes) and are well formed, as many as its
// header says, with offset deltas 0, 1, 2, ...: Kafka's LogValidator reads
// every record of a compressed batch a client produces, so that no consumer
// is handed a batch it cannot read, and nothing trusts a record count the
// payload does not hold. Errors are as CheckKeys'.
func CheckRecords(batch []byte, maxBytes int) error {
	return checkBatch(batch, maxBytes, false)
}

// keptDecompressBuffer bounds the buffer a pooled codecs keeps between
// checks: larger ones (rare big batches) are left to the collector.
const keptDecompressBuffer = 4 << 20

func checkBatch(batch []byte, maxBytes int, needKeys bool) error {
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
		defer func() {
			if cap(c.out) > keptDecompressBuffer {
				c.out = nil
			}
			keyCodecs.Put(c)
		}()
		buf, err := c.decompress(h.Compression(), payload, c.out, maxBytes)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		c.out = buf[:0]
		payload = buf
	}
	return checkRecordsOf(&h, payload, needKeys)
}

// checkRecordsOf checks the records of a batch with header h, decompressed
// (checkBatch).
func checkRecordsOf(h *hotlog.BatchHeader, payload []byte, needKeys bool) error {
	var missing []int32
	var i int32
	gap := false // an offset delta other than the record's index
	if err := recordKeys(payload, h.NumRecords, h.LastOffsetDelta, func(od int32, key []byte, _ bool) {
		gap = gap || od != i
		if key == nil && needKeys {
			missing = append(missing, i)
		}
		i++
	}); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	// recordKeys read exactly NumRecords records and nothing after them;
	// a produced batch also has them at offset deltas 0..n-1.
	if gap || int64(h.NumRecords) != int64(h.LastOffsetDelta)+1 {
		return fmt.Errorf("%w: %v: %d records, last offset delta %d, deltas in order: %v", ErrCorrupt, errBadRecord, h.NumRecords, h.LastOffsetDelta, !gap)
	}
	if len(missing) > 0 {
		return &MissingKeysError{Indexes: missing}
	}
	return nil
}
