package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKillDuringCompaction SIGKILLs a broker process while a keyed producer
// (acks=all) writes to a compacted topic with tiny segments and the log
// cleaner runs with no backoff, SEDIMENT_COMPACTION_KILLS times (5 in `make
// test`; `make compaction-kills` runs 20). After every restart a consumer
// reading the partition from its start must find, for every key, the last
// acknowledged write as its latest record, or a write sent after it whose
// acknowledgement the kill cut off; never an older value, never a lost key.
// Leftover .cleaned/.swap/.deleted files seen right after the kills, and the
// cleaner's pass counter, show that the kills land during cleaning.
func TestKillDuringCompaction(t *testing.T) {
	kills := 5
	if s := os.Getenv("SEDIMENT_COMPACTION_KILLS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SEDIMENT_COMPACTION_KILLS=%q", s)
		}
		kills = n
	}
	b := StartBroker(t, BrokerOptions{ExtraArgs: []string{"--log-cleaner-backoff", "50ms", "--log-flush", "os"}})
	const topic, keys = "compacted-kills", 40
	b.CreateTopic(t, topic, 1, map[string]*string{"cleanup.policy": ptr("compact"), "segment.bytes": ptr("8192"),
		"min.cleanable.dirty.ratio": ptr("0.01"), "delete.retention.ms": ptr("86400000")})

	var (
		mu      sync.Mutex
		acked   = map[string]int{} // key → sequence number of its last acknowledged write
		maxSent = map[string]int{} // key → highest sequence number sent
	)
	seq := 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	residues := 0
	for round := 0; round <= kills; round++ {
		// Check the log against what was acknowledged.
		view := latestByKey(t, b, topic)
		mu.Lock()
		for k, a := range acked {
			got, ok := view[k]
			if !ok {
				t.Fatalf("round %d: key %s lost (last acknowledged write %d)", round, k, a)
			}
			if got < a || got > maxSent[k] {
				t.Fatalf("round %d: key %s reads write %d; last acknowledged %d, last sent %d", round, k, got, a, maxSent[k])
			}
			// A write the kill cut off but that landed is now the
			// latest: it counts as acknowledged from here on.
			acked[k] = got
		}
		mu.Unlock()
		if round == kills {
			break
		}
		// Produce until killed.
		cl := b.Client(t, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
			kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(2048), kgo.RecordDeliveryTimeout(20*time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				batch := make([]*kgo.Record, 30)
				mu.Lock()
				for i := range batch {
					k := fmt.Sprintf("key-%02d", rng.IntN(keys))
					seq++
					batch[i] = &kgo.Record{Key: []byte(k), Value: []byte(fmt.Sprintf("%d %s", seq, strings.Repeat("x", 40)))}
					maxSent[k] = seq
				}
				mu.Unlock()
				results := cl.ProduceSync(ctx, batch...)
				mu.Lock()
				for _, r := range results {
					if r.Err == nil {
						n, _ := strconv.Atoi(strings.Fields(string(r.Record.Value))[0])
						if n > acked[string(r.Record.Key)] {
							acked[string(r.Record.Key)] = n
						}
					}
				}
				mu.Unlock()
			}
		}()
		// Let it write and clean for a while, then kill it.
		produced := func() int { mu.Lock(); defer mu.Unlock(); return seq }
		mu.Lock() // rng is the producer goroutine's too
		target := seq + 300 + rng.IntN(900)
		mu.Unlock()
		waitFor(t, 2*time.Minute, "writes and a cleaning pass before the kill", func() bool {
			return produced() >= target && cleanerPasses(b) >= 1
		})
		b.Kill()
		cancel()
		cl.Close() // fails the records in flight to the dead broker
		<-done
		if n := countResidues(b.DataDir); n > 0 {
			residues++
		}
		b.Start()
	}
	t.Logf("%d kills, %d left cleaner files behind, %d writes", kills, residues, seq)
}

// latestByKey reads the partition from its start (up to its end offset now)
// and returns the sequence number of every key's latest record.
func latestByKey(t *testing.T, b *Broker, topic string) map[string]int {
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
	end := int64(0)
	if o, ok := ends.Lookup(topic, 0); ok {
		end = o.Offset
	}
	out := map[string]int{}
	if end == 0 {
		return out
	}
	cl := b.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	last := int64(-1)
	for last+1 < end {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s back: %v (at %d of %d)", topic, ctx.Err(), last, end)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset <= last {
				t.Fatalf("offset %d after %d", r.Offset, last)
			}
			last = r.Offset
			f := strings.Fields(string(r.Value))
			if len(f) == 0 {
				t.Fatalf("record at %d: %q", r.Offset, r.Value)
			}
			n, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatalf("record at %d: %q", r.Offset, r.Value)
			}
			out[string(r.Key)] = n
		})
	}
	return out
}

// cleanerPasses reads the broker's count of finished cleaning passes (since
// its start) from /metrics, -1 if not there.
func cleanerPasses(b *Broker) float64 {
	for _, line := range strings.Split(scrape(b), "\n") {
		if v, ok := strings.CutPrefix(line, "sediment_log_cleaner_passes_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// countResidues counts the cleaner's swap files in the data directory.
func countResidues(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".cleaned") || strings.HasSuffix(path, ".swap") || strings.HasSuffix(path, ".deleted")) {
			n++
		}
		return nil
	})
	return n
}

func ptr(s string) *string { return &s }
