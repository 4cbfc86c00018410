package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/sediment-io/sediment/internal/miniotest"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/objectstoretest"
	"github.com/sediment-io/sediment/objectstore/s3"
)

// The benchmarks measure against the same MinIO server in the same run,
// with minio-go as the raw client, and report our figure as a ratio of it,
// since the machine is shared and noisy. Sizes: segments are tens of MiB.
const (
	benchObject = 32 << 20
	benchPart   = 8 << 20
	benchChunk  = 4 << 20 // a cold-read chunk
	benchPar    = 4       // parts or chunks in flight
)

func mbps(bytes int64, d time.Duration) float64 { return float64(bytes) / d.Seconds() / 1e6 }

func benchStore(b *testing.B, srv *miniotest.Server, bucket string) *s3.Store {
	s, err := s3.New(b.Context(), s3.Config{
		Bucket: bucket, Endpoint: srv.Endpoint, Region: miniotest.Region, PathStyle: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
		PartSize: benchPart, Concurrency: benchPar,
	})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkPut uploads the same 32 MiB object with minio-go (raw: 8 MiB
// parts, 4 threads) and with our Writer (8 MiB parts, 4 in flight, CRC32C)
// in each iteration, and reports both throughputs and ours/raw.
func BenchmarkPut(b *testing.B) {
	srv := miniotest.Shared(b)
	bucket := srv.NewBucket(b)
	s := benchStore(b, srv, bucket)
	data := objectstoretest.Data(1, benchObject)
	ctx := context.Background()
	var raw, ours time.Duration
	b.SetBytes(2 * benchObject)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		_, err := srv.Client.PutObject(ctx, bucket, fmt.Sprintf("raw/%d", i), bytes.NewReader(data), benchObject,
			minio.PutObjectOptions{PartSize: benchPart, NumThreads: benchPar})
		if err != nil {
			b.Fatal(err)
		}
		raw += time.Since(start)
		start = time.Now()
		if err := objectstore.PutBytes(ctx, s, fmt.Sprintf("ours/%d", i), data, objectstore.CreateOptions{NoOverwrite: true}); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
	}
	total := int64(b.N) * benchObject
	b.ReportMetric(mbps(total, raw), "raw-put-MB/s")
	b.ReportMetric(mbps(total, ours), "put-MB/s")
	b.ReportMetric(raw.Seconds()/ours.Seconds(), "ratio-of-raw")
}

// BenchmarkRangedGet reads the same 32 MiB objects with minio-go (raw: one
// GET per object, streamed) and with our Reader in 4 MiB ranged ReadAt
// chunks, 4 at a time (as cold reads fetch), and reports both throughputs
// and ours/raw; ReadRange streaming one chunk after another is reported
// beside them.
func BenchmarkRangedGet(b *testing.B) {
	srv := miniotest.Shared(b)
	bucket := srv.NewBucket(b)
	s := benchStore(b, srv, bucket)
	ctx := context.Background()
	const objects = 2
	for i := range objects {
		data := objectstoretest.Data(uint64(i), benchObject)
		if _, err := srv.Client.PutObject(ctx, bucket, fmt.Sprintf("seg/%d", i), bytes.NewReader(data), benchObject, minio.PutObjectOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, 1<<20)
	var raw, parallel, stream time.Duration
	b.SetBytes(3 * objects * benchObject)
	b.ResetTimer()
	for range b.N {
		for i := range objects {
			key := fmt.Sprintf("seg/%d", i)
			start := time.Now()
			obj, err := srv.Client.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.CopyBuffer(io.Discard, obj, buf)
			obj.Close()
			if err != nil || n != benchObject {
				b.Fatalf("raw get: %d bytes, %v", n, err)
			}
			raw += time.Since(start)

			start = time.Now()
			r, size, err := s.ReadObject(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, benchPar)
			next := make(chan int64)
			for range benchPar {
				wg.Go(func() {
					p := make([]byte, benchChunk)
					for off := range next {
						if err := r.ReadAt(ctx, p[:min(benchChunk, size-off)], off); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			for off := int64(0); off < size; off += benchChunk {
				next <- off
			}
			close(next)
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			parallel += time.Since(start)

			start = time.Now()
			for off := int64(0); off < size; off += benchChunk {
				rc, err := r.ReadRange(ctx, off, min(benchChunk, size-off))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.CopyBuffer(io.Discard, rc, buf); err != nil {
					b.Fatal(err)
				}
				rc.Close()
			}
			stream += time.Since(start)
			r.Close()
		}
	}
	total := int64(b.N) * objects * benchObject
	b.ReportMetric(mbps(total, raw), "raw-get-MB/s")
	b.ReportMetric(mbps(total, parallel), "ranged-x4-MB/s")
	b.ReportMetric(mbps(total, stream), "ranged-seq-MB/s")
	b.ReportMetric(raw.Seconds()/parallel.Seconds(), "ratio-of-raw")
	b.ReportMetric(raw.Seconds()/stream.Seconds(), "seq-ratio-of-raw")
}
