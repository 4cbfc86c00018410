package tiering

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// follower is a Leadership under which this broker leads nothing.
type follower struct{}

func (follower) LeaderEpoch(TopicPartition) (int32, bool) { return 0, false }

// TestRemoteLogDeleteOnDisable (KIP-950): with remote storage off and
// remote.log.delete.on.disable, the leader's round deletes the remote log:
// one commit of an empty range at the local log start, the segments'
// objects deleted; the log start is then the local one, the local records
// read back, later rounds commit nothing more (retention goes on locally).
// A follower's round re-reads the pointer although remote storage is off,
// so that the log start it answers consumers is the new one. Without
// RemoteLogDeleteOnDisable the remote log is kept.
func TestRemoteLogDeleteOnDisable(t *testing.T) {
	cfg := *localOnlyTail(20 << 10)
	e := newEnv(t, envOptions{cfg: &cfg})
	e.produce(300, 5, 40)
	e.run()
	localStart := e.log.LogStartOffset()
	st := e.p.Status()
	if st.RemoteSegments < 3 || localStart == 0 || localStart >= st.RemoteEndOffset {
		t.Fatalf("want segments in the bucket only and in both tiers: %+v, local start %d", st, localStart)
	}

	// A follower's view of the same partition (another Manager, as on
	// another broker), loaded before the deletion.
	m2, err := New(Options{Store: e.store, Committer: e.com, Leadership: follower{}, CacheDir: filepath.Join(e.dir, "cache2"),
		Interval: -1, Now: e.clock.Now, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	fp, err := m2.AddPartition(PartitionOptions{TopicPartition: testTP, Log: e.log, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fp.EarliestOffset(context.Background()); err != nil || got != 0 {
		t.Fatalf("follower's earliest before: %d %v", got, err)
	}

	// Remote storage off, the remote log kept.
	off := cfg
	off.RemoteStorageEnable = false
	e.p.SetConfig(off)
	e.run()
	if got := e.p.Status(); got.RemoteSegments != st.RemoteSegments {
		t.Fatalf("remote log changed without remote.log.delete.on.disable: %+v", got)
	}

	off.RemoteLogDeleteOnDisable = true
	e.p.SetConfig(off)
	fp.SetConfig(off)
	commits := e.com.commits
	e.run()
	if e.com.commits != commits+1 {
		t.Fatalf("%d commits for the deletion, want 1", e.com.commits-commits)
	}
	ptr, _ := e.com.RemoteLog(context.Background(), testTP)
	if ptr.StartOffset != localStart || ptr.EndOffset != localStart {
		t.Fatalf("pointer after the deletion [%d, %d), want the empty range at the local start %d", ptr.StartOffset, ptr.EndOffset, localStart)
	}
	for _, k := range e.objects() {
		if !strings.HasSuffix(k, SuffixManifest) {
			t.Fatalf("object %s left after the deletion (objects %v)", k, e.objects())
		}
	}
	if got, err := e.p.EarliestOffset(context.Background()); err != nil || got != localStart {
		t.Fatalf("earliest after the deletion %d %v, want %d", got, err, localStart)
	}
	if got, err := e.p.RemoteLogEnd(context.Background()); err != nil || got != -1 {
		t.Fatalf("remote end after the deletion %d %v, want -1", got, err)
	}
	if n := e.m.Metrics().SegmentsDeletedOnDisable; n != int64(st.RemoteSegments) {
		t.Fatalf("%d segments counted as deleted, want %d", n, st.RemoteSegments)
	}
	got, err := e.readAll(localStart, e.log.HighWatermark(), 1<<20)
	if err != nil || !bytes.Equal(got, e.stampedFrom(localStart)) {
		t.Fatalf("local read after the deletion: %v", err)
	}

	// The follower's round brings its view up to date.
	if err := fp.RunOnce(context.Background()); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("follower round: %v", err)
	}
	if got, err := fp.EarliestOffset(context.Background()); err != nil || got != localStart {
		t.Fatalf("follower's earliest after the deletion %d %v, want %d", got, err, localStart)
	}

	// Nothing more to commit, also when total retention (local only now)
	// moves the log start.
	off.RetentionBytes = 20 << 10
	e.p.SetConfig(off)
	e.produce(100, 5, 40)
	e.clock.Advance(time.Minute)
	commits = e.com.commits
	e.run()
	e.run()
	if e.log.LogStartOffset() <= localStart {
		t.Fatalf("retention.bytes did not move the log start (%d)", e.log.LogStartOffset())
	}
	if got, err := e.p.EarliestOffset(context.Background()); err != nil || got != e.log.LogStartOffset() {
		t.Fatalf("earliest %d %v after retention, the local start %d", got, err, e.log.LogStartOffset())
	}
	if e.com.commits != commits {
		t.Fatalf("%d commits after the deletion", e.com.commits-commits)
	}
}
