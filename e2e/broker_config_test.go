package e2e

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDynamicBrokerConfigsCLI: `sediment cluster config` sets a topic
// config's cluster-wide default (log.retention.ms) on a running broker
// process; a topic that does not set retention.ms takes it at once
// (retention deletes its old segments, while a topic with its own
// retention.ms keeps them), topic describe shows where the value comes
// from, and the setting survives a restart (metadata log). Bad values and
// the broker's static settings are refused with the broker's message.
func TestDynamicBrokerConfigsCLI(t *testing.T) {
	t.Parallel() // see TestMain
	b := StartBroker(t, BrokerOptions{ExtraArgs: []string{"--log-retention-check-interval", "100ms"}})
	seg, keep := "16384", "604800000"
	b.CreateTopic(t, "follows", 1, map[string]*string{"segment.bytes": &seg})
	b.CreateTopic(t, "keeps", 1, map[string]*string{"segment.bytes": &seg, "retention.ms": &keep})

	// Records an hour old, over several segments of each topic.
	cl := b.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	old := time.Now().Add(-time.Hour)
	for _, topic := range []string{"follows", "keeps"} {
		for batch := 0; batch < 10; batch++ { // a batch each: segments roll between them
			var recs []*kgo.Record
			for i := 0; i < 10; i++ {
				v := make([]byte, 1024)
				rand.Read(v) // incompressible
				recs = append(recs, &kgo.Record{Topic: topic, Value: v, Timestamp: old})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := func(topic string) int64 {
		t.Helper()
		offs, err := b.Admin(t).ListStartOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup(topic, 0)
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		return o.Offset
	}
	if s := start("follows"); s != 0 {
		t.Fatalf("log start %d before the dynamic retention, want 0", s)
	}

	if out := b.sediment(t, "", "cluster", "config", "describe").Stdout; !strings.Contains(out, "cluster default: no dynamic configs") {
		t.Fatalf("describe before any set:\n%s", out)
	}
	if out := b.sediment(t, "", "cluster", "config", "set", "log.retention.ms=60000").Stdout; !strings.Contains(out, "cluster default: set log.retention.ms") {
		t.Fatalf("set:\n%s", out)
	}
	waitFor(t, 30*time.Second, "retention by the dynamic log.retention.ms", func() bool { return start("follows") > 0 })
	if s := start("keeps"); s != 0 {
		t.Fatalf("a topic with its own retention.ms lost records to the cluster default: log start %d", s)
	}
	desc := b.sediment(t, "", "topic", "describe", "--all-configs", "follows").Stdout
	if !strings.Contains(desc, "retention.ms=60000") || !strings.Contains(desc, "cluster default (dynamic)") {
		t.Fatalf("topic describe does not show the dynamic default:\n%s", desc)
	}

	for _, bad := range [][]string{{"log.retention.ms=soon"}, {"num.partitions=3"}, {"nokey"}} {
		r := b.sedimentMayFail(t, "", append([]string{"cluster", "config", "set"}, bad...)...)
		if r.Err == nil {
			t.Errorf("set %v succeeded:\n%s", bad, r.Stdout)
		}
	}
	if r := b.sedimentMayFail(t, "", "cluster", "config", "set", "num.partitions=3"); !strings.Contains(r.Stderr, "static") {
		t.Errorf("a static setting: %q, want the broker's reason", r.Stderr)
	}

	b.Restart(true)
	out := b.sediment(t, "", "cluster", "config", "describe").Stdout
	if !strings.Contains(out, "log.retention.ms") || !strings.Contains(out, "60000") || !strings.Contains(out, "DYNAMIC_DEFAULT_BROKER_CONFIG") {
		t.Fatalf("after a restart:\n%s", out)
	}
	all := b.sediment(t, "", "cluster", "config", "describe", "--broker", "1", "--all").Stdout
	if !strings.Contains(all, "num.partitions") || !strings.Contains(all, "log.retention.ms") {
		t.Fatalf("describe --broker 1 --all:\n%s", all)
	}
	b.sediment(t, "", "cluster", "config", "delete", "log.retention.ms")
	if out := b.sediment(t, "", "cluster", "config", "describe").Stdout; !strings.Contains(out, "no dynamic configs") {
		t.Fatalf("after delete:\n%s", out)
	}
}

// TestBrokerLogLevelCLI: `sediment cluster log-level` shows a broker
// process's log level and sets it while it runs (its BROKER_LOGGER config,
// KIP-412): at DEBUG the broker writes debug lines at once; a level Kafka
// does not name is refused with the broker's reason; a restart goes back
// to the --log-level it was started with, as Kafka forgets broker logger
// changes.
func TestBrokerLogLevelCLI(t *testing.T) {
	t.Parallel() // see TestMain
	b := StartBroker(t, BrokerOptions{})
	level := func() string {
		t.Helper()
		return strings.TrimSpace(b.sediment(t, "", "cluster", "log-level", "--broker", "1").Stdout)
	}
	if got := level(); got != "broker 1: root INFO" {
		t.Fatalf("log-level: %q, want broker 1: root INFO", got)
	}
	if r := b.sedimentMayFail(t, "", "cluster", "log-level", "--broker", "1", "verbose"); r.Err == nil || !strings.Contains(r.Stderr, "not a supported log level") {
		t.Fatalf("an unknown level: err %v, stderr %q", r.Err, r.Stderr)
	}
	if strings.Contains(b.Log(), "level=DEBUG") {
		t.Fatal("debug lines at INFO")
	}
	if out := b.sediment(t, "", "cluster", "log-level", "--broker", "1", "debug").Stdout; !strings.Contains(out, "broker 1: root DEBUG") {
		t.Fatalf("set debug: %q", out)
	}
	// A new client: the broker logs its ApiVersions at debug.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Client(t).Ping(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a debug line", func() bool { return strings.Contains(b.Log(), "level=DEBUG") })
	b.Restart(true)
	if got := level(); got != "broker 1: root INFO" {
		t.Fatalf("after a restart: %q, want INFO (broker logger levels are not kept)", got)
	}
}
