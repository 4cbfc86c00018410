package broker

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sediment-io/sediment/compaction"
	"github.com/sediment-io/sediment/metadata"
	"github.com/sediment-io/sediment/tiering"
)

// Tiered compaction wired into the broker: for every partition this broker
// leads whose topic has remote.storage.enable=true and a cleanup.policy with
// compact, a worker goroutine (owned by the tiering glue) checks the remote
// log's dirty ratio every CleanerConfig.RemoteInterval and, when it reaches
// min.cleanable.dirty.ratio, takes the partition's "compact" lease in the
// metadata log (compaction.RunLeased over brokerLeases) and runs one remote
// pass (compaction.Cleaner.CleanRemote) whose manifest commit carries the
// lease's fencing token (tierGlue.CommitRemoteLogFenced).

// brokerLeases implements compaction.Leases over the metadata log.
type brokerLeases struct {
	b      *Broker
	holder string
	ttl    time.Duration
}

func (b *Broker) leases(holder string, ttl time.Duration) brokerLeases {
	return brokerLeases{b: b, holder: holder, ttl: ttl}
}

func leaseErr(err error) error {
	switch {
	case errors.Is(err, metadata.ErrLeaseHeld):
		return fmt.Errorf("%w: %w", compaction.ErrLeaseHeld, err)
	case errors.Is(err, metadata.ErrLeaseLost), errors.Is(err, metadata.ErrLeaseExpired):
		return fmt.Errorf("%w: %w", compaction.ErrLeaseLost, err)
	}
	return err
}

// Acquire implements compaction.Leases.
func (l brokerLeases) Acquire(ctx context.Context, kind compaction.LeaseKind, partition string) (compaction.Lease, error) {
	res, _, err := l.b.store.propose(ctx, &metadata.AcquireLease{Kind: string(kind), Resource: partition, Holder: l.holder,
		TTLMs: l.ttl.Milliseconds()})
	if err != nil {
		return compaction.Lease{}, leaseErr(err)
	}
	l.b.leaseMetrics().held.WithLabelValues(string(kind)).Inc()
	return compaction.Lease{Kind: kind, Partition: partition, Holder: l.holder, Token: res.LeaseToken,
		Expires: time.UnixMilli(res.LeaseExpiresMs)}, nil
}

// Renew implements compaction.Leases.
func (l brokerLeases) Renew(ctx context.Context, lease compaction.Lease) (compaction.Lease, error) {
	res, _, err := l.b.store.propose(ctx, &metadata.RenewLease{Kind: string(lease.Kind), Resource: lease.Partition,
		Holder: lease.Holder, Token: lease.Token, TTLMs: l.ttl.Milliseconds()})
	if err != nil {
		err = leaseErr(err)
		if errors.Is(err, compaction.ErrLeaseLost) {
			l.b.leaseMetrics().lost.WithLabelValues(string(lease.Kind)).Inc()
		}
		return lease, err
	}
	lease.Expires = time.UnixMilli(res.LeaseExpiresMs)
	return lease, nil
}

// Release implements compaction.Leases.
func (l brokerLeases) Release(ctx context.Context, lease compaction.Lease) error {
	_, _, err := l.b.store.propose(ctx, &metadata.ReleaseLease{Kind: string(lease.Kind), Resource: lease.Partition,
		Holder: lease.Holder, Token: lease.Token})
	return leaseErr(err)
}

func fenceOf(l compaction.Lease) tiering.Fence {
	return tiering.Fence{Kind: string(l.Kind), Resource: l.Partition, Holder: l.Holder, Token: l.Token}
}

// CommitRemoteLogFenced implements tiering.FencedCommitter.
func (g *tierGlue) CommitRemoteLogFenced(ctx context.Context, tp tiering.TopicPartition, epoch int32, expected int64, key string,
	start, end int64, fence tiering.Fence) error {
	return g.commitRemoteLog(ctx, &metadata.CommitRemoteLog{TopicID: metadata.UUID(tp.TopicID), Partition: tp.Partition,
		LeaderEpoch: epoch, ExpectedManifestVersion: expected, ManifestKey: key, StartOffset: start, EndOffset: end,
		Lease: metadata.LeaseFence{Kind: fence.Kind, Resource: fence.Resource, Holder: fence.Holder, Token: fence.Token}})
}

// RunLeased implements tiering.JobLeases: the remote part of retention runs
// under the partition's "retention" lease.
func (g *tierGlue) RunLeased(ctx context.Context, tp tiering.TopicPartition, kind string,
	job func(ctx context.Context, fence tiering.Fence) error) error {
	ttl := g.b.cfg.Cleaner.LeaseTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	leases := g.b.leases(fmt.Sprintf("broker-%d", g.b.cfg.NodeID), ttl)
	err := compaction.RunLeased(ctx, leases, compaction.LeaseKind(kind), tp.String(), nil,
		func(ctx context.Context, l compaction.Lease) error { return job(ctx, fenceOf(l)) })
	if errors.Is(err, compaction.ErrLeaseLost) {
		g.b.leaseMetrics().lost.WithLabelValues(kind).Inc()
	}
	return err
}

// RemoteCleanStatus is the tiered-compaction state of one partition.
type RemoteCleanStatus struct {
	Range       compaction.RemoteRange
	LastCleaned time.Time
	LastError   string
	LastStats   compaction.Stats
	BytesBefore int64 // of the groups replaced by the last pass
	BytesAfter  int64
	// Forced is set when the last look found max.compaction.lag.ms
	// forcing a pass below min.cleanable.dirty.ratio.
	Forced bool
	// NextDeleteHorizon (Unix ms, -1 none) is when the earliest
	// tombstone or marker the last pass kept may go: a pass is due then,
	// dirty or not, as for the local log.
	NextDeleteHorizon int64

	// The oldest uncleaned batch's timestamp, kept while the remote log's
	// first dirty offset and segment stay the same (it is read from the
	// bucket).
	dirtyStem          string
	dirtyFrom, dirtyTs int64
}

// remoteCompactor runs tiered compaction for the partitions this broker
// leads. Its goroutine is started by EnableTiering and stopped with the glue.
type remoteCompactor struct {
	g       *tierGlue
	leases  brokerLeases
	cleaner *compaction.Cleaner // made at the first pass (its key map is large)

	mu struct {
		sync.Mutex
		status map[string]*RemoteCleanStatus
	}
}

func (g *tierGlue) startRemoteCompaction(ctx context.Context) {
	cc := g.b.cfg.Cleaner
	interval := cc.RemoteInterval
	if interval == 0 {
		interval = 30 * time.Second
	}
	if interval < 0 {
		return
	}
	ttl := cc.LeaseTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	rc := &remoteCompactor{g: g, leases: g.b.leases(fmt.Sprintf("broker-%d", g.b.cfg.NodeID), ttl)}
	rc.mu.status = map[string]*RemoteCleanStatus{}
	remoteCompactors.Store(g.b, rc)
	g.wg.Add(1)
	go pprof.Do(ctx, pprof.Labels("sediment", "tiered-compaction"), func(ctx context.Context) {
		defer g.wg.Done()
		defer func() {
			remoteCompactors.Delete(g.b)
			if rc.cleaner != nil {
				rc.cleaner.Close()
			}
		}()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rc.round(ctx)
		}
	})
}

// remoteCompactors maps a Broker to its remote compactor (kept outside
// Broker so that the wiring stays in this file).
var remoteCompactors sync.Map

func (b *Broker) remoteCompactor() *remoteCompactor {
	if v, ok := remoteCompactors.Load(b); ok {
		return v.(*remoteCompactor)
	}
	return nil
}

// RemoteCleanStatus returns the tiered-compaction state of a partition this
// broker has looked at.
func (b *Broker) RemoteCleanStatus(topic string, partition int32) (RemoteCleanStatus, bool) {
	rc := b.remoteCompactor()
	if rc == nil {
		return RemoteCleanStatus{}, false
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	s, ok := rc.mu.status[fmt.Sprintf("%s-%d", topic, partition)]
	if !ok {
		return RemoteCleanStatus{}, false
	}
	return *s, true
}

// round looks at every led tiered partition of a compacted topic once.
func (rc *remoteCompactor) round(ctx context.Context) {
	g := rc.g
	st := g.b.meta.State()
	g.mu.Lock()
	parts := make([]*tierPart, 0, len(g.mu.parts))
	for _, p := range g.mu.parts {
		parts = append(parts, p)
	}
	g.mu.Unlock()
	for _, tp := range parts {
		if ctx.Err() != nil {
			return
		}
		t, ok := st.TopicByID(tp.p.topicID)
		if !ok {
			continue
		}
		if _, leader := tp.tp.LeaderEpoch(); !leader {
			continue
		}
		cfg, ok := g.b.tieredCompactionConfig(t.Configs)
		if !ok {
			continue
		}
		if err := rc.cleanPartition(ctx, tp, cfg, false); err != nil && !errors.Is(err, compaction.ErrLeaseHeld) &&
			!errors.Is(err, tiering.ErrNotLeader) && ctx.Err() == nil {
			g.b.log.Warn("tiered compaction failed", "partition", tp.tp.TopicPartition().String(), "err", err)
		}
	}
}

// tieredCompactionConfig returns the cleaner settings of a topic whose
// remote log is compacted (remote.storage.enable and cleanup.policy with
// compact), or ok false.
func (b *Broker) tieredCompactionConfig(set map[string]string) (compaction.TopicConfig, bool) {
	enable, _ := b.topicConfigValue(set, "remote.storage.enable")
	pol, _ := b.topicConfigValue(set, "cleanup.policy")
	policy, err := compaction.ParsePolicy(pol)
	if !strings.EqualFold(enable, "true") || err != nil || !policy.Compact {
		return compaction.TopicConfig{}, false
	}
	cfg := b.compactionConfig(set)
	cfg.Policy = policy
	return cfg, true
}

// cleanPartition runs one remote pass on tp if its remote dirty ratio asks
// for it (or force), under the partition's compact lease.
func (rc *remoteCompactor) cleanPartition(ctx context.Context, tp *tierPart, cfg compaction.TopicConfig, force bool) error {
	name := fmt.Sprintf("%s-%d", tp.p.topic, tp.p.id)
	m, err := tp.tp.Manifest(ctx)
	if err != nil {
		return err
	}
	r := compaction.RemoteCleanableRange(m)
	rc.mu.Lock()
	s := rc.mu.status[name]
	if s == nil {
		s = &RemoteCleanStatus{NextDeleteHorizon: -1}
		rc.mu.status[name] = s
	}
	s.Range, s.Forced = r, false
	// Tombstones (and markers) a pass kept until their delete horizon go
	// in a pass once it passed: before, a remote log compacted to its end
	// kept them until new data made it dirty again (119 tombstones 25
	// minutes past a 60 s delete.retention.ms, in a helper's run), while
	// the local cleaner drops them on time.
	horizonDue := s.NextDeleteHorizon >= 0 && time.Now().UnixMilli() >= s.NextDeleteHorizon
	rc.mu.Unlock()
	ratio := cfg.MinCleanableDirtyRatio
	if ratio <= 0 {
		ratio = 0.5
	}
	if !force && !horizonDue && (r.DirtyBytes == 0 || r.DirtyRatio() < ratio) {
		// max.compaction.lag.ms forces a pass whatever the ratio once the
		// oldest uncleaned data is older than it, as for the local log.
		forced, err := rc.lagForced(ctx, tp, m, r, cfg, s)
		if err != nil || !forced {
			return err
		}
	}
	if rc.cleaner == nil {
		cc := rc.g.b.cfg.Cleaner
		rc.cleaner = compaction.NewCleaner(compaction.CleanerConfig{DedupeBufferBytes: cc.DedupeBufferSize,
			IOMaxBytesPerSecond: cc.IOMaxBytesPerSecond}, nil)
	}
	var pl *compaction.RemotePlan
	err = compaction.RunLeased(ctx, rc.leases, compaction.LeaseCompact, name, nil, func(ctx context.Context, lease compaction.Lease) error {
		var err error
		pl, err = rc.cleaner.CleanRemote(ctx, compaction.RemoteTarget{Remote: tp.tp, Local: tp.p.log, Config: cfg,
			Txn: partitionTxns{tp.p}}, fenceOf(lease))
		return err
	})
	if errors.Is(err, compaction.ErrLeaseLost) {
		rc.g.b.leaseMetrics().lost.WithLabelValues(string(compaction.LeaseCompact)).Inc()
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if errors.Is(err, compaction.ErrLeaseHeld) {
		return err
	}
	if err != nil {
		s.LastError = err.Error()
		return err
	}
	s.LastError = ""
	s.LastCleaned = time.Now()
	if pl != nil {
		s.LastStats, s.BytesBefore, s.BytesAfter = pl.Stats, pl.BytesBefore, pl.BytesAfter
		s.NextDeleteHorizon = pl.Stats.NextDeleteHorizon
		if cm := rc.g.b.cleaner; cm != nil && cm.metrics != nil {
			cm.metrics.Cleaned(name, pl.Stats)
		}
	}
	if m2, err := tp.tp.Manifest(ctx); err == nil {
		s.Range = compaction.RemoteCleanableRange(m2)
	}
	return nil
}

// lagForced reports whether max.compaction.lag.ms forces a remote pass of
// tp: its first dirty segment is older than the lag as a whole (no read), or
// the first dirty batch is (compaction.RemoteDirtyTimestamp, one read of the
// segment's beginning, remembered in s while the first dirty offset and
// segment stay).
func (rc *remoteCompactor) lagForced(ctx context.Context, tp *tierPart, m *tiering.Manifest, r compaction.RemoteRange,
	cfg compaction.TopicConfig, s *RemoteCleanStatus) (bool, error) {
	if cfg.MaxCompactionLag <= 0 || r.DirtyBytes == 0 {
		return false, nil
	}
	now := time.Now()
	for _, seg := range m.Segments {
		if seg.EndOffset <= r.FirstDirty {
			continue
		}
		forced := compaction.RemoteForced(cfg, seg.MaxTimestamp, now)
		if !forced {
			rc.mu.Lock()
			stem, from, ts := s.dirtyStem, s.dirtyFrom, s.dirtyTs
			rc.mu.Unlock()
			if stem != seg.Stem || from != r.FirstDirty {
				var err error
				if stem, ts, err = compaction.RemoteDirtyTimestamp(ctx, tp.tp, m); err != nil {
					return false, err
				}
				from = r.FirstDirty
			}
			forced = compaction.RemoteForced(cfg, ts, now)
			rc.mu.Lock()
			s.dirtyStem, s.dirtyFrom, s.dirtyTs = stem, from, ts
			rc.mu.Unlock()
		}
		rc.mu.Lock()
		s.Forced = forced
		rc.mu.Unlock()
		return forced, nil
	}
	return false, nil
}

// leaseMetrics counts the leases this broker took and lost, by kind.
type leaseMetrics struct {
	held, lost *prometheus.CounterVec
}

var leaseMetricsOf sync.Map // *Broker → *leaseMetrics

func (b *Broker) leaseMetrics() *leaseMetrics {
	if v, ok := leaseMetricsOf.Load(b); ok {
		return v.(*leaseMetrics)
	}
	lm := &leaseMetrics{
		held: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sediment_leases_acquired_total",
			Help: "Leases of background jobs (tiered compaction, remote retention) this broker acquired, by kind."}, []string{"kind"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sediment_leases_lost_total",
			Help: "Leases this broker lost while its job ran (taken over or expired), by kind."}, []string{"kind"}),
	}
	if v, loaded := leaseMetricsOf.LoadOrStore(b, lm); loaded {
		return v.(*leaseMetrics)
	}
	if b.metrics != nil {
		b.metrics.reg.Register(lm.held)
		b.metrics.reg.Register(lm.lost)
	}
	return lm
}
