package broker

import (
	"context"
	"net"
	"strings"
	"time"
)

// Connection creation rates of ip quota entities (KIP-612), set with
// AlterClientQuotas as {ip: ADDRESS} or the default ip entity {ip: null}
// and the key connection_creation_rate: connections per second one client
// address may open. An address's own entity wins over the default one;
// with neither, its rate is not limited. Measured per address over the
// quota windows (quota.window.num × quota.window.size), as the other
// client quotas. The accept loop (broker.go) holds a connection over the
// rate unserved for the throttle time (at most one window) and then closes
// it, as Kafka's acceptor does, and un-records it, so that a client
// retrying in a loop is slowed without locking itself out (conn_limits.go).

// hostIPs returns the addresses of an ip entity's name: itself if an IP
// address; for a host name, what it resolved to when this broker first
// met it. The lookup runs in the background, off the accept loop and the
// request path (a slow resolver must not stall either); until it is done
// the name limits nothing, then the quota table is rebuilt with it.
func (q *quotas) hostIPs(name string) []string {
	if ip := net.ParseIP(strings.Trim(name, "[]")); ip != nil {
		return []string{ip.String()}
	}
	q.hosts.Lock()
	defer q.hosts.Unlock()
	if ips, ok := q.hosts.ips[name]; ok {
		return ips
	}
	if !q.hosts.pending[name] {
		q.hosts.pending[name] = true
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var ips []string
			if addrs, err := net.DefaultResolver.LookupIPAddr(ctx, name); err == nil {
				for _, a := range addrs {
					ips = append(ips, a.IP.String())
				}
			} else {
				q.b.log.Warn("ip quota entity: host name not resolved; it limits nothing", "host", name, "err", err)
			}
			q.hosts.Lock()
			q.hosts.ips[name] = ips
			delete(q.hosts.pending, name)
			q.hosts.Unlock()
			q.hostsGen.Add(1) // the table is rebuilt with them at its next use
		}()
	}
	return nil
}

// ipRate returns the connection_creation_rate that applies to ip.
func (t *quotaTable) ipRate(ip string) (float64, bool) {
	if r, ok := t.ipRates[ip]; ok {
		return r, true
	}
	return t.ipDefault, t.ipDefault > 0
}

// connectionThrottle records a new connection from ip and returns the
// throttle time when that exceeds the address's rate (the connection is
// then not counted), else 0.
func (q *quotas) connectionThrottle(ip string, now time.Time) time.Duration {
	t := q.currentTable()
	if !t.any[quotaTypeConnection] {
		return 0
	}
	bound, ok := t.ipRate(ip)
	if !ok {
		return 0
	}
	nowMs := now.UnixMilli()
	s := q.sensor(sensorKey{typ: quotaTypeConnection, ip: ip}, nowMs)
	ms := s.recordAndThrottle(1, bound, nowMs)
	if ms <= 0 {
		return 0
	}
	s.record(-1, nowMs) // not accepted: not counted (Kafka un-records it)
	d := time.Duration(min(ms, q.windowMs)) * time.Millisecond
	q.throttleTime.WithLabelValues(quotaTypeNames[quotaTypeConnection]).Observe(d.Seconds())
	return d
}
