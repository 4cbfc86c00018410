package broker

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/internal/testutil"
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
