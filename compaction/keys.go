package compaction

import (
	"errors"
	"fmt"

	"github.com/sediment-io/sediment/hotlog"
)

// ErrMissingKey is returned by CheckKeys for a record without a key: the
// cleaner would drop it, so Kafka refuses it on a compacted topic
// (INVALID_RECORD at the broker edge).
var ErrMissingKey = errors.New("compaction: record without a key in a compacted topic")

// MissingKeysError is CheckKeys' error for keyless records: Indexes are
// their positions in the batch (0 for its first record), as Kafka lists them
// in a Produce response's record errors (KIP-467), the first
// maxListedMissing of them; Count is how many there are. It matches
// ErrMissingKey.
type MissingKeysError struct {
	Indexes []int32
	Count   int
}

func (e *MissingKeysError) Error() string {
	return fmt.Sprintf("%v: %d of the batch's records (the first at index %d)", ErrMissingKey, max(e.Count, len(e.Indexes)), e.Indexes[0])
}

func (e *MissingKeysError) Is(target error) bool { return target == ErrMissingKey }

// CheckKeys checks that every record of one whole v2 batch (a Produce
// partition's records) has a key, as Kafka requires for compacted topics.
// Control batches pass. A compressed payload is read as it decompresses
// (stream.go), up to maxBytes decompressed; a batch that does not parse or
// decompress returns ErrCorrupt, a malformed record errBadRecord (wrapped in
// ErrCorrupt), one that decompresses to more than maxBytes ErrTooLarge,
// keyless records a *MissingKeysError (which is ErrMissingKey).
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
		return checkCompressed(&h, payload, maxBytes, needKeys, nil)
	}
	return checkRecordsOf(&h, payload, needKeys)
}

// checkRecordsOf checks the records of a batch with header h, uncompressed.
func checkRecordsOf(h *hotlog.BatchHeader, payload []byte, needKeys bool) error {
	t := recordTally{needKeys: needKeys}
	if err := recordKeys(payload, h.NumRecords, h.LastOffsetDelta, func(od int32, key []byte, _ bool) {
		t.add(od, key != nil)
	}); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return t.result(h)
}
