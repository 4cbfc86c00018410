package broker

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// isrCounters count the ISR changes of the partitions this broker leads.
type isrCounters struct {
	shrinks, expands prometheus.Counter
}

// isrCounters is nil without metrics (tests that build a bare broker).
func (m *metrics) isrCounters() *isrCounters {
	if m == nil {
		return nil
	}
	return &m.isr
}

// count counts the change from ISR old to new: a shrink if a replica left,
// an expansion if one joined (both for a change that swaps one for
// another, as only a reassignment does).
func (c *isrCounters) count(old, new []int32) {
	for _, r := range old {
		if !slices.Contains(new, r) {
			c.shrinks.Inc()
			break
		}
	}
	for _, r := range new {
		if !slices.Contains(old, r) {
			c.expands.Inc()
			break
		}
	}
}

var (
	partitionCountDesc = prometheus.NewDesc("sediment_partitions",
		"Partition replicas this broker holds open, led or followed (Kafka's PartitionCount).", nil, nil)
	underMinISRDesc = prometheus.NewDesc("sediment_under_min_isr_partitions",
		"Partitions this broker leads whose ISR is smaller than min.insync.replicas: acks=all writes to them fail with NOT_ENOUGH_REPLICAS (Kafka's UnderMinIsrPartitionCount).", nil, nil)
	atMinISRDesc = prometheus.NewDesc("sediment_at_min_isr_partitions",
		"Partitions this broker leads whose ISR is exactly min.insync.replicas: one more replica lost stops acks=all writes (Kafka's AtMinIsrPartitionCount).", nil, nil)
	offlineDirDesc = prometheus.NewDesc("sediment_log_dir_offline",
		"1 once a partition log failed on an I/O error and this broker fenced itself (restart it once the disk is fixed), else 0 (Kafka's OfflineLogDirectoryCount).", nil, nil)
	dirTotalDesc = prometheus.NewDesc("sediment_log_dir_total_bytes",
		"Size of the file system holding the partition logs (<data-dir>/logs).", nil, nil)
	dirUsableDesc = prometheus.NewDesc("sediment_log_dir_usable_bytes",
		"Bytes of the file system holding the partition logs that this process can still write (a full disk refuses writes with KAFKA_STORAGE_ERROR).", nil, nil)

	activeControllerDesc = prometheus.NewDesc("sediment_active_controller",
		"1 on the broker that leads the metadata quorum (the active controller), else 0: the sum over a cluster is 1 when it has a quorum (Kafka's ActiveControllerCount).", nil, nil)
	offlinePartitionsDesc = prometheus.NewDesc("sediment_offline_partitions",
		"Partitions without a leader (no replica in the ISR is alive, and no unclean election), counted by the active controller; 0 on the other brokers (Kafka's OfflinePartitionsCount).", nil, nil)
	preferredImbalanceDesc = prometheus.NewDesc("sediment_preferred_replica_imbalance",
		"Partitions led by another broker than their preferred (first) replica, counted by the active controller; 0 on the other brokers (Kafka's PreferredReplicaImbalanceCount).", nil, nil)
	clusterBrokersDesc = prometheus.NewDesc("sediment_cluster_brokers",
		"Registered brokers by state (active: unfenced; fenced: no heartbeat within the session timeout, starting, or fenced itself), counted by the active controller; 0 on the other brokers (Kafka's ActiveBrokerCount and FencedBrokerCount).", []string{"state"}, nil)
	clusterPartitionsDesc = prometheus.NewDesc("sediment_cluster_partitions",
		"Partitions of every topic, counted by the active controller; 0 on the other brokers (Kafka's GlobalPartitionCount).", nil, nil)
	clusterTopicsDesc = prometheus.NewDesc("sediment_cluster_topics",
		"Topics, counted by the active controller; 0 on the other brokers (Kafka's GlobalTopicCount).", nil, nil)
)

// healthCollector reports, at scrape time, what operators alert on: this
// broker's partitions against min.insync.replicas, its log directory, and,
// on the active controller only (so that a sum over the brokers counts each
// once, as Kafka's controller metrics), the cluster's offline partitions
// and brokers.
type healthCollector struct{ b *Broker }

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{partitionCountDesc, underMinISRDesc, atMinISRDesc, offlineDirDesc, dirTotalDesc, dirUsableDesc,
		activeControllerDesc, offlinePartitionsDesc, preferredImbalanceDesc, clusterBrokersDesc, clusterPartitionsDesc, clusterTopicsDesc} {
		ch <- d
	}
}

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	b := c.b
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	if b.meta == nil || b.store == nil {
		return // not started
	}
	st := b.meta.State()
	parts := b.allPartitions()
	under, at := 0, 0
	for _, p := range parts {
		p.repl.mu.Lock()
		leads, isr := p.repl.mu.tracker != nil, len(p.repl.mu.isr)
		p.repl.mu.Unlock()
		if !leads {
			continue
		}
		var configs map[string]string
		if t, ok := st.Topic(p.topic); ok {
			configs = t.Configs
		}
		switch minISR := configInt(b, configs, "min.insync.replicas"); {
		case int64(isr) < minISR:
			under++
		case int64(isr) == minISR:
			at++
		}
	}
	gauge(partitionCountDesc, len(parts))
	gauge(underMinISRDesc, under)
	gauge(atMinISRDesc, at)
	offline := 0
	if b.store.storageFault.Load() != nil {
		offline = 1
	}
	gauge(offlineDirDesc, offline)
	if total, usable, err := fsUsage(b.store.logsDir); err == nil {
		ch <- prometheus.MustNewConstMetric(dirTotalDesc, prometheus.GaugeValue, float64(total))
		ch <- prometheus.MustNewConstMetric(dirUsableDesc, prometheus.GaugeValue, float64(usable))
	}

	active := b.meta.IsLeader()
	var offlineParts, imbalance, partitions, topics, live, fenced int
	if active {
		for _, t := range st.Topics() {
			topics++
			for _, p := range t.Partitions {
				partitions++
				if p.Leader < 0 {
					offlineParts++
				} else if len(p.Replicas) > 0 && p.Leader != p.Replicas[0] {
					imbalance++
				}
			}
		}
		for _, br := range st.Brokers() {
			if br.Fenced {
				fenced++
			} else {
				live++
			}
		}
	}
	activeN := 0
	if active {
		activeN = 1
	}
	gauge(activeControllerDesc, activeN)
	gauge(offlinePartitionsDesc, offlineParts)
	gauge(preferredImbalanceDesc, imbalance)
	gauge(clusterBrokersDesc, live, "active")
	gauge(clusterBrokersDesc, fenced, "fenced")
	gauge(clusterPartitionsDesc, partitions)
	gauge(clusterTopicsDesc, topics)
}
