package tiering

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// TopicPartition names a partition: the topic's name (for humans and the
// topic descriptor), its 16-byte id (in every key, so that a topic deleted and
// created again under the same name never mixes objects) and the index.
type TopicPartition struct {
	Topic     string
	TopicID   [16]byte
	Partition int32
}

func (tp TopicPartition) String() string {
	return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition)
}

// TopicIDString is the topic id as 32 lower-case hex digits (its form in keys).
func (tp TopicPartition) TopicIDString() string { return hex.EncodeToString(tp.TopicID[:]) }

// PartitionHash is the short hash that starts every key of a partition's
// objects: FNV-1a 32 over the 16 topic-id bytes followed by the partition as
// a big-endian int32, as 8 lower-case hex digits. It spreads partitions over
// S3's per-prefix request limits.
func PartitionHash(topicID [16]byte, partition int32) string {
	h := fnv.New32a()
	h.Write(topicID[:])
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], uint32(partition))
	h.Write(p[:])
	return fmt.Sprintf("%08x", h.Sum32())
}

// PartitionPrefix is the key prefix of every object of a partition:
// "<hash>/<topic-id>/<partition>/".
func PartitionPrefix(topicID [16]byte, partition int32) string {
	return PartitionHash(topicID, partition) + "/" + hex.EncodeToString(topicID[:]) + "/" + strconv.Itoa(int(partition)) + "/"
}

// TopicPrefix is the prefix of a topic's descriptors: "topics/<topic-id>/".
func TopicPrefix(topicID [16]byte) string { return "topics/" + hex.EncodeToString(topicID[:]) + "/" }

// Object suffixes of one uploaded segment. All share one stem.
const (
	SuffixLog       = ".log"
	SuffixIndex     = ".index"
	SuffixTimeIndex = ".timeindex"
	SuffixSnapshot  = ".snapshot"
	SuffixEpochs    = ".epochs"
	SuffixTxnIndex  = ".txnindex"
	SuffixManifest  = ".manifest"
)

// uniqueSuffix returns 16 random hex digits.
func uniqueSuffix() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// segmentStem is "<prefix>s/<base:020d>-e<epoch>-<unique>"; the segment's
// objects are the stem plus a suffix.
func segmentStem(prefix string, base int64, epoch int32) string {
	return fmt.Sprintf("%ss/%020d-e%d-%s", prefix, base, epoch, uniqueSuffix())
}

// manifestKey is "<prefix>m/<version:020d>-e<epoch>-<unique>.manifest".
func manifestKey(prefix string, version int64, epoch int32) string {
	return fmt.Sprintf("%sm/%020d-e%d-%s%s", prefix, version, epoch, uniqueSuffix(), SuffixManifest)
}

// ParsedKey is what a key of a partition's object says about itself.
type ParsedKey struct {
	Hash      string
	TopicID   [16]byte
	Partition int32
	Kind      byte  // 's' (segment object) or 'm' (manifest)
	Number    int64 // base offset (segment) or version (manifest)
	Epoch     int32
	Unique    string
	Suffix    string // ".log", ".index", … or ".manifest"
	Stem      string // the key without Suffix
}

// ParseKey parses a partition object key (see the package documentation).
func ParseKey(key string) (ParsedKey, error) {
	var k ParsedKey
	bad := func(why string) (ParsedKey, error) {
		return ParsedKey{}, fmt.Errorf("%w: key %q: %s", ErrCorruptObject, key, why)
	}
	parts := strings.Split(key, "/")
	if len(parts) != 5 {
		return bad("not <hash>/<topic-id>/<partition>/<kind>/<name>")
	}
	k.Hash = parts[0]
	id, err := hex.DecodeString(parts[1])
	if err != nil || len(id) != 16 {
		return bad("topic id")
	}
	copy(k.TopicID[:], id)
	p, err := strconv.ParseInt(parts[2], 10, 32)
	if err != nil || p < 0 || strconv.Itoa(int(p)) != parts[2] {
		return bad("partition")
	}
	k.Partition = int32(p)
	if PartitionHash(k.TopicID, k.Partition) != k.Hash {
		return bad("hash does not match topic id and partition")
	}
	if len(parts[3]) != 1 || (parts[3] != "s" && parts[3] != "m") {
		return bad("kind")
	}
	k.Kind = parts[3][0]
	name := parts[4]
	dot := strings.IndexByte(name, '.')
	if dot < 0 {
		return bad("no suffix")
	}
	k.Suffix = name[dot:]
	fields := strings.Split(name[:dot], "-")
	if len(fields) != 3 || len(fields[0]) != 20 || len(fields[1]) < 2 || fields[1][0] != 'e' || len(fields[2]) != 16 {
		return bad("name is not <number:020d>-e<epoch>-<unique>")
	}
	if k.Number, err = strconv.ParseInt(fields[0], 10, 64); err != nil || k.Number < 0 {
		return bad("number")
	}
	e, err := strconv.ParseInt(fields[1][1:], 10, 32)
	if err != nil {
		return bad("epoch")
	}
	k.Epoch = int32(e)
	if _, err := hex.DecodeString(fields[2]); err != nil {
		return bad("unique suffix")
	}
	k.Unique = fields[2]
	switch {
	case k.Kind == 'm' && k.Suffix != SuffixManifest,
		k.Kind == 's' && k.Suffix != SuffixLog && k.Suffix != SuffixIndex && k.Suffix != SuffixTimeIndex &&
			k.Suffix != SuffixSnapshot && k.Suffix != SuffixEpochs && k.Suffix != SuffixTxnIndex:
		return bad("suffix " + k.Suffix)
	}
	k.Stem = key[:len(key)-len(k.Suffix)]
	return k, nil
}
