package broker

import (
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
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

	// What an operator's alerts read: the failed broker's log directory
	// offline (it no longer serves clients, but /metrics is on the admin
	// address), the controller counting a fenced broker, and
	// the good broker leading both partitions below their replica count.
	if v := metricValue(t, bad, "sediment_log_dir_offline"); v != 1 {
		t.Errorf("the failed broker's sediment_log_dir_offline: %v, want 1", v)
	}
	if v := metricValue(t, good, "sediment_log_dir_offline"); v != 0 {
		t.Errorf("the good broker's sediment_log_dir_offline: %v, want 0", v)
	}
	if v := metricValue(t, good, "sediment_log_dir_usable_bytes"); v <= 0 {
		t.Errorf("sediment_log_dir_usable_bytes: %v", v)
	}
	sum := func(name string, labels ...string) (n float64) {
		for _, b := range brokers {
			n += metricValue(t, b, name, labels...)
		}
		return n
	}
	testutil.WaitFor(t, 10*time.Second, "the controller to count the fenced broker", func() bool {
		return sum("sediment_active_controller") == 1 && sum("sediment_cluster_brokers", "state", "fenced") == 1 &&
			sum("sediment_cluster_brokers", "state", "active") == 1
	})
	if v := sum("sediment_cluster_partitions"); v != 2 {
		t.Errorf("sediment_cluster_partitions: %v, want 2", v)
	}
	if v := sum("sediment_offline_partitions"); v != 0 {
		t.Errorf("sediment_offline_partitions: %v, want 0", v)
	}
	for name, want := range map[string]float64{"sediment_partitions": 2, "sediment_under_replicated_partitions": 2,
		"sediment_at_min_isr_partitions": 2, "sediment_under_min_isr_partitions": 0} {
		if v := metricValue(t, good, name); v != want {
			t.Errorf("the good broker's %s: %v, want %v", name, v, want)
		}
	}
	if v := metricValue(t, good, "sediment_isr_shrinks_total"); v < 1 {
		t.Errorf("the good broker's sediment_isr_shrinks_total: %v, want the shrink of the partition it led", v)
	}
}

// metricValue is the value of the gauge or counter name in b's registry, of
// the series with the given label name/value pairs (0 when it has none).
func metricValue(t testing.TB, b *Broker, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := b.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == labels[i] && l.GetValue() == labels[i+1] }) {
					continue series
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
