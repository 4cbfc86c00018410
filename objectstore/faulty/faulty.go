// Package faulty injects faults into an objectstore.Store (Wrap) and into
// the HTTP traffic of the s3 backend (Transport), for tests: errors,
// latency, throttling, truncated and corrupted reads, lost acknowledgements.
//
// Faults follow explicit rules, matched in order against each call; a rule
// with a Probability draws from a generator seeded by the caller, so a run
// is reproducible for a given seed and call order. With no rules the
// wrapper is transparent (it passes the conformance suite).
package faulty

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/sediment-io/sediment/objectstore"
)

// Op is a set of Store calls a Rule applies to.
type Op uint16

// The calls.
const (
	OpReadObject Op = 1 << iota
	OpReadAt
	OpReadRange
	OpCreate // CreateObject
	OpWrite  // Writer.Write
	OpCommit // Writer.Close
	OpHead
	OpList
	OpDelete

	OpRead   = OpReadObject | OpReadAt | OpReadRange
	OpMutate = OpCreate | OpWrite | OpCommit | OpDelete
	OpAll    = OpDelete<<1 - 1
)

var opNames = []string{"read-object", "read-at", "read-range", "create", "write", "commit", "head", "list", "delete"}

func (o Op) String() string {
	var names []string
	for i, n := range opNames {
		if o&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, "|")
}

// Injected errors. Both wrap objectstore.ErrUnavailable, as a backend's
// transient errors do.
var (
	ErrInjected  = fmt.Errorf("faulty: injected fault: %w", objectstore.ErrUnavailable)
	ErrThrottled = fmt.Errorf("faulty: throttled (SlowDown): %w", objectstore.ErrUnavailable)
)

// Rule describes one fault.
type Rule struct {
	// Ops is the set of calls the rule applies to; 0 means all.
	Ops Op
	// KeyPrefix limits the rule to keys (List: prefixes) starting with it.
	KeyPrefix string
	// After skips the first After matching calls.
	After int
	// Times is how often the rule fires at most; 0 means without limit.
	Times int
	// Probability, if in (0, 1), is the chance that a matching call
	// fires, drawn from the seeded generator; otherwise it always fires.
	Probability float64

	// Latency delays the call (or, with nothing else set, is the whole
	// fault). The delay ends early if the call's context ends.
	Latency time.Duration
	// Hold, if set, holds the call until it is closed (a bucket that
	// hangs until the test lets it go), or until the call's context
	// ends; then the call goes on as with Latency.
	Hold <-chan struct{}
	// Err is returned by the call; default ErrInjected, or ErrThrottled
	// with Throttle. Ignored by Truncate and Corrupt.
	Err      error
	Throttle bool
	// Truncate cuts reads short: ReadAt fails with an error wrapping
	// io.ErrUnexpectedEOF and ErrUnavailable, a ReadRange stream ends
	// with one after half the range.
	Truncate bool
	// Corrupt flips one bit in the bytes a read returns (ReadAt, or the
	// first chunk of a ReadRange stream), silently.
	Corrupt bool
	// LostAck (commit only) commits the object and then returns the error
	// anyway, as when an acknowledgement is lost on the way.
	LostAck bool
}

type ruleState struct {
	Rule
	seen, fired int
}

// Store wraps an objectstore.Store with faults.
type Store struct {
	inner objectstore.Store
	mu    struct {
		sync.Mutex
		rng      *rand.Rand
		rules    []*ruleState
		injected map[Op]int
	}
}

var _ objectstore.Store = (*Store)(nil)

// Wrap returns inner with the given rules; seed drives Probability.
func Wrap(inner objectstore.Store, seed uint64, rules ...Rule) *Store {
	s := &Store{inner: inner}
	s.mu.rng = rand.New(rand.NewPCG(seed, 0x5eed))
	s.mu.injected = map[Op]int{}
	s.SetRules(rules...)
	return s
}

// SetRules replaces the rules (e.g. the bucket goes down, then comes back).
func (s *Store) SetRules(rules ...Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.rules = s.mu.rules[:0]
	for _, r := range rules {
		s.mu.rules = append(s.mu.rules, &ruleState{Rule: r})
	}
}

// Injected returns how many faults fired on calls in ops.
func (s *Store) Injected(ops Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for op, c := range s.mu.injected {
		if op&ops != 0 {
			n += c
		}
	}
	return n
}

// match returns the first rule that fires for (op, key), counting it.
func (s *Store) match(op Op, key string) *Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.mu.rules {
		if r.Ops != 0 && r.Ops&op == 0 || !strings.HasPrefix(key, r.KeyPrefix) {
			continue
		}
		r.seen++
		if r.seen <= r.After || (r.Times > 0 && r.fired >= r.Times) {
			continue
		}
		if r.Probability > 0 && r.Probability < 1 && s.mu.rng.Float64() >= r.Probability {
			continue
		}
		r.fired++
		s.mu.injected[op]++
		rule := r.Rule
		return &rule
	}
	return nil
}

// inject applies a matched rule's latency and returns its error, if any.
func inject(ctx context.Context, op Op, key string, r *Rule) error {
	if r == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err // as the inner store would
	}
	if r.Hold != nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.Hold:
		}
	}
	if r.Latency > 0 {
		t := time.NewTimer(r.Latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if r.Truncate || r.Corrupt || ((r.Latency > 0 || r.Hold != nil) && r.Err == nil && !r.Throttle) {
		return nil
	}
	return r.err(op, key)
}

func (r *Rule) err(op Op, key string) error {
	base := r.Err
	if base == nil {
		base = ErrInjected
		if r.Throttle {
			base = ErrThrottled
		}
	}
	return fmt.Errorf("faulty: %s %q: %w", op, key, base)
}

// ReadObject implements objectstore.Store.
func (s *Store) ReadObject(ctx context.Context, key string) (objectstore.Reader, int64, error) {
	if err := inject(ctx, OpReadObject, key, s.match(OpReadObject, key)); err != nil {
		return nil, 0, err
	}
	r, size, err := s.inner.ReadObject(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	return &reader{s: s, r: r, key: key}, size, nil
}

// CreateObject implements objectstore.Store.
func (s *Store) CreateObject(ctx context.Context, key string, opts objectstore.CreateOptions) (objectstore.Writer, error) {
	if err := inject(ctx, OpCreate, key, s.match(OpCreate, key)); err != nil {
		return nil, err
	}
	w, err := s.inner.CreateObject(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return &writer{s: s, w: w, ctx: ctx, key: key}, nil
}

// Head implements objectstore.Store.
func (s *Store) Head(ctx context.Context, key string) (objectstore.ObjectInfo, error) {
	if err := inject(ctx, OpHead, key, s.match(OpHead, key)); err != nil {
		return objectstore.ObjectInfo{}, err
	}
	return s.inner.Head(ctx, key)
}

// List implements objectstore.Store.
func (s *Store) List(ctx context.Context, prefix, delimiter string) (objectstore.Listing, error) {
	if err := inject(ctx, OpList, prefix, s.match(OpList, prefix)); err != nil {
		return objectstore.Listing{}, err
	}
	return s.inner.List(ctx, prefix, delimiter)
}

// Delete implements objectstore.Store. A rule matches on the first key.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	first := ""
	if len(keys) > 0 {
		first = keys[0]
	}
	if err := inject(ctx, OpDelete, first, s.match(OpDelete, first)); err != nil {
		return err
	}
	return s.inner.Delete(ctx, keys...)
}

// IsNotExistError implements objectstore.Store.
func (s *Store) IsNotExistError(err error) bool { return s.inner.IsNotExistError(err) }

// Close implements objectstore.Store.
func (s *Store) Close() error { return s.inner.Close() }

type reader struct {
	s   *Store
	r   objectstore.Reader
	key string
}

func truncated(op Op, key string) error {
	return fmt.Errorf("faulty: %s %q: %w: %w", op, key, objectstore.ErrUnavailable, io.ErrUnexpectedEOF)
}

func (r *reader) ReadAt(ctx context.Context, p []byte, off int64) error {
	rule := r.s.match(OpReadAt, r.key)
	if err := inject(ctx, OpReadAt, r.key, rule); err != nil {
		return err
	}
	if err := r.r.ReadAt(ctx, p, off); err != nil {
		return err
	}
	switch {
	case rule == nil:
	case rule.Truncate:
		return truncated(OpReadAt, r.key)
	case rule.Corrupt && len(p) > 0:
		p[len(p)/2] ^= 0x10
	}
	return nil
}

func (r *reader) ReadRange(ctx context.Context, off, length int64) (io.ReadCloser, error) {
	rule := r.s.match(OpReadRange, r.key)
	if err := inject(ctx, OpReadRange, r.key, rule); err != nil {
		return nil, err
	}
	rc, err := r.r.ReadRange(ctx, off, length)
	if err != nil || rule == nil {
		return rc, err
	}
	switch {
	case rule.Truncate:
		return &cutReader{rc: rc, left: length / 2, key: r.key}, nil
	case rule.Corrupt:
		return &flipReader{rc: rc}, nil
	}
	return rc, nil
}

func (r *reader) Close() error { return r.r.Close() }

// cutReader ends a stream with io.ErrUnexpectedEOF after left bytes.
type cutReader struct {
	rc   io.ReadCloser
	left int64
	key  string
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, truncated(OpReadRange, c.key)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.rc.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *cutReader) Close() error { return c.rc.Close() }

// flipReader flips one bit of the first non-empty read.
type flipReader struct {
	rc      io.ReadCloser
	flipped bool
}

func (f *flipReader) Read(p []byte) (int, error) {
	n, err := f.rc.Read(p)
	if n > 0 && !f.flipped {
		p[n/2] ^= 0x10
		f.flipped = true
	}
	return n, err
}

func (f *flipReader) Close() error { return f.rc.Close() }

type writer struct {
	s   *Store
	w   objectstore.Writer
	ctx context.Context
	key string
}

func (w *writer) Write(p []byte) (int, error) {
	if err := inject(w.ctx, OpWrite, w.key, w.s.match(OpWrite, w.key)); err != nil {
		return 0, err
	}
	return w.w.Write(p)
}

func (w *writer) Close() error {
	rule := w.s.match(OpCommit, w.key)
	if rule != nil && rule.LostAck {
		if err := w.w.Close(); err != nil {
			return err
		}
		return rule.err(OpCommit, w.key)
	}
	if err := inject(w.ctx, OpCommit, w.key, rule); err != nil {
		return errors.Join(err, w.w.Abort())
	}
	return w.w.Close()
}

func (w *writer) Abort() error { return w.w.Abort() }
