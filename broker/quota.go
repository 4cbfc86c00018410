package broker

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/internal/reqtime"
	"github.com/sediment-io/sediment/metadata"
)

// Client quota enforcement (KIP-13, KIP-55, KIP-219), in one place: the
// quota middleware that b.chain puts around every handler. It records a
// Produce request's size against the client's producer_byte_rate as the
// request starts (so that a pipelined next Produce already finds the
// connection muted), a consumer Fetch's response size against its
// consumer_byte_rate once the response is built (with max_bytes first
// bounded by the quota, boundFetch). A client over its quota gets the
// throttle time that Kafka computes in the response's throttle_time_ms,
// and the connection is muted for that long from then on (Request.mute,
// conn.go): the response goes out at once, but no later request of the
// connection is read or started until the time has passed, as Kafka, which
// handles one request of a connection at a time, holds the next one.
// A Fetch over its byte rate or request quota is answered, as in Kafka,
// with the throttle time and no records, and its bytes are taken back:
// the records are read, the size is known (Request.fetchQuota, called by
// handleFetch), the parts are released and the answer goes out empty.
// Clients at versions that honour KIP-219 (Produce v6+, Fetch v8+) wait on
// their side too; older ones are held back by the mute alone.
//
// The client is the pair (user, client id): the user is the connection's
// authenticated principal (ConnInfo.principal(): ANONYMOUS if none),
// the client id the request header's. Its quota of each type is resolved in
// Kafka's order (the first entity that has a value for the type's key wins):
//
//	user + client-id, user + default client-id, user,
//	default user + client-id, default user + default client-id, default user,
//	client-id, default client-id
//
// and the rate is measured per quota entity as Kafka does: the clients
// sharing a user (or a client id) quota share one rate, a default quota
// gives each user or client id its own. Replication is exempt: replica
// fetches (replica id ≥ 0) are throttled by the replication throttles
// (replication_throttle.go) instead.
//
// request_percentage (KIP-124) limits the time a client's requests keep
// the broker working, as a percentage of one request handler thread (100:
// one thread's worth): each request's handler time less the time it waited
// (a long poll, replicas, the quorum, a coordinator's loop, the bucket:
// internal/reqtime), as Kafka counts a request handler thread's time and
// not the time a request is parked in a purgatory. It is measured per quota
// entity like the byte rates, over the same windows; a client over it gets
// Kafka's throttle time (at most one quota window), combined with a byte
// rate's by taking the larger, and its connection is muted as above. The
// request is still handled and answered. Exempt, as in Kafka: replica
// fetches, WriteTxnMarkers (broker to broker), Produce with acks=0 (no
// response to carry the throttle), and SASL before a principal is known.

// quotaType is what a quota limits.
type quotaType int

const (
	quotaTypeProduce quotaType = iota
	quotaTypeFetch
	quotaTypeMutation   // controller_mutation_rate (quota_mutation.go)
	quotaTypeRequest    // request_percentage
	quotaTypeConnection // connection_creation_rate of ip entities (quota_conn.go)
	numQuotaTypes
)

var quotaTypeKeys = [numQuotaTypes]string{quotaProducerByteRate, quotaConsumerByteRate, quotaControllerMutRate, quotaRequestPercentage, quotaConnectionRate}
var quotaTypeNames = [numQuotaTypes]string{"produce", "fetch", "controller_mutation", "request", "connection"}

// quotaKey identifies an entity in the resolution table: a nil name is the
// default; has* false means the component is absent.
type quotaKey struct {
	hasUser, userDefault     bool
	user                     string
	hasClient, clientDefault bool
	client                   string
}

func keyOf(e quotaEntity) quotaKey {
	k := quotaKey{hasUser: e.hasUser, hasClient: e.hasClient}
	if e.hasUser {
		if e.user == nil {
			k.userDefault = true
		} else {
			k.user = *e.user
		}
	}
	if e.hasClient {
		if e.client == nil {
			k.clientDefault = true
		} else {
			k.client = *e.client
		}
	}
	return k
}

// quotaTable is the client quotas of one metadata state, by entity.
type quotaTable struct {
	version uint64
	values  map[quotaKey]map[string]float64
	// any reports, per type, whether some entity sets its key: without
	// one nothing is measured.
	any [numQuotaTypes]bool
	// ipRates are the connection_creation_rate of ip entities, by
	// address (a host name's resolved when the table is built), and
	// ipDefault the default ip entity's (0: none).
	ipRates   map[string]float64
	ipDefault float64
	hostsGen  uint64 // quotas.hostsGen it was built with
}

func buildQuotaTable(st *metadata.State, hostIPs func(string) []string) *quotaTable {
	t := &quotaTable{version: st.Version, values: map[quotaKey]map[string]float64{}, ipRates: map[string]float64{}}
	for name, m := range st.ClientQuotas() {
		e, ok := parseCanonicalQuotaEntity(name)
		if !ok {
			continue
		}
		vals := parseQuotaValues(m)
		if e.hasIP {
			rate, ok := vals[quotaConnectionRate]
			if !ok {
				continue
			}
			t.any[quotaTypeConnection] = true
			if e.ip == nil {
				t.ipDefault = rate
				continue
			}
			for _, ip := range hostIPs(*e.ip) {
				t.ipRates[ip] = rate
			}
			continue
		}
		t.values[keyOf(e)] = vals
		for typ, key := range quotaTypeKeys {
			if _, ok := vals[key]; ok {
				t.any[typ] = true
			}
		}
	}
	return t
}

// sensorKey names a rate: the quota type and Kafka's metric tags (the user
// and client id the matched entity measures by; "" when not part of it).
type sensorKey struct {
	typ          quotaType
	user, client string
	ip           string // connection rates (quota_conn.go)
}

// resolve finds the quota of typ for (user, client) in Kafka's order and
// the sensor that measures it.
func (t *quotaTable) resolve(typ quotaType, user, client string) (bound float64, sk sensorKey, ok bool) {
	key := quotaTypeKeys[typ]
	candidates := [...]struct {
		k                quotaKey
		tagUser, tagClnt bool
	}{
		{quotaKey{hasUser: true, user: user, hasClient: true, client: client}, true, true},
		{quotaKey{hasUser: true, user: user, hasClient: true, clientDefault: true}, true, true},
		{quotaKey{hasUser: true, user: user}, true, false},
		{quotaKey{hasUser: true, userDefault: true, hasClient: true, client: client}, true, true},
		{quotaKey{hasUser: true, userDefault: true, hasClient: true, clientDefault: true}, true, true},
		{quotaKey{hasUser: true, userDefault: true}, true, false},
		{quotaKey{hasClient: true, client: client}, false, true},
		{quotaKey{hasClient: true, clientDefault: true}, false, true},
	}
	for _, c := range candidates {
		if v, found := t.values[c.k][key]; found {
			sk = sensorKey{typ: typ}
			if c.tagUser {
				sk.user = user
			}
			if c.tagClnt {
				sk.client = client
			}
			return v, sk, true
		}
	}
	return 0, sensorKey{}, false
}

// quotas measures client rates and computes throttle times.
type quotas struct {
	b          *Broker
	windowMs   int64
	numWindows int
	table      atomic.Pointer[quotaTable]

	mu struct {
		sync.Mutex
		sensors   map[sensorKey]*rateSensor
		buckets   map[sensorKey]*tokenBucket // controller mutations (quota_mutation.go)
		lastSweep int64
	}
	// hosts caches the addresses of ip entities named by a host name
	// (quota_conn.go).
	hosts struct {
		sync.Mutex
		ips     map[string][]string
		pending map[string]bool
	}
	hostsGen atomic.Uint64 // counts finished lookups

	throttleTime *prometheus.HistogramVec
	throttled    *prometheus.CounterVec
}

// sensorIdleExpiry is how long an unused sensor is kept (Kafka's
// inactive sensor expiration, one hour).
const sensorIdleExpiry = time.Hour

func newQuotas(b *Broker) *quotas {
	q := &quotas{
		b:          b,
		windowMs:   b.cfg.QuotaWindowSize.Milliseconds(),
		numWindows: b.cfg.QuotaWindowNum,
		throttleTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sediment_quota_throttle_time_seconds",
			Help:    "Throttle times given to clients over a client quota (KIP-13/KIP-219), by quota type (produce, fetch).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"quota_type"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sediment_quota_throttled_bytes_total", Help: "Bytes of requests (produce) or responses (fetch) that were answered with a throttle time, by quota type.",
		}, []string{"quota_type"}),
	}
	q.mu.sensors = map[sensorKey]*rateSensor{}
	q.hosts.ips, q.hosts.pending = map[string][]string{}, map[string]bool{}
	b.metrics.reg.MustRegister(q.throttleTime, q.throttled, &quotaCollector{q: q})
	return q
}

// currentTable returns the quota table of the latest metadata state.
func (q *quotas) currentTable() *quotaTable {
	st := q.b.meta.State()
	t := q.table.Load()
	if gen := q.hostsGen.Load(); t == nil || t.version != st.Version || t.hostsGen != gen {
		t = buildQuotaTable(st, q.hostIPs)
		t.hostsGen = gen // read before the build: a lookup done meanwhile rebuilds again
		q.table.Store(t)
	}
	return t
}

// sensor returns the rate sensor for k, creating it; idle ones are swept
// at most once a minute.
func (q *quotas) sensor(k sensorKey, nowMs int64) *rateSensor {
	q.mu.Lock()
	defer q.mu.Unlock()
	if nowMs-q.mu.lastSweep > time.Minute.Milliseconds() {
		q.mu.lastSweep = nowMs
		for key, s := range q.mu.sensors {
			if nowMs-s.lastUsedMs.Load() > sensorIdleExpiry.Milliseconds() {
				delete(q.mu.sensors, key)
			}
		}
	}
	s := q.mu.sensors[k]
	if s == nil {
		s = newRateSensor(q.numWindows, q.windowMs)
		q.mu.sensors[k] = s
	}
	return s
}

// record adds n to the client's rate of typ and returns the throttle time
// (0 when within its quota or without one).
func (q *quotas) record(t *quotaTable, typ quotaType, user, client string, n float64, now time.Time) time.Duration {
	bound, sk, ok := t.resolve(typ, user, client)
	if !ok {
		return 0
	}
	nowMs := now.UnixMilli()
	ms := q.sensor(sk, nowMs).recordAndThrottle(n, bound, nowMs)
	if ms <= 0 {
		return 0
	}
	if typ == quotaTypeRequest {
		// Kafka bounds a request quota's throttle to one window
		// (ClientRequestQuotaManager.maxThrottleTimeMs).
		ms = min(ms, q.windowMs)
	}
	d := time.Duration(ms) * time.Millisecond
	q.throttleTime.WithLabelValues(quotaTypeNames[typ]).Observe(d.Seconds())
	if typ == quotaTypeProduce || typ == quotaTypeFetch {
		q.throttled.WithLabelValues(quotaTypeNames[typ]).Add(n)
	}
	return d
}

// clientOf is the quota client of a request: its principal (ANONYMOUS if
// unauthenticated) and client id.
func clientOf(r *Request) (user, client string) {
	user = r.Conn.principal()
	if r.ClientID != nil {
		client = *r.ClientID
	}
	return user, client
}

// throttle applies a throttle time d to a request's reply: the connection
// is muted from now (this reply goes out at once, later requests wait:
// KIP-219) and the response carries the larger of d and what it has.
func throttle(r *Request, reply *Reply, d time.Duration) {
	if d <= 0 {
		return
	}
	if r.mute != nil {
		r.mute(d)
	}
	if reply == nil || reply.NoResponse {
		return
	}
	if tr, ok := reply.Msg.(kmsg.SetThrottleResponse); ok {
		ms := int32(min(d.Milliseconds(), math.MaxInt32))
		if old, _ := reply.Msg.(kmsg.ThrottleResponse).Throttle(); old > ms {
			ms = old
		}
		tr.SetThrottle(ms)
	}
}

// requestQuotaExempt reports whether a request is outside request_percentage.
func requestQuotaExempt(r *Request) bool {
	switch r.Key {
	case 0:
		req, ok := r.Msg.(*kmsg.ProduceRequest)
		return ok && req.Acks == 0
	case 1:
		return replicaFetch(r.Msg)
	case 17, 36, 27: // SaslHandshake, SaslAuthenticate, WriteTxnMarkers
		return true
	}
	return false
}

// middleware is the quota hook around every handler (b.chain): the request
// quota around the byte-rate and mutation quotas.
func (q *quotas) middleware(next Handler) Handler {
	inner := q.rateMiddleware(next)
	return func(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
		t := q.currentTable()
		if !t.any[quotaTypeRequest] || requestQuotaExempt(r) {
			return inner(ctx, b, r)
		}
		ctx, clock := reqtime.With(ctx)
		start := time.Now()
		user, client := clientOf(r)
		if r.Key == 1 {
			// A Fetch over the quota answers without records (Kafka's
			// throttled fetch response): decided with the time worked
			// so far, once the records are read.
			r.fetchQuota = func(func() int64) time.Duration {
				return q.peek(t, quotaTypeRequest, user, client, percentOfThread(clock.Working(start)), time.Now())
			}
		}
		reply, err := inner(ctx, b, r)
		if err != nil {
			return reply, err
		}
		work := clock.Working(start)
		// Kafka's nanosToPercentage: a second of one thread's time is 100.
		d := q.record(t, quotaTypeRequest, user, client, percentOfThread(work), time.Now())
		throttle(r, reply, d)
		return reply, nil
	}
}

// percentOfThread is Kafka's nanosToPercentage: a second of one request
// handler thread's time is 100.
func percentOfThread(d time.Duration) float64 {
	return float64(d.Nanoseconds()) * 100 / float64(time.Second)
}

// peek is the throttle time that recording n would give, without
// recording it.
func (q *quotas) peek(t *quotaTable, typ quotaType, user, client string, n float64, now time.Time) time.Duration {
	bound, sk, ok := t.resolve(typ, user, client)
	if !ok {
		return 0
	}
	nowMs := now.UnixMilli()
	s := q.sensor(sk, nowMs)
	s.mu.Lock()
	s.recordLocked(n, nowMs)
	rate, window := s.measureLocked(nowMs)
	s.recordLocked(-n, nowMs)
	s.mu.Unlock()
	if rate <= bound || bound <= 0 {
		return 0
	}
	ms := int64(math.Round((rate - bound) / bound * float64(window)))
	if typ == quotaTypeRequest {
		ms = min(ms, q.windowMs)
	}
	return time.Duration(ms) * time.Millisecond
}

// unrecord takes back n recorded at now.
func (q *quotas) unrecord(t *quotaTable, typ quotaType, user, client string, n float64, now time.Time) {
	if _, sk, ok := t.resolve(typ, user, client); ok {
		q.sensor(sk, now.UnixMilli()).record(-n, now.UnixMilli())
	}
}

// rateMiddleware enforces the byte rates and controller mutations.
func (q *quotas) rateMiddleware(next Handler) Handler {
	return func(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
		var typ quotaType
		switch r.Key {
		case 0:
			typ = quotaTypeProduce
		case 1:
			typ = quotaTypeFetch
			if replicaFetch(r.Msg) {
				return next(ctx, b, r)
			}
		case 19, 20, 37: // CreateTopics, DeleteTopics, CreatePartitions
			return q.mutations(ctx, b, r, next)
		default:
			return next(ctx, b, r)
		}
		t := q.currentTable()
		if !t.any[typ] {
			return next(ctx, b, r)
		}
		user, client := clientOf(r)
		var d time.Duration
		if typ == quotaTypeProduce {
			// Recorded before the handler: the size is known, and the
			// mute must be in place before the connection's next
			// Produce (serial, pipelined by clients) may start, as in
			// Kafka, which reads a connection's next request only once
			// it has answered this one.
			d = q.record(t, typ, user, client, float64(r.Size), time.Now())
			if d > 0 && r.mute != nil {
				r.mute(d)
			}
		} else {
			q.boundFetch(t, r.Msg.(*kmsg.FetchRequest), user, client)
			// The response's size is recorded once the records are
			// read (handleFetch); a fetch over the byte rate or the
			// request quota answers without records, and its bytes
			// are taken back, as in Kafka's handleFetchRequest.
			requestQuota := r.fetchQuota
			r.fetchQuota = func(sizeOf func() int64) time.Duration {
				size := sizeOf()
				now := time.Now()
				d = q.record(t, typ, user, client, float64(size), now)
				dd := d
				if requestQuota != nil {
					dd = max(dd, requestQuota(func() int64 { return size }))
				}
				if dd > 0 {
					q.unrecord(t, typ, user, client, float64(size), now)
				}
				return dd
			}
		}
		reply, err := next(ctx, b, r)
		if err != nil || reply == nil {
			return reply, err
		}
		throttle(r, reply, d)
		return reply, nil
	}
}

// boundFetch lowers a consumer's fetch max_bytes to what its quota lets
// through in the measured window (quota x (quota-window-num - 1) windows),
// as Kafka does, so that one answer does not earn a throttle of many
// windows. As ever (KIP-74) the first batch is returned whole.
func (q *quotas) boundFetch(t *quotaTable, req *kmsg.FetchRequest, user, client string) {
	bound, _, ok := t.resolve(quotaTypeFetch, user, client)
	if !ok {
		return
	}
	limit := bound * float64(q.numWindows-1) * float64(q.windowMs) / 1000
	if limit < float64(req.MaxBytes) {
		req.MaxBytes = int32(max(limit, 1))
	}
}

// replicaFetch reports whether a Fetch comes from a follower replica.
func replicaFetch(m kmsg.Request) bool {
	req, ok := m.(*kmsg.FetchRequest)
	if !ok {
		return false
	}
	if req.Version >= 15 {
		return req.ReplicaState.ID >= 0
	}
	return req.ReplicaID >= 0
}

// rateSensor is Kafka's windowed Rate (SampledStat with numWindows
// samples of windowMs each): the sum of the live samples divided by the
// time they span, at least numWindows-1 whole windows.
type rateSensor struct {
	mu         sync.Mutex
	numWindows int
	windowMs   int64
	samples    []rateSample // grows to numWindows, then reused in turn
	current    int
	lastUsedMs atomic.Int64
}

type rateSample struct {
	startMs int64
	value   float64
}

func newRateSensor(numWindows int, windowMs int64) *rateSensor {
	return &rateSensor{numWindows: max(numWindows, 1), windowMs: max(windowMs, 1)}
}

// recordAndThrottle records v at nowMs and, if the rate is then above
// bound, returns Kafka's throttle time in ms: (rate - bound) / bound *
// window, the time without traffic that brings the rate back to bound.
func (s *rateSensor) recordAndThrottle(v, bound float64, nowMs int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastUsedMs.Store(nowMs)
	s.recordLocked(v, nowMs)
	rate, window := s.measureLocked(nowMs)
	if rate <= bound || bound <= 0 {
		return 0
	}
	return int64(math.Round((rate - bound) / bound * float64(window)))
}

// record adds v (negative to take back a recorded value) at nowMs.
func (s *rateSensor) record(v float64, nowMs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordLocked(v, nowMs)
}

func (s *rateSensor) recordLocked(v float64, nowMs int64) {
	if len(s.samples) == 0 {
		s.samples = append(s.samples, rateSample{startMs: nowMs})
		s.current = 0
	}
	if nowMs-s.samples[s.current].startMs >= s.windowMs {
		s.current = (s.current + 1) % s.numWindows
		if s.current >= len(s.samples) {
			s.samples = append(s.samples, rateSample{startMs: nowMs})
		} else {
			s.samples[s.current] = rateSample{startMs: nowMs}
		}
	}
	s.samples[s.current].value += v
}

// measureLocked returns the rate per second and the window (ms) it spans.
func (s *rateSensor) measureLocked(nowMs int64) (float64, int64) {
	expire := int64(s.numWindows) * s.windowMs
	total := 0.0
	oldest := nowMs
	for i := range s.samples {
		if nowMs-s.samples[i].startMs >= expire {
			s.samples[i] = rateSample{startMs: nowMs}
		}
		total += s.samples[i].value
		oldest = min(oldest, s.samples[i].startMs)
	}
	elapsed := nowMs - oldest
	if full, minFull := elapsed/s.windowMs, int64(s.numWindows-1); full < minFull {
		elapsed += (minFull - full) * s.windowMs
	}
	elapsed = max(elapsed, 1)
	return total / (float64(elapsed) / 1000), elapsed
}

// rate returns the current rate per second (for metrics).
func (s *rateSensor) rate(nowMs int64) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _ := s.measureLocked(nowMs)
	return r
}

// quotaCollector exports each live sensor's rate, as Kafka's byte-rate
// metrics per (user, client-id).
type quotaCollector struct{ q *quotas }

var quotaRateDesc = prometheus.NewDesc("sediment_quota_byte_rate",
	"Measured byte rate of a client quota entity (Kafka's tags: user, client-id; empty when the matched quota does not measure by it), by quota type.",
	[]string{"quota_type", "user", "client_id"}, nil)

var quotaRequestDesc = prometheus.NewDesc("sediment_quota_request_percentage",
	"Measured request time of a request_percentage quota entity, as a percentage of one request handler (Kafka's request-time metric; tags as sediment_quota_byte_rate).",
	[]string{"user", "client_id"}, nil)

func (c *quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- quotaRateDesc
	ch <- quotaRequestDesc
}

func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	c.q.mu.Lock()
	sensors := make(map[sensorKey]*rateSensor, len(c.q.mu.sensors))
	for k, s := range c.q.mu.sensors {
		sensors[k] = s
	}
	c.q.mu.Unlock()
	now := time.Now().UnixMilli()
	for k, s := range sensors {
		if k.typ == quotaTypeConnection {
			continue // per address: sediment_connections_throttled_total counts them
		}
		if k.typ == quotaTypeRequest {
			ch <- prometheus.MustNewConstMetric(quotaRequestDesc, prometheus.GaugeValue, s.rate(now), labelValue(k.user), labelValue(k.client))
			continue
		}
		ch <- prometheus.MustNewConstMetric(quotaRateDesc, prometheus.GaugeValue, s.rate(now),
			quotaTypeNames[k.typ], labelValue(k.user), labelValue(k.client))
	}
}

// mute holds the connection's later requests for d from now (KIP-219:
// the broker stops reading from a throttled client once its response is
// out; the response is written right after this).
func (c *conn) mute(d time.Duration) {
	until := time.Now().Add(d).UnixNano()
	for {
		old := c.mutedUntil.Load()
		if old >= until || c.mutedUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// waitMuted waits out a mute before a request is handled; false if the
// connection is closing meanwhile. A broker shutdown ends the wait early:
// the request is then handled (and answered) as any in flight.
func (c *conn) waitMuted() bool {
	for {
		d := time.Until(time.Unix(0, c.mutedUntil.Load()))
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.b.stopping:
			t.Stop()
			return true
		case <-c.ctx.Done():
			t.Stop()
			return false
		}
	}
}
