package broker

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/internal/testutil"
)

// TestAlterSegmentBytesLive: segment.bytes altered through kadm
// (IncrementalAlterConfigs, then the legacy AlterConfigs) applies to the
// open partition log: the next segments roll at the new size, without a
// restart.
func TestAlterSegmentBytesLive(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	topic := "live"
	createTopic(t, b, topic, 1, map[string]*string{"segment.bytes": kadm.StringPtr("1048576")})
	cl := newClient(t, b, kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	p, err := b.store.partition(b.meta.State(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("v"), 1000)
	produce := func(n int) {
		t.Helper()
		for range n { // one record per batch: the roll check runs per append
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(20)
	if n := len(p.log.Segments()); n != 1 {
		t.Fatalf("%d segments at segment.bytes=1MiB", n)
	}

	alterAndCheck := func(newSize int64, alter func() error) {
		t.Helper()
		if err := alter(); err != nil {
			t.Fatal(err)
		}
		// The config reaches the log through the metadata watch.
		testutil.WaitFor(t, 10*time.Second, "segment.bytes applied to the open log", func() bool {
			return p.log.Config().SegmentBytes == newSize
		})
		before := len(p.log.Segments())
		produce(30)
		segs := p.log.Segments()
		rolled := segs[before:]
		if len(rolled) < 3 {
			t.Fatalf("segment.bytes=%d: %d new segments after 30 KB: %+v", newSize, len(rolled), segs)
		}
		for _, s := range rolled[:len(rolled)-1] { // the new sealed ones
			if s.Size > newSize || s.Size < newSize/2 {
				t.Fatalf("segment.bytes=%d: a new segment of %d bytes: %+v", newSize, s.Size, segs)
			}
		}
	}
	alterAndCheck(8192, func() error {
		res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "segment.bytes", Value: kadm.StringPtr("8192")}}, topic)
		if err == nil {
			err = res[0].Err
		}
		return err
	})
	alterAndCheck(4096, func() error {
		res, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "segment.bytes", Value: kadm.StringPtr("4096")}}, topic)
		if err == nil {
			err = res[0].Err
		}
		return err
	})
	// Everything produced reads back.
	if end := p.log.LogEndOffset(); end != 80 {
		t.Fatalf("log end %d, want 80", end)
	}
}

// TestFileDeleteDelayConfig: file.delete.delay.ms defaults to the broker's
// log.segment.delete.delay.ms (DescribeConfigs says so), reaches the
// partition logs, follows an alter, and a bad value is refused.
func TestFileDeleteDelayConfig(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.LogSegmentDeleteDelay = 5 * time.Second })
	ctx := testCtx(t)
	topic := "delay"
	createTopic(t, b, topic, 1, nil)
	adm := kadm.NewClient(newClient(t, b))
	p, err := b.store.partition(b.meta.State(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.log.Config().FileDeleteDelay; d != 5*time.Second {
		t.Fatalf("log's delay %v, want the broker default 5s", d)
	}
	described := func() (string, kmsg.ConfigSource) {
		t.Helper()
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On(topic, nil)
		if err != nil || rc.Err != nil {
			t.Fatal(err, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == "file.delete.delay.ms" {
				return c.MaybeValue(), c.Source
			}
		}
		t.Fatal("file.delete.delay.ms not described")
		return "", 0
	}
	if v, src := described(); v != "5000" || src != kmsg.ConfigSourceStaticBrokerConfig {
		t.Fatalf("described %q (%v), want 5000 from the broker's setting", v, src)
	}
	res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "file.delete.delay.ms", Value: kadm.StringPtr("0")}}, topic)
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "file.delete.delay.ms applied to the open log", func() bool {
		return p.log.Config().FileDeleteDelay == 0
	})
	if v, src := described(); v != "0" || src != kmsg.ConfigSourceDynamicTopicConfig {
		t.Fatalf("described %q (%v), want 0 from the topic", v, src)
	}
	res, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "file.delete.delay.ms", Value: kadm.StringPtr("-1")}}, topic)
	if err == nil {
		err = res[0].Err
	}
	if !errors.Is(err, kerr.InvalidConfig) {
		t.Fatalf("file.delete.delay.ms=-1: %v, want INVALID_CONFIG", err)
	}
}
