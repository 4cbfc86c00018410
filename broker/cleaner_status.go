package broker

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Cleaner status for `sediment topic describe` (GET /v1/cleaner on the
// admin endpoint) and the tiered-compaction and retention metrics.

// CleanerStatus is the cleaning state of one partition log on this broker.
type CleanerStatus struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Tier is "local" (the log cleaner of this broker's log) or "remote"
	// (tiered compaction of the bucket's segments, on the leader).
	Tier        string     `json:"tier"`
	Policy      string     `json:"policy"`
	DirtyRatio  float64    `json:"dirty_ratio"`
	DirtyBytes  int64      `json:"dirty_bytes"`
	CleanBytes  int64      `json:"clean_bytes"`
	FirstDirty  int64      `json:"first_dirty"` // the cleaner checkpoint
	LastCleaned *time.Time `json:"last_cleaned,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
}

// CleanerStatuses returns the cleaning state of the partitions of topic (all
// topics if empty) that this broker cleans, ordered by topic, partition and
// tier.
func (b *Broker) CleanerStatuses(topic string) []CleanerStatus {
	var out []CleanerStatus
	if c := b.cleaner; c != nil {
		c.mu.Lock()
		parts := make([]*registeredLog, 0, len(c.mu.parts))
		for _, r := range c.mu.parts {
			parts = append(parts, r)
		}
		c.mu.Unlock()
		for _, r := range parts {
			if topic != "" && r.p.topic != topic {
				continue
			}
			st, ok := c.m.Status(cleanerName(r.p))
			if !ok {
				continue
			}
			cs := CleanerStatus{Topic: r.p.topic, Partition: r.p.id, Tier: "local", Policy: st.Policy.String(),
				DirtyRatio: st.Range.DirtyRatio(), DirtyBytes: st.Range.DirtyBytes, CleanBytes: st.Range.CleanBytes, FirstDirty: st.Checkpoint}
			if !st.LastCleaned.IsZero() {
				t := st.LastCleaned
				cs.LastCleaned = &t
			}
			if st.LastError != nil {
				cs.LastError = st.LastError.Error()
			}
			out = append(out, cs)
		}
	}
	if rc := b.remoteCompactor(); rc != nil {
		rc.mu.Lock()
		for name, s := range rc.mu.status {
			i := strings.LastIndexByte(name, '-')
			p, err := strconv.Atoi(name[i+1:])
			if i < 0 || err != nil || (topic != "" && name[:i] != topic) {
				continue
			}
			cs := CleanerStatus{Topic: name[:i], Partition: int32(p), Tier: "remote", Policy: "compact",
				DirtyRatio: s.Range.DirtyRatio(), DirtyBytes: s.Range.DirtyBytes, CleanBytes: s.Range.CleanBytes,
				FirstDirty: s.Range.FirstDirty, LastError: s.LastError}
			if !s.LastCleaned.IsZero() {
				t := s.LastCleaned
				cs.LastCleaned = &t
			}
			out = append(out, cs)
		}
		rc.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool {
		a, c := out[i], out[j]
		if a.Topic != c.Topic {
			return a.Topic < c.Topic
		}
		if a.Partition != c.Partition {
			return a.Partition < c.Partition
		}
		return a.Tier < c.Tier
	})
	return out
}

// CleanerStatusHandler serves GET /v1/cleaner[?topic=T]: CleanerStatuses as
// a JSON array.
func (b *Broker) CleanerStatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		st := b.CleanerStatuses(r.URL.Query().Get("topic"))
		if st == nil {
			st = []CleanerStatus{}
		}
		json.NewEncoder(w).Encode(st)
	})
}

// retentionCollector exports segments deleted by retention per tier and
// the remote cleaner lag.
type retentionCollector struct{ b *Broker }

var (
	retentionSegmentsDesc = prometheus.NewDesc("sediment_retention_segments_deleted_total",
		"Segments deleted by retention, by tier (local: the log cleaner's retention and tiering's local retention; remote: bucket segments past retention).",
		[]string{"tier"}, nil)
	remoteDirtyDesc = prometheus.NewDesc("sediment_tiered_compaction_dirty_bytes",
		"Bytes of a partition's remote log not yet compacted (the tiered cleaner's lag), on its leader.", []string{"topic", "partition"}, nil)
	remoteLastCleanedDesc = prometheus.NewDesc("sediment_tiered_compaction_last_cleaned_seconds",
		"Unix time of the last tiered-compaction pass of a partition (0: never).", []string{"topic", "partition"}, nil)
)

func (c *retentionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- retentionSegmentsDesc
	ch <- remoteDirtyDesc
	ch <- remoteLastCleanedDesc
}

func (c *retentionCollector) Collect(ch chan<- prometheus.Metric) {
	local := float64(0)
	if cl := c.b.cleaner; cl != nil {
		local = float64(cl.retained.Load())
	}
	remote := float64(0)
	if m := c.b.TieringManager(); m != nil {
		tm := m.Metrics()
		local += float64(tm.LocalSegmentsDeleted)
		remote = float64(tm.SegmentsExpired)
	}
	ch <- prometheus.MustNewConstMetric(retentionSegmentsDesc, prometheus.CounterValue, local, "local")
	ch <- prometheus.MustNewConstMetric(retentionSegmentsDesc, prometheus.CounterValue, remote, "remote")
	for _, s := range c.b.CleanerStatuses("") {
		if s.Tier != "remote" {
			continue
		}
		p := strconv.Itoa(int(s.Partition))
		ch <- prometheus.MustNewConstMetric(remoteDirtyDesc, prometheus.GaugeValue, float64(s.DirtyBytes), s.Topic, p)
		last := 0.0
		if s.LastCleaned != nil {
			last = float64(s.LastCleaned.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(remoteLastCleanedDesc, prometheus.GaugeValue, last, s.Topic, p)
	}
}
