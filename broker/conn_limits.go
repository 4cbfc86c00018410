package broker

import (
	"fmt"
	"maps"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Connection limits, as Kafka's (KIP-308 max.connections.per.ip with its
// overrides, KIP-402 max.connections):
//
//   - a client address with MaxConnectionsPerIP connections open (or its
//     override) has a new one closed as soon as it is accepted;
//   - with MaxConnections connections open on the client listeners, those
//     listeners stop accepting until one closes (new clients wait in the
//     kernel's backlog, as Kafka's acceptor blocks). When there are several
//     listeners the first, which carries inter-broker traffic, is not
//     counted and never waits, so replication goes on when clients fill the
//     broker; a broker with one listener counts every connection.
//
// Both guard the broker's memory and file descriptors against a client
// that opens connections in a loop. Zero means no limit.
//
// And connection creation rates (KIP-612), measured as the client quotas
// are (quota.window.num windows of quota.window.size):
//
//   - max.connection.creation.rate, on the client listeners together: a
//     connection accepted beyond it waits (Kafka's acceptor blocks) for
//     the throttle time, at most one quota window, before it is served,
//     and the listener accepts nothing meanwhile;
//   - the connection_creation_rate of an ip quota entity (a client
//     quota, quota_conn.go): a connection from an address over its rate is
//     accepted, not served, and closed after the throttle time (at most one
//     window), so that the client does not reconnect at once; it is not
//     counted in the rate, as Kafka un-records it.
//
// The first listener is exempt from both when there are several, as above.

// connSettings are the connection limits in effect (dynamic_configs.go).
type connSettings struct {
	perIP        int
	overrides    map[string]int // IP (canonical form) → limit
	max          int
	creationRate int // new connections per second, 0: no limit
}

// connLimits counts open connections; one per broker.
type connLimits struct {
	mu sync.Mutex
	connSettings
	rate *rateSensor // connections created on the client listeners

	byIP  map[string]int
	total int           // connections on client listeners
	freed chan struct{} // closed and replaced when a counted connection ends
	held  map[net.Conn]*time.Timer
}

func newConnLimits(cfg *Config) *connLimits {
	return &connLimits{
		connSettings: connSettings{perIP: cfg.MaxConnectionsPerIP, overrides: cfg.MaxConnectionsPerIPOverrides,
			max: cfg.MaxConnections, creationRate: cfg.MaxConnectionCreationRate},
		rate: newRateSensor(cfg.QuotaWindowNum, cfg.QuotaWindowSize.Milliseconds()),
		byIP: map[string]int{}, freed: make(chan struct{}), held: map[net.Conn]*time.Timer{}}
}

// ParseConnectionOverrides reads Kafka's max.connections.per.ip.overrides:
// "host:count" pairs separated by commas, the host an IP address or a
// name resolved now.
func ParseConnectionOverrides(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		i := strings.LastIndex(f, ":")
		if i <= 0 {
			return nil, fmt.Errorf("max connections per ip override %q: want host:count", f)
		}
		host, n := strings.Trim(f[:i], "[]"), f[i+1:]
		count, err := strconv.Atoi(n)
		if err != nil || count < 0 {
			return nil, fmt.Errorf("max connections per ip override %q: count is not a number ≥ 0", f)
		}
		ips := []net.IP{net.ParseIP(host)}
		if ips[0] == nil {
			if ips, err = net.LookupIP(host); err != nil {
				return nil, fmt.Errorf("max connections per ip override %q: %w", f, err)
			}
		}
		for _, ip := range ips {
			out[ip.String()] = count
		}
	}
	return out, nil
}

// set changes the limits (dynamic broker configs, dynamic_configs.go).
// Connections already open stay; a listener waiting for max.connections
// looks again.
func (l *connLimits) set(cs connSettings) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.creationRate = cs.creationRate
	if l.perIP == cs.perIP && l.max == cs.max && maps.Equal(l.overrides, cs.overrides) {
		return
	}
	l.perIP, l.overrides, l.max = cs.perIP, cs.overrides, cs.max
	close(l.freed)
	l.freed = make(chan struct{})
}

// creationThrottle records a new connection on the client listeners and
// returns how long the listener waits before serving it, for
// max.connection.creation.rate (0: within it, or no limit).
func (l *connLimits) creationThrottle(now time.Time) time.Duration {
	l.mu.Lock()
	bound := l.creationRate
	l.mu.Unlock()
	if bound <= 0 {
		return 0
	}
	ms := l.rate.recordAndThrottle(1, float64(bound), now.UnixMilli())
	return time.Duration(min(ms, l.rate.windowMs)) * time.Millisecond
}

// hold keeps a throttled connection open, unserved, for d, then closes it
// (an ip's connection_creation_rate). closeHeld closes those left at
// shutdown.
func (l *connLimits) hold(nc net.Conn, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[nc] = time.AfterFunc(d, func() {
		l.mu.Lock()
		delete(l.held, nc)
		l.mu.Unlock()
		nc.Close()
	})
}

func (l *connLimits) closeHeld() {
	l.mu.Lock()
	held := l.held
	l.held = map[net.Conn]*time.Timer{}
	l.mu.Unlock()
	for nc, t := range held {
		t.Stop()
		nc.Close()
	}
}

// formatConnectionOverrides is ParseConnectionOverrides' input for m,
// sorted by address.
func formatConnectionOverrides(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for ip, n := range m {
		host := ip
		if strings.Contains(ip, ":") {
			host = "[" + ip + "]"
		}
		parts = append(parts, host+":"+strconv.Itoa(n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// ipLimit is the limit of connections from ip, and whether there is one
// (an override of 0 refuses the address altogether).
func (l *connLimits) ipLimit(ip string) (int, bool) {
	if n, ok := l.overrides[ip]; ok {
		return n, true
	}
	return l.perIP, l.perIP > 0
}

// remoteIP is the canonical IP of a connection's peer ("" if not TCP/IP).
func remoteIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return ""
}

// admit counts a new connection from ip, or refuses it when the address
// is at its limit (Kafka's TooManyConnectionsException: the connection
// is closed at once).
func (l *connLimits) admit(ip string, counted bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lim, ok := l.ipLimit(ip); ok && l.byIP[ip] >= lim {
		return false
	}
	l.byIP[ip]++
	if counted {
		l.total++
	}
	return true
}

// release uncounts a connection admitted from ip.
func (l *connLimits) release(ip string, counted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
	if counted {
		l.total--
		close(l.freed)
		l.freed = make(chan struct{})
	}
}

// full reports whether the client listeners are at max.connections, and
// a channel closed when a counted connection ends.
func (l *connLimits) full() (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max > 0 && l.total >= l.max, l.freed
}
