package e2e

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker"
	"github.com/sediment-io/sediment/internal/failpoint"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/fs"
	"github.com/sediment-io/sediment/tiering"
)

// TestReplicationTiered is issue #7's tiered-storage points with real
// processes: three brokers share one bucket (a local folder), a topic with
// replication factor 3, 16 KiB segments, remote storage on and no local
// retention; an idempotent acks=all producer writes keyed records
// throughout.
//
//   - Three times, the partition leader is SIGKILLed while an upload is in
//     flight: the test arms the failpoint between a round's PUTs and its
//     CommitRemoteLog (internal/failpoint, tiering.FailpointBeforeCommit),
//     waits until the leader stops there (its segment objects are in the
//     bucket, uncommitted) and after the committed remote end has moved
//     since the previous fault, and kills it. The new leader must continue
//     from the committed remote end: the end moves on, and the manifest's
//     segments stay contiguous from offset 0 (no gap, no overlap).
//   - Then the leader is SIGSTOPped at the same point; the cluster fences it
//     (session timeout), elects a new leader, which commits uploads of its
//     own; the old leader is SIGCONTed and lets its commit go: the metadata
//     log refuses it (stale leader epoch, its log says so), and none of its
//     objects ever enters the manifest; the cleaner deletes them.
//   - Followers apply local retention only below the committed remote end:
//     at every check their local log start is at most the committed end,
//     and at the end they have deleted every segment wholly below it and
//     kept the rest.
//   - Finally a consumer from offset 0 (the old part served from the
//     bucket) reads every acknowledged record exactly once, in order.
func TestReplicationTiered(t *testing.T) {
	start := time.Now()
	bucketDir := filepath.Join(t.TempDir(), "bucket")
	fpDir := t.TempDir()
	c := NewCluster(t, 3, "--bucket-dir", bucketDir, "--tier-orphan-grace", "1s", "--tier-clean-interval", "1s")
	for _, b := range c.Brokers {
		b.env = append(b.env, failpoint.EnvDir+"="+fpDir)
	}
	c.StartAll()
	// At the end SIGKILL (this test checks crashes, not clean shutdowns,
	// which take seconds each): runs before the cluster's own cleanups.
	t.Cleanup(func() {
		for _, b := range c.Brokers {
			b.Kill()
		}
	})
	t.Logf("cluster up (%.1f s)", time.Since(start).Seconds())
	store, err := fs.New(bucketDir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	const topic = "tiered-chaos"
	adm := kadm.NewClient(c.Client(t))
	tc := &tierCheck{t: t, c: c, topic: topic, stopped: map[int]bool{}}
	// The preferred leader is not the controller (the Raft leader), so
	// that the SIGSTOP below deposes a partition leader whose late commit
	// reaches the metadata log and is refused there for its epoch (a paused
	// Raft leader's commit is cut short by its lost Raft leadership first).
	ctrl := tc.controller()
	replicas := []int32{}
	for _, b := range c.Brokers {
		if int32(b.NodeID) != ctrl {
			replicas = append(replicas, int32(b.NodeID))
		}
	}
	replicas = append(replicas, ctrl)
	tc.createTopic(replicas, map[string]string{"min.insync.replicas": "2", "segment.bytes": "16384",
		"remote.storage.enable": "true", "local.retention.bytes": "0", "retention.ms": "-1"})
	c.WaitFullISR(t, adm, topic, 30*time.Second)
	kp := startKeyedProducer(t, c, topic)
	defer kp.stop()

	var orphans []tiering.BeforeCommit // the killed or fenced leaders' uncommitted rounds

	// A late commit of a deposed leader: SIGSTOP between its PUTs and its
	// commit. The preferred leader leads with a full ISR (the topic is new),
	// so only the pause moves leadership.
	tc.waitPreferredLeader()
	tc.waitRemoteEndPast(0, "the first commit")
	victim, bc := tc.pauseLeaderBeforeCommit(fpDir, store, true)
	before := tc.committed()
	wasController := tc.controller() == int32(victim.NodeID)
	t.Logf("zombie (%.1f s): leader %d (epoch %d) paused before committing manifest v%d [%d, %d) (%d new segments in the bucket); SIGSTOP",
		time.Since(start).Seconds(), victim.NodeID, bc.LeaderEpoch, bc.ExpectedVersion+1, bc.StartOffset, bc.EndOffset, len(bc.NewStems))
	victim.signalOnly(syscall.SIGSTOP)
	tc.stopped[victim.NodeID] = true
	waitFor(t, 60*time.Second, "the cluster to fence the paused leader and elect another", func() bool {
		l := tc.leaderBroker()
		return l != nil && l != victim
	})
	t.Logf("zombie (%.1f s): broker %d leads now", time.Since(start).Seconds(), tc.leaderBroker().NodeID)
	waitFor(t, 60*time.Second, "the new leader to commit uploads", func() bool {
		st := tc.committed()
		return st.ManifestVersion > bc.ExpectedVersion && st.RemoteEndOffset > before.RemoteEndOffset
	})
	newLeader := tc.committed()
	if newLeader.ManifestKey == bc.ManifestKey {
		t.Fatalf("the paused leader's manifest %s was committed", bc.ManifestKey)
	}
	t.Logf("zombie (%.1f s): the new leader committed manifest v%d up to %d; SIGCONT the old one", time.Since(start).Seconds(),
		newLeader.ManifestVersion, newLeader.RemoteEndOffset)
	refused := fmt.Sprintf("commit manifest v%d: tiering: leader epoch fenced", bc.ExpectedVersion+1)
	// Only if the controller moved to the paused broker after all: its
	// Raft leadership, lost while it was stopped, cuts the commit short.
	lostRaft := fmt.Sprintf("commit manifest v%d: metadata: not the raft leader", bc.ExpectedVersion+1)
	tc.resume(fpDir)
	victim.signalOnly(syscall.SIGCONT)
	delete(tc.stopped, victim.NodeID)
	waitFor(t, 60*time.Second, "the resumed leader's late commit to be refused (fenced by its epoch)", func() bool {
		return strings.Contains(victim.Log(), refused) || (wasController && strings.Contains(victim.Log(), lostRaft))
	})
	how := "by its leader epoch"
	if !strings.Contains(victim.Log(), refused) {
		how = "by its lost Raft leadership (it was the controller)"
	}
	t.Logf("zombie (%.1f s): its late commit was refused %s", time.Since(start).Seconds(), how)
	orphans = append(orphans, bc)
	lastEnd := tc.committed().RemoteEndOffset
	tc.checkFollowers()

	// SIGKILLs of the leader between its PUTs and its commit; the killed
	// broker restarts while the next round goes on.
	const kills = 3
	var restarting *Broker
	restarted := make(chan error, 1)
	joinRestart := func() {
		if restarting != nil {
			if err := <-restarted; err != nil {
				t.Fatalf("broker %d did not come back: %v", restarting.NodeID, err)
			}
			restarting = nil
		}
	}
	defer joinRestart()
	for i := 1; i <= kills; i++ {
		tc.waitRemoteEndPast(lastEnd, fmt.Sprintf("kill %d: the committed remote end to move past %d", i, lastEnd))
		victim, bc := tc.pauseLeaderBeforeCommit(fpDir, store, false)
		before := tc.committed()
		t.Logf("kill %d (%.1f s): leader %d paused before committing [%d, %d) (%d new segments in the bucket; committed end %d, manifest v%d); %d acknowledged; SIGKILL",
			i, time.Since(start).Seconds(), victim.NodeID, bc.StartOffset, bc.EndOffset, len(bc.NewStems), before.RemoteEndOffset, before.ManifestVersion, kp.count())
		joinRestart() // two brokers down would stop acks=all writes
		victim.Kill()
		tc.resume(fpDir)
		orphans = append(orphans, bc)
		base := kp.count()
		waitFor(t, 60*time.Second, "writes acknowledged by the new leader", func() bool { return kp.count() > base+100 })
		restarting = victim
		go func() { restarted <- victim.start() }()
		lastEnd = before.RemoteEndOffset
		tc.checkFollowers()
	}
	tc.waitRemoteEndPast(lastEnd, "the committed remote end to move after the last kill")
	joinRestart()

	// The end: stop writing, let everything sealed reach the bucket.
	t.Logf("end (%.1f s): %d acknowledged", time.Since(start).Seconds(), kp.count())
	kp.stop()
	c.WaitFullISR(t, adm, topic, 60*time.Second)
	var final broker.TierPartitionStatus
	var m *tiering.Manifest
	waitFor(t, 60*time.Second, "a contiguous manifest from 0 with every orphan cleaned and followers trimmed", func() bool {
		final = tc.committed()
		if final.ManifestKey == "" {
			return false
		}
		m = tc.readManifest(store, final.ManifestKey)
		if m == nil || tc.objects(store, m) != tc.referenced(m) {
			return false
		}
		return tc.followersTrimmed(final.RemoteEndOffset)
	})
	checkContiguous(t, m)
	stems := map[string]bool{}
	for _, seg := range m.Segments {
		stems[seg.Stem] = true
		for _, k := range seg.Keys() {
			if _, err := store.Head(context.Background(), k); err != nil {
				t.Errorf("the manifest names %s: %v", k, err)
			}
		}
	}
	for _, o := range orphans {
		for _, st := range o.NewStems {
			if stems[st] {
				t.Errorf("segment %s of an uncommitted round (epoch %d) is in the manifest", st, o.LeaderEpoch)
			}
		}
		if o.ManifestKey == final.ManifestKey {
			t.Errorf("the uncommitted manifest %s is the committed one", o.ManifestKey)
		}
	}
	leader := tc.leaderBroker()
	if st, ok := tc.status(leader); !ok || st.LocalStartOffset == 0 {
		t.Fatalf("the leader still holds offset 0 locally (%+v): the consumer would not read from the bucket", st)
	}
	t.Logf("end (%.1f s): manifest and followers checked; consuming", time.Since(start).Seconds())
	checkAcked(t, c, topic, kp)
	t.Logf("%d remote segments [%d, %d), manifest v%d; %d uncommitted rounds left out; %.1f s", len(m.Segments), m.StartOffset,
		m.EndOffset, m.Version, len(orphans), time.Since(start).Seconds())

	tc.disableDeletesRemoteLog(adm, store, m, kp)
	t.Logf("remote storage off, remote log deleted, a new leader checked; %.1f s", time.Since(start).Seconds())
}

// disableDeletesRemoteLog (KIP-950) turns remote storage off with
// remote.log.delete.on.disable on the replicated partition whose manifest
// was m: the leader deletes the remote log, so the bucket keeps none of the
// partition's objects but the new (empty) manifest, and the log start is
// the leader's local log start. The leader is then SIGKILLed: the new
// leader's log start is no lower (it never reads the deleted objects), and
// every acknowledged record from it on reads back once, in order.
func (tc *tierCheck) disableDeletesRemoteLog(adm *kadm.Client, store *fs.Store, m *tiering.Manifest, kp *keyedProducer) {
	t := tc.t
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := tc.committed()
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "remote.storage.enable", Value: kadm.StringPtr("false")},
		{Name: "remote.log.delete.on.disable", Value: kadm.StringPtr("true")}}, tc.topic)
	if err == nil {
		err = rs[0].Err
	}
	if err != nil {
		t.Fatalf("disable remote storage with remote.log.delete.on.disable: %v", err)
	}
	var deleted broker.TierPartitionStatus
	waitFor(t, 60*time.Second, "the remote log deleted: no segment left, only the new manifest in the bucket", func() bool {
		deleted = tc.committed()
		return deleted.ManifestVersion > before.ManifestVersion && deleted.RemoteSegments == 0 && tc.objects(store, m) == 1
	})
	leader := tc.leaderBroker()
	if leader == nil {
		t.Fatal("no leader every broker agrees on")
	}
	lst, ok := tc.status(leader)
	start := tc.startOffset(adm)
	if !ok || start != lst.LocalStartOffset || start <= 0 || lst.RemoteStorageEnable {
		t.Fatalf("after the deletion: log start %d, the leader's status %+v", start, lst)
	}
	leader.Kill()
	waitFor(t, 60*time.Second, "another leader", func() bool {
		l := tc.leaderBroker()
		return l != nil && l != leader
	})
	var after int64
	waitFor(t, 30*time.Second, "the new leader's log start", func() bool {
		after = tc.startOffset(adm)
		return after >= 0
	})
	if after < start {
		t.Fatalf("log start %d after the leader moved, %d before: below it the records are deleted", after, start)
	}
	kp.mu.Lock()
	from := &keyedProducer{acked: map[string]ackedRecord{}, failed: kp.failed, lastErr: kp.lastErr}
	for v, where := range kp.acked {
		if where.offset >= after {
			from.acked[v] = where
		}
	}
	kp.mu.Unlock()
	t.Logf("log start %d (leader %d), %d after it moved; %d acknowledged records from there", start, leader.NodeID, after, len(from.acked))
	checkAcked(t, tc.c, tc.topic, from)
}

// startOffset is ListOffsets earliest of the partition (-1 on an error).
func (tc *tierCheck) startOffset(adm *kadm.Client) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offs, err := adm.ListStartOffsets(ctx, tc.topic)
	if err != nil {
		return -1
	}
	o, ok := offs.Lookup(tc.topic, 0)
	if !ok || o.Err != nil {
		return -1
	}
	return o.Offset
}

// tierCheck observes one tiered partition (partition 0 of topic) across the
// cluster.
type tierCheck struct {
	t       *testing.T
	c       *Cluster
	topic   string
	stopped map[int]bool // SIGSTOPped brokers: not asked
}

var tierHTTP = &http.Client{Timeout: 5 * time.Second}

// status is broker b's GET /v1/tier/status row for the partition (the
// remote pointer as b's metadata has it).
func (tc *tierCheck) status(b *Broker) (broker.TierPartitionStatus, bool) {
	resp, err := tierHTTP.Get("http://" + b.AdminAddr + "/v1/tier/status?topic=" + tc.topic)
	if err != nil {
		return broker.TierPartitionStatus{}, false
	}
	defer resp.Body.Close()
	var st broker.TierStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return broker.TierPartitionStatus{}, false
	}
	for _, p := range st.Partitions {
		if p.Partition == 0 {
			return p, true
		}
	}
	return broker.TierPartitionStatus{}, false
}

// live is the brokers running and not paused.
func (tc *tierCheck) live() []*Broker {
	var out []*Broker
	for _, b := range tc.c.Brokers {
		b.mu.Lock()
		running := b.cmd != nil
		b.mu.Unlock()
		if running && !tc.stopped[b.NodeID] {
			out = append(out, b)
		}
	}
	return out
}

// committed is the newest remote pointer any live broker knows.
func (tc *tierCheck) committed() broker.TierPartitionStatus {
	var best broker.TierPartitionStatus
	for _, b := range tc.live() {
		if st, ok := tc.status(b); ok && st.ManifestVersion > best.ManifestVersion {
			best = st
		}
	}
	return best
}

func (tc *tierCheck) waitRemoteEndPast(end int64, what string) {
	tc.t.Helper()
	waitFor(tc.t, 60*time.Second, what, func() bool { return tc.committed().RemoteEndOffset > end })
}

// leaderBroker is the partition leader as every live broker's own metadata
// names it (nil while they disagree).
func (tc *tierCheck) leaderBroker() *Broker {
	leader := int32(-1)
	for _, b := range tc.live() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
		if err != nil {
			return nil
		}
		st, err := leaderSeenBy(tc.t, cl, tc.topic)
		cl.Close()
		if err != nil || st.Leader < 0 || (leader >= 0 && st.Leader != leader) {
			return nil
		}
		leader = st.Leader
	}
	if leader < 0 {
		return nil
	}
	return tc.c.Broker(leader)
}

// controller is the Raft leader every live broker names (it fails the test
// if they do not agree within a while).
func (tc *tierCheck) controller() int32 {
	tc.t.Helper()
	ctrl := int32(-1)
	waitFor(tc.t, 30*time.Second, "every broker to name the same controller", func() bool {
		ctrl = -1
		for _, b := range tc.live() {
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
			if err != nil {
				return false
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl.SeedBrokers()[0])
			cancel()
			cl.Close()
			if err != nil || resp.ControllerID < 0 || (ctrl >= 0 && resp.ControllerID != ctrl) {
				return false
			}
			ctrl = resp.ControllerID
		}
		return ctrl >= 0
	})
	return ctrl
}

// createTopic creates the one-partition topic with the given replicas
// (the first is the preferred leader) and configs, and waits for a full
// ISR.
func (tc *tierCheck) createTopic(replicas []int32, configs map[string]string) {
	t := tc.t
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = tc.topic, -1, -1
	ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	ra.Partition, ra.Replicas = 0, replicas
	rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	for k, v := range configs {
		rc := kmsg.NewCreateTopicsRequestTopicConfig()
		rc.Name, rc.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, rc)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, tc.c.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].ErrorCode; code != 0 {
		t.Fatalf("create %s: error %d (%v)", tc.topic, code, resp.Topics[0].ErrorMessage)
	}
	tc.c.WaitFullISR(t, kadm.NewClient(tc.c.Client(t)), tc.topic, 30*time.Second)
}

// waitPreferredLeader waits until every live broker's metadata names the
// first replica as the leader, with every replica in the ISR.
func (tc *tierCheck) waitPreferredLeader() {
	tc.t.Helper()
	waitFor(tc.t, 60*time.Second, "the preferred leader with a full ISR", func() bool {
		for _, b := range tc.live() {
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
			if err != nil {
				return false
			}
			st, err := leaderSeenBy(tc.t, cl, tc.topic)
			cl.Close()
			if err != nil || len(st.Replicas) == 0 || st.Leader != st.Replicas[0] || len(st.ISR) != len(st.Replicas) {
				return false
			}
		}
		return true
	})
}

// pauseLeaderBeforeCommit arms the failpoint before CommitRemoteLog, waits
// until a broker stops there, checks that it is the partition leader and
// that the objects of the segments it is about to commit are in the bucket
// (an upload in flight), and returns it with what it was committing. It
// stays paused until resume. Unless strict, leadership may have moved away
// from it meanwhile (a restarted preferred leader taking over at a leader
// imbalance check: 300 s after the first kill by default, so not within
// this test's run, but the test does not rely on that).
func (tc *tierCheck) pauseLeaderBeforeCommit(fpDir string, store *fs.Store, strict bool) (*Broker, tiering.BeforeCommit) {
	t := tc.t
	t.Helper()
	if err := os.WriteFile(filepath.Join(fpDir, tiering.FailpointBeforeCommit), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var paused string
	waitFor(t, 60*time.Second, "the leader to stop between its PUTs and its commit", func() bool {
		m, _ := filepath.Glob(filepath.Join(fpDir, tiering.FailpointBeforeCommit+".*.paused"))
		if len(m) > 0 {
			paused = m[0]
		}
		return paused != ""
	})
	pid, _ := strconv.Atoi(strings.Split(strings.TrimPrefix(filepath.Base(paused), tiering.FailpointBeforeCommit+"."), ".")[0])
	raw, err := os.ReadFile(paused)
	if err != nil {
		t.Fatal(err)
	}
	var bc tiering.BeforeCommit
	if err := json.Unmarshal(raw, &bc); err != nil {
		t.Fatalf("failpoint detail %q: %v", raw, err)
	}
	var victim *Broker
	for _, b := range tc.c.Brokers {
		b.mu.Lock()
		if b.cmd != nil && b.cmd.Process.Pid == pid {
			victim = b
		}
		b.mu.Unlock()
	}
	if victim == nil {
		t.Fatalf("process %d paused at the failpoint is none of the brokers", pid)
	}
	if bc.Topic != tc.topic || len(bc.NewStems) == 0 {
		t.Fatalf("broker %d paused committing %+v: want new segments of %s", victim.NodeID, bc, tc.topic)
	}
	// Stable leadership (strict): the paused broker leads and nothing newer
	// is committed. Otherwise leadership may have moved back to a restarted
	// preferred leader meanwhile: the paused round is then a deposed
	// leader's, which the test may kill all the same.
	leader, committed := tc.leaderBroker(), tc.committed()
	if committed.ManifestVersion < bc.ExpectedVersion {
		t.Fatalf("committed manifest v%d, below the v%d the paused leader read", committed.ManifestVersion, bc.ExpectedVersion)
	}
	if leader == victim && committed.ManifestVersion == bc.ExpectedVersion {
		for _, stem := range bc.NewStems {
			if _, err := store.Head(context.Background(), stem+tiering.SuffixLog); err != nil {
				t.Fatalf("a segment about to be committed is not in the bucket: %v", err)
			}
		}
	} else if strict {
		leaderID := -1
		if leader != nil {
			leaderID = leader.NodeID
		}
		t.Fatalf("broker %d paused before committing v%d, but the leader is %d and v%d is committed", victim.NodeID,
			bc.ExpectedVersion+1, leaderID, committed.ManifestVersion)
	} else {
		t.Logf("leadership moved while broker %d paused (committed v%d): its round is a deposed leader's", victim.NodeID,
			committed.ManifestVersion)
	}
	return victim, bc
}

// resume removes the paused file(s): a paused process goes on.
func (tc *tierCheck) resume(fpDir string) {
	m, _ := filepath.Glob(filepath.Join(fpDir, tiering.FailpointBeforeCommit+".*.paused"))
	for _, p := range m {
		os.Remove(p)
	}
}

// checkFollowers: no live follower's local log starts above the committed
// remote end (local retention only below it; the follower has everything
// from there on). The remote end is taken from a second status, read after
// the first one's local start: a follower's round may move both in between.
func (tc *tierCheck) checkFollowers() {
	t := tc.t
	t.Helper()
	for _, b := range tc.live() {
		st, ok := tc.status(b)
		if !ok || st.Leader {
			continue
		}
		again, ok := tc.status(b)
		if !ok {
			continue
		}
		if end := max(again.RemoteEndOffset, 0); st.LocalStartOffset > end {
			t.Fatalf("follower %d: local log start %d above the remote end %d it knows", b.NodeID, st.LocalStartOffset, end)
		}
	}
}

// followersTrimmed: every follower knows the committed remote end remoteEnd,
// holds local segments from at most there on, and none wholly below it (its
// retention ran). (The segment files are listed before the status is read:
// the remote end it knows only grows.)
func (tc *tierCheck) followersTrimmed(remoteEnd int64) bool {
	for _, b := range tc.live() {
		bases := segmentBases(b, tc.topic, 0)
		st, ok := tc.status(b)
		if !ok {
			return false
		}
		if st.Leader {
			continue
		}
		if len(bases) == 0 || bases[0] > max(st.RemoteEndOffset, 0) {
			tc.t.Fatalf("follower %d: local segments %v, remote end %d: data above the remote end deleted",
				b.NodeID, bases, st.RemoteEndOffset)
		}
		if st.RemoteEndOffset != remoteEnd || bases[0] == 0 || (len(bases) > 1 && bases[1] <= remoteEnd) {
			return false // its retention has not run since the last commit
		}
	}
	return true
}

// segmentBases lists the base offsets of a replica's local segments.
func segmentBases(b *Broker, topic string, partition int32) []int64 {
	ents, _ := os.ReadDir(filepath.Join(b.DataDir, "logs", fmt.Sprintf("%s-%d", topic, partition)))
	var out []int64
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".log"); ok {
			if v, err := strconv.ParseInt(n, 10, 64); err == nil {
				out = append(out, v)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (tc *tierCheck) readManifest(store *fs.Store, key string) *tiering.Manifest {
	b, err := objectstore.ReadAll(context.Background(), store, key, 64<<20)
	if err != nil {
		return nil
	}
	m, err := tiering.DecodeManifest(b)
	if err != nil {
		tc.t.Fatalf("manifest %s: %v", key, err)
	}
	return m
}

// objects counts the partition's objects in the bucket.
func (tc *tierCheck) objects(store *fs.Store, m *tiering.Manifest) int {
	var id [16]byte
	if raw, err := hex.DecodeString(m.TopicID); err != nil || len(raw) != len(id) {
		tc.t.Fatalf("topic id %q: %v", m.TopicID, err)
	} else {
		copy(id[:], raw)
	}
	l, err := store.List(context.Background(), tiering.PartitionPrefix(id, m.Partition), "")
	if err != nil {
		return -1
	}
	return len(l.Objects)
}

// referenced counts the objects the manifest names, itself included.
func (tc *tierCheck) referenced(m *tiering.Manifest) int {
	n := 1
	for _, s := range m.Segments {
		n += len(s.Keys())
	}
	return n
}

// checkContiguous: the segments cover [StartOffset, EndOffset) = [0, end)
// once each, in order.
func checkContiguous(t *testing.T, m *tiering.Manifest) {
	t.Helper()
	if m.StartOffset != 0 || len(m.Segments) == 0 {
		t.Fatalf("manifest v%d starts at %d with %d segments; want 0", m.Version, m.StartOffset, len(m.Segments))
	}
	next := int64(0)
	for _, s := range m.Segments {
		if s.BaseOffset != next {
			t.Fatalf("manifest v%d: segment %s covers [%d, %d), want it to start at %d (a gap or an overlap)", m.Version, s.Stem,
				s.BaseOffset, s.EndOffset, next)
		}
		next = s.EndOffset
	}
	if next != m.EndOffset {
		t.Fatalf("manifest v%d: segments end at %d, the manifest at %d", m.Version, next, m.EndOffset)
	}
}
