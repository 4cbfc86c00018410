package compaction

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sediment-io/sediment/tiering"
)

// hookedRemote is the partition's remote log with a failpoint before each
// group's upload of a pass: hook(n) runs before the n-th (from 0).
type hookedRemote struct {
	*tiering.Partition
	n    int
	hook func(n int)
}

func (h *hookedRemote) NewSegmentUpload(ctx context.Context, epoch int32) *tiering.SegmentUpload {
	h.hook(h.n)
	h.n++
	return h.Partition.NewSegmentUpload(ctx, epoch)
}

// TestCleanRemoteOrphanCleanerDuringPass: a tiered compaction pass that
// takes longer than the orphan grace (the fake clock jumps past it between
// two groups' uploads) while the leader's orphan cleaner runs in the middle
// of it and again right before the commit. The cleaner must keep the pass's
// uploads (not yet in the manifest, older than the grace), so that the commit
// references only objects that exist: every segment of the committed manifest
// is in the bucket and the remote log reads back whole. Then the variants
// where the cleaner could not have known: the leader changed during the pass
// (another leader's cleaner knows nothing of these uploads), and an upload
// deleted behind the pass's back; both commits are refused (ErrConflict),
// the manifest unchanged.
func TestCleanRemoteOrphanCleanerDuringPass(t *testing.T) {
	const segBytes = 4096
	ctx := context.Background()
	setup := func(t *testing.T) (*remoteEnv, *Cleaner, *hookedRemote, RemoteTarget) {
		e := newRemoteEnv(t, segBytes) // OrphanGrace: 1 min
		rng := rand.New(rand.NewPCG(3, 4))
		writeKeyed(t, e.l, e.clk, rng, testCodecs[0], 60, 1500, 0)
		seal(t, e.l, e.clk, segBytes)
		e.upload(t)
		if m, err := e.tp.Manifest(ctx); err != nil || len(m.Segments) < 6 {
			t.Fatalf("manifest: %v, %v", m, err)
		}
		c := NewCleaner(CleanerConfig{DedupeBufferBytes: 1 << 20}, e.clk.now)
		t.Cleanup(func() { c.Close() })
		h := &hookedRemote{Partition: e.tp, hook: func(int) {}}
		target := RemoteTarget{Remote: h, Config: TopicConfig{Policy: Policy{Compact: true}, SegmentBytes: 2 * segBytes}}
		return e, c, h, target
	}
	clean := func(t *testing.T, e *remoteEnv) int {
		t.Helper()
		n, err := e.tp.CleanOrphans(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// checkBucket: every object the committed manifest names is in the
	// bucket.
	checkBucket := func(t *testing.T, e *remoteEnv) {
		t.Helper()
		m, err := e.tp.Manifest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range m.Segments {
			for _, k := range s.Keys() {
				if _, err := e.tm.Store().Head(ctx, k); err != nil {
					t.Fatalf("the committed manifest names %s: %v", k, err)
				}
			}
		}
	}

	t.Run("same-leader", func(t *testing.T) {
		e, c, h, target := setup(t)
		remoteBefore, _ := e.view(t)
		want := latest(remoteBefore)
		objects := func() int {
			l, err := e.tm.Store().List(ctx, "", "")
			if err != nil {
				t.Fatal(err)
			}
			return len(l.Objects)
		}
		start, deletedMid := objects(), -1
		h.hook = func(int) {
			// Once a group is uploaded, the pass outlives the grace
			// and the cleaner runs.
			if deletedMid < 0 && objects() > start {
				e.clk.add(2 * time.Minute)
				deletedMid = clean(t, e)
			}
		}
		pl, err := c.PrepareRemote(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		if deletedMid < 0 || len(pl.Uploaded()) < 2 {
			t.Fatalf("%d groups, %d uploads, cleaner run: %v: want several uploads, the cleaner between them", h.n, len(pl.Uploaded()), deletedMid >= 0)
		}
		e.clk.add(2 * time.Minute)
		if n := clean(t, e); n != 0 || deletedMid != 0 {
			t.Fatalf("the orphan cleaner deleted %d objects during the pass and %d before its commit; nothing is an orphan", deletedMid, n)
		}
		for _, s := range pl.Uploaded() {
			if _, err := e.tm.Store().Head(ctx, s.Stem+tiering.SuffixLog); err != nil {
				t.Fatalf("upload %s of the pass in progress: %v", s.Stem, err)
			}
		}
		if err := pl.Commit(ctx, tiering.Fence{Token: 1}); err != nil {
			t.Fatal(err)
		}
		checkBucket(t, e)
		remote, _ := e.view(t) // fails on a missing object
		got := latest(remote)
		for k, w := range want {
			if g := got[k]; g.offset != w.offset || string(g.value) != string(w.value) {
				t.Fatalf("key %s: %+v, want %+v", k, g, w)
			}
		}
		// Committed, the uploads are the manifest's: later cleaner runs,
		// past the grace of the replaced segments too, delete nothing the
		// manifest names.
		for range 2 {
			e.clk.add(2 * time.Minute)
			e.upload(t) // a round: retired entries past the grace leave
			clean(t, e)
		}
		checkBucket(t, e)
		e.view(t)
	})

	t.Run("leader-changed", func(t *testing.T) {
		e, c, h, target := setup(t)
		h.hook = func(n int) {
			if n == 2 { // another leader for a while, then this broker again
				e.md.mu.Lock()
				e.md.epoch += 2
				e.md.mu.Unlock()
			}
		}
		before, _ := e.md.RemoteLog(ctx, tiering.TopicPartition{})
		pl, err := c.PrepareRemote(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		up := pl.Uploaded()
		if err := pl.Commit(ctx, tiering.Fence{Token: 1}); !errors.Is(err, tiering.ErrConflict) {
			t.Fatalf("commit of a pass across a leader change: %v, want ErrConflict", err)
		}
		if after, _ := e.md.RemoteLog(ctx, tiering.TopicPartition{}); after != before {
			t.Fatal("a refused commit moved the pointer")
		}
		for _, s := range up {
			if _, err := e.tm.Store().Head(ctx, s.Stem+tiering.SuffixLog); err == nil {
				t.Fatalf("refused upload %s still in the bucket", s.Stem)
			}
		}
		checkBucket(t, e)
		e.view(t)
	})

	t.Run("upload-gone", func(t *testing.T) {
		e, c, _, target := setup(t)
		before, _ := e.md.RemoteLog(ctx, tiering.TopicPartition{})
		pl, err := c.PrepareRemote(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		up := pl.Uploaded()
		if len(up) == 0 {
			t.Fatal("nothing uploaded")
		}
		if err := e.tm.Store().Delete(ctx, up[0].Stem+tiering.SuffixIndex); err != nil {
			t.Fatal(err)
		}
		if err := pl.Commit(ctx, tiering.Fence{Token: 1}); !errors.Is(err, tiering.ErrConflict) {
			t.Fatalf("commit naming a deleted object: %v, want ErrConflict", err)
		}
		if after, _ := e.md.RemoteLog(ctx, tiering.TopicPartition{}); after != before {
			t.Fatal("a refused commit moved the pointer")
		}
		checkBucket(t, e)
		e.view(t)
	})
}
