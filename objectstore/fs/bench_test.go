package fs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/fs"
	"github.com/sediment-io/sediment/objectstore/objectstoretest"
)

// BenchmarkPut writes 32 MiB objects through the fs backend (temporary
// file, fsync, rename, folder fsync) beside the disk's own limit in the
// same run: the same bytes written to a file and fsynced.
func BenchmarkPut(b *testing.B) {
	const size = 32 << 20
	dir := b.TempDir()
	s, err := fs.New(filepath.Join(dir, "store"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := objectstoretest.Data(1, size)
	ctx := context.Background()
	var raw, ours time.Duration
	b.SetBytes(2 * size)
	for i := range b.N {
		start := time.Now()
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("raw-%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		raw += time.Since(start)
		start = time.Now()
		if err := objectstore.PutBytes(ctx, s, fmt.Sprintf("t/0/%d", i), data, objectstore.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
	}
	b.ReportMetric(float64(int64(b.N)*size)/raw.Seconds()/1e6, "disk-MB/s")
	b.ReportMetric(float64(int64(b.N)*size)/ours.Seconds()/1e6, "put-MB/s")
	b.ReportMetric(raw.Seconds()/ours.Seconds(), "ratio-of-disk")
}
