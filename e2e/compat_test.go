package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// compatBroker is the one broker process the client-compatibility tests
// share (TestCompat's subtests), with no initial rebalance delay so that
// group tests settle quickly.
func compatBroker(t *testing.T) *Broker {
	return StartBroker(t, BrokerOptions{ExtraArgs: []string{"--group-initial-rebalance-delay", "0s"}})
}

// compatRecords returns n keyed records "k-i" → "v-i ..." with a few awkward
// values (empty, non-ASCII, long).
func compatRecords(prefix string, n int) map[string]string {
	m := make(map[string]string, n)
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("%s-k-%04d", prefix, i)
		switch i % 4 {
		case 0:
			m[k] = fmt.Sprintf("value %d", i)
		case 1:
			m[k] = fmt.Sprintf("väl€ur %d", i)
		case 2:
			m[k] = strings.Repeat(fmt.Sprintf("%d,", i), 50)
		case 3:
			m[k] = ""
		}
	}
	return m
}

// sortedKeys returns the keys of m in order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// collector gathers consumed records from concurrent consumers and counts
// duplicates.
type collector struct {
	mu   sync.Mutex
	got  map[string]string
	dups []string
	// perPartition is the last offset seen per partition, to check order.
	last      map[int32]int64
	disorders []string
	// allowDups accepts records read twice (a rebalance while records were
	// fetched but not committed) and then does not check order.
	allowDups bool
}

func newCollector() *collector {
	return &collector{got: map[string]string{}, last: map[int32]int64{}}
}

func (c *collector) add(partition int32, offset int64, key, value string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.got[key]; ok {
		c.dups = append(c.dups, key)
	}
	c.got[key] = value
	if last, ok := c.last[partition]; ok && offset <= last {
		c.disorders = append(c.disorders, fmt.Sprintf("partition %d: offset %d after %d", partition, offset, last))
	}
	c.last[partition] = offset
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

// check compares what was consumed with want, exactly.
func (c *collector) check(t *testing.T, what string, want map[string]string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.dups) > 0 && !c.allowDups {
		t.Errorf("%s: %d records consumed twice, e.g. %q", what, len(c.dups), c.dups[0])
	}
	if len(c.disorders) > 0 && !c.allowDups {
		t.Errorf("%s: out of order: %v", what, c.disorders[0])
	}
	if len(c.got) != len(want) {
		t.Errorf("%s: consumed %d distinct records, want %d", what, len(c.got), len(want))
	}
	bad := 0
	for k, v := range want {
		if g, ok := c.got[k]; !ok || g != v {
			if bad < 3 {
				t.Errorf("%s: record %q = %q (present %v), want %q", what, k, g, ok, v)
			}
			bad++
		}
	}
}

// checkCommitted asserts, through franz-go's admin client, that group has
// committed the log end offset of every partition of topic.
func checkCommitted(t *testing.T, b *Broker, group, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := b.Admin(t)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(topic, o.Partition)
		if o.Offset == 0 {
			return
		}
		if !ok || c.At != o.Offset {
			t.Errorf("group %s, %s/%d: committed %+v (found %v), want %d", group, topic, o.Partition, c.At, ok, o.Offset)
		}
	})
}

// produceFranz writes records with franz-go, for tests whose subject is a
// consumer.
func produceFranz(t *testing.T, b *Broker, topic string, recs map[string]string) {
	t.Helper()
	cl := b.Client(t, kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var rs []*kgo.Record
	for _, k := range sortedKeys(recs) {
		rs = append(rs, &kgo.Record{Key: []byte(k), Value: []byte(recs[k])})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("franz-go produce to %s: %v", topic, err)
	}
}

// consumeFranz reads every record of topic from the start with franz-go.
func consumeFranz(t *testing.T, b *Broker, topic string, n int, opts ...kgo.Opt) *collector {
	t.Helper()
	cl := b.Client(t, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newCollector()
	for c.len() < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume %s: got %d of %d records before the deadline", topic, c.len(), n)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("consume %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { c.add(r.Partition, r.Offset, string(r.Key), string(r.Value)) })
	}
	return c
}

// TestCompat runs every client's compatibility suite against one broker
// process. Each subtest uses its own topics and groups.
func TestCompat(t *testing.T) {
	b := compatBroker(t)
	t.Run("sarama", func(t *testing.T) { testSarama(t, b) })
	t.Run("kafka-go", func(t *testing.T) { testKafkaGo(t, b) })
	t.Run("kafkajs", func(t *testing.T) { testKafkaJS(t, b) })
	t.Run("kcat", func(t *testing.T) { testKcatMore(t, b) })
	t.Run("confluent-python", func(t *testing.T) { testConfluentEOS(t, b) })
	t.Run("kafka-python", func(t *testing.T) { testKafkaPython(t, b) })
	t.Run("kafka-python-codecs", func(t *testing.T) { testKafkaPythonCodecs(t, b) })
	t.Run("kafka-python-group", func(t *testing.T) { testKafkaPythonGroup(t, b) })
	t.Run("platformatic", func(t *testing.T) { testPlatformatic(t, b) })
	t.Run("burrow", func(t *testing.T) { testBurrow(t, b) })
}

// scriptRecord is a record as the client scripts (Python, JavaScript)
// report it: partition, offset, key, value, headers as [key, value] pairs.
type scriptRecord struct {
	P int32      `json:"p"`
	O int64      `json:"o"`
	K string     `json:"k"`
	V string     `json:"v"`
	H [][]string `json:"h"`
}

// checkTxnCopy checks the output of an exactly-once copy: franz-go reading
// read_committed sees want, every record once; reading uncommitted it also
// sees the decoys of the aborted transactions (keys containing
// "-aborted-"), which must number decoys.
func checkTxnCopy(t *testing.T, b *Broker, topic string, want map[string]string, decoys int) {
	t.Helper()
	consumeFranz(t, b, topic, len(want), kgo.FetchIsolationLevel(kgo.ReadCommitted())).check(t, "franz-go read_committed", want)
	all := consumeFranz(t, b, topic, len(want)+decoys)
	all.mu.Lock()
	defer all.mu.Unlock()
	got := 0
	for k := range all.got {
		if strings.Contains(k, "-aborted-") {
			got++
		}
	}
	if got != decoys {
		t.Errorf("read_uncommitted sees %d aborted decoys, want %d", got, decoys)
	}
}
