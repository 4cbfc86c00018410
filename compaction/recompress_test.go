package compaction

import (
	"bytes"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/sediment-io/sediment/hotlog"
)

// TestRecompressBatch rewrites a batch of every codec into every other
// (levels included): the records are the same bytes once decompressed (by
// the libraries themselves, not this package), the header the same but for
// length, codec and CRC (which is right), the transactional flag and
// producer fields kept; a batch already in the codec comes back as it is;
// a broken CRC is ErrCorrupt; a keyless record is ErrMissingKey with
// needKeys.
func TestRecompressBatch(t *testing.T) {
	recs := []kv{{[]byte("a"), bytes.Repeat([]byte("1"), 300)}, {[]byte("b"), []byte("2")}, {[]byte("c"), nil}}
	for _, src := range testCodecs {
		in := makeBatch(t, src, 1000, batchOpts{producerID: 42, transactional: true}, recs...)
		ih, err := hotlog.ParseBatchHeader(in)
		if err != nil {
			t.Fatal(err)
		}
		raw := decompressForTest(t, src.codec, in[headerSize:])
		for _, dst := range testCodecs {
			for _, level := range []int{-1, 1, 9} {
				out, err := RecompressBatch(in, int(dst.codec), level, 1<<20, 0, true)
				if err != nil {
					t.Fatalf("%s -> %s (level %d): %v", src.name, dst.name, level, err)
				}
				if src.codec == dst.codec {
					if !bytes.Equal(out, in) {
						t.Fatalf("%s -> %s: rewritten", src.name, dst.name)
					}
					continue
				}
				oh, err := hotlog.ParseBatchHeader(out)
				if err != nil || oh.Size() != int64(len(out)) {
					t.Fatalf("%s -> %s: %v", src.name, dst.name, err)
				}
				if crc32.Checksum(out[offAttributes:], castagnoli) != oh.CRC {
					t.Fatalf("%s -> %s: CRC does not match", src.name, dst.name)
				}
				if oh.Compression() != int(dst.codec) || !oh.IsTransactional() || oh.ProducerID != 42 || oh.BaseSequence != ih.BaseSequence ||
					oh.NumRecords != ih.NumRecords || oh.LastOffsetDelta != ih.LastOffsetDelta || oh.MaxTimestamp != ih.MaxTimestamp ||
					oh.BaseTimestamp != ih.BaseTimestamp || oh.BaseOffset != ih.BaseOffset {
					t.Fatalf("%s -> %s: header %+v, from %+v", src.name, dst.name, oh, ih)
				}
				if got := decompressForTest(t, dst.codec, out[headerSize:]); !bytes.Equal(got, raw) {
					t.Fatalf("%s -> %s: the records changed", src.name, dst.name)
				}
				if err := CheckRecords(out, 1<<20); dst.codec != codecNone && err != nil {
					t.Fatalf("%s -> %s: %v", src.name, dst.name, err)
				}
			}
		}
		bad := bytes.Clone(in)
		bad[len(bad)-1] ^= 0x40
		if _, err := RecompressBatch(bad, int(src.codec+1)%5, -1, 1<<20, 0, false); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s with a broken CRC: %v, want ErrCorrupt", src.name, err)
		}
		keyless := makeBatch(t, src, 1000, batchOpts{}, kv{nil, []byte("x")})
		if _, err := RecompressBatch(keyless, int(src.codec+1)%5, -1, 1<<20, 0, true); !errors.Is(err, ErrMissingKey) {
			t.Fatalf("%s keyless on a compacted topic: %v, want ErrMissingKey", src.name, err)
		}
	}
}

// FuzzRecompressBatch: arbitrary payloads under any codec (with a right
// CRC, so the records are read) recompressed to any codec: ErrCorrupt,
// ErrMissingKey or ErrTooLarge (over 64 KiB decompressed, or a rewritten
// batch over 16 KiB), or a whole batch of at most 16 KiB with a right CRC
// whose records check.
func FuzzRecompressBatch(f *testing.F) {
	f.Add([]byte{}, uint8(0), uint8(4), int16(3))
	f.Add(bytes.Repeat([]byte{7}, 40), uint8(1), uint8(0), int16(-1))
	f.Fuzz(func(t *testing.T, payload []byte, src, dst uint8, level int16) {
		b := makeBatch(t, testCodecs[0], 1000, batchOpts{}, kv{[]byte("k"), []byte("v")})
		b = append(b[:headerSize:headerSize], payload...)
		b[offAttributes+1] = src % 5
		be := b[offBatchLength:]
		be[0], be[1], be[2], be[3] = byte((len(b)-12)>>24), byte((len(b)-12)>>16), byte((len(b)-12)>>8), byte(len(b)-12)
		c := crc32.Checksum(b[offAttributes:], castagnoli)
		b[offCRC], b[offCRC+1], b[offCRC+2], b[offCRC+3] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
		out, err := RecompressBatch(b, int(dst%5), int(level)%23, 1<<16, 1<<14, false)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrMissingKey) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		h, err := hotlog.ParseBatchHeader(out)
		if err != nil || h.Size() != int64(len(out)) || crc32.Checksum(out[offAttributes:], castagnoli) != h.CRC || (len(out) > 1<<14 && h.Compression() != int(src%5)) {
			t.Fatalf("not a whole batch with a right CRC: %v", err)
		}
		if h.Compression() != codecNone {
			if err := CheckRecords(out, 1<<20); err != nil {
				t.Fatalf("the output's records: %v", err)
			}
		}
	})
}
