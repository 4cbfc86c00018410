package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// position is where a record sits in the log.
type position struct {
	partition int32
	offset    int64
}

// TestRestartMidStream restarts the broker twice, gracefully (SIGTERM) or by
// crash (SIGKILL), while a franz-go producer (acks=all, idempotent) and consumer run
// against it. Afterwards every acknowledged record must be in the log where
// it was acknowledged, everything the consumer saw must still be there, the
// consumer must have resumed and caught up, and no record may appear twice.
func TestRestartMidStream(t *testing.T) {
	t.Parallel() // see TestMain
	for _, graceful := range []bool{true, false} {
		name := "SIGKILL"
		if graceful {
			name = "SIGTERM"
		}
		t.Run(name, func(t *testing.T) { testRestartMidStream(t, graceful) })
	}
}

func testRestartMidStream(t *testing.T, graceful bool) {
	b := StartBroker(t, BrokerOptions{})
	const topic, partitions = "stream", 4
	b.CreateTopic(t, topic, partitions, nil)

	var (
		mu       sync.Mutex
		acked    = make(map[string]position) // value → where the broker said it went
		ackErrs  []error
		consumed = make(map[string]position) // value → where the consumer read it
	)
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }

	// The producer: batches of 20 keyed records, each batch waited for, so
	// that records keep flowing before, during and after the restart.
	producer := b.Client(t,
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	)
	produceCtx, cancelProduce := context.WithCancel(context.Background())
	stopProducing := make(chan struct{})
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for i := 0; ; {
			select {
			case <-stopProducing:
				return
			default:
			}
			batch := make([]*kgo.Record, 20)
			for j := range batch {
				batch[j] = &kgo.Record{
					Key:   []byte("k-" + strconv.Itoa(i%32)),
					Value: []byte("v-" + strconv.Itoa(i)),
				}
				i++
			}
			results := producer.ProduceSync(produceCtx, batch...)
			mu.Lock()
			for _, r := range results {
				if r.Err != nil {
					ackErrs = append(ackErrs, r.Err)
					continue
				}
				acked[string(r.Record.Value)] = position{r.Record.Partition, r.Record.Offset}
			}
			mu.Unlock()
		}
	}()

	// Two consumers read the topic from its start through the restart: the
	// command line, and a franz-go client in this process.
	cli := b.startSediment(t, "consume", topic, "--format", "json")
	consumer := b.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	consumeCtx, stopConsuming := context.WithCancel(context.Background())
	consumerDone := make(chan struct{})
	var consumeErrs []error
	go func() {
		defer close(consumerDone)
		for consumeCtx.Err() == nil {
			fetches := consumer.PollFetches(consumeCtx)
			mu.Lock()
			fetches.EachError(func(topic string, p int32, err error) {
				if !errors.Is(err, context.Canceled) {
					var loss *kgo.ErrDataLoss
					if errors.As(err, &loss) {
						consumeErrs = append(consumeErrs, fmt.Errorf("partition %d: %w", p, err))
					}
				}
			})
			fetches.EachRecord(func(r *kgo.Record) {
				v := string(r.Value)
				if prev, ok := consumed[v]; ok && prev != (position{r.Partition, r.Offset}) {
					consumeErrs = append(consumeErrs, fmt.Errorf("%s read at %v and at %d/%d", v, prev, r.Partition, r.Offset))
				}
				consumed[v] = position{r.Partition, r.Offset}
			})
			mu.Unlock()
		}
	}()
	stopAll := func() {
		select {
		case <-stopProducing:
		default:
			close(stopProducing)
		}
		cancelProduce() // on a failure, do not wait for a dead broker
		<-producerDone
		stopConsuming()
		<-consumerDone
	}
	defer stopAll()

	waitFor(t, 60*time.Second, "300 acknowledged records before the restart", func() bool { return ackedCount() >= 300 })
	// The command line must be consuming before the broker goes away: a
	// sediment process that is still starting up (a race-enabled binary
	// on a loaded machine takes seconds) checks that the broker answers
	// and, by design, exits at once on a refused connection. Restarting
	// under it would test that check, not a consumer riding out a restart.
	waitFor(t, 90*time.Second, "sediment consume to print its first record", func() bool {
		if cli.Exited() {
			t.Fatalf("sediment consume exited before the restart; stderr:\n%s", cli.Stderr())
		}
		return len(cli.Lines()) > 0
	})
	before := ackedCount()
	// Two restarts in a row: the second one finds the state the first
	// recovery (or clean shutdown) left behind.
	for restart := 1; restart <= 2; restart++ {
		at := ackedCount()
		b.Restart(graceful)
		waitFor(t, 90*time.Second, fmt.Sprintf("300 more acknowledged records after restart %d", restart),
			func() bool { return ackedCount() >= at+300 })
	}
	close(stopProducing)
	<-producerDone

	mu.Lock()
	want := make(map[string]position, len(acked))
	for v, p := range acked {
		want[v] = p
	}
	mu.Unlock()
	waitFor(t, 60*time.Second, "the consumer to catch up with every acknowledged record", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for v := range want {
			if _, ok := consumed[v]; !ok {
				return false
			}
		}
		return true
	})
	stopConsuming()
	<-consumerDone
	waitFor(t, 60*time.Second, "sediment consume to print every acknowledged record", func() bool {
		if cli.Exited() {
			t.Fatalf("sediment consume exited after %d lines; stderr:\n%s", len(cli.Lines()), cli.Stderr())
		}
		printed := make(map[string]bool)
		for _, line := range cli.Lines() {
			var r jsonRecord
			if json.Unmarshal([]byte(line), &r) == nil {
				printed[deref(r.Value)] = true
			}
		}
		for v := range want {
			if !printed[v] {
				return false
			}
		}
		return true
	})
	if err := cli.Interrupt(t); err != nil {
		t.Errorf("sediment consume did not stop cleanly on SIGINT: %v", err)
	}
	cliRecords := parseJSONRecords(t, strings.Join(cli.Lines(), "\n"))

	// A fresh read of the whole log.
	final := readAll(t, b, topic)
	byValue := make(map[string]position, len(final))
	for pos, v := range final {
		if prev, ok := byValue[v]; ok {
			t.Errorf("%s is in the log twice, at %v and %v (idempotent retries must not duplicate)", v, prev, pos)
		}
		byValue[v] = pos
	}
	mu.Lock()
	defer mu.Unlock()
	for v, p := range acked {
		if final[p] != v {
			t.Errorf("acknowledged %s at %v, but the log has %q there", v, p, final[p])
		}
	}
	for v, p := range consumed {
		if final[p] != v {
			t.Errorf("the consumer read %s at %v, but the log now has %q there", v, p, final[p])
		}
	}
	for _, err := range consumeErrs {
		t.Errorf("consumer: %v", err)
	}
	if len(ackErrs) > 0 {
		t.Logf("%d records were not acknowledged (allowed across a restart); first: %v", len(ackErrs), ackErrs[0])
	}
	t.Logf("%d records acknowledged (%d before the first restart), %d in the log, %d consumed", len(acked), before, len(final), len(consumed))

	// The command line saw, and sees, the same log.
	for _, r := range cliRecords {
		if final[position{r.Partition, r.Offset}] != deref(r.Value) {
			t.Errorf("sediment consume (through the restart): %d/%d is %q, the log has %q", r.Partition, r.Offset, deref(r.Value), final[position{r.Partition, r.Offset}])
		}
	}
	records := consumeJSON(t, b, topic)
	if len(records) != len(final) {
		t.Errorf("sediment consume read %d records, the log has %d", len(records), len(final))
	}
	for _, r := range records {
		if final[position{r.Partition, r.Offset}] != deref(r.Value) {
			t.Errorf("sediment consume: %d/%d is %q, the log has %q", r.Partition, r.Offset, deref(r.Value), final[position{r.Partition, r.Offset}])
		}
	}
}

// readAll reads every record of topic up to the end offsets it has now, with
// a fresh franz-go client, and returns value by position.
func readAll(t testing.TB, b *Broker, topic string) map[position]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := b.Admin(t).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	remaining := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	cl := b.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	out := make(map[position]string)
	for len(remaining) > 0 {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s back: %v (still missing %v)", topic, ctx.Err(), remaining)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			out[position{r.Partition, r.Offset}] = string(r.Value)
			if end, ok := remaining[r.Partition]; ok && r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return out
}
