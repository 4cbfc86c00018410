package metadata

import (
	"fmt"
	"testing"
	"time"
)

// TestCloseDuringMembershipChange closes voters while proposals and voter
// changes are in flight, with very short timeouts so leadership churns: every
// Close must return (no goroutine stranded on a raft future).
func TestCloseDuringMembershipChange(t *testing.T) {
	for i := range 10 {
		c := &testCluster{t: t, cfgs: map[int32]Config{}, nodes: map[int32]*Node{}}
		for id := int32(1); id <= 3; id++ {
			cfg := fastConfig(t, id, t.TempDir())
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
			cfg.Bootstrap = id == 1
			c.cfgs[id] = cfg
			c.open(id)
		}
		ctx := testContext(t, 20*time.Second)
		_ = c.nodes[1].WaitForLeader(ctx)
		n1, addr2 := c.nodes[1], c.nodes[2].Addr()
		go func() { _ = n1.AddVoter(ctx, Peer{ID: 2, Addr: addr2}) }()
		if i%2 == 0 {
			_ = c.nodes[1].AddVoter(ctx, Peer{ID: 3, Addr: c.nodes[3].Addr()})
		}
		for id, n := range c.nodes {
			done := make(chan struct{})
			go func() { _ = n.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				panic(fmt.Sprintf("close of node %d hung", id))
			}
		}
	}
}
