package broker

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// fileInodes returns the inode of each of partition dir's producer
// snapshots and of its topic_id file (a rewrite, atomic or not, makes a new
// one or changes its modification time: both are compared).
func fileInodes(t *testing.T, dir string) map[string][2]int64 {
	t.Helper()
	out := map[string][2]int64{}
	names, _ := filepath.Glob(filepath.Join(dir, "*.snapshot"))
	names = append(names, filepath.Join(dir, "topic_id"))
	for _, n := range names {
		fi, err := os.Stat(n)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(n)] = [2]int64{int64(fi.Sys().(*syscall.Stat_t).Ino), fi.ModTime().UnixNano()}
	}
	return out
}

// TestRestartRewritesNothingIdle: a broker stopped and started again with
// no write in between writes no producer snapshot and no topic_id file of
// an idle partition (each cost a file write and fsyncs per partition, at
// every start and stop: minutes for thousands of partitions on a disk
// whose fsync takes milliseconds); after a write, the next stop writes
// the snapshot anew. Partitions also open in parallel at startup: the
// records are all there.
func TestRestartRewritesNothingIdle(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	createTopic(t, b, "idle", 8, nil)
	cl := newClient(t, b)
	want := produceAll(t, cl, makeRecords("idle", 400, "v"))
	cl.Close()
	p, err := b.store.partition(b.meta.State(), "idle", 0)
	if err != nil {
		t.Fatal(err)
	}
	pdir := p.dir
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	before := fileInodes(t, pdir)
	if len(before) < 2 {
		t.Fatalf("files after the first stop: %v", before)
	}

	b2 := startBroker(t, dir)
	sameRecords(t, want, consumeN(t, b2, "idle", 400))
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	after := fileInodes(t, pdir)
	if len(after) != len(before) {
		t.Fatalf("files %v after an idle restart, %v before", after, before)
	}
	for name, id := range before {
		if after[name] != id {
			t.Errorf("%s rewritten by an idle restart", name)
		}
	}

	b3 := startBroker(t, dir)
	cl3 := newClient(t, b3)
	produceAll(t, cl3, makeRecords("idle", 400, "more"))
	cl3.Close()
	if err := b3.Close(); err != nil {
		t.Fatal(err)
	}
	rewritten := false
	for name, id := range fileInodes(t, pdir) {
		if name != "topic_id" && before[name] != id {
			rewritten = true
		}
	}
	if !rewritten {
		t.Error("no producer snapshot written after new records")
	}
}
