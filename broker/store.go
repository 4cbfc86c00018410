package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/reqtime"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/metadata"
)

// store owns the broker's state: its metadata node (a Raft voter; a quorum
// of one for a single broker), its registration and heartbeats, and the
// partition logs this broker leads.
//
// Data directory:
//
//	<data>/meta/                 the metadata node (raft-wal log, snapshots)
//	<data>/logs/<topic>-<n>/     one hotlog per partition
//	<data>/logs/<topic>-<n>/topic_id   the topic id the directory belongs to
//	<data>/logs/<topic>-<n>.<ms>-stray/  a partition no longer placed here,
//	                             found at start, deleted later (stray.go)
//	<data>/logs/<topic>-<n>.<ms>-delete/ a partition removed from this broker
//	                             while it ran, deleted later (dir_delete.go)
//
// Partitions open lazily on first use (so a topic is usable as soon as its
// creation commits) and close when the metadata no longer lists them here.
type store struct {
	b           *Broker
	meta        *metadata.Node
	brokerEpoch int64
	faultOnce   sync.Once // fenceSelf's first call
	// storageFault is the first partition log failure (hotlog's OnFail):
	// the broker then fences itself (heartbeatLoop), as Kafka stops a
	// broker whose only log directory failed.
	storageFault atomic.Pointer[error]
	// incarnation is this registration's id (recordFeatureRanges).
	incarnation metadata.UUID
	fs          vfs.FS
	logsDir     string

	mu struct {
		sync.Mutex
		parts map[metadata.UUID]map[int32]*partition
		// dirs has an entry per partition directory (path) that a
		// partition is open on or being closed and renamed away from; the
		// channel is closed, and the entry removed, once the directory is
		// free. A partition of a topic re-created under the same name
		// waits on it before it opens (openLocked).
		dirs map[string]chan struct{}
		// opening has an entry per partition directory a log is being
		// opened on (outside the lock: partitions open in parallel);
		// the channel is closed when the attempt ends.
		opening map[string]chan struct{}
		// openFailed backs off a partition directory whose log failed
		// to open (a full disk, too many open files): the next attempt
		// not before next (openLocked).
		openFailed map[string]*openFailure
	}
	// deleting remembers the directories this process renamed for
	// deletion (<topic>-<n>.<ms>-delete, dir_delete.go) and when each is
	// due. Renames and the deletion loop's listing of logs/ hold it, so
	// the two agree on which -delete directories are this run's.
	deleting struct {
		sync.Mutex
		due map[string]time.Time // name under logsDir → when it is removed
	}
	deleteKick chan struct{} // capacity 1: wakes dirDeleteLoop after a rename

	pids struct {
		sync.Mutex
		next, end int64
	}

	repl *replicator // followers' fetchers and the leader's ISR loop

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func openStore(b *Broker) (*store, error) {
	cfg := &b.cfg
	s := &store{b: b, fs: cfg.LogFS, logsDir: filepath.Join(cfg.DataDir, "logs")}
	if s.fs == nil {
		s.fs = vfs.Default
	}
	s.mu.parts = make(map[metadata.UUID]map[int32]*partition)
	s.mu.dirs = make(map[string]chan struct{})
	s.mu.opening = make(map[string]chan struct{})
	s.mu.openFailed = make(map[string]*openFailure)
	s.deleting.due = make(map[string]time.Time)
	s.deleteKick = make(chan struct{}, 1)
	if err := os.MkdirAll(s.logsDir, 0o755); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	raftAddr := cfg.RaftAddr
	if raftAddr == "" {
		raftAddr = "127.0.0.1:0"
	}
	// A broker that is not in a non-empty voter list joins an existing
	// quorum: it bootstraps nothing, asks the voters to add it as an
	// observer (it receives the metadata log and votes in nothing, as a
	// Kafka broker that is not a controller) and waits until it hears from
	// the leader. `sediment cluster voters add` makes it a voter.
	joining := len(cfg.Voters) > 0 && !slices.ContainsFunc(cfg.Voters, func(p metadata.Peer) bool { return p.ID == cfg.NodeID })
	var raftTLS *tls.Config
	if cfg.RaftTLS {
		raftTLS = b.raftServerTLS()
	}
	meta, err := metadata.Open(metadata.Config{
		NodeID:    cfg.NodeID,
		Dir:       filepath.Join(cfg.DataDir, "meta"),
		RaftAddr:  raftAddr,
		Bootstrap: !joining,
		Peers:     cfg.Voters,
		ClusterID: cfg.ClusterID,
		// The node adds its own "node" attribute (b.log has one already).
		Logger: cfg.Logger.With("part", "metadata"),

		DisableAutoLeaderRebalance:         cfg.DisableAutoLeaderRebalance,
		LeaderImbalanceCheckInterval:       cfg.LeaderImbalanceCheckInterval,
		LeaderImbalancePerBrokerPercentage: cfg.LeaderImbalancePerBrokerPercentage,
		Dial: func(addr string, timeout time.Duration) (net.Conn, error) {
			nc, err := net.DialTimeout("tcp", b.peerAddress(addr), timeout)
			if err != nil || !cfg.RaftTLS {
				return nc, err
			}
			return b.raftClientTLS(nc, addr), nil
		},
		TLS: raftTLS,
	})
	if err != nil {
		return nil, err
	}
	// b.meta before any partition opens: their configs' broker-level
	// defaults are dynamic, in the metadata (configs.go topicConfigValue).
	s.meta, b.meta = meta, meta
	if joining {
		if err := waitToJoin(b, meta, cfg.JoinTimeout); err != nil {
			meta.Close()
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := meta.WaitForLeader(ctx); err != nil {
		meta.Close()
		return nil, fmt.Errorf("broker: metadata quorum: %w", err)
	}
	var listeners []metadata.Listener
	for _, l := range b.addrs {
		host, port, _ := strings.Cut(l.Advertised, ":")
		if i := strings.LastIndex(l.Advertised, ":"); i >= 0 {
			host, port = l.Advertised[:i], l.Advertised[i+1:]
		}
		p, _ := strconv.Atoi(port)
		listeners = append(listeners, metadata.Listener{Name: l.Name, Host: host, Port: int32(p), SecurityProtocol: protocolIDs[l.SecurityProtocol]})
	}
	// The epoch of this data directory's previous registration lets a
	// restarted broker take over its own session without waiting for it
	// to expire (another process with the same id would not know it).
	epochFile := filepath.Join(cfg.DataDir, "broker_epoch")
	prev := int64(-1)
	if raw, err := os.ReadFile(epochFile); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err == nil {
			prev = n
		}
	}
	// The same incarnation on every attempt: a retry after an outcome
	// unknown (the Raft leader changed while committing) is not a second
	// broker with this id.
	incarnation := metadata.NewUUID()
	res, waited, err := s.register(ctx, &metadata.RegisterBroker{
		BrokerID: cfg.NodeID, IncarnationID: incarnation, Listeners: listeners, PreviousBrokerEpoch: prev, Rack: cfg.Rack,
	})
	if err != nil {
		meta.Close()
		return nil, fmt.Errorf("broker: registering: %w", err)
	}
	if waited {
		// The wait for the old session may have used up the startup's
		// time: what follows gets its own.
		var cancelRest context.CancelFunc
		ctx, cancelRest = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancelRest()
	}
	s.brokerEpoch = res.BrokerEpoch
	// A voter that was down may still be replaying the metadata log: what
	// follows (stray directories, leaderships) needs the state as of the
	// registration.
	if _, err := meta.WaitForVersion(ctx, res.Version); err != nil {
		meta.Close()
		return nil, fmt.Errorf("broker: catching up with the metadata log: %w", err)
	}
	if err := writeFileSync(epochFile, []byte(strconv.FormatInt(res.BrokerEpoch, 10)+"\n")); err != nil {
		meta.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.incarnation = incarnation
	if err := retryMetadata(ctx, func() error { return s.heartbeat(ctx, false) }); err != nil {
		meta.Close()
		return nil, fmt.Errorf("broker: first heartbeat: %w", err)
	}
	s.waitForLeadership(ctx)
	// The state includes the registration (waited for above): a stray
	// directory is judged on the metadata as of now, never on an older
	// view (stray.go).
	s.renameStrayDirs(meta.State())
	if s.repl, err = newReplicator(s); err != nil {
		meta.Close()
		return nil, err
	}
	s.reconcile(meta.State())
	lctx, lcancel := context.WithCancel(context.Background())
	s.cancel = lcancel
	s.wg.Add(6)
	go pprof.Do(lctx, pprof.Labels("sediment", "token-sweep"), func(ctx context.Context) {
		defer s.wg.Done()
		s.b.tokenSweepLoop(ctx)
	})
	go pprof.Do(lctx, pprof.Labels("sediment", "dir-delete"), func(ctx context.Context) {
		defer s.wg.Done()
		s.dirDeleteLoop(ctx)
	})
	go pprof.Do(lctx, pprof.Labels("sediment", "producer-snapshots"), func(ctx context.Context) {
		defer s.wg.Done()
		s.snapshotLoop(ctx)
	})
	go pprof.Do(lctx, pprof.Labels("sediment", "heartbeat"), func(ctx context.Context) {
		defer s.wg.Done()
		s.heartbeatLoop(ctx)
	})
	go pprof.Do(lctx, pprof.Labels("sediment", "metadata-watch"), func(ctx context.Context) {
		defer s.wg.Done()
		s.watchLoop(ctx)
	})
	go pprof.Do(lctx, pprof.Labels("sediment", "feature-ranges"), func(ctx context.Context) {
		defer s.wg.Done()
		s.recordFeatureRanges(ctx)
	})
	return s, nil
}

// registerDuplicateMargin is how long past the session timeout
// (broker.session.timeout.ms) a broker whose registration is refused as a
// duplicate goes on trying (store.register).
var registerDuplicateMargin = 5 * time.Second

// register proposes this broker's registration, retrying while the
// metadata quorum has no leader (retryMetadata) and while the registration
// is refused as a duplicate (ErrDuplicateBroker: another incarnation of
// this id has a live session). The second is what a broker restarted
// before its previous session expired meets when it cannot name that
// session (its broker_epoch file is stale, as after a restore, or missing):
// as Kafka's BrokerLifecycleManager, which retries its registration while
// the controller answers DUPLICATE_BROKER_REGISTRATION, it waits for the
// old session to expire (the controller then fences it) and registers.
// It gives up once the session timeout plus registerDuplicateMargin has
// passed since the first refusal: a session live that long is renewed, by
// another broker running with this node id. waited reports whether it
// waited for a session.
func (s *store) register(ctx context.Context, cmd *metadata.RegisterBroker) (res metadata.Result, waited bool, err error) {
	var first time.Time // the first refusal as a duplicate
	for {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if waited {
			// ctx bounds the startup; the wait is bounded below.
			actx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		}
		err = retryMetadata(actx, func() error {
			var err error
			res, err = s.meta.Propose(actx, cmd)
			return err
		})
		cancel()
		if !errors.Is(err, metadata.ErrDuplicateBroker) {
			if err == nil && waited {
				s.b.log.Info("registered: the previous session of this broker id expired", "broker", cmd.BrokerID, "waited", time.Since(first).Round(time.Millisecond))
			}
			return res, waited, err
		}
		timeout := s.meta.State().SessionTimeout()
		now := time.Now()
		if !waited {
			waited, first = true, now
			s.b.log.Info("registration refused: another registration of this broker id has a live session; waiting for it to expire (a previous run of this broker that stopped without a clean shutdown and whose broker_epoch file is stale or missing, or another broker running with the same node id)",
				"broker", cmd.BrokerID, "session_timeout", timeout, "gives_up_after", timeout+registerDuplicateMargin, "err", err)
		}
		deadline := first.Add(timeout + registerDuplicateMargin)
		if !now.Before(deadline) {
			return res, waited, fmt.Errorf("%w: still live after %v; is another broker running with node id %d?", err, now.Sub(first).Round(time.Millisecond), cmd.BrokerID)
		}
		time.Sleep(min(250*time.Millisecond, deadline.Sub(now)))
	}
}

// recordFeatureRanges records the feature ranges this registration serves,
// which UpdateFeatures checks every registered broker's against
// (features.go). It retries until it is recorded: a Raft leader that
// predates the command cannot decode it (a rolling upgrade); until then the
// broker counts at the baseline.
func (s *store) recordFeatureRanges(ctx context.Context) {
	// With the metadata level this binary reads (metadata/gate.go).
	supported := append(s.b.supportedFeatures(), metadata.FeatureRange{Name: metadata.MetadataLevelFeature, Min: 0, Max: metadata.MetadataLevel})
	cmd := &metadata.BrokerFeatures{BrokerID: s.b.cfg.NodeID, IncarnationID: s.incarnation, Supported: supported}
	backoff := 100 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := s.meta.Propose(pctx, cmd)
		cancel()
		if err == nil || errors.Is(err, metadata.ErrStaleBrokerEpoch) || errors.Is(err, metadata.ErrUnknownBroker) {
			return // recorded, or this registration is gone
		}
		s.b.log.Debug("recording the broker's feature ranges", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		// At most 5 s: while the metadata leader runs an older binary
		// the record is refused, and the gate (metadata/gate.go) waits
		// for it once a newer leader is elected.
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *store) heartbeat(ctx context.Context, wantFenced bool) error {
	_, err := s.meta.Propose(ctx, &metadata.BrokerHeartbeat{BrokerID: s.b.cfg.NodeID, BrokerEpoch: s.brokerEpoch, WantFenced: wantFenced})
	return err
}

// openFailure is a partition directory whose log failed to open: the next
// attempt is not before next; delay doubles from 1 s to 1 min.
type openFailure struct {
	next  time.Time
	delay time.Duration
	err   error
}

// errOpenBackoff: a partition's log failed to open a moment ago and is not
// tried again yet (the error wraps the last failure).
var errOpenBackoff = errors.New("broker: partition failed to open")

// fenceSelf is what a broker does once its metadata state machine stopped
// (an entry this binary cannot read, written by a newer one: Node.Err):
// its view of the cluster is frozen, so it must neither lead nor serve.
// It stops serving clients (the Kafka listeners close: clients and
// followers go to the brokers that know the new leaders) and fences itself
// through the metadata leader, which takes it out of every ISR and moves
// its leaderships away, as the session timeout would but at once; its
// heartbeats then keep it fenced. Kafka gates new metadata encodings on
// metadata.version; without that gate, an unread entry fenced nothing and
// the stale broker kept heartbeating, stayed in every ISR and was handed
// leaderships it could not serve (a rolling-upgrade review). It reports
// whether the fence is applied; until then the caller tries again.
//
// A partition log that failed (a write or an fsync error past the point
// where the append could be taken back: what the page cache holds is no
// longer known to be on disk) does the same, with storage set: Kafka marks
// such a log directory offline, and a broker whose only log directory is
// offline stops, so that its leaderships move to the in-sync replicas.
// Before, the broker stayed the partition's leader, refusing every append,
// with the other replicas in the ISR unable to take over (an operator
// review: writes failed for good until a restart).
func (s *store) fenceSelf(ctx context.Context, fault error, storage bool) bool {
	s.faultOnce.Do(func() {
		if storage {
			s.b.log.Error("a partition log failed after an I/O error: this broker fences itself and stops serving clients, as Kafka stops a broker whose log directory failed (its leaderships move to the in-sync replicas); check the disk, then restart it (the logs are recovered from what is on disk)", "err", fault)
		} else {
			s.b.log.Error("the metadata state machine stopped: this broker fences itself and stops serving clients until it runs a binary that reads the metadata log; upgrade it and restart", "err", fault)
		}
		s.b.stopServing()
	})
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := s.meta.Propose(fctx, &metadata.FenceBroker{BrokerID: s.b.cfg.NodeID, BrokerEpoch: s.brokerEpoch})
	if err != nil && ctx.Err() == nil {
		s.b.log.Debug("fencing this broker: not applied yet", "err", err)
		return false
	}
	return err == nil
}

// waitForLeadership waits (bounded by ctx) until the controller has given
// back the partitions this broker can lead: registering fenced the previous
// incarnation, which took its leaderships away.
func (s *store) waitForLeadership(ctx context.Context) {
	me := s.b.cfg.NodeID
	for {
		st := s.meta.State()
		pending := false
		for _, t := range st.Topics() {
			for _, p := range t.Partitions {
				if p.Leader == metadata.NoLeader && slices.Contains(p.Replicas, me) {
					pending = true
				}
			}
		}
		if !pending {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		s.meta.WaitForVersion(wctx, st.Version+1)
		cancel()
		if ctx.Err() != nil {
			s.b.log.Warn("partitions still without a leader after startup")
			return
		}
	}
}

func (s *store) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	unregistered, fenced := false, false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if fault := s.meta.Err(); fault != nil && !fenced {
				fenced = s.fenceSelf(ctx, fault, false)
				continue
			}
			if p := s.storageFault.Load(); p != nil && !fenced {
				fenced = s.fenceSelf(ctx, *p, true)
				continue
			}
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := s.heartbeat(hctx, fenced)
			cancel()
			switch {
			case err == nil || ctx.Err() != nil:
				unregistered = false
			case errors.Is(err, metadata.ErrUnknownBroker):
				// UnregisterBroker removed this registration: the
				// broker is out of the cluster until it starts again.
				if !unregistered {
					s.b.log.Error("this broker's registration was removed (UnregisterBroker): it leads nothing and no longer heartbeats; restart it to rejoin the cluster", "broker", s.b.cfg.NodeID)
				}
				unregistered = true
			default:
				s.b.log.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

// snapshotLoop writes producer-state snapshots of partitions that grew, so
// that opening a log after a crash replays only the tail after the latest
// snapshot (clean shutdowns snapshot every partition on close). Every
// ProducerIDExpirationCheckInterval it also forgets the producers idle for
// ProducerIDExpiration (producer.id.expiration.ms) and snapshots at once
// the partitions that lost some, so the state and its snapshots stay
// bounded and a restart does not bring them back.
func (s *store) snapshotLoop(ctx context.Context) {
	t := time.NewTicker(s.b.cfg.ProducerSnapshotInterval)
	defer t.Stop()
	x := time.NewTicker(s.b.cfg.ProducerIDExpirationCheckInterval)
	defer x.Stop()
	last := map[*partition]int64{}
	for {
		expire := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-x.C:
			expire = true
		}
		seen := map[*partition]bool{}
		cutoff := time.Now().Add(-s.b.cfg.ProducerIDExpiration).UnixMilli()
		for _, p := range s.partitions() {
			seen[p] = true
			if expire {
				p.mu.Lock()
				expired := p.mu.producers.expire(cutoff)
				if expired > 0 {
					p.mu.snapshotEnd = -1
				}
				p.mu.Unlock()
				if expired == 0 {
					continue
				}
				last[p] = -1 // snapshot the smaller state now
			}
			end := p.log.LogEndOffset()
			if end == last[p] {
				continue
			}
			if err := p.snapshotProducers(); err != nil {
				if !errors.Is(err, hotlog.ErrClosed) && !errors.Is(err, errStateRebuilding) {
					s.b.log.Warn("producer snapshot failed", "topic", p.topic, "partition", p.id, "err", err)
				}
				continue // the next tick tries again
			}
			last[p] = end
		}
		for p := range last {
			if !seen[p] {
				delete(last, p)
			}
		}
	}
}

// watchLoop closes partitions that the metadata no longer places here.
func (s *store) watchLoop(ctx context.Context) {
	ch := s.meta.Watch(ctx, s.meta.State().Version)
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
			s.reconcile(s.meta.State())
		}
	}
}

func (s *store) reconcile(st *metadata.State) {
	me := s.b.cfg.NodeID
	var drop []*partition
	s.mu.Lock()
	for id, ps := range s.mu.parts {
		t, ok := st.TopicByID(id)
		for idx, p := range ps {
			if !ok || idx >= int32(len(t.Partitions)) || !slices.Contains(t.Partitions[idx].Replicas, me) {
				// p.dir stays in s.mu.dirs until it is renamed away.
				drop = append(drop, p)
				delete(ps, idx)
			}
		}
		if len(ps) == 0 {
			delete(s.mu.parts, id)
		}
	}
	s.mu.Unlock()
	for _, p := range drop {
		// A deleted topic, or a replica moved away (a reassignment): the
		// data goes, as in Kafka, after deleted-log-delete-delay.
		reason := "topic deleted"
		if t, exists := st.TopicByID(p.topicID); exists {
			reason = "no such partition"
			if p.id < int32(len(t.Partitions)) {
				reason = fmt.Sprintf("replica moved away (replicas %v)", t.Partitions[p.id].Replicas)
			}
			s.b.log.Info("replica removed from this broker", "topic", p.topic, "partition", p.id)
		}
		s.closePartition(p, reason)
	}
	s.reconcileReplicas(st)
	s.applyLogConfigs(st)        // AlterConfigs: segment.bytes, segment.ms, … of open logs
	s.b.cleaner.sync(st)         // AlterConfigs: new cleanup/retention settings
	s.b.applyDynamicSettings(st) // dynamic_configs.go: cleaner threads, connection limits, …
}

// applyLogConfigs gives every open log the settings its topic's configs now
// ask for (hotlog.Log.SetConfig: they apply from the next append), as Kafka
// applies an altered topic config to the live log.
func (s *store) applyLogConfigs(st *metadata.State) {
	for _, p := range s.partitions() {
		t, ok := st.TopicByID(p.topicID)
		if !ok {
			continue
		}
		want := s.b.hotlogConfig(t.Configs)
		p.logConfig.Lock()
		if want != p.logConfig.applied {
			p.log.SetConfig(want)
			p.logConfig.applied = want
			s.b.log.Debug("topic config applied to the open log", "topic", p.topic, "partition", p.id,
				"segment_bytes", want.SegmentBytes, "segment_ms", want.SegmentMs)
		}
		p.logConfig.Unlock()
	}
}

// closePartition closes p's log. A non-empty removeReason (why the
// metadata no longer places p here) then renames its directory for
// deletion (dir_delete.go). Either way p's directory is free afterwards
// (s.mu.dirs).
func (s *store) closePartition(p *partition, removeReason string) {
	s.b.cleaner.unregister(p) // waits for a clean in progress; before the log closes
	if err := p.snapshotProducers(); err != nil && !errors.Is(err, hotlog.ErrClosed) && !errors.Is(err, errStateRebuilding) {
		s.b.log.Warn("producer snapshot failed", "topic", p.topic, "partition", p.id, "err", err)
	}
	if err := p.log.Close(); err != nil {
		s.b.log.Warn("closing partition log", "topic", p.topic, "partition", p.id, "err", err)
	}
	// Waiters (acks=all) see that this broker leads no more.
	p.repl.mu.Lock()
	p.repl.mu.tracker = nil
	p.repl.mu.Unlock()
	p.wake()
	if removeReason != "" {
		if err := s.renameForDelete(p.dir, removeReason, time.Now()); err != nil {
			// The live name must not keep the old data: a topic
			// re-created under it would find it.
			s.b.log.Warn("renaming a removed partition's directory failed; deleting it now", "dir", p.dir, "err", err)
			if err := os.RemoveAll(p.dir); err != nil {
				s.b.log.Warn("removing deleted partition", "dir", p.dir, "err", err)
			}
		}
	}
	s.mu.Lock()
	if ch := s.mu.dirs[p.dir]; ch != nil {
		close(ch)
		delete(s.mu.dirs, p.dir)
	}
	s.mu.Unlock()
}

func parseUUID(s string) (metadata.UUID, bool) {
	var u metadata.UUID
	s = strings.ReplaceAll(s, "-", "")
	if len(s) != 32 {
		return u, false
	}
	for i := 0; i < 16; i++ {
		n, err := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
		if err != nil {
			return u, false
		}
		u[i] = byte(n)
	}
	return u, true
}

// partition returns the partition by topic name, opening its log if
// needed. st is the metadata snapshot the request is served from.
func (s *store) partition(st *metadata.State, topic string, idx int32) (*partition, error) {
	t, ok := st.Topic(topic)
	if !ok {
		return nil, errUnknownTopicOrPartition
	}
	return s.open(t, idx)
}

func (s *store) partitionByID(st *metadata.State, id [16]byte, idx int32) (*partition, error) {
	t, ok := st.TopicByID(metadata.UUID(id))
	if !ok {
		return nil, errUnknownTopicOrPartition
	}
	return s.open(t, idx)
}

func (s *store) topicIDKnown(st *metadata.State, id [16]byte) bool {
	_, ok := st.TopicByID(metadata.UUID(id))
	return ok
}

func (s *store) open(t *metadata.Topic, idx int32) (*partition, error) {
	if idx < 0 || idx >= int32(len(t.Partitions)) {
		return nil, errUnknownTopicOrPartition
	}
	if mp := t.Partitions[idx]; mp.Leader != s.b.cfg.NodeID {
		return nil, errNotLeader
	}
	// Version 0: apply the assignment only to a newly opened partition;
	// reconcile applies later changes in order.
	return s.openReplica(t, idx, 0)
}

// openReplica opens a partition this broker is a replica of and applies
// its assignment as of version.
func (s *store) openReplica(t *metadata.Topic, idx int32, version uint64) (*partition, error) {
	p, err := s.openLocked(t, idx)
	if err != nil {
		return nil, err
	}
	p.applyAssignment(s.b.cfg.NodeID, t.Partitions[idx], version)
	return p, nil
}

func (s *store) openLocked(t *metadata.Topic, idx int32) (*partition, error) {
	mp := t.Partitions[idx]
	if !slices.Contains(mp.Replicas, s.b.cfg.NodeID) {
		return nil, errNotLeader
	}
	dir := filepath.Join(s.logsDir, fmt.Sprintf("%s-%d", t.Name, idx))
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if p := s.mu.parts[t.ID][idx]; p != nil {
			return p, nil
		}
		if s.b.isStopping() {
			return nil, errNotLeader
		}
		// The request's state may predate a deletion that reconcile has
		// already acted on: do not bring the partition back.
		if _, ok := s.meta.State().TopicByID(t.ID); !ok {
			return nil, errUnknownTopicOrPartition
		}
		if opening := s.mu.opening[dir]; opening != nil {
			// Another goroutine opens it: take what it opened.
			s.mu.Unlock()
			select {
			case <-opening:
			case <-s.b.stopping:
			}
			s.mu.Lock()
			continue
		}
		busy := s.mu.dirs[dir]
		if busy == nil {
			break
		}
		// The partition of a topic of the same name, deleted since (t
		// is its re-creation), is still open or being closed: reconcile,
		// which has the deletion to apply, closes it and renames its
		// directory away. Never touch a directory a log is open on.
		s.mu.Unlock()
		select {
		case <-busy:
		case <-s.b.stopping:
		}
		s.mu.Lock()
	}
	now := time.Now()
	if f := s.mu.openFailed[dir]; f != nil && now.Before(f.next) {
		return nil, fmt.Errorf("%w (again in %v): %w", errOpenBackoff, f.next.Sub(now).Round(time.Millisecond), f.err)
	}
	// The log opens outside the lock (its recovery, the producer state's
	// replay and the files' fsyncs), so that partitions open in parallel
	// (reconcileReplicas) and lookups of open ones do not wait.
	opening := make(chan struct{})
	s.mu.opening[dir] = opening
	s.mu.Unlock()
	if h := s.b.testHooks.partitionOpening; h != nil {
		h(t.Name, idx)
	}
	p, err := s.openDir(t, idx, dir)
	s.mu.Lock()
	delete(s.mu.opening, dir)
	close(opening)
	if err != nil {
		// Tried again after a backoff, not at every metadata change
		// (every heartbeat commits one): a full disk or a low open-file
		// limit made each change rescan and log every partition that
		// could not open, thousands of lines a second (an operator
		// review).
		f := s.mu.openFailed[dir]
		if f == nil {
			f = &openFailure{}
			s.mu.openFailed[dir] = f
		}
		f.delay = min(max(2*f.delay, time.Second), time.Minute)
		f.next, f.err = time.Now().Add(f.delay), err
		s.b.log.Warn("opening a partition failed; retrying", "topic", t.Name, "partition", idx, "in", f.delay, "err", err)
		return nil, err
	}
	delete(s.mu.openFailed, dir)
	if _, ok := s.meta.State().TopicByID(t.ID); !ok || s.b.isStopping() {
		// Deleted, or the broker stops, while it opened (reconcile or
		// close has looked at the open partitions without it).
		if err := p.log.Close(); err != nil {
			s.b.log.Warn("closing partition log", "topic", p.topic, "partition", p.id, "err", err)
		}
		if s.b.isStopping() {
			return nil, errNotLeader
		}
		// Reconcile deleted the topic without this partition (not
		// open yet): its directory goes as a deleted partition's does.
		// Before, it stayed under its live name, found only by the next
		// start's stray check (a topic deleted just after its creation
		// left 24 of 36 directories).
		if err := s.renameForDelete(dir, "topic deleted", time.Now()); err != nil {
			s.b.log.Warn("renaming a deleted partition's directory failed; deleting it now", "dir", dir, "err", err)
			if err := os.RemoveAll(dir); err != nil {
				s.b.log.Warn("removing deleted partition", "dir", dir, "err", err)
			}
		}
		return nil, errUnknownTopicOrPartition
	}
	if s.mu.parts[t.ID] == nil {
		s.mu.parts[t.ID] = make(map[int32]*partition)
	}
	s.mu.parts[t.ID][idx] = p
	s.mu.dirs[dir] = make(chan struct{})
	s.b.cleaner.register(p, p.topicConfigs(s.meta.State())) // compaction and retention
	return p, nil
}

// openDir opens partition idx of t on dir (free: openLocked reserved it).
func (s *store) openDir(t *metadata.Topic, idx int32, dir string) (*partition, error) {
	mp := t.Partitions[idx]
	idFile := filepath.Join(dir, "topic_id")
	want := t.ID.String() + "\n"
	raw, err := os.ReadFile(idFile)
	if err == nil && strings.TrimSpace(string(raw)) != t.ID.String() {
		// A directory left by an older topic of the same name, not open
		// when that topic was deleted.
		if err := s.renameForDelete(dir, "topic re-created with another id", time.Now()); err != nil {
			s.b.log.Warn("renaming an older topic's partition directory failed; deleting it now", "dir", dir, "err", err)
			if err := os.RemoveAll(dir); err != nil {
				return nil, err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if string(raw) != want {
		// Written once (a restart finds it and writes nothing: a
		// broker with thousands of partitions started with an fsync
		// each).
		if err := writeFileSync(idFile, []byte(want)); err != nil {
			return nil, err
		}
	}
	logCfg := s.b.hotlogConfig(t.Configs)
	var p *partition
	l, err := hotlog.Open(hotlog.Options{
		FS:     s.fs,
		Dir:    dir,
		Config: logCfg,
		Logger: s.b.log.With("topic", t.Name, "partition", idx),
		// The producer state at every segment's end, for restarts and
		// for tiering (uploaded with the segment). Rolls happen only in
		// appends, which come through p once it is set below.
		RollSnapshot: func() []byte {
			if p == nil {
				return nil
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.mu.producers.marshal()
		},
		// A background fsync of acks=1 appends, which come through p
		// once it is set below, finished (replication.go).
		OnDurable: func(end int64) {
			if p != nil {
				p.onDurable(end)
			}
		},
		OnFail: func(err error) {
			err = fmt.Errorf("%s-%d: %w", t.Name, idx, err)
			s.storageFault.CompareAndSwap(nil, &err)
		},
	})
	if err != nil {
		return nil, err
	}
	p = &partition{topic: t.Name, topicID: t.ID, id: idx, dir: dir, log: l, producerIDExpiration: s.b.cfg.ProducerIDExpiration,
		logger: s.b.log.With("topic", t.Name, "partition", idx), isrChanges: s.b.metrics.isrCounters()}
	p.logConfig.applied = logCfg
	p.mu.leaderEpoch = mp.LeaderEpoch
	p.mu.producers = newProducerState()
	p.mu.waiters = make(map[chan struct{}]struct{})
	if err := p.loadProducers(); err != nil {
		l.Close()
		return nil, err
	}
	p.resetDurableEnd()
	if len(mp.Replicas) == 1 {
		// A single replica: everything in the log is committed.
		l.SetHighWatermark(l.LogEndOffset())
	}
	return p, nil
}

func writeFileSync(name string, data []byte) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (b *Broker) hotlogConfig(set map[string]string) hotlog.Config {
	c := hotlog.Config{
		SegmentBytes:       configInt(b, set, "segment.bytes"),
		SegmentMs:          time.Duration(configInt(b, set, "segment.ms")) * time.Millisecond,
		IndexIntervalBytes: int(configInt(b, set, "index.interval.bytes")),
		MaxIndexBytes:      int(configInt(b, set, "segment.index.bytes")),
		MaxMessageBytes:    int32(configInt(b, set, "max.message.bytes")),
		// Capped (34 years) so that Long.MAX_VALUE does not overflow.
		FileDeleteDelay: time.Duration(min(configInt(b, set, "file.delete.delay.ms"), 1<<40)) * time.Millisecond,
	}
	// Unset (Long.MAX_VALUE) windows stay 0: no limit.
	if ms := configInt(b, set, "message.timestamp.before.max.ms"); ms > 0 && ms < 1<<40 {
		c.TimestampBeforeMax = time.Duration(ms) * time.Millisecond
	}
	if ms := configInt(b, set, "message.timestamp.after.max.ms"); ms > 0 && ms < 1<<40 {
		c.TimestampAfterMax = time.Duration(ms) * time.Millisecond
	}
	switch b.cfg.LogFlush {
	case "interval":
		c.Flush, c.FlushInterval = hotlog.FlushInterval, b.cfg.LogFlushInterval
	case "os":
		c.Flush = hotlog.FlushOS
	default:
		c.Flush = hotlog.FlushEveryCommit
	}
	return c
}

// openPartitions returns every open partition.
func (b *Broker) allPartitions() []*partition {
	if b.store == nil {
		return nil
	}
	s := b.store
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*partition
	for _, ps := range s.mu.parts {
		for _, p := range ps {
			out = append(out, p)
		}
	}
	return out
}

// producerID hands out producer ids from blocks allocated through the
// metadata log.
func (s *store) producerID(ctx context.Context) (int64, error) {
	s.pids.Lock()
	defer s.pids.Unlock()
	if s.pids.next >= s.pids.end {
		res, err := s.meta.Propose(ctx, &metadata.AllocateProducerIDs{BrokerID: s.b.cfg.NodeID, BrokerEpoch: s.brokerEpoch, Count: 1000})
		if err != nil {
			return -1, err
		}
		s.pids.next, s.pids.end = res.ProducerIDStart, res.ProducerIDStart+int64(res.ProducerIDCount)
	}
	id := s.pids.next
	s.pids.next++
	return id, nil
}

// propose commits a command and waits until the local state has applied it.
func (s *store) propose(ctx context.Context, cmd metadata.Command) (metadata.Result, *metadata.State, error) {
	defer reqtime.Wait(ctx)() // the quorum's work, not this request's
	res, err := s.meta.Propose(ctx, cmd)
	if err != nil {
		if errors.Is(err, metadata.ErrNoQuorum) || errors.Is(err, metadata.ErrClosed) {
			return res, nil, err
		}
		// Refused by the quorum's leader on its state (the topic
		// exists, ...), which this node may not have applied yet:
		// catch up, so that the caller sees what the refusal saw.
		st, serr := s.meta.Sync(ctx)
		if serr != nil {
			st = nil
		}
		return res, st, err
	}
	st, err := s.meta.WaitForVersion(ctx, res.Version)
	return res, st, err
}

// close snapshots producer state, closes every log (each writes its clean
// shutdown marker) and then the metadata node.
func (s *store) close() error {
	s.cancel()
	s.wg.Wait()
	if s.repl != nil {
		s.repl.close()
	}
	// Opens in flight see the broker stopping and close what they open.
	for {
		s.mu.Lock()
		var opening chan struct{}
		for _, ch := range s.mu.opening {
			opening = ch
			break
		}
		s.mu.Unlock()
		if opening == nil {
			break
		}
		<-opening
	}
	s.mu.Lock()
	var ps []*partition
	for _, m := range s.mu.parts {
		for _, p := range m {
			ps = append(ps, p)
		}
	}
	s.mu.parts = map[metadata.UUID]map[int32]*partition{}
	s.mu.Unlock()
	// Each close seals the active segment and writes the producer
	// snapshot and the clean-shutdown marker, with their fsyncs: in
	// parallel, as Kafka's num.recovery.threads.per.data.dir does, or a
	// broker with thousands of partitions takes minutes to stop on a disk
	// whose fsync takes milliseconds.
	parallelDo(len(ps), partitionIOWorkers, func(i int) { s.closePartition(ps[i], "") })
	return s.meta.Close()
}

// partitionIOWorkers bounds the partitions opened or closed at once at
// startup and shutdown: their work is mostly waiting for fsyncs.
const partitionIOWorkers = 8

// parallelDo calls f(0..n-1) on at most workers goroutines and returns
// when all calls have.
func parallelDo(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(n, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// isVoter reports whether id is a voter in meta's Raft configuration.
func isVoter(meta *metadata.Node, id int32) bool {
	voters, _ := meta.Voters()
	return slices.ContainsFunc(voters, func(p metadata.Peer) bool { return p.ID == id })
}

// waitToJoin asks the quorum to add this node as an observer
// (metadata.JoinAsObserver: any voter of Voters takes the request to the
// leader) and waits until the leader contacts it. A quorum that refuses or
// does not know the request (an older version) leaves the node waiting to be
// added by hand (`sediment cluster voters add`), logged every 10 s. At most
// timeout [5m].
func waitToJoin(b *Broker, meta *metadata.Node, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	deadline := time.Now().Add(timeout)
	addWith := fmt.Sprintf("sediment cluster voters add %d %s", b.cfg.NodeID, meta.Addr())
	byHand := false
	for {
		if _, ok := meta.Leader(); ok {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(10*time.Second, time.Until(deadline)))
		if !byHand {
			switch err := meta.JoinAsObserver(ctx); {
			case err == nil && isVoter(meta, b.cfg.NodeID):
				// Made a voter after its first start: the quorum
				// keeps it one (adding an observer leaves a
				// voter's vote), whatever --voters says.
				b.log.Info("rejoined the metadata quorum as a voter (--voters is read on a node's first start only)")
			case err == nil:
				b.log.Info("added to the metadata quorum as an observer", "make_it_a_voter_with", addWith)
			case errors.Is(err, metadata.ErrInvalidRequest):
				byHand = true
				b.log.Warn("the metadata quorum did not add this broker as an observer", "err", err)
			default:
				b.log.Info("asking the metadata quorum to add this broker as an observer", "err", err)
			}
		}
		if byHand {
			b.log.Info("waiting to be added to the metadata quorum", "add_with", addWith)
		}
		err := meta.WaitForLeader(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker: not added to the metadata quorum within %s (run `%s` on the cluster): %w",
				timeout, addWith, err)
		}
	}
}

// opened returns the partition's log if this broker has it open (as leader
// or follower), without opening it.
func (s *store) opened(id metadata.UUID, idx int32) *partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.parts[id][idx]
}
