package tiering

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/objectstore/s3"
)

// The benchmarks run against a real MinIO server and measure, in the same
// run, the raw client (minio-go) on the same objects, reporting our figure as
// a ratio of it (the machine is shared and noisy). They also report object
// store requests per GB, which set the cloud bill.
const (
	benchSegment = 16 << 20
	benchData    = 64 << 20 // uploaded per BenchmarkUpload iteration
)

// SEDIMENT_BENCH_CHUNK (bytes), SEDIMENT_BENCH_AHEAD (chunks) and
// SEDIMENT_BENCH_STREAMS override the chunk size, read-ahead depth and
// read-ahead streams of the benchmarks, for sweeps; by default they are the
// Manager's defaults (8 MiB, 8, 2).
var (
	benchChunk   = benchEnvInt("SEDIMENT_BENCH_CHUNK", 8<<20)
	benchAhead   = int(benchEnvInt("SEDIMENT_BENCH_AHEAD", 0))
	benchStreams = int(benchEnvInt("SEDIMENT_BENCH_STREAMS", 0))
	// benchReplayData is what BenchmarkReplayCold replays (SEDIMENT_BENCH_REPLAY_MB):
	// enough that the first chunk's wait and the per-segment HEAD weigh as
	// little as they do in a real replay.
	benchReplayData = int(benchEnvInt("SEDIMENT_BENCH_REPLAY_MB", 192)) << 20
)

func benchEnvInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil && v > 0 {
		return v
	}
	return def
}

func benchStoreS3(b *testing.B) (*s3.Store, *minioServer, string) {
	store, srv, bucket := minioStore(b)
	return store, &minioServer{srv.Client}, bucket
}

type minioServer struct{ client *minio.Client }

// benchEnv fills a local log with size bytes in sealed segments.
func benchEnv(b *testing.B, store *s3.Store, topic byte, size int) *env {
	e := newEnv(b, envOptions{store: store, segmentBytes: benchSegment, chunkSize: benchChunk, cfg: localOnlyTail(-1)})
	e.m.Close()
	tp := testTP
	tp.TopicID[15] = topic
	e.com.setEpoch(tp, 5)
	m, err := New(Options{Store: store, Committer: e.com, Leadership: e.com, CacheDir: filepath.Join(e.dir, "cache"),
		Interval: -1, Logger: quietLogger(), Now: e.clock.Now, MaxSegmentsPerCommit: 64, ChunkSize: benchChunk})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	e.m = m
	e.p, _ = m.AddPartition(PartitionOptions{TopicPartition: tp, Log: e.log, Config: *localOnlyTail(-1)})
	batch := 1 << 20
	for written := 0; written < size+benchSegment; written += batch {
		e.produce(1, 64, batch/64-20)
	}
	e.produced = nil
	return e
}

func sealedLogFiles(e *env) (files []string, total int64) {
	for _, s := range e.log.Segments() {
		if s.Sealed {
			files = append(files, s.LogFile)
			total += s.Size
		}
	}
	return files, total
}

// BenchmarkUpload uploads ~64 MiB of sealed segments (16 MiB each) with
// their indexes, manifest and commit, beside minio-go PUTs of the same .log
// files (8 MiB parts, 4 threads, as our S3 writer).
func BenchmarkUpload(b *testing.B) {
	store, srv, bucket := benchStoreS3(b)
	ctx := context.Background()
	var raw, ours time.Duration
	var bytes int64
	var puts int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := benchEnv(b, store, byte(i), benchData)
		files, total := sealedLogFiles(e)
		b.StartTimer()
		start := time.Now()
		for j, name := range files {
			f, err := os.Open(name)
			if err != nil {
				b.Fatal(err)
			}
			info, _ := f.Stat()
			_, err = srv.client.PutObject(ctx, bucket, fmt.Sprintf("raw/%d/%d", i, j), f, info.Size(),
				minio.PutObjectOptions{PartSize: 8 << 20, NumThreads: 4})
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
		raw += time.Since(start)
		before := e.m.Metrics().Puts
		start = time.Now()
		if err := e.p.RunOnce(ctx); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		puts += e.m.Metrics().Puts - before
		if got := e.p.Status().RemoteBytes; got != total {
			b.Fatalf("uploaded %d bytes, want %d", got, total)
		}
		bytes += total
	}
	b.SetBytes(bytes / int64(b.N))
	b.ReportMetric(float64(bytes)/raw.Seconds()/1e6, "raw-put-MB/s")
	b.ReportMetric(float64(bytes)/ours.Seconds()/1e6, "upload-MB/s")
	b.ReportMetric(raw.Seconds()/ours.Seconds(), "ratio-of-raw")
	b.ReportMetric(float64(puts)/(float64(bytes)/(1<<30)), "puts/GB")
}

// BenchmarkReplayCold reads the whole remote log from offset 0 with a cold
// cache (a new Manager each time), as a consumer replaying history does
// (1 MiB fetches), beside minio-go GETs of the same .log objects (one
// streamed GET each). Each iteration runs raw, ours, ours, raw, so that the
// shared machine's drift weighs on both alike.
func BenchmarkReplayCold(b *testing.B) {
	store, srv, bucket := benchStoreS3(b)
	ctx := context.Background()
	e := benchEnv(b, store, 0xff, benchReplayData)
	if err := e.p.RunOnce(ctx); err != nil {
		b.Fatal(err)
	}
	st, _ := e.p.refresh(ctx)
	total := st.manifest.Size()
	buf := make([]byte, 1<<20)
	var raw, ours time.Duration
	var requests int64
	runs := 0
	rawGet := func() {
		start := time.Now()
		for _, s := range st.manifest.Segments {
			obj, err := srv.client.GetObject(ctx, bucket, s.Stem+SuffixLog, minio.GetObjectOptions{})
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.CopyBuffer(io.Discard, obj, buf)
			obj.Close()
			if err != nil || n != s.Size {
				b.Fatalf("raw get: %d, %v", n, err)
			}
		}
		raw += time.Since(start)
	}
	replay := func() {
		b.StopTimer()
		runs++
		m, err := New(Options{Store: store, Committer: e.com, Leadership: e.com, CacheDir: filepath.Join(e.dir, fmt.Sprintf("cache%d", runs)),
			Interval: -1, Logger: quietLogger(), ChunkSize: benchChunk, ReadAhead: benchAhead, ReadStreams: benchStreams})
		if err != nil {
			b.Fatal(err)
		}
		p, _ := m.AddPartition(PartitionOptions{TopicPartition: e.p.tp, Config: *localOnlyTail(-1)})
		if _, err := p.refresh(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		var served int64
		for off := st.manifest.StartOffset; off < st.manifest.EndOffset; {
			res, err := p.Read(ctx, off, 1<<20, st.manifest.EndOffset)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range res.Regions { // as a copy loop would (the broker uses sendfile)
				for at := int64(0); at < r.Len; {
					n := min(int64(len(buf)), r.Len-at)
					if _, err := r.File.ReadAt(buf[:n], r.Pos+at); err != nil {
						b.Fatal(err)
					}
					at += n
				}
			}
			served += res.Size
			off = res.NextOffset
			res.Release()
		}
		ours += time.Since(start)
		ms := m.Metrics()
		requests += ms.Gets + ms.Heads + ms.Lists
		m.Close()
		if served != total {
			b.Fatalf("served %d bytes, want %d", served, total)
		}
	}
	b.SetBytes(2 * total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rawGet()
		replay()
		replay()
		rawGet()
	}
	bytes := float64(total) * float64(runs)
	b.ReportMetric(bytes/raw.Seconds()/1e6, "raw-get-MB/s")
	b.ReportMetric(bytes/ours.Seconds()/1e6, "replay-MB/s")
	b.ReportMetric(raw.Seconds()/ours.Seconds(), "ratio-of-raw")
	b.ReportMetric(float64(requests)/(bytes/(1<<30)), "requests/GB")
}

var _ = hotlog.BatchHeaderSize
