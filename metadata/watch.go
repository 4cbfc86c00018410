package metadata

import (
	"context"
)

// publish is called by the FSM (on raft's FSM goroutine) after each batch of
// applied changes, or with restored after a snapshot was installed.
func (n *Node) publish(changes []Change, restored *State) {
	n.watch.Lock()
	defer n.watch.Unlock()
	if restored != nil {
		n.watch.ring = n.watch.ring[:0]
		n.watch.floor = restored.Version
	}
	n.watch.ring = append(n.watch.ring, changes...)
	// Trim to WatchBuffer once the ring holds twice that, so the copy is
	// amortised over WatchBuffer changes.
	if over := len(n.watch.ring) - n.cfg.WatchBuffer; over >= n.cfg.WatchBuffer {
		n.watch.floor = n.watch.ring[over-1].Version
		n.watch.ring = append(n.watch.ring[:0:0], n.watch.ring[over:]...)
	}
	close(n.watch.notify)
	n.watch.notify = make(chan struct{})
}

// Watch streams the changes committed after fromVersion, in order. When the
// node no longer holds all of them (fromVersion is too old, the watcher fell
// behind, or a snapshot was installed), it sends one Change with a nil Command
// whose State replaces everything, and continues from there. The channel is
// closed when ctx ends or the node closes. A typical broker:
//
//	st := node.State()
//	load(st)
//	for c := range node.Watch(ctx, st.Version) { apply(c) }
func (n *Node) Watch(ctx context.Context, fromVersion uint64) <-chan Change {
	out := make(chan Change, 64)
	started := n.goTracked("watch", func() {
		defer close(out)
		last := fromVersion
		for {
			n.watch.Lock()
			notify := n.watch.notify
			var batch []Change
			if last < n.watch.floor {
				st := n.fsm.current()
				batch = []Change{{Version: st.Version, State: st}}
			} else {
				for i := len(n.watch.ring) - 1; i >= 0 && n.watch.ring[i].Version > last; i-- {
					batch = append(batch, n.watch.ring[i])
				}
				for i, j := 0, len(batch)-1; i < j; i, j = i+1, j-1 {
					batch[i], batch[j] = batch[j], batch[i]
				}
			}
			n.watch.Unlock()
			for _, c := range batch {
				select {
				case out <- c:
					last = max(last, c.Version)
				case <-ctx.Done():
					return
				case <-n.ctx.Done():
					return
				}
			}
			if len(batch) > 0 {
				continue
			}
			select {
			case <-notify:
			case <-ctx.Done():
				return
			case <-n.ctx.Done():
				return
			}
		}
	})
	if !started {
		close(out)
	}
	return out
}
