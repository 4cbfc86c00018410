package hotlog

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/sediment-io/sediment/internal/vfs"
)

// Dump writes a human-readable listing of one hotlog file to w, chosen by its
// suffix: a .log (one line per batch header, with a CRC check), a .index or
// .timeindex or .txnindex (one line per entry), a .snapshot, the leader-epoch checkpoint,
// the log-start checkpoint or the clean-shutdown marker. It is the dump tool
// for the formats of doc.go (the CLI can wire it as `sediment dump FILE`).
func Dump(w io.Writer, fs vfs.FS, path string) error {
	name := strings.TrimSuffix(filepath.Base(path), cleanedSuffix) // a swap's new files dump alike
	switch {
	case strings.HasSuffix(name, logSuffix):
		return dumpLog(w, fs, path)
	case strings.HasSuffix(name, indexSuffix), strings.HasSuffix(name, timeIndexSuffix):
		data, err := vfs.ReadFile(fs, path, maxIndexFileBytes)
		if err != nil {
			return err
		}
		if strings.HasSuffix(name, indexSuffix) {
			if len(data)%offsetIndexEntrySize != 0 {
				fmt.Fprintf(w, "warning: %d bytes is not a whole number of entries\n", len(data))
			}
			x := offsetIndex(data)
			for i := 0; i < x.len(); i++ {
				rel, pos := x.entry(i)
				fmt.Fprintf(w, "relativeOffset=%d position=%d\n", rel, pos)
			}
			return nil
		}
		if len(data)%timeIndexEntrySize != 0 {
			fmt.Fprintf(w, "warning: %d bytes is not a whole number of entries\n", len(data))
		}
		x := timeIndex(data)
		for i := 0; i < x.len(); i++ {
			ts, rel := x.entry(i)
			fmt.Fprintf(w, "timestamp=%d relativeOffset=%d\n", ts, rel)
		}
		return nil
	}
	if strings.HasSuffix(name, txnIndexSuffix) {
		data, err := vfs.ReadFile(fs, path, maxIndexFileBytes)
		if err != nil {
			return err
		}
		entries, n := decodeTxnIndexPrefix(data)
		for _, a := range entries {
			fmt.Fprintf(w, "producerId=%d firstOffset=%d lastOffset=%d lastStableOffset=%d\n", a.ProducerID, a.FirstOffset, a.LastOffset, a.LastStableOffset)
		}
		if n != len(data) {
			fmt.Fprintf(w, "warning: damaged from byte %d of %d\n", n, len(data))
		}
		return nil
	}
	data, err := vfs.ReadFile(fs, path, maxSnapshotBytes)
	if err != nil {
		return err
	}
	switch {
	case strings.HasSuffix(name, snapshotSuffix):
		d, ok := decodeSnapshot(data)
		fmt.Fprintf(w, "producer snapshot: %d bytes of state, intact=%v\n", len(d), ok)
	case name == epochCheckpointFile:
		entries, err := decodeEpochs(data)
		if err != nil {
			return err
		}
		for _, e := range entries {
			fmt.Fprintf(w, "epoch=%d startOffset=%d\n", e.Epoch, e.Start)
		}
	case name == logStartOffsetFile:
		v, err := decodeLogStart(data)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "logStartOffset=%d\n", v)
	case strings.HasSuffix(name, swapSuffix):
		m, ok := decodeSwap(data)
		if !ok {
			return fmt.Errorf("hotlog: damaged swap marker")
		}
		fmt.Fprintf(w, "swap: segments [%d, %d) replaced by %s (%d bytes, crc32c %08x)\n", m.Base, m.End, baseName(m.Base)+logSuffix, m.Size, m.CRC)
	case name == cleanShutdownFile:
		m, ok := decodeCleanShutdown(data)
		if !ok {
			return fmt.Errorf("hotlog: damaged clean-shutdown marker")
		}
		fmt.Fprintf(w, "%+v\n", m)
	default:
		return fmt.Errorf("hotlog: %s is not a hotlog file", name)
	}
	return nil
}

func dumpLog(w io.Writer, fs vfs.FS, path string) error {
	f, err := fs.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	var hbuf [BatchHeaderSize]byte
	crcBuf := make([]byte, 256<<10)
	for pos := int64(0); pos < size; {
		h, err := readHeader(f, pos, size, &hbuf)
		if err != nil {
			fmt.Fprintf(w, "position=%d: %v (stopping)\n", pos, err)
			return nil
		}
		crcOK := checkCRCAt(f, pos, &h, crcBuf) == nil
		fmt.Fprintf(w, "position=%d baseOffset=%d lastOffset=%d size=%d epoch=%d records=%d codec=%d maxTimestamp=%d producerId=%d producerEpoch=%d baseSequence=%d txn=%v control=%v crcOK=%v\n",
			pos, h.BaseOffset, h.LastOffset(), h.Size(), h.PartitionLeaderEpoch, h.NumRecords, h.Compression(),
			h.MaxTimestamp, h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.IsTransactional(), h.IsControl(), crcOK)
		pos += h.Size()
	}
	return nil
}
