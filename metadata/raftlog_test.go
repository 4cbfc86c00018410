package metadata

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// crashFS is raft-wal's OS file system with a hook called before and after
// every change to a segment file (create, write, sync, delete). The hook copies
// the whole WAL directory (segments and the bolt meta store): a copy taken
// there is what a SIGKILL at that point leaves behind, since a killed process
// loses nothing it has written (the page cache keeps it), only what it had not
// written yet.
type crashFS struct {
	types.VFS
	hook func(what string)
	// torn, called before each write of 16 bytes or more, copies the
	// directory with the first half of that write applied to file name: a
	// SIGKILL can stop a write between pages.
	torn func(what, name string, off int64, half []byte)
}

func (c *crashFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	c.hook("create " + name)
	f, err := c.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	c.hook("created " + name)
	return &crashFile{WritableFile: f, fs: c, name: name}, nil
}

func (c *crashFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := c.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return &crashFile{WritableFile: f, fs: c, name: name}, nil
}

func (c *crashFS) Delete(dir, name string) error {
	c.hook("delete " + name)
	err := c.VFS.Delete(dir, name)
	c.hook("deleted " + name)
	return err
}

type crashFile struct {
	types.WritableFile
	fs   *crashFS
	name string
}

func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.hook(fmt.Sprintf("write %s@%d+%d", f.name, off, len(p)))
	if len(p) >= 16 {
		f.fs.torn(fmt.Sprintf("torn write %s@%d+%d/%d", f.name, off, len(p)/2, len(p)), f.name, off, p[:len(p)/2])
	}
	n, err := f.WritableFile.WriteAt(p, off)
	f.fs.hook(fmt.Sprintf("wrote %s@%d+%d", f.name, off, len(p)))
	return n, err
}

func (f *crashFile) Sync() error {
	err := f.WritableFile.Sync()
	f.fs.hook("synced " + f.name)
	return err
}

// walModel is what the log holds after each completed operation.
type walModel struct {
	first, last uint64
	entries     map[uint64]raft.Log
}

func (m walModel) clone() walModel {
	c := walModel{first: m.first, last: m.last, entries: make(map[uint64]raft.Log, len(m.entries))}
	for k, v := range m.entries {
		c.entries[k] = v
	}
	return c
}

// matches reports whether the store holds exactly the model's entries.
func (m walModel) matches(s raft.LogStore) error {
	first, err := s.FirstIndex()
	if err != nil {
		return err
	}
	last, err := s.LastIndex()
	if err != nil {
		return err
	}
	if last != m.last || (m.last > 0 && first != m.first) {
		return fmt.Errorf("log is [%d, %d], want [%d, %d]", first, last, m.first, m.last)
	}
	for i := m.first; m.last > 0 && i <= m.last; i++ {
		var got raft.Log
		if err := s.GetLog(i, &got); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		want := m.entries[i]
		if got.Index != i || got.Term != want.Term || !bytes.Equal(got.Data, want.Data) {
			return fmt.Errorf("entry %d: got index %d term %d, want term %d (or other data)", i, got.Index, got.Term, want.Term)
		}
	}
	return nil
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWALCrashStates runs a Raft-like workload on the log store the node uses
// (raft-wal, with 4 KiB segments so that it rotates every few batches):
// appends, tail truncations as a follower does when a new leader's entries
// conflict with its uncommitted ones ("clearing log suffix", the path of
// hashicorp/raft-wal#31), head truncations after snapshots, and truncations
// across segment boundaries. Before and after every change to a segment file it
// copies the directory: each copy is a state a SIGKILL can leave. Every copy
// must reopen, verify, hold exactly the entries of the last completed operation
// or of the one in flight (no acknowledged entry lost, no partial batch), take
// new appends and reopen again. With raft-wal v0.4.0 the copies taken after the
// first tail truncation fail to reopen: "sealed segment has no index block".
func TestWALCrashStates(t *testing.T) {
	const segmentSize = 4096
	dir := filepath.Join(t.TempDir(), "wal")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	crashDir := t.TempDir()
	hlog := newHCLogger(testLogger(t))

	type crashState struct {
		dir  string
		op   int // index of the operation in flight: models[op] before, models[op+1] after
		what string
	}
	var (
		states []crashState
		op     = -1 // before the first operation: opening
		models []walModel
	)
	// mu orders the hook, which raft-wal's rotation goroutine also calls,
	// with the test's updates of op. A rotation that runs after the next
	// operation began is filed under that one: its before-state is the same.
	var mu sync.Mutex
	cfs := &crashFS{VFS: fs.New()}
	cfs.hook = func(what string) {
		mu.Lock()
		defer mu.Unlock()
		if op < 0 {
			return
		}
		d := filepath.Join(crashDir, fmt.Sprintf("%04d", len(states)))
		copyDir(t, dir, d)
		states = append(states, crashState{dir: d, op: op, what: what})
	}
	cfs.torn = func(what, name string, off int64, half []byte) {
		mu.Lock()
		defer mu.Unlock()
		if op < 0 {
			return
		}
		d := filepath.Join(crashDir, fmt.Sprintf("%04d", len(states)))
		copyDir(t, dir, d)
		f, err := os.OpenFile(filepath.Join(d, name), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(half, off); err != nil {
			t.Fatal(err)
		}
		f.Close()
		states = append(states, crashState{dir: d, op: op, what: what})
	}
	w, meta, err := openWAL(dir, hlog, segment.NewFiler(dir, cfs), segmentSize)
	if err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewSource(1))
	model := walModel{entries: map[uint64]raft.Log{}}
	term := uint64(1)
	entry := func(i uint64) raft.Log {
		data := make([]byte, 50+rng.Intn(400))
		rng.Read(data)
		return raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: data}
	}
	run := func(desc string, f func() error) {
		t.Helper()
		models = append(models, model.clone())
		mu.Lock()
		op = len(models) - 1
		mu.Unlock()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", desc, err)
		}
		if err := model.matches(w); err != nil {
			t.Fatalf("after %s: live store: %v", desc, err)
		}
	}
	store := func(n int) {
		batch := make([]*raft.Log, n)
		for i := range batch {
			l := entry(model.last + 1 + uint64(i))
			batch[i] = &l
		}
		run(fmt.Sprintf("store %d at %d", n, model.last+1), func() error {
			if err := w.StoreLogs(batch); err != nil {
				return err
			}
			for _, l := range batch {
				model.entries[l.Index] = *l
			}
			if model.first == 0 {
				model.first = batch[0].Index
			}
			model.last = batch[n-1].Index
			return nil
		})
	}
	deleteTail := func(from uint64) { // a new leader's entries conflict from `from` on
		run(fmt.Sprintf("delete tail from %d", from), func() error {
			if err := w.DeleteRange(from, model.last); err != nil {
				return err
			}
			for i := from; i <= model.last; i++ {
				delete(model.entries, i)
			}
			model.last = from - 1
			term++
			return nil
		})
	}
	deleteHead := func(upTo uint64) { // compaction after a snapshot
		run(fmt.Sprintf("delete head to %d", upTo), func() error {
			if err := w.DeleteRange(model.first, upTo); err != nil {
				return err
			}
			for i := model.first; i <= upTo; i++ {
				delete(model.entries, i)
			}
			model.first = upTo + 1
			return nil
		})
	}

	for range 6 {
		store(1 + rng.Intn(4))
	}
	deleteTail(model.last) // the last entry (raft-wal#31's trace)
	store(3)               // the new leader's entries
	for range 8 {          // rotations
		store(1 + rng.Intn(6))
	}
	deleteTail(model.last - 9) // across at least one segment boundary
	store(5)
	deleteHead(model.first + 20)
	for range 8 {
		store(1 + rng.Intn(6))
	}
	deleteTail(model.last - 2)
	deleteTail(model.last) // twice in a row, nothing appended between
	store(4)
	models = append(models, model.clone())
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	meta.Close()
	mu.Lock() // the rotation goroutine has stopped: Close waited for it
	defer mu.Unlock()
	t.Logf("%d operations, %d crash states, log [%d, %d]", len(models)-1, len(states), model.first, model.last)

	// The live directory after a clean close.
	states = append(states, crashState{dir: dir, op: len(models) - 1, what: "after close"})
	for _, st := range states {
		before, after := models[st.op], models[min(st.op+1, len(models)-1)]
		if err := checkCrashState(st.dir, hlog, before, after); err != nil {
			t.Errorf("crash state %s (%s, in operation %d): %v", filepath.Base(st.dir), st.what, st.op, err)
		}
	}
}

// checkCrashState reopens a copied WAL directory twice: once to check its
// entries and append, once more to check the append survived.
func checkCrashState(dir string, hlog hclog.Logger, before, after walModel) error {
	w, meta, err := openWAL(dir, hlog, nil, 4096)
	if err != nil {
		return fmt.Errorf("reopen: %w", err)
	}
	got := before.clone()
	if err := before.matches(w); err != nil {
		if err2 := after.matches(w); err2 != nil {
			w.Close()
			meta.Close()
			return fmt.Errorf("neither the state before (%v) nor after (%v) the operation in flight", err, err2)
		}
		got = after.clone()
	}
	next := raft.Log{Index: got.last + 1, Term: 1000, Type: raft.LogCommand, Data: []byte("after the crash")}
	if err := w.StoreLogs([]*raft.Log{&next}); err != nil {
		w.Close()
		meta.Close()
		return fmt.Errorf("append after reopen: %w", err)
	}
	got.entries[next.Index] = next
	got.last = next.Index
	if got.first == 0 {
		got.first = next.Index
	}
	w.Close()
	meta.Close()
	w, meta, err = openWAL(dir, hlog, nil, 4096)
	if err != nil {
		return fmt.Errorf("second reopen: %w", err)
	}
	defer meta.Close()
	defer w.Close()
	if err := got.matches(w); err != nil {
		return fmt.Errorf("second reopen: %w", err)
	}
	return nil
}

// TestOpenDamagedLog: an interrupted rotation is finished on open, whole or
// torn; logs that cannot be read back make Open fail with ErrLogDamaged and
// the way to recover, not a panic inside raft.NewRaft: a sealed segment
// without an index block (what raft-wal v0.4.0 left after a tail truncation,
// hashicorp/raft-wal#31), and a tail whose index block covers fewer entries
// than it has committed.
func TestOpenDamagedLog(t *testing.T) {
	hlog := newHCLogger(testLogger(t))
	// build writes entries 1..40 in 4 KiB segments and closes the log; it
	// returns the WAL directory.
	build := func(t *testing.T, root string) string {
		dir := filepath.Join(root, "wal")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		w, meta, err := openWAL(dir, hlog, nil, 4096)
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(1); i <= 40; i++ {
			l := raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, 300)}
			if err := w.StoreLogs([]*raft.Log{&l}); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
		meta.Close()
		return dir
	}
	openNode := func(t *testing.T, root string) error {
		cfg := fastConfig(t, 1, root)
		n, err := Open(cfg)
		if err == nil {
			n.Close()
		}
		return err
	}
	// editMeta changes the persisted segment list.
	editMeta := func(t *testing.T, dir string, edit func(*types.PersistentState)) {
		meta := &metadb.BoltMetaDB{}
		st, err := meta.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		edit(&st)
		if err := meta.CommitState(st); err != nil {
			t.Fatal(err)
		}
		meta.Close()
	}

	t.Run("sealed segment without index block", func(t *testing.T) {
		root := t.TempDir()
		dir := build(t, root)
		editMeta(t, dir, func(st *types.PersistentState) {
			if len(st.Segments) < 2 || st.Segments[0].SealTime.IsZero() {
				t.Fatalf("want a sealed first segment, have %+v", st.Segments)
			}
			st.Segments[0].IndexStart = 0
		})
		err := openNode(t, root)
		if !errors.Is(err, ErrLogDamaged) || !strings.Contains(err.Error(), "sealed segment has no index block") ||
			!strings.Contains(err.Error(), "voters remove") {
			t.Fatalf("Open: %v", err)
		}
	})

	// interrupted builds the state a kill between the sealing write and the
	// rotation's meta commit leaves: the last rotation undone in the meta
	// store (the sealed segment before the tail is the tail again). It
	// returns that segment as it was sealed.
	interrupted := func(t *testing.T, dir string) types.SegmentInfo {
		var tail types.SegmentInfo
		editMeta(t, dir, func(st *types.PersistentState) {
			n := len(st.Segments)
			st.Segments = st.Segments[:n-1]
			tail = st.Segments[n-2]
			st.Segments[n-2].SealTime, st.Segments[n-2].MaxIndex, st.Segments[n-2].IndexStart = time.Time{}, 0, 0
		})
		return tail
	}
	// reopen opens dir, checks its last index and every entry, appends one
	// and opens it again.
	reopen := func(t *testing.T, dir string, wantLast uint64) {
		t.Helper()
		for round := range 2 {
			w, meta, err := openWAL(dir, hlog, nil, 4096)
			if err != nil {
				t.Fatalf("reopen %d: %v", round, err)
			}
			if last, _ := w.LastIndex(); last != wantLast+uint64(round) {
				t.Fatalf("reopen %d: last index %d, want %d", round, last, wantLast+uint64(round))
			}
			if round == 0 {
				l := raft.Log{Index: wantLast + 1, Term: 2, Type: raft.LogCommand, Data: []byte("next")}
				if err := w.StoreLogs([]*raft.Log{&l}); err != nil {
					t.Fatalf("append after reopen: %v", err)
				}
			}
			w.Close()
			meta.Close()
		}
	}
	patch := func(t *testing.T, path string, off uint64, b []byte) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(b, int64(off)); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("interrupted rotation", func(t *testing.T) {
		dir := build(t, t.TempDir())
		tail := interrupted(t, dir)
		// The entries of the dropped tail segment are gone with it (this
		// state is made up); the recovered one keeps all of its own.
		reopen(t, dir, tail.MaxIndex)
	})

	t.Run("torn seal", func(t *testing.T) {
		// The sealing write stopped before its commit frame: that batch (one
		// entry here) was never acknowledged, and the segment goes on
		// unsealed from the commit before it.
		dir := build(t, t.TempDir())
		tail := interrupted(t, dir)
		payload := (tail.MaxIndex - tail.BaseIndex + 1) * 4
		payload += (8 - payload%8) % 8
		patch(t, filepath.Join(dir, segment.FileName(tail)), tail.IndexStart+payload, make([]byte, 8))
		reopen(t, dir, tail.MaxIndex-1)
	})

	t.Run("index shorter than the committed entries", func(t *testing.T) {
		root := t.TempDir()
		dir := build(t, root)
		tail := interrupted(t, dir)
		var h [8]byte
		h[0] = 2 // index frame, covering one entry
		binary.LittleEndian.PutUint32(h[4:], 4)
		patch(t, filepath.Join(dir, segment.FileName(tail)), tail.IndexStart-8, h[:])
		err := openNode(t, root)
		if !errors.Is(err, ErrLogDamaged) || !strings.Contains(err.Error(), "fewer than") {
			t.Fatalf("Open: %v", err)
		}
	})
}
