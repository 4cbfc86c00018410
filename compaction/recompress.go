package compaction

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
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
// does, with CheckKeys' keys when needKeys, decompressed to at most maxBytes.
// A batch in codec already, or a control batch, is only checked, and comes
// back as it is; so does, unchecked, anything that is not one whole batch
// (the append's validation answers it). Errors are as CheckKeys'.
func RecompressBatch(batch []byte, codec, level, maxBytes int, needKeys bool) ([]byte, error) {
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
	c := keyCodecs.Get().(*codecs)
	defer func() {
		if cap(c.out) > keptDecompressBuffer {
			c.out = nil
		}
		keyCodecs.Put(c)
	}()
	records := batch[headerSize:]
	if h.Compression() != codecNone {
		buf, err := c.decompress(h.Compression(), records, c.out, maxBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		c.out = buf[:0]
		records = buf
	}
	if err := checkRecordsOf(&h, records, needKeys); err != nil {
		return nil, err
	}
	out := make([]byte, headerSize, headerSize+len(records)/2+64)
	copy(out, batch[:headerSize])
	if codec == codecNone {
		out = append(out, records...)
	} else {
		pool := codecsAt(codec, level)
		enc := pool.Get().(*codecs)
		compressed, err := enc.compress(codec, codec == codecSnappy, records, out[headerSize:])
		pool.Put(enc)
		if err != nil {
			return nil, fmt.Errorf("compaction: recompress with codec %d: %w", codec, err)
		}
		out = append(out[:headerSize], compressed...)
	}
	be := binary.BigEndian
	be.PutUint32(out[offBatchLength:], uint32(len(out)-12))
	be.PutUint16(out[offAttributes:], uint16(h.Attributes)&^attrCodecMask|uint16(codec))
	be.PutUint32(out[offCRC:], crc32.Checksum(out[offAttributes:], castagnoli))
	return out, nil
}
