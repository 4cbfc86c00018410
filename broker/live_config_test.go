package broker

import (
	"bytes"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

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
