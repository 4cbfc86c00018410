package tiering

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"github.com/sediment-io/sediment/objectstore"
)

// Metrics are the Manager's counters, read with Manager.Metrics (the broker
// exports them to Prometheus).
type Metrics struct {
	SegmentsUploaded, BytesUploaded, UploadErrors, Commits atomic.Int64
	SegmentsExpired, LocalSegmentsDeleted, OrphansDeleted  atomic.Int64
	// SegmentsDeletedOnDisable: remote segments deleted with their
	// partition's remote log (KIP-950, remote storage turned off).
	SegmentsDeletedOnDisable atomic.Int64

	RemoteReads, ReadErrors, BytesServed, BytesDownloaded atomic.Int64
	CacheHits, CacheMisses, CacheEvictions, Prefetches    atomic.Int64
	CorruptChunks, CorruptReads                           atomic.Int64

	// Object-store requests by kind, and their summed latency.
	Puts, Gets, Heads, Lists, Deletes atomic.Int64
	RequestErrors                     atomic.Int64
	RequestNanos                      atomic.Int64
}

// MetricsSnapshot is a copy of the counters.
type MetricsSnapshot struct {
	SegmentsUploaded, BytesUploaded, UploadErrors, Commits int64
	SegmentsExpired, LocalSegmentsDeleted, OrphansDeleted  int64
	SegmentsDeletedOnDisable                               int64
	RemoteReads, ReadErrors, BytesServed, BytesDownloaded  int64
	CacheHits, CacheMisses, CacheEvictions, Prefetches     int64
	CorruptChunks, CorruptReads                            int64
	Puts, Gets, Heads, Lists, Deletes, RequestErrors       int64
	RequestLatency                                         time.Duration
	CacheBytes                                             int64
	UploadLagBytes                                         int64 // summed over partitions
}

// Metrics returns a snapshot of the counters.
func (m *Manager) Metrics() MetricsSnapshot {
	c := &m.metrics
	s := MetricsSnapshot{
		SegmentsUploaded: c.SegmentsUploaded.Load(), BytesUploaded: c.BytesUploaded.Load(), UploadErrors: c.UploadErrors.Load(),
		Commits: c.Commits.Load(), SegmentsExpired: c.SegmentsExpired.Load(), LocalSegmentsDeleted: c.LocalSegmentsDeleted.Load(),
		OrphansDeleted: c.OrphansDeleted.Load(), SegmentsDeletedOnDisable: c.SegmentsDeletedOnDisable.Load(), RemoteReads: c.RemoteReads.Load(), ReadErrors: c.ReadErrors.Load(),
		BytesServed: c.BytesServed.Load(), BytesDownloaded: c.BytesDownloaded.Load(), CacheHits: c.CacheHits.Load(),
		CacheMisses: c.CacheMisses.Load(), CacheEvictions: c.CacheEvictions.Load(), Prefetches: c.Prefetches.Load(),
		CorruptChunks: c.CorruptChunks.Load(), CorruptReads: c.CorruptReads.Load(),
		Puts: c.Puts.Load(), Gets: c.Gets.Load(), Heads: c.Heads.Load(), Lists: c.Lists.Load(), Deletes: c.Deletes.Load(),
		RequestErrors: c.RequestErrors.Load(), RequestLatency: time.Duration(c.RequestNanos.Load()),
		CacheBytes: m.cache.Bytes(),
	}
	for _, p := range m.partitions() {
		s.UploadLagBytes += p.lagBytes.Load()
	}
	return s
}

// countingStore counts requests by kind (a PUT per committed Writer, a GET
// per ranged read, a HEAD per ReadObject/Head, …) for the metrics and the
// requests-per-GB figures of the benchmarks.
type countingStore struct {
	objectstore.Store
	m *Metrics
}

func (s *countingStore) note(start time.Time, err error) {
	s.m.RequestNanos.Add(int64(time.Since(start)))
	if err != nil {
		s.m.RequestErrors.Add(1)
	}
}

func (s *countingStore) ReadObject(ctx context.Context, key string) (objectstore.Reader, int64, error) {
	start := time.Now()
	s.m.Heads.Add(1)
	r, size, err := s.Store.ReadObject(ctx, key)
	s.note(start, err)
	if err != nil {
		return nil, 0, err
	}
	return &countingReader{Reader: r, s: s}, size, nil
}

// OpenRange is one GET if the store is an objectstore.RangeOpener, else a
// HEAD (ReadObject) and a GET.
func (s *countingStore) OpenRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, int64, error) {
	ro, ok := s.Store.(objectstore.RangeOpener)
	if !ok { // through s's counted ReadObject and ReadRange
		return objectstore.OpenRange(ctx, struct{ objectstore.Store }{s}, key, off, length)
	}
	start := time.Now()
	s.m.Gets.Add(1)
	rc, size, err := ro.OpenRange(ctx, key, off, length)
	s.note(start, err)
	return rc, size, err
}

func (s *countingStore) CreateObject(ctx context.Context, key string, opts objectstore.CreateOptions) (objectstore.Writer, error) {
	w, err := s.Store.CreateObject(ctx, key, opts)
	if err != nil {
		s.m.RequestErrors.Add(1)
		return nil, err
	}
	return &countingWriter{Writer: w, s: s}, nil
}

func (s *countingStore) Head(ctx context.Context, key string) (objectstore.ObjectInfo, error) {
	start := time.Now()
	s.m.Heads.Add(1)
	info, err := s.Store.Head(ctx, key)
	s.note(start, err)
	return info, err
}

func (s *countingStore) List(ctx context.Context, prefix, delimiter string) (objectstore.Listing, error) {
	start := time.Now()
	s.m.Lists.Add(1)
	l, err := s.Store.List(ctx, prefix, delimiter)
	s.note(start, err)
	return l, err
}

func (s *countingStore) Delete(ctx context.Context, keys ...string) error {
	start := time.Now()
	s.m.Deletes.Add(int64((len(keys) + 999) / 1000))
	err := s.Store.Delete(ctx, keys...)
	s.note(start, err)
	return err
}

type countingReader struct {
	objectstore.Reader
	s *countingStore
}

func (r *countingReader) ReadAt(ctx context.Context, p []byte, off int64) error {
	start := time.Now()
	r.s.m.Gets.Add(1)
	err := r.Reader.ReadAt(ctx, p, off)
	r.s.note(start, err)
	return err
}

func (r *countingReader) ReadRange(ctx context.Context, off, length int64) (io.ReadCloser, error) {
	start := time.Now()
	r.s.m.Gets.Add(1)
	rc, err := r.Reader.ReadRange(ctx, off, length)
	r.s.note(start, err)
	return rc, err
}

type countingWriter struct {
	objectstore.Writer
	s *countingStore
}

func (w *countingWriter) Close() error {
	start := time.Now()
	w.s.m.Puts.Add(1)
	err := w.Writer.Close()
	w.s.note(start, err)
	return err
}
