package tiering

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sediment-io/sediment/hotlog"
)

func TestLineageEnd(t *testing.T) {
	type le [2]int64 // epoch, start offset
	type es = EpochStart
	for _, tc := range []struct {
		name      string
		remote    []es
		remoteEnd int64
		localRaw  []le
		localEnd  int64
		want      int64
	}{
		{"same history", []es{{1, 0}, {2, 100}}, 150, []le{{1, 0}, {2, 100}, {3, 200}}, 300, 150},
		{"same history, local ahead in the same epoch", []es{{1, 0}, {2, 100}}, 150, []le{{1, 0}, {2, 100}}, 400, 150},
		{"no remote epochs", nil, 150, []le{{1, 0}}, 300, 150},
		{"local cache trimmed at its log start", []es{{1, 0}, {2, 100}, {3, 200}}, 250, []le{{3, 220}}, 400, 250},
		{"unclean: the new leader's epoch 2 ended first", []es{{1, 0}, {2, 100}}, 500, []le{{1, 0}, {2, 100}, {3, 300}}, 350, 300},
		{"unclean: the new leader never had epoch 3", []es{{1, 0}, {2, 100}, {3, 200}}, 500, []le{{1, 0}, {2, 100}, {4, 250}}, 400, 200},
		{"unclean: remote epoch newer than any local one", []es{{1, 0}, {5, 100}}, 300, []le{{1, 0}}, 250, 100},
		{"restored from an old copy: log ends below the bucket", []es{{1, 0}, {2, 100}}, 500, []le{{1, 0}, {2, 100}}, 350, 350},
		{"emptied log started again past everything", []es{{1, 0}}, 500, nil, 400, 0},
		{"an epoch compacted away in the bucket: below, never above", []es{{3, 100}}, 200, []le{{3, 100}, {4, 150}, {5, 200}}, 300, 150},
	} {
		var local []hotlog.LeaderEpoch
		for _, l := range tc.localRaw {
			local = append(local, hotlog.LeaderEpoch{Epoch: int32(l[0]), StartOffset: l[1]})
		}
		if got := lineageEnd(tc.remote, tc.remoteEnd, local, tc.localEnd); got != tc.want {
			t.Errorf("%s: lineageEnd = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestUncleanLeaderRemoteLineage: leader A (epoch 5) uploads its log; B, a
// replica that had only A's records up to D, is elected uncleanly (epoch
// 6) and appends its own from D. B's rounds cut the remote log back to D
// (rewriting the remote segment across D from the bucket when B's log no
// longer holds its start), upload B's records from there, and once local
// retention has deleted them every offset reads back B's history: A's
// records below D, B's from D, none of A's lost ones. Before, B uploaded
// from A's remote end on: its records between D and that end never went
// up, local retention deleted them, and reads returned A's.
func TestUncleanLeaderRemoteLineage(t *testing.T) {
	for _, rewrite := range []bool{false, true} {
		t.Run(fmt.Sprintf("rewrite=%v", rewrite), func(t *testing.T) {
			ctx := context.Background()
			a := newEnv(t, envOptions{})
			a.produce(200, 5, 40)
			a.run()
			mf, err := a.p.Manifest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(mf.Segments) < 3 {
				t.Fatalf("setup: %d remote segments", len(mf.Segments))
			}
			seg := mf.Segments[1]
			all, err := a.readAll(0, a.log.LogEndOffset(), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			hdrs, err := hotlog.ValidateBatches(batchesIn(t, all, seg.BaseOffset, seg.EndOffset))
			if err != nil || len(hdrs) < 4 {
				t.Fatalf("setup: %d batches in segment [%d, %d): %v", len(hdrs), seg.BaseOffset, seg.EndOffset, err)
			}
			d := hdrs[len(hdrs)/2].BaseOffset

			// B: A's batches below d, then its own in epoch 6.
			bl, err := hotlog.Open(hotlog.Options{Dir: filepath.Join(t.TempDir(), "b"), Config: hotlog.Config{SegmentBytes: 16 << 10, Flush: hotlog.FlushOS},
				Now: a.clock.Now, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer bl.Close()
			if _, err := bl.AppendReplicated(batchesIn(t, all, 0, d), hotlog.AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			for i := range 150 {
				if _, err := bl.Append(makeBatch(5, 40, a.clock.Now().UnixMilli(), uint64(1000+i)), hotlog.AppendOptions{LeaderEpoch: 6}); err != nil {
					t.Fatal(err)
				}
			}
			bl.SetHighWatermark(bl.LogEndOffset())
			if rewrite {
				// B's log no longer holds the part of the remote
				// segment across d that is its history.
				if err := bl.DeleteBefore(d); err != nil {
					t.Fatal(err)
				}
			}
			var want []byte
			want = append(want, batchesIn(t, all, 0, bl.LogStartOffset())...)
			own, err := bl.ReadBytes(bl.LogStartOffset(), 1<<30, bl.LogEndOffset())
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, own...)
			if bytes.Equal(want[:len(all)], all) {
				t.Fatal("setup: B's history is A's")
			}

			a.m.Close()
			a.com.setEpoch(testTP, 6)
			b := &env{t: t, dir: t.TempDir(), log: bl, store: a.store, com: a.com, clock: a.clock}
			cfg := DefaultTopicConfig()
			cfg.RetentionMs = -1
			b.open(envOptions{}, cfg)
			b.run()
			b.run()
			mb, err := b.p.Manifest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if mb.EndOffset <= d || mb.StartOffset != 0 {
				t.Fatalf("after B's rounds the remote log is [%d, %d); want it from 0 past %d", mb.StartOffset, mb.EndOffset, d)
			}
			rewritten := false
			for i, s := range mb.Segments {
				if i > 0 && s.BaseOffset != mb.Segments[i-1].EndOffset {
					t.Errorf("remote segments %d and %d: [%d, %d) then [%d, %d)", i-1, i, mb.Segments[i-1].BaseOffset, mb.Segments[i-1].EndOffset, s.BaseOffset, s.EndOffset)
				}
				if s.BaseOffset == seg.BaseOffset && s.EndOffset == d && s.Stem != seg.Stem {
					rewritten = true
				}
			}
			if rewrite && !rewritten {
				t.Errorf("no remote segment [%d, %d) rewritten from [%d, %d)", seg.BaseOffset, d, seg.BaseOffset, seg.EndOffset)
			}
			// Local retention deletes what went up.
			cfg.LocalRetentionBytes = 0
			b.p.SetConfig(cfg)
			b.run()
			if start := bl.LogStartOffset(); start <= d+1 {
				t.Fatalf("B's local log start %d after local retention: its records from %d never went up", start, d)
			}
			got, err := b.readAll(0, bl.LogEndOffset(), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				n := 0
				for n < min(len(got), len(want)) && got[n] == want[n] {
					n++
				}
				t.Fatalf("read back %d bytes, want %d; they differ from byte %d", len(got), len(want), n)
			}
		})
	}
}

// TestCleanLeaderChangeKeepsRemoteLog: a leader change that loses nothing
// (the new leader's log holds everything uploaded) cuts nothing back: the
// new leader's first round, which checks, keeps every remote segment.
func TestCleanLeaderChangeKeepsRemoteLog(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOptions{})
	e.produce(200, 5, 40)
	e.run()
	before, err := e.p.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.com.setEpoch(testTP, 6)
	e.produce(50, 5, 40)
	e.run()
	after, err := e.p.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Retired) != 0 || len(after.Segments) < len(before.Segments) || after.EndOffset < before.EndOffset {
		t.Fatalf("after a clean leader change: %d segments [%d, %d), %d retired; before %d [%d, %d)", len(after.Segments),
			after.StartOffset, after.EndOffset, len(after.Retired), len(before.Segments), before.StartOffset, before.EndOffset)
	}
	for i, s := range before.Segments {
		if after.Segments[i].Stem != s.Stem {
			t.Fatalf("segment %d replaced: %s, was %s", i, after.Segments[i].Stem, s.Stem)
		}
	}
}
