package broker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sediment-io/sediment/compaction"
	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/metadata"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/tiering"
)

// Tiered storage glue: the broker satisfies tiering's Committer and
// Leadership over the metadata node, hands every partition it leads to a
// tiering.Manager (uploads, retention across both tiers, orphan cleaning),
// serves Fetch below the local log start from the bucket, answers
// ListOffsets -2 (earliest across tiers), -4 (earliest local) and -5 (latest
// tiered), and deletes a deleted topic's objects (tierdelete.go).

// TieringConfig enables tiered storage (EnableTiering).
type TieringConfig struct {
	// Store is the bucket (objectstore/fs or objectstore/s3).
	Store objectstore.Store
	// Options tune the tiering.Manager; Store, Committer, Leadership are
	// set here, CacheDir defaults to DataDir/tier-cache.
	Options tiering.Options
	// SyncInterval is how often partitions and topic configs are synced
	// with the Manager [200ms].
	SyncInterval time.Duration
	// RemoteFetchTimeout bounds one remote read [10s]: a Fetch's read
	// from the bucket gives up then (KAFKA_STORAGE_ERROR, retriable), and
	// so do ListOffsets' and DeleteRecords' reads of the remote log start.
	RemoteFetchTimeout time.Duration
	// RemoteFetchMaxWait bounds how long a Fetch waits for its reads from
	// the bucket [500ms], as Kafka's remote.fetch.max.wait.ms: a read not
	// done by then goes on in the background (filling the chunk cache),
	// and the partition is answered without records and without error,
	// for the client to ask again, as Kafka's DelayedRemoteFetch answers
	// on expiry. A slow bucket holds neither the fetch's local partitions
	// nor the consumer for RemoteFetchTimeout.
	RemoteFetchMaxWait time.Duration
	// RemoteDeleteInterval is how often the broker looks for deleted topics
	// whose bucket objects are still to be deleted [2s] (tierdelete.go).
	RemoteDeleteInterval time.Duration
	// RemoteDeleteGrace is how long the record of a deleted topic's
	// pending deletion is kept, passes going on, after a pass first finds
	// nothing of it left [5m]: an upload in flight when the topic was
	// deleted (a stale leader's, that had not yet seen the delete) lands
	// after that pass and is deleted by a later one.
	RemoteDeleteGrace time.Duration
}

type tierGlue struct {
	b   *Broker
	cfg TieringConfig
	m   *tiering.Manager

	ctx       context.Context // done once closing
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	collector *tierCollector
	// emptyDeletePasses counts the deletion worker's looks at a deleted
	// topic that found nothing of it left (tierdelete.go; for tests).
	emptyDeletePasses atomic.Int64
	// fetchExpired counts the remote reads a Fetch stopped waiting for
	// at RemoteFetchMaxWait (answered without records).
	fetchExpired atomic.Int64

	mu struct {
		sync.Mutex
		parts map[tiering.TopicPartition]*tierPart
		// readErrLogged: when a failed remote read of the partition
		// was last logged (logRemoteReadError).
		readErrLogged map[*partition]time.Time
		// reads: the background remote read of each partition in
		// flight (remoteread.go), at most one a partition.
		reads map[*tiering.Partition]*remoteRead
	}
}

// remoteReadErrorEvery is how often a partition's failed remote reads are
// logged while they go on (each consumer retries its fetch at once).
const remoteReadErrorEvery = time.Minute

// logRemoteReadError logs a Fetch's failed remote read of p, at most once
// a remoteReadErrorEvery per partition: before, the client got
// KAFKA_STORAGE_ERROR and the broker logged nothing.
func (g *tierGlue) logRemoteReadError(p *partition, offset int64, err error) {
	g.mu.Lock()
	now := time.Now()
	last, seen := g.mu.readErrLogged[p]
	if seen && now.Sub(last) < remoteReadErrorEvery {
		g.mu.Unlock()
		return
	}
	if g.mu.readErrLogged == nil || len(g.mu.readErrLogged) > 10000 {
		g.mu.readErrLogged = map[*partition]time.Time{}
	}
	g.mu.readErrLogged[p] = now
	g.mu.Unlock()
	g.b.log.Warn("tiering: a fetch's read from the bucket failed; the client gets a retriable error (logged once a minute per partition)",
		"topic", p.topic, "partition", p.id, "offset", offset, "err", err)
}

type tierPart struct {
	p  *partition
	tp *tiering.Partition
}

// tierGlues maps a Broker to its glue (kept outside Broker so the glue stays
// in this file).
var tierGlues sync.Map

func init() {
	errorTable = append(errorTable,
		struct {
			err  error
			code *kerr.Error
		}{tiering.ErrOffsetOutOfRange, kerr.OffsetOutOfRange},
		struct {
			err  error
			code *kerr.Error
		}{tiering.ErrUnavailable, kerr.KafkaStorageError},
		struct {
			err  error
			code *kerr.Error
		}{tiering.ErrClosed, kerr.NotLeaderForPartition},
	)
}

// EnableTiering starts tiered storage on b: Config.Tiering does it before
// the broker serves; a caller of its own calls it once, right after New,
// and until then the broker serves its partitions as local-only.
func (b *Broker) EnableTiering(cfg TieringConfig) error {
	if cfg.Store == nil {
		return errors.New("broker: TieringConfig.Store is nil")
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = 200 * time.Millisecond
	}
	if cfg.RemoteFetchTimeout <= 0 {
		cfg.RemoteFetchTimeout = 10 * time.Second
	}
	if cfg.RemoteFetchMaxWait <= 0 {
		cfg.RemoteFetchMaxWait = 500 * time.Millisecond
	}
	g := &tierGlue{b: b, cfg: cfg}
	g.mu.parts = map[tiering.TopicPartition]*tierPart{}
	opts := cfg.Options
	opts.Store, opts.Committer, opts.Leadership = cfg.Store, g, g
	opts.Leases = g // remote retention under leases (tiercompact.go)
	// Remote lookups by timestamp walk compressed batches as local ones do.
	opts.ScanRecords = func(batch []byte, from, ts int64) (int64, int64, bool, error) {
		h, err := hotlog.ParseBatchHeader(batch)
		if err != nil {
			return 0, 0, false, err
		}
		return scanRecords(&h, batch, from, func(t int64) bool { return t >= ts })
	}
	if opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(b.cfg.DataDir, "tier-cache")
	}
	if opts.Logger == nil {
		opts.Logger = b.log.With("part", "tiering")
	}
	m, err := tiering.New(opts)
	if err != nil {
		return err
	}
	g.m = m
	if _, loaded := tierGlues.LoadOrStore(b, g); loaded {
		m.Close()
		return errors.New("broker: tiering already enabled")
	}
	g.collector = &tierCollector{g: g}
	if err := b.metrics.reg.Register(g.collector); err != nil {
		tierGlues.Delete(b)
		m.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.ctx, g.cancel = ctx, cancel
	g.wg.Add(1)
	go pprof.Do(ctx, pprof.Labels("sediment", "tiering-sync"), func(ctx context.Context) {
		defer g.wg.Done()
		g.loop(ctx)
	})
	g.startRemoteCompaction(ctx) // tiercompact.go
	g.startRemoteDeletion(ctx)   // tierdelete.go
	return nil
}

// tier returns b's glue, or nil without tiering.
func (b *Broker) tier() *tierGlue {
	if g, ok := tierGlues.Load(b); ok {
		return g.(*tierGlue)
	}
	return nil
}

// closeTiering stops the glue and the Manager (Close calls it before the
// logs close).
func (b *Broker) closeTiering() {
	g := b.tier()
	if g == nil {
		return
	}
	tierGlues.Delete(b)
	g.b.metrics.reg.Unregister(g.collector)
	g.mu.Lock() // no background read starts after this (startRead)
	g.cancel()
	g.mu.Unlock()
	g.wg.Wait()
	g.m.Close()
}

// TieringManager returns the broker's tiering.Manager (nil without tiering),
// for status and metrics.
func (b *Broker) TieringManager() *tiering.Manager {
	if g := b.tier(); g != nil {
		return g.m
	}
	return nil
}

// RemoteLog implements tiering.Committer.
func (g *tierGlue) RemoteLog(_ context.Context, tp tiering.TopicPartition) (tiering.RemoteLog, error) {
	mp, ok := g.b.meta.State().Partition(metadata.UUID(tp.TopicID), tp.Partition)
	if !ok {
		return tiering.RemoteLog{}, fmt.Errorf("broker: %w (%w): %s", errUnknownTopicOrPartition, tiering.ErrUnknownPartition, tp)
	}
	r := mp.Remote
	return tiering.RemoteLog{ManifestKey: r.ManifestKey, ManifestVersion: r.ManifestVersion, StartOffset: r.StartOffset,
		EndOffset: r.EndOffset, LeaderEpoch: r.LeaderEpoch}, nil
}

// CommitRemoteLog implements tiering.Committer through the metadata log.
func (g *tierGlue) CommitRemoteLog(ctx context.Context, tp tiering.TopicPartition, epoch int32, expected int64, key string, start, end int64) error {
	return g.commitRemoteLog(ctx, &metadata.CommitRemoteLog{TopicID: metadata.UUID(tp.TopicID), Partition: tp.Partition,
		LeaderEpoch: epoch, ExpectedManifestVersion: expected, ManifestKey: key, StartOffset: start, EndOffset: end})
}

// CommitRemoteLogDeleted implements tiering.RemoteLogDeleter (KIP-950).
func (g *tierGlue) CommitRemoteLogDeleted(ctx context.Context, tp tiering.TopicPartition, epoch int32, expected int64, key string,
	start int64, fence tiering.Fence) error {
	return g.commitRemoteLog(ctx, &metadata.CommitRemoteLog{TopicID: metadata.UUID(tp.TopicID), Partition: tp.Partition,
		LeaderEpoch: epoch, ExpectedManifestVersion: expected, ManifestKey: key, StartOffset: start, EndOffset: start,
		Lease: metadata.LeaseFence{Kind: fence.Kind, Resource: fence.Resource, Holder: fence.Holder, Token: fence.Token}, DeleteRemoteLog: true})
}

// CommitRemoteLogTruncated implements tiering.RemoteLogTruncator.
func (g *tierGlue) CommitRemoteLogTruncated(ctx context.Context, tp tiering.TopicPartition, epoch int32, expected int64, key string, start, end int64) error {
	return g.commitRemoteLog(ctx, &metadata.CommitRemoteLog{TopicID: metadata.UUID(tp.TopicID), Partition: tp.Partition,
		LeaderEpoch: epoch, ExpectedManifestVersion: expected, ManifestKey: key, StartOffset: start, EndOffset: end, TruncateRemoteLog: true})
}

// commitRemoteLog proposes cmd, with its refusals as tiering's errors.
func (g *tierGlue) commitRemoteLog(ctx context.Context, cmd *metadata.CommitRemoteLog) error {
	_, _, err := g.b.store.propose(ctx, cmd)
	switch {
	case errors.Is(err, metadata.ErrLeaseLost):
		return fmt.Errorf("%w: %w", tiering.ErrLeaseLost, err)
	case errors.Is(err, metadata.ErrStaleEpoch):
		return fmt.Errorf("%w: %w", tiering.ErrFenced, err)
	case errors.Is(err, metadata.ErrManifestConflict):
		return fmt.Errorf("%w: %w", tiering.ErrConflict, err)
	}
	return err
}

// LeaderEpoch implements tiering.Leadership.
func (g *tierGlue) LeaderEpoch(tp tiering.TopicPartition) (int32, bool) {
	mp, ok := g.b.meta.State().Partition(metadata.UUID(tp.TopicID), tp.Partition)
	if !ok || mp.Leader != g.b.cfg.NodeID {
		return 0, false
	}
	return mp.LeaderEpoch, true
}

func (g *tierGlue) loop(ctx context.Context) {
	t := time.NewTicker(g.cfg.SyncInterval)
	defer t.Stop()
	for {
		g.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sync opens every partition this broker leads, hands it to the Manager with
// its topic's settings, and drops partitions no longer led or closed (a
// deleted topic's objects are deleted by tierdelete.go).
func (g *tierGlue) sync(ctx context.Context) {
	b := g.b
	if b.isStopping() {
		return
	}
	st := b.meta.State()
	for _, t := range st.Topics() {
		for idx, mp := range t.Partitions {
			if mp.Leader == b.cfg.NodeID {
				b.store.partition(st, t.Name, int32(idx)) // opens it if needed
			}
		}
	}
	live := map[tiering.TopicPartition]bool{}
	for _, p := range b.allPartitions() {
		tp := tiering.TopicPartition{Topic: p.topic, TopicID: p.topicID, Partition: p.id}
		t, ok := st.TopicByID(p.topicID)
		if !ok {
			continue
		}
		live[tp] = true
		cfg := g.topicConfig(t.Configs)
		g.mu.Lock()
		tpart := g.mu.parts[tp]
		g.mu.Unlock()
		if tpart != nil && tpart.p != p {
			g.m.RemovePartition(tp)
			tpart = nil
		}
		if tpart == nil {
			// Only data below the last stable offset is uploaded: a
			// segment holding part of an open transaction waits for
			// its marker (the marker's index entry then goes with it).
			tp2, err := g.m.AddPartition(tiering.PartitionOptions{TopicPartition: tp, Log: p.log, Config: cfg, LastStableOffset: p.lastStableOffset})
			if err != nil {
				continue
			}
			tpart = &tierPart{p: p, tp: tp2}
			g.mu.Lock()
			g.mu.parts[tp] = tpart
			g.mu.Unlock()
		}
		tpart.tp.SetConfig(cfg)
	}
	g.mu.Lock()
	var gone []tiering.TopicPartition
	for tp := range g.mu.parts {
		if !live[tp] {
			gone = append(gone, tp)
			delete(g.mu.parts, tp)
		}
	}
	g.mu.Unlock()
	for _, tp := range gone {
		g.m.RemovePartition(tp)
	}
}

// topicConfig reads a topic's tiering settings (Kafka names, broker defaults).
func (g *tierGlue) topicConfig(set map[string]string) tiering.TopicConfig {
	b := g.b
	enable, _ := b.topicConfigValue(set, "remote.storage.enable")
	copyDisable, _ := b.topicConfigValue(set, "remote.log.copy.disable")
	deleteOnDisable, _ := b.topicConfigValue(set, "remote.log.delete.on.disable")
	c := tiering.TopicConfig{
		RemoteStorageEnable:      strings.EqualFold(enable, "true"),
		RemoteLogCopyDisable:     strings.EqualFold(copyDisable, "true"),
		RemoteLogDeleteOnDisable: strings.EqualFold(deleteOnDisable, "true"),
		RetentionMs:              configInt(b, set, "retention.ms"),
		RetentionBytes:           configInt(b, set, "retention.bytes"),
		LocalRetentionMs:         configInt(b, set, "local.retention.ms"),
		LocalRetentionBytes:      configInt(b, set, "local.retention.bytes"),
	}
	if policy, err := compaction.ParsePolicy(configString(b, set, "cleanup.policy")); err == nil && !policy.Delete {
		// cleanup.policy=compact alone: nothing leaves the log by time or
		// size, as in Kafka and in a local compacted log; the remote log
		// keeps every key's latest value whatever its age. Before, the
		// total retention (7 days by default) expired remote segments,
		// and with them every key not written again since (a
		// compaction review). The hot tier keeps what it kept: its
		// local.retention.* of -2 still means retention.ms/bytes, since
		// everything below the remote end is in the bucket.
		if c.LocalRetentionMs == -2 {
			c.LocalRetentionMs = c.RetentionMs
		}
		if c.LocalRetentionBytes == -2 {
			c.LocalRetentionBytes = c.RetentionBytes
		}
		c.RetentionMs, c.RetentionBytes = -1, -1
	}
	return c
}

// tierPartition returns the tiering partition of p, adding it if the sync
// loop has not yet.
func (g *tierGlue) tierPartition(p *partition) *tiering.Partition {
	tp := tiering.TopicPartition{Topic: p.topic, TopicID: p.topicID, Partition: p.id}
	g.mu.Lock()
	defer g.mu.Unlock()
	if tpart := g.mu.parts[tp]; tpart != nil && tpart.p == p {
		return tpart.tp
	}
	if tp2, ok := g.m.Partition(tp); ok {
		return tp2 // the sync loop is about to replace it; its remote reads work
	}
	tp2, err := g.m.AddPartition(tiering.PartitionOptions{TopicPartition: tp, Log: p.log, Config: tiering.TopicConfig{RetentionMs: -1, RetentionBytes: -1},
		LastStableOffset: p.lastStableOffset})
	if err != nil {
		return nil
	}
	g.mu.parts[tp] = &tierPart{p: p, tp: tp2}
	return tp2
}

// logStartOffset is the earliest offset across both tiers (Fetch's
// log_start_offset and ListOffsets -2). When the remote log's state cannot
// be read (the manifest not in the cache and the bucket not answering), the
// error wraps tiering.ErrUnavailable (KAFKA_STORAGE_ERROR, retriable): the
// local log start alone would hide the whole remote history from a
// consumer resetting to earliest, and move a follower's log start up.
func (b *Broker) logStartOffset(ctx context.Context, p *partition) (int64, error) {
	if g := b.tier(); g != nil {
		if tp := g.tierPartition(p); tp != nil {
			// Bounded as a remote read is: with the manifest not cached
			// and the bucket hanging, ListOffsets waited for the object
			// store's retries, minutes, with no answer to the client.
			ctx, cancel := context.WithTimeout(ctx, g.cfg.RemoteFetchTimeout)
			defer cancel()
			return tp.EarliestOffset(ctx)
		}
	}
	return p.log.LogStartOffset(), nil
}

// latestTieredOffset answers ListOffsets -5: the highest offset in the
// bucket, or -1.
func (b *Broker) latestTieredOffset(ctx context.Context, p *partition) (int64, error) {
	if g := b.tier(); g != nil {
		if tp := g.tierPartition(p); tp != nil {
			ctx, cancel := context.WithTimeout(ctx, g.cfg.RemoteFetchTimeout) // as logStartOffset
			defer cancel()
			return tp.LatestTieredOffset(ctx)
		}
	}
	return -1, nil
}

// earliestPendingUploadOffset answers ListOffsets -6 (KIP-1023), as Kafka's
// UnifiedLog: for a topic with remote storage on, the first offset not yet
// in the bucket (the last tiered offset + 1, at least the log start); with
// nothing in the bucket, the log start while the local log still starts
// there, else -1 (this replica does not know the uploaded segments yet);
// -1 for a topic without remote storage.
func (b *Broker) earliestPendingUploadOffset(ctx context.Context, st *metadata.State, p *partition) (int64, error) {
	t, ok := st.Topic(p.topic)
	if !ok {
		return -1, nil
	}
	if on, _ := b.topicConfigValue(t.Configs, "remote.storage.enable"); !strings.EqualFold(on, "true") || b.tier() == nil {
		return -1, nil
	}
	last, err := b.latestTieredOffset(ctx, p)
	if err != nil {
		return -1, err
	}
	start, err := b.logStartOffset(ctx, p)
	if err != nil {
		return -1, err
	}
	if last < 0 {
		if p.log.LogStartOffset() == start {
			return start, nil
		}
		return -1, nil
	}
	return max(last+1, start), nil
}

// remoteOffsetForTimestamp answers ListOffsets by timestamp from the bucket
// first (older data); -1 when the bucket has no such record. Bounded as a
// remote read is (remote-fetch-timeout): with the bucket hanging it waited
// for the object store's retries, five minutes, holding every later
// request on the connection (a replay review). Kafka bounds it too
// (remote.list.offsets.request.timeout.ms, KIP-1075).
func (b *Broker) remoteOffsetForTimestamp(ctx context.Context, p *partition, ts int64) (int64, int64, error) {
	if g := b.tier(); g != nil {
		if tp := g.tierPartition(p); tp != nil {
			ctx, cancel := context.WithTimeout(ctx, g.cfg.RemoteFetchTimeout)
			defer cancel()
			off, t, err := tp.OffsetForTimestamp(ctx, ts)
			if err == nil && off >= 0 && off < p.log.LogStartOffset() {
				return off, t, nil
			}
			return -1, -1, err
		}
	}
	return -1, -1, nil
}

// remoteAborted lists the aborted transactions of a remote read of [from,
// to): from the remote segments' transaction indexes, then, unless those
// show that no later marker matters, from the local log's (segments in both
// tiers have the same entries: each marker counts once).
func remoteAborted(ctx context.Context, tp *tiering.Partition, p *partition, from, to int64) ([]hotlog.AbortedTxn, error) {
	list, complete, err := tp.AbortedTxns(ctx, from, to)
	if err != nil || complete {
		return list, err
	}
	local, err := p.log.AbortedTxns(from, to)
	if err != nil {
		return nil, err
	}
	for _, a := range local {
		if n := len(list); n == 0 || a.LastOffset > list[n-1].LastOffset {
			list = append(list, a)
		}
	}
	return list, nil
}

// tierCollector exports the tiering metrics to the broker's registry.
type tierCollector struct{ g *tierGlue }

var (
	tierCounterDesc = prometheus.NewDesc("sediment_tier_events_total",
		"Tiered-storage events and bytes, by kind.", []string{"kind"}, nil)
	tierRequestDesc = prometheus.NewDesc("sediment_tier_object_store_requests_total",
		"Object-store requests made by tiering, by kind.", []string{"kind"}, nil)
	tierLatencyDesc = prometheus.NewDesc("sediment_tier_object_store_request_seconds_total",
		"Summed latency of the object-store requests made by tiering.", nil, nil)
	tierCacheDesc = prometheus.NewDesc("sediment_tier_cache_bytes", "Bytes in the remote-read chunk cache.", nil, nil)
	tierLagDesc   = prometheus.NewDesc("sediment_tier_upload_lag_bytes",
		"Local bytes not yet in the bucket, by partition.", []string{"topic", "partition"}, nil)
	tierLagOffDesc = prometheus.NewDesc("sediment_tier_upload_lag_offsets",
		"Offsets below the high watermark not yet in the bucket, by partition.", []string{"topic", "partition"}, nil)
	tierRemoteDesc = prometheus.NewDesc("sediment_tier_remote_bytes",
		"Bytes of the partition in the bucket.", []string{"topic", "partition"}, nil)
)

func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{tierCounterDesc, tierRequestDesc, tierLatencyDesc, tierCacheDesc, tierLagDesc, tierLagOffDesc, tierRemoteDesc} {
		ch <- d
	}
}

func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.g.m.Metrics()
	for kind, v := range map[string]int64{
		"segments_uploaded": m.SegmentsUploaded, "bytes_uploaded": m.BytesUploaded, "upload_errors": m.UploadErrors,
		"commits": m.Commits, "segments_expired": m.SegmentsExpired, "local_deletions": m.LocalSegmentsDeleted,
		"orphans_deleted": m.OrphansDeleted, "remote_reads": m.RemoteReads, "remote_read_errors": m.ReadErrors,
		"bytes_served": m.BytesServed, "bytes_downloaded": m.BytesDownloaded, "cache_hits": m.CacheHits,
		"cache_misses": m.CacheMisses, "cache_evictions": m.CacheEvictions, "prefetches": m.Prefetches,
		"corrupt_chunks": m.CorruptChunks, "corrupt_reads": m.CorruptReads, "segments_deleted_on_disable": m.SegmentsDeletedOnDisable,
		"remote_fetch_expired": c.g.fetchExpired.Load(),
	} {
		ch <- prometheus.MustNewConstMetric(tierCounterDesc, prometheus.CounterValue, float64(v), kind)
	}
	for kind, v := range map[string]int64{"put": m.Puts, "get": m.Gets, "head": m.Heads, "list": m.Lists, "delete": m.Deletes, "error": m.RequestErrors} {
		ch <- prometheus.MustNewConstMetric(tierRequestDesc, prometheus.CounterValue, float64(v), kind)
	}
	ch <- prometheus.MustNewConstMetric(tierLatencyDesc, prometheus.CounterValue, m.RequestLatency.Seconds())
	ch <- prometheus.MustNewConstMetric(tierCacheDesc, prometheus.GaugeValue, float64(m.CacheBytes))
	c.g.mu.Lock()
	parts := make([]*tierPart, 0, len(c.g.mu.parts))
	for _, p := range c.g.mu.parts {
		parts = append(parts, p)
	}
	c.g.mu.Unlock()
	for _, p := range parts {
		st := p.tp.Status()
		topic, part := st.Partition.Topic, strconv.Itoa(int(st.Partition.Partition))
		ch <- prometheus.MustNewConstMetric(tierLagDesc, prometheus.GaugeValue, float64(st.UploadLagBytes), topic, part)
		ch <- prometheus.MustNewConstMetric(tierLagOffDesc, prometheus.GaugeValue, float64(st.UploadLagOffsets), topic, part)
		ch <- prometheus.MustNewConstMetric(tierRemoteDesc, prometheus.GaugeValue, float64(st.RemoteBytes), topic, part)
	}
}

// deleteRecordsBefore raises the log start to off in both tiers
// (DeleteRecords).
func (b *Broker) deleteRecordsBefore(ctx context.Context, p *partition, off int64) error {
	if g := b.tier(); g != nil {
		if tp := g.tierPartition(p); tp != nil {
			err := tp.DeleteRecordsBefore(ctx, off)
			if !errors.Is(err, tiering.ErrNotLeader) {
				return err
			}
		}
	}
	if off > p.log.LogStartOffset() {
		return p.log.DeleteBefore(off)
	}
	return nil
}
