package broker

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sediment-io/sediment/compaction"
	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/metadata"
)

// The log cleaner and retention workers (package compaction) wired into
// the broker: every partition log this broker opens is registered with a
// compaction.Manager under its topic's cleanup.policy, retention and
// compaction settings; closing or deleting the log unregisters it first;
// a metadata change (AlterConfigs, IncrementalAlterConfigs) updates the
// settings of the registered logs. __consumer_offsets is created with
// cleanup.policy=compact, so it is compacted like any compacted topic.

// CleanerConfig holds the broker-wide settings of the log cleaner and of
// retention (Kafka's names). Zero values take the defaults in brackets.
type CleanerConfig struct {
	// Threads (log.cleaner.threads) [1].
	Threads int
	// DedupeBufferSize (log.cleaner.dedupe.buffer.size) [128 MiB]: the key
	// map of each cleaner thread.
	DedupeBufferSize int64
	// IOMaxBytesPerSecond (log.cleaner.io.max.bytes.per.second) [0: no
	// limit].
	IOMaxBytesPerSecond float64
	// Backoff (log.cleaner.backoff.ms) [15s]: how long an idle cleaner
	// waits before it looks for work again.
	Backoff time.Duration
	// RetentionCheckInterval (log.retention.check.interval.ms) [5m].
	RetentionCheckInterval time.Duration
	// RemoteInterval is how often the remote logs of tiered compacted
	// topics are checked for tiered compaction [30s; negative: never]
	// (tiercompact.go).
	RemoteInterval time.Duration
	// LeaseTTL is the duration of the leases of remote jobs [30s]; a
	// worker renews its lease every third of it.
	LeaseTTL time.Duration
}

// cleaner owns the broker's compaction.Manager and remembers which
// partition holds each registered name and with which settings.
type cleaner struct {
	b        *Broker
	m        *compaction.Manager
	metrics  *compaction.PrometheusMetrics // nil if registration failed
	retained atomic.Int64                  // local segments deleted by retention

	mu struct {
		sync.Mutex
		parts map[string]*registeredLog
	}
}

type registeredLog struct {
	p   *partition
	cfg compaction.TopicConfig
}

// newCleaner starts the workers; closeCleaner stops them.
func newCleaner(b *Broker) *cleaner {
	c := &cleaner{b: b}
	c.mu.parts = make(map[string]*registeredLog)
	var mm compaction.Metrics
	if b.metrics != nil {
		pm, err := compaction.NewPrometheusMetrics(b.metrics.reg)
		if err != nil {
			b.log.Warn("log cleaner metrics not registered", "err", err)
		} else {
			c.metrics, mm = pm, pm
		}
		if err := b.metrics.reg.Register(&retentionCollector{b: b}); err != nil {
			b.log.Warn("retention metrics not registered", "err", err)
		}
	}
	mm = &countingMetrics{Metrics: mm, c: c}
	cc := b.cfg.Cleaner
	c.m = compaction.NewManager(compaction.Config{
		Cleaner: compaction.CleanerConfig{
			Threads:             cc.Threads,
			DedupeBufferBytes:   cc.DedupeBufferSize,
			IOMaxBytesPerSecond: cc.IOMaxBytesPerSecond,
			Backoff:             cc.Backoff,
		},
		RetentionCheckInterval: cc.RetentionCheckInterval,
		FS:                     vfs.Default,
		Logger:                 b.log.With("part", "log-cleaner"),
		Metrics:                mm,
	})
	return c
}

func (c *cleaner) close() {
	if c == nil {
		return
	}
	c.m.Close()
}

func cleanerName(p *partition) string { return fmt.Sprintf("%s-%d", p.topic, p.id) }

// register adds an opened partition log under its topic's settings.
func (c *cleaner) register(p *partition, topicConfigs map[string]string) {
	if c == nil {
		return
	}
	name := cleanerName(p)
	cfg := c.b.compactionConfig(topicConfigs)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.mu.parts[name]; old != nil {
		// A partition of an older topic of the same name whose close has
		// not come yet: its log is going away.
		c.m.Unregister(name)
	}
	if err := c.m.Register(compaction.Partition{Name: name, Log: p.log, Config: cfg, Txn: partitionTxns{p}}); err != nil {
		c.b.log.Warn("log cleaner: registering partition", "partition", name, "err", err)
		delete(c.mu.parts, name)
		return
	}
	c.mu.parts[name] = &registeredLog{p: p, cfg: cfg}
}

// unregister removes a partition before its log is closed or deleted; it
// waits for a clean of it in progress.
func (c *cleaner) unregister(p *partition) {
	if c == nil {
		return
	}
	name := cleanerName(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.mu.parts[name]; r == nil || r.p != p {
		return
	}
	delete(c.mu.parts, name)
	c.m.Unregister(name)
	if c.metrics != nil {
		c.metrics.Forget(name)
	}
}

// sync applies the topic settings of metadata state st to the registered
// partitions whose settings changed.
func (c *cleaner) sync(st *metadata.State) {
	if c == nil || st == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, r := range c.mu.parts {
		t, ok := st.TopicByID(r.p.topicID)
		if !ok {
			continue // deleted: reconcile closes it
		}
		cfg := c.b.compactionConfig(t.Configs)
		if cfg == r.cfg {
			continue
		}
		if err := c.m.UpdateConfig(name, cfg); err != nil {
			c.b.log.Warn("log cleaner: updating partition settings", "partition", name, "err", err)
			continue
		}
		r.cfg = cfg
	}
}

// status reports the cleaner state of a partition (tests, describe).
func (c *cleaner) status(topic string, partition int32) (compaction.Status, bool) {
	if c == nil {
		return compaction.Status{}, false
	}
	return c.m.Status(fmt.Sprintf("%s-%d", topic, partition))
}

// compactionConfig maps a topic's effective configs (overrides over the
// broker's defaults) to the cleaner's settings.
func (b *Broker) compactionConfig(set map[string]string) compaction.TopicConfig {
	get := func(name string) string { v, _ := b.topicConfigValue(set, name); return v }
	ms := func(name string) int64 {
		n, err := strconv.ParseInt(get(name), 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	policy, err := compaction.ParsePolicy(get("cleanup.policy"))
	if err != nil {
		policy = compaction.Policy{Delete: true}
	}
	if strings.EqualFold(get("remote.storage.enable"), "true") {
		// Tiered topics: retention of both tiers is tiering's job
		// (tiering.go), compaction the remote worker's (tiercompact.go):
		// the local cleaner must not swap segments tiering may be
		// uploading.
		policy = compaction.Policy{}
	}
	cfg := compaction.TopicConfig{Policy: policy, RetentionBytes: -1}
	// The compaction package reads a zero as "the default", so Kafka's
	// zeros become the smallest value that means the same.
	if r, err := strconv.ParseFloat(get("min.cleanable.dirty.ratio"), 64); err == nil {
		cfg.MinCleanableDirtyRatio = max(r, math.SmallestNonzeroFloat64)
	}
	cfg.MinCompactionLag = msDuration(ms("min.compaction.lag.ms"), 0)
	cfg.MaxCompactionLag = msDuration(ms("max.compaction.lag.ms"), 0) // Long.MAX_VALUE: none
	if d := ms("delete.retention.ms"); d == 0 {
		cfg.DeleteRetention = -1 // at once
	} else {
		cfg.DeleteRetention = msDuration(d, 0)
	}
	if d := ms("retention.ms"); d == 0 {
		cfg.Retention = time.Nanosecond // every sealed segment
	} else {
		cfg.Retention = msDuration(d, -1)
	}
	if n := ms("retention.bytes"); n > 0 {
		cfg.RetentionBytes = n
	}
	if n := ms("segment.bytes"); n > 0 {
		cfg.SegmentBytes = n
	}
	return cfg
}

// msDuration converts a Kafka millisecond setting; negative or too large
// for a Duration gives none.
func msDuration(ms int64, none time.Duration) time.Duration {
	if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return none
	}
	return time.Duration(ms) * time.Millisecond
}

// maxCheckedBatchBytes bounds the decompressed size of a produced batch's
// records. Kafka has no such bound (its LogValidator streams through any
// batch), but the log cleaner does (compaction's MaxBatchBytes default, the
// same 64 MiB: a compacted log with a larger batch could not be cleaned),
// and it bounds the CPU time a few KB of Produce can cost (a compression
// bomb). Memory does not depend on it: the records are read as they
// decompress (compaction/stream.go). A batch over it is answered
// MESSAGE_TOO_LARGE, as a batch over max.message.bytes is: the Java
// producer then splits a batch of many records and sends the halves again,
// and fails a single record with RecordTooLargeException (CORRUPT_MESSAGE
// would be retried as it is until delivery.timeout.ms).
const maxCheckedBatchBytes = 64 << 20

// checkProducedRecords reads the records of a produced batch that hotlog's
// validation does not: a compressed batch's (Kafka's LogValidator reads
// every record of one; its record count is trusted by what reads the log,
// share groups for one), and, for a compacted topic, every record's key
// (INVALID_RECORD for a keyless one, as Kafka: the cleaner cannot keep it).
// A compressed batch is read as it decompresses, never held whole; records
// of more than maxCheckedBatchBytes decompressed are MESSAGE_TOO_LARGE. A
// payload that does not decompress or parse, or holds other than the
// header's count of records at offset deltas 0..n-1, is CORRUPT_MESSAGE. A
// batch whose header does not parse is left to appendBatch's validation.
//
// It returns the batch to append: the one produced, or, when the topic's
// compression.type names a codec other than the batch's, the batch
// rewritten with that codec at the topic's compression.<codec>.level, as
// Kafka's LogValidator does (the producer's bytes are kept as they are
// only with compression.type producer, the default); a rewritten batch
// over max.message.bytes is MESSAGE_TOO_LARGE, as in Kafka.
func (b *Broker) checkProducedRecords(set map[string]string, records []byte) ([]byte, error) {
	h, err := hotlog.ParseBatchHeader(records)
	if err != nil {
		return records, nil
	}
	compacted := strings.Contains(configString(b, set, "cleanup.policy"), "compact")
	out := records
	if codec, ok := compaction.TopicCodec(configString(b, set, "compression.type")); ok && codec != h.Compression() && !h.IsControl() {
		level := -1
		if name := compressionLevelConfig[codec]; name != "" {
			level = int(configInt(b, set, name))
		}
		maxOut := int(max(configInt(b, set, "max.message.bytes"), 1))
		out, err = compaction.RecompressBatch(records, codec, level, maxCheckedBatchBytes, maxOut, compacted)
	} else {
		switch {
		case compacted:
			err = compaction.CheckKeys(records, maxCheckedBatchBytes)
		case h.Compression() != 0:
			err = compaction.CheckRecords(records, maxCheckedBatchBytes)
		}
	}
	switch {
	case errors.Is(err, compaction.ErrMissingKey):
		return nil, &recordErrors{err: fmt.Errorf("%w: compacted topic cannot accept a record without a key", hotlog.ErrInvalidRecord), indexes: missingKeyIndexes(err)}
	case errors.Is(err, compaction.ErrTooLarge):
		return nil, fmt.Errorf("%w: %v", hotlog.ErrBatchTooLarge, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", hotlog.ErrCorruptBatch, err)
	}
	return out, nil
}

// compressionLevelConfig names the topic config that sets a codec's level
// (KIP-390), by codec number.
var compressionLevelConfig = map[int]string{1: "compression.gzip.level", 3: "compression.lz4.level", 4: "compression.zstd.level"}

// recordErrors is a Produce error naming the records at fault by their index
// in the batch (the response's record errors, KIP-467); clients fail those
// records with it and the rest of the batch with a retriable error
// (librdkafka: _INVALID_DIFFERENT_RECORD).
type recordErrors struct {
	err     error
	indexes []int32
}

func (e *recordErrors) Error() string { return e.err.Error() }
func (e *recordErrors) Unwrap() error { return e.err }

func missingKeyIndexes(err error) []int32 {
	var mk *compaction.MissingKeysError
	if errors.As(err, &mk) {
		return mk.Indexes
	}
	return nil
}

// partitionTxns gives the cleaner a partition's transaction and producer
// state (producers.go): the cleaner stops at the first open transaction,
// removes aborted transactions' records, and keeps each producer's last
// batch header.
type partitionTxns struct{ p *partition }

func (t partitionTxns) FirstUnstableOffset() int64 {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	return t.p.mu.producers.firstUnstable()
}

func (t partitionTxns) AbortedTransactions(from, to int64) ([]compaction.AbortedTxn, error) {
	list, err := t.p.log.AbortedTxns(from, to)
	if err != nil {
		return nil, err
	}
	out := make([]compaction.AbortedTxn, len(list))
	for i, a := range list {
		out[i] = compaction.AbortedTxn{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset, LastOffset: a.LastOffset}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].FirstOffset < out[j].FirstOffset })
	return out, nil
}

func (t partitionTxns) ProducerLastOffset(producerID int64) (int64, bool) {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	e := t.p.mu.producers.m[producerID]
	if e == nil || len(e.batches) == 0 {
		return 0, false
	}
	return e.batches[len(e.batches)-1].lastOffset, true
}

// countingMetrics counts the local segments retention deleted (for
// sediment_retention_segments_deleted_total) and passes every event on.
type countingMetrics struct {
	compaction.Metrics // nil: none
	c                  *cleaner
}

func (m *countingMetrics) Cleaned(p string, st compaction.Stats) {
	if m.Metrics != nil {
		m.Metrics.Cleaned(p, st)
	}
}

func (m *countingMetrics) CleanFailed(p string, err error) {
	if m.Metrics != nil {
		m.Metrics.CleanFailed(p, err)
	}
}

func (m *countingMetrics) Lag(p string, dirty int64, ratio float64) {
	if m.Metrics != nil {
		m.Metrics.Lag(p, dirty, ratio)
	}
}

func (m *countingMetrics) RetentionDeleted(p string, r compaction.RetentionResult) {
	m.c.retained.Add(int64(r.SegmentsDeleted))
	if m.Metrics != nil {
		m.Metrics.RetentionDeleted(p, r)
	}
}
