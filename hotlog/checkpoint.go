package hotlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sediment-io/sediment/internal/vfs"
)

// epochEntry says that leader epoch Epoch began at offset Start.
type epochEntry struct {
	Epoch int32
	Start int64
}

const maxCheckpointBytes = 16 << 20

// encodeEpochs writes Kafka's leader-epoch-checkpoint text format:
//
//	0                 (version)
//	N                 (entries)
//	<epoch> <start>   (N lines, ascending)
func encodeEpochs(entries []epochEntry) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "0\n%d\n", len(entries))
	for _, e := range entries {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.Start)
	}
	return b.Bytes()
}

func decodeEpochs(data []byte) ([]epochEntry, error) {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) < 2 || lines[0] != "0" {
		return nil, fmt.Errorf("hotlog: bad leader-epoch-checkpoint header")
	}
	n, err := strconv.Atoi(lines[1])
	if err != nil || n < 0 || n != len(lines)-2 {
		return nil, fmt.Errorf("hotlog: bad leader-epoch-checkpoint count")
	}
	entries := make([]epochEntry, 0, n)
	for _, line := range lines[2:] {
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("hotlog: bad leader-epoch-checkpoint line %q", line)
		}
		e, err1 := strconv.ParseInt(f[0], 10, 32)
		s, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || e < 0 || s < 0 {
			return nil, fmt.Errorf("hotlog: bad leader-epoch-checkpoint line %q", line)
		}
		if k := len(entries); k > 0 && (int32(e) <= entries[k-1].Epoch || s < entries[k-1].Start) {
			return nil, fmt.Errorf("hotlog: leader-epoch-checkpoint out of order")
		}
		entries = append(entries, epochEntry{int32(e), s})
	}
	return entries, nil
}

// assignEpoch returns entries with epoch starting at start: entries of later
// epochs or later starts are dropped (they were on a diverged tail).
func assignEpoch(entries []epochEntry, epoch int32, start int64) ([]epochEntry, bool) {
	if epoch < 0 {
		return entries, false // no epoch (-1): nothing to record
	}
	if k := len(entries); k > 0 && entries[k-1].Epoch >= epoch {
		return entries, false
	}
	out := make([]epochEntry, 0, len(entries)+1)
	for _, e := range entries {
		if e.Start < start && e.Epoch < epoch {
			out = append(out, e)
		}
	}
	return append(out, epochEntry{epoch, start}), true
}

// truncateEpochsFromEnd drops entries that start at or after end.
func truncateEpochsFromEnd(entries []epochEntry, end int64) ([]epochEntry, bool) {
	i := len(entries)
	for i > 0 && entries[i-1].Start >= end {
		i--
	}
	if i == len(entries) {
		return entries, false
	}
	return append([]epochEntry(nil), entries[:i]...), true
}

// truncateEpochsFromStart keeps the last entry that starts below start
// (moved up to start) and everything after it, as Kafka does.
func truncateEpochsFromStart(entries []epochEntry, start int64) ([]epochEntry, bool) {
	i := 0
	for i+1 < len(entries) && entries[i+1].Start <= start {
		i++
	}
	if len(entries) == 0 || (i == 0 && entries[0].Start >= start) {
		return entries, false
	}
	out := append([]epochEntry(nil), entries[i:]...)
	if out[0].Start < start {
		out[0].Start = start
	}
	return out, true
}

// endOffsetForEpoch answers OffsetForLeaderEpoch as Kafka's
// LeaderEpochFileCache.endOffsetFor does: (-1, -1) when unknown.
func endOffsetForEpoch(entries []epochEntry, epoch int32, logEnd int64) (int32, int64) {
	if epoch < 0 || len(entries) == 0 {
		return -1, -1
	}
	if entries[len(entries)-1].Epoch == epoch {
		return epoch, logEnd
	}
	// First entry with a higher epoch.
	hi := -1
	for i, e := range entries {
		if e.Epoch > epoch {
			hi = i
			break
		}
	}
	if hi < 0 {
		return -1, -1
	}
	if hi == 0 {
		return epoch, entries[0].Start
	}
	return entries[hi-1].Epoch, entries[hi].Start
}

// The log-start-offset-checkpoint file: "0\n<offset>\n".
func encodeLogStart(offset int64) []byte { return fmt.Appendf(nil, "0\n%d\n", offset) }

func decodeLogStart(data []byte) (int64, error) {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) != 2 || lines[0] != "0" {
		return 0, fmt.Errorf("hotlog: bad log-start-offset-checkpoint")
	}
	v, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("hotlog: bad log-start-offset-checkpoint")
	}
	return v, nil
}

// cleanShutdown is the content of the clean-shutdown marker: what a clean open
// needs to skip the recovery scan of the active segment. Layout (big-endian):
//
//	magic "SDCS" | version uint32 (1) | activeBase int64 | activeSize int64 |
//	logEnd int64 | maxTimestamp int64 | maxTimestampOffset int64 |
//	highWatermark int64 | activeCreated int64 (unix ms, for segment.ms) |
//	crc32c uint32 (of everything before it)
type cleanShutdown struct {
	ActiveBase, ActiveSize, LogEnd, MaxTimestamp, MaxTimestampOffset, HighWatermark, ActiveCreated int64
}

const cleanShutdownSize = 4 + 4 + 7*8 + 4

func (c cleanShutdown) encode() []byte {
	b := make([]byte, 0, cleanShutdownSize)
	b = append(b, "SDCS"...)
	b = binary.BigEndian.AppendUint32(b, 1)
	for _, v := range []int64{c.ActiveBase, c.ActiveSize, c.LogEnd, c.MaxTimestamp, c.MaxTimestampOffset, c.HighWatermark, c.ActiveCreated} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeCleanShutdown(b []byte) (cleanShutdown, bool) {
	if len(b) != cleanShutdownSize || string(b[:4]) != "SDCS" || binary.BigEndian.Uint32(b[4:]) != 1 {
		return cleanShutdown{}, false
	}
	if crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return cleanShutdown{}, false
	}
	v := make([]int64, 7)
	for i := range v {
		v[i] = int64(binary.BigEndian.Uint64(b[8+8*i:]))
	}
	return cleanShutdown{v[0], v[1], v[2], v[3], v[4], v[5], v[6]}, true
}

// Producer snapshot files, <offset>.snapshot (20 digits), layout:
//
//	magic "SDPS" | version uint32 (1) | length uint32 | crc32c uint32 (of data) | data
const snapshotHeaderSize = 16

func encodeSnapshot(data []byte) []byte {
	b := make([]byte, 0, snapshotHeaderSize+len(data))
	b = append(b, "SDPS"...)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(data, castagnoli))
	return append(b, data...)
}

func decodeSnapshot(b []byte) ([]byte, bool) {
	if len(b) < snapshotHeaderSize || string(b[:4]) != "SDPS" || binary.BigEndian.Uint32(b[4:]) != 1 {
		return nil, false
	}
	n := binary.BigEndian.Uint32(b[8:])
	if int64(n) != int64(len(b)-snapshotHeaderSize) {
		return nil, false
	}
	data := b[snapshotHeaderSize:]
	if crc32.Checksum(data, castagnoli) != binary.BigEndian.Uint32(b[12:]) {
		return nil, false
	}
	return data, true
}

func readSmallFile(fs vfs.FS, dir, name string) ([]byte, error) {
	return vfs.ReadFile(fs, filepath.Join(dir, name), maxCheckpointBytes)
}

// DecodeProducerSnapshot returns the producer state held by a producer
// snapshot file's bytes (as tiering uploads them: the .snapshot object),
// checking its header, length and CRC.
func DecodeProducerSnapshot(b []byte) ([]byte, error) {
	data, ok := decodeSnapshot(b)
	if !ok {
		return nil, fmt.Errorf("hotlog: damaged producer snapshot (%d bytes)", len(b))
	}
	return data, nil
}
