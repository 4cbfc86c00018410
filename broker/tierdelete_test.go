package broker

import (
	"context"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/faulty"
	"github.com/sediment-io/sediment/tiering"
)

// tierDeleteConfig is the tests' tiering: fast rounds, and the deletion
// worker every 50 ms.
func tierDeleteConfig(t *testing.T, store objectstore.Store) TieringConfig {
	return TieringConfig{Store: store, SyncInterval: 20 * time.Millisecond, RemoteDeleteInterval: 50 * time.Millisecond, RemoteDeleteGrace: 100 * time.Millisecond,
		Options: tiering.Options{Interval: 20 * time.Millisecond, ChunkSize: 64 << 10, Logger: testLogger(t),
			CacheDir: filepath.Join(t.TempDir(), "cache"), BaseBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}}
}

// tieredTopicConfigs: small segments, everything below the active segment
// goes to the bucket and leaves the disk.
var tieredTopicConfigs = map[string]string{"segment.bytes": "32768", "local.retention.bytes": "0", "remote.storage.enable": "true",
	"retention.ms": "-1", "min.insync.replicas": "1"}

// topicObjects counts the bucket's objects of topic id (partition objects
// and descriptors: every key of a topic carries its id).
func topicObjects(t *testing.T, store objectstore.Store, id metadata.UUID) int {
	t.Helper()
	l, err := store.List(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	h, n := hex.EncodeToString(id[:]), 0
	for _, o := range l.Objects {
		if strings.Contains(o.Key, h) {
			n++
		}
	}
	return n
}

// TestTieredDeleteTopicBucket: two brokers share a bucket, and the topic's
// only replica is on the broker that is not the metadata (Raft) leader, so
// no broker that hosts nothing of it has it in memory. Deleting the topic
// deletes every object of it (partition objects and descriptor) and then
// the metadata log's record of the pending deletion. The topic is created
// again under the same name right after the delete (a new id) and written
// to: none of its objects is touched, and it reads back whole from the
// bucket.
func TestTieredDeleteTopicBucket(t *testing.T) {
	dir := t.TempDir()
	store := fsBucket(t, dir)
	defer store.Close()
	brokers := startPair(t, func(c *Config) {
		c.Listeners = []Listener{{Addr: "127.0.0.1:0"}}
		c.LogFlush = "os"
	})
	for _, b := range brokers {
		if err := b.EnableTiering(tierDeleteConfig(t, store)); err != nil {
			t.Fatal(err)
		}
	}
	var leader, other *Broker
	waitTiered(t, "a metadata leader", func() bool {
		for i, b := range brokers {
			if b.meta.IsLeader() {
				leader, other = b, brokers[1-i]
				return true
			}
		}
		return false
	})
	cl := smallBatchClient(t, other)
	ctx := testCtx(t)
	create := func() metadata.UUID {
		waitTiered(t, "topic created on the non-leader", func() bool {
			req := kmsg.NewPtrCreateTopicsRequest()
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "leak", -1, -1
			ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			ra.Partition, ra.Replicas = 0, []int32{other.cfg.NodeID}
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
			for k, v := range tieredTopicConfigs {
				c := kmsg.NewCreateTopicsRequestTopicConfig()
				c.Name, c.Value = k, kmsg.StringPtr(v)
				rt.Configs = append(rt.Configs, c)
			}
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				return false // brokers still registering: retried
			}
			if e := kerr.ErrorForCode(resp.Topics[0].ErrorCode); e != nil && e != kerr.TopicAlreadyExists {
				t.Logf("create: %v", e)
				return false
			}
			return true
		})
		var tp *metadata.Topic
		waitTiered(t, "the topic in the non-leader's metadata", func() bool {
			var ok bool
			tp, ok = other.meta.State().Topic("leak")
			return ok
		})
		return tp.ID
	}
	oldID := create()
	produceAll(t, cl, makeRecords("leak", 3000, "old"))
	waitTiered(t, "objects in the bucket", func() bool { return topicObjects(t, store, oldID) > 5 })
	if _, err := kadm.NewClient(newClient(t, leader)).DeleteTopics(ctx, "leak"); err != nil {
		t.Fatal(err)
	}
	// (Whether the record of the pending deletion is still there now
	// depends on the worker's timing; TestTieredDeleteTopicBucketRestart
	// holds it back.)
	// The same name again, a new id, new data.
	waitTiered(t, "the old topic gone from the non-leader's metadata", func() bool {
		_, ok := other.meta.State().TopicByID(oldID)
		return !ok
	})
	newID := create()
	if newID == oldID {
		t.Fatal("re-created topic has the old id")
	}
	// A new client: the old one keeps the old id in its metadata cache.
	cl2 := smallBatchClient(t, other)
	want := produceAll(t, cl2, makeRecords("leak", 2000, "new"))
	waitTiered(t, "every object of the deleted topic gone, and its record", func() bool {
		return topicObjects(t, store, oldID) == 0 && len(leader.meta.State().RemoteDeletions()) == 0 &&
			len(other.meta.State().RemoteDeletions()) == 0
	})
	waitTiered(t, "the new topic tiered", func() bool { return listOffset(t, other, "leak", -4) > 500 })
	if n := topicObjects(t, store, newID); n == 0 {
		t.Fatal("the re-created topic has no objects")
	}
	sameRecords(t, want, consumeN(t, other, "leak", 2000)) // from the bucket first
}

// TestTieredDeleteTopicBucketRestart: the bucket refuses the deletes of a
// deleted topic's objects (faulty store), and the broker restarts before
// they succeed: the pending deletion is in the metadata log, not in memory,
// so the restarted broker deletes the objects and then the record.
func TestTieredDeleteTopicBucketRestart(t *testing.T) {
	dir := t.TempDir()
	fsStore := fsBucket(t, dir)
	defer fsStore.Close()
	store := faulty.Wrap(fsStore, 1)
	start := func() *Broker {
		b := startBroker(t, filepath.Join(dir, "broker"), func(c *Config) { c.LogFlush = "os" })
		if err := b.EnableTiering(tierDeleteConfig(t, store)); err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := start()
	id, cl := tieredTopicInBucket(t, b, fsStore, "gone")
	store.SetRules(faulty.Rule{Ops: faulty.OpDelete, KeyPrefix: tiering.PartitionPrefix(id, 0)})
	if _, err := kadm.NewClient(newClient(t, b)).DeleteTopics(testCtx(t), "gone"); err != nil {
		t.Fatal(err)
	}
	waitTiered(t, "a delete of the topic's objects tried and refused", func() bool { return store.Injected(faulty.OpDelete) > 0 })
	before := topicObjects(t, fsStore, id)
	if before == 0 || len(b.meta.State().RemoteDeletions()) != 1 {
		t.Fatalf("%d objects left, pending deletions %+v", before, b.meta.State().RemoteDeletions())
	}
	cl.Close()
	b.Close()
	store.SetRules() // the bucket is well again
	b = start()
	// The record came back with the metadata log (unless the worker was
	// already through with it: it needs two passes, 50 ms apart).
	if got := b.meta.State().RemoteDeletions(); len(got) > 1 || len(got) == 1 && (got[0].TopicID != id || got[0].Partitions != 1) {
		t.Fatalf("after the restart, pending deletions %+v", got)
	}
	waitTiered(t, "the objects deleted after the restart, and the record", func() bool {
		return topicObjects(t, fsStore, id) == 0 && len(b.meta.State().RemoteDeletions()) == 0
	})
}

// TestTieredDeleteTopicLateUpload: an object of the deleted topic that
// lands after a pass found nothing left (a stale leader's upload in
// flight when the topic was deleted) is deleted by a later pass: the
// record of the pending deletion is kept for the grace, not dropped at
// the first empty pass.
func TestTieredDeleteTopicLateUpload(t *testing.T) {
	dir := t.TempDir()
	store := fsBucket(t, dir)
	defer store.Close()
	b := startBroker(t, filepath.Join(dir, "broker"), func(c *Config) { c.LogFlush = "os" })
	cfg := tierDeleteConfig(t, store)
	cfg.RemoteDeleteGrace = time.Hour
	if err := b.EnableTiering(cfg); err != nil {
		t.Fatal(err)
	}
	id, _ := tieredTopicInBucket(t, b, store, "late")
	if _, err := kadm.NewClient(newClient(t, b)).DeleteTopics(testCtx(t), "late"); err != nil {
		t.Fatal(err)
	}
	waitTiered(t, "a pass that found nothing of the deleted topic", func() bool { return b.tier().emptyDeletePasses.Load() > 0 })
	if n := topicObjects(t, store, id); n != 0 {
		t.Fatalf("%d objects left after an empty pass", n)
	}
	// A late upload: a segment object under the deleted partition's prefix.
	key := tiering.PartitionPrefix(id, 0) + "late-upload.log"
	if err := objectstore.PutBytes(context.Background(), store, key, []byte("late"), objectstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTiered(t, "the late object deleted", func() bool { return topicObjects(t, store, id) == 0 })
	if got := b.meta.State().RemoteDeletions(); len(got) != 1 || got[0].TopicID != id {
		t.Fatalf("pending deletions within the grace: %+v", got)
	}
}

// tieredTopicInBucket creates topic with tieredTopicConfigs on b, writes
// 3000 records to it, and waits until its objects are in store.
func tieredTopicInBucket(t *testing.T, b *Broker, store objectstore.Store, topic string) (metadata.UUID, *kgo.Client) {
	t.Helper()
	configs := map[string]*string{}
	for k, v := range tieredTopicConfigs {
		configs[k] = ptr(v)
	}
	createTopic(t, b, topic, 1, configs)
	tp, _ := b.meta.State().Topic(topic)
	cl := smallBatchClient(t, b)
	produceAll(t, cl, makeRecords(topic, 3000, topic))
	waitTiered(t, "objects in the bucket", func() bool { return topicObjects(t, store, tp.ID) > 5 })
	return tp.ID, cl
}

// TestDeleteRemoteOnlyForTieredTopics: on a broker that tiers, deleting a
// topic that never had remote storage records no remote deletion, so its
// DeleteTopic entry is the version 1 that older binaries read; a tiered
// topic's deletion records one.
func TestDeleteRemoteOnlyForTieredTopics(t *testing.T) {
	b, _, _ := startFolderTieredBroker(t)
	adm := kadm.NewClient(newClient(t, b))
	ctx := testCtx(t)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "plain"); err != nil {
		t.Fatal(err)
	}
	tiered := map[string]*string{}
	for k, v := range tieredTopicConfigs {
		tiered[k] = &v
	}
	if _, err := adm.CreateTopic(ctx, 2, 1, tiered, "tiered"); err != nil {
		t.Fatal(err)
	}
	from := b.meta.State().Version
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := b.meta.Watch(wctx, from)
	for _, name := range []string{"plain", "tiered"} {
		if r, err := adm.DeleteTopic(ctx, name); err != nil || r.Err != nil {
			t.Fatalf("delete %s: %v %v", name, err, r.Err)
		}
	}
	seen := map[string]*metadata.DeleteTopic{}
	for len(seen) < 2 {
		select {
		case c, ok := <-changes:
			if !ok {
				t.Fatal("watch ended")
			}
			if d, ok := c.Command.(*metadata.DeleteTopic); ok {
				seen[d.Name] = d
			}
		case <-ctx.Done():
			t.Fatalf("deletions seen: %v", seen)
		}
	}
	if d := seen["plain"]; d.DeleteRemote {
		t.Error("the deletion of a topic that never tiered records a remote deletion")
	} else if v := metadata.EncodeCommand(d)[1] & 0x7f; v != 1 {
		t.Errorf("DeleteTopic of a topic that never tiered encoded at version %d, want 1", v)
	}
	if !seen["tiered"].DeleteRemote {
		t.Error("the deletion of a tiered topic records no remote deletion")
	}
}
