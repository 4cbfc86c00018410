package broker

import (
	"context"
	"errors"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/sediment-io/sediment/metadata"
)

// coordinatorPartitions follows the leadership of an internal topic's
// partitions for a coordinator, as Kafka's coordinators follow election and
// resignation: the partitions this broker leads are loaded into the
// coordinator (again on a new leader epoch), the ones it stops leading are
// unloaded. The group coordinator (__consumer_offsets) and the transaction
// coordinator (__transaction_state) each own one.
//
// A background loop does this at start, on every metadata change and every
// retryEvery (a failed load is retried then), so a coordinator is ready
// before the first request after a restart or failover; requests call
// ensure too, which loads at once when the loop has not yet run.
type coordinatorPartitions struct {
	b     *Broker
	topic string
	// what, for logs and pprof labels: "offsets", "transaction state".
	what string
	c    partitionLoader

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the leadership loop

	mu struct {
		sync.Mutex
		loads map[int32]*partitionLoad
	}
}

// partitionLoader is the coordinator side: load a partition at a leader
// epoch (the channel gets the replay's one result), unload it, and map a
// key (group or transactional id) to its partition.
type partitionLoader interface {
	load(partition, leaderEpoch int32) <-chan error
	unload(partition int32)
	partitionFor(key string) int32
}

const coordinatorLoadRetry = 5 * time.Second

func newCoordinatorPartitions(b *Broker, topic, what string, c partitionLoader) *coordinatorPartitions {
	cp := &coordinatorPartitions{b: b, topic: topic, what: what, c: c}
	cp.mu.loads = make(map[int32]*partitionLoad)
	cp.ctx, cp.cancel = context.WithCancel(context.Background())
	return cp
}

// partitionLoad is one load of a partition at a leader epoch.
type partitionLoad struct {
	epoch int32
	res   <-chan error  // the coordinator's answer: one value
	once  sync.Once     // the receiver of that value records it:
	done  chan struct{} // closed then; err is set before
	err   error
}

// finished reports, without blocking, whether the load ended, and how.
func (l *partitionLoad) finished() (bool, error) {
	select {
	case <-l.done:
		return true, l.err
	case err, ok := <-l.res:
		l.record(err, ok)
		return true, l.err
	default:
		return false, nil
	}
}

// record stores the result; only the one receiver that got the value (ok)
// stores it, the others wait for it to be stored.
func (l *partitionLoad) record(err error, ok bool) {
	if !ok {
		<-l.done
		return
	}
	l.once.Do(func() {
		l.err = err
		close(l.done)
	})
}

// wait blocks until the load ended, d passed or ctx ended.
func (l *partitionLoad) wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.done:
	case err, ok := <-l.res:
		l.record(err, ok)
	case <-t.C:
	case <-ctx.Done():
	}
}

// start begins the leadership loop.
func (cp *coordinatorPartitions) start() {
	cp.wg.Add(1)
	go pprof.Do(cp.ctx, pprof.Labels("sediment", cp.what+"-leadership"), func(ctx context.Context) {
		defer cp.wg.Done()
		cp.loop(ctx)
	})
}

// stop ends the loop and waits for it; the coordinator is closed by its owner.
func (cp *coordinatorPartitions) stop() {
	cp.cancel()
	cp.wg.Wait()
}

func (cp *coordinatorPartitions) loop(ctx context.Context) {
	ch := cp.b.meta.Watch(ctx, cp.b.meta.State().Version)
	tick := time.NewTicker(coordinatorLoadRetry)
	defer tick.Stop()
	for {
		cp.ensureAll()
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-tick.C:
		}
	}
}

// ensureAll loads or unloads every partition of the topic by the current
// leadership; with no topic, everything loaded is unloaded.
func (cp *coordinatorPartitions) ensureAll() {
	t, ok := cp.b.meta.State().Topic(cp.topic)
	if !ok {
		cp.mu.Lock()
		loaded := cp.mu.loads
		cp.mu.loads = make(map[int32]*partitionLoad)
		cp.mu.Unlock()
		for p := range loaded {
			cp.c.unload(p)
		}
		return
	}
	for p := range t.Partitions {
		cp.ensurePartition(t, int32(p))
	}
}

// ensure loads or unloads the partitions of the keys by the current
// leadership.
func (cp *coordinatorPartitions) ensure(keys ...string) {
	t, ok := cp.b.meta.State().Topic(cp.topic)
	if !ok {
		return
	}
	var seen map[int32]bool
	for _, k := range keys {
		p := cp.c.partitionFor(k)
		if seen[p] {
			continue
		}
		if seen == nil {
			seen = make(map[int32]bool, len(keys))
		}
		seen[p] = true
		cp.ensurePartition(t, p)
	}
}

// ensureWait is ensure, then waits (at most d) for the key's partition to
// finish loading, so that the request after FindCoordinator is not told
// COORDINATOR_LOAD_IN_PROGRESS (librdkafka backs off seconds on it).
func (cp *coordinatorPartitions) ensureWait(ctx context.Context, key string, d time.Duration) {
	cp.ensure(key)
	cp.mu.Lock()
	l := cp.mu.loads[cp.c.partitionFor(key)]
	cp.mu.Unlock()
	if l != nil {
		l.wait(ctx, d)
	}
}

func (cp *coordinatorPartitions) ensurePartition(t *metadata.Topic, p int32) {
	if p < 0 || int(p) >= len(t.Partitions) {
		return
	}
	mp := t.Partitions[p]
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cur := cp.mu.loads[p]
	if mp.Leader != cp.b.cfg.NodeID {
		if cur != nil {
			delete(cp.mu.loads, p)
			cp.c.unload(p)
		}
		return
	}
	if cur != nil && cur.epoch == mp.LeaderEpoch {
		done, err := cur.finished()
		if !done || err == nil {
			return // loading, or loaded
		}
		if !errors.Is(err, errOpenBackoff) { // logged by the open, once per backoff
			cp.b.log.Warn("loading "+cp.what+" partition failed; retrying", "partition", p, "err", err)
		}
	}
	cp.mu.loads[p] = &partitionLoad{epoch: mp.LeaderEpoch, res: cp.c.load(p, mp.LeaderEpoch), done: make(chan struct{})}
}
