package tiering

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"testing"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/mem"
)

func FuzzDecodeManifest(f *testing.F) {
	e := newEnv(f, envOptions{cfg: localOnlyTail(-1)})
	e.produce(60, 3, 20)
	e.run()
	st := e.p.state.Load()
	good, err := st.manifest.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	// With compaction's fields: a checkpoint and a retired segment.
	withRetired := st.manifest.clone()
	withRetired.CleanedUpTo = withRetired.EndOffset
	withRetired.Retired = []RetiredSegment{{Stem: segmentStem(e.p.prefix, 0, 0), RetiredMs: 1}}
	retired, err := withRetired.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(retired)
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`{"format":2,"segments":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			return
		}
		// A manifest that decodes re-encodes and decodes to the same.
		again, err := m.Encode()
		if err != nil {
			t.Fatalf("valid manifest does not encode: %v", err)
		}
		m2, err := DecodeManifest(again)
		if err != nil || len(m2.Segments) != len(m.Segments) || m2.EndOffset != m.EndOffset {
			t.Fatalf("round trip: %v", err)
		}
		for i := range m.Segments {
			s := &m.Segments[i]
			for c := 0; c < s.numChunks(); c++ {
				if _, ok := s.chunkCRC(c); !ok {
					t.Fatalf("chunk %d CRC missing in a valid manifest", c)
				}
			}
			if got := m.find(s.EndOffset - 1); got < 0 || got > i {
				t.Fatalf("find(%d) = %d, segment %d", s.EndOffset-1, got, i)
			}
		}
	})
}

func FuzzDecodeOffsetIndex(f *testing.F) {
	var good []byte
	for i := 0; i < 4; i++ {
		good = binary.BigEndian.AppendUint32(good, uint32(i*10))
		good = binary.BigEndian.AppendUint32(good, uint32(i*1000))
	}
	f.Add(good, int64(5000), int64(50), int64(25))
	f.Add([]byte{1, 2, 3}, int64(10), int64(10), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, logSize, relLimit, rel int64) {
		x, err := decodeOffsetIndex(b, logSize, relLimit)
		if err != nil {
			return
		}
		pos := x.floor(rel)
		if pos < 0 || (len(x) > 0 && pos >= logSize) {
			t.Fatalf("floor(%d) = %d outside a %d-byte segment", rel, pos, logSize)
		}
	})
}

func FuzzDecodeTimeIndex(f *testing.F) {
	var good []byte
	for i := 0; i < 3; i++ {
		good = binary.BigEndian.AppendUint64(good, uint64(1000+i))
		good = binary.BigEndian.AppendUint32(good, uint32(i))
	}
	f.Add(good, int64(10))
	f.Fuzz(func(t *testing.T, b []byte, relLimit int64) {
		x, err := decodeTimeIndex(b, relLimit)
		if err == nil && len(x) != len(b)/12 {
			t.Fatal("entries lost")
		}
	})
}

func FuzzParseKey(f *testing.F) {
	f.Add(segmentStem(PartitionPrefix(testTP.TopicID, 3), 42, 7) + SuffixLog)
	f.Add(manifestKey(PartitionPrefix(testTP.TopicID, 3), 9, 7))
	f.Add("a/b/c/d/e.log")
	f.Fuzz(func(t *testing.T, key string) {
		k, err := ParseKey(key)
		if err != nil {
			return
		}
		if k.Stem+k.Suffix != key || PartitionHash(k.TopicID, k.Partition) != k.Hash {
			t.Fatalf("parse %q: %+v", key, k)
		}
	})
}

// FuzzRemoteRead serves reads from a segment object holding arbitrary bytes
// (with chunk checksums that match them, so they reach the cache): a read
// never panics and returns only whole batches whose CRC-32C holds.
func FuzzRemoteRead(f *testing.F) {
	// The fuzzed bytes are the object and its manifest CRCs are computed
	// over them, so a fresh chunk passes its chunk check however broken its
	// batches are (in the broker, uploads come from a validated log). Every
	// read re-checks its batches here (RecheckAfter -1), the path this
	// target is about.
	e := newEnv(f, envOptions{store: mem.New(nil), cfg: localOnlyTail(-1), chunkSize: 4096, recheckAfter: -1})
	good := append(makeBatch(3, 50, 1, 1), makeBatch(2, 5000, 2, 2)...)
	binary.BigEndian.PutUint64(good[len(good)-len(makeBatch(2, 5000, 2, 2)):], 3)
	f.Add(good, int64(0), int64(100))
	f.Add(good, int64(3), int64(1))
	f.Add([]byte("not a batch at all"), int64(0), int64(10))
	f.Fuzz(func(t *testing.T, data []byte, offset, maxBytes int64) { remoteReadBody(t, e, data, offset, maxBytes) })
}

func remoteReadBody(t *testing.T, e *env, data []byte, offset, maxBytes int64) {
	ctx := context.Background()
	prefix := PartitionPrefix(testTP.TopicID, testTP.Partition)
	{
		if len(data) == 0 || len(data) > 1<<20 {
			return
		}
		offset = max(offset, 0) % 10
		seg := SegmentMeta{Stem: segmentStem(prefix, 0, 5), BaseOffset: 0, EndOffset: 10, Size: int64(len(data)),
			ChunkSize: 4096, MaxTimestamp: -1}
		var crcs []byte
		for off := 0; off < len(data); off += 4096 {
			crcs = binary.BigEndian.AppendUint32(crcs, crc32.Checksum(data[off:min(off+4096, len(data))], castagnoli))
		}
		seg.ChunkCRC32C = hex.EncodeToString(crcs)
		if err := objectstore.PutBytes(ctx, e.store, seg.Stem+SuffixLog, data, objectstore.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		m := &Manifest{Format: ManifestFormat, Topic: testTP.Topic, TopicID: testTP.TopicIDString(), Partition: testTP.Partition,
			StartOffset: 0, EndOffset: 10, Segments: []SegmentMeta{seg}}
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		st := &remoteState{ptr: RemoteLog{ManifestKey: "x", ManifestVersion: 1, EndOffset: 10}, manifest: m}
		res, err := e.p.read(ctx, st, offset, maxBytes, 10)
		if err != nil {
			return
		}
		defer res.Release()
		b, err := res.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		for pos := 0; pos < len(b); {
			h, err := hotlog.ParseBatchHeader(b[pos:])
			if err != nil || pos+int(h.Size()) > len(b) {
				t.Fatalf("served a broken batch at %d: %v", pos, err)
			}
			if crc32.Checksum(b[pos+21:pos+int(h.Size())], castagnoli) != h.CRC {
				t.Fatalf("served a batch failing its CRC at %d", pos)
			}
			pos += int(h.Size())
		}
	}
}
