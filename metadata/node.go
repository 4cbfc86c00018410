package metadata

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

// Peer is a voter: its node id and Raft address.
type Peer struct {
	ID   int32
	Addr string
}

// Config configures a Node. Zero durations take the defaults shown.
type Config struct {
	NodeID int32
	// Dir holds the Raft log (raft-wal, under wal/) and snapshots (snapshots/).
	Dir string
	// RaftAddr is the listen address ("127.0.0.1:0" picks a port; Addr tells
	// which). AdvertiseAddr, if set, is what other voters dial.
	RaftAddr      string
	AdvertiseAddr string
	// Bootstrap creates a new cluster when Dir holds no Raft state: of Peers,
	// or of this node alone when Peers is empty (a quorum of one). It is a
	// no-op on restart.
	Bootstrap bool
	Peers     []Peer
	// ClusterID is recorded by the first leader when the state has none; a
	// random one is chosen when empty.
	ClusterID string
	Logger    *slog.Logger
	Now       func() time.Time // the proposer clock for timestamps in commands
	// Monotonic reads a monotonic clock whose readings are positive (the
	// controller takes a due time of 0 for none); default one second plus
	// the time since Open (time.Since, which Go measures on the monotonic
	// clock). The controller times broker sessions, liveness probes and
	// leader imbalance checks by it, never by Now, so a step of the wall
	// clock changes none of them.
	Monotonic func() time.Duration

	HeartbeatTimeout   time.Duration // raft; default 1s
	ElectionTimeout    time.Duration // raft; default 1s
	LeaderLeaseTimeout time.Duration // raft; default 500ms
	CommitTimeout      time.Duration // raft; default 50ms
	SnapshotThreshold  uint64        // raft; entries between snapshots, default 8192
	SnapshotInterval   time.Duration // raft; default 2m
	TrailingLogs       uint64        // raft; entries kept after a snapshot, default 10240

	// ControllerInterval is how often the controller (on the leader) checks
	// sessions and leadership; default 250ms. DisableController turns it off.
	ControllerInterval time.Duration
	DisableController  bool
	// Automatic return of leadership to preferred replicas (Kafka's auto
	// leader rebalance, as its KRaft controller schedules it): once the
	// controller sees a partition led by another replica than its first
	// (or by none), it checks LeaderImbalanceCheckInterval later
	// (leader.imbalance.check.interval.seconds) [300s], and then elects
	// the preferred replica, where it is in the ISR and neither fenced nor
	// shutting down, of the partitions of every broker more than
	// LeaderImbalancePerBrokerPercentage (leader.imbalance.per.broker.percentage)
	// [10; negative: 0] of whose preferred partitions another replica (or
	// none) leads. DisableAutoLeaderRebalance is
	// auto.leader.rebalance.enable=false: leadership stays where it is
	// until an ElectLeaders request. Partitions with no leader get one at
	// once either way.
	DisableAutoLeaderRebalance         bool
	LeaderImbalanceCheckInterval       time.Duration
	LeaderImbalancePerBrokerPercentage int
	// Dial opens connections to other voters (Raft RPCs and forwarded
	// proposals) by the address in the voter configuration; default
	// net.DialTimeout. A broker uses it to reach peers through other
	// addresses (e.g. a TCP fault proxy in tests).
	Dial func(address string, timeout time.Duration) (net.Conn, error)
	// TLS, when set, is the server side of the transport: every accepted
	// connection (Raft RPCs and forwards alike) completes a TLS handshake
	// under it, bounded by 5 s, before its first byte is read. Set
	// ClientAuth to RequireAndVerifyClientCert (and VerifyConnection to
	// check who the peer is) and have Dial return TLS client connections
	// that present a certificate: mutual TLS between voters.
	TLS *tls.Config
	// WatchBuffer is how many recent changes are kept for watchers that lag;
	// default 4096.
	WatchBuffer int

	// beforeObserve, for tests, is called on raft's FSM goroutine with each
	// batch's changes before the session clock sees them (it may block:
	// entries then stay in the log, not yet applied).
	beforeObserve func([]Change)
	// rejoinAfter is how long a node with a Raft configuration goes
	// without a leader before it asks to be kept as an observer
	// (rejoinLoop); default 10s.
	rejoinAfter time.Duration
	// ObserverTimeout is how long the leader keeps in the configuration an
	// observer it cannot reach (watchPeers); default
	// DefaultObserverTimeout.
	ObserverTimeout time.Duration
}

// Node is one metadata voter: the Raft node, its state machine, the
// controller (active while it leads) and the API brokers use. All methods are
// safe for concurrent use.
type Node struct {
	cfg    Config
	logger *slog.Logger
	// hcWriter carries raft's log lines to logger (and throttles the
	// per-peer failures).
	hcWriter *slogWriter
	raft     *raft.Raft
	// raftReady is closed once raft is set; forwarded requests that arrive
	// while Open is still starting raft wait for it (transport.go).
	raftReady chan struct{}
	fsm       *fsm
	sessions  *sessionClock // filled by the FSM, read by the controller
	wal       *wal.WAL
	meta      *metadb.BoltMetaDB
	trans     *raft.NetworkTransport
	mux       *muxLayer
	fwd       forwarder
	// renewals orders the Raft appends of session renewals against the
	// controller's session fences (proposeLocalIf).
	renewals sync.Mutex

	ctx    context.Context
	cancel context.CancelFunc
	closed atomic.Bool
	// barrierTerm is the last term in which this node, as leader, applied
	// everything committed before it proposed (see proposeLocal).
	barrierTerm atomic.Uint64
	// clusterIDKept: the cluster id is in the Raft stable store
	// (recordClusterID).
	clusterIDKept atomic.Bool
	// nudges wakes nudgeLoop (one pending at most).
	nudges chan struct{}
	// goMu orders goroutine starts (read lock) before Close's wait (write
	// lock), so no goroutine is added to wg once Close waits on it.
	goMu sync.RWMutex
	wg   sync.WaitGroup

	connMu sync.Mutex
	conns  map[net.Conn]struct{}

	watch struct {
		sync.Mutex
		ring   []Change // recent changes, oldest first
		floor  uint64   // every change after floor is in ring
		notify chan struct{}
	}
}

// Open starts a node. With Bootstrap and no existing state it bootstraps the
// cluster (of Peers, or of itself alone).
func Open(cfg Config) (*Node, error) {
	if cfg.NodeID < 0 {
		return nil, fmt.Errorf("metadata: node id %d", cfg.NodeID)
	}
	if cfg.Dir == "" || cfg.RaftAddr == "" {
		return nil, errors.New("metadata: Config.Dir and Config.RaftAddr are required")
	}
	setDefaults(&cfg)
	n := &Node{cfg: cfg, logger: cfg.Logger.With("node", cfg.NodeID), conns: map[net.Conn]struct{}{}, nudges: make(chan struct{}, 1)}
	n.fwd.idle = map[string][]*fwdConn{}
	n.fwd.dial = cfg.Dial
	n.watch.notify = make(chan struct{})
	n.watch.ring = make([]Change, 0, 64)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.fsm = newFSM(n.logger, n.publish)
	n.sessions = newSessionClock(cfg.Monotonic)
	n.fsm.observe = n.sessions.observe
	if hook := cfg.beforeObserve; hook != nil {
		n.fsm.observe = func(changes []Change, restored bool) {
			hook(changes)
			n.sessions.observe(changes, restored)
		}
	}

	ok := false
	defer func() {
		if !ok {
			n.cancel()
			n.shutdown()
		}
	}()
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "wal"), 0o755); err != nil {
		return nil, err
	}
	n.hcWriter = newSlogWriter(n.logger)
	hlog := n.hcWriter.hclog()
	w, meta, err := openWAL(filepath.Join(cfg.Dir, "wal"), hlog, nil, 0)
	if errors.Is(err, ErrLogDamaged) {
		return nil, fmt.Errorf("%w; %s", err, logDamagedHelp(cfg.Dir))
	}
	if err != nil {
		return nil, fmt.Errorf("metadata: open raft log: %w", err)
	}
	n.wal, n.meta = w, meta
	if id, err := w.Get(stableClusterID); err == nil && len(id) > 0 {
		n.clusterIDKept.Store(true)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(cfg.Dir, "snapshots"), 2, hlog)
	if err != nil {
		return nil, fmt.Errorf("metadata: open snapshot store: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.RaftAddr)
	if err != nil {
		return nil, fmt.Errorf("metadata: listen: %w", err)
	}
	var advertise net.Addr = ln.Addr()
	if cfg.AdvertiseAddr != "" {
		if advertise, err = net.ResolveTCPAddr("tcp", cfg.AdvertiseAddr); err != nil {
			ln.Close()
			return nil, fmt.Errorf("metadata: advertise address: %w", err)
		}
	}
	n.mux = &muxLayer{ln: ln, advertise: advertise, dial: cfg.Dial, raftConns: make(chan net.Conn), closed: make(chan struct{})}
	n.raftReady = make(chan struct{})
	n.goTracked("accept", n.acceptLoop)
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: n.mux, MaxPool: 4, Timeout: 5 * time.Second, Logger: hlog,
		// One AppendEntries in flight per follower: no pipelined
		// replication. hashicorp/raft v1.8.0's pipeline deadlocks when its
		// response decoder stops (a follower's newer term, or an append it
		// refuses) while the send loop sends once more: the send waits on
		// a channel only the stopped decoder empties, and the pipeline is
		// closed only once the send returns. A leader then never sends that
		// follower another entry while its heartbeats keep it from an
		// election (grafana/pyroscope#5518 found the same), and Raft's
		// Shutdown waits for ever: a broker SIGTERMed right after handing
		// over the metadata leadership hung until SIGKILL (e2e
		// TestReplicationStrayAfterRestart, goroutine dump). Entries are
		// still batched, up to MaxAppendEntries an RPC.
		MaxRPCsInFlight: 1,
	})

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(strconv.Itoa(int(cfg.NodeID)))
	rc.Logger = hlog
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	// Not BatchApplyCh: with a buffered apply channel, futures still queued
	// at shutdown are never resolved (raft v1.8.0), which would strand their
	// waiters. The leader loop batches whatever is waiting anyway.
	rc.BatchApplyCh = false
	rc.MaxAppendEntries = 512
	// A leader that demotes itself to observer (RemoveVoter) steps down and
	// goes on as a follower; raft's default shuts the node down.
	rc.ShutdownOnRemove = false
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}

	if cfg.Bootstrap {
		existing, err := raft.HasExistingState(w, w, snaps)
		if err != nil {
			return nil, fmt.Errorf("metadata: %w", err)
		}
		if !existing {
			peers := cfg.Peers
			if len(peers) == 0 {
				peers = []Peer{{ID: cfg.NodeID, Addr: advertise.String()}}
			}
			var conf raft.Configuration
			for _, p := range peers {
				conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter,
					ID: raft.ServerID(strconv.Itoa(int(p.ID))), Address: raft.ServerAddress(p.Addr)})
			}
			if err := raft.BootstrapCluster(rc, w, w, snaps, n.trans, conf); err != nil {
				return nil, fmt.Errorf("metadata: bootstrap: %w", err)
			}
		}
	}
	r, err := raft.NewRaft(rc, n.fsm, w, w, snaps, n.trans)
	if err != nil {
		return nil, fmt.Errorf("metadata: start raft: %w", err)
	}
	n.raft = r
	close(n.raftReady)
	n.goTracked("nudge", n.nudgeLoop)
	n.goTracked("rejoin", n.rejoinLoop)
	n.goTracked("peers", n.watchPeers)
	if !cfg.DisableController {
		n.goTracked("controller", newController(n).run)
	}
	ok = true
	return n, nil
}

func setDefaults(c *Config) {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Monotonic == nil {
		c.Monotonic = monotonicSince(time.Now().Add(-time.Second))
	}
	if c.Dial == nil {
		c.Dial = dialTCP
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, time.Second)
	def(&c.ElectionTimeout, time.Second)
	def(&c.LeaderLeaseTimeout, 500*time.Millisecond)
	def(&c.CommitTimeout, 50*time.Millisecond)
	def(&c.SnapshotInterval, 2*time.Minute)
	def(&c.ControllerInterval, 250*time.Millisecond)
	def(&c.rejoinAfter, 10*time.Second)
	def(&c.ObserverTimeout, DefaultObserverTimeout)
	c.LeaderImbalanceCheckInterval, c.LeaderImbalancePerBrokerPercentage = LeaderImbalanceDefaults(c.LeaderImbalanceCheckInterval, c.LeaderImbalancePerBrokerPercentage)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 10240
	}
	if c.WatchBuffer <= 0 {
		c.WatchBuffer = 4096
	}
}

// Addr is the address other voters dial to reach this node.
func (n *Node) Addr() string { return n.mux.advertise.String() }

// ID is this node's id.
func (n *Node) ID() int32 { return n.cfg.NodeID }

// State returns the latest applied state. It may lag the leader; see Stale.
func (n *Node) State() *State { return n.fsm.current() }

// Err returns the error that stopped the state machine, if any (an entry this
// binary cannot decode), else nil.
func (n *Node) Err() error { return n.fsm.err() }

// RefuseEntriesForTest makes this node's state machine take every committed
// command that refuse returns an error for as one it cannot decode, as a
// binary that predates the command's encoding does: it stops (Err). For
// tests of what a cluster does about such a node.
func (n *Node) RefuseEntriesForTest(refuse func(Command) error) { n.fsm.refuse.Store(&refuse) }

// IsLeader reports whether this node is the Raft leader (and so runs the
// controller).
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the current leader's id and address, if one is known.
func (n *Node) Leader() (Peer, bool) {
	addr, id := n.raft.LeaderWithID()
	if addr == "" {
		return Peer{}, false
	}
	nid, err := strconv.ParseInt(string(id), 10, 32)
	if err != nil {
		return Peer{}, false
	}
	return Peer{ID: int32(nid), Addr: string(addr)}, true
}

// Stale reports whether State may be behind the cluster: no leader is known,
// or (on a follower) the leader has not been heard from for longer than the
// election timeout. A leader that loses its quorum steps down within the
// leader lease timeout, after which it too reports stale.
func (n *Node) Stale() bool {
	switch n.raft.State() {
	case raft.Leader:
		return false
	case raft.Follower:
		if _, ok := n.Leader(); !ok {
			return true
		}
		return time.Since(n.raft.LastContact()) > n.cfg.ElectionTimeout
	default:
		return true
	}
}

// WaitForLeader waits until a leader is known; ErrNoQuorum when ctx ends first.
func (n *Node) WaitForLeader(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if n.closed.Load() {
			return ErrClosed
		}
		if _, ok := n.Leader(); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: no leader: %w", ErrNoQuorum, ctx.Err())
		case <-n.ctx.Done():
			return ErrClosed
		case <-t.C:
		}
	}
}

// Propose commits cmd and returns its result once it is applied on the
// leader; the local State may catch up a moment later (use WaitForVersion to
// read your own writes). On a follower the command is forwarded to the
// leader. A rejection is returned as an error wrapping one of the Err*
// sentinels. If no leader commits it before ctx ends, the error wraps
// ErrNoQuorum and ctx's error; a leader change while the command was in
// flight gives ErrNotLeader (the outcome is then unknown).
func (n *Node) Propose(ctx context.Context, cmd Command) (Result, error) {
	if need := RequiredLevel(cmd); need > 0 {
		if err := n.awaitLevel(ctx, need); err != nil {
			return Result{}, err
		}
	}
	wait := time.NewTicker(10 * time.Millisecond)
	defer wait.Stop()
	for {
		if n.closed.Load() {
			return Result{}, ErrClosed
		}
		var (
			res Result
			err error
		)
		if n.raft.State() == raft.Leader {
			res, err = n.proposeLocal(ctx, cmd)
		} else if leader, ok := n.Leader(); ok && leader.ID != n.cfg.NodeID {
			req := forwardRequest{op: opPropose, timeout: forwardTimeout(ctx), command: EncodeCommand(cmd)}
			res, err = n.fwd.call(ctx, leader.Addr, req.encode())
		} else {
			err = errNotSent
		}
		if !errors.Is(err, errNotSent) && !errors.Is(err, raft.ErrNotLeader) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return Result{}, fmt.Errorf("%w: %w", ErrNoQuorum, ctx.Err())
		case <-n.ctx.Done():
			return Result{}, ErrClosed
		case <-wait.C:
		}
	}
}

func forwardTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return time.Hour
}

// proposeLocal prepares and applies cmd on this node, which should be the
// leader. raft.ErrNotLeader means nothing was appended.
func (n *Node) proposeLocal(ctx context.Context, cmd Command) (Result, error) {
	return n.proposeLocalIf(ctx, cmd, nil)
}

// errNotDue is the controller's own: a fence whose session was renewed
// meanwhile (proposeLocalIf's check), nothing appended.
var errNotDue = errors.New("metadata: session renewed meanwhile; not fenced")

// proposeLocalIf is proposeLocal with a check made just before cmd is
// appended, in order with the appends of session renewals (heartbeats and
// registrations, counted in flight by the session clock from then until
// they are applied): a session fence is appended only if the check, run
// then, still finds the session lapsed, so a renewal either shows in the
// check or lands in the log after the fence (and unfences the broker, as a
// late heartbeat does). A check error is returned, nothing appended.
func (n *Node) proposeLocalIf(ctx context.Context, cmd Command, check func() error) (Result, error) {
	if err := n.fsm.err(); err != nil {
		return Result{}, err
	}
	// Work on a private copy: prepare fills in fields.
	cmd, err := DecodeCommand(EncodeCommand(cmd))
	if err != nil {
		return Result{}, err
	}
	if p, ok := cmd.(preparer); ok {
		// Prepare reads the state (topic names, brokers for placement): once
		// per term, a barrier makes sure it includes everything committed by
		// earlier leaders.
		if term := n.raft.CurrentTerm(); n.barrierTerm.Load() != term {
			if _, err := n.readIndexLocal(forwardTimeout(ctx)); err != nil {
				if errors.Is(err, errNotSent) {
					return Result{}, raft.ErrNotLeader
				}
				return Result{}, err
			}
			n.barrierTerm.Store(term)
		}
		pc := prepareContext{st: n.fsm.current(), nowMs: n.cfg.Now().UnixMilli(), rotation: int(n.raft.LastIndex()),
			renewedWithin: n.sessions.renewedWithin}
		if err := p.prepare(&pc); err != nil {
			return Result{}, err
		}
	}
	data := EncodeCommand(cmd)
	renewing := int32(-1)
	switch c := cmd.(type) {
	case *BrokerHeartbeat:
		renewing = c.BrokerID
	case *RegisterBroker:
		renewing = c.BrokerID
	}
	var (
		f       raft.ApplyFuture
		applied func() // after the outcome is known
	)
	if renewing < 0 && check == nil {
		f = n.raft.Apply(data, forwardTimeout(ctx))
	} else {
		n.renewals.Lock()
		if check != nil {
			if err := check(); err != nil {
				n.renewals.Unlock()
				return Result{}, err
			}
		}
		if renewing >= 0 {
			// In flight until the outcome is known, also if ctx ends
			// first: the entry may still be applied.
			n.sessions.begin(renewing)
			applied = func() { n.sessions.end(renewing) }
		}
		f = n.raft.Apply(data, forwardTimeout(ctx))
		n.renewals.Unlock()
	}
	if err := n.waitThen(ctx, f, applied); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader):
			return Result{}, err
		case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return Result{}, fmt.Errorf("%w: %v (outcome unknown)", ErrNotLeader, err)
		case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, ErrClosed):
			return Result{}, ErrClosed
		case errors.Is(err, raft.ErrEnqueueTimeout):
			return Result{}, fmt.Errorf("%w: %v", ErrNoQuorum, err)
		case errors.Is(err, ErrNoQuorum):
			return Result{}, err
		default:
			return Result{}, fmt.Errorf("metadata: %w", err)
		}
	}
	n.nudge(f.Index())
	resp, _ := f.Response().(applyResponse)
	resp.result.Version = f.Index()
	return resp.result, resp.err
}

// nudge tells the followers at once that index is committed. hashicorp/raft
// sends the leader's commit index only with the next AppendEntries, which
// comes with the next entry, or after CommitTimeout (50-100 ms) when none
// follows; etcd's raft and Kafka's KRaft tell followers at once. Without
// this, a change committed here (a group config, an ACL, a new topic)
// would reach the other brokers up to 100 ms after the client was told
// it is done. So, when nothing newer is in the log (a newer entry is sent
// with the commit index of its time, and gets its own nudge when it is
// committed), the leader appends a barrier, an entry the state machine
// never sees: its AppendEntries carries the commit index. One at a time;
// commands committed meanwhile share it; none with no other server.
func (n *Node) nudge(index uint64) {
	if n.raft.LastIndex() != index {
		return
	}
	select {
	case n.nudges <- struct{}{}:
	default:
	}
}

func (n *Node) nudgeLoop() {
	for {
		select {
		case <-n.nudges:
		case <-n.ctx.Done():
			return
		}
		if n.raft.State() == raft.Leader && len(n.raft.GetConfiguration().Configuration().Servers) > 1 {
			_ = n.wait(n.ctx, n.raft.Barrier(time.Second)) // best effort: CommitTimeout still bounds the delay
		}
	}
}

// WaitForVersion waits until the local state has applied version v.
func (n *Node) WaitForVersion(ctx context.Context, v uint64) (*State, error) {
	for {
		n.watch.Lock()
		ch := n.watch.notify
		n.watch.Unlock()
		if st := n.State(); st.Version >= v {
			return st, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return n.State(), fmt.Errorf("%w: %w", ErrNoQuorum, ctx.Err())
		case <-n.ctx.Done():
			return n.State(), ErrClosed
		}
	}
}

// Sync returns a State that includes every command committed before Sync
// was called (a linearizable read): the leader confirms its leadership and
// applies everything it has committed, and this node waits until it has
// applied as much. Use it before acting on metadata that must be current,
// e.g. when a broker starts.
func (n *Node) Sync(ctx context.Context) (*State, error) {
	wait := time.NewTicker(10 * time.Millisecond)
	defer wait.Stop()
	for {
		if n.closed.Load() {
			return nil, ErrClosed
		}
		var (
			version uint64
			err     error
		)
		if n.raft.State() == raft.Leader {
			version, err = n.readIndexLocal(forwardTimeout(ctx))
		} else if leader, ok := n.Leader(); ok && leader.ID != n.cfg.NodeID {
			req := forwardRequest{op: opReadIndex, timeout: min(forwardTimeout(ctx), time.Hour)}
			var res Result
			res, err = n.fwd.call(ctx, leader.Addr, req.encode())
			version = res.Version
		} else {
			err = errNotSent
		}
		if err == nil {
			return n.WaitForVersion(ctx, version)
		}
		if !errors.Is(err, errNotSent) && !errors.Is(err, ErrNotLeader) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrNoQuorum, ctx.Err())
		case <-n.ctx.Done():
			return nil, ErrClosed
		case <-wait.C:
		}
	}
}

// readIndexLocal, on the leader, applies everything committed so far (a
// barrier also confirms leadership with a quorum) and returns the version.
func (n *Node) readIndexLocal(timeout time.Duration) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout) // not n.ctx: a close is ErrClosed (wait), never ErrNoQuorum
	defer cancel()
	if err := n.wait(ctx, n.raft.Barrier(timeout)); err != nil {
		switch {
		case errors.Is(err, ErrClosed), errors.Is(err, ErrNoQuorum):
			return 0, err
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
			return 0, fmt.Errorf("%w: %v", errNotSent, err) // a read: safe to retry
		case errors.Is(err, raft.ErrEnqueueTimeout):
			return 0, fmt.Errorf("%w: %v", ErrNoQuorum, err)
		case errors.Is(err, raft.ErrRaftShutdown):
			return 0, ErrClosed
		}
		return 0, fmt.Errorf("metadata: barrier: %w", err)
	}
	return n.fsm.current().Version, nil
}

// Voters returns the current voters.
func (n *Node) Voters() ([]Peer, error) {
	return n.members(raft.Voter)
}

func (n *Node) members(suffrage raft.ServerSuffrage) ([]Peer, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	var out []Peer
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != suffrage {
			continue
		}
		id, err := strconv.ParseInt(string(s.ID), 10, 32)
		if err != nil {
			continue
		}
		out = append(out, Peer{ID: int32(id), Addr: string(s.Address)})
	}
	return out, nil
}

// QuorumReachable reports whether a majority of the voters may be up: this
// node, when it is a voter, and every other voter whose Raft address does
// not refuse a connection within timeout. A refused dial means no process
// listens there (stopped, or not yet started); a timeout or another error may
// be a slow or partitioned network, and counts as reachable. A broker
// shutting down asks this before waiting for a controlled shutdown that no
// quorum could commit.
func (n *Node) QuorumReachable(timeout time.Duration) bool {
	voters, err := n.Voters()
	if err != nil {
		return false
	}
	if len(voters) == 0 {
		return true // no configuration yet: not known to be unreachable
	}
	return n.answering(voters, true, timeout) > len(voters)/2
}

// answering counts the voters that do not refuse a connection within
// timeout (dialled in parallel), this node among them if self.
func (n *Node) answering(voters []Peer, self bool, timeout time.Duration) int {
	up := make(chan bool, len(voters))
	for _, v := range voters {
		if v.ID == n.cfg.NodeID {
			up <- self
			continue
		}
		go func() { up <- !refusesConnections(n.cfg.Dial, v.Addr, timeout) }()
	}
	count := 0
	for range voters {
		if <-up {
			count++
		}
	}
	return count
}

// refusesConnections dials addr once: true when the dial is refused (no
// process listens there), false when it connects or fails otherwise (a
// timeout may be a slow network or a paused process).
func refusesConnections(dial func(string, time.Duration) (net.Conn, error), addr string, timeout time.Duration) bool {
	conn, err := dial(addr, timeout)
	if err == nil {
		conn.Close()
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// RaftStatus is this node's view of the Raft log: the current term, the
// commit index and the index of its last entry.
func (n *Node) RaftStatus() (term, commitIndex, lastIndex uint64) {
	return n.raft.CurrentTerm(), n.raft.CommitIndex(), n.raft.LastIndex()
}

// AddVoter adds a voter (it catches up from the leader's log or a snapshot);
// RemoveVoter removes one. Both are forwarded to the leader.
func (n *Node) AddVoter(ctx context.Context, p Peer) error {
	return n.changeVoters(ctx, opAddVoter, p.ID, p.Addr)
}

// checkNewVoter asks the node at addr who it is before it becomes a voter:
// it must answer, as node id, and not as a member of another cluster or
// quorum (a Raft configuration that does not name this leader; a node
// waiting to join has none).
// hashicorp/raft counts a new voter in the quorum from the moment its
// configuration entry is appended, so a voter that never answers (a wrong
// address, a node not started) takes a quorum of one or two out of service
// for good: nothing commits any more, not even its removal. Kafka adds only
// a voter that already fetches from the leader (KIP-853) and answers
// REQUEST_TIMED_OUT otherwise; this is the same guard for a quorum whose
// joining nodes wait, unreplicated, to be added. A node that answers op 5
// with an error (an older version) counts as answering.
func (n *Node) checkNewVoter(ctx context.Context, id int32, addr string) error {
	who, err := n.identifyWithin(ctx, addr, 5*time.Second)
	switch {
	case errors.Is(err, errNoTimeLeft):
		return fmt.Errorf("%w: %w", ErrNoQuorum, context.DeadlineExceeded)
	case errors.Is(err, errNoIdentity):
		return nil
	case err != nil:
		return reject(ErrVoterUnreachable, "voter %d at %s did not answer: %v", id, addr, err)
	case who.id != id:
		return reject(ErrInvalidRequest, "the node at %s is node %d, not %d", addr, who.id, id)
	case who.cluster != "" && who.cluster != n.State().ClusterID:
		return reject(ErrInvalidRequest, "the node at %s is a member of another cluster, %s, not %s", addr, who.cluster, n.State().ClusterID)
	case who.membership == memberElsewhere && who.cluster == "":
		// A configuration without this leader is another quorum's, unless
		// the node has recorded this cluster's id: then it is one of ours
		// that was removed while this leader joined (its log is an old
		// part of ours; the leader overwrites what it lacks).
		return reject(ErrInvalidRequest, "the node at %s is a voter of another quorum (its Raft configuration does not name this leader, node %d)", addr, n.cfg.NodeID)
	}
	return nil
}

// RemoveVoter takes a voter out of the quorum. If the node still answers
// at its address it stays as an observer (a Raft non-voter: it receives the
// log and votes in nothing), as Kafka's removed controllers keep fetching;
// otherwise it leaves the configuration. Removing the leader makes it step
// down once the change commits.
func (n *Node) RemoveVoter(ctx context.Context, id int32) error {
	return n.changeVoters(ctx, opRemoveVoter, id, "")
}

// RemoveObserver takes node id out of the Raft configuration if it is an
// observer (a broker unregistered for good); a voter is left alone.
func (n *Node) RemoveObserver(ctx context.Context, id int32) error {
	s, ok := n.server(raft.ServerID(strconv.Itoa(int(id))))
	if !ok || s.Suffrage == raft.Voter {
		return nil
	}
	return n.changeVoters(ctx, opRemoveObserver, id, "")
}

// server returns the latest configuration's entry for id.
func (n *Node) server(id raft.ServerID) (raft.Server, bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return raft.Server{}, false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == id {
			return s, true
		}
	}
	return raft.Server{}, false
}

// answers reports whether the node at addr answers op 5 as node id within
// ctx's deadline and at most 2 s (a node of an older version answering it
// with an error counts).
func (n *Node) answers(ctx context.Context, id int32, addr string) bool {
	if id == n.cfg.NodeID {
		return true
	}
	who, err := n.identifyWithin(ctx, addr, 2*time.Second)
	return errors.Is(err, errNoIdentity) || (err == nil && who.id == id)
}

// errNoTimeLeft: ctx's deadline passed before identify could be asked.
var errNoTimeLeft = errors.New("metadata: no time left to ask")

// identifyWithin is identify (op 5) within ctx's deadline and at most
// limit; errNoTimeLeft when no time is left.
func (n *Node) identifyWithin(ctx context.Context, addr string, limit time.Duration) (identity, error) {
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl))
	}
	if limit <= 0 {
		return identity{}, errNoTimeLeft
	}
	return identify(n.mux.dial, addr, n.cfg.NodeID, limit)
}

// JoinAsObserver asks the quorum (Config.Peers, the voters this node was
// told of) to add this node as an observer: a Raft non-voter, which receives
// the log and votes in nothing, as a Kafka broker that is not a controller.
// Any voter takes the request and forwards it to the leader, which first
// asks this node who it is (op 5). A node already in the configuration,
// voter or observer, stays as it is. ErrInvalidRequest: the quorum does not
// know the request (an older version) or refused it (this id answers at
// another address); the node then waits to be added by hand.
func (n *Node) JoinAsObserver(ctx context.Context) error {
	peers := n.joinPeers()
	if len(peers) == 0 {
		return reject(ErrInvalidRequest, "no voters to ask")
	}
	req := forwardRequest{op: opAddObserver, id: n.cfg.NodeID, addr: n.Addr()}.encode()
	var last error
	for {
		for _, p := range peers {
			if p.ID == n.cfg.NodeID {
				continue
			}
			_, err := n.fwd.call(ctx, p.Addr, req)
			if err == nil || errors.Is(err, ErrInvalidRequest) {
				return err
			}
			last = err
			if ctx.Err() != nil {
				return fmt.Errorf("%w: %w (last: %v)", ErrNoQuorum, ctx.Err(), last)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w (last: %v)", ErrNoQuorum, ctx.Err(), last)
		case <-n.ctx.Done():
			return ErrClosed
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// joinPeers is whom JoinAsObserver asks: Config.Peers, then the voters of
// this node's own Raft configuration not among them.
func (n *Node) joinPeers() []Peer {
	peers := slices.Clone(n.cfg.Peers)
	voters, _ := n.Voters()
	for _, v := range voters {
		if !slices.ContainsFunc(peers, func(p Peer) bool { return p.ID == v.ID && p.Addr == v.Addr }) {
			peers = append(peers, v)
		}
	}
	return peers
}

// rejoinLoop: a node that has a Raft configuration but has heard from no
// leader for Config.rejoinAfter asks the voters it knows to add it as an
// observer (JoinAsObserver), and again every rejoinAfter while that lasts.
// Raft never tells a voter that it was removed while it was down or cut
// off: it would wait for ever for a leader that sends it nothing (a broker
// restarted with its old settings exited after 30 s without a leader, and
// again at every restart). Asked, the leader adds it back as an observer; a
// node still in the configuration, voter or observer, is left as it is (the
// leader answers at once), so asking during an election or a quorum loss
// changes nothing.
func (n *Node) rejoinLoop() {
	t := time.NewTicker(n.cfg.rejoinAfter / 4)
	defer t.Stop()
	var since time.Time // stale since, with a configuration
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		if !n.Stale() || !n.hasConfiguration() {
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) < n.cfg.rejoinAfter {
			continue
		}
		since = time.Now()
		ctx, cancel := context.WithTimeout(n.ctx, min(n.cfg.rejoinAfter, 5*time.Second))
		err := n.JoinAsObserver(ctx)
		cancel()
		if err == nil {
			n.logger.Info("no leader heard from: the voters keep this node in the quorum's configuration (an observer if it had been removed)")
		} else {
			n.logger.Debug("no leader heard from, and no voter answered the request to be kept", "err", err)
		}
	}
}

func (n *Node) hasConfiguration() bool {
	f := n.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// Observers returns the nodes that receive the log without a vote.
func (n *Node) Observers() ([]Peer, error) {
	return n.members(raft.Nonvoter)
}

func (n *Node) changeVoters(ctx context.Context, op byte, id int32, addr string) error {
	wait := time.NewTicker(10 * time.Millisecond)
	defer wait.Stop()
	for {
		var err error
		if n.raft.State() == raft.Leader {
			err = n.changeVotersLocal(ctx, op, id, addr)
		} else if leader, ok := n.Leader(); ok && leader.ID != n.cfg.NodeID {
			req := forwardRequest{op: op, id: id, addr: addr}
			_, err = n.fwd.call(ctx, leader.Addr, req.encode())
		} else {
			err = errNotSent
		}
		if !errors.Is(err, errNotSent) && !errors.Is(err, raft.ErrNotLeader) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrNoQuorum, ctx.Err())
		case <-n.ctx.Done():
			return ErrClosed
		case <-wait.C:
		}
	}
}

// voterChangeWait bounds a voter change forwarded by a follower (whose
// request carries no deadline) on the leader.
const voterChangeWait = 15 * time.Second

// changeVotersLocal makes the change on the leader and waits for it to
// commit until ctx ends (ErrNoQuorum then: the change may still commit).
func (n *Node) changeVotersLocal(ctx context.Context, op byte, id int32, addr string) error {
	sid := raft.ServerID(strconv.Itoa(int(id)))
	var f raft.IndexFuture
	switch op {
	case opAddVoter:
		if addr == "" {
			return reject(ErrInvalidRequest, "voter %d without address", id)
		}
		if err := n.checkNewVoter(ctx, id, addr); err != nil {
			return err
		}
		f = n.raft.AddVoter(sid, raft.ServerAddress(addr), 0, 10*time.Second)
	case opAddObserver:
		if addr == "" {
			return reject(ErrInvalidRequest, "observer %d without address", id)
		}
		switch s, ok := n.server(sid); {
		case ok && s.Suffrage == raft.Voter:
			// A voter that restarts with a joining configuration stays a
			// voter: only RemoveVoter demotes one.
			return nil
		case ok && s.Address == raft.ServerAddress(addr):
			return nil
		case ok && n.answers(ctx, id, string(s.Address)):
			// A second process under the same id (a copied config) would
			// take the log away from the one that observes now.
			return reject(ErrInvalidRequest, "node %d observes from %s, which still answers", id, s.Address)
		}
		if err := n.checkNewVoter(ctx, id, addr); err != nil {
			return err
		}
		f = n.raft.AddNonvoter(sid, raft.ServerAddress(addr), 0, 10*time.Second)
	default:
		// A voter that still answers stays in the configuration as an
		// observer and keeps receiving the log (Kafka's removed
		// controllers keep fetching as observers); one that does not
		// answer is removed. An observer is not a voter: VOTER_NOT_FOUND
		// was answered before this (the broker checks), and removing it
		// here is RemoveObserver's job.
		s, ok := n.server(sid)
		if !ok {
			return nil
		}
		if op == opRemoveVoter && s.Suffrage == raft.Voter && n.answers(ctx, id, string(s.Address)) {
			f = n.raft.DemoteVoter(sid, 0, 10*time.Second)
		} else {
			f = n.raft.RemoveServer(sid, 0, 10*time.Second)
		}
	}
	if err := n.wait(ctx, f); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			// Adding or removing the same voter again is harmless: retry.
			return fmt.Errorf("%w: %v", errNotSent, err)
		}
		return fmt.Errorf("metadata: change voters: %w", err)
	}
	return nil
}

// wait returns f's error; or, first, ErrClosed once the node closes, or
// ErrNoQuorum when ctx ends. hashicorp/raft may never answer a future
// whose entry was appended but neither committed nor failed when the
// node shut down or the configuration changed under it
// (hashicorp/raft#498): a goroutine blocked in f.Error() held Close's wait
// for the node's goroutines for ever (a broker that never exited after
// SIGTERM). The goroutine reading f.Error() is not tracked: it ends when
// raft answers, or stays parked on a future nothing else holds.
func (n *Node) wait(ctx context.Context, f raft.Future) error {
	return n.waitThen(ctx, f, nil)
}

// waitThen is wait, and then, when set, calls then once f's outcome is
// known, also when wait returned before (its context ended).
func (n *Node) waitThen(ctx context.Context, f raft.Future, then func()) error {
	done := make(chan error, 1)
	go func() {
		err := f.Error()
		if then != nil {
			then()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-n.ctx.Done():
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNoQuorum, ctx.Err())
	}
}

// Snapshot forces a snapshot now (and log truncation past it).
func (n *Node) Snapshot() error {
	if err := n.wait(n.ctx, n.raft.Snapshot()); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return fmt.Errorf("metadata: snapshot: %w", err)
	}
	return nil
}

// Close stops the node: the controller and watchers end (their channels are
// closed), Raft shuts down, the listener closes, and every goroutine the node
// started has returned when Close returns.
func (n *Node) Close() error {
	n.goMu.Lock()
	first := n.closed.CompareAndSwap(false, true)
	n.goMu.Unlock()
	if !first {
		return nil
	}
	n.handOver()
	n.cancel()
	return n.shutdown()
}

// handOver: a leader that closes first hands its leadership to the most
// up-to-date voter (raft's leadership transfer: TimeoutNow, as KRaft's
// resigning leader sends EndQuorumEpoch), waiting at most an election
// timeout. Without it the other voters waited for their heartbeat timeout
// and held an election: a second or more without a controller at every
// rolling restart, logged as a crash would be.
func (n *Node) handOver() {
	if n.raft == nil || n.raft.State() != raft.Leader {
		return
	}
	voters, err := n.Voters()
	if err != nil || len(voters) < 2 {
		return
	}
	// Only when the other voters alone still make a quorum: the new
	// leader needs this node's vote no more once it is gone. With fewer
	// (a voter already down), it would win an election this node leaves
	// right after, and lead nothing: the voters left held elections and
	// a stopping broker's controlled shutdown waited out its timeout.
	if n.answering(voters, false, n.cfg.ElectionTimeout/4) <= len(voters)/2 {
		return // closing ends the quorum anyway
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ElectionTimeout)
	defer cancel()
	start := time.Now()
	if err := n.wait(ctx, n.raft.LeadershipTransfer()); err != nil {
		n.logger.Info("closing: leadership of the metadata quorum not handed over; the voters elect a leader", "err", err)
		return
	}
	n.logger.Info("closing: leadership of the metadata quorum handed over", "took", time.Since(start).Round(time.Millisecond))
}

// goTracked starts f on a goroutine that Close waits for (labelled for
// pprof when label is set), unless the node is closed.
func (n *Node) goTracked(label string, f func()) bool {
	n.goMu.RLock()
	defer n.goMu.RUnlock()
	if n.closed.Load() {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if label == "" {
			f()
			return
		}
		pprof.Do(n.ctx, pprof.Labels("metadata", label), func(context.Context) { f() })
	}()
	return true
}

func (n *Node) shutdown() error {
	var errs []error
	if n.raft != nil {
		errs = append(errs, n.raft.Shutdown().Error())
	}
	if n.trans != nil {
		errs = append(errs, n.trans.Close())
	} else if n.mux != nil {
		errs = append(errs, n.mux.Close())
	}
	n.connMu.Lock()
	for c := range n.conns {
		c.Close()
	}
	n.conns = nil
	n.connMu.Unlock()
	n.fwd.close()
	n.wg.Wait()
	if n.wal != nil {
		errs = append(errs, n.wal.Close())
	}
	if n.meta != nil {
		errs = append(errs, n.meta.Close())
	}
	return errors.Join(errs...)
}

// newHCLogger sends the output of raft and raft-wal (hclog) to slog: hclog
// writes one JSON object per line, whose level, message and fields become
// the slog record's (not hclog's "[WARN]  raft: ..." text inside a slog
// message, which read as a doubled level).
// Raft's lines about a peer it cannot reach are throttled (peerFailureLog).
func newHCLogger(l *slog.Logger) hclog.Logger { return newSlogWriter(l).hclog() }

type slogWriter struct {
	l        *slog.Logger
	failures *peerFailureLog
}

func newSlogWriter(l *slog.Logger) *slogWriter {
	return &slogWriter{l: l, failures: newPeerFailureLog(time.Now)}
}

func (w *slogWriter) hclog() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: w, JSONFormat: true, DisableTime: true})
}

func (w *slogWriter) Write(p []byte) (int, error) {
	var rec map[string]any
	if err := json.Unmarshal(p, &rec); err != nil {
		w.l.Info(strings.TrimSpace(string(p)))
		return len(p), nil
	}
	msg, _ := rec["@message"].(string)
	lvl := slog.LevelInfo
	switch rec["@level"] {
	case "error":
		lvl = slog.LevelError
	case "warn":
		lvl = slog.LevelWarn
	case "debug", "trace":
		lvl = slog.LevelDebug
	}
	// Every voter's first election starts on a heartbeat timeout with no
	// leader ever heard from (a single broker at each start): that is the
	// normal way up, not a warning. A timeout after a leader is one.
	if msg == "heartbeat timeout reached, starting election" && rec["last-leader-id"] == "" {
		lvl = slog.LevelInfo
	}
	if l, ok := raftLevels[msg]; ok && lvl > l {
		lvl = l
	}
	if msg == "failed to decode incoming command" && rec["error"] == "transport shutdown" {
		lvl = slog.LevelDebug // this node closing
	}
	var omitted []slog.Attr
	if peerFailureMsgs[msg] {
		ok, n, since := w.failures.admit(msg, failurePeer(rec))
		if !ok {
			return len(p), nil
		}
		lvl = slog.LevelWarn
		if n > 0 {
			omitted = []slog.Attr{slog.Int("repeated", n), slog.Time("repeated_since", since)}
		}
	}
	attrs := make([]slog.Attr, 0, len(rec)+len(omitted))
	for k, v := range rec {
		if strings.HasPrefix(k, "@") {
			continue
		}
		attrs = append(attrs, raftAttr(k, v))
	}
	sort.Slice(attrs, func(i, j int) bool { return attrs[i].Key < attrs[j].Key })
	attrs = append(attrs, omitted...)
	if mod, _ := rec["@module"].(string); mod != "" {
		attrs = append([]slog.Attr{slog.String("module", mod)}, attrs...)
	}
	w.l.LogAttrs(context.Background(), lvl, msg, attrs...)
	return len(p), nil
}

// raftLevels lowers the level of raft's lines about what happens in a
// healthy cluster: a follower catching up after a restart or a join (its
// log is behind: the leader sends older entries), an observer's heartbeat
// timeout, a deposed leader meeting the new term, a peer's connection
// breaking when it restarts. raft logs them as warnings or errors; an
// alert on ERROR paged for every routine failover.
var raftLevels = map[string]slog.Level{
	"failed to get previous log":                          slog.LevelInfo,
	"appendEntries rejected, sending older logs":          slog.LevelInfo,
	"not part of stable configuration, aborting election": slog.LevelInfo,
	"heartbeat timeout reached, not part of a stable configuration or a non-voter, not triggering a leader election": slog.LevelInfo,
	"peer has newer term, stopping replication": slog.LevelInfo,
	"failed to decode incoming command":         slog.LevelWarn,
	"failed to flush response":                  slog.LevelWarn,
}

// raftAttr is one field of a raft line: a server (hclog writes a struct as
// an object) as "ID@address", a duration (written in nanoseconds) as a
// duration.
func raftAttr(k string, v any) slog.Attr {
	switch v := v.(type) {
	case map[string]any:
		id, ok1 := v["ID"].(string)
		addr, ok2 := v["Address"].(string)
		if ok1 && ok2 {
			return slog.String(k, id+"@"+addr)
		}
	case float64:
		if k == "time" || k == "backoff time" {
			return slog.Duration(k, time.Duration(v))
		}
	}
	return slog.Any(k, v)
}

// LeaderImbalanceDefaults fills in Kafka's defaults for the leader
// imbalance check: an interval of zero or less is 300 s, a percentage of
// zero is 10 and a negative one 0 (the broker's config uses the same).
func LeaderImbalanceDefaults(interval time.Duration, percentage int) (time.Duration, int) {
	if interval <= 0 {
		interval = 300 * time.Second
	}
	switch {
	case percentage == 0:
		percentage = 10
	case percentage < 0:
		percentage = 0
	}
	return interval, percentage
}
