package metadata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sediment-io/sediment/internal/testutil"
)

// TestControllerFencesDeadVoterFast: a broker whose process died (its
// voter's Raft address refuses connections) is fenced by the controller's
// liveness probe long before its session times out, while a broker that
// merely stopped heartbeating (its voter still accepts connections) keeps
// its session.
func TestControllerFencesDeadVoterFast(t *testing.T) {
	var logs testutil.Buffer
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	ctx := testContext(t, 60*time.Second)
	leader := c.leader()
	var dead, silent int32 = -1, -1
	for id := range c.nodes {
		switch {
		case id == leader.ID():
		case dead < 0:
			dead = id
		default:
			silent = id
		}
	}
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		r := mustPropose(t, leader, &RegisterBroker{BrokerID: id, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1})
		epochs[id] = r.BrokerEpoch
	}
	// Every broker heartbeats until stopped; the leader's never stops.
	stops := map[int32]context.CancelFunc{}
	var wg sync.WaitGroup
	for id := int32(1); id <= 3; id++ {
		hctx, stop := context.WithCancel(ctx)
		stops[id] = stop
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				pctx, cancel := context.WithTimeout(hctx, time.Second)
				_, _ = leader.Propose(pctx, &BrokerHeartbeat{BrokerID: id, BrokerEpoch: epochs[id]})
				cancel()
				select {
				case <-hctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
		wg.Wait()
	}()
	eventually(t, 10*time.Second, "every broker unfenced", func() error {
		for id := int32(1); id <= 3; id++ {
			if b, _ := leader.State().Broker(id); b.Fenced {
				return fmt.Errorf("broker %d fenced", id)
			}
		}
		return nil
	})
	if st := leader.State(); sessionTimeoutMs(st) < 9000 {
		t.Fatalf("session timeout %d ms: the test needs the 9 s default", sessionTimeoutMs(st))
	}

	stops[dead]()
	stops[silent]()
	c.stop(dead) // its listener closes: dials are refused
	start := time.Now()
	eventually(t, 6*time.Second, fmt.Sprintf("broker %d (dead) fenced before its session timeout", dead), func() error {
		if b, _ := leader.State().Broker(dead); !b.Fenced {
			return errors.New("not fenced")
		}
		return nil
	})
	t.Logf("the dead broker was fenced %v after it stopped", time.Since(start).Round(time.Millisecond))
	if want := fmt.Sprintf(`msg="metadata: fenced broker: its Raft address refuses connections" node=%d broker=%d`, leader.ID(), dead); !strings.Contains(logs.String(), want) {
		t.Errorf("the fence is not logged (%s):\n%s", want, logs.String())
	}
	if b, _ := leader.State().Broker(silent); b.Fenced {
		t.Fatalf("broker %d, silent but alive, was fenced %v after its last heartbeat (session timeout 9s)", silent, time.Since(start))
	}
}

// TestPlanFenceDead: only a broker still registered with the epoch found
// dead and not fenced yet is fenced; other entries are forgotten.
func TestPlanFenceDead(t *testing.T) {
	st := newState()
	for id := int32(1); id <= 3; id++ {
		if _, err := (&RegisterBroker{BrokerID: id, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1}).apply(st, uint64(10+id)); err != nil {
			t.Fatal(err)
		}
		if _, err := (&BrokerHeartbeat{BrokerID: id, BrokerEpoch: int64(10 + id)}).apply(st, uint64(20+id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := (&FenceBroker{BrokerID: 3, BrokerEpoch: 13}).apply(st, 30); err != nil {
		t.Fatal(err)
	}
	dead := map[int32]int64{1: 11, 2: 99, 3: 13, 4: 1}
	cmds := planFenceDead(st, dead)
	if len(cmds) != 1 {
		t.Fatalf("planned %v, want one FenceBroker", cmds)
	}
	if f, ok := cmds[0].(*FenceBroker); !ok || f.BrokerID != 1 || f.BrokerEpoch != 11 {
		t.Fatalf("planned %#v, want FenceBroker{1, 11}", cmds[0])
	}
	if len(dead) != 1 || dead[1] != 11 {
		t.Fatalf("dead after planning: %v, want only broker 1", dead)
	}
}
