package metadata

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// fsyncRate measures this machine's limit for a durable log: small appends,
// each followed by fsync, in dir.
func fsyncRate(b *testing.B, dir string) float64 {
	f, err := os.Create(filepath.Join(dir, "fsync-probe"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 512)
	const n = 200
	start := time.Now()
	for range n {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return n / time.Since(start).Seconds()
}

// BenchmarkClusterCommits: committed commands per second on a 3-voter
// cluster over loopback TCP, 64 concurrent proposers on the leader sending
// broker heartbeats and ISR changes (half each). Raft batches concurrent
// proposals into one append and one fsync per voter, so the figure is set
// beside the fsyncs per second this disk does (ratio-of-fsync > 1 is the
// batching at work).
func BenchmarkClusterCommits(b *testing.B) {
	const (
		workers       = 256
		perIteration  = 10000
		numPartitions = workers
	)
	// The production timeouts (1 s heartbeat and election, 500 ms lease),
	// not the tests' fast ones: on a loaded 2-core machine a leader that
	// misses a 250 ms lease steps down mid-run and the proposals in flight
	// fail, which is not the figure this measures.
	c := newCluster(b, 3, func(cfg *Config) {
		cfg.Logger = testLogger(b)
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout, cfg.CommitTimeout = 0, 0, 0, 0
	})
	leader := c.leader()
	epochs := make([]int64, 4)
	for id := int32(1); id <= 3; id++ {
		r := mustPropose(b, leader, &RegisterBroker{BrokerID: id, IncarnationID: NewUUID(), PreviousBrokerEpoch: -1})
		epochs[id] = r.BrokerEpoch
		mustPropose(b, leader, &BrokerHeartbeat{BrokerID: id, BrokerEpoch: r.BrokerEpoch})
	}
	res := mustPropose(b, leader, &CreateTopic{Name: "bench", NumPartitions: numPartitions, ReplicationFactor: 3})
	st, err := leader.WaitForVersion(testContext(b, 10*time.Second), res.Version)
	if err != nil {
		b.Fatal(err)
	}
	topic, _ := st.TopicByID(res.TopicID)
	type part struct {
		p      *Partition
		le, pe int32
		shrunk bool
	}
	parts := make([]*part, numPartitions)
	for i, p := range topic.Partitions {
		parts[i] = &part{p: p, le: p.LeaderEpoch, pe: p.PartitionEpoch}
	}
	limit := fsyncRate(b, b.TempDir())
	ctx := context.Background()

	var total time.Duration
	var commits int64
	b.ResetTimer()
	for range b.N {
		var next, failed atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pt := parts[w]
				for {
					i := next.Add(1)
					if i > perIteration {
						return
					}
					var cmd Command
					if i%2 == 0 {
						id := int32(i%3 + 1)
						cmd = &BrokerHeartbeat{BrokerID: id, BrokerEpoch: epochs[id]}
					} else {
						isr := pt.p.Replicas
						if !pt.shrunk {
							isr = []int32{pt.p.Leader}
						}
						cmd = &ChangeLeaderAndISR{TopicID: topic.ID, Partition: pt.p.Index, LeaderEpoch: pt.le, PartitionEpoch: pt.pe, Leader: pt.p.Leader, ISR: isr}
					}
					r, err := leader.Propose(ctx, cmd)
					if err != nil {
						failed.Add(1)
						continue
					}
					if cl, ok := cmd.(*ChangeLeaderAndISR); ok {
						_ = cl
						pt.le, pt.pe, pt.shrunk = r.LeaderEpoch, r.PartitionEpoch, !pt.shrunk
					}
				}
			}()
		}
		wg.Wait()
		total += time.Since(start)
		commits += perIteration
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d proposals failed", n)
		}
	}
	b.StopTimer()
	rate := float64(commits) / total.Seconds()
	b.ReportMetric(rate, "commits/s")
	b.ReportMetric(limit, "fsyncs/s")
	b.ReportMetric(rate/limit, "ratio-of-fsync")
}

// bigState builds the benchmark state: brokers across 5 racks and
// partitions in topics of 100, replication factor 3, each with a remote-log
// pointer, through the state machine's own commands.
func bigState(b *testing.B, brokers, partitions int) *State {
	s := newState()
	apply := func(c Command) Result {
		next := s.clone()
		r, err := c.apply(next, s.Version+1)
		if err != nil {
			b.Fatalf("%s: %v", c.Type(), err)
		}
		next.Version++
		s = next
		return r
	}
	for id := range brokers {
		r := apply(&RegisterBroker{BrokerID: int32(id), IncarnationID: NewUUID(), Rack: fmt.Sprintf("rack-%d", id%5),
			Listeners: []Listener{{Name: "PLAINTEXT", Host: fmt.Sprintf("broker-%d.example.internal", id), Port: 9092}}})
		apply(&BrokerHeartbeat{BrokerID: int32(id), BrokerEpoch: r.BrokerEpoch, NowMs: 1})
	}
	const perTopic = 100
	for t := 0; t < partitions/perTopic; t++ {
		a := make([][]int32, perTopic)
		for p := range a {
			first := (t*perTopic + p) % brokers
			a[p] = []int32{int32(first), int32((first + 1) % brokers), int32((first + 2) % brokers)}
		}
		r := apply(&CreateTopic{Name: fmt.Sprintf("topic-%05d", t), TopicID: NewUUID(), Assignment: a,
			Configs: map[string]string{"retention.ms": "31536000000", "remote.storage.enable": "true"}})
		for p := range perTopic {
			apply(&CommitRemoteLog{TopicID: r.TopicID, Partition: int32(p), ManifestKey: fmt.Sprintf("%s/%d/manifest", r.TopicID, p),
				StartOffset: 0, EndOffset: 1_000_000})
		}
	}
	return s
}

// BenchmarkSnapshot100k: state size, snapshot time (encode and write
// through raft's FileSnapshotStore, fsync included) and restore time (open,
// read, decode, install in the FSM) for 100,000 partitions on 10 brokers.
// The machine's own figure beside it is the time to read the same file
// with os.ReadFile (restore-x-read is the restore cost in multiples of that).
func BenchmarkSnapshot100k(b *testing.B) {
	st := bigState(b, 10, 100_000)
	if st.NumPartitions() != 100_000 {
		b.Fatalf("%d partitions", st.NumPartitions())
	}
	// For comparison, the same state as JSON (what a JSON snapshot with a
	// version field would cost).
	type jsonState struct {
		Version uint64
		Brokers []*Broker
		Topics  []*Topic
		Leases  []*Lease
	}
	jstart := time.Now()
	js, err := json.Marshal(jsonState{Version: st.Version, Brokers: st.Brokers(), Topics: st.Topics(), Leases: st.Leases()})
	if err != nil {
		b.Fatal(err)
	}
	jencode := time.Since(jstart)
	jstart = time.Now()
	var jback jsonState
	if err := json.Unmarshal(js, &jback); err != nil {
		b.Fatal(err)
	}
	jdecode := time.Since(jstart)

	dir := b.TempDir()
	store, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	var snapTotal, restoreTotal, readTotal time.Duration
	var size int64
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		sink, err := store.Create(raft.SnapshotVersionMax, uint64(i+1), 1, raft.Configuration{}, 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := (&fsmSnapshot{st: st}).Persist(sink); err != nil {
			b.Fatal(err)
		}
		snapTotal += time.Since(start)

		metas, err := store.List()
		if err != nil || len(metas) == 0 {
			b.Fatal(err)
		}
		size = metas[0].Size
		start = time.Now()
		if _, err := os.ReadFile(filepath.Join(dir, "snapshots", metas[0].ID, "state.bin")); err != nil {
			b.Fatal(err)
		}
		readTotal += time.Since(start)

		start = time.Now()
		_, rc, err := store.Open(metas[0].ID)
		if err != nil {
			b.Fatal(err)
		}
		f := newFSM(testLogger(b), nil)
		if err := f.Restore(rc); err != nil {
			b.Fatal(err)
		}
		restoreTotal += time.Since(start)
		if f.current().NumPartitions() != 100_000 {
			b.Fatal("restored state differs")
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(size), "state-bytes")
	b.ReportMetric(snapTotal.Seconds()/n*1000, "snapshot-ms")
	b.ReportMetric(restoreTotal.Seconds()/n*1000, "restore-ms")
	b.ReportMetric(readTotal.Seconds()/n*1000, "file-read-ms")
	b.ReportMetric(restoreTotal.Seconds()/readTotal.Seconds(), "restore-x-read")
	b.ReportMetric(float64(len(js)), "json-bytes")
	b.ReportMetric(jencode.Seconds()*1000, "json-encode-ms")
	b.ReportMetric(jdecode.Seconds()*1000, "json-decode-ms")
}
