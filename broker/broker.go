package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	krbclient "github.com/jcmturner/gokrb5/v8/client"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/broker/txn"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/metadata"
)

// fetch.max.bytes: Kafka's default, and the most this broker takes. Kafka
// takes up to 2 GiB - 1, but an answer carries, besides that much, the first
// batch whole (KIP-74) and its headers, and a response frame over 2 GiB
// cannot be sent; 1 GiB leaves room for any batch a request can bring.
const (
	DefaultFetchMaxBytes = 55 << 20
	MaxFetchMaxBytes     = 1 << 30
)

// Listener is one address the broker accepts Kafka connections on.
type Listener struct {
	// Name labels the listener (PLAINTEXT by default).
	Name string
	// Addr is the address to bind, host:port (port 0 picks a free one).
	Addr string
	// Advertised is the host:port clients are told to connect to; empty
	// means the bound address.
	Advertised string
	// SecurityProtocol is PLAINTEXT (the default), SSL, SASL_PLAINTEXT or
	// SASL_SSL (security.go). The first listener carries the brokers' own
	// traffic and must not be SASL.
	SecurityProtocol string
}

// Config configures a broker. Zero fields take Kafka's defaults (see
// docs/configuration.md for the names used in YAML and environment).
type Config struct {
	NodeID  int32
	DataDir string
	// RaftAddr is the metadata quorum's Raft transport address.
	RaftAddr  string
	ClusterID string
	Listeners []Listener

	// SocketRequestMaxBytes bounds a request frame (socket.request.max.bytes).
	SocketRequestMaxBytes int32
	// QueuedMaxRequestBytes bounds the bytes of all requests read and not
	// yet handled (queued.max.request.bytes) [512 MiB, at least
	// SocketRequestMaxBytes].
	QueuedMaxRequestBytes int64
	// FetchMaxBytes bounds the records of one Fetch answer whatever its
	// max_bytes asks (fetch.max.bytes) [55 MiB, at most MaxFetchMaxBytes];
	// the first batch still comes whole (KIP-74).
	FetchMaxBytes int32
	// ConnectionsMaxIdle closes connections idle for this long (connections.max.idle.ms).
	ConnectionsMaxIdle time.Duration
	// ConnectionsMaxReauth is KIP-368's connections.max.reauth.ms: a
	// SASL session lasts at most this long (and no longer than an
	// OAUTHBEARER token), after which the client must log in again on
	// the connection or have it closed; 0: only an expiring credential
	// (an OAUTHBEARER token, a delegation token) ends a session.
	ConnectionsMaxReauth time.Duration
	// MaxConnectionsPerIP, MaxConnectionsPerIPOverrides and MaxConnections
	// are Kafka's max.connections.per.ip (and .overrides) and
	// max.connections (conn_limits.go); 0 is no limit.
	MaxConnectionsPerIP          int
	MaxConnectionsPerIPOverrides map[string]int
	MaxConnections               int
	// MaxConnectionCreationRate is Kafka's max.connection.creation.rate
	// (KIP-612): new connections per second on the client listeners;
	// beyond it the listeners wait before serving the next. 0 is no limit.
	MaxConnectionCreationRate int
	// WriteTimeout bounds writing one reply.
	WriteTimeout time.Duration
	// ShutdownTimeout bounds how long Close waits for in-flight requests.
	ShutdownTimeout time.Duration
	// DisableSendfile forces the copying path for Fetch (tests; TLS
	// connections always copy).
	DisableSendfile bool

	// TLS is the server side of SSL and SASL_SSL listeners: certificate,
	// and ClientAuth/ClientCAs for client certificates (ssl.client.auth).
	TLS *tls.Config
	// SSLPrincipalMapper turns a client certificate's subject into the
	// principal (ssl.principal.mapping.rules, principal_mapping.go); nil
	// keeps the subject.
	SSLPrincipalMapper *PrincipalMapper
	// InterBrokerSASL is how the broker's own clients log in when the
	// first listener is SASL_PLAINTEXT or SASL_SSL (interbroker_sasl.go).
	InterBrokerSASL *InterBrokerSASLConfig
	// OAuthBearer validates SASL/OAUTHBEARER tokens
	// (sasl_oauthbearer.go); OAUTHBEARER must also be in SASLMechanisms.
	OAuthBearer *OAuthBearerConfig
	// GSSAPI accepts SASL/GSSAPI (Kerberos) logins (sasl_gssapi.go);
	// GSSAPI must also be in SASLMechanisms.
	GSSAPI *GSSAPIConfig
	// PeerTLS is what the broker's own clients use to reach an SSL first
	// listener of its peers (the CA that signed their certificates, and
	// this broker's certificate when they ask for one).
	PeerTLS *tls.Config
	// RaftTLS puts the metadata quorum's Raft transport (RaftAddr) under
	// mutual TLS with TLS's certificate and PeerTLS's trust (raft_tls.go;
	// raft-security-protocol SSL). Every voter must have it.
	RaftTLS bool
	// SASLMechanisms are those offered on SASL listeners
	// (sasl.enabled.mechanisms) [PLAIN, SCRAM-SHA-256, SCRAM-SHA-512]. Users
	// and their SCRAM credentials live in the metadata log
	// (AlterUserScramCredentials); PLAIN checks a password against them.
	SASLMechanisms []string

	// Topic defaults (Kafka broker settings).
	//
	// StaticConfigs names, under Kafka's names (log.retention.ms), the
	// broker settings the operator gave (in the config file, a flag or
	// the environment: Kafka's server.properties), also those given their
	// default value. DescribeConfigs reports them, and the topic configs
	// whose default they are, with the source STATIC_BROKER_CONFIG, as
	// Kafka; a setting not named here is STATIC_BROKER_CONFIG when its
	// value differs from the built-in default (a Config built in code),
	// else DEFAULT_CONFIG.
	StaticConfigs            map[string]bool
	AutoCreateTopics         bool  // auto.create.topics.enable
	NumPartitions            int32 // num.partitions
	DefaultReplicationFactor int16 // default.replication.factor
	// OffsetsTopicReplicationFactor (offsets.topic.replication.factor) and
	// TransactionStateReplicationFactor
	// (transaction.state.log.replication.factor) are the replication
	// factors of __consumer_offsets and __transaction_state [3, Kafka's],
	// created with fewer replicas when fewer brokers can take one
	// (internalReplicationFactor). TransactionStateMinISR
	// (transaction.state.log.min.isr [2]) is __transaction_state's
	// min.insync.replicas, at most its replication factor.
	OffsetsTopicReplicationFactor     int16
	TransactionStateReplicationFactor int16
	TransactionStateMinISR            int16
	MessageMaxBytes                   int32 // message.max.bytes: the default max.message.bytes
	LogSegmentBytes                   int64 // log.segment.bytes
	LogRetentionMs                    int64 // log.retention.ms
	// LogSegmentDeleteDelay (log.segment.delete.delay.ms) is the default
	// file.delete.delay.ms of topics: how long the files of a segment that
	// left the log (retention, truncation, compaction) stay, renamed
	// *.deleted, before a background deleter removes them [1m; negative:
	// at the last reader's release, as hotlog.Config.FileDeleteDelay 0].
	LogSegmentDeleteDelay time.Duration
	// LogFlush selects the fsync policy: "commit" (default: a group-commit
	// fsync of every append, before acknowledging acks=all, before the high
	// watermark passes it for acks=1/0), "interval", or "os" (page cache
	// only).
	LogFlush         string
	LogFlushInterval time.Duration
	// LogFS is the file system of the partition logs; nil is the OS's.
	// Tests wrap it to inject faults and delays (internal/vfs/errorfs).
	LogFS vfs.FS

	// Groups configures the group coordinator (offsets.topic.num.partitions,
	// group.initial.rebalance.delay.ms, session timeout bounds,
	// offsets.retention.minutes, …); zero values take Kafka's defaults.
	Groups group.Config
	// Transactions configures the transaction coordinator
	// (transaction.state.log.num.partitions, transaction.max.timeout.ms,
	// the timed-out transaction check interval); Broker is set by New.
	Transactions txn.Config

	// Cleaner configures the log cleaner and retention (log.cleaner.*,
	// log.retention.check.interval.ms); see cleaner.go.
	Cleaner CleanerConfig

	// ProducerSnapshotInterval is how often partitions that grew write a
	// producer-state snapshot [1m].
	ProducerSnapshotInterval time.Duration
	// ProducerIDExpiration forgets idempotent producers that have not
	// appended for this long (producer.id.expiration.ms) [24h].
	ProducerIDExpiration time.Duration
	// ProducerIDExpirationCheckInterval is how often partitions drop
	// their expired producers (producer.id.expiration.check.interval.ms)
	// [10m].
	ProducerIDExpirationCheckInterval time.Duration

	// Voters are the metadata quorum's voters (id and Raft address); empty
	// means a quorum of this broker alone. A broker listed is a voter too
	// (combined mode).
	Voters []metadata.Peer
	// Rack is this broker's rack or zone (broker.rack): reported in
	// Metadata, used to spread replicas, and matched against consumers'
	// rack_id for fetching from a follower (KIP-392).
	Rack string
	// PeerAddresses maps a peer's advertised address (a Kafka listener or a
	// Raft address) to the address this broker dials to reach it:
	// replica fetches, transaction markers, and the metadata quorum's Raft
	// RPCs and forwarded proposals go there. Unmapped addresses are dialed
	// as they are. It puts a TCP proxy between brokers (fault injection in
	// tests, or a relay).
	PeerAddresses map[string]string
	// Tiering, when set, enables tiered storage (EnableTiering) before the
	// broker serves its first request. Enabled after New, a restarted
	// broker answered requests meanwhile as if its tiered partitions had
	// no remote log: ListOffsets earliest gave the local log start, and a
	// consumer replaying from the bucket got OFFSET_OUT_OF_RANGE and
	// skipped to it, silently.
	Tiering *TieringConfig
	// JoinTimeout: a broker whose id is not in a non-empty Voters list joins
	// that quorum as an observer and waits this long to be added [5m].
	JoinTimeout time.Duration
	// ReplicaLagTimeMax drops a follower from the ISR when it has not
	// caught up for this long (replica.lag.time.max.ms) [30s].
	ReplicaLagTimeMax time.Duration
	// ReplicaFetchMaxWait is a follower fetch's long-poll (replica.fetch.wait.max.ms) [500ms].
	ReplicaFetchMaxWait time.Duration
	// ControlledShutdownTimeout bounds how long Close waits for leadership
	// to move away [10s].
	ControlledShutdownTimeout time.Duration
	// Automatic return of leadership to preferred replicas, by the
	// controller while this broker leads the metadata quorum (Kafka's
	// controller settings; metadata.Config has the rules):
	// DisableAutoLeaderRebalance is auto.leader.rebalance.enable=false;
	// LeaderImbalanceCheckInterval is leader.imbalance.check.interval.seconds
	// [300s]; LeaderImbalancePerBrokerPercentage is
	// leader.imbalance.per.broker.percentage [10; negative: 0].
	DisableAutoLeaderRebalance         bool
	LeaderImbalanceCheckInterval       time.Duration
	LeaderImbalancePerBrokerPercentage int
	// StrayLogDeleteDelay is how long a stray partition directory found at
	// start (a replica moved away or a topic deleted while this broker was
	// down; stray.go) is kept, renamed <topic>-<n>.<ms>-stray, before it is
	// deleted [1h]; negative keeps it until an operator removes it.
	StrayLogDeleteDelay time.Duration
	// DeletedLogDeleteDelay is how long a partition directory that this
	// broker stops holding while it runs (its topic deleted, its replica
	// moved away) is kept, renamed <topic>-<n>.<ms>-delete, before it is
	// removed (Kafka's file.delete.delay.ms for deleted logs) [1m];
	// negative removes it at once (dir_delete.go).
	DeletedLogDeleteDelay time.Duration

	// QuotaWindowNum and QuotaWindowSize are Kafka's quota.window.num [11]
	// and quota.window.size.seconds [1s]: client quota rates are measured
	// over that many samples of that length (quota.go).
	QuotaWindowNum  int
	QuotaWindowSize time.Duration

	// Authorizer enforces ACLs on every request (acl.go, authz.go); off
	// by default, as Kafka without authorizer.class.name.
	Authorizer AuthorizerConfig

	// DelegationTokenSecretKey is Kafka's delegation.token.secret.key: the
	// key token HMACs are derived with, the same on every broker;
	// delegation tokens (KIP-48, delegation_tokens.go) are off without it.
	// DelegationTokenMaxLifetime [7 days], DelegationTokenExpiryTime [1
	// day] and DelegationTokenExpiryCheckInterval [1h] are Kafka's
	// delegation.token.max.lifetime.ms, .expiry.time.ms and
	// .expiry.check.interval.ms.
	DelegationTokenSecretKey           string
	DelegationTokenMaxLifetime         time.Duration
	DelegationTokenExpiryTime          time.Duration
	DelegationTokenExpiryCheckInterval time.Duration

	// Middleware wraps every handler, outermost first.
	Middleware []Middleware
	// ListenFn opens listeners (tests may pass an in-memory network).
	ListenFn func(network, addr string) (net.Listener, error)
	Logger   *slog.Logger
	// LogLevel, when set, is the level of Logger's handler: the broker's
	// BROKER_LOGGER config (broker_loggers.go, Kafka's broker loggers)
	// reads and changes it at run time. Nil: the level is fixed (describe
	// shows the finest level Logger takes; a change is INVALID_CONFIG).
	LogLevel *slog.LevelVar
}

func (c *Config) setDefaults() {
	if c.DataDir == "" {
		c.DataDir = "data"
	}
	if c.ClusterID == "" {
		c.ClusterID = "sediment-cluster"
	}
	if len(c.Listeners) == 0 {
		c.Listeners = []Listener{{Name: "PLAINTEXT", Addr: "localhost:9092"}}
	}
	for i := range c.Listeners {
		if c.Listeners[i].Name == "" {
			c.Listeners[i].Name = ProtocolPlaintext
		}
		if c.Listeners[i].SecurityProtocol == "" {
			c.Listeners[i].SecurityProtocol = ProtocolPlaintext
		}
	}
	if len(c.SASLMechanisms) == 0 {
		c.SASLMechanisms = SupportedSASLMechanisms
	}
	if c.SocketRequestMaxBytes <= 0 {
		c.SocketRequestMaxBytes = 100 << 20
	}
	if c.QueuedMaxRequestBytes <= 0 {
		c.QueuedMaxRequestBytes = 512 << 20
	}
	if c.QueuedMaxRequestBytes < int64(c.SocketRequestMaxBytes) {
		c.QueuedMaxRequestBytes = int64(c.SocketRequestMaxBytes)
	}
	if c.FetchMaxBytes <= 0 {
		c.FetchMaxBytes = DefaultFetchMaxBytes
	}
	c.FetchMaxBytes = min(c.FetchMaxBytes, MaxFetchMaxBytes)
	if c.ConnectionsMaxIdle == 0 {
		c.ConnectionsMaxIdle = 10 * time.Minute
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 2 * time.Minute
	}
	if c.ProducerIDExpiration <= 0 {
		c.ProducerIDExpiration = 24 * time.Hour
	}
	if c.ProducerIDExpirationCheckInterval <= 0 {
		c.ProducerIDExpirationCheckInterval = 10 * time.Minute
	}
	if c.ProducerSnapshotInterval <= 0 {
		c.ProducerSnapshotInterval = time.Minute
	}
	if c.QuotaWindowNum <= 0 {
		c.QuotaWindowNum = 11
	}
	if c.DelegationTokenMaxLifetime <= 0 {
		c.DelegationTokenMaxLifetime = 7 * 24 * time.Hour
	}
	if c.DelegationTokenExpiryTime <= 0 {
		c.DelegationTokenExpiryTime = 24 * time.Hour
	}
	if c.DelegationTokenExpiryCheckInterval <= 0 {
		c.DelegationTokenExpiryCheckInterval = time.Hour
	}
	if c.QuotaWindowSize <= 0 {
		c.QuotaWindowSize = time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.NumPartitions <= 0 {
		c.NumPartitions = 1
	}
	if c.DefaultReplicationFactor <= 0 {
		c.DefaultReplicationFactor = 1
	}
	if c.OffsetsTopicReplicationFactor <= 0 {
		c.OffsetsTopicReplicationFactor = 3
	}
	if c.TransactionStateReplicationFactor <= 0 {
		c.TransactionStateReplicationFactor = 3
	}
	if c.TransactionStateMinISR <= 0 {
		c.TransactionStateMinISR = 2
	}
	if c.MessageMaxBytes <= 0 {
		c.MessageMaxBytes = 1048588
	}
	if c.LogSegmentBytes <= 0 {
		c.LogSegmentBytes = 1 << 30
	}
	if c.LogRetentionMs == 0 {
		c.LogRetentionMs = 7 * 24 * 3600 * 1000
	}
	if c.LogSegmentDeleteDelay == 0 {
		c.LogSegmentDeleteDelay = time.Minute
	}
	if c.LogFlush == "" {
		c.LogFlush = "commit"
	}
	if c.ReplicaLagTimeMax <= 0 {
		c.ReplicaLagTimeMax = 30 * time.Second
	}
	if c.ReplicaFetchMaxWait <= 0 {
		c.ReplicaFetchMaxWait = 500 * time.Millisecond
	}
	if c.ControlledShutdownTimeout <= 0 {
		c.ControlledShutdownTimeout = 10 * time.Second
	}
	c.LeaderImbalanceCheckInterval, c.LeaderImbalancePerBrokerPercentage = metadata.LeaderImbalanceDefaults(c.LeaderImbalanceCheckInterval, c.LeaderImbalancePerBrokerPercentage)
	if c.StrayLogDeleteDelay == 0 {
		c.StrayLogDeleteDelay = time.Hour
	}
	if c.DeletedLogDeleteDelay == 0 {
		c.DeletedLogDeleteDelay = time.Minute
	}
	if c.ListenFn == nil {
		c.ListenFn = net.Listen
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Broker is one Kafka-protocol server.
type Broker struct {
	// testHooks are called at points where tests make a race happen
	// deterministically; nil in production. Set before the broker serves.
	testHooks struct {
		txnOffsetsAppended  func()                           // a TxnOffsetCommit's batch is in the log, before it is answered
		beforeLocalRead     func(p *partition, offset int64) // a Fetch is about to read p's local log at offset
		txnWriteVerified    func()                           // a Produce's transactional batch was verified at the coordinator, before its append
		txnOffsetsVerified  func()                           // a TxnOffsetCommit was verified at the coordinator and its records registered, before its append
		createTopicProposed func(err error) error            // a CreateTopic's proposal returned err; the hook's error replaces it
		partitionOpening    func(topic string, idx int32)    // a partition's log is about to be opened (its directory reserved)
	}
	cfg      Config
	nodeName string // strconv.Itoa(cfg.NodeID): this broker's config resource name
	log      *slog.Logger
	metrics  *metrics
	quotas   *quotas           // client quotas (quota.go)
	limits   *connLimits       // connection limits (conn_limits.go)
	authz    *authorizer       // nil: every request allowed (acl.go)
	shares   *shares           // share groups (share_partition.go, share_coordinator.go)
	chains   map[int16]Handler // each API's handler in its middleware (chain)
	oauth    *oauthValidator   // nil: no OAUTHBEARER (sasl_oauthbearer.go)
	// krbClient logs the broker's own clients in with GSSAPI
	// (interbroker_sasl.go); nil unless that is the inter-broker mechanism.
	krbClient *krbclient.Client
	krbGate   krbGate
	// ibTokens gets OAUTHBEARER tokens for the broker's own clients
	// (interbroker_oauth.go).
	ibTokens interBrokerTokens
	budget   *memBudget

	fetchSessions fetchSessions
	// leaderQuota and followerQuota are the replication throttles
	// (replication_throttle.go).
	leaderQuota, followerQuota replicationQuota

	ctx    context.Context
	cancel context.CancelFunc

	listeners []net.Listener
	addrs     []Listener // bound, with advertised addresses resolved

	mu struct {
		sync.Mutex
		conns    map[*conn]struct{}
		closed   bool // Close was called
		draining bool // Close has closed the listeners and drains conns
	}
	acceptWG sync.WaitGroup
	connWG   sync.WaitGroup

	// testHookShutdown, when set (tests only), runs in Close once the
	// leadership moved away, before the listeners close.
	testHookShutdown func()

	store  *store
	meta   *metadata.Node
	groups *groups // the group coordinator (groups.go)
	// cleaner runs compaction and retention of the partition logs (cleaner.go).
	cleaner *cleaner
	txns    *txns // the transaction coordinator (txns.go)
	// stopping is closed when Close begins: long polls answer at once.
	stopping chan struct{}
	// dirLock holds the data directory for this process (datadir_lock.go).
	dirLock *dirLock
}

func (b *Broker) isStopping() bool {
	select {
	case <-b.stopping:
		return true
	default:
		return false
	}
}

// New opens the broker's state (metadata node and partition logs) and
// starts its listeners.
func New(cfg Config) (*Broker, error) {
	cfg.setDefaults()
	if err := cfg.checkSecurity(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{cfg: cfg, nodeName: strconv.Itoa(int(cfg.NodeID)), log: cfg.Logger.With("node", cfg.NodeID), ctx: ctx, cancel: cancel, stopping: make(chan struct{})}
	b.mu.conns = make(map[*conn]struct{})
	b.metrics = newMetrics(b)
	b.quotas = newQuotas(b)
	b.limits = newConnLimits(&cfg)
	if cfg.OAuthBearer != nil {
		v, err := newOAuthValidator(*cfg.OAuthBearer)
		if err != nil {
			cancel()
			return nil, err
		}
		b.oauth = v
	}
	if err := b.newInterBrokerKerberos(); err != nil {
		cancel()
		return nil, err
	}
	if cfg.Authorizer.Enabled {
		b.authz = newAuthorizer(cfg.Authorizer)
		if len(cfg.Listeners) > 0 && cfg.Listeners[0].SecurityProtocol == ProtocolPlaintext && !b.authz.super["User:"+AnonymousPrincipal] {
			b.log.Warn("the authorizer is on and User:ANONYMOUS, the brokers' principal on the first (PLAINTEXT) listener, is not a super user: replication and transaction markers need CLUSTER_ACTION granted to it (docs/security.md)")
		}
	}
	b.budget = newMemBudget(cfg.QueuedMaxRequestBytes)
	b.chains = make(map[int16]Handler, len(apis))
	for key, e := range apis {
		if e.handler != nil {
			b.chains[key] = b.chain(e)
		}
	}
	lock, err := lockDataDir(cfg.DataDir) // datadir_lock.go: first, fail fast
	if err != nil {
		cancel()
		return nil, err
	}
	b.dirLock = lock
	for _, l := range cfg.Listeners {
		ln, err := cfg.ListenFn("tcp", l.Addr)
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("broker: listen %s: %w", l.Addr, err)
		}
		b.listeners = append(b.listeners, ln)
		bound := l
		bound.Addr = ln.Addr().String()
		if bound.Advertised == "" {
			bound.Advertised = advertisedFor(l.Addr, bound.Addr)
		}
		b.addrs = append(b.addrs, bound)
	}
	b.cleaner = newCleaner(b) // before any partition log opens
	st, err := openStore(b)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.store = st // b.meta was set by openStore
	if cfg.Tiering != nil {
		if err := b.EnableTiering(*cfg.Tiering); err != nil {
			b.Close()
			return nil, fmt.Errorf("broker: tiering: %w", err)
		}
	}
	b.groups = newGroups(b)
	b.txns = newTxns(b)
	b.shares = newShares(b)
	b.groups.start()
	b.txns.start()
	b.shares.start()
	go b.ensureInterBrokerUser(b.ctx)
	for i, ln := range b.listeners {
		b.acceptWG.Add(1)
		l := b.addrs[i]
		go pprof.Do(ctx, pprof.Labels("sediment", "accept", "listener", l.Name), func(context.Context) {
			defer b.acceptWG.Done()
			b.acceptLoop(ln, l, i > 0 || len(b.listeners) == 1)
		})
	}
	b.log.Info("broker started", "listeners", b.addrs, "data", cfg.DataDir)
	return b, nil
}

// advertisedFor picks what clients are told when no advertised address is
// configured: the configured host (localhost stays localhost) with the bound
// port; for a wildcard bind, this machine's host name.
func advertisedFor(configured, bound string) string {
	host, _, err := net.SplitHostPort(configured)
	_, port, err2 := net.SplitHostPort(bound)
	if err != nil || err2 != nil {
		return bound
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		h, err := os.Hostname()
		if err != nil {
			return bound
		}
		host = h
	}
	return net.JoinHostPort(host, port)
}

// Addr returns the first listener's bound address.
func (b *Broker) Addr() string { return b.addrs[0].Addr }

// MetricsHandler serves the Prometheus metrics.
func (b *Broker) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(b.metrics.reg, promhttp.HandlerOpts{})
}

// acceptLoop serves one listener; counted: its connections count against
// max.connections (conn_limits.go).
func (b *Broker) acceptLoop(ln net.Listener, l Listener, counted bool) {
	var delay time.Duration
	for {
		for counted {
			full, freed := b.limits.full()
			if !full {
				break
			}
			select { // max.connections: accept once one closes
			case <-freed:
			case <-b.ctx.Done():
				return
			}
		}
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary failures (EMFILE…): back off, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			b.log.Warn("accept failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-b.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		ip := remoteIP(nc.RemoteAddr())
		if counted {
			// Connection creation rates (KIP-612, conn_limits.go):
			// the listener's first, then the client address's.
			now := time.Now()
			if d := b.limits.creationThrottle(now); d > 0 {
				b.metrics.connThrottled.WithLabelValues("broker").Inc()
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-b.ctx.Done():
					t.Stop()
					nc.Close()
					return
				}
			}
			if d := b.quotas.connectionThrottle(ip, now); d > 0 {
				b.metrics.connThrottled.WithLabelValues("ip").Inc()
				b.log.Debug("throttling connection: connection_creation_rate of its address exceeded", "ip", ip, "listener", l.Name, "close_in", d)
				b.limits.hold(nc, d)
				continue
			}
		}
		if !b.limits.admit(ip, counted) {
			b.metrics.connRejected.Inc()
			b.log.Debug("closing connection: max.connections.per.ip reached", "ip", ip, "listener", l.Name)
			nc.Close()
			continue
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		c := newConn(b, nc, l)
		b.mu.Lock()
		if b.mu.draining {
			// Close closes the listeners before it drains the
			// connections; this is a listener Close did not know.
			b.mu.Unlock()
			nc.Close()
			b.limits.release(ip, counted)
			continue
		}
		b.mu.conns[c] = struct{}{}
		b.connWG.Add(1)
		b.mu.Unlock()
		go pprof.Do(b.ctx, pprof.Labels("sediment", "conn"), func(context.Context) {
			defer b.connWG.Done()
			c.serve()
			b.mu.Lock()
			delete(b.mu.conns, c)
			b.mu.Unlock()
			b.limits.release(ip, counted)
		})
	}
}

// chain wraps an API's handler in the configured middleware. New builds
// every API's chain once (b.chains): the middleware is fixed by the
// configuration, and a request pays no allocation for it.
func (b *Broker) chain(e *apiEntry) Handler {
	h := e.handler
	if authz := b.authzMiddleware(e.key); authz != nil {
		h = authz(h) // ACLs (authz.go), innermost: inside quotas and any others
	}
	if audit := b.auditMiddleware(e.key); audit != nil {
		h = audit(h) // the admin audit log (audit.go): ACL refusals included
	}
	for i := len(b.cfg.Middleware) - 1; i >= 0; i-- {
		h = b.cfg.Middleware[i](h)
	}
	return b.quotas.middleware(h) // client quotas (quota.go), outermost
}

// Close shuts the broker down gracefully: stop accepting, stop reading new
// requests, let in-flight requests finish and their replies be written
// (long polls end early), then flush and close every partition log with a
// clean-shutdown marker, then the metadata node.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		return nil
	}
	b.mu.closed = true
	b.mu.Unlock()
	// Leadership moves away first, while requests are still served and
	// new connections still accepted: a client that comes now (to find
	// a coordinator or a leader) is answered NOT_COORDINATOR or
	// NOT_LEADER_OR_FOLLOWER and looks elsewhere. A connection closed
	// before its first answer reads as an EOF on the first read, which
	// franz-go and librdkafka take for a TLS mismatch and do not retry
	// (a transactional offset commit failed with EOF under rolling
	// restarts), and one left in the listen backlog times out.
	b.controlledShutdown()
	if b.testHookShutdown != nil {
		b.testHookShutdown()
	}
	// Then stop accepting: a dial is refused from now on, which clients
	// retry elsewhere.
	for _, ln := range b.listeners {
		ln.Close()
	}
	b.acceptWG.Wait()
	b.limits.closeHeld() // connections held by a connection rate quota
	b.mu.Lock()
	b.mu.draining = true
	close(b.stopping)
	if b.groups != nil {
		// First: requests waiting in JoinGroup/SyncGroup answer at once.
		b.groups.close()
	}
	if b.txns != nil {
		b.txns.close()
	}
	conns := b.shutdownConnsAndUnlock()
	done := make(chan struct{})
	go func() { b.connWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(b.cfg.ShutdownTimeout):
		b.log.Warn("connections still busy; closing them", "after", b.cfg.ShutdownTimeout)
		for _, c := range conns {
			c.kill()
		}
		<-done
	}
	if b.shares != nil {
		b.shares.close() // the last share-partition start offsets, while the metadata is open
	}
	b.cancel()
	b.closeTiering() // before the logs close (tiering.go)
	var err error
	if b.store != nil {
		err = b.store.close()
	}
	b.cleaner.close() // after the store: every log is unregistered
	if b.krbClient != nil {
		// After every client that logs in with it, and under the gate
		// that their logins hold (advertisedSPN).
		b.krbGate.mu.Lock()
		b.krbGate.destroyed = true
		b.krbClient.Destroy()
		b.krbGate.mu.Unlock()
	}
	b.dirLock.release() // last: nothing of the directory is open any more
	b.log.Info("broker stopped")
	return err
}

// stopServing closes the Kafka listeners and the client connections (each
// finishes the request it is serving) and leaves the rest running: the
// metadata node (a voter keeps voting and storing the log), the admin
// endpoint (/readyz says why) and the logs. For a broker whose metadata
// state machine stopped (store.fenceSelf); Close still shuts it down.
func (b *Broker) stopServing() {
	for _, ln := range b.listeners {
		ln.Close()
	}
	b.acceptWG.Wait()
	b.mu.Lock()
	b.mu.draining = true // a connection accepted meanwhile is closed
	b.shutdownConnsAndUnlock()
}

// shutdownConnsAndUnlock unlocks b.mu, which the caller holds, after
// listing the open connections, then tells each to finish the request it
// serves and stop (conn.shutdown), and returns them.
func (b *Broker) shutdownConnsAndUnlock() []*conn {
	conns := make([]*conn, 0, len(b.mu.conns))
	for c := range b.mu.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	for _, c := range conns {
		c.shutdown()
	}
	return conns
}

// peerAddress is where to dial a peer advertised at addr (Config.PeerAddresses).
func (b *Broker) peerAddress(addr string) string {
	if to, ok := b.cfg.PeerAddresses[addr]; ok {
		return to
	}
	return addr
}

// dialPeer is the dialer of the broker's own Kafka clients (replica fetches,
// transaction markers): it follows Config.PeerAddresses.
func (b *Broker) dialPeer(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	nc, err := d.DialContext(ctx, network, b.peerAddress(addr))
	if err != nil {
		return nil, err
	}
	c := b.peerTLS(nc, addr)
	if tc, ok := c.(*tls.Conn); ok {
		// The handshake here, bounded: left to the client's first write,
		// it would run under only a write deadline, and its read of the
		// peer's answer would wait for ever on a peer that accepted the
		// connection but does not answer (a stopped process).
		hctx, cancel := context.WithTimeout(ctx, d.Timeout)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return c, nil
}
