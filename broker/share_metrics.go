package broker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Share group metrics (KIP-932's share-group and share-partition metrics,
// as a Prometheus collector read at scrape time): per share-partition this
// broker leads, its start offset, the records in flight and acquired, and
// the lag (records up to the high watermark not yet done); per broker, the
// share sessions and counters of deliveries, acknowledgements by type and
// records archived at the delivery limit.

var (
	shareStartDesc = prometheus.NewDesc("sediment_share_partition_start_offset",
		"Share-partition start offset (SPSO), per share group and partition this broker leads.", []string{"group", "topic", "partition"}, nil)
	shareInFlightDesc = prometheus.NewDesc("sediment_share_partition_in_flight_records",
		"Records delivered at least once and not yet done (acquired or available again), per share-partition.", []string{"group", "topic", "partition"}, nil)
	shareAcquiredDesc = prometheus.NewDesc("sediment_share_partition_acquired_records",
		"Records held by a member under an acquisition lock, per share-partition.", []string{"group", "topic", "partition"}, nil)
	shareLagDesc = prometheus.NewDesc("sediment_share_group_lag",
		"Records below the high watermark not yet done (never delivered, or in flight), per share-partition.", []string{"group", "topic", "partition"}, nil)
	shareSessionsDesc = prometheus.NewDesc("sediment_share_sessions",
		"Open share sessions on this broker.", nil, nil)
	shareAcquiredTotalDesc = prometheus.NewDesc("sediment_share_records_acquired_total",
		"Record deliveries to share group members (a redelivery counts again).", nil, nil)
	shareAcksDesc = prometheus.NewDesc("sediment_share_acknowledgements_total",
		"Records acknowledged by share group members, by type.", []string{"type"}, nil)
	shareArchivedDesc = prometheus.NewDesc("sediment_share_records_archived_total",
		"Records given up after group.share.delivery.count.limit deliveries.", nil, nil)
)

var shareAckTypes = [5]string{"gap", "accept", "release", "reject", "renew"}

type shareCollector struct{ s *shares }

func (c *shareCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{shareStartDesc, shareInFlightDesc, shareAcquiredDesc, shareLagDesc,
		shareSessionsDesc, shareAcquiredTotalDesc, shareAcksDesc, shareArchivedDesc} {
		ch <- d
	}
}

func (c *shareCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	st := s.b.meta.State()
	type row struct {
		key                         sharePartKey
		start, end, inFlight, taken int64
	}
	s.mu.Lock()
	rows := make([]row, 0, len(s.parts))
	for k, sp := range s.parts {
		r := row{key: k, start: sp.start, end: sp.end, inFlight: int64(len(sp.recs))}
		for _, rec := range sp.recs {
			if rec.acquired {
				r.taken++
			}
		}
		rows = append(rows, r)
	}
	sessions := len(s.sessions)
	s.mu.Unlock()
	for _, r := range rows {
		p, err := s.b.store.partitionByID(st, r.key.topicID, r.key.part)
		if err != nil || !p.isLeader(-1) {
			continue // left behind by a leadership move
		}
		labels := []string{labelValue(r.key.group), p.topic, strconv.Itoa(int(r.key.part))}
		ch <- prometheus.MustNewConstMetric(shareStartDesc, prometheus.GaugeValue, float64(r.start), labels...)
		ch <- prometheus.MustNewConstMetric(shareInFlightDesc, prometheus.GaugeValue, float64(r.inFlight), labels...)
		ch <- prometheus.MustNewConstMetric(shareAcquiredDesc, prometheus.GaugeValue, float64(r.taken), labels...)
		// Not done: everything from the end up to the high watermark,
		// and what is in flight below the end.
		lag := max(p.log.HighWatermark()-r.end, 0) + r.inFlight
		ch <- prometheus.MustNewConstMetric(shareLagDesc, prometheus.GaugeValue, float64(lag), labels...)
	}
	ch <- prometheus.MustNewConstMetric(shareSessionsDesc, prometheus.GaugeValue, float64(sessions))
	ch <- prometheus.MustNewConstMetric(shareAcquiredTotalDesc, prometheus.CounterValue, float64(s.stats.acquired.Load()))
	for t, name := range shareAckTypes {
		ch <- prometheus.MustNewConstMetric(shareAcksDesc, prometheus.CounterValue, float64(s.stats.acks[t].Load()), name)
	}
	ch <- prometheus.MustNewConstMetric(shareArchivedDesc, prometheus.CounterValue, float64(s.stats.archived.Load()))
}
