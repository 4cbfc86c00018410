package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker"
	"github.com/sediment-io/sediment/internal/miniotest"
	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/objectstore/s3"
	"github.com/sediment-io/sediment/tiering"
)

// tierE2EMegabytes is how much TestTieringMinIO produces: 100 MB in `make
// test` (25 to 50 s with a race-built broker on the busy 2-core machine),
// SEDIMENT_TIER_E2E_MB (`make tier-e2e` sets 256) for a long run.
func tierE2EMegabytes(t *testing.T) int {
	if v := os.Getenv("SEDIMENT_TIER_E2E_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SEDIMENT_TIER_E2E_MB=%q: want a positive number", v)
		}
		return n
	}
	return 100
}

// tierValue is record i's value: size bytes, deterministic, incompressible.
func tierValue(i, size int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 0x5ed1))
	b := make([]byte, size)
	for j := 0; j+8 <= len(b); j += 8 {
		binary.LittleEndian.PutUint64(b[j:], r.Uint64())
	}
	return b
}

// tierDigest folds records, in the order given, into one digest.
type tierDigest struct{ h hash.Hash }

func newTierDigest() *tierDigest { return &tierDigest{sha256.New()} }

func (d *tierDigest) add(offset int64, key, value []byte) {
	v := sha256.Sum256(value)
	fmt.Fprintf(d.h, "%d|%s|%x;", offset, key, v)
}

func (d *tierDigest) sum() string { return fmt.Sprintf("%x", d.h.Sum(nil)) }

// TestTieringMinIO is the end-to-end test of tiered storage on a real MinIO:
// it produces 100 MB (SEDIMENT_TIER_E2E_MB) into a topic with 1 MiB segments
// and no local retention, then checks that every sealed segment reached the
// bucket (the manifest covers [0, local log start) without a gap; minio-go
// finds every object it names, at its size), that local disk keeps only
// the active segment, and that `sediment tier status` says so; a franz-go
// consumer from offset 0 gets every record once, in order, across the tier
// boundary (digest of offsets, keys and values). After a restart, with the
// chunk cache emptied, the same again, served from the bucket.
func TestTieringMinIO(t *testing.T) {
	mb := tierE2EMegabytes(t)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	b := StartBroker(t, BrokerOptions{
		ExtraArgs: []string{"--s3-bucket", bucket, "--s3-endpoint", srv.Endpoint, "--s3-region", miniotest.Region,
			"--s3-path-style", "--tier-cache-bytes", strconv.Itoa(48 << 20)},
		Env: []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
			"AWS_REGION=" + miniotest.Region, "AWS_EC2_METADATA_DISABLED=true"},
	})
	s := func(v string) *string { return &v }
	const topic = "tiered"
	b.CreateTopic(t, topic, 1, map[string]*string{"segment.bytes": s(strconv.Itoa(1 << 20)), "remote.storage.enable": s("true"),
		"local.retention.bytes": s("0"), "retention.ms": s("-1")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// Produce: records of 16 KiB, acknowledged offsets kept.
	const valueSize = 16 << 10
	n := mb << 20 / valueSize
	start := time.Now()
	cl := b.Client(t, kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(256<<10),
		kgo.ProducerLinger(5*time.Millisecond), kgo.RecordRetries(100))
	offsets := make([]int64, n)
	var mu sync.Mutex
	var produceErr error
	for i := 0; i < n; i++ {
		i := i
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: tierValue(i, valueSize)},
			func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && produceErr == nil {
					produceErr = err
				}
				offsets[i] = r.Offset
			})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if produceErr != nil {
		t.Fatalf("produce: %v", produceErr)
	}
	want := newTierDigest()
	for i, off := range offsets {
		if off != int64(i) {
			t.Fatalf("record %d got offset %d (one partition, one producer: want %d)", i, off, i)
		}
		want.add(off, []byte(strconv.Itoa(i)), tierValue(i, valueSize))
	}
	t.Logf("produced %d MB (%d records) in %v", mb, n, time.Since(start).Round(time.Millisecond))

	// Every sealed segment reaches the bucket; local disk keeps the tail.
	var st broker.TierPartitionStatus
	waitFor(t, 3*time.Minute, "every sealed segment in the bucket and only the active one on local disk", func() bool {
		rows, err := adminTierStatus(ctx, b, topic)
		if err != nil || len(rows.Partitions) != 1 {
			return false
		}
		st = rows.Partitions[0]
		return st.LocalSegments == 1 && st.RemoteStartOffset == 0 && st.RemoteEndOffset == st.LocalStartOffset &&
			st.LocalEndOffset == int64(n)
	})
	t.Logf("tiers after %v: remote [0, %d) %d bytes in %d segments; local [%d, %d) %d bytes", time.Since(start).Round(time.Millisecond),
		st.RemoteEndOffset, st.RemoteBytes, st.RemoteSegments, st.LocalStartOffset, st.LocalEndOffset, st.LocalBytes)
	if st.RemoteSegments < int64(mb)/2 || st.LocalBytes > 1<<20+256<<10+1024 || !st.Leader || st.LastError != "" {
		t.Fatalf("tier status: %+v", st)
	}
	if st.UploadLagOffsets != st.HighWatermark-st.RemoteEndOffset || st.UploadLagBytes != st.LocalBytes {
		t.Fatalf("upload lag %d offsets, %d bytes: want the active segment's %d offsets, %d bytes", st.UploadLagOffsets,
			st.UploadLagBytes, st.HighWatermark-st.RemoteEndOffset, st.LocalBytes)
	}
	// The log drops deleted segments at once; their files go once no
	// reader holds them (hotlog's deferred deletes).
	waitFor(t, time.Minute, "only the active segment's file on local disk", func() bool {
		logs, _ := filepath.Glob(filepath.Join(b.DataDir, "logs", topic+"-0", "*.log"))
		return len(logs) == 1
	})
	checkBucketWithMinioGo(t, ctx, srv, bucket, st)
	checkTierStatusCLI(t, b, topic, st)
	if got := listOffsetsAt(t, b, -4); got != st.LocalStartOffset { // KIP-1005 earliest local
		t.Fatalf("ListOffsets -4 = %d, want the local log start %d", got, st.LocalStartOffset)
	}
	if got := listOffsetsAt(t, b, -5); got != st.RemoteEndOffset-1 { // KIP-1005 latest tiered
		t.Fatalf("ListOffsets -5 = %d, want %d", got, st.RemoteEndOffset-1)
	}

	// Consume from offset 0 across the tier boundary, then again after a
	// restart with an empty chunk cache.
	consumeAll := func(what string) {
		t.Helper()
		begin := time.Now()
		c := b.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(200*time.Millisecond), kgo.FetchMaxPartitionBytes(4<<20))
		got := newTierDigest()
		next := int64(0)
		for next < int64(n) {
			fs := c.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("%s: consumed %d of %d records", what, next, n)
			}
			fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("%s: fetch at %d: %v", what, next, err) })
			for _, r := range fs.Records() {
				if r.Offset != next {
					t.Fatalf("%s: offset %d after %d: every record once, in order, expected", what, r.Offset, next-1)
				}
				got.add(r.Offset, r.Key, r.Value)
				next++
			}
		}
		c.Close()
		if got.sum() != want.sum() {
			t.Fatalf("%s: the %d records consumed have another digest than the %d produced", what, next, n)
		}
		t.Logf("%s: %d records (%d MB) in order in %v", what, n, mb, time.Since(begin).Round(time.Millisecond))
	}
	consumeAll("first read")
	b.Restart(true)
	waitFor(t, time.Minute, "the admin endpoint after the restart", func() bool {
		resp, err := http.Get("http://" + b.AdminAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if names, err := os.ReadDir(filepath.Join(b.DataDir, "tier-cache")); err != nil || len(names) != 0 {
		t.Fatalf("chunk cache after restart: %d files, %v; want an empty cache", len(names), err)
	}
	missesBefore := tierMetric(t, b, `sediment_tier_events_total{kind="cache_misses"}`)
	consumeAll("after restart")
	if misses := tierMetric(t, b, `sediment_tier_events_total{kind="cache_misses"}`); misses-missesBefore < float64(st.RemoteSegments) {
		t.Fatalf("%v chunk downloads after the restart for %d remote segments: not read from the bucket?", misses-missesBefore, st.RemoteSegments)
	}
}

// adminTierStatus asks the broker's admin endpoint for a topic's tiers.
func adminTierStatus(ctx context.Context, b *Broker, topic string) (broker.TierStatus, error) {
	var st broker.TierStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.AdminAddr+"/v1/tier/status?topic="+topic, nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /v1/tier/status: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// checkBucketWithMinioGo reads the manifest from the bucket and checks with
// minio-go (an independent client) that it covers [0, remote end) without a
// gap and that every object it names is there at the size it says.
func checkBucketWithMinioGo(t *testing.T, ctx context.Context, srv *miniotest.Server, bucket string, st broker.TierPartitionStatus) {
	t.Helper()
	store, err := s3.New(ctx, s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: miniotest.Region, PathStyle: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	parts, err := tiering.InspectBucket(ctx, store)
	if err != nil || len(parts) != 1 || parts[0].Manifest == nil {
		t.Fatalf("bucket: %d partitions, %v", len(parts), err)
	}
	m := parts[0].Manifest
	if m.StartOffset != 0 || m.EndOffset != st.RemoteEndOffset || int64(len(m.Segments)) != st.RemoteSegments {
		t.Fatalf("newest manifest [%d, %d) with %d segments; tier status says [0, %d) with %d", m.StartOffset, m.EndOffset,
			len(m.Segments), st.RemoteEndOffset, st.RemoteSegments)
	}
	sizes := map[string]int64{}
	for obj := range srv.Client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		sizes[obj.Key] = obj.Size
	}
	next := int64(0)
	for _, seg := range m.Segments {
		if seg.BaseOffset != next {
			t.Fatalf("manifest: segment %s starts at %d, the one before ended at %d", seg.Stem, seg.BaseOffset, next)
		}
		next = seg.EndOffset
		if got, ok := sizes[seg.Stem+tiering.SuffixLog]; !ok || got != seg.Size {
			t.Fatalf("minio-go: %s is %d bytes (listed: %v), the manifest says %d", seg.Stem+tiering.SuffixLog, got, ok, seg.Size)
		}
		for _, k := range seg.Keys() {
			if _, ok := sizes[k]; !ok {
				t.Fatalf("minio-go does not list %s, which the manifest names", k)
			}
		}
	}
}

// checkTierStatusCLI runs `sediment tier status` against the broker, as an
// operator would, in both output formats.
func checkTierStatusCLI(t *testing.T, b *Broker, topic string, st broker.TierPartitionStatus) {
	t.Helper()
	out := b.sediment(t, "", "tier", "status", topic, "--admin", b.AdminAddr).Stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "TOPIC") {
		t.Fatalf("sediment tier status:\n%s", out)
	}
	fields := strings.Fields(lines[1])
	wantFields := []string{topic, "0", strconv.Itoa(b.NodeID), "on", fmt.Sprint(st.LocalStartOffset), fmt.Sprint(st.LocalEndOffset),
		fmt.Sprint(st.LocalBytes), "0", fmt.Sprint(st.RemoteEndOffset), fmt.Sprint(st.RemoteBytes)}
	if len(fields) < len(wantFields) || strings.Join(fields[:len(wantFields)], " ") != strings.Join(wantFields, " ") {
		t.Fatalf("sediment tier status row %q, want it to start with %q", lines[1], strings.Join(wantFields, " "))
	}
	// With no topic: every topic's rows but the internal topics'.
	all := b.sediment(t, "", "tier", "status", "--admin", b.AdminAddr).Stdout
	if !strings.Contains(all, "\n"+topic+" ") || strings.Contains(all, "\n__") {
		t.Fatalf("sediment tier status with no topic:\n%s", all)
	}
	var rows []broker.TierPartitionStatus
	js := b.sediment(t, "", "tier", "status", topic, "--admin", b.AdminAddr, "-o", "json").Stdout
	if err := json.Unmarshal([]byte(js), &rows); err != nil || len(rows) != 1 || rows[0].RemoteEndOffset != st.RemoteEndOffset {
		t.Fatalf("sediment tier status -o json: %v\n%s", err, js)
	}
}

// tierMetric reads one sample from the broker's /metrics.
func tierMetric(t *testing.T, b *Broker, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + b.AdminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	t.Fatalf("metric %s not in /metrics", name)
	return 0
}

// TestTieringWrongSecret: a broker whose S3 secret the bucket refuses
// starts (as Kafka's does with remote storage it cannot use) and says so at
// once, at ERROR, instead of at the first upload round, as a warning that
// read like a passing outage.
func TestTieringWrongSecret(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	b := StartBroker(t, BrokerOptions{
		ExtraArgs: []string{"--s3-bucket", bucket, "--s3-endpoint", srv.Endpoint, "--s3-region", miniotest.Region, "--s3-path-style"},
		Env: []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=not-the-secret",
			"AWS_REGION=" + miniotest.Region, "AWS_EC2_METADATA_DISABLED=true"},
	})
	waitFor(t, 60*time.Second, "the refused credentials logged at ERROR", func() bool {
		return testutil.LogHasLine(b.Log(), "level=ERROR", "the bucket denies access")
	})
}
