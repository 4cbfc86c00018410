package compaction

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"runtime"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
)

// allocated is the bytes the Go heap allocated during f.
func allocated(f func()) uint64 {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// TestCheckRecordsStreamsBomb: the check of a compressed batch of one record
// of 60 MiB (a few KB compressed: a compression bomb) reads it as it
// decompresses, allocating a small fraction of it (it allocated all of it,
// so 24 copies of one such batch in a 47 KiB Produce took a broker to 1.5
// GiB, 64 to out of memory); a 65 MiB one is ErrTooLarge (over the 64 MiB
// bound), as cheaply.
func TestCheckRecordsStreamsBomb(t *testing.T) {
	for _, codec := range []int{codecZstd, codecGzip, codecSnappy, codecLz4} {
		// zstd holds its frame's window (8 MiB here), the others less
		// than 1 MiB; they are slow under the race detector.
		size, most := 60<<20, 16<<20
		if codec != codecZstd {
			most = 2 << 20
			if raceEnabled {
				size = 24 << 20
			}
		}
		bomb := bombBatch(t, codec, size)
		var err error
		n := allocated(func() { err = CheckKeys(bomb, 64<<20) })
		if err != nil {
			t.Fatalf("codec %d: a %d-byte batch of one %d MiB record: %v", codec, len(bomb), size>>20, err)
		}
		t.Logf("codec %d: a %d-byte batch of a %d MiB record checked with %.1f MiB allocated", codec, len(bomb), size>>20, float64(n)/(1<<20))
		if n > uint64(most) {
			t.Fatalf("codec %d: %d bytes allocated to check a batch of a %d MiB record", codec, n, size>>20)
		}
		if codec != codecZstd {
			continue // the bound is the same for every codec
		}
		over := bombBatch(t, codec, 65<<20)
		nOver := allocated(func() { err = CheckRecords(over, 64<<20) })
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("codec %d: a %d-byte batch of one 65 MiB record: %v, want ErrTooLarge", codec, len(over), err)
		}
		t.Logf("codec %d: a %d-byte batch of a 65 MiB record refused with %.1f MiB allocated", codec, len(over), float64(nOver)/(1<<20))
		if nOver > 16<<20 {
			t.Fatalf("codec %d: %d bytes allocated to refuse a batch of a 65 MiB record", codec, nOver)
		}
	}
	// A raw snappy block says how large it decodes: over the bound, it is
	// refused before it is decoded.
	b := makeBatch(t, testCodecs[2], 1000, batchOpts{}, kv{[]byte("k"), make([]byte, 2<<20)})
	var err error
	if n := allocated(func() { err = CheckRecords(b, 1<<20) }); !errors.Is(err, ErrTooLarge) || n > 1<<20 {
		t.Fatalf("a raw snappy block of 2 MiB under a 1 MiB bound: %v, %d bytes allocated", err, n)
	}
}

// bombBatch is a batch of one record with a key and size zero bytes of
// value, compressed with codec as producers do (zstd in one frame with its
// content size and an 8 MiB window, as franz-go and the review's producer
// write it; snappy in xerial framing, as the Java producer), built without
// holding the record for codecs that stream.
func bombBatch(t testing.TB, codec, size int) []byte {
	t.Helper()
	rec := []byte{0, 0, 0, 2, 'k'} // attributes, timestamp and offset deltas, key
	rec = binary.AppendVarint(rec, int64(size))
	head := binary.AppendVarint(nil, int64(len(rec)+size+1))
	head = append(head, rec...)
	tail := []byte{0} // no headers
	records := func() io.Reader {
		return io.MultiReader(bytes.NewReader(head), io.LimitReader(zeros{}, int64(size)), bytes.NewReader(tail))
	}
	var payload bytes.Buffer
	switch codec {
	case codecZstd:
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		defer enc.Close()
		all, _ := io.ReadAll(records())
		payload.Write(enc.EncodeAll(all, nil))
	case codecGzip:
		w, _ := gzip.NewWriterLevel(&payload, gzip.BestSpeed)
		io.Copy(w, records())
		w.Close()
	case codecSnappy:
		payload.Write([]byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1})
		r := records()
		chunk := make([]byte, 32<<10)
		for {
			n, err := io.ReadFull(r, chunk)
			if n > 0 {
				blk := s2.EncodeSnappy(nil, chunk[:n])
				binary.Write(&payload, binary.BigEndian, uint32(len(blk)))
				payload.Write(blk)
			}
			if err != nil {
				break
			}
		}
	case codecLz4:
		w := lz4.NewWriter(&payload)
		if err := w.Apply(lz4.BlockSizeOption(lz4.Block64Kb)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(struct{ io.Writer }{w}, records()); err != nil { // (not lz4's ReadFrom)
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	now := int64(1000)
	rb := kmsg.RecordBatch{Magic: 2, Attributes: int16(codec), NumRecords: 1, FirstTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, Records: payload.Bytes()}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-12))
	fixCRC(b)
	return b
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestCheckCompressedLargeWindow: a zstd frame whose window is larger than
// the common tier's 8 MiB (a Java producer at compression.zstd.level 20+, or
// a single-segment frame of more than 8 MiB) is checked in the large tier,
// with the same result; one whose window is over the bound is ErrCorrupt, as
// before.
func TestCheckCompressedLargeWindow(t *testing.T) {
	recs := []kv{{[]byte("a"), bytes.Repeat([]byte("x"), 9<<20)}, {nil, []byte("y")}}
	raw := makeBatch(t, testCodecs[0], 1000, batchOpts{}, recs...)
	enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(32<<20), zstd.WithEncoderConcurrency(1), zstd.WithSingleSegment(false))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var frame bytes.Buffer
	enc.Reset(&frame)
	enc.Write(raw[headerSize:]) // streamed: no content size; the window is declared
	enc.Close()
	b := append(bytes.Clone(raw[:headerSize]), frame.Bytes()...)
	b[offAttributes+1] = codecZstd
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-12))
	fixCRC(b)
	var hdr zstd.Header
	if err := hdr.Decode(frame.Bytes()); err != nil || hdr.WindowSize <= streamWindow {
		t.Fatalf("frame header %+v, %v: want a window over %d", hdr, err, streamWindow)
	}
	if err := CheckRecords(b, 64<<20); err != nil {
		t.Fatalf("a %d MiB window: %v", hdr.WindowSize>>20, err)
	}
	var mk *MissingKeysError
	if err := CheckKeys(b, 64<<20); !errors.As(err, &mk) || !slices.Equal(mk.Indexes, []int32{1}) {
		t.Fatalf("keys, a %d MiB window: %v", hdr.WindowSize>>20, err)
	}
	if err := CheckRecords(b, 16<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a %d MiB window over a 16 MiB bound: %v, want ErrCorrupt", hdr.WindowSize>>20, err)
	}
	// Rewritten from the large tier.
	out, err := RecompressBatch(b, codecGzip, -1, 64<<20, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := decompressForTest(t, codecGzip, out[headerSize:]); !bytes.Equal(got, raw[headerSize:]) {
		t.Fatal("the records changed")
	}
}

// TestRecompressBatchOutputBound: a batch whose rewriting is larger than
// maxOut is ErrTooLarge once its records are checked (a malformed one is
// still ErrCorrupt), without the output being kept past the bound.
func TestRecompressBatchOutputBound(t *testing.T) {
	in := bombBatch(t, codecZstd, 32<<20)
	var out []byte
	var err error
	n := allocated(func() { out, err = RecompressBatch(in, codecNone, -1, 64<<20, 1<<20, true) })
	if !errors.Is(err, ErrTooLarge) || out != nil {
		t.Fatalf("zstd -> none over 1 MiB: %d bytes, %v", len(out), err)
	}
	t.Logf("a %d-byte zstd batch of a 32 MiB record refused as uncompressed over 1 MiB with %.1f MiB allocated", len(in), float64(n)/(1<<20))
	if n > 20<<20 {
		t.Fatalf("%d bytes allocated", n)
	}
	if out, err = RecompressBatch(in, codecNone, -1, 64<<20, 33<<20, true); err != nil || len(out) < 32<<20 {
		t.Fatalf("zstd -> none under 33 MiB: %d bytes, %v", len(out), err)
	}
	bad := rewriteCounts(t, in, 1, 2)
	fixCRC(bad)
	if _, err := RecompressBatch(bad, codecNone, -1, 64<<20, 1<<20, true); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a malformed batch over the output bound: %v, want ErrCorrupt", err)
	}
}

// TestMissingKeysListBounded: a batch of many keyless records lists the
// first maxListedMissing, and counts them all.
func TestMissingKeysListBounded(t *testing.T) {
	recs := make([]kv, 5000)
	for i := range recs {
		recs[i] = kv{nil, []byte("v")}
	}
	b := makeBatch(t, testCodecs[5], 1000, batchOpts{}, recs...)
	var mk *MissingKeysError
	if err := CheckKeys(b, 64<<20); !errors.As(err, &mk) || len(mk.Indexes) != maxListedMissing || mk.Count != 5000 || mk.Indexes[maxListedMissing-1] != maxListedMissing-1 {
		t.Fatalf("%v", err)
	}
}

// FuzzStreamRecords: the streaming record walk (read a byte at a time,
// through a buffer of any size from the least it needs) accepts exactly
// what the in-memory walk (recordKeys) accepts, with the same keyless
// records and offset deltas; under a limit below the records' size, what
// passes in memory is ErrTooLarge.
func FuzzStreamRecords(f *testing.F) {
	b := makeBatch(f, testCodecs[0], 0, batchOpts{}, kv{[]byte("k"), []byte("v")}, kv{nil, []byte("vv")}, kv{[]byte("k3"), nil}, kv{[]byte(""), bytes.Repeat([]byte("z"), 300)})
	f.Add(b[headerSize:], int32(4), int32(3), uint8(0), false)
	f.Add(b[headerSize:], int32(4), int32(3), uint8(200), true)
	f.Add([]byte{2, 0, 0}, int32(1), int32(0), uint8(1), false)
	f.Add(binary.AppendVarint(nil, 1<<40), int32(1), int32(5), uint8(3), false)
	f.Fuzz(func(t *testing.T, data []byte, count, lastDelta int32, bufExtra uint8, oneByte bool) {
		count = min(count, 1<<16)
		type rec struct {
			od     int32
			hasKey bool
		}
		var want, got []rec
		wantErr := recordKeys(data, count, lastDelta, func(od int32, key []byte, _ bool) { want = append(want, rec{od, key != nil}) })
		walk := func(limit int64) error {
			got = got[:0]
			var r io.Reader = bytes.NewReader(data)
			if oneByte {
				r = iotest.OneByteReader(r)
			} else {
				r = iotest.HalfReader(r)
			}
			s := recordStream{r: r, buf: make([]byte, binary.MaxVarintLen64+int(bufExtra)), limit: limit}
			return s.records(count, lastDelta, func(od int32, hasKey bool) { got = append(got, rec{od, hasKey}) })
		}
		err := walk(int64(len(data)))
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("stream: %v; in memory: %v", err, wantErr)
		}
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("error class: %v", err)
			}
			return
		}
		if !slices.Equal(got, want) {
			t.Fatalf("stream saw %v, in memory %v", got, want)
		}
		if len(data) > 0 {
			if err := walk(int64(len(data) - 1)); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("under a limit of %d bytes: %v", len(data)-1, err)
			}
		}
	})
}

// FuzzCheckCompressed: arbitrary payloads under any codec, checked as they
// decompress (checkCompressed), against decompressing them whole (the
// cleaner's codecs.decompress) and checking the records in memory: the same
// verdict when the payload decompresses within the limit (the same keyless
// records), a refusal (ErrCorrupt or ErrTooLarge) when it does not.
func FuzzCheckCompressed(f *testing.F) {
	recs := []kv{{[]byte("k"), []byte("v")}, {nil, bytes.Repeat([]byte("ab"), 100)}, {[]byte("k3"), nil}}
	for _, tc := range testCodecs[1:] {
		b := makeBatch(f, tc, 0, batchOpts{}, recs...)
		f.Add(uint8(tc.codec), int32(3), b[headerSize:])
	}
	f.Add(uint8(codecZstd), int32(1), []byte("not zstd"))
	var c codecs
	defer c.close()
	const limit = 1 << 16
	f.Fuzz(func(t *testing.T, codec uint8, count int32, payload []byte) {
		codec = 1 + codec%4
		count = min(max(count, 0), 1<<16)
		rb := kmsg.RecordBatch{Magic: 2, Attributes: int16(codec), LastOffsetDelta: count - 1, NumRecords: count, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, Records: payload}
		b := rb.AppendTo(nil)
		binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-12))
		binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
		h, err := hotlog.ParseBatchHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		got := checkCompressed(&h, payload, limit, true, nil)
		if got != nil && !errors.Is(got, ErrCorrupt) && !errors.Is(got, ErrTooLarge) && !errors.Is(got, ErrMissingKey) {
			t.Fatalf("error class: %v", got)
		}
		raw, derr := c.decompress(int(codec), payload, nil, limit)
		if derr != nil {
			if got == nil || errors.Is(got, ErrMissingKey) {
				t.Fatalf("accepted as it decompresses (%v), refused whole: %v", got, derr)
			}
			return
		}
		want := checkRecordsOf(&h, raw, true)
		var gm, wm *MissingKeysError
		switch {
		case (got == nil) != (want == nil), errors.Is(got, ErrMissingKey) != errors.Is(want, ErrMissingKey):
			t.Fatalf("as it decompresses: %v; whole: %v", got, want)
		case errors.As(got, &gm) && errors.As(want, &wm) && (!slices.Equal(gm.Indexes, wm.Indexes) || gm.Count != wm.Count):
			t.Fatalf("keyless records as it decompresses %v, whole %v", gm, wm)
		}
	})
}

// BenchmarkCheckRecords: a produced batch of 1,000 records of 100 bytes
// checked as it decompresses (stream, what Produce does) against
// decompressed whole into a reused buffer and walked in memory (whole, what
// it did).
func BenchmarkCheckRecords(b *testing.B) {
	recs := make([]kv, 1000)
	for i := range recs {
		recs[i] = kv{keyOf(i), bytes.Repeat([]byte{byte(i)}, 100)}
	}
	for _, tc := range testCodecs[1:] {
		batch := makeBatch(b, tc, 1000, batchOpts{}, recs...)
		h, err := hotlog.ParseBatchHeader(batch)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name+"/stream", func(b *testing.B) {
			b.SetBytes(int64(len(batch)))
			for b.Loop() {
				if err := CheckKeys(batch, 64<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/whole", func(b *testing.B) {
			var c codecs
			defer c.close()
			var buf []byte
			b.SetBytes(int64(len(batch)))
			for b.Loop() {
				if buf, err = c.decompress(h.Compression(), batch[headerSize:], buf, 64<<20); err != nil {
					b.Fatal(err)
				}
				if err := checkRecordsOf(&h, buf, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
