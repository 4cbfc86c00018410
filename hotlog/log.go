package hotlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sediment-io/sediment/internal/vfs"
)

// Log is the local log of one partition. All methods are safe for concurrent
// use. Appends (and the other writers: TruncateTo, DeleteBefore, snapshots,
// Close) are serialised by one lock; reads take no lock and see an immutable
// set of segments.
type Log struct {
	fs     vfs.FS
	dir    string
	cfg    atomic.Pointer[Config] // replaced whole by SetConfig; read with config()
	now    func() time.Time
	logger *slog.Logger

	segs     atomic.Pointer[[]*segment] // copy-on-write, sorted by base; the last is active
	logStart atomic.Int64
	logEnd   atomic.Int64
	hw       atomic.Int64
	epochs   atomic.Pointer[[]epochEntry]
	closed   atomic.Bool
	failed   atomic.Pointer[error]
	ioWarned atomic.Int64 // unix nanoseconds of the last ioError log line

	// mu is the append lock. It guards the fields below it and every change
	// of segs, logStart, logEnd and epochs.
	mu            sync.Mutex
	active        *segment
	builder       *indexBuilder // the active segment's indexes
	activeCreated time.Time
	// rewrites counts truncations and segment swaps: a SegmentWriter made
	// before one is refused by ReplaceSegments (its input may have changed).
	rewrites int64

	sync struct {
		mu      sync.Mutex
		cond    *sync.Cond
		written uint64   // bytes appended since open
		synced  uint64   // of which durable
		seg     *segment // the active segment, whose file syncTo fsyncs
		err     error    // a failed fsync: the log has failed
		closed  bool
		syncing bool  // an fsync is running (its caller leads the group)
		count   int64 // fsyncs done by syncTo (benchmarks report the cadence)
		// writtenEnd and syncedEnd are the log end offsets as of written
		// and synced; gen counts resets of them (rolls, truncations), so
		// that an fsync that started before one does not move syncedEnd.
		writtenEnd, syncedEnd int64
		gen                   uint64
	}
	cache        *indexCache
	del          *deleter // removes deleted segments' files (deleter.go)
	rollSnapshot func() []byte
	onDurable    func(end int64)
	onFail       func(err error)
	// kick wakes the background syncer of NoSyncWait appends (started by
	// the first one, under the append lock; stopped by Close).
	kick          chan struct{}
	syncerStarted bool // guarded by mu
	closeCh       chan struct{}
	wg            sync.WaitGroup
}

// AppendOptions tune one Append.
type AppendOptions struct {
	// LeaderEpoch is stamped into every batch's partitionLeaderEpoch.
	LeaderEpoch int32
	// LogAppendTime, if set, sets every batch's timestamp type to
	// LogAppendTime and its max timestamp to now (recomputing the CRC), as
	// Kafka does for message.timestamp.type=LogAppendTime.
	LogAppendTime bool
	// Check, if set, runs under the log's append lock after validation and
	// before the write, with the offset the first batch will get and the
	// headers with their assigned offsets. Returning an error aborts the append
	// (nothing written). The broker uses it for idempotent-producer sequence
	// checks.
	Check func(firstOffset int64, batches []BatchHeader) error
	// Written, if set, runs under the append lock right after the bytes are
	// written (before the flush wait), with the stamped headers, so that the
	// broker can update producer state in log order without a window between
	// Check and its update. It must not call back into the Log.
	Written func(batches []BatchHeader)
	// Aborted, if set, runs under the append lock after Check, with the
	// headers, and returns the transactions that abort markers among them
	// end (each LastOffset one of the appended offsets, in order). They are
	// added to the active segment's transaction index, durably, before the
	// batches are written and before Written runs: a reader that learns of
	// an abort from state updated in Written finds its entry. It must not
	// call back into the Log.
	Aborted func(batches []BatchHeader) []AbortedTxn
	// NoSyncWait returns once the batches are written (in the page cache)
	// instead of after FlushEveryCommit's fsync: the log's background
	// syncer starts that fsync at once (group-committed with every other
	// appender's) and then reports the durable end to Options.OnDurable.
	// For acks=1 and acks=0 produce requests, which Kafka acknowledges
	// without an fsync. The other flush policies do not wait anyway.
	NoSyncWait bool
	// MaxMessageBytes, if positive, is this append's batch size limit
	// instead of Config.MaxMessageBytes: the caller's current value, where
	// the log's config may not have caught up with a change yet (SetConfig
	// comes after a config change, asynchronously).
	MaxMessageBytes int32
}

// AppendResult describes an append.
type AppendResult struct {
	FirstOffset   int64 // base offset of the first batch
	LastOffset    int64 // offset of the last record
	MaxTimestamp  int64 // the largest batch max timestamp
	LogAppendTime int64 // the append time stamped, or -1
	// SyncPending is set when the append returned before the flush
	// policy's fsync (NoSyncWait under FlushEveryCommit): Options.OnDurable
	// reports when it is durable.
	SyncPending bool
}

// Open opens (creating if needed) the partition log in opts.Dir, recovering it
// if it was not closed cleanly. With FlushInterval it starts a background
// syncer, which Close stops.
func Open(opts Options) (*Log, error) {
	if opts.Dir == "" {
		return nil, errors.New("hotlog: Options.Dir is empty")
	}
	l := &Log{
		fs:      opts.FS,
		dir:     filepath.Clean(opts.Dir),
		now:     opts.Now,
		logger:  opts.Logger,
		closeCh: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		cache:   &indexCache{maxBytes: defaultIndexCacheBytes},
	}
	cfg := opts.Config.withDefaults()
	l.cfg.Store(&cfg)
	l.rollSnapshot = opts.RollSnapshot
	l.onDurable = opts.OnDurable
	l.onFail = opts.OnFail
	if l.fs == nil {
		l.fs = vfs.Default
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.logger == nil {
		l.logger = slog.Default()
	}
	l.logger = l.logger.With("log", l.dir)
	l.del = newDeleter(l.fs, l.logger)
	l.sync.cond = sync.NewCond(&l.sync.mu)
	if err := l.open(); err != nil {
		l.releaseAll()
		return nil, err
	}
	if l.config().Flush == FlushInterval {
		l.wg.Add(1)
		go pprof.Do(context.Background(), pprof.Labels("hotlog", "syncer"), func(context.Context) { l.syncLoop() })
	}
	return l, nil
}

// config returns the log's current settings (never modified in place).
func (l *Log) config() *Config { return l.cfg.Load() }

// Config returns the log's current settings, defaults filled in.
func (l *Log) Config() Config { return *l.config() }

// SetConfig changes the settings of an open log, as Kafka applies a topic's
// altered configs without reopening it. Each takes effect at its next use:
// SegmentBytes, SegmentMs and MaxIndexBytes at the roll check of the next
// append (a smaller segment.bytes rolls the active segment at that append if
// it is already larger, never rewrites it); IndexIntervalBytes for the next
// index entry of the active segment and for indexes rebuilt later;
// MaxMessageBytes and the timestamp windows for the next append;
// FileDeleteDelay for the segments deleted after the change. Flush and
// FlushInterval are the broker's, fixed when the log opens: c's are ignored.
// Zero fields take the defaults, as in Options. Safe to call concurrently
// with appends and reads.
func (l *Log) SetConfig(c Config) {
	c = c.withDefaults()
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.config()
	c.Flush, c.FlushInterval = cur.Flush, cur.FlushInterval
	l.cfg.Store(&c)
	if l.builder != nil {
		l.builder.interval = c.IndexIntervalBytes
	}
}

func (l *Log) path(name string) string { return filepath.Join(l.dir, name) }

func (l *Log) open() error {
	if _, err := l.fs.Stat(l.dir); vfs.IsNotExist(err) {
		if err := l.fs.MkdirAll(l.dir, 0o755); err != nil {
			return fmt.Errorf("hotlog: create %s: %w", l.dir, err)
		}
		if err := vfs.SyncDir(l.fs, filepath.Dir(l.dir)); err != nil {
			return fmt.Errorf("hotlog: sync parent of %s: %w", l.dir, err)
		}
	} else if err != nil {
		return err
	}
	// Complete (or roll back) a segment swap a crash interrupted.
	if err := l.recoverSwaps(); err != nil {
		return err
	}
	names, err := l.fs.List(l.dir)
	if err != nil {
		return fmt.Errorf("hotlog: list %s: %w", l.dir, err)
	}
	// Classify the directory's files.
	var bases []int64
	hasLog := map[int64]bool{}
	var others []string // index files and snapshots, checked after
	var clean []byte
	for _, name := range names {
		switch {
		case hasAnySuffix(name, deletedSuffix, tmpSuffix):
			// Leftovers of an interrupted delete, truncate or atomic write.
			if err := l.fs.Remove(l.path(name)); err != nil && !vfs.IsNotExist(err) {
				return err
			}
			continue
		case name == cleanShutdownFile:
			clean, _ = readSmallFile(l.fs, l.dir, name)
			continue
		}
		base, suffix, ok := parseBaseName(name)
		if !ok {
			continue
		}
		if suffix == logSuffix {
			bases = append(bases, base)
			hasLog[base] = true
		} else {
			others = append(others, name)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })

	start := int64(0)
	if data, err := readSmallFile(l.fs, l.dir, logStartOffsetFile); err == nil {
		if v, err := decodeLogStart(data); err == nil {
			start = v
		} else {
			l.logger.Warn("hotlog: ignoring damaged log start checkpoint", "err", err)
		}
	}
	if len(bases) > 0 && bases[0] > start {
		start = bases[0]
	}
	// Segments wholly below the log start were being deleted: finish the job.
	for len(bases) > 1 && bases[1] <= start {
		l.removeSegmentFiles(bases[0])
		delete(hasLog, bases[0])
		bases = bases[1:]
	}
	for _, name := range others {
		base, suffix, _ := parseBaseName(name)
		if isSegmentFile(suffix) && !hasLog[base] {
			l.fs.Remove(l.path(name)) // an index without its log
		}
	}

	// The epoch cache.
	var epochs []epochEntry
	var epochsOnDisk []byte
	if data, err := readSmallFile(l.fs, l.dir, epochCheckpointFile); err == nil {
		epochsOnDisk = data
		if epochs, err = decodeEpochs(data); err != nil {
			l.logger.Warn("hotlog: ignoring damaged leader-epoch checkpoint", "err", err)
			epochs = nil
		}
	}

	if len(bases) == 0 {
		bases = []int64{start}
	}
	hasTxnIndex := map[int64]bool{}
	for _, name := range others {
		if base, suffix, _ := parseBaseName(name); suffix == txnIndexSuffix {
			hasTxnIndex[base] = true
		}
	}
	segs := make([]*segment, len(bases))
	for i, b := range bases {
		segs[i] = newSegment(l.fs, l.dir, b, l.cache)
		if i+1 < len(bases) {
			segs[i].relLimit = bases[i+1] - b
		}
		// Without a .txnindex a segment has no aborted transactions: no
		// read is needed to know it.
		segs[i].txnsLoaded = !hasTxnIndex[b]
	}
	l.segs.Store(&segs)
	active := segs[len(segs)-1]
	f, err := l.fs.OpenForAppend(active.path(logSuffix))
	if err != nil {
		return fmt.Errorf("hotlog: open active segment: %w", err)
	}
	active.file = f
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()

	marker, isClean := decodeCleanShutdown(clean)
	isClean = isClean && marker.ActiveBase == active.base && marker.ActiveSize == size && marker.LogEnd >= active.base
	var b *indexBuilder
	if isClean {
		b = l.loadActiveIndexes(active, size, marker)
	}
	if b == nil {
		if clean != nil {
			l.logger.Warn("hotlog: clean-shutdown marker does not match the log; recovering")
		}
		isClean = false
		var last int32 = -1
		if k := len(epochs); k > 0 {
			last = epochs[k-1].Epoch
		}
		var valid int64
		scanStart := time.Now()
		b, valid, err = scanSegment(f, active.base, size, l.config().IndexIntervalBytes, true, func(h *BatchHeader) {
			if h.PartitionLeaderEpoch > last {
				epochs, _ = assignEpoch(epochs, h.PartitionLeaderEpoch, h.BaseOffset)
				last = h.PartitionLeaderEpoch
			}
		})
		if err != nil {
			return fmt.Errorf("hotlog: recover %s: %w", active.path(logSuffix), err)
		}
		if valid < size {
			l.logger.Warn("hotlog: truncating torn or invalid tail", "segment", active.base, "from", size, "to", valid)
			if err := f.Truncate(valid); err != nil {
				return fmt.Errorf("hotlog: truncate torn tail: %w", err)
			}
		}
		// What the scan found may be only in the page cache: a killed
		// process leaves it there, a power loss after it may not. It is
		// made durable before it counts as synced (syncedEnd) and is
		// answered on (a retried produce found a duplicate, the high
		// watermark), as Kafka does not count recovered data as flushed.
		if err := f.Sync(); err != nil {
			return fmt.Errorf("hotlog: sync recovered segment: %w", err)
		}
		if size > 0 || len(segs) > 1 { // not a new log
			// As Kafka logs the recovery of a log without its clean
			// shutdown file: what a crash (or a power loss) cost.
			l.logger.Info("hotlog: recovered after an unclean shutdown: the active segment scanned",
				"segment", active.base, "bytes", size, "valid", valid, "took", time.Since(scanStart).Round(time.Microsecond))
		}
		// The active segment's index files are rewritten when it seals.
		l.fs.Remove(active.path(indexSuffix))
		l.fs.Remove(active.path(timeIndexSuffix))
	}
	active.size.Store(b.size)
	active.idx, active.tidx, active.maxTs, active.loaded, active.maxTsKnown = b.idx, b.tidx, b.maxTs, true, true
	active.active.Store(true)
	l.active, l.builder, l.activeCreated = active, b, l.now()
	if isClean && marker.ActiveCreated > 0 && time.UnixMilli(marker.ActiveCreated).Before(l.activeCreated) {
		l.activeCreated = time.UnixMilli(marker.ActiveCreated) // segment.ms counts across restarts
	}
	l.logEnd.Store(b.next)
	// Entries are written before their markers: drop those of a lost tail
	// (and a torn last entry).
	if err := l.cutTxnsLocked(active, b.next); err != nil {
		return fmt.Errorf("hotlog: recover transaction index: %w", err)
	}
	// A log start checkpoint past the recovered end: the records up to it
	// were deleted (DeleteRecords, a follower's restart at the leader's
	// start) but a crash lost the unsynced tail below it. As Kafka's
	// LogLoader (deleteSegmentsIfLogStartGreaterThanLogEnd), the log
	// restarts empty at the checkpoint once open, so no offset below it is
	// handed out again to be hidden by the next open.
	restartAt := int64(-1)
	if start > b.next {
		restartAt, start = start, b.next
	}
	l.logStart.Store(start)
	hw := start
	if isClean && marker.HighWatermark > hw && marker.HighWatermark <= b.next {
		hw = marker.HighWatermark
	}
	l.hw.Store(hw)

	// Epochs past the end belong to a lost tail, and those below the log
	// start to deleted data (a crash between the log start checkpoint and
	// the epoch checkpoint), as Kafka's LogLoader truncates the cache from
	// the start checkpoint on every load.
	epochs, changed := truncateEpochsFromEnd(epochs, b.next)
	epochs, fromStart := truncateEpochsFromStart(epochs, start)
	if !isClean || fromStart {
		changed = true
	}
	l.epochs.Store(&epochs)
	// Not rewritten when it already says the same: on a full disk the
	// write failed and the partition could not open at all after an
	// unclean stop (an operator review).
	if data := encodeEpochs(epochs); changed && !bytes.Equal(data, epochsOnDisk) {
		if err := vfs.WriteFileAtomic(l.fs, l.path(epochCheckpointFile), data); err != nil {
			return fmt.Errorf("hotlog: write leader-epoch checkpoint: %w", err)
		}
	}
	// Producer snapshots past the end describe a lost tail.
	for _, name := range others {
		if base, suffix, _ := parseBaseName(name); suffix == snapshotSuffix && base > b.next {
			l.fs.Remove(l.path(name))
		}
	}
	// From here on a crash is an unclean stop.
	if clean != nil {
		if err := l.fs.Remove(l.path(cleanShutdownFile)); err != nil && !vfs.IsNotExist(err) {
			return err
		}
	}
	if err := vfs.SyncDir(l.fs, l.dir); err != nil {
		return fmt.Errorf("hotlog: sync %s: %w", l.dir, err)
	}
	l.sync.seg = active
	l.sync.writtenEnd, l.sync.syncedEnd = l.logEnd.Load(), l.logEnd.Load()
	if restartAt >= 0 {
		l.logger.Warn("hotlog: log start checkpoint past the recovered log end; restarting the log empty at it",
			"log_start", restartAt, "log_end", b.next)
		return l.truncateFullyLocked(restartAt, -1, nil)
	}
	return nil
}

// loadActiveIndexes rebuilds the active segment's index state from its files
// after a clean shutdown, or returns nil if they do not check out.
func (l *Log) loadActiveIndexes(active *segment, size int64, m cleanShutdown) *indexBuilder {
	idx, ierr := vfs.ReadFile(l.fs, active.path(indexSuffix), maxIndexFileBytes)
	tidx, terr := vfs.ReadFile(l.fs, active.path(timeIndexSuffix), maxIndexFileBytes)
	if ierr != nil || terr != nil || !validOffsetIndex(idx, size, m.LogEnd-active.base) || !validTimeIndex(tidx, m.LogEnd-active.base) {
		return nil
	}
	b := newIndexBuilder(active.base, l.config().IndexIntervalBytes)
	b.idx, b.tidx = idx, tidx
	b.maxTs, b.maxTsOffset = m.MaxTimestamp, m.MaxTimestampOffset
	if ts, _, ok := timeIndex(tidx).last(); ok {
		b.lastIndexedTs = ts
	}
	b.size, b.next = size, m.LogEnd
	if n := offsetIndex(idx).len(); n > 0 {
		_, pos := offsetIndex(idx).entry(n - 1)
		b.sinceLast = size - int64(pos)
	} else {
		b.sinceLast = size
	}
	return b
}

func (l *Log) removeSegmentFiles(base int64) {
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, txnIndexSuffix} {
		l.fs.Remove(l.path(baseName(base) + suf))
	}
}

// releaseAll drops the log's reference to every segment (files are closed when
// readers let go too).
func (l *Log) releaseAll() {
	if p := l.segs.Load(); p != nil {
		for _, s := range *p {
			s.unref()
		}
	}
}

func (l *Log) failure() error {
	if p := l.failed.Load(); p != nil {
		return fmt.Errorf("%w: %v", ErrLogFailed, *p)
	}
	return nil
}

// fail marks the log failed (the first error sticks) and returns err wrapped
// with ErrLogFailed.
func (l *Log) fail(err error) error {
	if l.failed.CompareAndSwap(nil, &err) {
		l.logger.Error("hotlog: log failed; appends refused until reopened", "err", err)
		if l.onFail != nil {
			l.onFail(err)
		}
	}
	return fmt.Errorf("%w: %w", ErrLogFailed, err)
}

// ioError wraps err, an I/O error the append took back, with ErrIO (an
// ErrLogFailed stays as it is), and logs it at most every 10 s per log: a
// full disk fails every append until space is freed.
func (l *Log) ioError(err error) error {
	if errors.Is(err, ErrLogFailed) {
		return err
	}
	now := l.now().UnixNano()
	if last := l.ioWarned.Load(); now-last >= int64(10*time.Second) && l.ioWarned.CompareAndSwap(last, now) {
		l.logger.Warn("hotlog: append refused after an I/O error (the log is unchanged; appends are retried)", "err", err)
	}
	return fmt.Errorf("%w: %w", ErrIO, err)
}

// Append validates one or more concatenated v2 batches (a Produce partition's
// records), assigns offsets from the log end, stamps base offset and leader
// epoch into records in place (both outside the CRC), writes them, and returns
// after the flush policy is met (FlushEveryCommit: one fsync serves every
// appender waiting on it). On error nothing was appended, except that an
// ErrLogFailed after the write means durability is unknown.
func (l *Log) Append(records []byte, opts AppendOptions) (AppendResult, error) {
	hdrs, err := ValidateBatches(records)
	if err != nil {
		return AppendResult{}, err
	}
	return l.append(records, hdrs, &opts, false)
}

// AppendReplicated appends batches that already carry their offsets and
// leader epochs (the follower path). It validates them with
// ValidateReplicatedBatches (compacted batches pass); the batches must start
// at or past the log end offset (ErrUnexpectedOffset otherwise) and follow in
// order: gaps, from the leader's compaction, are allowed, before the first
// batch too (a follower fetching at its log end, in a range the cleaner
// emptied, gets the next batch that is left). Of opts only
// Check, Written and Aborted are used.
func (l *Log) AppendReplicated(records []byte, opts AppendOptions) (AppendResult, error) {
	hdrs, err := ValidateReplicatedBatches(records)
	if err != nil {
		return AppendResult{}, err
	}
	opts.LeaderEpoch, opts.LogAppendTime = 0, false
	return l.append(records, hdrs, &opts, true)
}

func (l *Log) checkLimits(hdrs []BatchHeader, now time.Time, maxBytes int32) error {
	nowMs := now.UnixMilli()
	if maxBytes <= 0 {
		maxBytes = l.config().MaxMessageBytes
	}
	for i := range hdrs {
		h := &hdrs[i]
		if maxBytes > 0 && h.Size() > int64(maxBytes) {
			return fmt.Errorf("%w: %d bytes, max.message.bytes %d", ErrBatchTooLarge, h.Size(), maxBytes)
		}
		if h.LogAppendTime() {
			continue
		}
		for _, ts := range []int64{h.BaseTimestamp, h.MaxTimestamp} {
			if before := l.config().TimestampBeforeMax; before > 0 && ts < nowMs-before.Milliseconds() {
				return fmt.Errorf("%w: timestamp %d more than %v before now", ErrInvalidTimestamp, ts, before)
			}
			if after := l.config().TimestampAfterMax; after > 0 && ts > nowMs+after.Milliseconds() {
				return fmt.Errorf("%w: timestamp %d more than %v after now", ErrInvalidTimestamp, ts, after)
			}
		}
	}
	return nil
}

func (l *Log) append(records []byte, hdrs []BatchHeader, opts *AppendOptions, replicated bool) (AppendResult, error) {
	now := l.now()
	if !replicated {
		if err := l.checkLimits(hdrs, now, opts.MaxMessageBytes); err != nil {
			return AppendResult{}, err
		}
	}
	l.mu.Lock()
	target, res, err := l.appendLocked(records, hdrs, opts, replicated, now)
	async := err == nil && opts.NoSyncWait && l.config().Flush == FlushEveryCommit
	if async && !l.syncerStarted {
		l.syncerStarted = true
		l.wg.Add(1)
		go pprof.Do(context.Background(), pprof.Labels("hotlog", "syncer"), func(context.Context) { l.asyncSyncLoop() })
	}
	l.mu.Unlock()
	if err != nil {
		return AppendResult{}, err
	}
	if async {
		select {
		case l.kick <- struct{}{}:
		default: // a pass is pending; it covers this append
		}
		res.SyncPending = true
		return res, nil
	}
	if l.config().Flush == FlushEveryCommit {
		if err := l.syncTo(target); err != nil {
			return AppendResult{}, err
		}
	}
	return res, nil
}

func (l *Log) appendLocked(records []byte, hdrs []BatchHeader, opts *AppendOptions, replicated bool, now time.Time) (uint64, AppendResult, error) {
	if l.closed.Load() {
		return 0, AppendResult{}, ErrClosed
	}
	if err := l.failure(); err != nil {
		return 0, AppendResult{}, err
	}
	if int64(len(records)) > maxSegmentBytes {
		return 0, AppendResult{}, fmt.Errorf("%w: %d bytes in one append", ErrBatchTooLarge, len(records))
	}
	next := l.logEnd.Load()
	if replicated {
		// A gap before the first batch is the leader's compaction (the
		// batches from the log end on were cleaned away), as between
		// batches; only a batch below the log end does not continue it
		// (Kafka's UnexpectedAppendOffsetException).
		if hdrs[0].BaseOffset < next {
			return 0, AppendResult{}, fmt.Errorf("%w: first offset %d, log end %d", ErrUnexpectedOffset, hdrs[0].BaseOffset, next)
		}
		for i := range hdrs {
			if hdrs[i].BaseOffset < next {
				return 0, AppendResult{}, fmt.Errorf("%w: batch offset %d below %d", ErrUnexpectedOffset, hdrs[i].BaseOffset, next)
			}
			next = hdrs[i].LastOffset() + 1
		}
	} else {
		for i := range hdrs {
			hdrs[i].BaseOffset = next
			hdrs[i].PartitionLeaderEpoch = opts.LeaderEpoch
			next += int64(hdrs[i].LastOffsetDelta) + 1
		}
	}
	first, last := hdrs[0].BaseOffset, hdrs[len(hdrs)-1].LastOffset()
	if l.shouldRollLocked(int64(len(records)), last, now) {
		if err := l.rollLocked(first); err != nil {
			return 0, AppendResult{}, l.ioError(err)
		}
	}
	if opts.Check != nil {
		if err := opts.Check(first, hdrs); err != nil {
			return 0, AppendResult{}, err
		}
	}
	res := AppendResult{FirstOffset: first, LastOffset: last, MaxTimestamp: -1, LogAppendTime: -1}
	if opts.LogAppendTime {
		res.LogAppendTime = now.UnixMilli()
	}
	for i, pos := 0, int64(0); i < len(hdrs); i++ {
		h := &hdrs[i]
		b := records[pos : pos+h.Size()]
		if !replicated {
			putBaseOffset(b, h.BaseOffset)
			putLeaderEpoch(b, h.PartitionLeaderEpoch)
		}
		if opts.LogAppendTime {
			setLogAppendTime(b, res.LogAppendTime)
			h.MaxTimestamp = res.LogAppendTime
			h.Attributes |= attrTimestampType
		}
		if h.MaxTimestamp > res.MaxTimestamp {
			res.MaxTimestamp = h.MaxTimestamp
		}
		pos += h.Size()
	}
	if err := l.updateEpochsLocked(hdrs); err != nil {
		return 0, AppendResult{}, err
	}
	var aborted []AbortedTxn
	if opts.Aborted != nil {
		aborted = opts.Aborted(hdrs)
	}
	var oldTxns []AbortedTxn
	if len(aborted) > 0 {
		var err error
		if oldTxns, err = l.appendTxnsLocked(aborted, first, last); err != nil {
			return 0, AppendResult{}, err
		}
	}

	seg := l.active
	oldSize := seg.size.Load()
	if _, err := seg.file.Write(records); err != nil {
		if len(aborted) > 0 {
			l.undoTxnsLocked(oldTxns)
		}
		// Take back whatever part was written; if that fails too the file's
		// tail is unknown and the log must be reopened (recovery cuts it).
		if terr := seg.file.Truncate(oldSize); terr != nil {
			return 0, AppendResult{}, l.fail(fmt.Errorf("hotlog: append: %w", err))
		}
		return 0, AppendResult{}, l.ioError(fmt.Errorf("hotlog: append: %w", err))
	}
	pos := oldSize
	for i := range hdrs {
		l.builder.add(&hdrs[i], pos)
		pos += hdrs[i].Size()
	}
	seg.mu.Lock()
	seg.idx, seg.tidx, seg.maxTs = l.builder.idx, l.builder.tidx, l.builder.maxTs
	seg.mu.Unlock()
	seg.size.Store(pos)
	l.logEnd.Store(last + 1)
	if opts.Written != nil {
		opts.Written(hdrs)
	}

	l.sync.mu.Lock()
	l.sync.written += uint64(len(records))
	l.sync.writtenEnd = last + 1
	target := l.sync.written
	l.sync.mu.Unlock()
	return target, res, nil
}

func (l *Log) shouldRollLocked(n int64, last int64, now time.Time) bool {
	size := l.active.size.Load()
	if size == 0 {
		return false
	}
	return size+n > l.config().SegmentBytes ||
		now.Sub(l.activeCreated) >= l.config().SegmentMs ||
		l.builder.full(l.config().MaxIndexBytes) ||
		last-l.active.base > 1<<31-1 ||
		size+n > 1<<32-1
}

// updateEpochsLocked records new leader epochs and writes the checkpoint
// before the batches that start them are written.
func (l *Log) updateEpochsLocked(hdrs []BatchHeader) error {
	epochs := *l.epochs.Load()
	changed := false
	for i := range hdrs {
		var ok bool
		epochs, ok = assignEpoch(epochs, hdrs[i].PartitionLeaderEpoch, hdrs[i].BaseOffset)
		changed = changed || ok
	}
	if !changed {
		return nil
	}
	if err := vfs.WriteFileAtomic(l.fs, l.path(epochCheckpointFile), encodeEpochs(epochs)); err != nil {
		return fmt.Errorf("hotlog: write leader-epoch checkpoint: %w", err)
	}
	l.epochs.Store(&epochs)
	return nil
}

// sealLocked makes the active segment durable and immutable: the final time
// index entry, both index files written and synced, the log synced.
func (l *Log) sealLocked() error {
	seg, b := l.active, l.builder
	b.appendTime()
	seg.mu.Lock()
	seg.idx, seg.tidx, seg.maxTs, seg.maxTsKnown = b.idx, b.tidx, b.maxTs, true
	seg.mu.Unlock()
	if err := seg.file.Sync(); err != nil {
		return l.fail(fmt.Errorf("hotlog: sync segment: %w", err))
	}
	if err := writeIndexFile(l.fs, seg.path(indexSuffix), b.idx); err != nil {
		return fmt.Errorf("hotlog: write index: %w", err)
	}
	if err := writeIndexFile(l.fs, seg.path(timeIndexSuffix), b.tidx); err != nil {
		return fmt.Errorf("hotlog: write time index: %w", err)
	}
	return nil
}

// rollLocked seals the active segment and starts a new one at base.
func (l *Log) rollLocked(base int64) error {
	if err := l.sealLocked(); err != nil {
		return err
	}
	seg, err := l.createSegmentLocked(base)
	if err != nil {
		return err
	}
	old := *l.segs.Load()
	old[len(old)-1].relLimit = base - old[len(old)-1].base
	set := append(append(make([]*segment, 0, len(old)+1), old...), seg)
	l.segs.Store(&set)
	sealed := l.active
	l.setActiveLocked(seg, base, base)
	if l.rollSnapshot != nil {
		// The producer state as of the sealed segment's end. A failure
		// costs only the snapshot: the broker replays from an older one.
		if data := l.rollSnapshot(); data != nil {
			if err := l.putSnapshotLocked(base, data); err != nil {
				l.logger.Warn("hotlog: producer snapshot at roll", "offset", base, "err", err)
			}
		}
	}
	// The sealed segment's indexes may now be evicted like any other's.
	sealed.cache.add(sealed, len(sealed.idx)+len(sealed.tidx))
	return nil
}

// createSegmentLocked creates an empty segment file at base and makes its
// directory entry durable.
func (l *Log) createSegmentLocked(base int64) (*segment, error) {
	seg := newSegment(l.fs, l.dir, base, l.cache)
	f, err := l.fs.Create(seg.path(logSuffix))
	if err == nil {
		f.Close()
		f, err = l.fs.OpenForAppend(seg.path(logSuffix))
	}
	if err != nil {
		return nil, fmt.Errorf("hotlog: create segment: %w", err)
	}
	if err := vfs.SyncDir(l.fs, l.dir); err != nil {
		f.Close()
		l.fs.Remove(seg.path(logSuffix))
		return nil, fmt.Errorf("hotlog: sync %s: %w", l.dir, err)
	}
	seg.file = f
	seg.size.Store(0)
	seg.loaded, seg.maxTsKnown = true, true
	// No transaction index yet (a stale file of a segment once at this
	// base would be wrong).
	l.fs.Remove(seg.path(txnIndexSuffix))
	seg.txnsLoaded = true
	return seg, nil
}

// setActiveLocked makes seg the active segment; everything written before is
// durable, and the log ends at end.
func (l *Log) setActiveLocked(seg *segment, base, end int64) {
	if l.active != nil {
		l.active.active.Store(false)
	}
	seg.active.Store(true)
	l.active = seg
	l.builder = newIndexBuilder(base, l.config().IndexIntervalBytes)
	l.activeCreated = l.now()
	l.sync.mu.Lock()
	l.sync.seg = seg
	l.sync.synced = l.sync.written
	l.sync.writtenEnd, l.sync.syncedEnd = end, end
	l.sync.gen++
	l.sync.cond.Broadcast()
	l.sync.mu.Unlock()
}

// syncLoop is the background syncer of FlushInterval: it fsyncs the active
// segment on a ticker.
func (l *Log) syncLoop() {
	defer l.wg.Done()
	t := time.NewTicker(l.config().FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.syncTo(0)
		case <-l.closeCh:
			return
		}
	}
}

// asyncSyncLoop is the background syncer of NoSyncWait appends: each kick
// runs one group-commit fsync covering everything written so far, then
// reports the durable end.
func (l *Log) asyncSyncLoop() {
	defer l.wg.Done()
	for {
		select {
		case <-l.kick:
		case <-l.closeCh:
			return
		}
		if err := l.syncTo(0); err != nil {
			continue // the log has failed or closed: appends report it
		}
		if l.onDurable != nil {
			l.onDurable(l.DurableEnd())
		}
	}
}

// DurableEnd is the offset below which the log's fsyncs (by the flush policy,
// Sync, rolls) have made it durable.
func (l *Log) DurableEnd() int64 {
	l.sync.mu.Lock()
	defer l.sync.mu.Unlock()
	return l.sync.syncedEnd
}

// syncTo returns once everything written up to target (0: everything written
// so far) is durable. It is group commit, leader/follower style: if no fsync
// is running, the caller runs one that covers everything written so far and
// wakes every waiter it covered; otherwise it waits for the running one and
// then, if still not covered, leads the next.
func (l *Log) syncTo(target uint64) error {
	s := &l.sync
	s.mu.Lock()
	defer s.mu.Unlock()
	if target == 0 {
		target = s.written
	}
	for {
		switch {
		case s.synced >= target:
			return nil
		case s.err != nil:
			return fmt.Errorf("%w: fsync: %w", ErrLogFailed, s.err)
		case s.closed:
			return ErrClosed
		case s.syncing:
			s.cond.Wait()
			continue
		}
		upTo, upToEnd, gen, seg := s.written, s.writtenEnd, s.gen, s.seg
		if !seg.tryRef() {
			return ErrClosed
		}
		s.syncing = true
		s.mu.Unlock()
		f, err := seg.logFile()
		if err == nil {
			err = f.Sync()
		}
		seg.unref()
		s.mu.Lock()
		s.syncing = false
		s.count++
		if err != nil {
			if s.err == nil {
				s.err = err
			}
			l.fail(err)
		} else {
			if upTo > s.synced {
				s.synced = upTo
			}
			if gen == s.gen && upToEnd > s.syncedEnd {
				s.syncedEnd = upToEnd
			}
		}
		s.cond.Broadcast()
	}
}

// Sync makes everything appended so far durable.
func (l *Log) Sync() error {
	if l.closed.Load() {
		return ErrClosed
	}
	return l.syncTo(0)
}

// Close syncs the log, writes the active segment's indexes and the
// clean-shutdown marker (so that the next open scans nothing), stops the
// syncer and the deleter and releases the log's segments; files stay open
// until readers release their results. The files of deleted segments not yet
// removed (file.delete.delay.ms, or held by readers) are left for the next
// Open, which removes them: once Close returns, the log removes no file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	l.closed.Store(true)
	close(l.closeCh)
	l.wg.Wait()

	err := l.failure()
	if err == nil {
		err = l.sealLocked()
		if err == nil {
			m := cleanShutdown{
				ActiveBase: l.active.base, ActiveSize: l.active.size.Load(), LogEnd: l.logEnd.Load(),
				MaxTimestamp: l.builder.maxTs, MaxTimestampOffset: l.builder.maxTsOffset, HighWatermark: l.hw.Load(),
				ActiveCreated: l.activeCreated.UnixMilli(),
			}
			err = vfs.WriteFileAtomic(l.fs, l.path(cleanShutdownFile), m.encode())
		}
	}
	l.sync.mu.Lock()
	if err == nil {
		l.sync.synced = l.sync.written
		l.sync.syncedEnd = l.sync.writtenEnd
	}
	l.sync.closed = true
	l.sync.cond.Broadcast()
	l.sync.mu.Unlock()
	l.releaseAll()
	// Pending deletions stay for the next Open; from here the log removes
	// no file, so the caller may remove the directory.
	l.del.close()
	return err
}

// Dir is the partition directory.
func (l *Log) Dir() string { return l.dir }

// LogStartOffset is the first offset readers may ask for.
func (l *Log) LogStartOffset() int64 { return l.logStart.Load() }

// LogEndOffset is the offset the next appended record gets.
func (l *Log) LogEndOffset() int64 { return l.logEnd.Load() }

// HighWatermark is the value last set by SetHighWatermark (kept across a clean
// restart; after an unclean one it starts at the log start offset).
func (l *Log) HighWatermark() int64 { return l.hw.Load() }

// SetHighWatermark sets the high watermark, clamped to [log start, log end].
func (l *Log) SetHighWatermark(hw int64) {
	if s := l.logStart.Load(); hw < s {
		hw = s
	}
	if e := l.logEnd.Load(); hw > e {
		hw = e
	}
	l.hw.Store(hw)
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch: the largest epoch at most
// epoch that the log knows and the offset where it ended (the start of the
// next epoch, or the log end for the latest). (-1, -1) if unknown.
func (l *Log) EndOffsetForEpoch(epoch int32) (leaderEpoch int32, endOffset int64, err error) {
	if l.closed.Load() {
		return -1, -1, ErrClosed
	}
	e, o := endOffsetForEpoch(*l.epochs.Load(), epoch, l.logEnd.Load())
	return e, o, nil
}

// LatestEpoch is the latest leader epoch in the log, or -1.
func (l *Log) LatestEpoch() int32 {
	epochs := *l.epochs.Load()
	if len(epochs) == 0 {
		return -1
	}
	return epochs[len(epochs)-1].Epoch
}

// LeaderEpoch is an entry of the leader-epoch cache: leader epoch Epoch
// began at StartOffset.
type LeaderEpoch struct {
	Epoch       int32
	StartOffset int64
}

// LeaderEpochs returns the leader-epoch cache, ascending, as of the log end
// offset returned with it (Kafka's leader-epoch-checkpoint). Entries below
// the log start are trimmed to it, as in the checkpoint.
func (l *Log) LeaderEpochs() ([]LeaderEpoch, int64) {
	end := l.logEnd.Load()
	epochs := *l.epochs.Load()
	out := make([]LeaderEpoch, 0, len(epochs))
	for _, e := range epochs {
		if e.Start >= end {
			break // appended after end was read
		}
		out = append(out, LeaderEpoch{Epoch: e.Epoch, StartOffset: e.Start})
	}
	return out, end
}

// SegmentInfo describes a segment, for tiering.
type SegmentInfo struct {
	BaseOffset    int64
	NextOffset    int64 // the next segment's base (or the log end for the active one)
	Size          int64
	Sealed        bool
	MaxTimestamp  int64 // -1 if none
	LogFile       string
	IndexFile     string
	TimeIndexFile string
	// TxnIndexFile is the .txnindex path, or "" if the segment has no
	// aborted transaction.
	TxnIndexFile string
}

// Segments describes the current segments, oldest first. Sealed segments
// never change.
func (l *Log) Segments() []SegmentInfo {
	set := *l.segs.Load()
	end := l.logEnd.Load()
	out := make([]SegmentInfo, 0, len(set))
	for i, s := range set {
		if !s.tryRef() {
			continue
		}
		info := SegmentInfo{BaseOffset: s.base, NextOffset: end, Sealed: i+1 < len(set), MaxTimestamp: -1,
			LogFile: s.path(logSuffix), IndexFile: s.path(indexSuffix), TimeIndexFile: s.path(timeIndexSuffix)}
		if info.Sealed {
			info.NextOffset = set[i+1].base
		}
		info.Size, _ = s.visibleSize()
		if txns, err := s.txnEntries(); err != nil || len(txns) > 0 {
			info.TxnIndexFile = s.path(txnIndexSuffix) // a damaged one fails its reader
		}
		if ts, err := s.maxTimestamp(l.config().IndexIntervalBytes); err == nil {
			info.MaxTimestamp = ts
		}
		s.unref()
		out = append(out, info)
	}
	return out
}

var _ io.Closer = (*Log)(nil)
