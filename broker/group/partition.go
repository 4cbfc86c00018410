package group

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"
	"unicode/utf16"
)

// PartitionFor returns the __consumer_offsets partition of a group, as Kafka
// computes it: abs(groupID.hashCode()) % partitions, with Java's String
// hashCode over UTF-16 code units and Kafka's Utils.abs (MinInt32 → 0).
func PartitionFor(groupID string, partitions int32) int32 {
	if partitions <= 0 {
		return 0
	}
	var h int32
	for _, u := range utf16.Encode([]rune(groupID)) {
		h = 31*h + int32(u)
	}
	if h == -1<<31 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % partitions
}

// PartitionFor returns the __consumer_offsets partition of a group under
// this coordinator's partition count: the topic's, once it exists.
func (c *Coordinator) PartitionFor(groupID string) int32 {
	n := c.cfg.Partitions
	if c.cfg.PartitionCount != nil {
		if m := c.cfg.PartitionCount(); m > 0 {
			n = m
		}
	}
	return PartitionFor(groupID, n)
}

// partition is one __consumer_offsets partition this coordinator leads.
// Owned by run, except queue.
type partition struct {
	id      int32
	log     Log
	loading bool
	gone    bool // unloaded; late events for it are dropped
	// loadedAt is when the load finished (LoadedSince).
	loadedAt time.Time
	groups   map[string]*group

	ctx    context.Context
	cancel context.CancelFunc
	queue  *appendQueue
	// inflight holds the appends queued or running, to fail them on unload.
	inflight map[*appendJob]struct{}
	// txnEnds holds transactional offsets ended while loading (txn.go).
	txnEnds []txnEnd
}

type appendJob struct {
	records []Record
	done    func(err error) // runs on the loop
}

// appendQueue hands jobs from the loop to the partition's appender without
// ever blocking the loop. The lock guards only the slice.
type appendQueue struct {
	mu struct {
		sync.Mutex
		jobs []*appendJob
	}
	signal chan struct{} // capacity 1
}

func (q *appendQueue) push(j *appendJob) {
	q.mu.Lock()
	q.mu.jobs = append(q.mu.jobs, j)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *appendQueue) takeAll() []*appendJob {
	q.mu.Lock()
	defer q.mu.Unlock()
	jobs := q.mu.jobs
	q.mu.jobs = nil
	return jobs
}

// Load makes this coordinator the owner of a __consumer_offsets partition:
// it replays log in the background (its groups answer
// COORDINATOR_LOAD_IN_PROGRESS meanwhile) and then serves them. A partition
// already loaded is dropped and loaded again (a new leader epoch). The
// channel gets the replay's result and is then closed.
func (c *Coordinator) Load(partitionID int32, log Log) <-chan error {
	res := make(chan error, 1)
	ok := c.inLoop(func() {
		if old := c.partitions[partitionID]; old != nil {
			c.dropPartition(old, nil)
		}
		ctx, cancel := context.WithCancel(context.Background())
		p := &partition{
			id:       partitionID,
			log:      log,
			loading:  true,
			groups:   make(map[string]*group),
			ctx:      ctx,
			cancel:   cancel,
			queue:    &appendQueue{signal: make(chan struct{}, 1)},
			inflight: make(map[*appendJob]struct{}),
		}
		c.partitions[partitionID] = p
		c.wg.Add(1)
		go pprof.Do(ctx, pprof.Labels("sediment", "group-load", "partition", strconv.Itoa(int(partitionID))), func(ctx context.Context) {
			defer c.wg.Done()
			st := newLoadState()
			err := log.Replay(ctx, st.apply)
			if err != nil {
				err = fmt.Errorf("group: load of partition %d: %w", partitionID, err)
			}
			if !c.inLoop(func() { c.finishLoad(p, st, err) }) {
				err = ErrClosed
			}
			res <- err
			close(res)
		})
	})
	if !ok {
		res <- ErrClosed
		close(res)
	}
	return res
}

// Unload gives up a partition (leadership moved): its groups are forgotten,
// their waiting requests answered NOT_COORDINATOR, and its appender stopped.
func (c *Coordinator) Unload(partitionID int32) {
	c.inLoop(func() {
		if p := c.partitions[partitionID]; p != nil {
			c.dropPartition(p, nil)
		}
	})
}

func (c *Coordinator) finishLoad(p *partition, st *loadState, err error) {
	if p.gone {
		return
	}
	if err != nil {
		c.logger.Error("group: partition load failed", "partition", p.id, "err", err)
		c.dropPartition(p, err)
		return
	}
	now := c.now()
	for id, meta := range st.groups {
		g := c.newGroup(p, id)
		g.loadMetadata(meta, now)
		if len(g.members) > 0 {
			c.logger.Info("group: loaded classic group", "group", id, "partition", p.id, "generation", g.generation, "members", len(g.members))
		}
	}
	for id, r := range st.consumers {
		g := c.newGroup(p, id)
		c.loadConsumer(g, r, now)
	}
	for id, offs := range st.offsets {
		g := p.groups[id]
		if g == nil {
			g = c.newGroup(p, id) // offsets only: a simple group
			g.stateTime = now.UnixMilli()
		}
		g.offsets = offs
	}
	p.loading = false
	p.loadedAt = now
	c.applyTxnEnds(p)
	for _, g := range p.groups {
		for _, m := range g.members {
			c.touch(g, m)
		}
		if g.cg != nil {
			for _, m := range g.cg.members {
				c.cgTouch(g, m)
				if len(m.revoking) > 0 {
					c.cgRevokeDeadline(g, m) // as Kafka's onLoaded
				}
			}
		}
	}
	c.wg.Add(1)
	go pprof.Do(p.ctx, pprof.Labels("sediment", "group-append", "partition", strconv.Itoa(int(p.id))), func(ctx context.Context) {
		defer c.wg.Done()
		c.appender(p)
	})
	c.logger.Info("group: partition loaded", "partition", p.id, "groups", len(p.groups))
}

// dropPartition forgets a partition. Must run on the loop.
func (c *Coordinator) dropPartition(p *partition, _ error) {
	if p.gone {
		return
	}
	p.gone = true
	p.cancel()
	if c.partitions[p.id] == p {
		delete(c.partitions, p.id)
	}
	for j := range p.inflight {
		delete(p.inflight, j)
		j.done(ErrNotLeader)
	}
	for _, g := range p.groups {
		if g.cg == nil && len(g.members) > 0 {
			c.logger.Info("group: unloading classic group", "group", g.id, "partition", p.id, "state", g.state, "generation", g.generation, "members", len(g.members))
		}
		c.shutdownGroup(g)
	}
	p.groups = nil
	c.checkIdle()
}

// appender writes the partition's queued jobs, batching all that are waiting
// into one Append (group commit), and reports each batch back to the loop.
func (c *Coordinator) appender(p *partition) {
	for {
		select {
		case <-p.queue.signal:
		case <-p.ctx.Done():
			return
		case <-c.stop:
			return
		}
		jobs := p.queue.takeAll()
		if len(jobs) == 0 {
			continue
		}
		var records []Record
		for _, j := range jobs {
			records = append(records, j.records...)
		}
		err := p.log.Append(p.ctx, records)
		if err != nil && p.ctx.Err() != nil {
			return // unloaded: dropPartition answered the jobs
		}
		deliver := func() {
			if p.gone {
				return
			}
			for _, j := range jobs {
				if _, ok := p.inflight[j]; !ok {
					continue
				}
				delete(p.inflight, j)
				j.done(err)
			}
			c.checkIdle()
		}
		select {
		case c.events <- deliver:
		case <-p.ctx.Done():
			return
		case <-c.stop:
			return
		}
	}
}

// appendRecords queues records for p; done runs on the loop with the
// result. Must run on the loop.
func (c *Coordinator) appendRecords(p *partition, records []Record, done func(error)) {
	j := &appendJob{records: records, done: done}
	p.inflight[j] = struct{}{}
	p.queue.push(j)
}

// Loaded reports whether the partition is loaded and served (for tests and
// the broker's readiness checks).
func (c *Coordinator) Loaded(partitionID int32) bool {
	var ok bool
	if !c.inLoop(func() {
		p := c.partitions[partitionID]
		ok = p != nil && !p.loading
	}) {
		return false
	}
	return ok
}

// LoadedSince returns when the partition's load finished, if it is loaded:
// a coordinator that took a partition over knows only what its log holds,
// not the members that live in memory alone (share groups' members) until
// they come back.
func (c *Coordinator) LoadedSince(partitionID int32) (time.Time, bool) {
	var at time.Time
	var ok bool
	if !c.inLoop(func() {
		p := c.partitions[partitionID]
		ok = p != nil && !p.loading
		if ok {
			at = p.loadedAt
		}
	}) {
		return time.Time{}, false
	}
	return at, ok
}

// barrier waits until no append is queued or running. For tests.
func (c *Coordinator) barrier(ctx context.Context) error {
	ch := make(chan struct{})
	if !c.inLoop(func() {
		c.idleWaiters = append(c.idleWaiters, ch)
		c.checkIdle()
	}) {
		return ErrClosed
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stopped:
		return ErrClosed
	}
}

// checkIdle wakes barrier waiters once nothing is in flight. Must run on
// the loop.
func (c *Coordinator) checkIdle() {
	if len(c.idleWaiters) == 0 {
		return
	}
	for _, p := range c.partitions {
		if len(p.inflight) > 0 {
			return
		}
	}
	for _, ch := range c.idleWaiters {
		close(ch)
	}
	c.idleWaiters = nil
}

func isNotLeader(err error) bool { return errors.Is(err, ErrNotLeader) }

// Partitions is the configured __consumer_offsets partition count (the
// count the topic is created with; PartitionFor maps groups by the
// existing topic's count, see Config.PartitionCount).
func (c *Coordinator) Partitions() int32 { return c.cfg.Partitions }
