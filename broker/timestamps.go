package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
)

// Record-level timestamp lookups for ListOffsets. hotlog's time index finds
// the batch; the records inside it (decompressed with franz-go's codecs)
// give the exact offset, as Kafka answers.

var decompressor = kgo.DefaultDecompressor()

// offsetForTimestamp returns the first offset whose record timestamp is at
// or after ts, and that timestamp; -1, -1 when there is none. As Kafka's
// searchForTimestamp, control records (transaction markers) count, and
// both conditions hold for one record: a batch found by its max timestamp
// whose matching records are all below the log start (DeleteRecords cut
// into it) sends the search on to the next batch.
func (p *partition) offsetForTimestamp(ts int64) (int64, int64, error) {
	from := int64(0)
	for {
		off, _, err := p.log.OffsetForTimestampFrom(ts, from)
		if errors.Is(err, hotlog.ErrOffsetOutOfRange) || (err == nil && off < 0) {
			return -1, -1, nil
		}
		if err != nil {
			return -1, -1, err
		}
		o, t, next, err := p.scanBatch(off, func(recTs int64) bool { return recTs >= ts })
		if err != nil || o >= 0 {
			return o, t, err
		}
		if next <= max(from, off) {
			return -1, -1, nil
		}
		from = next
	}
}

// offsetForTime is ListOffsets by timestamp across both tiers: the first
// offset below the high watermark whose record timestamp is at or after
// ts, and that timestamp; -1, -1 when there is none.
func (b *Broker) offsetForTime(ctx context.Context, p *partition, ts int64) (int64, int64, error) {
	off, t, err := b.remoteOffsetForTimestamp(ctx, p, ts)
	if err == nil && off < 0 {
		off, t, err = p.offsetForTimestamp(ts)
	}
	if err != nil || off < 0 || off >= p.log.HighWatermark() {
		return -1, -1, err
	}
	return off, t, nil
}

// maxTimestampOffset returns the offset and timestamp of the first record
// with the largest timestamp in the log.
func (p *partition) maxTimestampOffset() (int64, int64, error) {
	var maxTs int64 = -1
	for _, s := range p.log.Segments() {
		if s.MaxTimestamp > maxTs {
			maxTs = s.MaxTimestamp
		}
	}
	if maxTs < 0 {
		return -1, -1, nil
	}
	return p.offsetForTimestamp(maxTs)
}

// scanBatch reads the batch containing off and returns the first record at
// or after off whose timestamp matches; when none does, -1, -1 and the
// offset after the batches read (where a search goes on).
func (p *partition) scanBatch(off int64, match func(int64) bool) (int64, int64, int64, error) {
	hw := p.log.HighWatermark()
	if off >= hw {
		return -1, -1, off, nil
	}
	raw, err := p.log.ReadBytes(off, 1, hw)
	if err != nil {
		return -1, -1, off, err
	}
	next := off
	for len(raw) >= hotlog.BatchHeaderSize {
		h, err := hotlog.ParseBatchHeader(raw)
		if err != nil || int64(len(raw)) < h.Size() {
			break
		}
		batch := raw[:h.Size()]
		raw = raw[h.Size():]
		next = max(next, h.LastOffset()+1)
		if h.LastOffset() < off {
			continue
		}
		o, ts, found, err := scanRecords(&h, batch, off, match)
		if err != nil {
			return -1, -1, off, err
		}
		if found {
			return o, ts, next, nil
		}
	}
	return -1, -1, next, nil
}

func scanRecords(h *hotlog.BatchHeader, batch []byte, from int64, match func(int64) bool) (int64, int64, bool, error) {
	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(batch); err != nil {
		return 0, 0, false, fmt.Errorf("%w: %v", hotlog.ErrCorruptBatch, err)
	}
	recs := kb.Records
	if codec := kgo.CompressionCodecType(h.Compression()); codec != kgo.CodecNone {
		var err error
		if recs, err = decompressor.Decompress(recs, codec); err != nil {
			return 0, 0, false, fmt.Errorf("%w: %v", hotlog.ErrCorruptBatch, err)
		}
	}
	for i := int32(0); i < h.NumRecords && len(recs) > 0; i++ {
		l, n := binary.Varint(recs)
		if n <= 0 || l < 0 || int64(len(recs)-n) < l {
			return 0, 0, false, hotlog.ErrCorruptBatch
		}
		var rec kmsg.Record
		if err := rec.ReadFrom(recs[:int64(n)+l]); err != nil {
			return 0, 0, false, fmt.Errorf("%w: %v", hotlog.ErrCorruptBatch, err)
		}
		recs = recs[int64(n)+l:]
		o := h.BaseOffset + int64(rec.OffsetDelta)
		ts := h.BaseTimestamp + rec.TimestampDelta64
		if h.LogAppendTime() {
			ts = h.MaxTimestamp
		}
		if o >= from && match(ts) {
			return o, ts, true, nil
		}
	}
	return 0, 0, false, nil
}
