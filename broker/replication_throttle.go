package broker

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sediment-io/sediment/metadata"
)

// Replication throttles (KIP-73), the ones kafka-reassign-partitions
// --throttle sets: two dynamic broker configs give a byte rate for the
// leader side (what a broker serves to throttled followers) and for the
// follower side (what it fetches for throttled replicas), per broker or as
// the cluster default (resource name ""); two topic configs name the
// throttled replicas as "partition:broker" pairs, or "*" for all. As in
// Kafka, only replicas out of the ISR are throttled (a reassignment's new
// replicas catching up, a returning broker), so in-sync replication and
// acks=all never wait for a throttle: a leader leaves a throttled
// partition out of a follower's fetch answer while its quota is used up,
// and a follower leaves it out of its fetch request.
const (
	cfgLeaderThrottledRate       = "leader.replication.throttled.rate"
	cfgFollowerThrottledRate     = "follower.replication.throttled.rate"
	cfgLeaderThrottledReplicas   = "leader.replication.throttled.replicas"
	cfgFollowerThrottledReplicas = "follower.replication.throttled.replicas"
)

// validateThrottledReplicas checks a throttled replicas list: empty, "*",
// or comma-separated "partition:broker" pairs (Kafka's
// ThrottledReplicaListValidator).
func validateThrottledReplicas(v string) error {
	v = strings.TrimSpace(v)
	if v == "" || v == "*" {
		return nil
	}
	for _, e := range strings.Split(v, ",") {
		p, b, ok := strings.Cut(strings.TrimSpace(e), ":")
		if !ok {
			return fmt.Errorf("%q is not partition:broker", e)
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32); err != nil || n < 0 {
			return fmt.Errorf("%q: bad partition", e)
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(b), 10, 32); err != nil || n < 0 {
			return fmt.Errorf("%q: bad broker id", e)
		}
	}
	return nil
}

// throttledReplica reports whether the topic's list (key) names the
// replica of partition on broker.
func throttledReplica(st *metadata.State, topic, key string, partition, broker int32) bool {
	t, ok := st.Topic(topic)
	if !ok {
		return false
	}
	v := strings.TrimSpace(t.Configs[key])
	if v == "" {
		return false
	}
	if v == "*" {
		return true
	}
	for _, e := range strings.Split(v, ",") {
		p, b, _ := strings.Cut(strings.TrimSpace(e), ":")
		pn, err1 := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		bn, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 32)
		if err1 == nil && err2 == nil && int32(pn) == partition && int32(bn) == broker {
			return true
		}
	}
	return false
}

// throttleRate is a dynamic rate for this broker: its own value, else the
// cluster default, else none (-1). As in Kafka, 0 lets nothing through.
func throttleRate(st *metadata.State, self int32, name string) (rate int64, source string) {
	for _, res := range []string{strconv.Itoa(int(self)), ""} {
		if v, ok := st.BrokerConfigs(res)[name]; ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 {
				if res == "" {
					return n, "default"
				}
				return n, "broker"
			}
		}
	}
	return -1, ""
}

// replicationQuota is a token bucket of bytes per second with a burst of
// one second's worth. Recording may overdraw it (a fetch answer is sent
// whole); it is exceeded until the refill pays the debt back.
type replicationQuota struct {
	mu     sync.Mutex
	rate   int64 // bytes per second; -1 (or Long.MAX): no limit; 0: nothing passes
	tokens float64
	last   time.Time
}

func unlimitedRate(rate int64) bool { return rate < 0 || rate == math.MaxInt64 }

// refill sets the rate and adds what accrued since the last call (q.mu held).
func (q *replicationQuota) refill(rate int64, now time.Time) {
	if rate != q.rate {
		q.rate, q.tokens, q.last = rate, float64(rate), now
		return
	}
	if unlimitedRate(rate) {
		return
	}
	q.tokens = min(q.tokens+now.Sub(q.last).Seconds()*float64(rate), float64(rate))
	q.last = now
}

// exceeded reports whether the quota at rate is used up, and if so how long
// until it is not.
func (q *replicationQuota) exceeded(rate int64, now time.Time) (bool, time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refill(rate, now)
	if rate == 0 {
		return true, time.Second // paused; the config may change
	}
	if unlimitedRate(rate) || q.tokens >= 0 {
		return false, 0
	}
	return true, time.Duration(-q.tokens / float64(rate) * float64(time.Second))
}

// record takes n bytes from the quota at rate.
func (q *replicationQuota) record(rate int64, n int64, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refill(rate, now)
	if !unlimitedRate(rate) {
		q.tokens -= float64(n)
	}
}

// inISR reports whether broker id is in the partition's ISR, as this broker
// last applied it.
func (p *partition) inISR(id int32) bool {
	p.repl.mu.Lock()
	defer p.repl.mu.Unlock()
	for _, r := range p.repl.mu.isr {
		if r == id {
			return true
		}
	}
	return false
}
