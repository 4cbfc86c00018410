package hotlog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
)

// crashRecorder takes a crash clone of mem before every file-system operation
// while it is on, so a test can reopen the log as it would be found after a
// power loss at each of those points.
type crashRecorder struct {
	mem    *vfs.MemFS
	rng    *rand.Rand
	on     atomic.Bool
	mu     sync.Mutex
	clones []crashPoint
	// acked is read before each clone: what the test knows to be durable.
	acked func() int64
}

type crashPoint struct {
	fs    *vfs.MemFS
	acked int64
	what  string
}

func (c *crashRecorder) MaybeError(op errorfs.Op, path string) error {
	if !c.on.Load() {
		return nil
	}
	c.take(op.String() + " " + path)
	return nil
}

func (c *crashRecorder) take(what string) {
	var acked int64
	if c.acked != nil {
		acked = c.acked()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	opts := vfs.CrashOptions{}
	if c.rng.IntN(2) == 0 {
		opts.Rand = c.rng // keep a torn part of unsynced tails
	}
	c.clones = append(c.clones, crashPoint{fs: c.mem.CrashCloneWith(opts), acked: acked, what: what})
}

func randomBatch(rng *rand.Rand, ts int64) []byte {
	n := 1 + rng.IntN(5)
	recs := make([]testRecord, n)
	for i := range recs {
		v := make([]byte, rng.IntN(300))
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		recs[i] = testRecord{value: v, tsDelta: int64(rng.IntN(10))}
	}
	return makeBatch(ts, 0, recs...)
}

// TestCrashAppends crashes at every file-system operation of a sequence of
// appends, rolls, snapshots and a close, and checks that each crashed state
// reopens to a valid prefix that holds every acknowledged append.
func TestCrashAppends(t *testing.T) {
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 99))
		mem := vfs.NewMem()
		rec := &crashRecorder{mem: mem, rng: rng}
		var ackedBytes atomic.Int64
		rec.acked = ackedBytes.Load
		fs := errorfs.Wrap(mem, rec)
		cfg := Config{SegmentBytes: 3000, IndexIntervalBytes: 256}
		l := openMem(t, fs, cfg)
		rec.on.Store(true)
		var all []byte
		for i := range 40 {
			b := randomBatch(rng, int64(i*100))
			if _, err := l.Append(b, AppendOptions{LeaderEpoch: int32(i / 15)}); err != nil {
				t.Fatal(err)
			}
			all = append(all, b...)
			ackedBytes.Store(int64(len(all)))
			if i%13 == 0 {
				l.WriteProducerSnapshot(l.LogEndOffset(), []byte{byte(i)})
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		rec.on.Store(false)
		rec.take("after close")
		for i, cp := range rec.clones {
			l := openMem(t, cp.fs, cfg)
			got := readAll(t, l)
			if !bytes.HasPrefix(all, got) {
				t.Fatalf("seed %d crash %d (%s): recovered log is not a prefix", seed, i, cp.what)
			}
			if int64(len(got)) < cp.acked {
				t.Fatalf("seed %d crash %d (%s): %d bytes recovered, %d acknowledged", seed, i, cp.what, len(got), cp.acked)
			}
			// The recovered log takes appends again.
			if _, err := l.Append(simpleBatch(1, 1, 1), AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			readAll(t, l)
			l.Close()
		}
		t.Logf("seed %d: %d crash points", seed, len(rec.clones))
	}
}

// TestCrashConcurrentGroupCommit crashes while many goroutines append with
// group commit, and checks every append acknowledged before the crash survives.
func TestCrashConcurrentGroupCommit(t *testing.T) {
	mem := vfs.NewMem()
	rng := rand.New(rand.NewPCG(7, 7))
	cfg := Config{SegmentBytes: 16 << 10, IndexIntervalBytes: 1024}
	l := openMem(t, mem, cfg)
	var ackedEnd atomic.Int64 // max acknowledged last offset + 1
	var mu sync.Mutex
	byOffset := map[int64][]byte{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				b := simpleBatch(1+i%4, 20+w*10, int64(i))
				res, err := l.Append(b, AppendOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				byOffset[res.FirstOffset] = b
				mu.Unlock()
				for {
					cur := ackedEnd.Load()
					if res.LastOffset+1 <= cur || ackedEnd.CompareAndSwap(cur, res.LastOffset+1) {
						break
					}
				}
			}
		}()
	}
	var clones []crashPoint
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		default:
		}
		acked := ackedEnd.Load()
		opts := vfs.CrashOptions{}
		if rng.IntN(2) == 0 {
			opts.Rand = rng
		}
		clones = append(clones, crashPoint{fs: mem.CrashCloneWith(opts), acked: acked})
	}
	var all []byte
	for off := int64(0); off < l.LogEndOffset(); {
		b := byOffset[off]
		h, _ := ParseBatchHeader(b)
		all = append(all, b...)
		off = h.LastOffset() + 1
	}
	l.Close()
	if len(clones) > 60 {
		// Check a spread of them: each reopen costs a scan.
		step := len(clones) / 60
		var picked []crashPoint
		for i := 0; i < len(clones); i += step {
			picked = append(picked, clones[i])
		}
		clones = picked
	}
	for i, cp := range clones {
		l := openMem(t, cp.fs, cfg)
		got := readAll(t, l)
		if !bytes.HasPrefix(all, got) {
			t.Fatalf("crash %d: not a prefix", i)
		}
		if l.LogEndOffset() < cp.acked {
			t.Fatalf("crash %d: log end %d, acknowledged %d", i, l.LogEndOffset(), cp.acked)
		}
		l.Close()
	}
}

// TestCrashTruncateAndDelete crashes at every operation of TruncateTo and
// DeleteBefore: each crashed state is the state before or after (for a
// truncation, anything between the cut and the old end, as a prefix).
func TestCrashTruncateAndDelete(t *testing.T) {
	cfg := Config{SegmentBytes: 2000, IndexIntervalBytes: 200}
	build := func() (*vfs.MemFS, []byte) {
		mem := vfs.NewMem()
		l := openMem(t, mem, cfg)
		rng := rand.New(rand.NewPCG(3, 4))
		var all []byte
		for i := range 50 {
			b := randomBatch(rng, int64(i))
			l.Append(b, AppendOptions{LeaderEpoch: int32(i / 10)})
			all = append(all, b...)
		}
		l.Close()
		return mem, all
	}
	for _, clean := range []bool{true, false} {
		mem, all := build()
		rec := &crashRecorder{mem: mem, rng: rand.New(rand.NewPCG(1, 1))}
		l := openMem(t, errorfs.Wrap(mem, rec), cfg)
		if !clean {
			l.Append(simpleBatch(1, 10, 1), AppendOptions{})
			all = readAll(t, l)
		}
		hdrs, _ := ValidateBatches(all)
		cutBatch := 17
		cutOffset := hdrs[cutBatch].BaseOffset + int64(hdrs[cutBatch].LastOffsetDelta)/2
		var keep int64
		for _, h := range hdrs[:cutBatch] {
			keep += h.Size()
		}
		rec.on.Store(true)
		if err := l.TruncateTo(cutOffset); err != nil {
			t.Fatal(err)
		}
		tail := simpleBatch(2, 10, 5)
		l.Append(tail, AppendOptions{LeaderEpoch: 9})
		rec.on.Store(false)
		after := append(append([]byte(nil), all[:keep]...), tail...)
		if got := readAll(t, l); !bytes.Equal(got, after) {
			t.Fatal("truncate result")
		}
		for i, cp := range rec.clones {
			l2 := openMem(t, cp.fs, cfg)
			got := readAll(t, l2)
			ok := (bytes.HasPrefix(all, got) && int64(len(got)) >= keep) || bytes.HasPrefix(after, got) && int64(len(got)) >= keep
			if !ok {
				t.Fatalf("truncate crash %d (%s): %d bytes, neither before nor after", i, cp.what, len(got))
			}
			l2.Close()
		}

		// DeleteBefore: the log start moves, the end never.
		rec.clones = nil
		end := l.LogEndOffset()
		full := readAll(t, l)
		now, _ := ValidateBatches(full)
		start := now[10].BaseOffset + 1
		rec.on.Store(true)
		if err := l.DeleteBefore(start); err != nil {
			t.Fatal(err)
		}
		rec.on.Store(false)
		l.Close()
		for i, cp := range rec.clones {
			l2 := openMem(t, cp.fs, cfg)
			got := readAll(t, l2)
			if l2.LogEndOffset() != end || !bytes.HasSuffix(full, got) {
				t.Fatalf("delete crash %d (%s): end %d, %d bytes", i, cp.what, l2.LogEndOffset(), len(got))
			}
			if s := l2.LogStartOffset(); s != 0 && s != start {
				t.Fatalf("delete crash %d (%s): start %d", i, cp.what, s)
			}
			l2.Close()
		}
	}
}

// TestInjectedErrors fails one file-system operation at a time during a run of
// appends (with rolls), and checks that the error reaches the caller, that the
// log never holds a failed append, and that a reopened log holds exactly the
// appends that succeeded (plus, if an fsync failed, possibly the append whose
// fsync failed).
func TestInjectedErrors(t *testing.T) {
	cfg := Config{SegmentBytes: 2500, IndexIntervalBytes: 300}
	ops := []errorfs.Op{errorfs.OpFileWrite, errorfs.OpFileSync, errorfs.OpFileTruncate, errorfs.OpCreate, errorfs.OpOpen, errorfs.OpRename, errorfs.OpOpenDir, errorfs.OpRemove}
	for _, op := range ops {
		for n := int64(0); n < 40; n += 1 + n/8 {
			mem := vfs.NewMem()
			inj := &errorfs.Toggle{Injector: errorfs.OnIndex(n, op)}
			efs := errorfs.Wrap(mem, inj)
			efs.PartialWrites = true
			l := openMem(t, efs, cfg)
			inj.On()
			rng := rand.New(rand.NewPCG(uint64(n), uint64(op)))
			var ok, maybe []byte
			failed := false
			errs := 0
			for i := range 30 {
				b := randomBatch(rng, int64(i))
				_, err := l.Append(b, AppendOptions{LeaderEpoch: int32(i / 10)})
				switch {
				case err == nil:
					if failed {
						t.Fatalf("%s #%d: append succeeded on a failed log", op, n)
					}
					ok = append(ok, b...)
				case errors.Is(err, ErrLogFailed):
					if !failed && maybe == nil {
						maybe = b
					}
					failed = true
					errs++
				default:
					if !errors.Is(err, errorfs.ErrInjected) {
						t.Fatalf("%s #%d: unexpected error %v", op, n, err)
					}
					errs++
				}
			}
			fired := inj.Injector.(*errorfs.Index).Fired()
			if fired > 0 && errs == 0 && op != errorfs.OpRemove {
				// Every injected failure on the append path must surface
				// (removes of stale files are best effort).
				if op == errorfs.OpFileWrite || op == errorfs.OpFileSync {
					t.Fatalf("%s #%d: injected failure did not surface", op, n)
				}
			}
			if !failed {
				if got := readAll(t, l); !bytes.Equal(got, ok) {
					t.Fatalf("%s #%d: live log holds a failed append", op, n)
				}
			}
			inj.Off()
			l.Close()
			for _, fs := range []vfs.FS{mem, mem.CrashClone()} {
				l2 := openMem(t, fs, cfg)
				got := readAll(t, l2)
				if !bytes.Equal(got, ok) && !bytes.Equal(got, append(append([]byte(nil), ok...), maybe...)) {
					t.Fatalf("%s #%d: reopened log (%d bytes) is not the successful appends (%d bytes)", op, n, len(got), len(ok))
				}
				l2.Close()
			}
		}
	}
}

func TestTruncateFullyAndStartAt(t *testing.T) {
	cfg := Config{SegmentBytes: 1000}
	mem, rec, l, all := twentyBatchLog(t, cfg, 5)
	l.WriteProducerSnapshot(10, []byte("x"))
	rec.on.Store(true)
	if err := l.TruncateFullyAndStartAt(1000); err != nil {
		t.Fatal(err)
	}
	rec.on.Store(false)
	if l.LogStartOffset() != 1000 || l.LogEndOffset() != 1000 || len(l.Segments()) != 1 || l.LatestEpoch() != -1 {
		t.Fatalf("after reset: %d %d %+v", l.LogStartOffset(), l.LogEndOffset(), l.Segments())
	}
	if off, _, _ := l.LatestProducerSnapshot(); off != -1 {
		t.Fatal("snapshot kept")
	}
	res, err := l.Append(simpleBatch(1, 1, 1), AppendOptions{LeaderEpoch: 3})
	if err != nil || res.FirstOffset != 1000 {
		t.Fatalf("%+v %v", res, err)
	}
	l.Close()
	l = openMem(t, mem, cfg)
	if l.LogStartOffset() != 1000 || l.LogEndOffset() != 1001 {
		t.Fatalf("reopen: %d %d", l.LogStartOffset(), l.LogEndOffset())
	}
	l.Close()
	for i, cp := range rec.clones {
		l := openMem(t, cp.fs, cfg)
		got := readAll(t, l)
		if !(bytes.HasPrefix(all, got) && l.LogStartOffset() == 0) && !(len(got) == 0 && l.LogEndOffset() == 1000) {
			t.Fatalf("crash %d (%s): start %d end %d", i, cp.what, l.LogStartOffset(), l.LogEndOffset())
		}
		l.Close()
	}
}

// TestInjectedErrorsInTruncateAndDelete fails one operation of TruncateTo or
// DeleteBefore at a time: the error reaches the caller, and the log (live if it
// did not fail, and reopened) is the state before or after the operation.
func TestInjectedErrorsInTruncateAndDelete(t *testing.T) {
	cfg := Config{SegmentBytes: 1500, IndexIntervalBytes: 200}
	ops := []errorfs.Op{errorfs.OpFileWrite, errorfs.OpFileSync, errorfs.OpFileTruncate, errorfs.OpCreate, errorfs.OpOpen, errorfs.OpRename, errorfs.OpOpenDir}
	for _, truncate := range []bool{true, false} {
		for _, op := range ops {
			for n := int64(0); n < 12; n++ {
				mem := vfs.NewMem()
				inj := &errorfs.Toggle{Injector: errorfs.OnIndex(n, op)}
				l := openMem(t, errorfs.Wrap(mem, inj), cfg)
				rng := rand.New(rand.NewPCG(uint64(n), 3))
				for i := range 30 {
					l.Append(randomBatch(rng, int64(i)), AppendOptions{LeaderEpoch: int32(i / 10)})
				}
				before := readAll(t, l)
				hdrs, _ := ValidateBatches(before)
				var after []byte
				var cut int64
				inj.On()
				var err error
				if truncate {
					cut = hdrs[12].BaseOffset
					for _, h := range hdrs[:12] {
						after = append(after, before[:h.Size()]...)
						before = before[h.Size():]
					}
					before = append(append([]byte(nil), after...), before...)
					err = l.TruncateTo(cut)
				} else {
					cut = hdrs[20].BaseOffset
					var skip int64
					for _, h := range hdrs[:20] {
						skip += h.Size()
					}
					after = before[skip:]
					err = l.DeleteBefore(cut)
				}
				inj.Off()
				fired := inj.Injector.(*errorfs.Index).Fired() > 0
				// TruncateTo reports every failure. DeleteBefore commits when
				// its checkpoint is written; failures after that (renames of
				// dropped segments) are finished by the next Open instead. A
				// failed open of an index file is answered by rebuilding it.
				if fired && err == nil && truncate && op != errorfs.OpOpen {
					t.Fatalf("%s #%d: injected failure in TruncateTo did not surface", op, n)
				}
				ok := func(got []byte, _ int64) bool {
					if bytes.Equal(got, before) || bytes.Equal(got, after) {
						return true
					}
					if truncate { // a prefix between the two
						return bytes.HasPrefix(before, got) && len(got) >= len(after)
					}
					return false
				}
				if l.failure() == nil {
					if got := readAll(t, l); !ok(got, l.LogStartOffset()) {
						t.Fatalf("%s #%d truncate=%v: live log is neither before nor after (err %v)", op, n, truncate, err)
					}
				}
				l.Close()
				for _, fs := range []vfs.FS{mem, mem.CrashClone()} {
					l2 := openMem(t, fs, cfg)
					if got := readAll(t, l2); !ok(got, l2.LogStartOffset()) {
						t.Fatalf("%s #%d truncate=%v: reopened log is neither before nor after (err %v)", op, n, truncate, err)
					}
					l2.Close()
				}
			}
		}
	}
}

// A DeleteBefore inside the unsynced tail (FlushOS, DeleteRecords) checkpoints
// a log start past what a crash leaves. Open must restart the log at the
// checkpoint: were it to clamp the start to the recovered end in memory only,
// offsets below the checkpoint would be handed out again and the next open
// would hide them.
func TestLogStartCheckpointPastRecoveredEnd(t *testing.T) {
	mem := vfs.NewMem()
	cfg := Config{Flush: FlushOS}
	l := openMem(t, mem, cfg)
	for i := range 5 {
		if _, err := l.Append(simpleBatch(1, 10, int64(i)), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil { // offsets 0..4 durable
		t.Fatal(err)
	}
	for i := 5; i < 10; i++ {
		if _, err := l.Append(simpleBatch(1, 10, int64(i)), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.DeleteBefore(8); err != nil { // DeleteRecords(8), below the HW
		t.Fatal(err)
	}
	crashed := mem.CrashClone() // power loss: 5..9 were never fsynced
	l.Close()

	l = openMem(t, crashed, cfg)
	t.Logf("after crash: start %d end %d", l.LogStartOffset(), l.LogEndOffset())
	// New records, acknowledged and made durable by Sync and a clean Close.
	var firstNew int64 = -1
	for i := range 5 {
		res, err := l.Append(simpleBatch(1, 10, int64(100+i)), AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if firstNew < 0 {
			firstNew = res.FirstOffset
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openMem(t, crashed, cfg)
	defer l.Close()
	t.Logf("after clean restart: start %d end %d (first new record at %d)", l.LogStartOffset(), l.LogEndOffset(), firstNew)
	if l.LogStartOffset() > firstNew {
		t.Fatalf("acknowledged records [%d, %d) vanished below the log start after a clean restart", firstNew, l.LogStartOffset())
	}
	if firstNew < 8 {
		t.Errorf("offsets %d..7 below the log start checkpoint (8) were handed out again", firstNew)
	}
}

// After a process crash (the page cache survives, the machine does not
// reboot) Open finds unsynced batches intact and keeps them. It must fsync
// them before reporting them durable (DurableEnd = log end; the broker's
// resetDurableEnd uses the log end too): a power loss afterwards would lose
// records past the high watermark (a single replica sets HW = log end at
// open) whose acks=all retry was answered as a duplicate.
func TestUncleanOpenSyncsRecoveredTail(t *testing.T) {
	mem := vfs.NewMem()
	l1 := openMem(t, mem, Config{Flush: FlushOS})
	for i := range 5 {
		if _, err := l1.Append(simpleBatch(1, 10, int64(i)), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The process dies here (l1 is never closed; nothing was fsynced).
	l2 := openMem(t, mem, Config{}) // FlushEveryCommit
	durable := l2.DurableEnd()
	t.Logf("reopened after the process crash: end %d, DurableEnd %d", l2.LogEndOffset(), durable)
	power := mem.CrashClone() // then the machine loses power
	l3 := openMem(t, power, Config{})
	defer l3.Close()
	if l3.LogEndOffset() < durable {
		t.Fatalf("DurableEnd was %d after reopening, but a power loss leaves the log ending at %d", durable, l3.LogEndOffset())
	}
}

// DeleteBefore checkpoints the log start, then renames segments, then
// rewrites the leader-epoch checkpoint. A crash between leaves epoch entries
// below the log start; Open truncates the cache from the log start as Kafka's
// LogLoader does on every load.
func TestOpenTruncatesEpochsFromStart(t *testing.T) {
	mem := vfs.NewMem()
	rec := &crashRecorder{mem: mem, rng: rand.New(rand.NewPCG(1, 2))}
	cfg := Config{SegmentBytes: 500}
	l := openMem(t, errorfs.Wrap(mem, rec), cfg)
	for i := range 20 {
		if _, err := l.Append(simpleBatch(1, 100, int64(i)), AppendOptions{LeaderEpoch: int32(1 + i/10)}); err != nil {
			t.Fatal(err)
		}
	}
	// epochs {1:0, 2:10}
	rec.on.Store(true)
	if err := l.DeleteBefore(15); err != nil {
		t.Fatal(err)
	}
	rec.on.Store(false)
	l.Close()
	for i, cp := range rec.clones {
		l := openMem(t, cp.fs, cfg)
		start := l.LogStartOffset()
		eps := *l.epochs.Load()
		if start == 15 && len(eps) > 0 && eps[0].Start < start {
			e, off, _ := l.EndOffsetForEpoch(1)
			l.Close()
			t.Fatalf("crash %d (%s): log start %d but epochs %v (EndOffsetForEpoch(1) = %d, %d; Kafka: 1, 15)", i, cp.what, start, eps, e, off)
		}
		l.Close()
	}
}

// TestCrashIndexRebuildKeepsMaxTimestamp crashes at every file-system
// operation of a sealed segment's index rebuild (its files were lost), keeping
// torn parts of unsynced writes: the rewritten files must be found whole or
// not at all, never as a prefix that checks out (a time index without its
// final entry understates the segment's max timestamp, so time retention
// would delete it early).
func TestCrashIndexRebuildKeepsMaxTimestamp(t *testing.T) {
	mem := vfs.NewMem()
	// An entry per batch, timestamps rising: a prefix of the time index
	// checks out but understates the max timestamp.
	cfg := Config{SegmentBytes: 4000, IndexIntervalBytes: 1}
	l := openMem(t, mem, cfg)
	var want int64 = -1
	for i := 0; len(l.Segments()) == 1; i++ {
		want = int64(1000 + i)
		if _, err := l.Append(simpleBatch(1, 100, want), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want-- // the last append went to the new segment
	segs := l.Segments()
	l.Close()
	if segs[0].MaxTimestamp != want {
		t.Fatalf("sealed segment's max timestamp %d, want %d", segs[0].MaxTimestamp, want)
	}
	// Damage both index files (empty, durably): the next reader rebuilds
	// them and rewrites them.
	for _, name := range []string{segs[0].IndexFile, segs[0].TimeIndexFile} {
		f, err := mem.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := vfs.SyncDir(mem, filepath.Dir(segs[0].IndexFile)); err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(64) {
		rec := &crashRecorder{mem: mem.CrashClone(), rng: rand.New(rand.NewPCG(seed, 4))}
		l := openMem(t, errorfs.Wrap(rec.mem, rec), cfg)
		rec.on.Store(true)
		l.Segments() // rebuilds and rewrites the index files
		rec.on.Store(false)
		l.Close()
		if len(rec.clones) == 0 {
			t.Fatal("no crash point recorded during the rebuild")
		}
		for _, cp := range rec.clones {
			l := openMem(t, cp.fs, cfg)
			got := l.Segments()[0].MaxTimestamp
			l.Close()
			if got != want {
				t.Fatalf("crash at %s: sealed segment's max timestamp %d, want %d", cp.what, got, want)
			}
		}
	}
}

// TestStartAt: a log restarted at the end of another copy (the bucket's)
// with that copy's producer snapshot and last leader epoch holds them, and
// a crash at any step of the restart leaves a prefix of the old log or the
// empty log at the new start with the new snapshot and epoch, never the
// empty log without them.
func TestStartAt(t *testing.T) {
	cfg := Config{SegmentBytes: 1000}
	mem, rec, l, all := twentyBatchLog(t, cfg, 6)
	l.WriteProducerSnapshot(10, []byte("old"))
	rec.on.Store(true)
	if err := l.StartAt(1000, 7, []byte("state at 1000")); err != nil {
		t.Fatal(err)
	}
	rec.on.Store(false)
	// A reopened empty log drops an epoch entry at its end (as Kafka's
	// LeaderEpochFileCache.truncateFromEnd on load): the first append
	// brings its own.
	check := func(what string, l *Log, epoch int32) {
		t.Helper()
		if l.LogStartOffset() != 1000 || l.LogEndOffset() != 1000 || l.LatestEpoch() != epoch {
			t.Fatalf("%s: log [%d, %d) epoch %d, want [1000, 1000) epoch %d", what, l.LogStartOffset(), l.LogEndOffset(), l.LatestEpoch(), epoch)
		}
		if off, data, err := l.LatestProducerSnapshot(); off != 1000 || string(data) != "state at 1000" || err != nil {
			t.Fatalf("%s: snapshot at %d %q %v", what, off, data, err)
		}
	}
	check("after", l, 7)
	if e, end, _ := l.EndOffsetForEpoch(7); e != 7 || end != 1000 {
		t.Fatalf("epoch 7 ends at %d (%d)", end, e)
	}
	l.Close()
	l = openMem(t, mem, cfg)
	check("reopened", l, -1)
	res, err := l.Append(simpleBatch(1, 1, 1), AppendOptions{LeaderEpoch: 8})
	if err != nil || res.FirstOffset != 1000 || l.LatestEpoch() != 8 {
		t.Fatalf("append after: %+v %v, epoch %d", res, err, l.LatestEpoch())
	}
	l.Close()
	if len(rec.clones) == 0 {
		t.Fatal("no crash points")
	}
	for i, cp := range rec.clones {
		l := openMem(t, cp.fs, cfg)
		got := readAll(t, l)
		if len(got) == 0 && l.LogEndOffset() == 1000 {
			check(fmt.Sprintf("crash %d (%s)", i, cp.what), l, -1)
		} else if !bytes.HasPrefix(all, got) || l.LogStartOffset() != 0 {
			t.Fatalf("crash %d (%s): start %d end %d", i, cp.what, l.LogStartOffset(), l.LogEndOffset())
		}
		l.Close()
	}
}

// twentyBatchLog opens a log on a MemFS recorded for crash points (off
// until the test turns rec.on) and appends 20 batches of two records at
// leader epoch 2; all is their bytes.
func twentyBatchLog(t *testing.T, cfg Config, seed uint64) (*vfs.MemFS, *crashRecorder, *Log, []byte) {
	t.Helper()
	mem := vfs.NewMem()
	rec := &crashRecorder{mem: mem, rng: rand.New(rand.NewPCG(seed, seed))}
	l := openMem(t, errorfs.Wrap(mem, rec), cfg)
	var all []byte
	for i := range 20 {
		b := simpleBatch(2, 100, int64(i))
		l.Append(b, AppendOptions{LeaderEpoch: 2})
		all = append(all, b...)
	}
	return mem, rec, l, all
}
