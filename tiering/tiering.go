package tiering

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/failpoint"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/objectstore"
)

// RemoteLog is a partition's committed pointer into the bucket, as the
// metadata log keeps it (O(1) per partition).
type RemoteLog struct {
	ManifestKey     string // "" until the first commit
	ManifestVersion int64  // 0 until the first commit; each commit adds one
	StartOffset     int64
	EndOffset       int64 // exclusive
	LeaderEpoch     int32 // the epoch of the leader that made the last commit
}

// Committer is what tiering needs of the metadata log. The broker implements
// it over metadata.Node (CommitRemoteLog command, the partition's Remote
// pointer).
//
// Both methods are called from tiering's own goroutines, concurrently for
// different partitions, and must honour ctx.
type Committer interface {
	// RemoteLog returns the partition's committed pointer (the zero value
	// when nothing was ever committed), or an error wrapping
	// ErrUnknownPartition when the partition is gone (its topic deleted).
	RemoteLog(ctx context.Context, tp TopicPartition) (RemoteLog, error)
	// CommitRemoteLog atomically moves the pointer to newManifestKey with
	// [remoteStart, remoteEnd), only if leaderEpoch is the partition's
	// current leader epoch (else an error wrapping ErrFenced) and the
	// current manifest version is expectedManifestVersion (else an error
	// wrapping ErrConflict). On success the version becomes expected+1.
	// Any other error leaves the outcome unknown; tiering re-reads the
	// pointer before its next step.
	CommitRemoteLog(ctx context.Context, tp TopicPartition, leaderEpoch int32, expectedManifestVersion int64,
		newManifestKey string, remoteStart, remoteEnd int64) error
}

// Leadership tells whether this broker leads a partition, and in which
// epoch. Only the leader uploads, applies retention and cleans orphans.
// It is called often and must be cheap and safe for concurrent use.
type Leadership interface {
	LeaderEpoch(tp TopicPartition) (epoch int32, leader bool)
}

// TopicConfig holds a topic's tiering settings, named after Kafka's configs.
// -1 means unlimited; -2 (the local settings only) means "the same as the
// total one", as in Kafka.
type TopicConfig struct {
	RemoteStorageEnable bool // remote.storage.enable
	// RemoteLogCopyDisable (remote.log.copy.disable, KIP-950) stops
	// uploads while remote storage stays enabled: the remote log stays
	// readable, total retention keeps expiring it (and the local segments
	// past its end), and local retention keeps deleting only below its
	// end, so no local segment that is not in the bucket is deleted but by
	// total retention. The broker requires local.retention.* to be -2 or
	// the total values meanwhile, as Kafka does.
	RemoteLogCopyDisable bool
	// RemoteLogDeleteOnDisable (remote.log.delete.on.disable, KIP-950):
	// while RemoteStorageEnable is off, the leader deletes the remote log
	// (one commit of an empty range at its local log start, then the
	// objects), so the partition goes on from its local log. Without it
	// a remote log left when remote storage turned off is kept.
	RemoteLogDeleteOnDisable bool
	RetentionMs              int64 // retention.ms
	RetentionBytes           int64 // retention.bytes
	LocalRetentionMs         int64 // local.retention.ms
	LocalRetentionBytes      int64 // local.retention.bytes
}

// DefaultTopicConfig is Kafka's defaults with remote storage on.
func DefaultTopicConfig() TopicConfig {
	return TopicConfig{RemoteStorageEnable: true, RetentionMs: 7 * 24 * 3600 * 1000, RetentionBytes: -1,
		LocalRetentionMs: -2, LocalRetentionBytes: -2}
}

func (c TopicConfig) localMs() int64 {
	if c.LocalRetentionMs == -2 {
		return c.RetentionMs
	}
	return c.LocalRetentionMs
}

func (c TopicConfig) localBytes() int64 {
	if c.LocalRetentionBytes == -2 {
		return c.RetentionBytes
	}
	return c.LocalRetentionBytes
}

// Options configure a Manager. Store, Committer and Leadership are required.
type Options struct {
	Store      objectstore.Store
	Committer  Committer
	Leadership Leadership

	// CacheFS and CacheDir hold the chunk cache ([vfs.Default], required
	// dir). The folder is emptied when the Manager opens.
	CacheFS  vfs.FS
	CacheDir string
	// CacheBytes bounds the chunk cache [1 GiB]; chunks in use by readers
	// may exceed it briefly.
	CacheBytes int64
	// ChunkSize is the unit of remote reads and of the chunk checksums
	// written at upload [8 MiB]; it is recorded per segment in the
	// manifest, so readers follow what the uploader chose.
	ChunkSize int64
	// ReadWorkers bounds the concurrent GETs of remote reads [8];
	// ReadAhead is how many chunks from a sequential reader's position on
	// are kept cached or on their way [8], requested before the read waits
	// for its own; ReadStreams is how many ranged GETs of a partition's
	// read-ahead are on their way at once [2]: each fetches a run of
	// chunks of one segment, and the next starts as soon as one ends.
	ReadWorkers int
	ReadAhead   int
	ReadStreams int
	// ReadTimeout bounds one chunk download [30s].
	ReadTimeout time.Duration
	// SkipBatchCRC turns off the CRC-32C check of served batches (chunks
	// are always checked against the manifest when downloaded).
	// RecheckAfter: a chunk file is checked against the manifest's chunk
	// CRC32C as it is written, so batches served from it are CRC-checked
	// again only once it is older than this (a file damaged at rest) [1 min];
	// negative: on every read.
	SkipBatchCRC bool
	RecheckAfter time.Duration

	// UploadWorkers is how many partitions upload at once [2];
	// UploadParallelism how many segments of one partition [2].
	UploadWorkers     int
	UploadParallelism int
	// Interval between background rounds [1s]; negative: no background
	// loop (tests drive Partition.RunOnce and CleanOrphans themselves).
	Interval time.Duration
	// BaseBackoff and MaxBackoff pace a partition's retries after a failed
	// round (bucket down, throttling) [1s, 1 min], with full jitter.
	BaseBackoff, MaxBackoff time.Duration
	// OrphanGrace: objects younger than this are never cleaned [1h];
	// CleanInterval between orphan scans of a partition [10 min].
	OrphanGrace   time.Duration
	CleanInterval time.Duration
	// IndexIntervalBytes is the spacing of the uploaded index entries [4096].
	IndexIntervalBytes int64
	// MaxSegmentsPerCommit bounds how many segments one manifest adds [16].
	MaxSegmentsPerCommit int

	// Leases, if set, runs remote jobs under a lease of the metadata log:
	// the remote part of retention (dropping expired segments from the
	// manifest and the bucket) commits with the lease's Fence, so that
	// exactly one broker acts on a partition's remote log at a time
	// (compact.go).
	Leases JobLeases

	// ScanRecords, if set, finds in a compressed (or LogAppendTime)
	// batch the first record at offset from or later whose timestamp is
	// at least ts (OffsetForTimestamp): its offset and timestamp. Without
	// it such a batch stands for itself (its base offset, its max
	// timestamp), which answers an offset up to a batch too early. The
	// broker gives its own record scanner (with the codecs).
	ScanRecords func(batch []byte, from, ts int64) (offset, timestamp int64, found bool, err error)

	Now    func() time.Time // [time.Now]
	Logger *slog.Logger     // [slog.Default()]
}

func (o *Options) setDefaults() error {
	if o.Store == nil || o.Committer == nil || o.Leadership == nil {
		return errors.New("tiering: Options need Store, Committer and Leadership")
	}
	if o.CacheDir == "" {
		return errors.New("tiering: Options.CacheDir is empty")
	}
	if o.CacheFS == nil {
		o.CacheFS = vfs.Default
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = 1 << 30
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = 8 << 20
	}
	if o.ChunkSize < 4096 {
		o.ChunkSize = 4096
	}
	if o.ReadWorkers <= 0 {
		o.ReadWorkers = 8
	}
	if o.ReadAhead < 0 {
		o.ReadAhead = 0
	} else if o.ReadAhead == 0 {
		o.ReadAhead = 8
	}
	if o.ReadStreams <= 0 {
		o.ReadStreams = 2
	}
	if o.RecheckAfter == 0 {
		o.RecheckAfter = time.Minute
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 30 * time.Second
	}
	if o.UploadWorkers <= 0 {
		o.UploadWorkers = 2
	}
	if o.UploadParallelism <= 0 {
		o.UploadParallelism = 2
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.BaseBackoff <= 0 {
		o.BaseBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Minute
	}
	if o.OrphanGrace <= 0 {
		o.OrphanGrace = time.Hour
	}
	if o.CleanInterval <= 0 {
		o.CleanInterval = 10 * time.Minute
	}
	if o.IndexIntervalBytes <= 0 {
		o.IndexIntervalBytes = 4096
	}
	if o.MaxSegmentsPerCommit <= 0 {
		o.MaxSegmentsPerCommit = 16
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Manager runs tiering for the partitions of one broker: a background loop
// that uploads, applies retention and cleans orphans, a bounded pool for
// remote reads, and the chunk cache. Its methods are safe for concurrent use.
type Manager struct {
	opts    Options
	store   *countingStore
	cache   *chunkCache
	indexes indexCache
	// txnIndexes caches decoded .txnindex objects (txnindex.go).
	txnIndexes txnIndexCache
	metrics    Metrics

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	jobs   chan func() // remote-read pool
	work   chan *Partition

	mu struct {
		sync.Mutex
		parts  map[TopicPartition]*Partition
		closed bool
	}
}

// New opens a Manager and starts its goroutines (unless Options.Interval is
// negative, the background loop; the read pool always).
func New(opts Options) (*Manager, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	m := &Manager{opts: opts}
	m.indexes.max = 4096
	m.txnIndexes.max = 4096
	m.store = &countingStore{Store: opts.Store, m: &m.metrics}
	m.mu.parts = map[TopicPartition]*Partition{}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	cache, err := newChunkCache(opts.CacheFS, opts.CacheDir, opts.CacheBytes, &m.metrics, opts.Now)
	if err != nil {
		m.cancel()
		return nil, err
	}
	m.cache = cache
	m.jobs = make(chan func(), 4*opts.ReadWorkers)
	for i := 0; i < opts.ReadWorkers; i++ {
		m.wg.Add(1)
		go pprof.Do(m.ctx, pprof.Labels("tiering", "reader"), func(context.Context) {
			defer m.wg.Done()
			for {
				select {
				case <-m.ctx.Done():
					return
				case job := <-m.jobs:
					job()
				}
			}
		})
	}
	if opts.Interval > 0 {
		m.work = make(chan *Partition)
		for i := 0; i < opts.UploadWorkers; i++ {
			m.wg.Add(1)
			go pprof.Do(m.ctx, pprof.Labels("tiering", "uploader"), func(ctx context.Context) {
				defer m.wg.Done()
				for {
					select {
					case <-ctx.Done():
						return
					case p := <-m.work:
						p.backgroundRound(ctx)
					}
				}
			})
		}
		m.wg.Add(1)
		go pprof.Do(m.ctx, pprof.Labels("tiering", "scheduler"), func(ctx context.Context) {
			defer m.wg.Done()
			m.schedule(ctx)
		})
	}
	return m, nil
}

// schedule hands every partition that is due to an upload worker, once per
// Interval.
func (m *Manager) schedule(ctx context.Context) {
	t := time.NewTicker(m.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range m.partitions() {
			if !p.due(m.opts.Now()) || !p.busy.CompareAndSwap(false, true) {
				continue
			}
			select {
			case m.work <- p:
			case <-ctx.Done():
				return
			}
		}
	}
}

// Partitions returns the partitions added to the Manager, in no order.
func (m *Manager) Partitions() []*Partition { return m.partitions() }

func (m *Manager) partitions() []*Partition {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Partition, 0, len(m.mu.parts))
	for _, p := range m.mu.parts {
		out = append(out, p)
	}
	return out
}

// Close stops the background loop and the read pool, waits for them, and
// empties the chunk cache. It does not close the Store.
// goTracked runs f on a goroutine Close waits for, unless the Manager is
// closed.
func (m *Manager) goTracked(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

func (m *Manager) Close() error {
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		return nil
	}
	m.mu.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	return m.cache.close()
}

// Store returns the Manager's store (wrapped to count requests).
func (m *Manager) Store() objectstore.Store { return m.store }

// PartitionOptions describe a partition handed to AddPartition.
type PartitionOptions struct {
	TopicPartition
	// Log is the partition's local log (nil on a broker that only reads
	// the remote log).
	Log *hotlog.Log
	// FS is the file system the log lives on [vfs.Default].
	FS     vfs.FS
	Config TopicConfig
	// LastStableOffset, if set, bounds uploads (transactions): nothing at
	// or above it is uploaded.
	LastStableOffset func() int64
}

// AddPartition starts tiering a partition. The background loop acts on it
// only while Leadership says this broker leads it.
func (m *Manager) AddPartition(opts PartitionOptions) (*Partition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return nil, ErrClosed
	}
	if _, ok := m.mu.parts[opts.TopicPartition]; ok {
		return nil, fmt.Errorf("tiering: %s added twice", opts.TopicPartition)
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	p := &Partition{m: m, tp: opts.TopicPartition, log: opts.Log, fs: opts.FS, lso: opts.LastStableOffset,
		prefix: PartitionPrefix(opts.TopicID, opts.Partition), lineageEpoch: -1}
	p.SetConfig(opts.Config)
	p.lastReadEnd.Store(-1)
	m.mu.parts[opts.TopicPartition] = p
	return p, nil
}

// Partition returns a partition added earlier.
func (m *Manager) Partition(tp TopicPartition) (*Partition, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.mu.parts[tp]
	return p, ok
}

// RemovePartition stops tiering a partition (leadership moved, the log is
// closing) and waits for a round in progress. Nothing is deleted.
func (m *Manager) RemovePartition(tp TopicPartition) {
	m.mu.Lock()
	p, ok := m.mu.parts[tp]
	delete(m.mu.parts, tp)
	m.mu.Unlock()
	if ok {
		p.removed.Store(true)
		p.runMu.Lock() // wait for the round in progress; later ones see removed
		p.fails = 0
		p.runMu.Unlock()
	}
}

// Partition is one partition's tiering state.
type Partition struct {
	m      *Manager
	tp     TopicPartition
	log    *hotlog.Log
	fs     vfs.FS
	lso    func() int64
	prefix string

	cfg atomic.Pointer[TopicConfig]
	// everEnabled: remote storage was on for the partition at some time
	// while it was added here (orphans of its uploads may be left).
	everEnabled atomic.Bool
	state       atomic.Pointer[remoteState]
	removed     atomic.Bool
	busy        atomic.Bool // handed to an upload worker

	lastReadEnd atomic.Int64            // where the last remote read ended (read-ahead)
	lastRead    atomic.Pointer[readPos] // and at which position (no index lookup for the next)
	ahead       readAhead               // a sequential reader's read-ahead window
	lagBytes    atomic.Int64
	lagOffsets  atomic.Int64
	nextRun     atomic.Int64 // unix nanos before which the loop skips it (backoff)
	lastClean   atomic.Int64
	lastErr     atomic.Pointer[string]

	loadMu sync.Mutex // state swaps and loading
	// loading is the manifest read in flight (guarded by loadMu): callers
	// of load share it, each waiting no longer than its own context.
	loading *manifestLoad
	runMu   sync.Mutex // one round (upload, retention, clean) at a time
	fails   int        // consecutive failed rounds; guarded by runMu
	// lineageEpoch is the leader epoch whose remote log reconcileLineage
	// last checked (-1: none yet); guarded by runMu.
	lineageEpoch int32

	// held are the stems of compacted segments uploaded (SegmentUpload) and
	// not yet committed or given up, with the leader epoch they were
	// uploaded in: the orphan cleaner never deletes their objects, whatever
	// their age, and ReplaceSegments commits only segments still held
	// (compact.go). heldMu is a leaf: taken under runMu or alone.
	heldMu sync.Mutex
	held   map[string]int32
}

// remoteState is an immutable view of the committed remote log.
type remoteState struct {
	ptr      RemoteLog
	manifest *Manifest

	epochsOnce sync.Once
	epochs     []EpochStart // remoteEpochs(manifest), computed once
}

// leaderEpochs is remoteEpochs of the manifest, computed at the first call
// (every replica's retention asks at every round, lineage.go).
func (st *remoteState) leaderEpochs() []EpochStart {
	st.epochsOnce.Do(func() { st.epochs = remoteEpochs(st.manifest) })
	return st.epochs
}

// TopicPartition returns the partition's name.
func (p *Partition) TopicPartition() TopicPartition { return p.tp }

// SetConfig changes the partition's topic settings (AlterConfigs).
func (p *Partition) SetConfig(cfg TopicConfig) {
	if cfg.RemoteStorageEnable {
		p.everEnabled.Store(true)
	}
	p.cfg.Store(&cfg)
}

// mayHaveObjects reports whether the bucket may hold objects of the
// partition: remote storage is or was on here, or a manifest was committed
// (or the pointer cannot be read). A topic that never tiered has none, and
// its orphan cleaning listed the bucket all the same (a LIST a partition
// every clean interval, and WARNs for topics without remote storage while
// the bucket was down).
func (p *Partition) mayHaveObjects(ctx context.Context) bool {
	if p.Config().RemoteStorageEnable || p.everEnabled.Load() {
		return true
	}
	ptr, err := p.m.opts.Committer.RemoteLog(ctx, p.tp)
	return err != nil || ptr.ManifestKey != ""
}

// Config returns the partition's topic settings.
func (p *Partition) Config() TopicConfig { return *p.cfg.Load() }

func (p *Partition) due(now time.Time) bool { return now.UnixNano() >= p.nextRun.Load() }

// backgroundRound runs one round for the loop, with backoff on failure.
func (p *Partition) backgroundRound(ctx context.Context) {
	defer p.busy.Store(false)
	err := p.RunOnce(ctx)
	if err == nil {
		now := p.m.opts.Now()
		if now.Sub(time.Unix(0, p.lastClean.Load())) >= p.m.opts.CleanInterval && p.mayHaveObjects(ctx) {
			p.lastClean.Store(now.UnixNano())
			_, err = p.CleanOrphans(ctx)
		}
	}
	if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrClosed) || errors.Is(err, ErrUnknownPartition) ||
		(ctx.Err() != nil && errors.Is(err, ctx.Err())) { // shutting down: not a failure
		err = nil
	}
	p.runMu.Lock()
	defer p.runMu.Unlock()
	if err == nil {
		p.fails = 0
		return
	}
	p.fails++
	ceiling := p.m.opts.MaxBackoff
	if p.fails < 30 {
		if d := p.m.opts.BaseBackoff << (p.fails - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	wait := ceiling/2 + rand.N(ceiling/2+1)
	p.nextRun.Store(p.m.opts.Now().Add(wait).UnixNano())
	if errors.Is(err, objectstore.ErrAccessDenied) {
		// Not transient: nothing leaves the local disk until the
		// credentials or the bucket policy are fixed.
		p.m.opts.Logger.Error("tiering: round failed: the bucket denies access (check the credentials and the bucket policy); retrying",
			"partition", p.tp.String(), "in", wait, "err", err)
		return
	}
	p.m.opts.Logger.Warn("tiering: round failed; retrying", "partition", p.tp.String(), "in", wait, "err", err)
}

// RunOnce runs one round for the partition. On the leader: upload the
// sealed segments below the high watermark (when remote storage is enabled
// and copying is not disabled),
// commit a new manifest, then apply total and local retention. On a follower:
// local retention below the committed remote end only, then ErrNotLeader.
// Safe to call concurrently with reads; rounds of one partition serialise.
func (p *Partition) RunOnce(ctx context.Context) error {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	if p.removed.Load() {
		return ErrClosed
	}
	if p.log == nil {
		return nil
	}
	epoch, ok := p.m.opts.Leadership.LeaderEpoch(p.tp)
	if !ok {
		return p.followerRound(ctx)
	}
	st, err := p.refresh(ctx)
	if err != nil {
		// The lag still counts from the committed remote end (the
		// pointer, in the metadata log): with the manifest unreadable
		// it read 0 while the local log grew, where an operator looks.
		if ptr, perr := p.m.opts.Committer.RemoteLog(ctx, p.tp); perr == nil {
			p.updateLag(&remoteState{ptr: ptr})
		}
		p.setErr(err)
		return err
	}
	cfg := p.Config()
	if !cfg.RemoteStorageEnable && cfg.RemoteLogDeleteOnDisable && !st.empty() {
		if st, err = p.deleteRemoteLog(ctx, epoch, st); err != nil {
			p.setErr(err)
			return err
		}
	}
	var uploadErr error
	if cfg.RemoteStorageEnable && !cfg.RemoteLogCopyDisable {
		if p.lineageEpoch != epoch { // once a leader epoch (lineage.go)
			if st, err = p.reconcileLineage(ctx, epoch, st); err != nil {
				p.setErr(err)
				return err
			}
			p.lineageEpoch = epoch
		}
		st, uploadErr = p.upload(ctx, epoch, st)
	}
	p.updateLag(st)
	err = errors.Join(uploadErr, p.retention(ctx, epoch, st, cfg))
	p.setErr(err)
	return err
}

func (p *Partition) setErr(err error) {
	if err == nil {
		p.lastErr.Store(nil)
		return
	}
	s := err.Error()
	p.lastErr.Store(&s)
}

// refresh re-reads the committed pointer and, if it moved, the manifest.
func (p *Partition) refresh(ctx context.Context) (*remoteState, error) {
	ptr, err := p.m.opts.Committer.RemoteLog(ctx, p.tp)
	if err != nil {
		return nil, fmt.Errorf("tiering: %s: read remote log pointer: %w", p.tp, err)
	}
	return p.load(ctx, ptr)
}

// manifestLoad is one read of the manifest of ptr, shared by the callers
// of load that want it; done is closed once st or err is set.
type manifestLoad struct {
	ptr  RemoteLog
	done chan struct{}
	st   *remoteState
	err  error
}

// manifestLoadTimeout bounds one manifest read, whoever waits for it.
const manifestLoadTimeout = time.Minute

// load makes ptr the current state, reading its manifest unless cached.
// The read runs on its own goroutine (bounded by manifestLoadTimeout and
// the Manager's Close) and each caller waits for it only as long as its
// own ctx allows. Before, the read ran under loadMu with the first caller's
// context: with the bucket hanging (not refusing), a round's read took the
// object store's retries, about five minutes, and ListOffsets, the status
// endpoint and every other caller waited on the mutex whatever their own
// deadlines.
func (p *Partition) load(ctx context.Context, ptr RemoteLog) (*remoteState, error) {
	p.loadMu.Lock()
	if st := p.state.Load(); st != nil && st.ptr == ptr {
		p.loadMu.Unlock()
		return st, nil
	}
	if ptr.ManifestKey == "" {
		st := &remoteState{ptr: ptr, manifest: &Manifest{Format: ManifestFormat, Topic: p.tp.Topic, TopicID: p.tp.TopicIDString(), Partition: p.tp.Partition}}
		p.state.Store(st)
		p.loadMu.Unlock()
		return st, nil
	}
	l := p.loading
	if l == nil || l.ptr != ptr {
		l = &manifestLoad{ptr: ptr, done: make(chan struct{})}
		if !p.m.goTracked(func() { p.readManifest(l) }) {
			p.loadMu.Unlock()
			return nil, ErrClosed
		}
		p.loading = l
	}
	p.loadMu.Unlock()
	select {
	case <-l.done:
		return l.st, l.err
	case <-ctx.Done():
		return nil, fmt.Errorf("tiering: %s: read manifest %s: %w", p.tp, ptr.ManifestKey, ctx.Err())
	}
}

// readManifest reads and checks l's manifest and, unless a newer state was
// stored meanwhile (a commit), makes it the current state.
func (p *Partition) readManifest(l *manifestLoad) {
	ctx, cancel := context.WithTimeout(p.m.ctx, manifestLoadTimeout)
	defer cancel()
	ptr := l.ptr
	var st *remoteState
	b, err := objectstore.ReadAll(ctx, p.m.store, ptr.ManifestKey, maxManifestBytes)
	if err != nil {
		err = fmt.Errorf("tiering: %s: read manifest %s: %w", p.tp, ptr.ManifestKey, err)
	} else if m, derr := DecodeManifest(b); derr != nil {
		err = fmt.Errorf("tiering: %s: manifest %s: %w", p.tp, ptr.ManifestKey, derr)
	} else if m.TopicID != p.tp.TopicIDString() || m.Partition != p.tp.Partition || m.StartOffset != ptr.StartOffset || m.EndOffset != ptr.EndOffset {
		err = fmt.Errorf("%w: %s: manifest %s says [%d, %d) of %s-%d, the pointer [%d, %d)", ErrCorruptObject, p.tp,
			ptr.ManifestKey, m.StartOffset, m.EndOffset, m.TopicID, m.Partition, ptr.StartOffset, ptr.EndOffset)
	} else {
		st = &remoteState{ptr: ptr, manifest: m}
	}
	p.loadMu.Lock()
	if p.loading == l {
		p.loading = nil
	}
	if st != nil {
		if cur := p.state.Load(); cur == nil || cur.ptr.ManifestVersion <= ptr.ManifestVersion {
			p.state.Store(st)
		}
	}
	p.loadMu.Unlock()
	l.st, l.err = st, err
	close(l.done)
}

// current returns the loaded state, loading it the first time.
func (p *Partition) current(ctx context.Context) (*remoteState, error) {
	if st := p.state.Load(); st != nil {
		return st, nil
	}
	return p.refresh(ctx)
}

// commit writes nm as the next manifest and commits it.
func (p *Partition) commit(ctx context.Context, epoch int32, st *remoteState, nm *Manifest) (*remoteState, error) {
	return p.commitWith(ctx, epoch, st, nm, func(key string, expected int64) error {
		return p.m.opts.Committer.CommitRemoteLog(ctx, p.tp, epoch, expected, key, nm.StartOffset, nm.EndOffset)
	})
}

// commitWith is commit with the metadata-log call given (a fenced one for
// tiered compaction).
func (p *Partition) commitWith(ctx context.Context, epoch int32, st *remoteState, nm *Manifest,
	commitFn func(key string, expected int64) error) (*remoteState, error) {
	nm.Format = ManifestFormat
	nm.Topic, nm.TopicID, nm.Partition = p.tp.Topic, p.tp.TopicIDString(), p.tp.Partition
	nm.Version = st.ptr.ManifestVersion + 1
	nm.LeaderEpoch = epoch
	nm.CreatedMs = p.m.opts.Now().UnixMilli()
	data, err := nm.Encode()
	if err != nil {
		return st, err
	}
	key := manifestKey(p.prefix, nm.Version, epoch)
	if err := objectstore.PutBytes(ctx, p.m.store, key, data, objectstore.CreateOptions{NoOverwrite: true}); err != nil {
		return st, fmt.Errorf("tiering: %s: write manifest: %w", p.tp, err)
	}
	// Everything is in the bucket, nothing committed: the e2e tests stop
	// (or kill) a leader here to prove that a late commit is fenced.
	failpoint.Pause(ctx, FailpointBeforeCommit, func() []byte { return beforeCommitDetail(p.tp, epoch, st, nm, key) })
	if err := commitFn(key, st.ptr.ManifestVersion); err != nil {
		p.state.Store(nil) // outcome unknown: re-read the pointer before going on
		return st, fmt.Errorf("tiering: %s: commit manifest v%d: %w", p.tp, nm.Version, err)
	}
	p.m.metrics.Commits.Add(1)
	ns := &remoteState{ptr: RemoteLog{ManifestKey: key, ManifestVersion: nm.Version, StartOffset: nm.StartOffset,
		EndOffset: nm.EndOffset, LeaderEpoch: epoch}, manifest: nm}
	p.loadMu.Lock()
	p.state.Store(ns)
	p.loadMu.Unlock()
	return ns, nil
}

// FailpointBeforeCommit is the failpoint (internal/failpoint) between a
// round's last PUT (the new manifest) and its CommitRemoteLog. Its detail is
// BeforeCommit as JSON.
const FailpointBeforeCommit = "tiering-before-commit"

// BeforeCommit describes a commit about to be made (the detail of
// FailpointBeforeCommit).
type BeforeCommit struct {
	Topic           string   `json:"topic"`
	Partition       int32    `json:"partition"`
	LeaderEpoch     int32    `json:"leader_epoch"`
	ExpectedVersion int64    `json:"expected_version"`
	ManifestKey     string   `json:"manifest_key"`
	StartOffset     int64    `json:"start_offset"`
	EndOffset       int64    `json:"end_offset"`
	NewStems        []string `json:"new_stems"` // segments the manifest adds
}

func beforeCommitDetail(tp TopicPartition, epoch int32, st *remoteState, nm *Manifest, key string) []byte {
	old := map[string]bool{}
	for _, s := range st.manifest.Segments {
		old[s.Stem] = true
	}
	d := BeforeCommit{Topic: tp.Topic, Partition: tp.Partition, LeaderEpoch: epoch, ExpectedVersion: st.ptr.ManifestVersion,
		ManifestKey: key, StartOffset: nm.StartOffset, EndOffset: nm.EndOffset, NewStems: []string{}}
	for _, s := range nm.Segments {
		if !old[s.Stem] {
			d.NewStems = append(d.NewStems, s.Stem)
		}
	}
	b, _ := json.Marshal(d)
	return b
}

// updateLag computes the upload lag: bytes and offsets of local data at or
// above the remote end.
func (p *Partition) updateLag(st *remoteState) {
	if p.log == nil || st == nil {
		return
	}
	var bytes int64
	for _, s := range p.log.Segments() {
		if s.NextOffset > st.ptr.EndOffset {
			bytes += s.Size
		}
	}
	lag := p.log.HighWatermark() - max(st.ptr.EndOffset, p.log.LogStartOffset())
	if cfg := p.Config(); !cfg.RemoteStorageEnable || cfg.RemoteLogCopyDisable {
		bytes, lag = 0, 0 // nothing is to be uploaded
	}
	p.lagBytes.Store(bytes)
	p.lagOffsets.Store(max(lag, 0))
}

// Status describes a partition's two tiers (for `sediment tier status`).
type Status struct {
	Partition                                       TopicPartition
	RemoteStorageEnable                             bool
	LocalStartOffset, LocalEndOffset, HighWatermark int64
	LocalBytes, LocalSegments                       int64
	RemoteStartOffset, RemoteEndOffset              int64 // -1 when nothing is remote
	RemoteBytes, RemoteSegments                     int64
	ManifestVersion                                 int64
	ManifestKey                                     string
	// UploadLagBytes is the size of the local segments not wholly in the
	// bucket (the active one included); UploadLagOffsets the offsets below
	// the high watermark past the remote end. Both are 0 while
	// remote.storage.enable is off.
	UploadLagBytes, UploadLagOffsets int64
	LastError                        string
}

// Status returns the partition's status from what is in memory: the local
// log now, the remote log as last loaded (no I/O; see LiveStatus).
func (p *Partition) Status() Status {
	st := p.state.Load()
	if st == nil {
		// Not loaded yet (a start with the bucket not answering): the
		// committed pointer, in the metadata log, gives the remote range
		// and the lag; the manifest's sizes stay unknown (0). Before, a
		// start with the bucket hanging showed remote end -1 and lag 0
		// while the local log grew.
		if ptr, err := p.m.opts.Committer.RemoteLog(context.Background(), p.tp); err == nil && ptr.ManifestKey != "" {
			st = &remoteState{ptr: ptr, manifest: &Manifest{StartOffset: ptr.StartOffset, EndOffset: ptr.EndOffset}}
		}
	}
	p.updateLag(st)
	s := Status{Partition: p.tp, RemoteStorageEnable: p.Config().RemoteStorageEnable, RemoteStartOffset: -1, RemoteEndOffset: -1,
		UploadLagBytes: p.lagBytes.Load(), UploadLagOffsets: p.lagOffsets.Load()}
	if p.log != nil {
		s.LocalStartOffset, s.LocalEndOffset, s.HighWatermark = p.log.LogStartOffset(), p.log.LogEndOffset(), p.log.HighWatermark()
		for _, seg := range p.log.Segments() {
			s.LocalBytes += seg.Size
			s.LocalSegments++
		}
	}
	if st != nil {
		if len(st.manifest.Segments) > 0 || (p.state.Load() == nil && st.ptr.EndOffset > st.ptr.StartOffset) {
			s.RemoteStartOffset, s.RemoteEndOffset = st.ptr.StartOffset, st.ptr.EndOffset
		}
		s.RemoteBytes, s.RemoteSegments = st.manifest.Size(), int64(len(st.manifest.Segments))
		s.ManifestVersion, s.ManifestKey = st.ptr.ManifestVersion, st.ptr.ManifestKey
	}
	if e := p.lastErr.Load(); e != nil {
		s.LastError = *e
	}
	return s
}

// LiveStatus re-reads the committed pointer (and the manifest, if it
// moved) before returning Status.
func (p *Partition) LiveStatus(ctx context.Context) (Status, error) {
	_, err := p.refresh(ctx)
	return p.Status(), err
}

// RemoteLogStart is the first offset in the bucket, or -1 if it holds
// nothing for the partition. The state is loaded if needed.
func (p *Partition) RemoteLogStart(ctx context.Context) (int64, error) {
	st, err := p.current(ctx)
	if err != nil {
		return -1, err
	}
	if len(st.manifest.Segments) == 0 {
		return -1, nil
	}
	return st.manifest.StartOffset, nil
}

// RemoteLogEnd is the offset after the last record in the bucket, or -1.
func (p *Partition) RemoteLogEnd(ctx context.Context) (int64, error) {
	st, err := p.current(ctx)
	if err != nil {
		return -1, err
	}
	if len(st.manifest.Segments) == 0 {
		return -1, nil
	}
	return st.manifest.EndOffset, nil
}

// EarliestOffset answers ListOffsets -2 (earliest across both tiers) and is
// the log start of Fetch: the remote log start if the bucket holds
// anything, or if its segments were all compacted away (as Kafka's log
// start stays where it was when the cleaner empties the first segments: a
// consumer's committed offset there stays valid, and a read there moves
// on to the remote end); else the local log start, but never below a
// committed remote start (DeleteRecords or retention past the remote end:
// the data below it is deleted in both tiers, whatever the local log still
// holds). The state
// is loaded if needed; if that fails (the bucket does not answer), the
// error wraps ErrUnavailable: the caller answers a retriable error, never
// the local start alone, which would skip the whole remote history.
func (p *Partition) EarliestOffset(ctx context.Context) (int64, error) {
	st, err := p.current(ctx)
	if err != nil {
		return -1, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if len(st.manifest.Segments) > 0 {
		return st.manifest.StartOffset, nil
	}
	start := int64(-1)
	if p.log != nil {
		start = p.log.LogStartOffset()
	}
	if st.ptr.ManifestVersion > 0 {
		if st.manifest.StartOffset < st.manifest.EndOffset && start <= st.manifest.EndOffset {
			// Compacted away: the local log goes on where the
			// remote one ends.
			return st.manifest.StartOffset, nil
		}
		start = max(start, st.manifest.StartOffset)
	}
	return start, nil
}

// EarliestLocalOffset answers ListOffsets -4 (KIP-1005).
func (p *Partition) EarliestLocalOffset() int64 {
	if p.log == nil {
		return -1
	}
	return p.log.LogStartOffset()
}

// LatestTieredOffset answers ListOffsets -5 (KIP-1005): the highest offset
// in the bucket, or -1 if none.
func (p *Partition) LatestTieredOffset(ctx context.Context) (int64, error) {
	end, err := p.RemoteLogEnd(ctx)
	if err != nil || end < 0 {
		return -1, err
	}
	return end - 1, nil
}

// Tail is what a replica needs to start its log at the remote log's end
// instead of copying the remote history (KIP-405's follower, answered
// OFFSET_MOVED_TO_TIERED_STORAGE, starting at the last tiered offset + 1 as
// KIP-1023 does): the offset, the leader epoch of the batch before it, and
// the producer state there as a snapshot at From plus the remote batches
// [From, End) to replay on top of it.
type Tail struct {
	// End is the remote log end (the offset after the last remote
	// record); -1 if nothing was ever committed to the bucket.
	End int64
	// Epoch is the leader epoch of the last remote batch (-1 if unknown).
	Epoch int32
	// Snapshot is the producer snapshot taken at From (nil: the empty
	// state at From).
	Snapshot []byte
	From     int64
}

// Tail reads the committed remote log's tail afresh (never a cached
// pointer: the replica starts where the bucket really ends). The producer
// snapshot is the newest segment's at or below the end that has one, so
// normally the last segment's (taken when it rolled) and nothing is
// replayed; if none has one (segments sealed before snapshots were kept),
// the state is rebuilt from the first segment whose newest record is no
// older than since (Unix ms): producers idle since before it have expired
// (producer.id.expiration.ms) and need no state.
func (p *Partition) Tail(ctx context.Context, since int64) (Tail, error) {
	st, err := p.refresh(ctx)
	if err != nil {
		return Tail{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	m := st.manifest
	if st.ptr.ManifestKey == "" {
		return Tail{End: -1, Epoch: -1, From: -1}, nil
	}
	t := Tail{End: m.EndOffset, Epoch: -1, From: m.EndOffset}
	if len(m.Segments) == 0 {
		// Retention or compaction emptied the remote log: nothing
		// below its end is left to hold producer state.
		return t, nil
	}
	last := m.Segments[len(m.Segments)-1]
	if n := len(last.LeaderEpochs); n > 0 {
		t.Epoch = last.LeaderEpochs[n-1].Epoch
	}
	for i := len(m.Segments) - 1; i >= 0; i-- {
		seg := m.Segments[i]
		if seg.SnapshotSize == 0 {
			continue
		}
		obj, err := p.ReadSnapshot(ctx, seg)
		if err != nil {
			return Tail{}, fmt.Errorf("%w: %s: producer snapshot of %s: %v", ErrUnavailable, p.tp, seg.Stem, err)
		}
		snap, err := hotlog.DecodeProducerSnapshot(obj)
		if err != nil {
			return Tail{}, fmt.Errorf("%w: %s: %s%s: %v", ErrCorruptObject, p.tp, seg.Stem, SuffixSnapshot, err)
		}
		t.Snapshot, t.From = snap, seg.EndOffset
		return t, nil
	}
	t.From = m.StartOffset
	for _, seg := range m.Segments {
		if seg.MaxTimestamp >= since {
			t.From = max(seg.BaseOffset, m.StartOffset)
			break
		}
		t.From = seg.EndOffset
	}
	return t, nil
}
