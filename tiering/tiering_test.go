package tiering

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/faulty"
	"github.com/sediment-io/sediment/objectstore/fs"
	"github.com/sediment-io/sediment/objectstore/mem"
)

func localOnlyTail(bytes int64) *TopicConfig {
	cfg := DefaultTopicConfig()
	cfg.RetentionMs = -1
	cfg.LocalRetentionBytes = bytes
	cfg.LocalRetentionMs = -1
	return &cfg
}

// roundTrip produces, uploads, applies local retention and reads everything
// back across the tier boundary, then again after a restart with an empty
// cache.
func roundTrip(t *testing.T, e *env) {
	e.produce(400, 5, 40)
	e.run()
	st := e.p.Status()
	if st.RemoteSegments == 0 || st.RemoteEndOffset <= 0 {
		t.Fatalf("nothing uploaded: %+v", st)
	}
	if st.LocalStartOffset == 0 {
		t.Fatalf("local retention deleted nothing: %+v", st)
	}
	if st.LocalStartOffset > st.RemoteEndOffset {
		t.Fatalf("local start %d above remote end %d: a gap", st.LocalStartOffset, st.RemoteEndOffset)
	}
	want := e.stampedFrom(0)
	for _, maxBytes := range []int64{1, 3000, 1 << 20} {
		got, err := e.readAll(0, e.log.HighWatermark(), maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("maxBytes %d: read %d bytes across tiers, want %d (equal prefix %d)", maxBytes, len(got), len(want), commonPrefix(got, want))
		}
	}
	// Restart: a new Manager with an empty cache reads the same.
	e.m.Close()
	e.open(envOptions{}, e.p.Config())
	got, err := e.readAll(0, e.log.HighWatermark(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("after restart: read %d bytes, want %d", len(got), len(want))
	}
	if ms := e.m.Metrics(); ms.CacheMisses == 0 || ms.BytesServed == 0 {
		t.Fatalf("metrics: %+v", ms)
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestRoundTripFS(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(20 << 10)})
	roundTrip(t, e)
	// ListOffsets views.
	ctx := context.Background()
	earliest, _ := e.p.EarliestOffset(ctx)
	tiered, _ := e.p.LatestTieredOffset(ctx)
	if earliest != 0 || e.p.EarliestLocalOffset() == 0 || tiered < e.p.EarliestLocalOffset()-1 {
		t.Fatalf("earliest %d, earliest local %d, latest tiered %d", earliest, e.p.EarliestLocalOffset(), tiered)
	}
}

func TestRoundTripMem(t *testing.T) {
	e := newEnv(t, envOptions{store: mem.New(nil), cfg: localOnlyTail(0)})
	roundTrip(t, e)
}

// TestMetamorphicHotVsTiered reads the same offsets from the local log and
// from the bucket (before local retention) and compares the bytes.
func TestMetamorphicHotVsTiered(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.produce(300, 3, 60)
	e.run()
	ctx := context.Background()
	remoteEnd, _ := e.p.RemoteLogEnd(ctx)
	if remoteEnd <= 0 {
		t.Fatal("nothing uploaded")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		off := rng.Int64N(remoteEnd)
		maxBytes := 1 + rng.Int64N(20000)
		res, err := e.p.Read(ctx, off, maxBytes, e.log.HighWatermark())
		if err != nil {
			t.Fatal(err)
		}
		remote, err := res.Bytes()
		res.Release()
		if err != nil {
			t.Fatal(err)
		}
		hot, err := e.log.ReadBytes(off, int64(len(remote)), e.log.HighWatermark())
		if err != nil {
			t.Fatal(err)
		}
		if len(remote) == 0 || !bytes.Equal(hot[:min(len(hot), len(remote))], remote) || len(hot) < len(remote) {
			t.Fatalf("offset %d max %d: tiered %d bytes differ from hot %d", off, maxBytes, len(remote), len(hot))
		}
		if _, err := hotlog.ValidateBatches(remote); err != nil {
			t.Fatal(err)
		}
		hdr, _ := hotlog.ParseBatchHeader(remote)
		if hdr.BaseOffset > off || hdr.LastOffset() < off {
			t.Fatalf("offset %d: first batch [%d, %d]", off, hdr.BaseOffset, hdr.LastOffset())
		}
	}
	if _, err := e.p.Read(ctx, remoteEnd, 100, e.log.HighWatermark()); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read at the remote end: %v", err)
	}
}

// TestBucketDown: with the bucket failing, appends go on, uploads fail and
// retry, nothing is deleted locally; once it is back, uploads resume.
func TestBucketDown(t *testing.T) {
	inner := mem.New(nil)
	fs := faulty.Wrap(inner, 1)
	e := newEnv(t, envOptions{store: fs, cfg: localOnlyTail(0)})
	e.produce(100, 5, 40)
	e.run()
	uploadedEnd := e.p.Status().RemoteEndOffset
	fs.SetRules(faulty.Rule{Ops: faulty.OpAll, Throttle: true})
	e.produce(200, 5, 40)
	localStart := e.log.LogStartOffset()
	for i := 0; i < 3; i++ {
		if err := e.p.RunOnce(context.Background()); err == nil {
			t.Fatal("round succeeded with the bucket down")
		}
	}
	st := e.p.Status()
	if e.log.LogStartOffset() != localStart || st.RemoteEndOffset != uploadedEnd {
		t.Fatalf("bucket down: local start %d -> %d, remote end %d -> %d", localStart, e.log.LogStartOffset(), uploadedEnd, st.RemoteEndOffset)
	}
	if st.UploadLagBytes == 0 || st.LastError == "" {
		t.Fatalf("no lag shown: %+v", st)
	}
	fs.SetRules()
	e.run()
	st = e.p.Status()
	if st.RemoteEndOffset <= uploadedEnd || e.log.LogStartOffset() <= localStart {
		t.Fatalf("uploads did not resume: %+v", st)
	}
	// Everything deleted locally is in the bucket.
	got, err := e.readAll(0, e.log.HighWatermark(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, e.stampedFrom(0)) {
		t.Fatal("data lost across the outage")
	}
}

// TestFlakyBucket: probabilistic faults on every call, truncated and
// corrupted reads included; the round trip still holds.
func TestFlakyBucket(t *testing.T) {
	inner := mem.New(nil)
	fs := faulty.Wrap(inner, 7,
		faulty.Rule{Ops: faulty.OpMutate | faulty.OpList, Probability: 0.05},
		faulty.Rule{Ops: faulty.OpReadRange, Probability: 0.1, Corrupt: true},
		faulty.Rule{Ops: faulty.OpReadRange, Probability: 0.1, Truncate: true},
	)
	e := newEnv(t, envOptions{store: fs, cfg: localOnlyTail(0)})
	e.produce(300, 5, 40)
	for i := 0; i < 200 && (e.p.Status().RemoteEndOffset < e.log.HighWatermark()-50 || e.log.LogStartOffset() == 0); i++ {
		e.p.RunOnce(context.Background())
	}
	want := e.stampedFrom(0)
	var got []byte
	for attempt := 0; attempt < 50; attempt++ {
		var err error
		if got, err = e.readAll(0, e.log.HighWatermark(), 5000); err == nil {
			break
		} else if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("a failed read must be ErrUnavailable: %v", err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d", len(got), len(want))
	}
	fs.SetRules()
	assertManifestMatchesBucket(t, e)
}

// TestCorruptForever: bytes that always arrive corrupted are never served.
func TestCorruptForever(t *testing.T) {
	inner := mem.New(nil)
	fs := faulty.Wrap(inner, 3)
	e := newEnv(t, envOptions{store: fs, cfg: localOnlyTail(0)})
	e.produce(100, 5, 40)
	e.run()
	fs.SetRules(faulty.Rule{Ops: faulty.OpReadRange, Corrupt: true})
	_, err := e.p.Read(context.Background(), 0, 1<<20, e.log.HighWatermark())
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrCorruptObject) && !strings.Contains(err.Error(), "CRC") {
		t.Fatalf("corrupt read: %v", err)
	}
	// A fresh Manager: downloads in flight under the old rule are done.
	e.m.Close()
	fs.SetRules(faulty.Rule{Ops: faulty.OpReadRange, Corrupt: true, Times: 1})
	e.open(envOptions{}, e.p.Config())
	res, err := e.p.Read(context.Background(), 0, 1<<20, e.log.HighWatermark())
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	b, _ := res.Bytes()
	if !bytes.HasPrefix(e.stampedFrom(0), b) || e.m.Metrics().CorruptChunks == 0 {
		t.Fatal("corrupt chunk not refetched")
	}
}

// TestCorruptCacheFile: a cache file damaged on local disk is detected by the
// batch CRC, dropped and fetched again.
func TestCorruptCacheFile(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(0)})
	e.produce(100, 5, 40)
	e.run()
	ctx := context.Background()
	res, err := e.p.Read(ctx, 0, 1<<20, e.log.HighWatermark())
	if err != nil {
		t.Fatal(err)
	}
	first, _ := res.Bytes()
	// Flip a byte inside the first batch's records in the cache file.
	f := res.Regions[0].File
	var b [1]byte
	f.ReadAt(b[:], 70)
	b[0] ^= 0xff
	if _, err := f.(interface {
		WriteAt([]byte, int64) (int, error)
	}).WriteAt(b[:], 70); err != nil {
		t.Skip("cache file not writable here:", err)
	}
	res.Release()
	// A chunk file younger than RecheckAfter is trusted (it was checked
	// as it was written); an older one is checked again.
	e.clock.Advance(2 * time.Minute)
	res, err = e.p.Read(ctx, 0, 1<<20, e.log.HighWatermark())
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	again, _ := res.Bytes()
	if !bytes.Equal(first, again) || e.m.Metrics().CorruptReads == 0 {
		t.Fatal("damaged cache file served or not detected")
	}
}

// assertManifestMatchesBucket checks that every segment in the manifest has
// its objects, that no offset is listed twice, and that segments ascend.
func assertManifestMatchesBucket(t *testing.T, e *env) *Manifest {
	t.Helper()
	st, err := e.p.refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]bool{}
	for _, k := range e.objects() {
		objs[k] = true
	}
	prev := int64(-1)
	for _, s := range st.manifest.Segments {
		for _, k := range s.Keys() {
			if !objs[k] {
				t.Fatalf("manifest references missing %s", k)
			}
		}
		if s.BaseOffset < prev {
			t.Fatalf("segment %s overlaps the previous one (ends %d)", s.Stem, prev)
		}
		prev = s.EndOffset
	}
	return st.manifest
}

// TestCrashBetweenUploadAndCommit: the commit fails (or its answer is lost)
// after the objects and the manifest were written; the next round uploads
// again under new keys; no segment is twice in the manifest; the orphans are
// found and deleted after the grace period, and nothing referenced is.
func TestCrashBetweenUploadAndCommit(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(-1)})
	e.produce(100, 5, 40)
	fails := 1
	e.com.failCommit = func() (error, bool) {
		if fails > 0 {
			fails--
			return errors.New("injected: broker killed before the commit"), false
		}
		return nil, true
	}
	if err := e.p.RunOnce(context.Background()); err == nil {
		t.Fatal("commit failure not reported")
	}
	orphans := len(e.objects())
	if orphans == 0 || e.p.Status().RemoteSegments != 0 {
		t.Fatal("expected uploaded but uncommitted objects")
	}
	// "Restart": a new Manager over the same bucket and metadata.
	e.m.Close()
	e.open(envOptions{}, e.p.Config())
	e.run()
	m := assertManifestMatchesBucket(t, e)
	if len(m.Segments) == 0 {
		t.Fatal("nothing committed after the restart")
	}
	// A lost answer: the commit applied but the uploader saw an error.
	e.produce(50, 5, 40)
	e.com.failCommit = func() (error, bool) { e.com.failCommit = nil; return errors.New("injected: answer lost"), true }
	e.p.RunOnce(context.Background())
	e.run()
	m = assertManifestMatchesBucket(t, e)

	// Young orphans are kept; old ones go.
	if n, err := e.p.CleanOrphans(context.Background()); err != nil || n != 0 {
		t.Fatalf("clean before grace: %d, %v", n, err)
	}
	e.clock.Advance(2 * time.Hour)
	n, err := e.p.CleanOrphans(context.Background())
	if err != nil || n < orphans {
		t.Fatalf("cleaned %d, want at least %d: %v", n, orphans, err)
	}
	referenced := map[string]bool{e.p.Status().ManifestKey: true}
	for _, s := range m.Segments {
		for _, k := range s.Keys() {
			referenced[k] = true
		}
	}
	for _, k := range e.objects() {
		if !referenced[k] {
			t.Fatalf("unreferenced %s survived the cleaner", k)
		}
	}
	assertManifestMatchesBucket(t, e)
	got, err := e.readAll(0, e.log.HighWatermark(), 1<<20)
	if err != nil || !bytes.Equal(got, e.stampedFrom(0)) {
		t.Fatalf("read after cleaning: %v", err)
	}
}

// TestZombieLeaderFenced: a deposed leader's commit is refused; its objects
// never enter a manifest.
func TestZombieLeaderFenced(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(-1)})
	e.produce(50, 5, 40)
	e.run()
	v := e.p.Status().ManifestVersion
	e.produce(50, 5, 40)
	// Leadership moved to epoch 6, but this broker still believes in 5.
	e.com.failCommit = func() (error, bool) { return nil, true }
	e.com.mu.Lock()
	e.com.epochs[testTP] = 6
	e.com.mu.Unlock()
	stale := &staleLeader{epoch: 5}
	e.m.opts.Leadership = stale
	err := e.p.RunOnce(context.Background())
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie commit: %v", err)
	}
	if ptr, _ := e.com.RemoteLog(context.Background(), testTP); ptr.ManifestVersion != v {
		t.Fatal("zombie moved the pointer")
	}
}

type staleLeader struct{ epoch int32 }

func (s *staleLeader) LeaderEpoch(TopicPartition) (int32, bool) { return s.epoch, true }

// TestTotalRetention: remote segments past retention.bytes leave the manifest
// and then the bucket; by time too.
func TestTotalRetention(t *testing.T) {
	cfg := *localOnlyTail(0)
	e := newEnv(t, envOptions{cfg: &cfg})
	e.produce(300, 5, 40)
	e.run()
	before := e.p.Status()
	cfg.RetentionBytes = before.RemoteBytes / 2
	e.p.SetConfig(cfg)
	e.run()
	after := e.p.Status()
	if after.RemoteStartOffset <= before.RemoteStartOffset || after.RemoteBytes+after.LocalBytes >= cfg.RetentionBytes+before.RemoteBytes/before.RemoteSegments+1 {
		t.Fatalf("retention.bytes: before %+v after %+v", before, after)
	}
	m := assertManifestMatchesBucket(t, e)
	if n := len(e.objects()); n > 5*len(m.Segments)+2 {
		t.Fatalf("%d objects for %d segments: expired ones not deleted", n, len(m.Segments))
	}
	if _, err := e.p.Read(context.Background(), 0, 100, e.log.HighWatermark()); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below the remote start: %v", err)
	}
	got, err := e.readAll(after.RemoteStartOffset, e.log.HighWatermark(), 1<<20)
	if err != nil || !bytes.Equal(got, e.stampedFrom(after.RemoteStartOffset)) {
		t.Fatalf("read after retention: %v", err)
	}
	// By time: everything is older than a day.
	e.clock.Advance(48 * time.Hour)
	e.produce(1, 1, 10)
	cfg.RetentionBytes, cfg.RetentionMs = -1, 24*3600*1000
	e.p.SetConfig(cfg)
	e.run()
	if st := e.p.Status(); st.RemoteSegments != 0 || e.log.LogStartOffset() < after.RemoteEndOffset {
		t.Fatalf("retention.ms: %+v", st)
	}
}

// TestRemoteStorageToggle: off stops uploads and local deletion; on resumes
// without a gap.
func TestRemoteStorageToggle(t *testing.T) {
	cfg := *localOnlyTail(0)
	e := newEnv(t, envOptions{cfg: &cfg})
	e.produce(100, 5, 40)
	e.run()
	end := e.p.Status().RemoteEndOffset
	cfg.RemoteStorageEnable = false
	e.p.SetConfig(cfg)
	start := e.log.LogStartOffset()
	e.produce(100, 5, 40)
	e.run()
	if e.p.Status().RemoteEndOffset != end || e.log.LogStartOffset() != start {
		t.Fatal("uploaded or deleted with remote storage off")
	}
	cfg.RemoteStorageEnable = true
	e.p.SetConfig(cfg)
	e.run()
	m := assertManifestMatchesBucket(t, e)
	for i := 1; i < len(m.Segments); i++ {
		if m.Segments[i].BaseOffset != m.Segments[i-1].EndOffset {
			t.Fatalf("gap between %d and %d", m.Segments[i-1].EndOffset, m.Segments[i].BaseOffset)
		}
	}
	got, err := e.readAll(0, e.log.HighWatermark(), 1<<20)
	if err != nil || !bytes.Equal(got, e.stampedFrom(0)) {
		t.Fatalf("read after toggling: %v", err)
	}
}

// TestRemoteLogCopyDisable (KIP-950): with remote.log.copy.disable no new
// segment is uploaded, the remote log stays readable, local retention
// deletes nothing above the remote end (the new segments are in no bucket),
// total retention still expires remote and local data; turning copying back
// on uploads from the remote end without a gap.
func TestRemoteLogCopyDisable(t *testing.T) {
	cfg := *localOnlyTail(0)
	e := newEnv(t, envOptions{cfg: &cfg})
	e.produce(300, 5, 40)
	e.run()
	before := e.p.Status()
	if before.RemoteSegments < 3 {
		t.Fatalf("nothing uploaded: %+v", before)
	}
	objects := len(e.objects())
	cfg.RemoteLogCopyDisable = true
	e.p.SetConfig(cfg)
	e.produce(100, 5, 40)
	localStart := e.log.LogStartOffset()
	for i := 0; i < 3; i++ {
		e.run()
	}
	after := e.p.Status()
	if after.RemoteEndOffset != before.RemoteEndOffset || after.RemoteSegments != before.RemoteSegments || len(e.objects()) != objects {
		t.Fatalf("uploaded with remote.log.copy.disable: before %+v after %+v, %d objects, %d before", before, after, len(e.objects()), objects)
	}
	if sealed := e.log.Segments(); len(sealed) < 3 || !sealed[len(sealed)-2].Sealed || sealed[len(sealed)-2].NextOffset <= before.RemoteEndOffset {
		t.Fatalf("no sealed segment past the remote end to hold back: %+v", sealed)
	}
	if e.log.LogStartOffset() != localStart || localStart > before.RemoteEndOffset {
		t.Fatalf("local log start %d (was %d), remote end %d: local retention deleted what is in no bucket", e.log.LogStartOffset(), localStart, before.RemoteEndOffset)
	}
	if after.UploadLagBytes != 0 || after.UploadLagOffsets != 0 {
		t.Fatalf("upload lag %d bytes, %d offsets with copying off", after.UploadLagBytes, after.UploadLagOffsets)
	}
	got, err := e.readAll(0, e.log.HighWatermark(), 1<<20)
	if err != nil || !bytes.Equal(got, e.stampedFrom(0)) {
		t.Fatalf("read across tiers with copying off: %v", err)
	}

	// Total retention still applies to both tiers.
	cfg.RetentionBytes = after.LocalBytes + after.RemoteBytes/2
	cfg.LocalRetentionBytes = -2
	e.p.SetConfig(cfg)
	e.run()
	if st := e.p.Status(); st.RemoteStartOffset <= before.RemoteStartOffset || st.RemoteEndOffset != before.RemoteEndOffset || len(e.objects()) >= objects || e.log.LogStartOffset() != localStart {
		t.Fatalf("total retention with copying off: %+v (remote start was %d, %d objects, %d before)", st, before.RemoteStartOffset, len(e.objects()), objects)
	}
	assertManifestMatchesBucket(t, e)

	cfg.RemoteLogCopyDisable, cfg.RetentionBytes = false, -1
	e.p.SetConfig(cfg)
	e.run()
	st := e.p.Status()
	if st.RemoteEndOffset <= before.RemoteEndOffset {
		t.Fatalf("copying back on uploaded nothing: %+v", st)
	}
	m := assertManifestMatchesBucket(t, e)
	for i := 1; i < len(m.Segments); i++ {
		if m.Segments[i].BaseOffset != m.Segments[i-1].EndOffset {
			t.Fatalf("gap between %d and %d", m.Segments[i-1].EndOffset, m.Segments[i].BaseOffset)
		}
	}
	got, err = e.readAll(st.RemoteStartOffset, e.log.HighWatermark(), 1<<20)
	if err != nil || !bytes.Equal(got, e.stampedFrom(st.RemoteStartOffset)) {
		t.Fatalf("read after copying resumed: %v", err)
	}
}

func TestDeleteTopic(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(0)})
	e.produce(100, 5, 40)
	e.run()
	// A limit of 2 objects per call: calls until one finds nothing.
	for calls := 0; ; calls++ {
		n, err := e.m.PurgeTopic(context.Background(), testTP.TopicID, testTP.Partition+1, 2)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			if calls < 2 {
				t.Fatalf("everything deleted in %d calls of at most 2 objects", calls)
			}
			break
		}
	}
	l, err := e.store.List(context.Background(), "", "")
	if err != nil || len(l.Objects) != 0 {
		t.Fatalf("objects left after delete: %d %v", len(l.Objects), err)
	}
}

// TestLSOBoundsUploads: nothing at or above the last stable offset goes up.
func TestLSOBoundsUploads(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(-1)})
	e.m.RemovePartition(testTP)
	lso := int64(0)
	p, err := e.m.AddPartition(PartitionOptions{TopicPartition: testTP, Log: e.log, Config: *localOnlyTail(-1),
		LastStableOffset: func() int64 { return lso }})
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	e.produce(100, 5, 40)
	e.run()
	if e.p.Status().RemoteSegments != 0 {
		t.Fatal("uploaded past the LSO")
	}
	lso = e.log.HighWatermark()
	e.run()
	if e.p.Status().RemoteSegments == 0 {
		t.Fatal("nothing uploaded below the LSO")
	}
}

// TestSelfDescribingBucket reads every record from the bucket alone: list
// the descriptors, find the newest manifest of each partition by listing,
// and read its segments' objects.
func TestSelfDescribingBucket(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(0)})
	e.produce(200, 5, 40)
	e.run()
	ctx := context.Background()
	topics, err := e.store.List(ctx, "topics/", "/")
	if err != nil || len(topics.Prefixes) != 1 {
		t.Fatalf("topics: %+v %v", topics, err)
	}
	descs, _ := e.store.List(ctx, topics.Prefixes[0], "")
	if len(descs.Objects) != 1 {
		t.Fatalf("descriptors: %+v", descs)
	}
	d, err := ReadDescriptor(ctx, e.store, descs.Objects[0].Key)
	if err != nil || d.Topic != testTP.Topic || d.Partition != testTP.Partition {
		t.Fatalf("descriptor %+v %v", d, err)
	}
	m, err := LatestManifest(ctx, e.store, d.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, s := range m.Segments {
		b, err := objectstore.ReadAll(ctx, e.store, s.Stem+SuffixLog, s.Size)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if !bytes.Equal(all, e.stampedFrom(0)[:len(all)]) || len(all) == 0 {
		t.Fatal("bucket alone does not give the records")
	}
	parts, err := InspectBucket(ctx, e.store)
	if err != nil || len(parts) != 1 || parts[0].Manifest == nil || parts[0].Manifest.EndOffset != m.EndOffset || parts[0].Objects == 0 {
		t.Fatalf("inspect: %+v %v", parts, err)
	}
}

// TestBackgroundLoop drives the Manager's own loop (no RunOnce).
func TestBackgroundLoop(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(0)})
	e.m.Close()
	m, err := New(Options{Store: e.store, Committer: e.com, Leadership: e.com, CacheDir: t.TempDir(),
		Interval: 5 * time.Millisecond, ChunkSize: 8 << 10, Logger: quietLogger(), BaseBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, _ := m.AddPartition(PartitionOptions{TopicPartition: testTP, Log: e.log, Config: *localOnlyTail(0)})
	e.p = p
	e.produce(200, 5, 40)
	waitFor(t, "upload and local retention", func() bool {
		st := p.Status()
		return st.RemoteSegments > 0 && st.LocalStartOffset > 0 && st.LocalStartOffset == st.RemoteEndOffset
	})
	got, err := e.readAll(0, e.log.HighWatermark(), 1<<20)
	if err != nil || !bytes.Equal(got, e.stampedFrom(0)) {
		t.Fatalf("read: %v", err)
	}
}

// TestOffsetForTimestamp: the remote answer matches the local log's before
// local retention.
func TestOffsetForTimestamp(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(-1)})
	base := e.clock.Now().UnixMilli()
	for i := 0; i < 200; i++ {
		e.clock.Advance(time.Second)
		e.produce(1, 4, 30)
	}
	e.run()
	ctx := context.Background()
	end, _ := e.p.RemoteLogEnd(ctx)
	for _, d := range []int64{0, 1000, 1500, 50000, 120000, 500000} {
		ts := base + d
		roff, rts, err := e.p.OffsetForTimestamp(ctx, ts)
		if err != nil {
			t.Fatal(err)
		}
		loff, lts, err := e.log.OffsetForTimestamp(ts)
		if err != nil {
			t.Fatal(err)
		}
		if loff >= 0 && loff < end && (roff != loff || rts != lts) {
			t.Fatalf("ts +%d: remote (%d, %d), local (%d, %d)", d, roff, rts, loff, lts)
		}
		if loff >= end && roff != -1 {
			t.Fatalf("ts +%d: remote answered %d past its end %d", d, roff, end)
		}
	}
}

// TestOffsetForTimestampAfterDeleteRecords: with the remote log start
// inside a batch (DeleteRecords), a lookup answers the first record at or
// past the start whose timestamp is at least ts, with that record's
// timestamp, as Kafka's findOffsetByTimestamp does. Before, the offset was
// raised to the start but the timestamp was that of a deleted record
// (the first qualifying one below the start).
func TestOffsetForTimestampAfterDeleteRecords(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(0)})
	base := e.clock.Now().UnixMilli()
	for range 200 { // batch i: offsets [5i, 5i+5), timestamp base+(i+1) s
		e.clock.Advance(time.Second)
		e.produce(1, 5, 40)
	}
	e.run()
	ctx := context.Background()
	if end, _ := e.p.RemoteLogEnd(ctx); end < 700 {
		t.Fatalf("remote end %d, want past 700", end)
	}
	const cut = 402 // inside batch 80
	if err := e.p.DeleteRecordsBefore(ctx, cut); err != nil {
		t.Fatal(err)
	}
	batchTs := func(i int64) int64 { return base + (i+1)*1000 }
	for _, c := range []struct{ ts, off, rts int64 }{
		{base, cut, batchTs(80)},              // before everything: the start
		{batchTs(50), cut, batchTs(80)},       // a deleted batch's time
		{batchTs(80) - 1, cut, batchTs(80)},   // just before the start's batch
		{batchTs(80), cut, batchTs(80)},       // the start's batch
		{batchTs(81), 405, batchTs(81)},       // the next batch
		{batchTs(120) + 1, 605, batchTs(121)}, // further in the remote log
	} {
		off, rts, err := e.p.OffsetForTimestamp(ctx, c.ts)
		if err != nil || off != c.off || rts != c.rts {
			t.Errorf("ts %+d ms: (%d, %+d ms) %v, want (%d, %+d ms)", c.ts-base, off, rts-base, err, c.off, c.rts-base)
		}
	}
}

func TestDeleteRecordsBefore(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(0)})
	e.produce(200, 5, 40)
	e.run()
	ctx := context.Background()
	end, _ := e.p.RemoteLogEnd(ctx)
	cut := end / 2
	if err := e.p.DeleteRecordsBefore(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if start, _ := e.p.EarliestOffset(ctx); start != cut {
		t.Fatalf("earliest %d, want %d", start, cut)
	}
	if _, err := e.p.Read(ctx, cut-1, 100, e.log.HighWatermark()); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below the new start: %v", err)
	}
	res, err := e.p.Read(ctx, cut, 100, e.log.HighWatermark())
	if err != nil {
		t.Fatal(err)
	}
	res.Release()
	assertManifestMatchesBucket(t, e)
	got, err := e.readAll(cut, e.log.HighWatermark(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	hdr, _ := hotlog.ParseBatchHeader(got)
	if want := e.stampedFrom(hdr.BaseOffset); !bytes.Equal(got, want) {
		t.Fatal("records after the cut differ")
	}
}

// reopen restarts the partition's broker: the local log is opened again
// from its files and a new Manager starts with an empty cache.
func (e *env) reopen() {
	e.t.Helper()
	e.m.Close()
	if err := e.log.Close(); err != nil {
		e.t.Fatal(err)
	}
	l, err := hotlog.Open(hotlog.Options{Dir: filepath.Join(e.dir, "log"), Config: hotlog.Config{SegmentBytes: 16 << 10, Flush: hotlog.FlushOS},
		Now: e.clock.Now, Logger: quietLogger()})
	if err != nil {
		e.t.Fatal(err)
	}
	l.SetHighWatermark(l.LogEndOffset())
	e.log = l
	e.t.Cleanup(func() { l.Close() })
	e.open(envOptions{}, e.p.Config())
}

// TestDeleteRecordsBeforeUpload: DeleteRecords raises the log start to cut,
// in the middle of a sealed local segment whose data is not in the bucket
// yet (nothing uploaded, or cut past the remote end). The next rounds must
// not bring the deleted records back: the segment goes up from its batch
// that holds cut, the manifest starts at cut, ListOffsets -2 stays at cut
// and a read below it is out of range. The same with a restart between
// DeleteRecords and the upload, and after a crash between DeleteRecords'
// remote commit and its local step (the local log start still below cut:
// the next round raises it). Total retention counts what was uploaded.
func TestDeleteRecordsBeforeUpload(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{"nothing-remote", "nothing-remote-restart", "past-remote-end", "past-remote-end-restart", "past-remote-end-crash"} {
		t.Run(mode, func(t *testing.T) {
			cfg := *localOnlyTail(0)
			e := newEnv(t, envOptions{cfg: &cfg})
			e.produce(200, 5, 40)
			var remoteEnd int64
			if strings.HasPrefix(mode, "past-remote-end") {
				e.run()
				remoteEnd, _ = e.p.RemoteLogEnd(ctx)
				if remoteEnd <= 0 {
					t.Fatal("nothing uploaded")
				}
				e.produce(200, 5, 40)
			}
			// A cut in the middle of a sealed segment past the remote end.
			cut, segBase := int64(-1), int64(-1)
			for _, s := range e.log.Segments() {
				if s.Sealed && s.BaseOffset >= remoteEnd && s.NextOffset-s.BaseOffset > 10 {
					cut, segBase = s.BaseOffset+(s.NextOffset-s.BaseOffset)/2, s.BaseOffset
					break
				}
			}
			if cut < 0 {
				t.Fatal("no sealed segment past the remote end")
			}
			if mode == "past-remote-end-crash" {
				// DeleteRecords' remote commit alone, by a broker
				// without the local log (it crashes before the local
				// step).
				m2, err := New(Options{Store: e.store, Committer: e.com, Leadership: e.com, CacheDir: filepath.Join(e.dir, "cache2"),
					Interval: -1, Now: e.clock.Now, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				p2, err := m2.AddPartition(PartitionOptions{TopicPartition: testTP, Config: cfg})
				if err != nil {
					t.Fatal(err)
				}
				if err := p2.DeleteRecordsBefore(ctx, cut); err != nil {
					t.Fatal(err)
				}
				m2.Close()
				e.reopen()
				if e.log.LogStartOffset() >= cut {
					t.Fatal("the local log start moved")
				}
			} else if err := e.p.DeleteRecordsBefore(ctx, cut); err != nil {
				t.Fatal(err)
			}
			if start, err := e.p.EarliestOffset(ctx); start != cut {
				t.Fatalf("right after DeleteRecords: earliest %d (%v), want %d", start, err, cut)
			}
			if strings.HasSuffix(mode, "-restart") {
				e.reopen()
				if start, err := e.p.EarliestOffset(ctx); start != cut {
					t.Fatalf("after a restart: earliest %d (%v), want %d", start, err, cut)
				}
			}
			e.run() // upload + local retention
			e.run()
			start, _ := e.p.EarliestOffset(ctx)
			rs, _ := e.p.RemoteLogStart(ctx)
			if start != cut || rs != cut || e.log.LogStartOffset() < cut {
				t.Fatalf("after the upload: earliest %d, remote start %d, local start %d; want %d, %d, at least %d",
					start, rs, e.log.LogStartOffset(), cut, cut, cut)
			}
			if res, err := e.p.Read(ctx, cut-1, 1<<20, e.log.HighWatermark()); err == nil {
				res.Release()
				t.Fatalf("a read at %d (deleted) is served from the bucket: first offset %d", cut-1, res.FirstOffset)
			} else if !errors.Is(err, ErrOffsetOutOfRange) {
				t.Fatal(err)
			}
			m := assertManifestMatchesBucket(t, e)
			if len(m.Segments) < 2 || m.StartOffset != cut {
				t.Fatalf("manifest [%d, %d) with %d segments", m.StartOffset, m.EndOffset, len(m.Segments))
			}
			first := m.Segments[0]
			if first.BaseOffset <= segBase || first.BaseOffset > cut {
				t.Fatalf("first remote segment from %d: the local segment [%d, …) was not cut at the batch that holds %d", first.BaseOffset, segBase, cut)
			}
			if info, err := e.store.Head(ctx, first.Stem+SuffixLog); err != nil || info.Size != first.Size {
				t.Fatalf("first segment: %d bytes in the bucket (%v), the manifest says %d", info.Size, err, first.Size)
			}
			got, err := e.readAll(cut, e.log.HighWatermark(), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, e.stampedFrom(cut)) {
				t.Fatal("records from the cut on differ")
			}
			// Total retention counts the bytes uploaded: a bound of
			// everything but the first remote segment drops it alone.
			st := e.p.Status()
			if st.RemoteBytes != m.Size() {
				t.Fatalf("status: %d remote bytes, the manifest %d", st.RemoteBytes, m.Size())
			}
			cfg.RetentionBytes = st.RemoteBytes + st.LocalBytes - first.Size
			e.p.SetConfig(cfg)
			e.run()
			if start, _ := e.p.EarliestOffset(ctx); start != first.EndOffset {
				t.Fatalf("retention.bytes %d: earliest %d, want %d (the first segment dropped alone)", cfg.RetentionBytes, start, first.EndOffset)
			}
		})
	}
}

// fencedMem is memCommitter with the lease-carrying commit (the lease is
// not checked: these tests are about the manifest, not the lease).
type fencedMem struct{ *memCommitter }

func (c fencedMem) CommitRemoteLogFenced(ctx context.Context, tp TopicPartition, epoch int32, expected int64, key string, start, end int64, _ Fence) error {
	return c.CommitRemoteLog(ctx, tp, epoch, expected, key, start, end)
}

// fencedEnv is newEnv (local retention 0) reopened with a Committer that
// can carry a fence, for ReplaceSegments.
func fencedEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, envOptions{cfg: localOnlyTail(0)})
	e.m.Close()
	m, err := New(Options{Store: e.store, Committer: fencedMem{e.com}, Leadership: e.com, CacheDir: filepath.Join(e.dir, "cache2"),
		ChunkSize: 8 << 10, Interval: -1, Now: e.clock.Now, Logger: quietLogger(), IndexIntervalBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	p, err := m.AddPartition(PartitionOptions{TopicPartition: testTP, Log: e.log, Config: *localOnlyTail(0)})
	if err != nil {
		t.Fatal(err)
	}
	e.m, e.p = m, p
	return e
}

// TestCompactedGaps: tiered compaction can drop every record of remote
// segments (all their keys have newer values later), so ReplaceSegments
// swaps them for nothing: a segment in the middle, and the last one. The
// manifest keeps its EndOffset, but its last segment now ends before it. A
// consumer reading the remote log in order, and one that asks for an offset
// inside either gap, must be handed the next batch (the next remote
// segment's first; at the tail, nothing and the remote end, where the local
// log goes on), never OFFSET_OUT_OF_RANGE.
func TestCompactedGaps(t *testing.T) {
	ctx := context.Background()
	e := fencedEnv(t)
	p := e.p
	e.produce(300, 5, 40)
	e.run()
	e.run()
	mf, err := p.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(mf.Segments) < 4 {
		t.Fatalf("%d remote segments", len(mf.Segments))
	}
	mid, last := mf.Segments[1], mf.Segments[len(mf.Segments)-1]
	if e.log.LogStartOffset() != mf.EndOffset {
		t.Fatalf("local start %d, remote end %d", e.log.LogStartOffset(), mf.EndOffset)
	}
	if err := p.ReplaceSegments(ctx, []Replacement{{Old: []string{mid.Stem}}, {Old: []string{last.Stem}}}, mf.EndOffset,
		Fence{Kind: "compact", Token: 1}); err != nil {
		t.Fatal(err)
	}
	// Inside the gaps: the middle one's next batch is the next segment's
	// first; the tail's is past the remote end.
	for _, c := range []struct{ at, next int64 }{
		{mid.BaseOffset, mf.Segments[2].BaseOffset}, {mid.EndOffset - 1, mf.Segments[2].BaseOffset},
		{last.BaseOffset, -1}, {last.EndOffset - 1, -1},
	} {
		res, err := p.Read(ctx, c.at, 1<<20, e.log.HighWatermark())
		if err != nil {
			t.Fatalf("read at %d, in a gap: %v", c.at, err)
		}
		if c.next >= 0 && res.FirstOffset != c.next || c.next < 0 && (res.Size != 0 || res.NextOffset != mf.EndOffset) {
			t.Fatalf("read at %d: %d bytes from %d, next %d", c.at, res.Size, res.FirstOffset, res.NextOffset)
		}
		res.Release()
	}
	// A consumer reading the remote log in order gets every batch the
	// manifest still holds, then is sent on to the local log.
	var got []byte
	off := mf.StartOffset
	for off < e.log.LogStartOffset() {
		res, err := p.Read(ctx, off, 1<<20, e.log.HighWatermark())
		if err != nil {
			t.Fatalf("remote read at %d (remote log [%d, %d), local start %d): %v", off, mf.StartOffset, mf.EndOffset,
				e.log.LogStartOffset(), err)
		}
		if res.NextOffset <= off {
			res.Release()
			t.Fatalf("no progress at %d", off)
		}
		b, err := res.Bytes()
		res.Release()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b...)
		off = res.NextOffset
	}
	if off != e.log.LogStartOffset() {
		t.Fatalf("the remote reads ended at %d, the local log starts at %d", off, e.log.LogStartOffset())
	}
	all := e.stampedFrom(0)
	want := append(batchesIn(t, all, 0, mid.BaseOffset), batchesIn(t, all, mf.Segments[2].BaseOffset, last.BaseOffset)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes from the remote log, want %d", len(got), len(want))
	}
}

// TestCompactedAway: tiered compaction swaps every remote segment for
// nothing (all their keys have newer values in the local log). The log start
// stays where it was, as Kafka's does when its cleaner empties the first
// segments: a consumer whose committed offset is in the emptied range is
// not OFFSET_OUT_OF_RANGE (with auto.offset.reset=latest it would skip the
// local log), and its read moves on to the remote end, where the local log
// goes on.
func TestCompactedAway(t *testing.T) {
	ctx := context.Background()
	e := fencedEnv(t)
	p := e.p
	e.produce(200, 5, 40)
	e.run()
	e.run()
	mf, err := p.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(mf.Segments) < 2 || mf.StartOffset != 0 || e.log.LogStartOffset() != mf.EndOffset {
		t.Fatalf("setup: %d remote segments [%d, %d), local start %d", len(mf.Segments), mf.StartOffset, mf.EndOffset, e.log.LogStartOffset())
	}
	var reps []Replacement
	for _, s := range mf.Segments {
		reps = append(reps, Replacement{Old: []string{s.Stem}})
	}
	if err := p.ReplaceSegments(ctx, reps, mf.EndOffset, Fence{Kind: "compact", Token: 1}); err != nil {
		t.Fatal(err)
	}
	if start, err := p.EarliestOffset(ctx); err != nil || start != 0 {
		t.Fatalf("earliest offset after the remote log was compacted away: %d, %v; want 0", start, err)
	}
	for _, at := range []int64{0, mf.EndOffset / 2, mf.EndOffset - 1} {
		res, err := p.Read(ctx, at, 1<<20, e.log.HighWatermark())
		if err != nil {
			t.Fatalf("read at %d, compacted away: %v", at, err)
		}
		if res.Size != 0 || res.NextOffset != mf.EndOffset {
			t.Fatalf("read at %d: %d bytes, next %d; want nothing, next %d", at, res.Size, res.NextOffset, mf.EndOffset)
		}
		res.Release()
	}
	// DeleteRecords past the remote end still moves the start there.
	to := mf.EndOffset + 10
	if err := p.DeleteRecordsBefore(ctx, to); err != nil {
		t.Fatal(err)
	}
	if start, err := p.EarliestOffset(ctx); err != nil || start != to {
		t.Fatalf("earliest offset after DeleteRecords(%d): %d, %v", to, start, err)
	}
}

// TestCompactedAwayThenUpload: once tiered compaction swapped every remote
// segment for nothing, the next upload (a manifest without segments) keeps
// the remote log start where it was, as TestCompactedAway's compaction
// itself does: only retention and DeleteRecords move the log start. The
// upload set it to its first segment's base, as for a remote log emptied
// by retention, so a compacted topic's earliest offset moved up at each
// such round (0, 1370, 18936… in a disaster-recovery review) and a read in
// the compacted range (kcat -o 500) was OFFSET_OUT_OF_RANGE.
func TestCompactedAwayThenUpload(t *testing.T) {
	ctx := context.Background()
	e := fencedEnv(t)
	p := e.p
	e.produce(200, 5, 40)
	e.run()
	e.run()
	mf, err := p.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(mf.Segments) < 2 || mf.StartOffset != 0 {
		t.Fatalf("setup: %d remote segments [%d, %d)", len(mf.Segments), mf.StartOffset, mf.EndOffset)
	}
	var reps []Replacement
	for _, s := range mf.Segments {
		reps = append(reps, Replacement{Old: []string{s.Stem}})
	}
	if err := p.ReplaceSegments(ctx, reps, mf.EndOffset, Fence{Kind: "compact", Token: 1}); err != nil {
		t.Fatal(err)
	}
	// More records, uploaded by the next rounds.
	e.produce(200, 5, 40)
	e.run()
	e.run()
	mf2, err := p.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(mf2.Segments) == 0 || mf2.Segments[0].BaseOffset < mf.EndOffset {
		t.Fatalf("setup: no upload after the compaction (remote segments %d, from %d)", len(mf2.Segments), mf.EndOffset)
	}
	if mf2.StartOffset != 0 {
		t.Errorf("remote log start %d after the next upload, want 0 (the compacted-away remote log was [0, %d))", mf2.StartOffset, mf.EndOffset)
	}
	if start, err := p.EarliestOffset(ctx); err != nil || start != 0 {
		t.Fatalf("earliest offset after the next upload: %d, %v; want 0: compaction moved the log start", start, err)
	}
	// A read in the compacted range moves on to the first batch uploaded
	// since.
	at := mf.EndOffset / 2
	res, err := p.Read(ctx, at, 1<<20, e.log.HighWatermark())
	if err != nil {
		t.Fatalf("read at %d, compacted away: %v", at, err)
	}
	defer res.Release()
	if res.Size == 0 || res.FirstOffset != mf2.Segments[0].BaseOffset {
		t.Fatalf("read at %d: %d bytes from %d; want the first uploaded batch, at %d", at, res.Size, res.FirstOffset, mf2.Segments[0].BaseOffset)
	}
}

// batchesIn returns the batches of all whose base offset is in [from, to).
func batchesIn(t *testing.T, all []byte, from, to int64) []byte {
	t.Helper()
	hdrs, err := hotlog.ValidateBatches(all)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	pos := int64(0)
	for _, h := range hdrs {
		if h.BaseOffset >= from && h.BaseOffset < to {
			out = append(out, all[pos:pos+h.Size()]...)
		}
		pos += h.Size()
	}
	return out
}

// TestReadAheadRuns: a sequential reader's read-ahead fetches runs of chunks
// with one GET each (far fewer GETs than chunks), and when those streams are
// cut or corrupted the reader still gets exactly the produced bytes (the
// chunks a failed run did not deliver are fetched one by one).
func TestReadAheadRuns(t *testing.T) {
	inner := mem.New(nil)
	fs := faulty.Wrap(inner, 11)
	e := newEnv(t, envOptions{store: fs, segmentBytes: 64 << 10, chunkSize: 4096, cfg: localOnlyTail(0)})
	e.produce(400, 5, 100)
	for i := 0; i < 20 && e.log.LogStartOffset() < e.log.HighWatermark()-100; i++ {
		e.run()
	}
	end := e.log.LogStartOffset()
	want := e.stampedFrom(0)
	read := func(what string) {
		t.Helper()
		var got []byte
		for attempt := 0; attempt < 20; attempt++ {
			var err error
			if got, err = e.readAll(0, end, 3000); err == nil {
				break
			} else if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("%s: a failed read must be ErrUnavailable: %v", what, err)
			}
		}
		if !bytes.HasPrefix(want, got) || len(got) == 0 {
			t.Fatalf("%s: read %d bytes that are not the produced ones", what, len(got))
		}
	}
	e.open(envOptions{chunkSize: 4096}, e.p.Config()) // a cold cache
	read("clean")
	ms := e.m.Metrics()
	if ms.CacheMisses < 40 || ms.Prefetches < ms.CacheMisses/2 || ms.Gets*3 > ms.CacheMisses*2 {
		t.Fatalf("%d chunks downloaded (%d prefetched) with %d GETs: runs not coalesced", ms.CacheMisses, ms.Prefetches, ms.Gets)
	}
	t.Logf("%d chunks downloaded (%d prefetched) with %d GETs", ms.CacheMisses, ms.Prefetches, ms.Gets)
	e.m.Close()
	fs.SetRules(faulty.Rule{Ops: faulty.OpReadRange, Probability: 0.2, Truncate: true},
		faulty.Rule{Ops: faulty.OpReadRange, Probability: 0.2, Corrupt: true})
	e.open(envOptions{chunkSize: 4096}, e.p.Config())
	read("flaky")
	if fs.Injected(faulty.OpReadRange) == 0 {
		t.Fatal("no fault injected")
	}
}

// TestFollowerLocalRetention: a follower uploads and commits nothing, but
// trims its local copy of a tiered partition below the remote end the leader
// committed, and keeps everything above it.
func TestFollowerLocalRetention(t *testing.T) {
	cfg := *localOnlyTail(-1) // keep everything locally while leading
	e := newEnv(t, envOptions{cfg: &cfg})
	e.produce(200, 5, 40)
	e.run()
	remoteEnd := e.p.Status().RemoteEndOffset
	if remoteEnd <= 0 || e.log.LogStartOffset() != 0 {
		t.Fatalf("setup: remote end %d, local start %d", remoteEnd, e.log.LogStartOffset())
	}
	// Leadership moves away; more data arrives (replicated).
	e.com.mu.Lock()
	delete(e.com.epochs, testTP)
	commits := e.com.commits
	e.com.mu.Unlock()
	e.produce(200, 5, 40)
	objects := len(e.objects())

	cfg.LocalRetentionBytes = 0
	e.p.SetConfig(cfg)
	if err := e.p.RunOnce(context.Background()); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("follower round: %v, want ErrNotLeader", err)
	}
	if start := e.log.LogStartOffset(); start == 0 || start > remoteEnd {
		t.Fatalf("follower's local start %d, want in (0, %d] (the committed remote end)", start, remoteEnd)
	}
	e.com.mu.Lock()
	nowCommits := e.com.commits
	e.com.mu.Unlock()
	if nowCommits != commits || len(e.objects()) != objects {
		t.Fatalf("a follower committed (%d → %d) or uploaded (%d → %d objects)", commits, nowCommits, objects, len(e.objects()))
	}
	// Everything is still readable across the tiers.
	got, err := e.readAll(0, e.log.HighWatermark(), 1<<20)
	if err != nil || !bytes.Equal(got, e.stampedFrom(0)) {
		t.Fatalf("read after the follower's retention: %v", err)
	}

	// With remote storage off, a follower deletes nothing.
	start := e.log.LogStartOffset()
	cfg.RemoteStorageEnable = false
	e.p.SetConfig(cfg)
	e.p.RunOnce(context.Background())
	if e.log.LogStartOffset() != start {
		t.Fatal("deleted local data with remote storage off")
	}
}

// TestNewLeaderMidSegment: a follower rolls its segments where its own
// appends fall, not where the leader's did, so when it becomes leader the
// committed remote end can lie inside one of its local segments. It must
// continue uploading from that end: no offset twice in the manifest (the
// straddling segment goes up from the remote end on), no gap, and every
// record reads back from the bucket.
func TestNewLeaderMidSegment(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(-1)})
	e.produce(120, 5, 40)
	e.run()
	remoteEnd := e.p.Status().RemoteEndOffset
	if remoteEnd <= 0 {
		t.Fatal("nothing uploaded by the first leader")
	}
	// The follower's copy: the same batches, appended in runs of 7 into
	// segments of another size, so that its boundaries differ.
	flog := followerCopy(t, e, 11<<10)
	straddles := false
	for _, s := range flog.Segments() {
		straddles = straddles || (s.BaseOffset < remoteEnd && s.NextOffset > remoteEnd)
	}
	if !straddles {
		t.Fatalf("setup: no follower segment straddles the remote end %d", remoteEnd)
	}
	// Leadership moves to the follower (epoch 6); the old leader is gone.
	p2 := newLeaderOn(t, e, flog, *localOnlyTail(-1))
	for i := 0; i < 60; i++ {
		if _, err := flog.Append(makeBatch(5, 40, e.clock.Now().UnixMilli(), uint64(1000+i)), hotlog.AppendOptions{LeaderEpoch: 6}); err != nil {
			t.Fatal(err)
		}
	}
	flog.SetHighWatermark(flog.LogEndOffset())
	if err := p2.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := p2.refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := st.manifest
	if m.EndOffset <= remoteEnd {
		t.Fatalf("the new leader uploaded nothing past %d", remoteEnd)
	}
	next := m.StartOffset
	for _, s := range m.Segments {
		if s.BaseOffset != next {
			t.Fatalf("segment %s starts at %d, want %d (overlap or gap)", s.Stem, s.BaseOffset, next)
		}
		next = s.EndOffset
	}
	if next != m.EndOffset {
		t.Fatalf("segments end at %d, manifest at %d", next, m.EndOffset)
	}
	var got []byte
	ctx := context.Background()
	for off := int64(0); off < m.EndOffset; {
		res, err := p2.Read(ctx, off, 1<<20, m.EndOffset)
		if err != nil {
			t.Fatalf("remote read at %d: %v", off, err)
		}
		b, err := res.Bytes()
		res.Release()
		if err != nil || res.NextOffset <= off {
			t.Fatalf("remote read at %d: %v, next %d", off, err, res.NextOffset)
		}
		got = append(got, b...)
		off = res.NextOffset
	}
	want, err := flog.ReadBytes(0, 1<<30, m.EndOffset)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes from the bucket, want %d (equal prefix %d)", len(got), len(want), commonPrefix(got, want))
	}
}

// TestReadAheadStream: one read from a cold cache starts the read-ahead
// stream, which goes on by itself (a run that ends starts the next) until
// the window is cached, with one GET per segment run and never more than
// ReadStreams GETs at once.
func TestReadAheadStream(t *testing.T) {
	for _, streams := range []int{1, 2} {
		gs := &getCounter{Store: mem.New(nil)}
		e := newEnv(t, envOptions{store: gs, segmentBytes: 16 << 10, chunkSize: 4096, cfg: localOnlyTail(0)})
		e.produce(400, 5, 100)
		for i := 0; i < 20 && e.log.LogStartOffset() < e.log.HighWatermark()-100; i++ {
			e.run()
		}
		const window = 24
		e.open(envOptions{chunkSize: 4096, readAhead: window, readStreams: streams}, e.p.Config()) // a cold cache
		ctx := context.Background()
		st, err := e.p.refresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The segments wholly in the window from offset 0.
		var whole []SegmentMeta
		for n, i := 0, 0; i < len(st.manifest.Segments) && n+st.manifest.Segments[i].numChunks() <= window; i++ {
			whole = append(whole, st.manifest.Segments[i])
			n += st.manifest.Segments[i].numChunks()
		}
		if len(whole) < 3 || len(whole) == len(st.manifest.Segments) {
			t.Fatalf("setup: %d segments wholly in the window, of %d", len(whole), len(st.manifest.Segments))
		}
		gs.reset()
		res, err := e.p.Read(ctx, 0, 1, e.log.LogStartOffset())
		if err != nil {
			t.Fatal(err)
		}
		res.Release()
		cached := func(k chunkKey) bool {
			e.m.cache.mu.Lock()
			ch, ok := e.m.cache.mu.entries[k]
			e.m.cache.mu.Unlock()
			if !ok {
				return false
			}
			select {
			case <-ch.ready:
				return ch.err == nil
			default:
				return false
			}
		}
		waitFor(t, "the window cached after one read", func() bool {
			for _, s := range whole {
				for c := 0; c < s.numChunks(); c++ {
					if !cached(chunkKey{s.Stem, c}) {
						return false
					}
				}
			}
			return true
		})
		gets, most := gs.counts()
		if most > streams || most < 1 {
			t.Fatalf("%d GETs at once with ReadStreams %d", most, streams)
		}
		if gets < len(whole) || gets > len(whole)+1 {
			t.Fatalf("%d GETs for the window's %d whole segments: want one per segment run", gets, len(whole))
		}
	}
}

// getCounter counts ranged reads (GETs) and how many stream at once.
type getCounter struct {
	objectstore.Store
	mu               sync.Mutex
	open, most, gets int
}

func (g *getCounter) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.most, g.gets = 0, 0
}

func (g *getCounter) counts() (gets, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gets, g.most
}

func (g *getCounter) ReadObject(ctx context.Context, key string) (objectstore.Reader, int64, error) {
	r, size, err := g.Store.ReadObject(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	return &getCounterReader{Reader: r, g: g}, size, nil
}

type getCounterReader struct {
	objectstore.Reader
	g *getCounter
}

func (r *getCounterReader) ReadRange(ctx context.Context, off, length int64) (io.ReadCloser, error) {
	rc, err := r.Reader.ReadRange(ctx, off, length)
	if err != nil {
		return nil, err
	}
	r.g.mu.Lock()
	r.g.open++
	r.g.gets++
	r.g.most = max(r.g.most, r.g.open)
	r.g.mu.Unlock()
	return &getCounterStream{ReadCloser: rc, g: r.g}, nil
}

type getCounterStream struct {
	io.ReadCloser
	g    *getCounter
	once sync.Once
}

func (s *getCounterStream) Close() error {
	s.once.Do(func() {
		s.g.mu.Lock()
		s.g.open--
		s.g.mu.Unlock()
	})
	return s.ReadCloser.Close()
}

// TestReadAheadSmallCache: with a cache smaller than the read-ahead window,
// the stream fetches each chunk of the window once and stops (the chunks
// evicted before the reader gets to them are the reader's to fetch), never
// a loop of GETs; the reader still gets every byte.
func TestReadAheadSmallCache(t *testing.T) {
	gs := &getCounter{Store: mem.New(nil)}
	e := newEnv(t, envOptions{store: gs, segmentBytes: 16 << 10, chunkSize: 4096, cfg: localOnlyTail(0)})
	e.produce(400, 5, 100)
	for i := 0; i < 20 && e.log.LogStartOffset() < e.log.HighWatermark()-100; i++ {
		e.run()
	}
	const window = 24
	e.open(envOptions{chunkSize: 4096, cacheBytes: 3 * 4096, readAhead: window, readStreams: 1}, e.p.Config())
	ctx := context.Background()
	gs.reset()
	res, err := e.p.Read(ctx, 0, 1, e.log.LogStartOffset())
	if err != nil {
		t.Fatal(err)
	}
	res.Release()
	idle := func() bool {
		e.p.ahead.mu.Lock()
		defer e.p.ahead.mu.Unlock()
		return e.p.ahead.inflight == 0
	}
	waitFor(t, "the stream done", idle)
	if gets, _ := gs.counts(); gets > window {
		t.Fatalf("%d GETs for a window of %d chunks", gets, window)
	}
	got, err := e.readAll(0, e.log.LogStartOffset(), 3000)
	if err != nil || !bytes.Equal(got, e.stampedFrom(0)[:len(got)]) || len(got) == 0 {
		t.Fatalf("read through a small cache: %d bytes, %v", len(got), err)
	}
}

// followerCopy is a follower's copy of e's log: the same batches,
// appended in runs of 7 into segments of segmentBytes.
func followerCopy(t *testing.T, e *env, segmentBytes int64) *hotlog.Log {
	t.Helper()
	flog, err := hotlog.Open(hotlog.Options{Dir: filepath.Join(e.dir, "follower"), Config: hotlog.Config{SegmentBytes: segmentBytes, Flush: hotlog.FlushOS},
		Now: e.clock.Now, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flog.Close() })
	all := e.stampedFrom(0)
	hdrs, err := hotlog.ValidateBatches(all)
	if err != nil {
		t.Fatal(err)
	}
	for i, pos := 0, int64(0); i < len(hdrs); {
		var n int64
		j := i
		for ; j < len(hdrs) && j < i+7; j++ {
			n += hdrs[j].Size()
		}
		if _, err := flog.AppendReplicated(all[pos:pos+n], hotlog.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		pos += n
		i = j
	}
	return flog
}

// newLeaderOn moves leadership to flog's broker (epoch 6): a second
// manager on e's bucket and committer, the old leader gone.
func newLeaderOn(t *testing.T, e *env, flog *hotlog.Log, cfg TopicConfig) *Partition {
	t.Helper()
	e.com.setEpoch(testTP, 6)
	m2, err := New(Options{Store: e.store, Committer: e.com, Leadership: e.com, CacheDir: filepath.Join(e.dir, "cache2"),
		ChunkSize: 8 << 10, Interval: -1, Now: e.clock.Now, Logger: quietLogger(), IndexIntervalBytes: 1024, OrphanGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m2.Close() })
	p2, err := m2.AddPartition(PartitionOptions{TopicPartition: testTP, Log: flog, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return p2
}

// TestTotalRetentionStraddlingSegment: after a leader change the new
// leader's active segment can hold offsets below the remote end; only its
// part above the end counts toward retention.bytes beside the remote
// segments. Counted whole, the remote part was counted twice and remote
// segments inside retention.bytes were expired.
func TestTotalRetentionStraddlingSegment(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(-1)})
	e.produce(120, 5, 40)
	e.run()
	before := e.p.Status()
	if before.RemoteSegments < 2 {
		t.Fatalf("setup: %+v", before)
	}
	flog := followerCopy(t, e, 1<<30) // one active segment holds everything
	segs := flog.Segments()
	if len(segs) != 1 || segs[0].Sealed || segs[0].NextOffset <= before.RemoteEndOffset {
		t.Fatalf("setup: follower segments %+v, remote end %d", segs, before.RemoteEndOffset)
	}
	flog.SetHighWatermark(flog.LogEndOffset())
	tail := segs[0].Size * (segs[0].NextOffset - before.RemoteEndOffset) / segs[0].NextOffset
	cfg := *localOnlyTail(-1)
	cfg.RetentionBytes = before.RemoteBytes + tail + 1024 // everything fits
	p2 := newLeaderOn(t, e, flog, cfg)
	if err := p2.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := p2.refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(st.manifest.Segments)) != before.RemoteSegments || st.manifest.StartOffset != before.RemoteStartOffset || flog.LogStartOffset() != 0 {
		t.Fatalf("retention.bytes %d (remote %d + local tail %d) expired data: %d of %d remote segments left, remote start %d, local start %d",
			cfg.RetentionBytes, before.RemoteBytes, tail, len(st.manifest.Segments), before.RemoteSegments, st.manifest.StartOffset, flog.LogStartOffset())
	}
	// Without room for the oldest remote segment: it goes, alone.
	cfg.RetentionBytes = before.RemoteBytes + tail - st.manifest.Segments[0].Size - 512
	p2.SetConfig(cfg)
	if err := p2.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, err = p2.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if int64(len(st.manifest.Segments)) != before.RemoteSegments-1 {
		t.Fatalf("retention.bytes %d: %d of %d remote segments left, want one expired", cfg.RetentionBytes, len(st.manifest.Segments), before.RemoteSegments)
	}
}

// goneCommitter answers that the partition is gone, as the broker's does
// once its topic was deleted.
type goneCommitter struct{ *memCommitter }

func (goneCommitter) RemoteLog(_ context.Context, tp TopicPartition) (RemoteLog, error) {
	return RemoteLog{}, fmt.Errorf("glue: unknown topic or partition (%w): %s", ErrUnknownPartition, tp)
}

// TestRoundOfADeletedPartitionIsQuiet: a background round that finds its
// partition gone (a topic deleted under a round in flight) neither warns
// nor backs off. Before, every broker logged "round failed; retrying" for
// each partition of a deleted topic (seen in librdkafka's suite).
func TestRoundOfADeletedPartitionIsQuiet(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(0)})
	e.m.Close()
	var logs testutil.Buffer
	com := goneCommitter{e.com}
	m, err := New(Options{Store: e.store, Committer: com, Leadership: com, CacheDir: t.TempDir(),
		Interval: time.Hour, ChunkSize: 8 << 10, Logger: slog.New(slog.NewTextHandler(&logs, nil)), BaseBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err := m.AddPartition(PartitionOptions{TopicPartition: testTP, Log: e.log, Config: *localOnlyTail(0)})
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	e.produce(20, 5, 40)
	for range 2 {
		p.busy.Store(true)
		p.backgroundRound(context.Background())
	}
	if strings.Contains(logs.String(), "round failed") || p.fails != 0 {
		t.Fatalf("a round of a deleted partition warned or backed off (fails %d):\n%s", p.fails, logs.String())
	}
}

// TestNoOrphanListingWithoutRemoteStorage: a partition whose topic never had
// remote storage has nothing in the bucket; its rounds no longer list the
// bucket for orphans (a LIST a partition every clean interval, and a WARN
// for each such partition while the bucket was down). Once remote storage
// is on, they do.
func TestNoOrphanListingWithoutRemoteStorage(t *testing.T) {
	cfg := DefaultTopicConfig()
	cfg.RemoteStorageEnable, cfg.RetentionMs = false, -1
	dir := t.TempDir()
	inner, err := fs.New(filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	// A rule that only counts: every List, no fault.
	store := faulty.Wrap(inner, 1, faulty.Rule{Ops: faulty.OpList, Latency: time.Nanosecond})
	e := newEnv(t, envOptions{store: store, cfg: &cfg})
	e.produce(20, 5, 40)
	ctx := context.Background()
	for range 3 {
		e.clock.Advance(time.Hour) // past the clean interval
		e.p.backgroundRound(ctx)
	}
	if n := store.Injected(faulty.OpList); n != 0 {
		t.Fatalf("%d bucket listings for a partition without remote storage", n)
	}
	cfg.RemoteStorageEnable = true
	e.p.SetConfig(cfg)
	e.clock.Advance(time.Hour)
	e.p.backgroundRound(ctx)
	if n := store.Injected(faulty.OpList); n == 0 {
		t.Fatal("no orphan listing once remote storage is on")
	}
}
