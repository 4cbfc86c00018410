package compaction

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestPrometheusMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewPrometheusMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Cleaned("t-0", Stats{BytesRead: 100, BytesWritten: 40, RecordsRead: 10, RecordsDropped: 6, SegmentsBefore: 3, MapEntries: 9, MapSlots: 10, MapBytes: 16 * 10, Duration: 2 * time.Second})
	m.Cleaned("t-1", Stats{BytesRead: 50, RecordsDropped: 1})
	m.CleanFailed("t-0", errors.New("x"))
	m.Lag("t-0", 1234, 0.75)
	m.RetentionDeleted("t-1", RetentionResult{SegmentsDeleted: 2, BytesDeleted: 2048})
	got := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			v := mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
			got[f.GetName()] += v
		}
	}
	want := map[string]float64{
		"sediment_log_cleaner_bytes_read_total":                 150,
		"sediment_log_cleaner_records_dropped_total":            7,
		"sediment_log_cleaner_passes_total":                     2,
		"sediment_log_cleaner_failures_total":                   1,
		"sediment_log_cleaner_segments_replaced_total":          3,
		"sediment_log_cleaner_dirty_bytes":                      1234,
		"sediment_log_cleaner_retention_segments_deleted_total": 2,
		"sediment_log_cleaner_buffer_utilization_ratio":         0.9,
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
	m.Forget("t-0")
	families, _ = reg.Gather()
	for _, f := range families {
		if f.GetName() == "sediment_log_cleaner_dirty_bytes" && len(f.GetMetric()) != 0 {
			t.Fatal("Forget left the partition's gauge")
		}
	}
}
