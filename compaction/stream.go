package compaction

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/sediment-io/sediment/hotlog"
)

// The checks of produced batches (CheckRecords, CheckKeys, RecompressBatch)
// read a compressed batch's records as they decompress, through a small
// buffer, as Kafka's LogValidator does with its streaming iterator: the
// decompressed records are never held whole, so a batch of a few KB that
// decompresses to tens of MiB (a compression bomb) costs its decompression's
// CPU time, not its size in memory.
//
// What a decompression holds is then its codec's state: gzip's 32 KiB
// window, lz4's block buffers (at most 4 MiB each), a zstd frame's window
// (as its header declares, up to the caller's bound) and a raw snappy block
// (which is the whole payload: snappy copies may reach back anywhere in a
// block). So that many partitions of many requests cannot add these up,
// decompressions are bounded process-wide in two tiers:
//
//   - streamSlots: at most max(2, GOMAXPROCS) at once (decompression is CPU
//     work; more at once would not go faster), each with decoders that hold
//     at most streamWindow (zstd windows up to 8 MiB, RFC 8878's
//     recommendation to decoders; snappy blocks up to 8 MiB; lz4 needs no
//     more);
//   - largeSlot: a batch whose decompression needs more (a zstd frame with
//     a larger window, a bigger snappy block; Java producers at
//     compression.zstd.level 20 and 21, 32 and 64 MiB windows) is checked
//     again alone, one at a time, with decoders bounded by the caller's limit
//     (the broker's is 64 MiB).
//
// Worst case, the checks hold max(2, GOMAXPROCS) × ~8.5 MiB plus one limit.

// streamWindow bounds what a decompression of the common tier may hold.
const streamWindow = 8 << 20

// streamBuffer is the buffer the records are parsed from.
const streamBuffer = 32 << 10

var (
	streamSlots = make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))
	largeSlot   = make(chan struct{}, 1)
)

// ErrTooLarge is a produced batch whose records decompress to more than the
// caller's bound, or whose rewriting (RecompressBatch) is larger than the
// output bound.
var ErrTooLarge = errors.New("compaction: batch too large")

// errNeedsLarge: the common tier's decoders would need more than
// streamWindow for this payload; it is checked again in the large tier.
var errNeedsLarge = errors.New("compaction: decompression needs more than the common window")

// streamSink receives the decompressed records, in order, while they are
// checked (RecompressBatch's compressor). reset starts it over (a check
// retried in the large tier).
type streamSink interface {
	io.Writer
	reset() error
}

// checkCompressed checks the records of a batch with header h whose
// compressed payload is payload, decompressing at most maxBytes, as
// checkRecordsOf does for decompressed ones; sink, if not nil, receives the
// decompressed bytes.
func checkCompressed(h *hotlog.BatchHeader, payload []byte, maxBytes int, needKeys bool, sink streamSink) error {
	streamSlots <- struct{}{}
	err := checkTier(h, payload, maxBytes, needKeys, sink, false)
	<-streamSlots
	if !errors.Is(err, errNeedsLarge) {
		return err
	}
	largeSlot <- struct{}{}
	defer func() { <-largeSlot }()
	if sink != nil {
		if err := sink.reset(); err != nil {
			return err
		}
	}
	return checkTier(h, payload, maxBytes, needKeys, sink, true)
}

func checkTier(h *hotlog.BatchHeader, payload []byte, maxBytes int, needKeys bool, sink streamSink, large bool) error {
	r, done, err := decompressor(h.Compression(), payload, maxBytes, large)
	if err != nil {
		return err
	}
	defer done()
	s := recordStream{r: r, limit: int64(max(maxBytes, 0))}
	if sink != nil {
		s.sink = sink
	}
	bufp := streamBuffers.Get().(*[]byte)
	defer streamBuffers.Put(bufp)
	s.buf = *bufp
	t := recordTally{needKeys: needKeys}
	if err := s.records(h.NumRecords, h.LastOffsetDelta, t.add); err != nil {
		if errors.Is(err, ErrTooLarge) || errors.Is(err, errNeedsLarge) || errors.Is(err, ErrCorrupt) {
			return err
		}
		if errors.Is(err, errBadRecord) || errors.Is(err, errDecompress) {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		return err // the sink's
	}
	return t.result(h)
}

var streamBuffers = sync.Pool{New: func() any { b := make([]byte, streamBuffer); return &b }}

// decompressor returns a reader of payload decompressed with codec, and
// what gives its decoder back. Decoders of the common tier are pooled;
// those of the large tier are dropped after use.
func decompressor(codec int, payload []byte, limit int, large bool) (io.Reader, func(), error) {
	// A pooled decoder keeps its source until its next use: the source is
	// emptied (or the decoder reset to none) after use, so that it does not
	// keep the request's frame.
	src := bytes.NewReader(payload)
	switch codec {
	case codecGzip:
		zr, _ := gzipReaders.Get().(*gzip.Reader)
		if zr == nil {
			zr = new(gzip.Reader)
		}
		if err := zr.Reset(src); err != nil {
			src.Reset(nil)
			gzipReaders.Put(zr)
			return nil, nil, fmt.Errorf("%w: %w: gzip: %v", ErrCorrupt, errDecompress, err)
		}
		return &codecReader{r: zr, codec: "gzip"}, func() { src.Reset(nil); gzipReaders.Put(zr) }, nil
	case codecSnappy:
		blockMax := streamWindow
		if large {
			blockMax = limit
		}
		sr := &snappyReader{limit: limit, blockMax: blockMax}
		if len(payload) >= 16 && bytes.HasPrefix(payload, xerialPrefix) {
			sr.src, sr.xerial = payload[16:], true
		} else {
			sr.src = payload
		}
		if large {
			return sr, func() {}, nil // its buffer is dropped
		}
		bufp, _ := snappyBuffers.Get().(*[]byte)
		if bufp == nil {
			bufp = new([]byte)
		}
		sr.buf = *bufp
		return sr, func() { *bufp = sr.buf[:0]; sr.buf, sr.out = nil, nil; snappyBuffers.Put(bufp) }, nil
	case codecLz4:
		lr, _ := lz4Readers.Get().(*lz4.Reader)
		if lr == nil {
			lr = lz4.NewReader(src)
		} else {
			lr.Reset(src)
		}
		return &codecReader{r: lr, codec: "lz4"}, func() { lr.Reset(nil); lz4Readers.Put(lr) }, nil
	case codecZstd:
		window := min(streamWindow, max(limit, zstd.MinWindowSize))
		if large {
			d, err := newZstdReader(max(limit, zstd.MinWindowSize))
			if err != nil {
				return nil, nil, err
			}
			if err := d.Reset(src); err != nil {
				d.Close()
				return nil, nil, fmt.Errorf("%w: %w: zstd: %v", ErrCorrupt, errDecompress, err)
			}
			return &codecReader{r: d, codec: "zstd"}, d.Close, nil
		}
		pool := zstdReaders(window)
		d, _ := pool.Get().(*zstd.Decoder)
		if d == nil {
			var err error
			if d, err = newZstdReader(window); err != nil {
				return nil, nil, err
			}
		}
		if err := d.Reset(src); err != nil {
			pool.Put(d)
			return nil, nil, fmt.Errorf("%w: %w: zstd: %v", ErrCorrupt, errDecompress, err)
		}
		return &codecReader{r: d, codec: "zstd", small: window < limit}, func() { d.Reset(nil); pool.Put(d) }, nil
	}
	return nil, nil, fmt.Errorf("%w: %w: unknown codec %d", ErrCorrupt, errDecompress, codec)
}

var (
	snappyBuffers sync.Pool // *[]byte, at most streamWindow
	gzipReaders   sync.Pool // *gzip.Reader
	lz4Readers    sync.Pool // *lz4.Reader
	zstdPools     sync.Map  // window → *sync.Pool of *zstd.Decoder
)

func zstdReaders(window int) *sync.Pool {
	if p, ok := zstdPools.Load(window); ok {
		return p.(*sync.Pool)
	}
	p, _ := zstdPools.LoadOrStore(window, new(sync.Pool))
	return p.(*sync.Pool)
}

// newZstdReader makes a synchronous streaming decoder (no goroutines) that
// refuses frames whose window is larger than window: a frame's window is
// what the decoder allocates for it. Decoding a bytes.Buffer-like reader in
// one piece (DecodeAll, a buffer of the frame's whole declared size) is
// off.
func newZstdReader(window int) (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(uint64(window)), zstd.WithDecoderMaxMemory(uint64(window)), zstd.WithDecodeBuffersBelow(0))
}

// codecReader marks a decoder's errors: a zstd frame whose window the common
// tier's decoder refuses (small) needs the large tier; any other is a
// payload that does not decompress.
type codecReader struct {
	r     io.Reader
	codec string
	small bool
}

func (c *codecReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		if c.small && (errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded)) {
			return n, errNeedsLarge
		}
		return n, fmt.Errorf("%w: %s: %v", errDecompress, c.codec, err)
	}
	return n, err
}

// snappyReader decodes a snappy payload block by block: raw (one block, as
// franz-go and librdkafka send whole batches) or in xerial framing (blocks of
// 32 KiB from the Java producer). A block's decoded length is in its header,
// so what it needs is known before it is decoded: more than blockMax needs
// the large tier, more than what is left of the limit is ErrTooLarge.
type snappyReader struct {
	src      []byte
	xerial   bool
	done     bool // the raw block was read
	buf      []byte
	out      []byte // decoded, not yet read
	total    int    // decoded so far
	limit    int
	blockMax int
}

func (s *snappyReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		blk, err := s.next()
		if err != nil {
			return 0, err
		}
		n, err := s2.DecodedLen(blk)
		if err != nil {
			return 0, fmt.Errorf("%w: snappy: %v", errDecompress, err)
		}
		if n > s.limit-s.total {
			return 0, fmt.Errorf("%w: records decompress to more than %d bytes (a snappy block of %d)", ErrTooLarge, s.limit, n)
		}
		if n > s.blockMax {
			return 0, errNeedsLarge
		}
		if cap(s.buf) < n {
			s.buf = make([]byte, n)
		}
		out, err := s2.Decode(s.buf[:n], blk)
		if err != nil {
			return 0, fmt.Errorf("%w: snappy: %v", errDecompress, err)
		}
		s.out = out
		s.total += len(out)
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// next returns the next compressed block, io.EOF after the last.
func (s *snappyReader) next() ([]byte, error) {
	if !s.xerial {
		if s.done {
			return nil, io.EOF
		}
		s.done = true
		return s.src, nil
	}
	if len(s.src) == 0 {
		return nil, io.EOF
	}
	if len(s.src) < 4 {
		return nil, fmt.Errorf("%w: xerial block header", errDecompress)
	}
	n := int64(binary.BigEndian.Uint32(s.src))
	s.src = s.src[4:]
	if n > int64(len(s.src)) {
		return nil, fmt.Errorf("%w: xerial block of %d bytes, %d left", errDecompress, n, len(s.src))
	}
	blk := s.src[:n]
	s.src = s.src[n:]
	return blk, nil
}

// recordStream parses records from a reader of decompressed record bytes.
// Bytes are counted as they are read: past limit is ErrTooLarge.
type recordStream struct {
	r     io.Reader
	buf   []byte
	p, n  int   // buf[p:n] is read, not yet parsed
	pos   int64 // bytes parsed
	read  int64 // bytes read from r
	limit int64
	eof   bool
	err   error // the reader's (not io.EOF), ErrTooLarge, or the sink's
	sink  io.Writer
}

// fill reads until want bytes (at most len(buf)) are buffered or the
// reader ends or fails; it returns the bytes buffered.
func (s *recordStream) fill(want int) int {
	if s.n-s.p >= want || s.eof || s.err != nil {
		return s.n - s.p
	}
	if s.p > 0 {
		s.n = copy(s.buf, s.buf[s.p:s.n])
		s.p = 0
	}
	for idle := 0; s.n < want && !s.eof && s.err == nil; {
		m, err := s.r.Read(s.buf[s.n:])
		if m > 0 {
			idle = 0
			if s.read += int64(m); s.read > s.limit {
				s.err = fmt.Errorf("%w: records decompress to more than %d bytes", ErrTooLarge, s.limit)
				break
			}
			if s.sink != nil {
				if _, werr := s.sink.Write(s.buf[s.n : s.n+m]); werr != nil {
					s.err = werr
					break
				}
			}
			s.n += m
		} else if err == nil {
			if idle++; idle > 100 {
				err = io.ErrNoProgress
			}
		}
		switch {
		case err == io.EOF:
			s.eof = true
		case err != nil:
			s.err = err
		}
	}
	return s.n - s.p
}

// varint reads a zigzag varint whose bytes end before the position end, as
// binary.Varint over what is left of a record.
func (s *recordStream) varint(end int64) (int64, bool) {
	if s.n-s.p < binary.MaxVarintLen64 {
		s.fill(binary.MaxVarintLen64)
	}
	avail := int64(s.n - s.p)
	if left := end - s.pos; left < avail {
		avail = max(left, 0)
	}
	v, k := binary.Varint(s.buf[s.p : s.p+int(avail)])
	if k <= 0 {
		return 0, false
	}
	s.p += k
	s.pos += int64(k)
	return v, true
}

// skip consumes n bytes; false if the stream ends first.
func (s *recordStream) skip(n int64) bool {
	for n > 0 {
		if s.p == s.n && s.fill(1) == 0 {
			return false
		}
		k := min(int64(s.n-s.p), n)
		s.p += int(k)
		s.pos += k
		n -= k
	}
	return true
}

// fail is a malformed record's error, unless the stream itself failed
// (which is then why the record looks malformed).
func (s *recordStream) fail(format string, args ...any) error {
	if s.err != nil {
		return s.err
	}
	return fmt.Errorf("%w: "+format, append([]any{errBadRecord}, args...)...)
}

// records walks count records as recordKeys does, with the same checks (the
// same batches pass), handing fn each record's offset delta and whether it
// has a key, and requires the stream to end after the last. A record that
// fits the buffer is parsed in place (recordBody); a larger one field by
// field as it streams (streamedBody).
func (s *recordStream) records(count, lastOffsetDelta int32, fn func(offsetDelta int32, hasKey bool)) error {
	if count < 0 {
		return fmt.Errorf("%w: record count %d", errBadRecord, count)
	}
	prev := int64(-1)
	for i := int32(0); i < count; i++ {
		if s.fill(1) == 0 {
			return s.fail("%d records, header says %d", i, count)
		}
		length, ok := s.varint(math.MaxInt64)
		if !ok || length <= 0 {
			return s.fail("record %d: bad length", i)
		}
		var od int64
		var hasKey bool
		if length <= int64(len(s.buf)) && s.fill(int(length)) >= int(length) {
			od, hasKey, ok = recordBody(s.buf[s.p : s.p+int(length)])
			s.p += int(length)
			s.pos += length
		} else {
			end := s.pos + length
			if end < s.pos {
				end = math.MaxInt64
			}
			od, hasKey, ok = s.streamedBody(end)
		}
		if !ok {
			return s.fail("record %d: fields do not fit its length", i)
		}
		if od <= prev || od > int64(lastOffsetDelta) {
			return s.fail("record %d: offset delta %d after %d (last %d)", i, od, prev, lastOffsetDelta)
		}
		prev = od
		fn(int32(od), hasKey)
	}
	if n := s.fill(1); n > 0 {
		return s.fail("bytes after the last record")
	}
	return s.err
}

// recordBody parses the body of one record (after its length) as recordKeys
// does: every field inside it, nothing left over.
func recordBody(b []byte) (od int64, hasKey, ok bool) {
	end := len(b)
	// After the attributes byte (a body has at least one), the
	// timestamp delta.
	p := 1
	if _, p = varintAt(b, p, end); p == 0 {
		return 0, false, false
	}
	if od, p = varintAt(b, p, end); p == 0 {
		return 0, false, false
	}
	var null bool
	if p, _, null = skipNullable(b, p, end); p == 0 { // key
		return 0, false, false
	}
	if p, _, _ = skipNullable(b, p, end); p == 0 { // value
		return 0, false, false
	}
	var nh int64
	if nh, p = varintAt(b, p, end); p == 0 || nh < 0 || nh > int64(end-p) {
		return 0, false, false
	}
	for h := int64(0); h < nh; h++ {
		var k int64
		if k, p = varintAt(b, p, end); p == 0 || k < 0 || k > int64(end-p) {
			return 0, false, false
		}
		p += int(k)
		if p, _, _ = skipNullable(b, p, end); p == 0 {
			return 0, false, false
		}
	}
	return od, !null, p == end
}

// streamedBody reads the body of one record ending at position end field by
// field, skipping keys, values and headers as they stream, with
// recordBody's checks.
func (s *recordStream) streamedBody(end int64) (od int64, hasKey, ok bool) {
	if !s.skip(1) { // attributes
		return 0, false, false
	}
	if _, ok = s.varint(end); !ok { // timestamp delta
		return 0, false, false
	}
	if od, ok = s.varint(end); !ok {
		return 0, false, false
	}
	kl, ok := s.varint(end)
	if !ok || kl < -1 || kl > end-s.pos || !s.skip(max(kl, 0)) {
		return 0, false, false
	}
	vl, ok := s.varint(end)
	if !ok || vl < -1 || vl > end-s.pos || !s.skip(max(vl, 0)) {
		return 0, false, false
	}
	nh, ok := s.varint(end)
	if !ok || nh < 0 || nh > end-s.pos {
		return 0, false, false
	}
	for h := int64(0); h < nh; h++ {
		k, ok := s.varint(end)
		if !ok || k < 0 || k > end-s.pos || !s.skip(k) {
			return 0, false, false
		}
		v, ok := s.varint(end)
		if !ok || v < -1 || v > end-s.pos || !s.skip(max(v, 0)) {
			return 0, false, false
		}
	}
	return od, kl != -1, s.pos == end
}

// recordTally collects what checkRecordsOf decides on from a batch's
// records, in order.
type recordTally struct {
	needKeys bool
	i        int32
	gap      bool // an offset delta other than the record's index
	missing  []int32
	nMissing int
}

// maxListedMissing bounds the keyless records a MissingKeysError lists by
// index (a Produce response's record errors, KIP-467; Kafka lists every one,
// each with its message): a batch decompressing to 64 MiB can hold millions
// of records, and their list, and a response naming each, would be hundreds
// of MiB.
const maxListedMissing = 1000

func (t *recordTally) add(od int32, hasKey bool) {
	t.gap = t.gap || od != t.i
	if !hasKey && t.needKeys {
		if t.nMissing < maxListedMissing {
			t.missing = append(t.missing, t.i)
		}
		t.nMissing++
	}
	t.i++
}

func (t *recordTally) result(h *hotlog.BatchHeader) error {
	// The walk read exactly NumRecords records and nothing after them; a
	// produced batch also has them at offset deltas 0..n-1.
	if t.gap || int64(h.NumRecords) != int64(h.LastOffsetDelta)+1 {
		return fmt.Errorf("%w: %v: %d records, last offset delta %d, deltas in order: %v", ErrCorrupt, errBadRecord, h.NumRecords, h.LastOffsetDelta, !t.gap)
	}
	if t.nMissing > 0 {
		return &MissingKeysError{Indexes: t.missing, Count: t.nMissing}
	}
	return nil
}
