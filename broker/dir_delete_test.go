package broker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/metadata"
)

func TestDeleteDirNames(t *testing.T) {
	name := deleteDirName("my-topic-12", 1764444000123)
	if name != "my-topic-12.1764444000123-delete" {
		t.Fatalf("name %q", name)
	}
	if _, _, ok := parsePartitionDir(name); ok {
		t.Fatalf("%q parses as a partition directory", name)
	}
	if _, ok := parseStrayDirName(name); ok {
		t.Fatalf("%q parses as a stray directory", name)
	}
	if _, ok := parseDeleteDirName(strayDirName("my-topic-12", time.UnixMilli(1))); ok {
		t.Fatal("a stray name parses as a -delete one")
	}
	if at, ok := parseDeleteDirName(name); !ok || at.UnixMilli() != 1764444000123 {
		t.Fatalf("parseDeleteDirName(%q) = %v %v", name, at, ok)
	}
	for _, bad := range []string{"my-topic-12", "my-topic-12.x-delete", "my-topic.1-delete", "t-0.01-delete", "t-0.-1-delete", "-delete"} {
		if _, ok := parseDeleteDirName(bad); ok {
			t.Errorf("parseDeleteDirName(%q) accepted", bad)
		}
	}
}

// plantDir makes logs/name with one file of size bytes.
func plantDir(t *testing.T, logs, name string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(logs, name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logs, name, "00000000000000000000.log"), make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

func dirExists(logs, name string) bool {
	_, err := os.Stat(filepath.Join(logs, name))
	return err == nil
}

// TestDeleteDueDirs, with the clock given: a directory renamed for
// deletion stays until its delay has passed since the rename, then goes;
// -delete directories this store did not rename (leftovers of an earlier
// run) go at once whatever the time in their names; stray ones follow
// their own delay; a second rename in the same millisecond takes the next.
func TestDeleteDueDirs(t *testing.T) {
	logs := t.TempDir()
	base := time.UnixMilli(1764444000000)
	s := &store{b: &Broker{cfg: Config{DeletedLogDeleteDelay: time.Minute, StrayLogDeleteDelay: time.Hour}, log: testLogger(t)}, logsDir: logs}
	plantDir(t, logs, "a-0", 10)
	plantDir(t, logs, "b-0.1700000000000-delete", 10)                 // old leftover
	plantDir(t, logs, deleteDirName("c-0", base.UnixMilli()+1e6), 10) // leftover with a later time
	stray := strayDirName("d-0", base)
	plantDir(t, logs, stray, 10)
	plantDir(t, logs, "e-0", 10)

	if err := s.renameForDelete(filepath.Join(logs, "a-0"), "test", base); err != nil {
		t.Fatal(err)
	}
	renamed := deleteDirName("a-0", base.UnixMilli())
	if dirExists(logs, "a-0") || !dirExists(logs, renamed) {
		t.Fatalf("after the rename: a-0 %v, %s %v", dirExists(logs, "a-0"), renamed, dirExists(logs, renamed))
	}
	plantDir(t, logs, "a-0", 10) // the partition again, removed again in the same millisecond
	if err := s.renameForDelete(filepath.Join(logs, "a-0"), "test", base); err != nil {
		t.Fatal(err)
	}
	again := deleteDirName("a-0", base.UnixMilli()+1)
	if !dirExists(logs, again) || !dirExists(logs, renamed) {
		t.Fatalf("second rename in the same millisecond: %s %v, %s %v", again, dirExists(logs, again), renamed, dirExists(logs, renamed))
	}
	if err := s.renameForDelete(filepath.Join(logs, "gone-0"), "test", base); err != nil {
		t.Fatalf("renaming a missing directory: %v", err)
	}

	next, pending := s.deleteDueDirs(base)
	if dirExists(logs, "b-0.1700000000000-delete") || dirExists(logs, deleteDirName("c-0", base.UnixMilli()+1e6)) {
		t.Fatal("leftover -delete directories kept")
	}
	if !pending || !next.Equal(base.Add(time.Minute)) || !dirExists(logs, renamed) || !dirExists(logs, again) {
		t.Fatalf("at the rename: next %v pending %v, %v %v", next, pending, dirExists(logs, renamed), dirExists(logs, again))
	}
	if _, pending = s.deleteDueDirs(base.Add(time.Minute - time.Millisecond)); !pending || !dirExists(logs, renamed) {
		t.Fatalf("just before the delay: pending %v, kept %v", pending, dirExists(logs, renamed))
	}
	next, pending = s.deleteDueDirs(base.Add(time.Minute))
	if dirExists(logs, renamed) || dirExists(logs, again) {
		t.Fatal("renamed directories kept past the delay")
	}
	if !pending || !next.Equal(base.Add(time.Hour)) || !dirExists(logs, stray) {
		t.Fatalf("the stray one: next %v pending %v, kept %v", next, pending, dirExists(logs, stray))
	}
	if len(s.deleting.due) != 0 {
		t.Fatalf("still scheduled: %v", s.deleting.due)
	}
	if _, pending = s.deleteDueDirs(base.Add(time.Hour)); pending || dirExists(logs, stray) || !dirExists(logs, "e-0") {
		t.Fatalf("after the stray delay: pending %v, stray %v, e-0 %v", pending, dirExists(logs, stray), dirExists(logs, "e-0"))
	}

	// A negative delay: due at the rename.
	s.b.cfg.DeletedLogDeleteDelay = -1
	if err := s.renameForDelete(filepath.Join(logs, "e-0"), "test", base); err != nil {
		t.Fatal(err)
	}
	if _, pending = s.deleteDueDirs(base); pending || dirExists(logs, deleteDirName("e-0", base.UnixMilli())) {
		t.Fatalf("negative delay: pending %v", pending)
	}
}

// gaugeValues reads a gauge's series by their kind label.
func gaugeValues(t *testing.T, b *Broker, name string) map[string]float64 {
	t.Helper()
	mfs, err := b.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// renamedDirs lists the partition directories of topic under logs renamed
// for deletion.
func renamedDirs(t *testing.T, logs, topic string) []string {
	t.Helper()
	ents, err := os.ReadDir(logs)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, ok := parseDeleteDirName(e.Name()); ok && strings.HasPrefix(e.Name(), topic+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// logLines is a slog text log kept for a test to read.
type logLines struct{ testutil.Buffer }

// with returns the lines that contain every one of parts.
func (l *logLines) with(parts ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// TestTopicDeleteRenamesDirs: deleting a topic (kadm) on a running broker
// renames each of its partition directories <topic>-<n>.<ms>-delete, data
// kept, and they are removed once deleted-log-delete-delay has passed (the
// deletion pass run with the clock past it), not before; the log says both.
// The gauges count them, and a planted stray directory, while they wait.
func TestTopicDeleteRenamesDirs(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	stray := strayDirName("old-0", time.Now())
	plantDir(t, logs, stray, 100)
	var log logLines
	b := startBroker(t, dir, func(c *Config) {
		c.DeletedLogDeleteDelay, c.StrayLogDeleteDelay = time.Hour, -1
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	createTopic(t, b, "doomed", 2, nil)
	cl := newClient(t, b)
	ctx := testCtx(t)
	for i := range 20 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "doomed", Partition: int32(i % 2), Value: []byte("payload")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if g := gaugeValues(t, b, "sediment_log_dirs_pending_deletion"); g["stray"] != 1 || g["delete"] != 0 {
		t.Fatalf("pending before the deletion: %v", g)
	}
	adm := kadm.NewClient(cl)
	if r, err := adm.DeleteTopics(ctx, "doomed"); err != nil || r["doomed"].Err != nil {
		t.Fatalf("delete: %v %v", err, r)
	}
	// The log line follows the rename (and the directory's fsync): wait
	// for both.
	testutil.WaitFor(t, 10*time.Second, "both partition directories renamed, and logged", func() bool {
		return !dirExists(logs, "doomed-0") && !dirExists(logs, "doomed-1") && len(renamedDirs(t, logs, "doomed")) == 2 &&
			len(log.with("partition directory renamed for deletion", `reason="topic deleted"`)) == 2
	})
	renamed := renamedDirs(t, logs, "doomed")
	var bytes int64
	for _, n := range renamed {
		files, size := dirUsage(filepath.Join(logs, n))
		if files == 0 || size == 0 {
			t.Fatalf("%s is empty: %d files", n, files)
		}
		if _, err := os.Stat(filepath.Join(logs, n, "topic_id")); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		bytes += size
	}
	for _, n := range renamed {
		if l := log.with("partition directory renamed for deletion", `reason="topic deleted"`, "renamed_to="+n); len(l) != 1 {
			t.Errorf("log lines for the rename to %s: %q", n, l)
		}
	}
	if g := gaugeValues(t, b, "sediment_log_dirs_pending_deletion"); g["stray"] != 1 || g["delete"] != 2 {
		t.Fatalf("pending: %v", g)
	}
	if g := gaugeValues(t, b, "sediment_log_dirs_pending_deletion_bytes"); g["stray"] != 100 || g["delete"] != float64(bytes) {
		t.Fatalf("pending bytes: %v, want stray 100, delete %d", g, bytes)
	}

	now := time.Now()
	b.store.deleteDueDirs(now)
	if got := renamedDirs(t, logs, "doomed"); !slices.Equal(got, renamed) {
		t.Fatalf("within the delay: %v, want %v", got, renamed)
	}
	b.store.deleteDueDirs(now.Add(time.Hour + time.Second))
	if got := renamedDirs(t, logs, "doomed"); len(got) != 0 {
		t.Fatalf("past the delay: %v", got)
	}
	for _, n := range renamed {
		if l := log.with("partition directory deleted", "dir="+n, "kind=delete"); len(l) != 1 {
			t.Errorf("log lines for the removal of %s: %q", n, l)
		}
	}
	if g := gaugeValues(t, b, "sediment_log_dirs_pending_deletion_bytes"); g["stray"] != 100 || g["delete"] != 0 {
		t.Fatalf("pending bytes after the removal: %v", g)
	}
	if !dirExists(logs, stray) {
		t.Fatal("the stray directory went (its delay is negative)")
	}
}

// TestDeletedDirRemovedByLoop: the broker's own deletion loop wakes on the
// rename and removes the directory once its (short) delay has passed.
func TestDeletedDirRemovedByLoop(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	b := startBroker(t, dir, func(c *Config) { c.DeletedLogDeleteDelay = 20 * time.Millisecond })
	createTopic(t, b, "brief", 1, nil)
	cl := newClient(t, b)
	ctx := testCtx(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "brief", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if r, err := kadm.NewClient(cl).DeleteTopics(ctx, "brief"); err != nil || r["brief"].Err != nil {
		t.Fatalf("delete: %v %v", err, r)
	}
	testutil.WaitFor(t, 10*time.Second, "the partition directory removed", func() bool {
		return !dirExists(logs, "brief-0") && len(renamedDirs(t, logs, "brief")) == 0
	})
}

// TestLeftoverDeleteDirsAtStart: a broker starting over -delete directories
// left by an earlier run removes them at once; a stray directory within
// its delay stays.
func TestLeftoverDeleteDirsAtStart(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	leftover := deleteDirName("gone-0", time.Now().UnixMilli())
	plantDir(t, logs, leftover, 10)
	stray := strayDirName("old-0", time.Now())
	plantDir(t, logs, stray, 10)
	b := startBroker(t, dir, func(c *Config) { c.DeletedLogDeleteDelay = time.Hour; c.StrayLogDeleteDelay = time.Hour })
	testutil.WaitFor(t, 10*time.Second, "the leftover removed", func() bool { return !dirExists(logs, leftover) })
	if !dirExists(logs, stray) {
		t.Fatal("the stray directory went within its delay")
	}
	if g := gaugeValues(t, b, "sediment_log_dirs_pending_deletion"); g["stray"] != 1 || g["delete"] != 0 {
		t.Fatalf("pending: %v", g)
	}
}

// TestTopicRecreatedSameName: a topic deleted and at once re-created under
// the same name (kadm) starts empty, in a fresh directory with the new
// topic's id, while the old data waits renamed <topic>-0.<ms>-delete.
func TestTopicRecreatedSameName(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	b := startBroker(t, dir, func(c *Config) { c.DeletedLogDeleteDelay = time.Hour })
	cl := newClient(t, b)
	adm := kadm.NewClient(cl)
	ctx := testCtx(t)
	create := func() metadata.UUID {
		t.Helper()
		r, err := adm.CreateTopic(ctx, 1, 1, nil, "again")
		if err != nil || r.Err != nil {
			t.Fatalf("create: %v %v", err, r.Err)
		}
		return metadata.UUID(r.ID)
	}
	oldID := create()
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "again", Value: []byte{'o', byte('0' + i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := adm.DeleteTopics(ctx, "again"); err != nil || r["again"].Err != nil {
		t.Fatalf("delete: %v %v", err, r)
	}
	newID := create()
	if newID == oldID {
		t.Fatal("re-created with the same id")
	}
	// A new client: this one's metadata has the old topic id.
	if err := newClient(t, b).ProduceSync(ctx, &kgo.Record{Topic: "again", Value: []byte("new")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rd := newClient(t, b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"again": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(100*time.Millisecond))
	var got []*kgo.Record
	for len(got) < 1 && ctx.Err() == nil {
		got = append(got, rd.PollFetches(ctx).Records()...)
	}
	if len(got) != 1 || string(got[0].Value) != "new" || got[0].Offset != 0 {
		for _, r := range got {
			t.Logf("offset %d: %q", r.Offset, r.Value)
		}
		t.Fatalf("read %d records from the re-created topic, want only \"new\" at offset 0", len(got))
	}
	if id, ok := readTopicID(filepath.Join(logs, "again-0", "topic_id")); !ok || id != newID {
		t.Fatalf("again-0's topic_id %v (%v), want %v", id, ok, newID)
	}
	testutil.WaitFor(t, 10*time.Second, "the old directory renamed", func() bool { return len(renamedDirs(t, logs, "again")) == 1 })
	old := renamedDirs(t, logs, "again")[0]
	if id, ok := readTopicID(filepath.Join(logs, old, "topic_id")); !ok || id != oldID {
		t.Fatalf("%s's topic_id %v (%v), want the old %v", old, id, ok, oldID)
	}
	if files, size := dirUsage(filepath.Join(logs, old)); files == 0 || size == 0 {
		t.Fatalf("%s lost the old data", old)
	}
}

// TestReplicaMovedAwayRenamesDir: a reassignment (kadm) that moves the
// broker's replica to another broker renames its directory for deletion.
// Broker 2 is registered through the metadata log and never runs: a new
// topic's ISR holds every replica, so the reassignment to [2] completes at
// once (the test heartbeats for 2).
func TestReplicaMovedAwayRenamesDir(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	b := startBroker(t, dir, func(c *Config) { c.DeletedLogDeleteDelay = time.Hour })
	ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
	defer cancel()
	reg, err := b.store.meta.Propose(ctx, &metadata.RegisterBroker{BrokerID: 2, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1,
		Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.meta.Propose(ctx, &metadata.BrokerHeartbeat{BrokerID: 2, BrokerEpoch: reg.BrokerEpoch}); err != nil {
		t.Fatal(err)
	}
	// Broker 2's heartbeats, as a live broker sends them: fenced (a slow
	// run past the 9 s session), it would leave the ISR and the
	// reassignment would not complete.
	hbCtx, hbStop := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	defer func() { hbStop(); <-hbDone }()
	go func() {
		defer close(hbDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-tick.C:
				b.store.meta.Propose(hbCtx, &metadata.BrokerHeartbeat{BrokerID: 2, BrokerEpoch: reg.BrokerEpoch})
			}
		}
	}()
	adm := kadm.NewClient(newClient(t, b))
	r, err := adm.CreateTopic(ctx, 1, 2, nil, "moved")
	if err != nil || r.Err != nil {
		t.Fatalf("create: %v %v", err, r.Err)
	}
	testutil.WaitFor(t, 10*time.Second, "moved-0 open here", func() bool { return dirExists(logs, "moved-0") })
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("moved", 0, []int32{2})
	res, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if e := res["moved"][0]; e.Err != nil {
		t.Fatalf("reassign: %v %s", e.Err, e.ErrMessage)
	}
	testutil.WaitFor(t, 10*time.Second, "moved-0 renamed for deletion", func() bool {
		return !dirExists(logs, "moved-0") && len(renamedDirs(t, logs, "moved")) == 1
	})
	if p, _ := b.store.meta.State().Partition(metadata.UUID(r.ID), 0); !slices.Equal(p.Replicas, []int32{2}) {
		t.Fatalf("replicas %v, want [2]", p.Replicas)
	}
}

// openWaiting reports whether a goroutine waits in openLocked for a
// partition directory to be freed (its select).
func openWaiting() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "broker.(*store).openLocked(") {
			return true
		}
	}
	return false
}

// TestOpenWaitsForClosingDir: a partition of a topic re-created under an
// older one's name does not touch the directory while the older partition
// is still being closed on it (here the test plays the closer, as
// reconcile would for the deleted topic): it waits, then opens a fresh
// directory with its own id once the closer has renamed the old one away.
func TestOpenWaitsForClosingDir(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	b := startBroker(t, dir, func(c *Config) { c.DeletedLogDeleteDelay = time.Hour })
	path := filepath.Join(logs, "w-0")
	oldID := metadata.NewUUID()
	plantDir(t, logs, "w-0", 10)
	if err := os.WriteFile(filepath.Join(path, "topic_id"), []byte(oldID.String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	closing := make(chan struct{})
	b.store.mu.Lock()
	b.store.mu.dirs[path] = closing
	b.store.mu.Unlock()

	createTopic(t, b, "w", 1, nil)
	testutil.WaitFor(t, 10*time.Second, "the new partition's open to wait", openWaiting)
	if id, ok := readTopicID(filepath.Join(path, "topic_id")); !ok || id != oldID {
		t.Fatalf("the directory being closed was touched: topic_id %v %v", id, ok)
	}
	// The closer renames the old directory away and frees the name.
	moved := deleteDirName("w-0", 1)
	if err := os.Rename(path, filepath.Join(logs, moved)); err != nil {
		t.Fatal(err)
	}
	b.store.mu.Lock()
	close(closing)
	delete(b.store.mu.dirs, path)
	b.store.mu.Unlock()

	ctx := testCtx(t)
	if err := newClient(t, b).ProduceSync(ctx, &kgo.Record{Topic: "w", Value: []byte("new")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	st := b.store.meta.State()
	topic, _ := st.Topic("w")
	if id, ok := readTopicID(filepath.Join(path, "topic_id")); !ok || id != topic.ID {
		t.Fatalf("w-0's topic_id %v (%v), want %v", id, ok, topic.ID)
	}
	if files, size := dirUsage(filepath.Join(logs, moved)); files != 2 || size != 10+int64(len(oldID.String())+1) {
		t.Fatalf("the old directory changed: %d files, %d bytes", files, size)
	}
}

// TestDeletedWhileOpeningIsRenamed: a topic deleted while its partition's
// log opens (created and deleted at once, as a script does): the open
// finds it gone, closes the log, and renames the directory for deletion,
// as reconcile does for an open partition. Before, the directory stayed
// under its live name until the next start's stray check.
func TestDeletedWhileOpeningIsRenamed(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	logs := b.store.logsDir
	var once sync.Once
	deleted := make(chan error, 1)
	b.testHooks.partitionOpening = func(topic string, idx int32) {
		if topic != "fleeting" {
			return
		}
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			mt, ok := b.meta.State().Topic(topic)
			if !ok {
				deleted <- errors.New("no topic in the state")
				return
			}
			res, err := b.meta.Propose(ctx, &metadata.DeleteTopic{TopicID: mt.ID, Name: mt.Name})
			if err == nil {
				_, err = b.meta.WaitForVersion(ctx, res.Version)
			}
			deleted <- err
		})
	}
	createTopic(t, b, "fleeting", 1, nil)
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "fleeting-0 renamed for deletion", func() bool {
		return !dirExists(logs, "fleeting-0") && len(renamedDirs(t, logs, "fleeting")) == 1
	})
}
