package tiering

import (
	"encoding/binary"
	"testing"
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
