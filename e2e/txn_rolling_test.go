package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker/txn"
)

// TestTxnPipelineRollingRestart runs the exactly-once pipeline of
// TestTxnPipelineSIGKILL (two e2e/ctp processes) against three brokers whose
// internal topics are replicated on all three (__consumer_offsets and
// __transaction_state with one partition each, so one broker coordinates
// the group and another, or the same, both transactional ids), with pin and
// pout at replication factor 3, and restarts the brokers one after another
// with SIGTERM (a controlled shutdown moves leadership away first) while
// the pipelines copy, as an operator's rolling restart does: each broker
// once, the current group coordinator first, the transaction coordinator
// next if it is another broker, each time after the cluster is fully in
// sync and the pipeline has copied more. Every restart of a coordinator
// makes a follower, whose high watermark lags its log end, the new one.
// A targeted step follows (below): an offset commit acknowledged just
// before the group coordinator's SIGTERM must be at the new coordinator.
// The output is then checked as in TestTxnPipelineSIGKILL: every input
// record exactly once, in order per key, nothing past them.
func TestTxnPipelineRollingRestart(t *testing.T) {
	n := pipelineRecords(t, 12000)
	const partitions, keys = 4, 64
	c := StartCluster(t, 3, "--default-replication-factor", "3",
		"--offsets-topic-num-partitions", "1", "--transaction-state-log-num-partitions", "1",
		"--group-initial-rebalance-delay", "0s", "--replica-fetch-wait-max", "4s", "--replica-lag-time-max", "10s")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.Client(t))
	for _, topic := range []string{"pin", "pout"} {
		resp, err := adm.CreateTopic(ctx, partitions, 3, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}
	topics := []string{"pin", "pout"}
	for _, topic := range topics {
		c.WaitFullISR(t, adm, topic, 60*time.Second)
	}

	feed := newPipelineFeed(t, ctx, n, keys, c.Client)
	seeds := strings.Join(c.Seeds(), ",")
	pipes := []*ctpProc{startCTP(t, seeds, "ctp-a", 300), startCTP(t, seeds, "ctp-b", 300)}
	total := int64(n)
	// Three restarts, each after at least step more records were copied;
	// the input runs a step ahead of each target, so every restart
	// happens with records still to copy; then the targeted step.
	step := total / 8
	feed.sendTo(2 * step)
	feed.waitCopied(step/2, 3*time.Minute, "the first transactions")
	// The first transactions created both internal topics.
	topics = append(topics, "__consumer_offsets", txn.StateTopic)
	leaderOf := func(topic string) int32 {
		ps := c.WaitFullISR(t, adm, topic, 60*time.Second)
		return ps[0].Leader
	}
	restarted := map[int32]bool{}
	last := feed.last
	for i := 0; i < len(c.Brokers); i++ {
		target := min(last+step, total)
		feed.sendTo(target + step)
		feed.waitCopied(target, 3*time.Minute, fmt.Sprintf("before restart %d", i))
		// In sync everywhere before the next broker stops, as a rolling
		// restart waits for no under-replicated partition.
		for _, topic := range topics {
			c.WaitFullISR(t, adm, topic, 60*time.Second)
		}
		groupCo, txnCo := leaderOf("__consumer_offsets"), leaderOf(txn.StateTopic)
		victim := int32(-1)
		for _, id := range []int32{groupCo, txnCo, 1, 2, 3} {
			if !restarted[id] {
				victim = id
				break
			}
		}
		restarted[victim] = true
		var roles []string
		if victim == groupCo {
			roles = append(roles, "group coordinator")
		}
		if victim == txnCo {
			roles = append(roles, "transaction coordinator")
		}
		last = feed.last
		t.Logf("restart %d at %d copied: SIGTERM of broker %d (%s)", i, last, victim, strings.Join(roles, ", "))
		c.Broker(victim).Restart(true)
	}
	// The targeted step. With the pipelines idle (everything sent so far
	// is copied, the last transactions and their markers are written),
	// the test commits an offset of group "probe" (its only partition is
	// the pipelines' group's one), stops the group coordinator with
	// SIGTERM at once, and both pipelines restart, so that each reads its
	// committed offsets from the new coordinator. The followers hold that
	// commit, but learn that the high watermark passed it only from the
	// answer to their next fetch, which waits for the next append to a
	// partition of that leader or --replica-fetch-wait-max (4s here, below
	// --replica-lag-time-max 10s): the new coordinator becomes the leader
	// with its high watermark below the commit. A coordinator that loads
	// only to the high watermark (as before b8114d8) misses the probe's
	// acknowledged commit, which the test then reads back.
	feed.waitCopied(int64(feed.sent), 3*time.Minute, "all the input sent so far")
	for _, topic := range topics {
		c.WaitFullISR(t, adm, topic, 60*time.Second)
	}
	co := c.Broker(leaderOf("__consumer_offsets"))
	last = feed.last
	probe := kadm.Offsets{}
	probe.Add(kadm.Offset{Topic: "pin", Partition: 0, At: 42, LeaderEpoch: -1})
	committed, err := adm.CommitOffsets(ctx, "probe", probe)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		t.Fatalf("commit of group probe: %v", err)
	}
	t.Logf("at %d copied, the pipelines idle, group probe committed: SIGTERM of broker %d (group coordinator), then both pipelines restarted", last, co.NodeID)
	if err := co.Stop(); err != nil {
		t.Errorf("broker %d: graceful stop exited with %v", co.NodeID, err)
	}
	for _, p := range pipes {
		p.kill()
		p.start()
	}
	// A fresh client for each try: one that cached the stopped broker as
	// the coordinator dialled it for a minute on the old code.
	var probed kadm.OffsetResponses
	lastErr := ""
	waitFor(t, 60*time.Second, "an answer to OffsetFetch of group probe", func() bool {
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		defer rcancel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds()...), kgo.RequestRetries(1))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		probed, err = kadm.NewClient(cl).FetchOffsets(rctx, "probe")
		if err != nil && err.Error() != lastErr {
			lastErr = err.Error()
			t.Logf("OffsetFetch of group probe: %v", err)
		}
		return err == nil
	})
	if o, ok := probed.Lookup("pin", 0); !ok || o.Err != nil || o.At != 42 {
		t.Errorf("group probe's acknowledged commit of pin-0 at 42, read from the new coordinator after broker %d stopped: %+v (found %v)", co.NodeID, o, ok)
	}
	co.Start()
	count := feed.finish(pipes, 2*time.Minute, c.Client)
	t.Logf("%d records copied exactly once through a rolling restart of 3 brokers", count)
}
