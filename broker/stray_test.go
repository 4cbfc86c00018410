package broker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/metadata"
)

// strayTestState builds, through a real single-voter metadata quorum (its
// controller off, so nothing but the test's commands changes the state),
// the view a broker 1 restarting after a stretch down would find:
//
//	kept    [1 2]            broker 1 still a replica
//	moved   [1 2 3] → [2 3]  a reassignment completed while it was down
//	moving  [1 2] → [2 3]    in progress: 1 being removed, 3 being added
//	other   [2 3]            never on broker 1
//	gone                     deleted
//	again   [1 2]            deleted and re-created under the same name
//
// It returns the state and the topic ids by name (again: the old id;
// again-new: the new one).
func strayTestState(t *testing.T) (*metadata.State, map[string]metadata.UUID) {
	t.Helper()
	node, err := metadata.Open(metadata.Config{NodeID: 1, Dir: t.TempDir(), RaftAddr: "127.0.0.1:0", Bootstrap: true,
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond,
		CommitTimeout: 5 * time.Millisecond, DisableController: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := node.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	propose := func(cmd metadata.Command) metadata.Result {
		t.Helper()
		res, err := node.Propose(ctx, cmd)
		if err != nil {
			t.Fatalf("%T: %v", cmd, err)
		}
		return res
	}
	for id := int32(1); id <= 3; id++ {
		reg := propose(&metadata.RegisterBroker{BrokerID: id, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1,
			Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 9090 + id}}})
		propose(&metadata.BrokerHeartbeat{BrokerID: id, BrokerEpoch: reg.BrokerEpoch})
	}
	ids := map[string]metadata.UUID{}
	create := func(name string, replicas ...int32) {
		ids[name] = propose(&metadata.CreateTopic{Name: name, Assignment: [][]int32{replicas}}).TopicID
	}
	create("kept", 1, 2)
	create("moved", 1, 2, 3)
	create("moving", 1, 2)
	create("other", 2, 3)
	create("gone", 1, 2)
	create("again", 1, 2)
	// Every target replica is in the ISR: the reassignment completes at once.
	propose(&metadata.AlterReassignment{TopicID: ids["moved"], Partition: 0, Target: []int32{2, 3}})
	// Broker 3 is not in the ISR: the reassignment stays in progress.
	propose(&metadata.AlterReassignment{TopicID: ids["moving"], Partition: 0, Target: []int32{2, 3}})
	propose(&metadata.DeleteTopic{TopicID: ids["gone"]})
	propose(&metadata.DeleteTopic{TopicID: ids["again"]})
	ids["again-new"] = propose(&metadata.CreateTopic{Name: "again", Assignment: [][]int32{{1, 2}}}).TopicID
	st := node.State()
	if p, _ := st.Partition(ids["moved"], 0); p.Reassigning() || !slices.Equal(p.Replicas, []int32{2, 3}) {
		t.Fatalf("moved: %+v, want a completed reassignment to [2 3]", p)
	}
	if p, _ := st.Partition(ids["moving"], 0); !p.Reassigning() || !slices.Equal(p.Adding, []int32{3}) || !slices.Equal(p.Removing, []int32{1}) {
		t.Fatalf("moving: %+v, want a reassignment in progress adding 3 and removing 1", p)
	}
	return st, ids
}

// TestStrayReason is the decision: which partition directories a broker
// keeps, given the metadata it has caught up with.
func TestStrayReason(t *testing.T) {
	st, ids := strayTestState(t)
	cases := []struct {
		me     int32
		dir    string
		id     metadata.UUID
		noID   bool
		stray  bool
		reason string
	}{
		{me: 1, dir: "kept-0", id: ids["kept"]},
		{me: 1, dir: "moved-0", id: ids["moved"], stray: true, reason: "not a replica (replicas [2 3])"},
		{me: 3, dir: "moved-0", id: ids["moved"]},
		// In progress: the replica being removed and the one being added
		// both keep their directories until it completes.
		{me: 1, dir: "moving-0", id: ids["moving"]},
		{me: 3, dir: "moving-0", id: ids["moving"]},
		{me: 1, dir: "other-0", id: ids["other"], stray: true, reason: "not a replica (replicas [2 3])"},
		{me: 1, dir: "gone-0", id: ids["gone"], stray: true, reason: "topic deleted"},
		// A topic deleted and re-created under the same name: the old
		// directory is stray, one of the new topic is not.
		{me: 1, dir: "again-0", id: ids["again"], stray: true, reason: "topic re-created with another id"},
		{me: 1, dir: "again-0", id: ids["again-new"]},
		{me: 1, dir: "kept-3", id: ids["kept"], stray: true, reason: "no such partition"},
		{me: 1, dir: "other-0", id: ids["kept"], stray: true, reason: `topic id belongs to topic "kept"`},
		// No topic_id (a crash while the partition was first opened).
		{me: 1, dir: "kept-0", noID: true},
		{me: 1, dir: "other-0", noID: true, stray: true, reason: "no topic id, and not a replica"},
		{me: 1, dir: "unknown-0", noID: true, stray: true, reason: "no topic id, and no such topic"},
	}
	for _, c := range cases {
		got := strayReason(st, c.me, c.dir, c.id, !c.noID)
		if (got != "") != c.stray || (c.stray && got != c.reason) {
			t.Errorf("broker %d, %s (id %v, none %v): reason %q, want stray=%v %q", c.me, c.dir, c.id, c.noID, got, c.stray, c.reason)
		}
	}
}

// TestFindStrayDirs lists a logs directory as a restarting broker 1 does:
// only partition directories that are not its own are stray; renamed stray
// directories and anything else are left alone.
func TestFindStrayDirs(t *testing.T) {
	st, ids := strayTestState(t)
	logs := t.TempDir()
	mk := func(name string, id *metadata.UUID) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(logs, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if id != nil {
			if err := os.WriteFile(filepath.Join(logs, name, "topic_id"), []byte(id.String()+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range []string{"kept", "moved", "moving", "other", "gone", "again"} {
		id := ids[name]
		mk(name+"-0", &id)
	}
	mk("kept-1", nil)                                    // not a partition of kept, no id
	mk("lost+found", nil)                                // not a partition directory
	mk("moved-0.1700000000000-stray", nil)               // renamed earlier
	os.WriteFile(filepath.Join(logs, "x-0"), nil, 0o644) // a file, not a directory
	got, err := findStrayDirs(logs, st, 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range got {
		names = append(names, d.Name)
	}
	want := []string{"again-0", "gone-0", "kept-1", "moved-0", "other-0"}
	if !slices.Equal(names, want) {
		t.Fatalf("stray: %v (%+v), want %v", names, got, want)
	}
}

func TestStrayDirNames(t *testing.T) {
	at := time.UnixMilli(1764444000123)
	name := strayDirName("my-topic-12", at)
	if name != "my-topic-12.1764444000123-stray" {
		t.Fatalf("name %q", name)
	}
	if _, _, ok := parsePartitionDir(name); ok {
		t.Fatalf("%q parses as a partition directory", name)
	}
	if got, ok := parseStrayDirName(name); !ok || !got.Equal(at) {
		t.Fatalf("parseStrayDirName(%q) = %v, %v", name, got, ok)
	}
	for _, bad := range []string{"my-topic-12", "my-topic-12.x-stray", "my-topic.1-stray", "-stray", ".1-stray", "t-0.-1-stray"} {
		if _, ok := parseStrayDirName(bad); ok {
			t.Errorf("parseStrayDirName(%q) accepted", bad)
		}
	}
	for _, c := range []struct {
		name  string
		topic string
		idx   int32
		ok    bool
	}{{"a-0", "a", 0, true}, {"a-b-7", "a-b", 7, true}, {"a-", "", 0, false}, {"-1", "", 0, false},
		{"a-01", "", 0, false}, {"a--1", "a-", 1, true}, {"a-+1", "", 0, false}, {"a-99999999999", "", 0, false}} {
		topic, idx, ok := parsePartitionDir(c.name)
		if ok != c.ok || topic != c.topic || idx != c.idx {
			t.Errorf("parsePartitionDir(%q) = %q %d %v", c.name, topic, idx, ok)
		}
	}
}

// TestDeleteDueStrayDirs: a renamed directory goes once its delay has
// passed since the time in its name, not before; a negative delay keeps it.
func TestDeleteDueStrayDirs(t *testing.T) {
	logs := t.TempDir()
	base := time.UnixMilli(1764444000000)
	old := strayDirName("a-0", base)
	young := strayDirName("b-0", base.Add(30*time.Minute))
	for _, n := range []string{old, young, "c-0", "notes-stray"} {
		if err := os.MkdirAll(filepath.Join(logs, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(n string) bool { _, err := os.Stat(filepath.Join(logs, n)); return err == nil }
	s := &store{b: &Broker{cfg: Config{StrayLogDeleteDelay: time.Hour}, log: testLogger(t)}, logsDir: logs}

	next, pending := s.deleteDueDirs(base.Add(59 * time.Minute))
	if !pending || !next.Equal(base.Add(time.Hour)) || !exists(old) || !exists(young) {
		t.Fatalf("before any is due: next %v pending %v, old %v young %v", next, pending, exists(old), exists(young))
	}
	next, pending = s.deleteDueDirs(base.Add(time.Hour))
	if !pending || !next.Equal(base.Add(90*time.Minute)) || exists(old) || !exists(young) {
		t.Fatalf("old due: next %v pending %v, old %v young %v", next, pending, exists(old), exists(young))
	}
	s.b.cfg.StrayLogDeleteDelay = -1
	if _, pending = s.deleteDueDirs(base.Add(24 * time.Hour)); pending || !exists(young) {
		t.Fatalf("negative delay: pending %v, young %v", pending, exists(young))
	}
	s.b.cfg.StrayLogDeleteDelay = time.Hour
	if _, pending = s.deleteDueDirs(base.Add(90 * time.Minute)); pending || exists(young) {
		t.Fatalf("all due: pending %v, young %v", pending, exists(young))
	}
	if !exists("c-0") || !exists("notes-stray") {
		t.Fatal("a directory that is not a renamed stray one was deleted")
	}
}

// TestStrayDirsAtStart: a broker starting over a logs directory with
// partitions the metadata does not place here (a deleted topic's, a
// partition index its topic does not have) renames them and opens none;
// its own partition keeps its records; the renamed directory is deleted
// once the delay has passed, and kept while it has not.
func TestStrayDirsAtStart(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	b := startBroker(t, dir)
	createTopic(t, b, "live", 1, nil)
	cl := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "live", Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	liveID, err := os.ReadFile(filepath.Join(logs, "live-0", "topic_id"))
	if err != nil {
		t.Fatal(err)
	}
	plant := func(name string, id []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(logs, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(logs, name, "topic_id"), id, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(logs, name, "00000000000000000000.log"), []byte("records"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plant("ghost-0", []byte(metadata.NewUUID().String()+"\n")) // a topic deleted while down
	plant("live-4", liveID)                                    // live has one partition

	strays := func() []string {
		ents, _ := os.ReadDir(logs)
		var out []string
		for _, e := range ents {
			if _, ok := parseStrayDirName(e.Name()); ok {
				out = append(out, e.Name())
			}
		}
		return out
	}
	// Never deleted: the renamed directories stay, whole.
	b = startBroker(t, dir, func(c *Config) { c.StrayLogDeleteDelay = -1 })
	got := strays()
	if len(got) != 2 || !slices.ContainsFunc(got, func(n string) bool { return len(n) > 8 && n[:8] == "ghost-0." }) {
		t.Fatalf("stray directories after the start: %v", got)
	}
	for _, n := range []string{"ghost-0", "live-4"} {
		if _, err := os.Stat(filepath.Join(logs, n)); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", n, err)
		}
	}
	for _, n := range got {
		if raw, err := os.ReadFile(filepath.Join(logs, n, "00000000000000000000.log")); err != nil || string(raw) != "records" {
			t.Errorf("%s lost its data: %q %v", n, raw, err)
		}
	}
	cl = newClient(t, b, kgo.ConsumeTopics("live"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	read := 0
	for read < 10 && ctx.Err() == nil {
		read += len(cl.PollFetches(ctx).Records())
	}
	if read != 10 {
		t.Fatalf("read %d of the 10 records of live-0", read)
	}
	cl.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// Within the delay: kept.
	b = startBroker(t, dir, func(c *Config) { c.StrayLogDeleteDelay = time.Hour })
	if n := strays(); !slices.Equal(n, got) {
		t.Fatalf("within the delay: %v, want %v", n, got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Past it: deleted by the broker's background loop.
	startBroker(t, dir, func(c *Config) { c.StrayLogDeleteDelay = time.Millisecond })
	testutil.WaitFor(t, 10*time.Second, "stray directories deleted", func() bool { return len(strays()) == 0 })
	if _, err := os.Stat(filepath.Join(logs, "live-0", "topic_id")); err != nil {
		t.Fatalf("live-0: %v", err)
	}
}

func TestReadTopicID(t *testing.T) {
	dir := t.TempDir()
	id := metadata.NewUUID()
	for _, c := range []struct {
		content string
		ok      bool
	}{
		{id.String() + "\n", true},
		{id.String(), true},
		{"", false},
		{"not a uuid\n", false},
		{id.String() + strings.Repeat(" ", 64) + "\n", false}, // longer than any id
	} {
		name := filepath.Join(dir, "topic_id")
		if err := os.WriteFile(name, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, ok := readTopicID(name)
		if ok != c.ok || (ok && got != id) {
			t.Errorf("readTopicID(%q) = %v %v", c.content, got, ok)
		}
	}
	if _, ok := readTopicID(filepath.Join(dir, "missing")); ok {
		t.Error("a missing file has an id")
	}
}
