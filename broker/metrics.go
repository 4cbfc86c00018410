package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	errors      *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	bytesIn     prometheus.Counter
	bytesOut    prometheus.Counter
	connections prometheus.Gauge
	sendfile    prometheus.Counter
	copied      prometheus.Counter
	// throttledBytes and throttledSkips: the replication throttles, by
	// side (leader, follower).
	throttledBytes *prometheus.CounterVec
	throttledSkips *prometheus.CounterVec
	// replicaRemoteStarts: follower logs restarted at the remote log end
	// (replica_tiered.go).
	replicaRemoteStarts prometheus.Counter
	// saslLogins and saslFailures count SASL authentications (security.go).
	saslLogins, saslFailures prometheus.Counter
	saslReauths              prometheus.Counter     // KIP-368 re-authentications
	connRejected             prometheus.Counter     // max.connections.per.ip (conn_limits.go)
	connThrottled            *prometheus.CounterVec // connection creation rates (conn_limits.go)
	isr                      isrCounters            // ISR changes of led partitions (metrics_health.go)
	errorCodes               *prometheus.CounterVec // error codes in replies (metrics_errors.go)
}

func newMetrics(b *Broker) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sediment_requests_total", Help: "Kafka requests handled, by API.",
		}, []string{"api"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sediment_request_failures_total", Help: "Requests that closed their connection, by API.",
		}, []string{"api"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sediment_request_duration_seconds",
			Help:    "Time from decode to reply ready, by API (long polls included).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"api"}),
		bytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sediment_network_bytes_in_total", Help: "Request bytes read, framing included.",
		}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sediment_network_bytes_out_total", Help: "Response bytes written, framing included.",
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sediment_connections", Help: "Open client connections.",
		}),
		sendfile: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sediment_fetch_sendfile_bytes_total", Help: "Record bytes sent from segment files with sendfile(2).",
		}),
		copied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sediment_fetch_copied_bytes_total", Help: "Record bytes copied through user space (no OS file, or sendfile disabled).",
		}),
		throttledBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sediment_replication_throttled_bytes_total", Help: "Replication bytes of throttled replicas out of the ISR, by side (leader: served, follower: fetched).",
		}, []string{"side"}),
		throttledSkips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sediment_replication_throttled_skips_total", Help: "Partitions left out of a replica fetch because the side's replication throttle was used up.",
		}, []string{"side"}),
		replicaRemoteStarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sediment_replica_remote_starts_total", Help: "Follower logs started at the remote log end (the leader answered OFFSET_MOVED_TO_TIERED_STORAGE) instead of copying the bucket's records.",
		}),
		saslLogins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sediment_sasl_authentications_total", Help: "SASL logins that succeeded.",
		}),
		saslFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sediment_sasl_authentication_failures_total", Help: "SASL logins that failed (the connection was closed).",
		}),
		connRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sediment_connections_rejected_total", Help: "Connections closed at accept because their address had max.connections.per.ip open.",
		}),
		connThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sediment_connections_throttled_total",
			Help: "New connections throttled by a connection creation rate (KIP-612): quota=broker (max.connection.creation.rate: served after a wait) or ip (an ip entity's connection_creation_rate: closed after the throttle time).",
		}, []string{"quota"}),
		saslReauths: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sediment_sasl_reauthentications_total", Help: "SASL re-authentications (KIP-368) that succeeded.",
		}),
	}
	m.isr = isrCounters{
		shrinks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sediment_isr_shrinks_total", Help: "ISR changes of partitions this broker leads that removed a replica (Kafka's IsrShrinksPerSec).",
		}),
		expands: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sediment_isr_expands_total", Help: "ISR changes of partitions this broker leads that added a replica (Kafka's IsrExpandsPerSec).",
		}),
	}
	m.errorCodes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sediment_request_errors_total",
		Help: "Error codes other than NONE in replies, by API and error, each counted once per place it is set (a partition, a topic, the reply): Kafka's ErrorsPerSec.",
	}, []string{"api", "error"})
	m.reg.MustRegister(m.isr.shrinks, m.isr.expands, m.errorCodes, &healthCollector{b: b})
	m.reg.MustRegister(m.requests, m.errors, m.latency, m.bytesIn, m.bytesOut, m.connections, m.sendfile, m.copied, m.throttledBytes, m.throttledSkips, m.replicaRemoteStarts,
		m.saslLogins, m.saslFailures, m.saslReauths, m.connRejected, m.connThrottled,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&partitionCollector{b: b}, &replicationCollector{b: b}, &pendingDeletionCollector{b: b})
	return m
}

func (m *metrics) observe(key int16, d time.Duration, err error) {
	name := kmsg.NameForKey(key)
	m.requests.WithLabelValues(name).Inc()
	m.latency.WithLabelValues(name).Observe(d.Seconds())
	if err != nil {
		m.errors.WithLabelValues(name).Inc()
	}
}

var (
	leoDesc = prometheus.NewDesc("sediment_log_end_offset", "Log end offset per partition.", []string{"topic", "partition"}, nil)
	lsoDesc = prometheus.NewDesc("sediment_log_start_offset", "Log start offset per partition.", []string{"topic", "partition"}, nil)
)

// partitionCollector reports per-partition offsets at scrape time.
type partitionCollector struct{ b *Broker }

func (c *partitionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- leoDesc
	ch <- lsoDesc
}

func (c *partitionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.b.allPartitions() {
		id := strconv.Itoa(int(p.id))
		ch <- prometheus.MustNewConstMetric(leoDesc, prometheus.GaugeValue, float64(p.log.LogEndOffset()), p.topic, id)
		ch <- prometheus.MustNewConstMetric(lsoDesc, prometheus.GaugeValue, float64(p.log.LogStartOffset()), p.topic, id)
	}
}

var (
	pendingDirsDesc = prometheus.NewDesc("sediment_log_dirs_pending_deletion",
		"Partition directories under logs/ renamed and waiting to be removed, by kind: stray (found at start, stray-log-delete-delay) or delete (removed while running, deleted-log-delete-delay).",
		[]string{"kind"}, nil)
	pendingBytesDesc = prometheus.NewDesc("sediment_log_dirs_pending_deletion_bytes",
		"Bytes of the files in the partition directories waiting to be removed, by kind (stray, delete).",
		[]string{"kind"}, nil)
)

// pendingDeletionCollector reports, at scrape time, the renamed partition
// directories not yet removed (stray.go, dir_delete.go): a listing of logs/
// and a walk of those few directories.
type pendingDeletionCollector struct{ b *Broker }

func (c *pendingDeletionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDirsDesc
	ch <- pendingBytesDesc
}

func (c *pendingDeletionCollector) Collect(ch chan<- prometheus.Metric) {
	logsDir := filepath.Join(c.b.cfg.DataDir, "logs")
	dirs := map[string]int{"stray": 0, "delete": 0}
	bytes := map[string]int64{"stray": 0, "delete": 0}
	ents, _ := os.ReadDir(logsDir) // none yet: zeros
	for _, e := range ents {
		kind := ""
		if _, ok := parseStrayDirName(e.Name()); ok {
			kind = "stray"
		} else if _, ok := parseDeleteDirName(e.Name()); ok {
			kind = "delete"
		}
		if kind == "" || !e.IsDir() {
			continue
		}
		_, n := dirUsage(filepath.Join(logsDir, e.Name()))
		dirs[kind]++
		bytes[kind] += n
	}
	for _, kind := range []string{"stray", "delete"} {
		ch <- prometheus.MustNewConstMetric(pendingDirsDesc, prometheus.GaugeValue, float64(dirs[kind]), kind)
		ch <- prometheus.MustNewConstMetric(pendingBytesDesc, prometheus.GaugeValue, float64(bytes[kind]), kind)
	}
}

// labelValue is a client-chosen name (a group id, a client id, a
// principal) as a metric label value, which must be UTF-8: a registry
// refuses a whole scrape for one invalid value. Each byte that is no UTF-8
// is written \xNN, so two such names stay two series.
func labelValue(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
