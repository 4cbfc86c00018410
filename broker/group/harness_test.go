package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// quiet discards the coordinator's logs in tests.
var quiet = slog.New(slog.DiscardHandler)

// fakeClock is a Clock that moves only when Advance is called. Advance fires
// due timers in deadline order; each callback returns only after the
// coordinator's loop handled it, so Advance is a synchronisation point.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	seq     uint64
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.stopped {
			return false
		}
		t.stopped = true
		for i, x := range c.timers {
			if x == t {
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
				return true
			}
		}
		return false // already fired
	}
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		idx := -1
		for i, t := range c.timers {
			if t.at.After(target) {
				continue
			}
			if next == nil || t.at.Before(next.at) || (t.at.Equal(next.at) && t.seq < next.seq) {
				next, idx = t, i
			}
		}
		if next == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		c.timers = append(c.timers[:idx], c.timers[idx+1:]...)
		next.stopped = true
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
	}
}

// memLog is an in-memory Log. failNext makes the next Append fail.
type memLog struct {
	mu       sync.Mutex
	records  []Record
	failNext error
	printed  int
}

func (l *memLog) Append(_ context.Context, records []Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.failNext; err != nil {
		l.failNext = nil
		return err
	}
	for _, r := range records {
		nr := Record{Key: append([]byte(nil), r.Key...)}
		if r.Value != nil {
			nr.Value = append([]byte{}, r.Value...)
		}
		l.records = append(l.records, nr)
	}
	return nil
}

func (l *memLog) Replay(ctx context.Context, fn func(key, value []byte) error) error {
	l.mu.Lock()
	recs := append([]Record(nil), l.records...)
	l.mu.Unlock()
	for _, r := range recs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(r.Key, r.Value); err != nil {
			return err
		}
	}
	return nil
}

// dump prints the records appended since the last dump.
func (l *memLog) dump() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.records[l.printed:] {
		b.WriteString(describeRecord(r))
		b.WriteByte('\n')
	}
	l.printed = len(l.records)
	return b.String()
}

func describeRecord(r Record) string {
	d, err := decodeRecord(r.Key, r.Value)
	if err != nil {
		return "corrupt: " + err.Error()
	}
	switch d.kind {
	case keyOffsetCommitV1:
		if d.offset == nil {
			return fmt.Sprintf("offset %s %s/%d: tombstone", d.group, d.topic, d.partition)
		}
		s := fmt.Sprintf("offset %s %s/%d: %d epoch=%d meta=%q", d.group, d.topic, d.partition, d.offset.offset, d.offset.leaderEpoch, d.offset.metadata)
		if d.offset.expireTime >= 0 {
			s += fmt.Sprintf(" expire=+%dms", d.offset.expireTime-d.offset.commitTime)
		}
		return s
	case keyGroupMetadata:
		if d.meta == nil {
			return fmt.Sprintf("group %s: tombstone", d.group)
		}
		v := d.meta
		var ms []string
		for _, m := range v.Members {
			s := m.MemberID
			if m.InstanceID != nil {
				s += "(" + *m.InstanceID + ")"
			}
			s += "=" + string(m.Assignment)
			ms = append(ms, s)
		}
		return fmt.Sprintf("group %s: v%d type=%s gen=%d proto=%s leader=%s members=[%s]",
			d.group, v.Version, v.ProtocolType, v.Generation, deref(v.Protocol), deref(v.Leader), strings.Join(ms, " "))
	case keyConsumerGroup:
		if d.consumer == nil {
			return fmt.Sprintf("consumer-group %s: tombstone", d.group)
		}
		var ms []string
		for _, m := range d.consumer.Members {
			set := map[string][]int32{}
			for _, tp := range m.Assigned {
				set[tp.Topic] = append(set[tp.Topic], tp.Partition)
			}
			s := fmt.Sprintf("%s@%d=%s", m.ID, m.Epoch, fmtParts(set))
			if len(m.Revoking) > 0 {
				rv := map[string][]int32{}
				for _, tp := range m.Revoking {
					rv[tp.Topic] = append(rv[tp.Topic], tp.Partition)
				}
				s += "-" + fmtParts(rv)
			}
			ms = append(ms, s)
		}
		return fmt.Sprintf("consumer-group %s: epoch=%d target-epoch=%d members=[%s]", d.group, d.consumer.Epoch, d.consumer.TargetEpoch, strings.Join(ms, " "))
	}
	return "ignored record"
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func errName(code int16) string {
	if code == 0 {
		return "NONE"
	}
	var ke *kerr.Error
	if err := kerr.ErrorForCode(code); errors.As(err, &ke) {
		return ke.Message
	}
	return fmt.Sprintf("code(%d)", code)
}

// pendingCalls holds answers of calls that wait (JoinGroup, SyncGroup).
type pendingCalls struct {
	mu      sync.Mutex
	order   []string
	waiting map[string]bool
	done    map[string]string
}

func newPendingCalls() *pendingCalls {
	return &pendingCalls{waiting: make(map[string]bool), done: make(map[string]string)}
}

func (p *pendingCalls) start(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting[name] {
		return false
	}
	p.order = append(p.order, name)
	p.waiting[name] = true
	return true
}

func (p *pendingCalls) finish(name, out string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.waiting[name] {
		p.done[name] = "ANSWERED TWICE: " + out
		return
	}
	delete(p.waiting, name)
	p.done[name] = out
}

// take returns the answers that arrived, in call order.
func (p *pendingCalls) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	var keep []string
	for _, n := range p.order {
		if s, ok := p.done[n]; ok {
			out = append(out, n+": "+s)
			delete(p.done, n)
			continue
		}
		keep = append(keep, n)
	}
	p.order = keep
	return out
}

func (p *pendingCalls) waitingNames() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for n := range p.waiting {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
