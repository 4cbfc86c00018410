package broker

import (
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
)

// TestLogFailureFencesBroker: a partition log whose fsync fails (hotlog
// marks it failed: appends refused until reopened) makes its broker fence
// itself, as Kafka stops a broker whose only log directory failed: its
// leaderships move to the other in-sync replica, which takes the writes,
// and its readiness says why. Before, it stayed the leader and refused
// every append for good, the other replica in the ISR unable to take over
// (an operator review: thousands of records timed out until a restart).
func TestLogFailureFencesBroker(t *testing.T) {
	var failDir atomic.Pointer[string]
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if d := failDir.Load(); d != nil && op == errorfs.OpFileSync && strings.HasPrefix(path, *d) && strings.HasSuffix(path, ".log") {
			return syscall.EIO
		}
		return nil
	}))
	brokers := startPair(t, func(c *Config) {
		c.Listeners = []Listener{{Name: "PLAINTEXT", Addr: "127.0.0.1:0", SecurityProtocol: ProtocolPlaintext}}
		c.LogFS = fs
		c.ControlledShutdownTimeout = time.Second
	})
	const topic = "failing"
	cl := newClient(t, brokers[0], kgo.SeedBrokers(brokers[0].Addr(), brokers[1].Addr()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(1000), kgo.RetryTimeout(2*time.Minute))
	createPairTopic(t, kadm.NewClient(cl), topic, nil)
	ctx := testCtx(t)
	for p := range int32(2) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("before")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	bad, good := brokers[0], brokers[1]
	dir := bad.cfg.DataDir
	failDir.Store(&dir)
	for p := range int32(2) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("after")}).FirstErr(); err != nil {
			t.Fatalf("partition %d after broker %d's log failed: %v", p, bad.cfg.NodeID, err)
		}
	}
	testutil.WaitFor(t, 30*time.Second, "the failed broker fenced", func() bool {
		br, ok := good.meta.State().Broker(bad.cfg.NodeID)
		return ok && br.Fenced
	})
	st := good.meta.State()
	tm, _ := st.Topic(topic)
	for _, mp := range tm.Partitions {
		if mp.Leader != good.cfg.NodeID {
			t.Errorf("partition %d: leader %d, want %d", mp.Index, mp.Leader, good.cfg.NodeID)
		}
	}
	if r := bad.Readiness(false); r.Ready || !strings.Contains(strings.Join(r.Reasons, "; "), "a partition log failed after an I/O error") {
		t.Errorf("the failed broker's readiness: %+v", r)
	}
}
