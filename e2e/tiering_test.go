package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/internal/failpoint"
	"github.com/sediment-io/sediment/objectstore/fs"
	"github.com/sediment-io/sediment/tiering"
)

// TestTieringSIGKILL produces into a topic with tiny segments and no local
// retention, kills the broker (SIGKILL) while it uploads, restarts it, and
// checks: every acknowledged record reads back from offset 0 across the tier
// boundary (digest), the bucket's manifest is valid (no offset twice, every
// referenced object present), and the orphans the crash left are cleaned.
func TestTieringSIGKILL(t *testing.T) {
	b := StartBroker(t, BrokerOptions{ExtraArgs: []string{"--tier-orphan-grace", "1s", "--tier-clean-interval", "1s"}})
	s := func(v string) *string { return &v }
	b.CreateTopic(t, "tiered", 1, map[string]*string{"segment.bytes": s("16384"), "remote.storage.enable": s("true"),
		"local.retention.bytes": s("0"), "retention.ms": s("-1")})
	cl := b.Client(t, kgo.ProducerLinger(0), kgo.RecordRetries(1000))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var acked []*kgo.Record
	produce := func(from, n int) {
		for i := from; i < from+n; i += 50 {
			var recs []*kgo.Record
			for j := i; j < i+50; j++ {
				recs = append(recs, &kgo.Record{Topic: "tiered", Key: []byte(fmt.Sprint(j)), Value: []byte(fmt.Sprintf("value %d %0100d", j, j))})
			}
			res := cl.ProduceSync(ctx, recs...)
			if err := res.FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			for _, r := range res {
				acked = append(acked, r.Record)
			}
		}
	}
	produce(0, 3000)
	store, err := fs.New(filepath.Join(b.DataDir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	waitUntil(t, "the first uploads", func() bool {
		parts, err := tiering.InspectBucket(ctx, store)
		return err == nil && len(parts) == 1 && parts[0].Manifest != nil
	})
	b.Kill()
	b.Start()
	produce(3000, 3000)
	waitUntil(t, "old data only in the bucket, orphans cleaned", func() bool {
		parts, err := tiering.InspectBucket(ctx, store)
		if err != nil || len(parts) != 1 || parts[0].Manifest == nil {
			return false
		}
		m := parts[0].Manifest
		refs := int64(1)
		for _, seg := range m.Segments {
			refs += int64(len(seg.Keys()))
		}
		return m.EndOffset >= 5000 && parts[0].Objects == refs && listOffsetsAt(t, b, -4) >= 5000
	})
	parts, _ := tiering.InspectBucket(ctx, store)
	m := parts[0].Manifest
	for _, seg := range m.Segments {
		for _, k := range seg.Keys() {
			if _, err := store.Head(ctx, k); err != nil {
				t.Fatalf("manifest names %s: %v", k, err)
			}
		}
	}
	if got := listOffsetsAt(t, b, -2); got != 0 {
		t.Fatalf("earliest offset %d, want 0", got)
	}
	consumer := b.Client(t, kgo.ConsumeTopics("tiered"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	var got []*kgo.Record
	for len(got) < len(acked) {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d", len(got), len(acked))
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		got = append(got, fs.Records()...)
	}
	if recordsDigest(got) != recordsDigest(acked) {
		t.Fatalf("consumed %d records with another digest than the %d acknowledged", len(got), len(acked))
	}
}

func recordsDigest(recs []*kgo.Record) string {
	h := sha256.New()
	for _, r := range recs {
		fmt.Fprintf(h, "%d|%s|%s;", r.Offset, r.Key, r.Value)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func listOffsetsAt(t *testing.T, b *Broker, ts int64) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "tiered"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), b.Client(t))
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		return -1
	}
	return resp.Topics[0].Partitions[0].Offset
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitFor(t, 90*time.Second, what, cond)
}

// TestTieredFromTheFirstRequest: a restarted broker answers its tiered
// partitions with their remote log from its first request on: the process
// is stopped at failpoint broker-serving (the broker serves, `sediment
// broker` has done nothing else yet), and there ListOffsets earliest is
// the remote log start and a fetch at offset 0 gets the first record, from
// the bucket. Before, tiering was enabled after the broker served: a
// restarted broker answered the local log start for a moment, and a
// consumer replaying the history got OFFSET_OUT_OF_RANGE and skipped to
// the local start, silently (about 130 000 records a partition in a
// review's replay through a restart).
func TestTieredFromTheFirstRequest(t *testing.T) {
	fpDir := t.TempDir()
	b := StartBroker(t, BrokerOptions{Env: []string{failpoint.EnvDir + "=" + fpDir}})
	s := func(v string) *string { return &v }
	b.CreateTopic(t, "tiered", 1, map[string]*string{"segment.bytes": s("16384"), "remote.storage.enable": s("true"),
		"local.retention.bytes": s("0"), "retention.ms": s("-1")})
	cl := b.Client(t, kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := 0; i < 2000; i += 100 {
		var recs []*kgo.Record
		for j := i; j < i+100; j++ {
			recs = append(recs, &kgo.Record{Topic: "tiered", Value: []byte(fmt.Sprintf("value %d %0100d", j, j))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	cl.Close()
	waitUntil(t, "the local log start past the uploaded segments", func() bool { return listOffsetsAt(t, b, -4) > 0 })
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fpDir, "broker-serving"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.Start() // ready: it answers ApiVersions and Metadata at the failpoint
	var paused string
	waitUntil(t, "the broker paused at broker-serving", func() bool {
		m, _ := filepath.Glob(filepath.Join(fpDir, "broker-serving.*.paused"))
		if len(m) == 1 {
			paused = m[0]
		}
		return paused != ""
	})
	defer os.Remove(paused)
	if local := listOffsetsAt(t, b, -4); local <= 0 {
		t.Fatalf("local log start %d after the restart, want past 0", local)
	}
	if got := listOffsetsAt(t, b, -2); got != 0 {
		t.Fatalf("earliest offset %d at the broker's first requests, want 0 (the remote log start)", got)
	}
	consumer := b.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"tiered": {0: kgo.NewOffset().At(0)}}),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()))
	fetches := consumer.PollFetches(ctx)
	fetches.EachError(func(_ string, _ int32, err error) {
		t.Fatalf("fetch at offset 0 at the broker's first requests: %v", err)
	})
	if recs := fetches.Records(); len(recs) == 0 || recs[0].Offset != 0 || string(recs[0].Value) != fmt.Sprintf("value 0 %0100d", 0) {
		t.Fatalf("fetch at offset 0: %d records, first %+v", len(recs), recs)
	}
}
