package e2e

import (
	"context"
	crand "crypto/rand"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// throttleHook records the throttle times a franz-go client is given
// (kgo.HookBrokerThrottle).
type throttleHook struct {
	mu    sync.Mutex
	count int
	total time.Duration
}

func (h *throttleHook) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count++
	h.total += d
}

func (h *throttleHook) get() (int, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count, h.total
}

// quotaValue returns the value of one of an entity's quotas ("" if unset).
func quotaValues(t testing.TB, adm *kadm.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	qs, err := adm.DescribeClientQuotas(ctx, false, nil)
	if err != nil {
		t.Fatalf("DescribeClientQuotas: %v", err)
	}
	var out []string
	for _, q := range qs {
		s := q.Entity.String()
		for _, v := range q.Values {
			s += " " + v.Key + "=" + strconv.FormatFloat(v.Value, 'f', -1, 64)
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// TestClientQuotas: a producer with a client id limited to 1 MiB/s
// (producer_byte_rate, set with `sediment quota set`) needs several seconds
// for 6 MiB and is told throttle times, while one with another client id
// is not; a consumer limited by consumer_byte_rate likewise. The quotas
// survive a restart (metadata log). The broker measures over 2 samples of
// 1s (quota-window-num 2) so that the burst a fresh rate allows (Kafka
// measures over at least num-1 windows: 10s by default) stays small.
func TestClientQuotas(t *testing.T) {
	const rate = 1 << 20
	const size = 6 << 20
	const recSize = 64 << 10
	b := StartBroker(t, BrokerOptions{ExtraArgs: []string{"--quota-window-num", "2"}})
	b.CreateTopic(t, "quota", 1, nil)
	b.sediment(t, "", "quota", "set", "--client", "slow-producer", "producer_byte_rate="+strconv.Itoa(rate))
	b.sediment(t, "", "quota", "set", "--client", "slow-consumer", "consumer_byte_rate="+strconv.Itoa(rate))
	if out := b.sediment(t, "", "quota", "describe", "--clients").Stdout; !regexp.MustCompile(`slow-producer\s+-\s+producer_byte_rate=1048576`).MatchString(out) {
		t.Fatalf("sediment quota describe:\n%s", out)
	}
	// A client address's connection rate (KIP-612) and a request quota,
	// through the same commands.
	b.sediment(t, "", "quota", "set", "--ip", "127.0.0.9", "connection_creation_rate=5")
	b.sediment(t, "", "quota", "set", "--user", "batch", "request_percentage=25")
	out := b.sediment(t, "", "quota", "describe").Stdout
	for _, re := range []string{`-\s+-\s+127\.0\.0\.9\s+connection_creation_rate=5`, `batch\s+-\s+-\s+request_percentage=25`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("sediment quota describe: no %s in\n%s", re, out)
		}
	}

	// Random values: franz-go compresses batches, and the quota counts
	// the bytes on the wire.
	randomRecords := func(n int) []*kgo.Record {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			v := make([]byte, recSize)
			crand.Read(v)
			recs[i] = &kgo.Record{Value: v}
		}
		return recs
	}
	produce := func(clientID string) (time.Duration, int, time.Duration) {
		t.Helper()
		var hook throttleHook
		cl := b.Client(t, kgo.ClientID(clientID), kgo.WithHooks(&hook), kgo.DefaultProduceTopic("quota"))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		recs := randomRecords(size / recSize)
		start := time.Now()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("%s: produce: %v", clientID, err)
		}
		took := time.Since(start)
		n, total := hook.get()
		cl.Close()
		return took, n, total
	}
	took, n, total := produce("slow-producer")
	t.Logf("slow producer: 6 MiB in %v, %d throttles, %v in all", took, n, total)
	if took < 4*time.Second || n == 0 {
		t.Errorf("slow producer: 6 MiB at 1 MiB/s in %v with %d throttles; want at least ~4s (a burst of one to two seconds' worth) and throttle times", took, n)
	}
	took, n, _ = produce("fast-producer")
	t.Logf("other client id: 6 MiB in %v, %d throttles", took, n)
	if n != 0 {
		t.Errorf("a client id without a quota got %d throttle times", n)
	}

	consume := func(clientID string) (time.Duration, int) {
		t.Helper()
		var hook throttleHook
		cl := b.Client(t, kgo.ClientID(clientID), kgo.WithHooks(&hook), kgo.ConsumeTopics("quota"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		start := time.Now()
		got := 0
		for got < size {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("%s: consumed %d of %d bytes: %v", clientID, got, size, err)
			}
			fs.EachError(func(topic string, p int32, err error) { t.Fatalf("%s: fetch: %v", clientID, err) })
			fs.EachRecord(func(r *kgo.Record) { got += len(r.Value) })
		}
		took := time.Since(start)
		n, _ := hook.get()
		cl.Close()
		return took, n
	}
	// The topic holds 12 MiB now; the consumer reads the first 6.
	took, n = consume("slow-consumer")
	t.Logf("slow consumer: 6 MiB in %v, %d throttles", took, n)
	if took < 4*time.Second || n == 0 {
		t.Errorf("slow consumer: 6 MiB at 1 MiB/s in %v with %d throttles; want at least ~4s and throttle times", took, n)
	}
	metrics := scrape(b)
	for _, typ := range []string{"produce", "fetch"} {
		m := regexp.MustCompile(`(?m)^sediment_quota_throttle_time_seconds_count\{quota_type="` + typ + `"\} (\S+)$`).FindStringSubmatch(metrics)
		if m == nil || m[1] == "0" {
			t.Errorf("no %s throttle times in /metrics", typ)
		}
	}

	before := quotaValues(t, b.Admin(t))
	b.Restart(true)
	if after := quotaValues(t, b.Admin(t)); after != before || !strings.Contains(after, "producer_byte_rate=1048576") {
		t.Fatalf("quotas after a restart: %q, before %q", after, before)
	}
	b.sediment(t, "", "quota", "delete", "--client", "slow-producer")
	if after := quotaValues(t, b.Admin(t)); strings.Contains(after, "slow-producer") {
		t.Fatalf("after delete: %q", after)
	}
}

// TestClientQuotaReplicationExempt: replication is not a client. With a
// default consumer_byte_rate of 1 KiB/s for every client id, a second
// replica still copies 4 MiB at once and acks=all producing is not held
// back.
func TestClientQuotaReplicationExempt(t *testing.T) {
	c := StartCluster(t, 2)
	adm := kadm.NewClient(c.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
		Entity: kadm.ClientQuotaEntity{{Type: "client-id"}},
		Ops:    []kadm.AlterClientQuotaOp{{Key: "consumer_byte_rate", Value: 1024}},
	}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("AlterClientQuotas: %v %+v", err, res)
	}
	createClusterTopic(t, adm, "replicated", 1, 2, nil)
	c.WaitFullISR(t, adm, "replicated", 30*time.Second)
	cl := c.Client(t, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("replicated"))
	recs := make([]*kgo.Record, 64)
	for i := range recs {
		v := make([]byte, 64<<10)
		crand.Read(v)
		recs[i] = &kgo.Record{Value: v}
	}
	start := time.Now()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("acks=all produce with a 1 KiB/s consumer quota on every client id: %v", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("4 MiB acks=all took %v: replication was throttled", took)
	}
	c.WaitIdenticalReplicas(t, "replicated", 1, 30*time.Second)
}
