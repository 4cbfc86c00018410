package compaction

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Kafka's compression codecs (the low three bits of a batch's attributes).
const (
	codecNone   = 0
	codecGzip   = 1
	codecSnappy = 2
	codecLz4    = 3
	codecZstd   = 4
)

// errDecompress marks a payload that does not decompress (or decompresses to
// more than the limit).
var errDecompress = errors.New("compaction: cannot decompress batch")

// xerialPrefix starts a snappy payload framed the way the Java producer
// writes it (xerial snappy-java): the 8-byte magic, version and compatible
// version (int32 each), then blocks of (big-endian int32 length, raw snappy
// block). franz-go sends raw snappy blocks for whole batches and xerial
// frames when streaming; both are read, and a batch is rewritten in the
// framing it came in.
var xerialPrefix = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const xerialBlock = 32 << 10

// codecs holds one cleaner's reusable compressors and decompressors; it is
// not safe for concurrent use.
type codecs struct {
	gzr  *gzip.Reader
	gzw  *gzip.Writer
	lzr  *lz4.Reader
	lzw  *lz4.Writer
	zdec *zstd.Decoder
	zenc *zstd.Encoder
	zmax int
	src  bytes.Reader
	buf  bytes.Buffer
	xw   xerialWriter
	// level, if leveled, is the Kafka compression level (KIP-390's
	// compression.<codec>.level) its compressors are made with; else each
	// codec's library default (the cleaner's: it rewrites a batch with its
	// own codec, as Kafka's cleaner does, at the default level).
	level   int
	leveled bool
}

// decompress appends the decompressed payload of a batch with codec to
// dst[:0], refusing more than limit bytes.
func (c *codecs) decompress(codec int, src []byte, dst []byte, limit int) ([]byte, error) {
	dst = dst[:0]
	switch codec {
	case codecNone:
		if len(src) > limit {
			// The same bound as every codec (FuzzDecompress found it
			// missing here): the caller's limit is the output's.
			return nil, fmt.Errorf("%w: more than %d bytes", errDecompress, limit)
		}
		return append(dst, src...), nil
	case codecGzip:
		c.src.Reset(src)
		if c.gzr == nil {
			r, err := gzip.NewReader(&c.src)
			if err != nil {
				return nil, fmt.Errorf("%w: gzip: %v", errDecompress, err)
			}
			c.gzr = r
		} else if err := c.gzr.Reset(&c.src); err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", errDecompress, err)
		}
		return readLimited(dst, c.gzr, limit)
	case codecSnappy:
		if len(src) >= 16 && bytes.HasPrefix(src, xerialPrefix) {
			return xerialDecode(dst, src[16:], limit)
		}
		return snappyBlock(dst, src, limit)
	case codecLz4:
		c.src.Reset(src)
		if c.lzr == nil {
			c.lzr = lz4.NewReader(&c.src)
		} else {
			c.lzr.Reset(&c.src)
		}
		return readLimited(dst, c.lzr, limit)
	case codecZstd:
		if c.zdec == nil || c.zmax != limit {
			if c.zdec != nil {
				c.zdec.Close()
			}
			d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(limit)), zstd.WithDecoderLowmem(true))
			if err != nil {
				return nil, err
			}
			c.zdec, c.zmax = d, limit
		}
		out, err := c.zdec.DecodeAll(src, dst)
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", errDecompress, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown codec %d", errDecompress, codec)
}

func readLimited(dst []byte, r io.Reader, limit int) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			if len(dst) > limit {
				return nil, fmt.Errorf("%w: more than %d bytes", errDecompress, limit)
			}
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if len(dst) > limit {
			return nil, fmt.Errorf("%w: more than %d bytes", errDecompress, limit)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errDecompress, err)
		}
	}
}

func snappyBlock(dst, src []byte, limit int) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, fmt.Errorf("%w: snappy: %v", errDecompress, err)
	}
	if n > limit-len(dst) {
		return nil, fmt.Errorf("%w: snappy block of %d bytes", errDecompress, n)
	}
	start := len(dst)
	if cap(dst)-start < n {
		grown := make([]byte, start, start+n)
		copy(grown, dst)
		dst = grown
	}
	out, err := s2.Decode(dst[start:start+n], src)
	if err != nil {
		return nil, fmt.Errorf("%w: snappy: %v", errDecompress, err)
	}
	return dst[:start+len(out)], nil
}

func xerialDecode(dst, src []byte, limit int) ([]byte, error) {
	for len(src) > 0 {
		if len(src) < 4 {
			return nil, fmt.Errorf("%w: xerial block header", errDecompress)
		}
		n := int64(binary.BigEndian.Uint32(src))
		src = src[4:]
		if n > int64(len(src)) {
			return nil, fmt.Errorf("%w: xerial block of %d bytes, %d left", errDecompress, n, len(src))
		}
		var err error
		if dst, err = snappyBlock(dst, src[:n], limit); err != nil {
			return nil, err
		}
		src = src[n:]
	}
	return dst, nil
}

// compress appends src compressed with codec to dst[:0]. xerial chooses the
// xerial framing for snappy.
func (c *codecs) compress(codec int, xerial bool, src []byte, dst []byte) ([]byte, error) {
	dst = dst[:0]
	switch codec {
	case codecNone:
		return append(dst, src...), nil
	case codecGzip, codecLz4:
		c.buf.Reset()
		w, err := c.writer(codec, &c.buf)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(src); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return append(dst, c.buf.Bytes()...), nil
	case codecSnappy:
		if !xerial {
			return s2.EncodeSnappy(dst[:cap(dst)], src), nil
		}
		dst = append(dst, xerialPrefix...)
		dst = binary.BigEndian.AppendUint32(dst, 1)
		dst = binary.BigEndian.AppendUint32(dst, 1)
		for len(src) > 0 {
			n := min(len(src), xerialBlock)
			block := s2.EncodeSnappy(nil, src[:n])
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(block)))
			dst = append(dst, block...)
			src = src[n:]
		}
		return dst, nil
	case codecZstd:
		e, err := c.zstdEncoder()
		if err != nil {
			return nil, err
		}
		return e.EncodeAll(src, dst), nil
	}
	return nil, fmt.Errorf("compaction: unknown codec %d", codec)
}

// writer returns a compressor with codec writing to dst (nil for none: the
// records go to dst as they are), as compress makes them; snappy is written
// in xerial framing. It is valid until the next call.
func (c *codecs) writer(codec int, dst io.Writer) (io.WriteCloser, error) {
	switch codec {
	case codecNone:
		return nil, nil
	case codecGzip:
		if c.gzw == nil {
			level := gzip.DefaultCompression
			if c.leveled && c.level >= 1 && c.level <= 9 {
				level = c.level // Kafka's gzip levels; -1 is the default
			}
			w, err := gzip.NewWriterLevel(dst, level)
			if err != nil {
				return nil, err
			}
			c.gzw = w
		} else {
			c.gzw.Reset(dst)
		}
		return c.gzw, nil
	case codecSnappy:
		c.xw.reset(dst)
		return &c.xw, nil
	case codecLz4:
		if c.lzw == nil {
			// 64 KiB blocks, as the Java producer writes (the default
			// 4 MiB would hold 4 MiB buffers for small batches).
			c.lzw = lz4.NewWriter(dst)
			opts := []lz4.Option{lz4.BlockSizeOption(lz4.Block64Kb)}
			if c.leveled {
				// Kafka's levels 1-17 are LZ4HC's; the library's
				// high-compression levels stop at 9.
				opts = append(opts, lz4.CompressionLevelOption(lz4.CompressionLevel(1<<(8+min(max(c.level, 1), 9)))))
			}
			if err := c.lzw.Apply(opts...); err != nil {
				return nil, err
			}
		} else {
			c.lzw.Reset(dst)
		}
		return c.lzw, nil
	case codecZstd:
		e, err := c.zstdEncoder()
		if err != nil {
			return nil, err
		}
		e.Reset(dst)
		return e, nil
	}
	return nil, fmt.Errorf("compaction: unknown codec %d", codec)
}

// zstdEncoder returns the zstd encoder of c, made on first use at its level.
func (c *codecs) zstdEncoder() (*zstd.Encoder, error) {
	if c.zenc == nil {
		opts := []zstd.EOption{zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1 << 20)}
		if c.leveled {
			opts = append(opts, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(c.level)))
		}
		e, err := zstd.NewWriter(nil, opts...)
		if err != nil {
			return nil, err
		}
		c.zenc = e
	}
	return c.zenc, nil
}

// xerialWriter writes snappy in the Java producer's xerial framing, in
// blocks of xerialBlock bytes of the input, as compress does.
type xerialWriter struct {
	dst     io.Writer
	pending []byte
	block   []byte
	started bool
	err     error
}

func (x *xerialWriter) reset(dst io.Writer) {
	x.dst, x.pending, x.started, x.err = dst, x.pending[:0], false, nil
}

func (x *xerialWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && x.err == nil {
		k := min(len(p), xerialBlock-len(x.pending))
		x.pending = append(x.pending, p[:k]...)
		p = p[k:]
		if len(x.pending) == xerialBlock {
			x.flush()
		}
	}
	return n, x.err
}

func (x *xerialWriter) flush() {
	if x.err != nil {
		return
	}
	var hdr [16]byte
	if !x.started {
		copy(hdr[:], xerialPrefix)
		binary.BigEndian.PutUint32(hdr[8:], 1)
		binary.BigEndian.PutUint32(hdr[12:], 1)
		_, x.err = x.dst.Write(hdr[:])
		x.started = true
	}
	if len(x.pending) == 0 || x.err != nil {
		return
	}
	x.block = s2.EncodeSnappy(x.block[:cap(x.block)], x.pending)
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(x.block)))
	if _, x.err = x.dst.Write(hdr[:4]); x.err == nil {
		_, x.err = x.dst.Write(x.block)
	}
	x.pending = x.pending[:0]
}

// Close writes what is pending (and the header of an empty stream).
func (x *xerialWriter) Close() error {
	x.flush()
	return x.err
}

// close releases the zstd decoder's goroutines.
func (c *codecs) close() {
	if c.zdec != nil {
		c.zdec.Close()
	}
	if c.zenc != nil {
		c.zenc.Close()
	}
}
