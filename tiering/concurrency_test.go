package tiering

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/faulty"
	"github.com/sediment-io/sediment/objectstore/mem"
)

// TestSlowBucket: a bucket that takes seconds per GET makes a remote read
// with a short deadline fail promptly with ErrUnavailable, while appends,
// hot reads and uploads go on.
func TestSlowBucket(t *testing.T) {
	fs := faulty.Wrap(mem.New(nil), 1)
	e := newEnv(t, envOptions{store: fs, cfg: localOnlyTail(0)})
	e.produce(100, 5, 40)
	e.run()
	fs.SetRules(faulty.Rule{Ops: faulty.OpReadRange | faulty.OpReadAt, Latency: 10 * time.Second})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ { // more readers than workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			res, err := e.p.Read(ctx, int64(i), 1000, e.log.HighWatermark())
			if err == nil {
				res.Release()
			}
			errs <- err
		}()
	}
	start := time.Now()
	e.produce(100, 5, 40) // appends are not held up
	if _, err := e.log.ReadBytes(e.log.LogStartOffset(), 1<<20, e.log.HighWatermark()); err != nil {
		t.Fatal(err)
	}
	if err := e.p.RunOnce(context.Background()); err != nil { // uploads (PUTs) are not held up
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("slow read: %v", err)
		}
	}
	if n := e.m.Metrics().ReadErrors; n < 16 {
		t.Fatalf("%d read errors counted for 16 failed reads", n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestCacheBound: the chunk cache stays within CacheBytes once readers let go.
func TestCacheBound(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(0), chunkSize: 4096, cacheBytes: 3 * 4096})
	e.produce(200, 5, 40)
	e.run()
	got, err := e.readAll(0, e.log.HighWatermark(), 1<<20)
	if err != nil || !bytes.Equal(got, e.stampedFrom(0)) {
		t.Fatalf("read: %v", err)
	}
	waitFor(t, "cache within bounds", func() bool { return e.m.Metrics().CacheBytes <= 3*4096 })
	if e.m.Metrics().CacheEvictions == 0 {
		t.Fatal("nothing evicted")
	}
	// Files of evicted chunks are gone.
	names, _ := e.m.cache.fs.List(e.m.cache.dir)
	if len(names) > 3+e.m.opts.ReadAhead+4 {
		t.Fatalf("%d cache files for a 3-chunk cache", len(names))
	}
}

// TestConcurrentReadersDuringUploadAndRetention: readers at random offsets
// while rounds upload and retention moves the remote start; every read is
// either correct bytes or ErrOffsetOutOfRange below the start.
func TestConcurrentReadersDuringUploadAndRetention(t *testing.T) {
	cfg := *localOnlyTail(0)
	e := newEnv(t, envOptions{cfg: &cfg, cacheBytes: 64 << 10})
	e.produce(200, 5, 40)
	e.run()
	want := e.stampedFrom(0)
	hw := e.log.HighWatermark()
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				off := rng.Int64N(hw)
				res, err := e.p.Read(ctx, off, 1+rng.Int64N(8000), hw)
				if errors.Is(err, ErrOffsetOutOfRange) {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				b, err := res.Bytes()
				first := res.FirstOffset
				res.Release()
				if err != nil {
					errc <- err
					return
				}
				// Find the batch bytes in what was produced.
				if !bytes.Contains(want, b) || first > off {
					errc <- errors.New("read returned bytes that were never produced")
					return
				}
			}
		}()
	}
	for i := 0; i < 10; i++ {
		e.produce(20, 5, 40)
		cfg.RetentionBytes = int64(60000 - i*4000)
		e.p.SetConfig(cfg)
		if err := e.p.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	assertManifestMatchesBucket(t, e)
}

// TestHangingBucketAtStart: after a restart (no manifest cached) with the
// bucket hanging, a caller with a short deadline gets ErrUnavailable when
// its deadline passes, even while another caller waits longer for the same
// manifest read; a round that cannot read the manifest still reports the
// upload lag from the committed pointer; once the bucket answers, the read
// in flight completes for everyone.
func TestHangingBucketAtStart(t *testing.T) {
	fs := faulty.Wrap(mem.New(nil), 1)
	e := newEnv(t, envOptions{store: fs, cfg: localOnlyTail(0)})
	e.produce(100, 5, 40)
	e.run()
	want, err := e.p.EarliestOffset(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e.open(envOptions{store: fs}, *localOnlyTail(0)) // a restart: nothing cached
	e.produce(50, 5, 40)
	fs.SetRules(faulty.Rule{Ops: faulty.OpRead, Latency: 4 * time.Second})
	// Before any round: the status has the remote range and the lag from
	// the committed pointer (it showed remote end -1 and lag 0).
	if st := e.p.Status(); st.RemoteEndOffset <= 0 || st.RemoteStartOffset != 0 || st.UploadLagOffsets == 0 || st.UploadLagBytes == 0 {
		t.Fatalf("status before the first round: remote [%d, %d), lag %d offsets %d bytes", st.RemoteStartOffset, st.RemoteEndOffset,
			st.UploadLagOffsets, st.UploadLagBytes)
	}

	long := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := e.p.EarliestOffset(ctx)
		long <- err
	}()
	waitFor(t, "the long caller's manifest read in flight", func() bool { return fs.Injected(faulty.OpRead) > 0 })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = e.p.EarliestOffset(ctx)
	cancel()
	if !errors.Is(err, ErrUnavailable) || time.Since(start) > 2*time.Second {
		t.Fatalf("a short deadline beside a long wait: %v after %v, want ErrUnavailable at its deadline", err, time.Since(start))
	}
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = e.p.RunOnce(ctx)
	cancel()
	if err == nil {
		t.Fatal("a round read the manifest of a hanging bucket")
	}
	if st := e.p.Status(); st.UploadLagBytes == 0 || st.UploadLagOffsets == 0 {
		t.Fatalf("upload lag %d bytes, %d offsets with 50 batches not uploaded", st.UploadLagBytes, st.UploadLagOffsets)
	}
	fs.SetRules()
	if err := <-long; err != nil { // the read in flight ends with the latency
		t.Fatalf("the long wait: %v", err)
	}
	if got, err := e.p.EarliestOffset(context.Background()); err != nil || got != want {
		t.Fatalf("earliest %d, %v; want %d", got, err, want)
	}
}

// TestAccessDeniedRoundIsAnError: a round the bucket refuses for its
// credentials is logged at ERROR, saying so (it does not pass by itself); a
// transient failure stays a warning.
func TestAccessDeniedRoundIsAnError(t *testing.T) {
	fs := faulty.Wrap(mem.New(nil), 1)
	e := newEnv(t, envOptions{store: fs, cfg: localOnlyTail(0)})
	var logs bytes.Buffer
	e.m.opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	e.produce(100, 5, 40)
	fs.SetRules(faulty.Rule{Ops: faulty.OpAll, Err: fmt.Errorf("403: %w", objectstore.ErrAccessDenied)})
	e.p.busy.Store(true)
	e.p.backgroundRound(context.Background())
	fs.SetRules(faulty.Rule{Ops: faulty.OpAll, Err: objectstore.ErrUnavailable})
	e.p.busy.Store(true)
	e.p.backgroundRound(context.Background())
	out := logs.String()
	if !strings.Contains(out, `level=ERROR msg="tiering: round failed: the bucket denies access`) || !strings.Contains(out, `level=WARN msg="tiering: round failed; retrying"`) {
		t.Fatalf("logged:\n%s", out)
	}
}

// TestLocalDeletionsCountSegments: the local deletions metric counts the
// segments local retention removed, not its passes.
func TestLocalDeletionsCountSegments(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(0), segmentBytes: 2048})
	e.produce(100, 5, 40)
	before := len(e.log.Segments())
	e.run()
	after := len(e.log.Segments())
	if got := e.m.Metrics().LocalSegmentsDeleted; before-after < 2 || got != int64(before-after) {
		t.Fatalf("%d segments before, %d after, %d counted", before, after, got)
	}
}
