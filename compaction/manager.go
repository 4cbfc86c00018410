package compaction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/vfs"
)

// Metrics receives the workers' events. Methods are called from worker
// goroutines, concurrently; they must not block. A prometheus adapter in the
// broker turns them into counters (bytes cleaned, records dropped, segments
// deleted) and gauges (cleaner lag as dirty bytes).
type Metrics interface {
	// Cleaned reports a finished pass over a partition.
	Cleaned(partition string, st Stats)
	// CleanFailed reports a pass that failed; the partition is retried after
	// the backoff.
	CleanFailed(partition string, err error)
	// Lag reports, at each scheduling round, a compacted partition's dirty
	// bytes and dirty ratio (the cleaner lag).
	Lag(partition string, dirtyBytes int64, ratio float64)
	// RetentionDeleted reports segments deleted by local retention.
	RetentionDeleted(partition string, r RetentionResult)
}

// Config configures a Manager.
type Config struct {
	Cleaner CleanerConfig
	// RetentionCheckInterval (log.retention.check.interval.ms) [5 min].
	RetentionCheckInterval time.Duration
	// FS stores each log's cleaner checkpoint, the file
	// cleaner-offset-checkpoint in the log's directory [nil: kept in memory
	// only; a restart cleans from the log start again, which is correct,
	// only slower].
	FS      vfs.FS
	Now     func() time.Time // [time.Now]
	Logger  *slog.Logger     // [slog.Default()]
	Metrics Metrics          // [none]
}

// Partition is a log registered with a Manager.
type Partition struct {
	Name   string // unique, e.g. "orders-3", for logs and metrics
	Log    *hotlog.Log
	Config TopicConfig
	Txn    Transactions // nil: none
	// LocalRetentionLimit, if set, returns the offset below which local
	// retention may delete (the end offset committed to the bucket, for a
	// tiered topic), or -1 for no limit.
	LocalRetentionLimit func() int64
}

// Status describes a registered partition, for `sediment topic describe`.
type Status struct {
	Policy      Policy
	Range       Range     // as of the last scheduling round
	LastCleaned time.Time // zero if never
	LastError   error
	Checkpoint  int64 // the first dirty offset
}

type partitionState struct {
	p           Partition
	checkpoint  int64
	inProgress  bool
	removed     bool
	cancel      context.CancelFunc
	nextHorizon int64 // -1 none
	lastCleaned time.Time
	lastErr     error
	failedAt    time.Time
	lastRange   Range
}

// Manager runs the background workers for the logs registered with it: a
// pool of cleaner goroutines (log.cleaner.threads) that take the dirtiest
// compacted log each, and one retention goroutine. Close stops them.
type Manager struct {
	cfg      Config // cfg.Cleaner as at NewManager; the current one is cleaner
	cleaner  atomic.Pointer[CleanerConfig]
	now      func() time.Time
	logger   *slog.Logger
	metrics  Metrics
	throttle *throttler

	mu struct {
		sync.Mutex
		parts  map[string]*partitionState
		closed bool
		done   *sync.Cond // signalled when a clean finishes
		// running[i] is set while cleaner goroutine i runs; one whose
		// index reaches the configured Threads exits (Reconfigure).
		running []bool
		// reconfigured is closed (and replaced) by Reconfigure, to wake
		// idle cleaners.
		reconfigured chan struct{}
	}
	kickClean  chan struct{}
	kickRetain chan struct{}
	closeCh    chan struct{}
	wg         sync.WaitGroup
}

const checkpointFile = "cleaner-offset-checkpoint"

// NewManager starts the workers.
func NewManager(cfg Config) *Manager {
	cfg.Cleaner = cfg.Cleaner.WithDefaults()
	if cfg.RetentionCheckInterval <= 0 {
		cfg.RetentionCheckInterval = 5 * time.Minute
	}
	cfg.Cleaner.Threads = min(cfg.Cleaner.Threads, MaxCleanerThreads)
	m := &Manager{cfg: cfg, now: cfg.Now, logger: cfg.Logger, metrics: cfg.Metrics,
		kickClean: make(chan struct{}, MaxCleanerThreads), kickRetain: make(chan struct{}, 1), closeCh: make(chan struct{})}
	cc := cfg.Cleaner
	m.cleaner.Store(&cc)
	if m.now == nil {
		m.now = time.Now
	}
	if m.logger == nil {
		m.logger = slog.Default()
	}
	m.throttle = newThrottler(cfg.Cleaner.IOMaxBytesPerSecond, m.now)
	m.mu.parts = map[string]*partitionState{}
	m.mu.done = sync.NewCond(&m.mu.Mutex)
	m.mu.reconfigured = make(chan struct{})
	m.mu.Lock()
	m.startCleanersLocked(cfg.Cleaner.Threads)
	m.mu.Unlock()
	m.wg.Add(1)
	go pprof.Do(context.Background(), pprof.Labels("compaction", "retention"), func(context.Context) { m.retentionLoop() })
	return m
}

// MaxCleanerThreads bounds CleanerConfig.Threads.
const MaxCleanerThreads = 64

// startCleanersLocked starts the cleaner goroutines below n that are not
// running.
func (m *Manager) startCleanersLocked(n int) {
	for i := range n {
		if i < len(m.mu.running) && m.mu.running[i] {
			continue
		}
		for len(m.mu.running) <= i {
			m.mu.running = append(m.mu.running, false)
		}
		m.mu.running[i] = true
		m.wg.Add(1)
		go pprof.Do(context.Background(), pprof.Labels("compaction", "cleaner-"+strconv.Itoa(i)), func(context.Context) { m.cleanLoop(i) })
	}
}

// Reconfigure changes the cleaners' settings while they run, as Kafka's
// dynamic log.cleaner.* configs (KIP-226): Threads starts cleaner goroutines
// or lets the ones past it exit once their pass is done, Backoff and
// IOMaxBytesPerSecond apply at once, DedupeBufferBytes from each cleaner's
// next pass (its key map is made again). MaxBatchBytes and ReadChunk keep
// their values.
func (m *Manager) Reconfigure(cc CleanerConfig) {
	cc = cc.WithDefaults()
	cc.Threads = min(cc.Threads, MaxCleanerThreads)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return
	}
	old := m.cleaner.Load()
	cc.MaxBatchBytes, cc.ReadChunk = old.MaxBatchBytes, old.ReadChunk
	if cc == *old {
		return
	}
	m.cleaner.Store(&cc)
	m.throttle.setRate(cc.IOMaxBytesPerSecond)
	m.startCleanersLocked(cc.Threads)
	close(m.mu.reconfigured)
	m.mu.reconfigured = make(chan struct{})
	m.logger.Info("log cleaner reconfigured", "threads", cc.Threads, "dedupe_buffer_bytes", cc.DedupeBufferBytes,
		"io_max_bytes_per_second", cc.IOMaxBytesPerSecond, "backoff", cc.Backoff)
}

// CleanerConfig returns the cleaners' current settings.
func (m *Manager) CleanerConfig() CleanerConfig { return *m.cleaner.Load() }

// Register adds a partition; its workers start considering it at once.
func (m *Manager) Register(p Partition) error {
	if p.Name == "" || p.Log == nil {
		return errors.New("compaction: Register needs a name and a log")
	}
	ps := &partitionState{p: p, nextHorizon: -1, checkpoint: m.readCheckpoint(p.Log)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return ErrClosed
	}
	if _, ok := m.mu.parts[p.Name]; ok {
		return fmt.Errorf("compaction: partition %s already registered", p.Name)
	}
	m.mu.parts[p.Name] = ps
	m.kickLocked()
	return nil
}

// Unregister removes a partition, cancelling and waiting for a clean of it in
// progress (a cancelled clean leaves the log as it was: the swap of a group
// is atomic). Call it before closing or deleting the log.
func (m *Manager) Unregister(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps, ok := m.mu.parts[name]
	if !ok {
		return
	}
	ps.removed = true
	delete(m.mu.parts, name)
	if ps.cancel != nil {
		ps.cancel()
	}
	for ps.inProgress {
		m.mu.done.Wait()
	}
}

// UpdateConfig changes a partition's settings (AlterConfigs).
func (m *Manager) UpdateConfig(name string, cfg TopicConfig) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps, ok := m.mu.parts[name]
	if !ok {
		return fmt.Errorf("compaction: partition %s not registered", name)
	}
	ps.p.Config = cfg
	m.kickLocked()
	return nil
}

// Kick wakes the workers now (after a roll, a config change).
func (m *Manager) Kick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kickLocked()
}

func (m *Manager) kickLocked() {
	for range cap(m.kickClean) {
		select {
		case m.kickClean <- struct{}{}:
		default:
		}
	}
	select {
	case m.kickRetain <- struct{}{}:
	default:
	}
}

// Status describes a registered partition.
func (m *Manager) Status(name string) (Status, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps, ok := m.mu.parts[name]
	if !ok {
		return Status{}, false
	}
	return Status{Policy: ps.p.Config.Policy, Range: ps.lastRange, LastCleaned: ps.lastCleaned, LastError: ps.lastErr, Checkpoint: ps.checkpoint}, true
}

// Close stops the workers, cancelling cleans in progress, and waits for them.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	m.mu.closed = true
	for _, ps := range m.mu.parts {
		if ps.cancel != nil {
			ps.cancel()
		}
	}
	m.mu.Unlock()
	close(m.closeCh)
	m.wg.Wait()
	return nil
}

// pick chooses the partition to clean next: a forced one (max lag, passed
// delete horizon) first, else the dirtiest at or above its
// min.cleanable.dirty.ratio; it marks it in progress. A partition's delete
// horizon is never earlier than the start of its last pass (cleanLoop drops
// an earlier one), so a passed horizon forces one pass, not a run of them.
func (m *Manager) pick() (*partitionState, Target, context.Context) {
	now := m.now()
	// Snapshot the candidates, then compute their ranges without the lock
	// (it reads the logs).
	type candidate struct {
		ps     *partitionState
		target Target
		next   int64
	}
	var cands []candidate
	m.mu.Lock()
	for _, ps := range m.mu.parts {
		if ps.inProgress || !ps.p.Config.Policy.Compact {
			continue
		}
		if !ps.failedAt.IsZero() && now.Sub(ps.failedAt) < m.cleaner.Load().Backoff {
			continue
		}
		cands = append(cands, candidate{ps, Target{Log: ps.p.Log, Config: ps.p.Config, Txn: ps.p.Txn, FirstDirty: ps.checkpoint}, ps.nextHorizon})
	}
	m.mu.Unlock()
	var best *candidate
	bestScore := -1.0
	ranges := make([]Range, len(cands))
	for i := range cands {
		cd := &cands[i]
		cfg := cd.target.Config.withDefaults()
		r, err := CleanableRange(cd.target, now)
		if err != nil {
			continue
		}
		ranges[i] = r
		if m.metrics != nil {
			m.metrics.Lag(cd.ps.p.Name, r.DirtyBytes, r.DirtyRatio())
		}
		score := r.DirtyRatio()
		switch {
		case r.Forced && r.DirtyBytes > 0, cd.next >= 0 && now.UnixMilli() >= cd.next:
			score = 2
		case r.DirtyBytes == 0 || score < cfg.MinCleanableDirtyRatio:
			continue
		}
		if score > bestScore {
			best, bestScore = cd, score
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range cands {
		cands[i].ps.lastRange = ranges[i]
	}
	// Claim it, unless it was removed, taken or re-checkpointed meanwhile.
	if best == nil || best.ps.removed || best.ps.inProgress || best.ps.checkpoint != best.target.FirstDirty || m.mu.closed {
		return nil, Target{}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	best.ps.inProgress, best.ps.cancel = true, cancel
	return best.ps, Target{Log: best.ps.p.Log, Config: best.ps.p.Config, Txn: best.ps.p.Txn, FirstDirty: best.ps.checkpoint}, ctx
}

func (m *Manager) cleanLoop(i int) {
	defer m.wg.Done()
	// The cleaner, with its key map of log.cleaner.dedupe.buffer.size
	// (128 MiB by default), is made for the first job: a broker without
	// compacted topics never allocates (and zeroes) it.
	var c *Cleaner
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-m.closeCh:
			return
		default:
		}
		m.mu.Lock()
		cc, reconfigured := *m.cleaner.Load(), m.mu.reconfigured
		if i >= cc.Threads {
			m.mu.running[i] = false // Reconfigure may start it again
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		if c != nil && c.cfg.DedupeBufferBytes != cc.DedupeBufferBytes {
			c.Close()
			c = nil
		}
		ps, target, ctx := m.pick()
		if ps == nil {
			t.Reset(cc.Backoff)
			select {
			case <-m.closeCh:
				return
			case <-m.kickClean:
			case <-reconfigured:
			case <-t.C:
			}
			continue
		}
		if c == nil {
			c = newCleaner(cc, m.now, m.throttle)
		}
		start := m.now()
		st, err := c.Clean(ctx, target)
		name := ps.p.Name
		nextHorizon := st.NextDeleteHorizon
		if err == nil {
			m.writeCheckpoint(ps.p.Log, st.MapEnd)
			if nextHorizon >= 0 && nextHorizon < start.UnixMilli() {
				// A horizon that passed before the pass began cannot call
				// for another pass: this one already ran past it, and a
				// pass right after would find the same. Kept, it would
				// score the log 2 at every round, cleaning it back to back
				// and starving every other compacted log (Clean does not
				// report one; this guards against a regression).
				m.logger.Warn("compaction: cleaner reported a delete horizon in the past; ignored",
					"partition", name, "horizon_ms", nextHorizon, "pass_start_ms", start.UnixMilli())
				nextHorizon = -1
			}
		}
		m.mu.Lock()
		ps.cancel()
		ps.inProgress, ps.cancel = false, nil
		if err == nil {
			ps.checkpoint, ps.nextHorizon, ps.lastCleaned, ps.lastErr, ps.failedAt = st.MapEnd, nextHorizon, m.now(), nil, time.Time{}
		} else if !ps.removed {
			ps.lastErr, ps.failedAt = err, m.now()
		}
		m.mu.done.Broadcast()
		removed := ps.removed
		m.mu.Unlock()
		switch {
		case err == nil && m.metrics != nil:
			m.metrics.Cleaned(name, st)
		case err != nil && !removed && !errors.Is(err, context.Canceled):
			m.logger.Warn("compaction: cleaning failed", "partition", name, "err", err)
			if m.metrics != nil {
				m.metrics.CleanFailed(name, err)
			}
		}
	}
}

func (m *Manager) retentionLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.RetentionCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-m.closeCh:
			return
		case <-t.C:
		case <-m.kickRetain:
		}
		m.mu.Lock()
		parts := make([]Partition, 0, len(m.mu.parts))
		for _, ps := range m.mu.parts {
			if ps.p.Config.Policy.Delete {
				parts = append(parts, ps.p)
			}
		}
		m.mu.Unlock()
		for _, p := range parts {
			limit := int64(-1)
			if p.LocalRetentionLimit != nil {
				limit = p.LocalRetentionLimit()
			}
			res, err := RetainLocal(p.Log, p.Config, m.now(), limit)
			if err != nil {
				if !errors.Is(err, hotlog.ErrClosed) {
					m.logger.Warn("compaction: retention failed", "partition", p.Name, "err", err)
				}
				continue
			}
			if res.SegmentsDeleted > 0 && m.metrics != nil {
				m.metrics.RetentionDeleted(p.Name, res)
			}
		}
	}
}

// The checkpoint file: "0\n<first dirty offset>\n", Kafka's checkpoint style.
func (m *Manager) readCheckpoint(l *hotlog.Log) int64 {
	if m.cfg.FS == nil {
		return 0
	}
	b, err := vfs.ReadFile(m.cfg.FS, filepath.Join(l.Dir(), checkpointFile), 64)
	if err != nil {
		return 0
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || lines[0] != "0" {
		return 0
	}
	v, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}

func (m *Manager) writeCheckpoint(l *hotlog.Log, off int64) {
	if m.cfg.FS == nil {
		return
	}
	data := []byte("0\n" + strconv.FormatInt(off, 10) + "\n")
	if err := vfs.WriteFileAtomic(m.cfg.FS, filepath.Join(l.Dir(), checkpointFile), data); err != nil {
		m.logger.Warn("compaction: writing cleaner checkpoint", "dir", l.Dir(), "err", err)
	}
}
