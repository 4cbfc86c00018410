package compaction

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/sediment-io/sediment/hotlog"
)

// Codec numbers of Kafka's compression.type values (-1: producer, as sent).
var topicCodecs = map[string]int{"uncompressed": codecNone, "gzip": codecGzip, "snappy": codecSnappy, "lz4": codecLz4, "zstd": codecZstd}

// TopicCodec returns the codec a topic's compression.type forces (ok false
// for producer, or a value that is not a codec).
func TopicCodec(compressionType string) (codec int, ok bool) {
	codec, ok = topicCodecs[compressionType]
	return codec, ok
}

// leveledCodecs pools compressors per (codec, level): a zstd or gzip
// encoder at one level is not reset to another.
var leveledCodecs sync.Map // [2]int{codec, level} → *sync.Pool of *codecs

func codecsAt(codec, level int) *sync.Pool {
	k := [2]int{codec, level}
	if p, ok := leveledCodecs.Load(k); ok {
		return p.(*sync.Pool)
	}
	p, _ := leveledCodecs.LoadOrStore(k, &sync.Pool{New: func() any { return &codecs{level: level, leveled: true} }})
	return p.(*sync.Pool)
}

// RecompressBatch is Kafka's LogValidator for a topic whose compression.type
// names a codec: one whole produced v2 batch whose records are compressed
// otherwise is returned rewritten with codec at level (KIP-390's
// compression.<codec>.level; ignored for snappy and none), its header's
// length, attributes and CRC set anew, every other header field (offsets,
// timestamps, producer id, epoch and sequence, transactional flag) as it
// was. Before that, the batch's own CRC is checked (a damaged batch must not
// leave with a valid one: CorruptError), and its records as CheckRecords
// does, with CheckKeys' keys when needKeys, decompressed to at most maxBytes;
// the records are compressed anew as they decompress (stream.go), never held
// whole. A rewritten batch larger than maxOut bytes (the topic's
// max.message.bytes; 0: no bound) is ErrTooLarge, once the records checked
// (as Kafka refuses the rewritten batch after its validation). A batch in
// codec already, or a control batch, is only checked, and comes back as it
// is; so does, unchecked, anything that is not one whole batch (the append's
// validation answers it). Errors are as CheckKeys'.
func RecompressBatch(batch []byte, codec, level, maxBytes, maxOut int, needKeys bool) ([]byte, error) {
	h, err := hotlog.ParseBatchHeader(batch)
	if err != nil || int64(len(batch)) != h.Size() {
		return batch, nil
	}
	if h.IsControl() || h.Compression() == codec {
		if h.Compression() == codecNone && !needKeys {
			return batch, nil
		}
		return batch, checkBatch(batch, maxBytes, needKeys)
	}
	if crc32.Checksum(batch[offAttributes:], castagnoli) != h.CRC {
		return nil, fmt.Errorf("%w: batch CRC does not match", ErrCorrupt)
	}
	if codec < codecNone || codec > codecZstd {
		return nil, fmt.Errorf("compaction: recompress with unknown codec %d", codec)
	}
	pool := codecsAt(codec, level)
	enc := pool.Get().(*codecs)
	defer pool.Put(enc)
	w := &batchWriter{codec: codec, enc: enc, header: batch[:headerSize], max: maxOut}
	if err := w.reset(); err != nil {
		return nil, err
	}
	records := batch[headerSize:]
	if h.Compression() == codecNone {
		if err := checkRecordsOf(&h, records, needKeys); err != nil {
			return nil, err
		}
		if _, err := w.Write(records); err != nil {
			return nil, err
		}
	} else if err := checkCompressed(&h, records, maxBytes, needKeys, w); err != nil {
		return nil, err
	}
	out, err := w.finish()
	if err != nil {
		return nil, err
	}
	be := binary.BigEndian
	be.PutUint32(out[offBatchLength:], uint32(len(out)-12))
	be.PutUint16(out[offAttributes:], uint16(h.Attributes)&^attrCodecMask|uint16(codec))
	be.PutUint32(out[offCRC:], crc32.Checksum(out[offAttributes:], castagnoli))
	return out, nil
}

// batchWriter compresses the records of a rewritten batch as they come
// (the streamSink of RecompressBatch) after the original header; past max
// bytes in all it stops keeping them (the batch is ErrTooLarge once its
// records are checked).
type batchWriter struct {
	codec  int
	enc    *codecs
	header []byte
	max    int
	out    []byte
	over   bool
	zw     io.WriteCloser // the compressor, writing to out
}

func (w *batchWriter) reset() error {
	w.out = append(w.out[:0], w.header...)
	w.over = false
	var err error
	w.zw, err = w.enc.writer(w.codec, (*outBuffer)(w))
	return err
}

func (w *batchWriter) Write(p []byte) (int, error) {
	if w.over {
		return len(p), nil
	}
	if w.zw == nil {
		return (*outBuffer)(w).Write(p)
	}
	return w.zw.Write(p)
}

func (w *batchWriter) finish() ([]byte, error) {
	if w.zw != nil && !w.over {
		if err := w.zw.Close(); err != nil {
			return nil, fmt.Errorf("compaction: recompress with codec %d: %w", w.codec, err)
		}
	}
	if w.over {
		return nil, fmt.Errorf("%w: the batch rewritten with codec %d is more than %d bytes", ErrTooLarge, w.codec, w.max)
	}
	// The pooled compressor keeps w (its destination) until its next use,
	// not the batch.
	out := w.out
	w.out = nil
	return out, nil
}

// outBuffer is what the compressor writes to: the batch, up to max bytes.
type outBuffer batchWriter

func (o *outBuffer) Write(p []byte) (int, error) {
	if o.max > 0 && len(o.out)+len(p) > o.max {
		o.over, o.out = true, nil
	}
	if !o.over {
		o.out = append(o.out, p...)
	}
	return len(p), nil
}
