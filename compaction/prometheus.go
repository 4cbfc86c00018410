package compaction

import (
	"github.com/prometheus/client_golang/prometheus"
)

// PrometheusMetrics is a Metrics that exports the workers' events as
// Prometheus collectors, named after Kafka's LogCleaner metrics where they
// have an equivalent. Counters are totals over partitions; the cleaner lag
// is a gauge per partition (removed by Forget when a partition leaves).
type PrometheusMetrics struct {
	bytesRead, bytesWritten     prometheus.Counter
	recordsRead, recordsDropped prometheus.Counter
	passes, failures            prometheus.Counter
	segmentsReplaced            prometheus.Counter
	retentionSegments           prometheus.Counter
	retentionBytes              prometheus.Counter
	lastPassSeconds             prometheus.Gauge
	bufferUtilization           prometheus.Gauge
	dirtyBytes, dirtyRatio      *prometheus.GaugeVec
}

var _ Metrics = (*PrometheusMetrics)(nil)

// NewPrometheusMetrics makes the collectors and registers them with reg.
func NewPrometheusMetrics(reg prometheus.Registerer) (*PrometheusMetrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sediment", Subsystem: "log_cleaner", Name: name, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sediment", Subsystem: "log_cleaner", Name: name, Help: help})
	}
	m := &PrometheusMetrics{
		bytesRead:         counter("bytes_read_total", "Bytes of log the cleaner read."),
		bytesWritten:      counter("bytes_written_total", "Bytes of cleaned log the cleaner wrote."),
		recordsRead:       counter("records_read_total", "Records the cleaner examined while rewriting."),
		recordsDropped:    counter("records_dropped_total", "Records the cleaner removed."),
		passes:            counter("passes_total", "Cleaning passes finished."),
		failures:          counter("failures_total", "Cleaning passes that failed."),
		segmentsReplaced:  counter("segments_replaced_total", "Segments replaced by cleaned ones."),
		retentionSegments: counter("retention_segments_deleted_total", "Local segments deleted by retention."),
		retentionBytes:    counter("retention_bytes_deleted_total", "Local bytes deleted by retention."),
		lastPassSeconds:   gauge("last_pass_seconds", "Duration of the last cleaning pass (Kafka: max-clean-time-secs)."),
		bufferUtilization: gauge("buffer_utilization_ratio", "Key map fill of the last pass (Kafka: max-buffer-utilization-percent / 100)."),
		dirtyBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sediment", Subsystem: "log_cleaner", Name: "dirty_bytes",
			Help: "Bytes not yet cleaned in a compacted partition (the cleaner lag)."}, []string{"partition"}),
		dirtyRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sediment", Subsystem: "log_cleaner", Name: "dirty_ratio",
			Help: "Dirty bytes over all cleanable bytes of a compacted partition."}, []string{"partition"}),
	}
	for _, c := range []prometheus.Collector{m.bytesRead, m.bytesWritten, m.recordsRead, m.recordsDropped, m.passes, m.failures,
		m.segmentsReplaced, m.retentionSegments, m.retentionBytes, m.lastPassSeconds, m.bufferUtilization, m.dirtyBytes, m.dirtyRatio} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Cleaned implements Metrics.
func (m *PrometheusMetrics) Cleaned(_ string, st Stats) {
	m.passes.Inc()
	m.bytesRead.Add(float64(st.BytesRead))
	m.bytesWritten.Add(float64(st.BytesWritten))
	m.recordsRead.Add(float64(st.RecordsRead))
	m.recordsDropped.Add(float64(st.RecordsDropped))
	m.segmentsReplaced.Add(float64(st.SegmentsBefore))
	m.lastPassSeconds.Set(st.Duration.Seconds())
	if st.MapSlots > 0 {
		m.bufferUtilization.Set(float64(st.MapEntries) / float64(st.MapSlots))
	}
}

// CleanFailed implements Metrics.
func (m *PrometheusMetrics) CleanFailed(string, error) { m.failures.Inc() }

// Lag implements Metrics.
func (m *PrometheusMetrics) Lag(partition string, dirtyBytes int64, ratio float64) {
	m.dirtyBytes.WithLabelValues(partition).Set(float64(dirtyBytes))
	m.dirtyRatio.WithLabelValues(partition).Set(ratio)
}

// RetentionDeleted implements Metrics.
func (m *PrometheusMetrics) RetentionDeleted(_ string, r RetentionResult) {
	m.retentionSegments.Add(float64(r.SegmentsDeleted))
	m.retentionBytes.Add(float64(r.BytesDeleted))
}

// Forget drops a partition's gauges (after Unregister).
func (m *PrometheusMetrics) Forget(partition string) {
	m.dirtyBytes.DeleteLabelValues(partition)
	m.dirtyRatio.DeleteLabelValues(partition)
}
