package broker

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
)

// TestProduceAcks1And0 produces with acks=1 and acks=0, which are answered
// before their fsync (log-flush commit): the background fsync must still
// move the high watermark so that consumers read every record, and the high
// watermark never passes what is durable.
func TestProduceAcks1And0(t *testing.T) {
	b := startBroker(t, "")
	for _, tc := range []struct {
		name string
		acks kgo.Acks
	}{{"acks1", kgo.LeaderAck()}, {"acks0", kgo.NoAck()}} {
		name, acks := tc.name, tc.acks
		t.Run(name, func(t *testing.T) {
			topic := "t-" + name
			createTopic(t, b, topic, 3, nil)
			cl := newClient(t, b, kgo.RequiredAcks(acks), kgo.DisableIdempotentWrite(), kgo.DefaultProduceTopic(topic))
			recs := makeRecords(topic, 600, name)
			produceAll(t, cl, recs)
			got := consumeN(t, b, topic, len(recs))
			seen := map[string]int{}
			for _, rs := range got {
				for _, r := range rs {
					seen[string(r.Value)]++
				}
			}
			for _, r := range recs {
				if seen[string(r.Value)] != 1 {
					t.Fatalf("record %q consumed %d times", r.Value, seen[string(r.Value)])
				}
			}
			st := b.meta.State()
			for i := int32(0); i < 3; i++ {
				p, err := b.store.partition(st, topic, i)
				if err != nil {
					t.Fatal(err)
				}
				testutil.WaitFor(t, 10*time.Second, "high watermark at the log end", func() bool {
					return p.log.HighWatermark() == p.log.LogEndOffset()
				})
				if hw, d := p.log.HighWatermark(), p.log.DurableEnd(); hw > d {
					t.Fatalf("partition %d: high watermark %d past the durable end %d", i, hw, d)
				}
			}
		})
	}
}

// TestProduceAcks1ReadYourWrites: after acks=1 to a partition whose ISR is
// the leader alone, a ListOffsets counts the records and a DeleteRecords up
// to them is in range, as in Kafka, which moves a lone replica's high
// watermark with the append. acks=1 is answered before the fsync, so both
// wait for it (awaitLoneWrites). The disk here is slow to fsync (100 ms
// each, a fault injected through the log's file system), so an answer
// that did not wait shows as a latest offset behind what was acknowledged.
func TestProduceAcks1ReadYourWrites(t *testing.T) {
	var slow atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpFileSync && slow.Load() && strings.HasSuffix(path, ".log") {
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	}))
	b := startBroker(t, "", func(c *Config) { c.LogFS = fs })
	const topic = "ryw"
	createTopic(t, b, topic, 1, nil)
	cl := newClient(t, b, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	slow.Store(true)
	for i := 1; i <= 3; i++ {
		if err := cl.ProduceSync(testCtx(t), &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		ends, err := adm.ListEndOffsets(testCtx(t), topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(topic, 0)
		if o.Err != nil || o.Offset != int64(i) {
			t.Fatalf("after %d acks=1 records the latest offset is %d (%v), want %d", i, o.Offset, o.Err, i)
		}
	}
	if err := cl.ProduceSync(testCtx(t), &kgo.Record{Value: []byte("4")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 4})
	res, err := adm.DeleteRecords(testCtx(t), del)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := res.Lookup(topic, 0); r.Err != nil || r.LowWatermark != 4 {
		t.Fatalf("DeleteRecords up to the 4th acks=1 record: low watermark %d, %v", r.LowWatermark, r.Err)
	}
}
