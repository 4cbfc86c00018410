package tiering

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/objectstore"
)

// ManifestFormat is the manifest encoding this package writes. Decoders
// refuse other formats (a newer writer must bump it).
const ManifestFormat = 1

// Limits that a decoded manifest must respect (a manifest is read from the
// bucket: nothing in it is trusted).
const (
	maxManifestBytes   = 64 << 20
	maxManifestEntries = 1 << 20
	maxChunksPerSeg    = 1 << 16
	maxEpochsPerSeg    = 1 << 16
	maxTxnIndexBytes   = 64 << 20
)

// Manifest lists a partition's remote segments. Each version is a new object
// (never overwritten); the metadata log points at the current one.
type Manifest struct {
	Format      int    `json:"format"`
	Topic       string `json:"topic"`
	TopicID     string `json:"topic_id"` // 32 hex digits
	Partition   int32  `json:"partition"`
	Version     int64  `json:"version"`      // the version this manifest is (committed as)
	LeaderEpoch int32  `json:"leader_epoch"` // the epoch of the leader that wrote it
	// StartOffset is the remote log start (the first offset readers may
	// ask for); EndOffset the offset after the last remote record. Both are
	// 0 in an empty first manifest; an empty manifest after retention has
	// StartOffset == EndOffset.
	StartOffset int64         `json:"start_offset"`
	EndOffset   int64         `json:"end_offset"`
	CreatedMs   int64         `json:"created_ms"`
	Segments    []SegmentMeta `json:"segments"`
	// CleanedUpTo is tiered compaction's checkpoint: the remote log below
	// it has been compacted (0: never).
	CleanedUpTo int64 `json:"cleaned_up_to,omitempty"`
	// Retired lists segments that compaction replaced, no longer read by
	// new readers but kept in the bucket for readers in flight until
	// RetiredMs + the orphan grace (ReplaceSegments, CleanOrphans).
	Retired []RetiredSegment `json:"retired,omitempty"`
}

// SegmentMeta describes one uploaded segment.
type SegmentMeta struct {
	// Stem is the key of the segment's objects without their suffix.
	Stem string `json:"stem"`
	// BaseOffset is the first batch's base offset; EndOffset the offset
	// after the last batch's last record (exclusive).
	BaseOffset int64 `json:"base_offset"`
	EndOffset  int64 `json:"end_offset"`
	// Size is the .log object's size, CRC32C the Castagnoli CRC of all of it.
	Size   int64  `json:"size"`
	CRC32C uint32 `json:"crc32c"`
	// ChunkSize and ChunkCRC32C: the CRC32C of each ChunkSize-aligned range
	// of the .log object (the last may be short), as 8 hex digits each.
	ChunkSize   int64  `json:"chunk_size"`
	ChunkCRC32C string `json:"chunk_crc32c"`
	// MaxTimestamp is the largest batch max timestamp (-1 if none).
	MaxTimestamp int64 `json:"max_timestamp"`
	// LeaderEpochs are the leader epochs of the segment's batches with the
	// first offset of each, ascending.
	LeaderEpochs []EpochStart `json:"leader_epochs"`
	// Sizes of the companion objects (0: absent).
	IndexSize     int64 `json:"index_size"`
	TimeIndexSize int64 `json:"time_index_size"`
	SnapshotSize  int64 `json:"snapshot_size"`
	EpochsSize    int64 `json:"epochs_size"`
	// TxnIndexSize is the size of the segment's aborted-transaction index
	// (hotlog's .txnindex format), absent when it has none.
	TxnIndexSize int64 `json:"txn_index_size,omitempty"`
	// UploadEpoch is the epoch of the leader that uploaded it.
	UploadEpoch int32 `json:"upload_epoch"`
	UploadedMs  int64 `json:"uploaded_ms"`
}

// EpochStart is one leader epoch and the first offset written in it.
type EpochStart struct {
	Epoch       int32 `json:"epoch"`
	StartOffset int64 `json:"start_offset"`
}

// chunkCRC returns the CRC32C of chunk i.
func (s *SegmentMeta) chunkCRC(i int) (uint32, bool) {
	if i < 0 || 8*i+8 > len(s.ChunkCRC32C) {
		return 0, false
	}
	var b [4]byte
	if _, err := hex.Decode(b[:], []byte(s.ChunkCRC32C[8*i:8*i+8])); err != nil {
		return 0, false
	}
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), true
}

// numChunks is how many chunks the .log object has.
func (s *SegmentMeta) numChunks() int {
	return int((s.Size + s.ChunkSize - 1) / s.ChunkSize)
}

// Keys returns the keys of every object of the segment.
func (s *SegmentMeta) Keys() []string {
	keys := []string{s.Stem + SuffixLog}
	for _, c := range []struct {
		size   int64
		suffix string
	}{{s.IndexSize, SuffixIndex}, {s.TimeIndexSize, SuffixTimeIndex}, {s.SnapshotSize, SuffixSnapshot}, {s.EpochsSize, SuffixEpochs}, {s.TxnIndexSize, SuffixTxnIndex}} {
		if c.size > 0 {
			keys = append(keys, s.Stem+c.suffix)
		}
	}
	return keys
}

// Encode returns the manifest's JSON encoding.
func (m *Manifest) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return json.MarshalIndent(m, "", " ")
}

// DecodeManifest decodes and validates a manifest read from the bucket.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > maxManifestBytes {
		return nil, fmt.Errorf("%w: manifest of %d bytes", ErrCorruptObject, len(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrCorruptObject, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: manifest: trailing data", ErrCorruptObject)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks the manifest's invariants: the format, sane offsets and
// sizes, segments in strictly increasing end-offset order inside
// [StartOffset, EndOffset], keys that belong to the partition.
func (m *Manifest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: manifest %s: %s", ErrCorruptObject, m.TopicID, fmt.Sprintf(format, args...))
	}
	if m.Format != ManifestFormat {
		return bad("format %d, want %d", m.Format, ManifestFormat)
	}
	id, err := hex.DecodeString(m.TopicID)
	if err != nil || len(id) != 16 {
		return bad("topic id %q", m.TopicID)
	}
	var topicID [16]byte
	copy(topicID[:], id)
	if m.Partition < 0 || m.Version < 0 {
		return bad("partition %d version %d", m.Partition, m.Version)
	}
	if m.StartOffset < 0 || m.EndOffset < m.StartOffset {
		return bad("offsets [%d, %d)", m.StartOffset, m.EndOffset)
	}
	if len(m.Segments) > maxManifestEntries {
		return bad("%d segments", len(m.Segments))
	}
	prefix := PartitionPrefix(topicID, m.Partition)
	if m.CleanedUpTo < 0 || m.CleanedUpTo > m.EndOffset {
		return bad("cleaned up to %d", m.CleanedUpTo)
	}
	if len(m.Retired) > maxManifestEntries {
		return bad("%d retired segments", len(m.Retired))
	}
	for i, r := range m.Retired {
		k, err := ParseKey(r.Stem + SuffixLog)
		if err != nil || k.Kind != 's' || k.Stem != r.Stem || r.Stem[:len(prefix)] != prefix {
			return bad("retired segment %d: stem %q", i, r.Stem)
		}
	}
	prevEnd := int64(-1)
	for i := range m.Segments {
		s := &m.Segments[i]
		switch {
		case s.BaseOffset < 0 || s.EndOffset <= s.BaseOffset:
			return bad("segment %d: offsets [%d, %d)", i, s.BaseOffset, s.EndOffset)
		case s.EndOffset <= prevEnd:
			return bad("segment %d: end %d not after %d", i, s.EndOffset, prevEnd)
		case s.EndOffset <= m.StartOffset || s.EndOffset > m.EndOffset:
			return bad("segment %d: end %d outside (%d, %d]", i, s.EndOffset, m.StartOffset, m.EndOffset)
		case s.Size <= 0 || s.Size > 1<<40:
			return bad("segment %d: size %d", i, s.Size)
		case s.ChunkSize <= 0 || s.ChunkSize > 1<<30 || (s.Size+s.ChunkSize-1)/s.ChunkSize > maxChunksPerSeg:
			return bad("segment %d: chunk size %d", i, s.ChunkSize)
		case int64(len(s.ChunkCRC32C)) != 8*((s.Size+s.ChunkSize-1)/s.ChunkSize):
			return bad("segment %d: %d chunk CRC digits", i, len(s.ChunkCRC32C))
		case s.IndexSize < 0 || s.IndexSize%8 != 0 || s.IndexSize > 1<<30:
			return bad("segment %d: index size %d", i, s.IndexSize)
		case s.TimeIndexSize < 0 || s.TimeIndexSize%12 != 0 || s.TimeIndexSize > 1<<30:
			return bad("segment %d: time index size %d", i, s.TimeIndexSize)
		case s.SnapshotSize < 0 || s.SnapshotSize > 1<<30 || s.EpochsSize < 0 || s.EpochsSize > 1<<20:
			return bad("segment %d: companion sizes", i)
		case s.TxnIndexSize < 0 || s.TxnIndexSize%hotlog.TxnIndexEntrySize != 0 || s.TxnIndexSize > maxTxnIndexBytes:
			return bad("segment %d: transaction index size %d", i, s.TxnIndexSize)
		case len(s.LeaderEpochs) > maxEpochsPerSeg:
			return bad("segment %d: %d epochs", i, len(s.LeaderEpochs))
		}
		if _, err := hex.DecodeString(s.ChunkCRC32C); err != nil {
			return bad("segment %d: chunk CRCs", i)
		}
		k, err := ParseKey(s.Stem + SuffixLog)
		if err != nil || k.Kind != 's' || k.Stem != s.Stem || s.Stem[:len(prefix)] != prefix {
			return bad("segment %d: stem %q", i, s.Stem)
		}
		for j, e := range s.LeaderEpochs {
			if e.StartOffset < s.BaseOffset || e.StartOffset >= s.EndOffset ||
				(j > 0 && (e.Epoch <= s.LeaderEpochs[j-1].Epoch || e.StartOffset <= s.LeaderEpochs[j-1].StartOffset)) {
				return bad("segment %d: leader epochs", i)
			}
		}
		prevEnd = s.EndOffset
	}
	return nil
}

// find returns the index of the segment that holds offset (the first whose
// EndOffset is above it), or -1.
func (m *Manifest) find(offset int64) int {
	i := sort.Search(len(m.Segments), func(i int) bool { return m.Segments[i].EndOffset > offset })
	if i == len(m.Segments) {
		return -1
	}
	return i
}

// clone returns a copy whose Segments slice may be changed.
func (m *Manifest) clone() *Manifest {
	c := *m
	c.Segments = append([]SegmentMeta(nil), m.Segments...)
	c.Retired = append([]RetiredSegment(nil), m.Retired...)
	return &c
}

// Size is the .log bytes of the segments in the manifest.
func (m *Manifest) Size() int64 {
	var n int64
	for i := range m.Segments {
		n += m.Segments[i].Size
	}
	return n
}

// LatestManifest finds a partition's newest manifest from the bucket alone
// (prefix from its descriptor): the highest version, then the highest
// leader epoch. Without the metadata log's pointer this may be a manifest
// written just before a crash and never committed; it references only
// complete uploads, so its data is whole.
func LatestManifest(ctx context.Context, store objectstore.Store, prefix string) (*Manifest, error) {
	list, err := store.List(ctx, prefix+"m/", "")
	if err != nil {
		return nil, err
	}
	var best ParsedKey
	found := false
	for _, o := range list.Objects {
		k, err := ParseKey(o.Key)
		if err != nil || k.Kind != 'm' {
			continue
		}
		if !found || k.Number > best.Number || (k.Number == best.Number && k.Epoch > best.Epoch) {
			best, found = k, true
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: no manifest under %s", ErrOffsetOutOfRange, prefix)
	}
	b, err := objectstore.ReadAll(ctx, store, best.Stem+best.Suffix, maxManifestBytes)
	if err != nil {
		return nil, err
	}
	return DecodeManifest(b)
}

// ReadDescriptor reads a partition descriptor.
func ReadDescriptor(ctx context.Context, store objectstore.Store, key string) (*PartitionDescriptor, error) {
	b, err := objectstore.ReadAll(ctx, store, key, 1<<20)
	if err != nil {
		return nil, err
	}
	var d PartitionDescriptor
	if err := json.Unmarshal(b, &d); err != nil || d.Format != 1 {
		return nil, fmt.Errorf("%w: descriptor %s", ErrCorruptObject, key)
	}
	return &d, nil
}
