package tiering

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"sync"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/objectstore"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// upload puts the sealed segments wholly below the high watermark (and the
// LSO) that the remote log does not hold yet, then commits one manifest
// that adds them. A segment partly uploaded is never in a manifest: its
// objects stay orphans until the cleaner removes them.
func (p *Partition) upload(ctx context.Context, epoch int32, st *remoteState) (*remoteState, error) {
	limit := p.log.HighWatermark()
	if p.lso != nil {
		limit = min(limit, p.lso())
	}
	from := st.manifest.EndOffset
	if len(st.manifest.Segments) == 0 && st.ptr.ManifestVersion == 0 {
		from = -1
	}
	// Nothing below the log start goes up (Kafka's copy starts at
	// max(copiedOffset+1, logStartOffset)): DeleteRecords (or total
	// retention) may have raised it past the remote end, inside a local
	// segment that is not in the bucket yet. That segment goes up from its
	// batch that holds the log start, as a segment straddling the remote
	// end does.
	logStart := p.log.LogStartOffset()
	from = max(from, logStart)
	remoteEnd := from
	var todo []hotlog.SegmentInfo
	for _, s := range p.log.Segments() {
		if !s.Sealed || s.NextOffset > limit || len(todo) >= p.m.opts.MaxSegmentsPerCommit {
			break
		}
		if s.NextOffset <= from || s.Size == 0 {
			continue
		}
		todo = append(todo, s)
		from = s.NextOffset
	}
	if len(todo) == 0 {
		return st, nil
	}
	if st.ptr.ManifestVersion == 0 {
		if err := p.writeDescriptor(ctx); err != nil {
			return st, err
		}
	}
	// Upload UploadParallelism segments at a time; commit the longest run
	// of complete uploads from the first one.
	metas := make([]SegmentMeta, len(todo))
	errs := make([]error, len(todo))
	sem := make(chan struct{}, p.m.opts.UploadParallelism)
	var wg sync.WaitGroup
	for i := range todo {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			metas[i], errs[i] = p.uploadSegment(ctx, todo[i], epoch, remoteEnd)
		}()
	}
	wg.Wait()
	var added []SegmentMeta
	var uploadErr error
	for i := range todo {
		if errs[i] != nil {
			uploadErr = errs[i]
			break
		}
		added = append(added, metas[i])
	}
	// The leader-epoch checkpoints need the epochs of the earlier segments.
	var puts []func() error
	for i := range added {
		data := epochCheckpoint(st.manifest, added[:i], added[i].LeaderEpochs)
		key := added[i].Stem + SuffixEpochs
		added[i].EpochsSize = int64(len(data))
		puts = append(puts, func() error {
			return objectstore.PutBytes(ctx, p.m.store, key, data, objectstore.CreateOptions{NoOverwrite: true})
		})
	}
	if err := parallel(puts...); err != nil {
		return st, errors.Join(uploadErr, fmt.Errorf("tiering: %s: upload epochs: %w", p.tp, err))
	}
	if len(added) == 0 {
		return st, uploadErr
	}
	nm := st.manifest.clone()
	// A remote log whose segments were all compacted away ([StartOffset,
	// EndOffset) non-empty, no segment, the local log going on from its
	// end) keeps its start: only retention and DeleteRecords move the log
	// start, which they commit themselves (Kafka's cleaner never moves
	// it). Moving it to the new segments' base, as for an emptied remote
	// log, moved a compacted topic's earliest offset up at every upload
	// after such a compaction, and a consumer's committed offset in the
	// compacted range became OFFSET_OUT_OF_RANGE. (EarliestOffset tells
	// the two cases apart in the same way.)
	compactedAway := st.ptr.ManifestVersion > 0 && nm.StartOffset < nm.EndOffset && logStart <= nm.EndOffset
	if len(nm.Segments) == 0 && !compactedAway {
		// The first segments, or the remote log was emptied by retention
		// or DeleteRecords ([X, X)): start where data starts, never below
		// the log start (the first batch may begin below it) nor below a
		// start committed before.
		start := max(added[0].BaseOffset, logStart)
		if st.ptr.ManifestVersion == 0 || nm.StartOffset < start {
			nm.StartOffset = start
		}
	}
	nm.Segments = append(nm.Segments, added...)
	nm.EndOffset = added[len(added)-1].EndOffset
	ns, err := p.commit(ctx, epoch, st, nm)
	if err != nil {
		return st, errors.Join(uploadErr, err)
	}
	for _, a := range added {
		p.m.metrics.SegmentsUploaded.Add(1)
		p.m.metrics.BytesUploaded.Add(a.Size)
	}
	return ns, uploadErr
}

// uploadSegment uploads one sealed segment's objects under a fresh stem.
// A segment that straddles the remote end (remoteEnd inside it: this
// replica rolled its segments elsewhere than the leader that uploaded
// before it) goes up from its first batch at or past remoteEnd, so that no
// offset is twice in the manifest.
func (p *Partition) uploadSegment(ctx context.Context, s hotlog.SegmentInfo, epoch int32, remoteEnd int64) (meta SegmentMeta, err error) {
	defer func() {
		if err != nil {
			p.m.metrics.UploadErrors.Add(1)
			err = fmt.Errorf("tiering: %s: upload segment %d: %w", p.tp, s.BaseOffset, err)
		}
	}()
	f, err := p.fs.Open(s.LogFile)
	if err != nil {
		return meta, err
	}
	defer f.Close()
	start, base := int64(0), s.BaseOffset
	if remoteEnd > s.BaseOffset {
		if start, base, err = batchAt(f, s.Size, remoteEnd); err != nil {
			return meta, err
		}
	}
	stem := segmentStem(p.prefix, base, epoch)
	size := s.Size - start
	w, err := p.m.store.CreateObject(ctx, stem+SuffixLog, objectstore.CreateOptions{NoOverwrite: true, SizeHint: size})
	if err != nil {
		return meta, err
	}
	sc := newSegmentScanner(base, p.m.opts.IndexIntervalBytes, p.m.opts.ChunkSize)
	buf := make([]byte, 1<<20)
	for pos := start; pos < s.Size; {
		n := int64(len(buf))
		if s.Size-pos < n {
			n = s.Size - pos
		}
		if _, err := f.ReadAt(buf[:n], pos); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
			return meta, errors.Join(err, w.Abort())
		}
		if err := sc.write(buf[:n]); err != nil {
			return meta, errors.Join(err, w.Abort())
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return meta, errors.Join(err, w.Abort())
		}
		pos += n
	}
	if err := sc.finish(); err != nil {
		return meta, errors.Join(err, w.Abort())
	}
	if sc.end > s.NextOffset || sc.first < s.BaseOffset {
		return meta, errors.Join(fmt.Errorf("%w: local segment %d holds offsets [%d, %d), past its next segment %d",
			hotlog.ErrCorruptBatch, s.BaseOffset, sc.first, sc.end, s.NextOffset), w.Abort())
	}
	if err := w.Close(); err != nil {
		return meta, errors.Join(err, w.Abort())
	}
	meta = SegmentMeta{
		Stem: stem, BaseOffset: sc.first, EndOffset: s.NextOffset, Size: size, CRC32C: sc.crc,
		ChunkSize: p.m.opts.ChunkSize, ChunkCRC32C: hex.EncodeToString(sc.chunkCRCs), MaxTimestamp: sc.idx.maxTs,
		LeaderEpochs: sc.epochs, UploadEpoch: epoch, UploadedMs: p.m.opts.Now().UnixMilli(),
	}
	// The producer snapshot taken at the segment's end, if the log has it.
	snap, err := vfs.ReadFile(p.fs, filepath.Join(filepath.Dir(s.LogFile), fmt.Sprintf("%020d.snapshot", s.NextOffset)), 256<<20)
	if err != nil && !vfs.IsNotExist(err) {
		return meta, err
	}
	// The aborted-transaction index: read_committed cold reads need it.
	var txns []byte
	if s.TxnIndexFile != "" {
		if txns, err = vfs.ReadFile(p.fs, s.TxnIndexFile, maxTxnIndexBytes); err != nil && !vfs.IsNotExist(err) {
			return meta, err
		}
		entries, err := hotlog.DecodeTxnIndex(txns)
		if err != nil {
			return meta, err
		}
		if n := len(entries); n > 0 && (entries[0].LastOffset < s.BaseOffset || entries[n-1].LastOffset >= s.NextOffset) {
			return meta, fmt.Errorf("%w: transaction index of segment %d has markers outside [%d, %d)", hotlog.ErrCorruptBatch, s.BaseOffset, s.BaseOffset, s.NextOffset)
		}
		// Markers below the uploaded part are in the remote segment
		// before it already.
		for len(entries) > 0 && entries[0].LastOffset < sc.first {
			entries = entries[1:]
			txns = txns[hotlog.TxnIndexEntrySize:]
		}
	}
	meta.IndexSize, meta.TimeIndexSize, meta.SnapshotSize = int64(len(sc.idx.offsets)), int64(len(sc.idx.times)), int64(len(snap))
	meta.TxnIndexSize = int64(len(txns))
	put := func(suffix string, data []byte) func() error {
		return func() error {
			if len(data) == 0 {
				return nil
			}
			return objectstore.PutBytes(ctx, p.m.store, stem+suffix, data, objectstore.CreateOptions{NoOverwrite: true})
		}
	}
	return meta, parallel(put(SuffixIndex, sc.idx.offsets), put(SuffixTimeIndex, sc.idx.times), put(SuffixSnapshot, snap), put(SuffixTxnIndex, txns))
}

// batchAt finds, by walking the batch headers of a local segment file of
// size bytes, the first batch that holds offset (or, past it, the first
// batch after it): its byte position and base offset.
func batchAt(f vfs.File, size, offset int64) (pos, base int64, err error) {
	var hdr [hotlog.BatchHeaderSize]byte
	for pos < size {
		if size-pos < hotlog.BatchHeaderSize {
			break
		}
		if _, err := f.ReadAt(hdr[:], pos); err != nil {
			return 0, 0, err
		}
		h, err := hotlog.ParseBatchHeader(hdr[:])
		if err != nil {
			return 0, 0, fmt.Errorf("batch header at %d: %w", pos, err)
		}
		if h.Size() < hotlog.BatchHeaderSize {
			return 0, 0, fmt.Errorf("%w: batch at %d of %d bytes", hotlog.ErrCorruptBatch, pos, h.Size())
		}
		if h.LastOffset() >= offset {
			return pos, h.BaseOffset, nil
		}
		pos += h.Size()
	}
	return 0, 0, fmt.Errorf("%w: no batch at or past offset %d in a segment of %d bytes", hotlog.ErrCorruptBatch, offset, size)
}

// parallel runs fns at once and returns their errors joined.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// epochCheckpoint renders the leader-epoch history up to the segment's end in
// Kafka's checkpoint text format ("0\n<count>\n<epoch> <startOffset>\n…").
func epochCheckpoint(m *Manifest, pending []SegmentMeta, last []EpochStart) []byte {
	var all []EpochStart
	addAll := func(es []EpochStart) {
		for _, e := range es {
			if n := len(all); n == 0 || e.Epoch > all[n-1].Epoch {
				all = append(all, e)
			}
		}
	}
	for i := range m.Segments {
		addAll(m.Segments[i].LeaderEpochs)
	}
	for i := range pending {
		addAll(pending[i].LeaderEpochs)
	}
	addAll(last)
	out := fmt.Appendf(nil, "0\n%d\n", len(all))
	for _, e := range all {
		out = fmt.Appendf(out, "%d %d\n", e.Epoch, e.StartOffset)
	}
	return out
}

// segmentScanner checks a segment's bytes as they stream to the bucket:
// every batch header and CRC-32C, offsets increasing, and computes the
// object's and each chunk's CRC32C, the indexes and the leader epochs.
type segmentScanner struct {
	pos       int64 // bytes seen
	hdr       [hotlog.BatchHeaderSize]byte
	hdrN      int
	h         hotlog.BatchHeader
	remaining int64 // body bytes of the current batch still to come
	batchCRC  uint32
	batchPos  int64

	first, end int64 // first base offset, offset after the last record
	epochs     []EpochStart
	idx        *indexBuilder

	crc       uint32
	chunkSize int64
	chunkCRC  uint32
	chunkCRCs []byte
}

func newSegmentScanner(base, interval, chunkSize int64) *segmentScanner {
	return &segmentScanner{first: -1, end: base, idx: newIndexBuilder(base, interval), chunkSize: chunkSize}
}

func (sc *segmentScanner) write(p []byte) error {
	sc.crc = crc32.Update(sc.crc, castagnoli, p)
	for q := p; len(q) > 0; {
		room := sc.chunkSize - sc.pos%sc.chunkSize
		n := min(int64(len(q)), room)
		sc.chunkCRC = crc32.Update(sc.chunkCRC, castagnoli, q[:n])
		if n == room {
			sc.chunkCRCs = binary.BigEndian.AppendUint32(sc.chunkCRCs, sc.chunkCRC)
			sc.chunkCRC = 0
		}
		sc.pos += n
		q = q[n:]
	}
	return sc.batches(p)
}

// batches follows the batch framing through p (the next bytes).
func (sc *segmentScanner) batches(p []byte) error {
	for len(p) > 0 {
		if sc.remaining == 0 {
			n := copy(sc.hdr[sc.hdrN:], p)
			sc.hdrN += n
			p = p[n:]
			if sc.hdrN < len(sc.hdr) {
				return nil
			}
			h, err := hotlog.ParseBatchHeader(sc.hdr[:])
			if err != nil {
				return err
			}
			if h.BaseOffset < sc.end || h.LastOffsetDelta < 0 {
				return fmt.Errorf("%w: batch at %d has offset %d, expected at least %d", hotlog.ErrCorruptBatch, sc.batchPos, h.BaseOffset, sc.end)
			}
			sc.h = h
			sc.remaining = h.Size() - hotlog.BatchHeaderSize
			sc.batchCRC = crc32.Update(0, castagnoli, sc.hdr[21:])
			sc.idx.add(h.BaseOffset, h.MaxTimestamp, sc.batchPos, h.Size())
			if sc.first < 0 {
				sc.first = h.BaseOffset
			}
			sc.end = h.LastOffset() + 1
			if n := len(sc.epochs); h.PartitionLeaderEpoch >= 0 && (n == 0 || h.PartitionLeaderEpoch > sc.epochs[n-1].Epoch) {
				sc.epochs = append(sc.epochs, EpochStart{Epoch: h.PartitionLeaderEpoch, StartOffset: h.BaseOffset})
			}
			if sc.remaining == 0 {
				if err := sc.endBatch(); err != nil {
					return err
				}
			}
			continue
		}
		n := min(int64(len(p)), sc.remaining)
		sc.batchCRC = crc32.Update(sc.batchCRC, castagnoli, p[:n])
		sc.remaining -= n
		p = p[n:]
		if sc.remaining == 0 {
			if err := sc.endBatch(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (sc *segmentScanner) endBatch() error {
	if sc.batchCRC != sc.h.CRC {
		return fmt.Errorf("%w: batch at %d: CRC %08x, header says %08x", hotlog.ErrCorruptBatch, sc.batchPos, sc.batchCRC, sc.h.CRC)
	}
	sc.batchPos += sc.h.Size()
	sc.hdrN = 0
	return nil
}

func (sc *segmentScanner) finish() error {
	if sc.hdrN != 0 || sc.remaining != 0 {
		return fmt.Errorf("%w: segment ends inside a batch", hotlog.ErrCorruptBatch)
	}
	if sc.first < 0 {
		return fmt.Errorf("%w: segment holds no batch", hotlog.ErrCorruptBatch)
	}
	if sc.pos%sc.chunkSize != 0 {
		sc.chunkCRCs = binary.BigEndian.AppendUint32(sc.chunkCRCs, sc.chunkCRC)
	}
	sc.idx.finish()
	return nil
}

// PartitionDescriptor is the object "topics/<topic-id>/<partition:010d>.partition"
// written (once, never overwritten) before a partition's first manifest, so
// that a tool listing the bucket finds every topic and partition and the key
// prefix of its objects.
type PartitionDescriptor struct {
	Format    int    `json:"format"`
	Topic     string `json:"topic"`
	TopicID   string `json:"topic_id"`
	Partition int32  `json:"partition"`
	Prefix    string `json:"prefix"`
	CreatedMs int64  `json:"created_ms"`
}

// DescriptorKey is the key of a partition's descriptor.
func DescriptorKey(topicID [16]byte, partition int32) string {
	return fmt.Sprintf("%s%010d.partition", TopicPrefix(topicID), partition)
}

func (p *Partition) writeDescriptor(ctx context.Context) error {
	d := PartitionDescriptor{Format: 1, Topic: p.tp.Topic, TopicID: p.tp.TopicIDString(), Partition: p.tp.Partition,
		Prefix: p.prefix, CreatedMs: p.m.opts.Now().UnixMilli()}
	b, _ := json.Marshal(d)
	err := objectstore.PutBytes(ctx, p.m.store, DescriptorKey(p.tp.TopicID, p.tp.Partition), b, objectstore.CreateOptions{NoOverwrite: true})
	if err != nil && !errors.Is(err, objectstore.ErrExists) {
		return fmt.Errorf("tiering: %s: write descriptor: %w", p.tp, err)
	}
	return nil
}
