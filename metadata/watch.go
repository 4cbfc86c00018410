package metadata

import (
	"context"
)

// publish is called by the FSM (on raft's FSM goroutine) after each batch of
// applied changes, or with restored after a snapshot was installed.
func (n *Node) publish(changes []Change, restored *State) {
	n.recordClusterID(changes, restored)
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

// stableClusterID is the Raft stable store's key for the cluster id.
var stableClusterID = []byte("sediment-cluster-id")

// recordClusterID keeps the cluster id, once applied, in the Raft stable
// store. After a restart the FSM applies nothing past its last snapshot
// until a leader tells it the commit index, so State().ClusterID may be
// empty then; identify (op 5) still tells this cluster's id, by which a
// leader knows a voter removed while it was down from another quorum's.
func (n *Node) recordClusterID(changes []Change, restored *State) {
	if n.clusterIDKept.Load() {
		return
	}
	st := restored
	if len(changes) > 0 {
		st = changes[len(changes)-1].State
	}
	if st == nil || st.ClusterID == "" {
		return
	}
	if err := n.wal.Set(stableClusterID, []byte(st.ClusterID)); err != nil {
		n.logger.Warn("cannot record the cluster id", "err", err)
		return
	}
	n.clusterIDKept.Store(true)
}

// clusterID is the applied state's cluster id, or else the recorded one.
func (n *Node) clusterID() string {
	if id := n.State().ClusterID; id != "" {
		return id
	}
	id, err := n.wal.Get(stableClusterID)
	if err != nil {
		return ""
	}
	return string(id)
}
