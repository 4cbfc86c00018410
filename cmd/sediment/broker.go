package main

// `sediment broker`: run one broker. Settings come from (highest first)
// flags, SEDIMENT_* environment variables (the flag name upper-cased, '-'
// as '_': --node-id is SEDIMENT_NODE_ID), the YAML file given with
// --config, and the embedded defaults below. docs/configuration.md lists
// them all.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/sediment-io/sediment/broker"
	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/broker/txn"
	"github.com/sediment-io/sediment/internal/failpoint"
)

// failpointServing is the failpoint (internal/failpoint) where `sediment
// broker` has started the broker, which serves, and has done nothing else.
const failpointServing = "broker-serving"

// brokerSetting is one configuration key: its flag, default and help.
type brokerSetting struct {
	name string
	def  any
	help string
}

var brokerSettings = []brokerSetting{
	{"node-id", 1, "this broker's node id"},
	{"cluster-id", "sediment-cluster", "cluster id reported to clients"},
	{"data-dir", "./data", "directory for partition logs and metadata"},
	{"listeners", "PLAINTEXT://localhost:9092", "Kafka listeners, comma-separated NAME://host:port (or host:port)"},
	{"advertised-listeners", "", "addresses given to clients, same form as listeners (default: the bound ones)"},
	{"admin-address", "127.0.0.1:9644", "HTTP address of /metrics (empty disables)"},
	{"raft-address", "127.0.0.1:9093", "address of the metadata quorum's Raft transport"},
	{"voters", "", "metadata quorum voters, comma-separated id@host:port Raft addresses (empty: this broker alone)"},
	{"broker-rack", "", "broker.rack: this broker's rack or zone; consumers with the same client.rack fetch from it when it is an in-sync replica (KIP-392)"},
	{"peer-addresses", "", "comma-separated advertised=dialed host:port pairs: reach a peer's Kafka listener or Raft address through another address (a relay or a fault proxy)"},
	{"join-timeout", 5 * time.Minute, "a broker whose node-id is not in voters joins that quorum as an observer and waits this long to be added (an older quorum: until sediment cluster voters add)"},
	{"replica-lag-time-max", 30 * time.Second, "replica.lag.time.max.ms: a follower not caught up for this long leaves the ISR"},
	{"replica-fetch-wait-max", 500 * time.Millisecond, "replica.fetch.wait.max.ms: a follower fetch's long poll"},
	{"auto-leader-rebalance-enable", true, "auto.leader.rebalance.enable: the controller moves leadership back to preferred replicas at leader imbalance checks"},
	{"leader-imbalance-check-interval", 300 * time.Second, "leader.imbalance.check.interval.seconds: how long after the controller sees a partition not led by its preferred replica it checks the leader imbalance"},
	{"leader-imbalance-per-broker-percentage", 10, "leader.imbalance.per.broker.percentage: a check moves leadership back to a broker only when others lead more than this percentage of the partitions it is the preferred replica of (0-100)"},
	{"stray-log-delete-delay", time.Hour, "how long a partition directory found at start that the metadata no longer places here (a replica moved away, a topic deleted while the broker was down) is kept, renamed <topic>-<n>.<ms>-stray, before it is deleted (negative: never)"},
	{"deleted-log-delete-delay", time.Minute, "file.delete.delay.ms for whole partitions: how long the directory of a partition this broker stops holding while it runs (topic deleted, replica moved away) is kept, renamed <topic>-<n>.<ms>-delete, before it is removed (negative: at once)"},
	{"log-level", "info", "debug, info, warn or error"},
	{"log-format", "text", "text or json"},
	{"auto-create-topics-enable", true, "auto.create.topics.enable: create topics on Metadata requests"},
	{"num-partitions", 1, "num.partitions: partitions of auto-created topics and of CreateTopics with -1"},
	{"default-replication-factor", 1, "default.replication.factor"},
	{"message-max-bytes", 1048588, "message.max.bytes: default max.message.bytes of topics"},
	{"log-segment-bytes", int64(1 << 30), "log.segment.bytes: default segment.bytes of topics"},
	{"log-retention-ms", int64(7 * 24 * 3600 * 1000), "log.retention.ms: default retention.ms of topics"},
	{"log-segment-delete-delay", time.Minute, "log.segment.delete.delay.ms: default file.delete.delay.ms of topics: how long the files of a segment deleted by retention or replaced by the log cleaner stay (renamed *.deleted) before they are removed (0: at once)"},
	{"log-flush", "commit", "commit (every append fsynced, group-committed; acks=all answered after it), interval, or os (page cache only)"},
	{"log-flush-interval", time.Second, "fsync interval when log-flush is interval"},
	{"socket-request-max-bytes", 100 << 20, "socket.request.max.bytes: largest request frame"},
	{"queued-max-request-bytes", int64(512 << 20), "queued.max.request.bytes: bytes of requests read and not yet handled, all connections together"},
	{"fetch-max-bytes", broker.DefaultFetchMaxBytes, "fetch.max.bytes: the most record bytes one Fetch or ShareFetch answer carries, whatever its max_bytes (1024 to 1 GiB; the first batch still comes whole)"},
	{"connections-max-idle", 10 * time.Minute, "connections.max.idle.ms: close idle connections after this"},
	{"max-connections-per-ip", 0, "max.connections.per.ip: connections one client address may have open; more are closed at once (0: no limit)"},
	{"max-connections-per-ip-overrides", "", "max.connections.per.ip.overrides: host:count pairs, comma-separated, that replace max-connections-per-ip for those addresses (0 refuses one)"},
	{"max-connections", 0, "max.connections: connections open on the client listeners before they stop accepting until one closes; the first (inter-broker) listener is not counted when there are several (0: no limit)"},
	{"max-connection-creation-rate", 0, "max.connection.creation.rate: new connections per second on the client listeners; beyond it they wait before serving the next (0: no limit)"},
	{"connections-max-reauth", time.Duration(0), "connections.max.reauth.ms (KIP-368): SASL sessions last this long (or until an OAUTHBEARER token expires); clients log in again on the connection, which is closed otherwise (0: off)"},
	{"producer-id-expiration", 24 * time.Hour, "producer.id.expiration.ms: forget idempotent producers idle this long"},
	{"producer-id-expiration-check-interval", 10 * time.Minute, "producer.id.expiration.check.interval.ms: how often partitions forget their expired producers"},
	{"quota-window-num", 11, "quota.window.num: client quota rates (producer_byte_rate, consumer_byte_rate) are measured over this many samples"},
	{"quota-window-size", time.Second, "quota.window.size.seconds: the length of one client quota sample"},
	{"delegation-token-secret-key", "", "delegation.token.secret.key: the key delegation token HMACs are derived with, the same on every broker; tokens are off without it (better given as SEDIMENT_DELEGATION_TOKEN_SECRET_KEY than on the command line)"},
	{"delegation-token-max-lifetime", 7 * 24 * time.Hour, "delegation.token.max.lifetime.ms: the longest a delegation token lives, renewals included"},
	{"delegation-token-expiry-time", 24 * time.Hour, "delegation.token.expiry.time.ms: a delegation token's lifetime from its creation or its last renewal"},
	{"delegation-token-expiry-check-interval", time.Hour, "delegation.token.expiry.check.interval.ms: how often the metadata leader removes expired delegation tokens"},
	{"shutdown-timeout", 30 * time.Second, "how long SIGTERM waits for in-flight requests"},
	{"offsets-topic-num-partitions", 50, "offsets.topic.num.partitions: partitions of __consumer_offsets (fixed once created)"},
	{"offsets-topic-replication-factor", 3, "offsets.topic.replication.factor: replicas of __consumer_offsets when it is created (fewer when fewer brokers are up)"},
	{"group-initial-rebalance-delay", 3 * time.Second, "group.initial.rebalance.delay.ms: how long the first rebalance of an empty group waits for members"},
	{"group-min-session-timeout", 6 * time.Second, "group.min.session.timeout.ms"},
	{"group-max-session-timeout", 30 * time.Minute, "group.max.session.timeout.ms"},
	{"group-max-size", 0, "group.max.size: members per group (0: unlimited)"},
	{"group-consumer-migration-policy", "bidirectional", "group.consumer.migration.policy: whether a group with members moves online between the classic protocol and KIP-848 (bidirectional, upgrade, downgrade or disabled)"},
	{"offsets-retention", 7 * 24 * time.Hour, "offsets.retention.minutes: offsets of a group empty this long expire"},
	{"log-cleaner-threads", 1, "log.cleaner.threads: log cleaner goroutines"},
	{"log-cleaner-dedupe-buffer-size", int64(128 << 20), "log.cleaner.dedupe.buffer.size: key map bytes of each cleaner thread"},
	{"log-cleaner-io-max-bytes-per-second", int64(0), "log.cleaner.io.max.bytes.per.second: cleaner read+write throttle (0: no limit)"},
	{"log-retention-check-interval", 5 * time.Minute, "log.retention.check.interval.ms: how often retention.ms/retention.bytes are applied"},
	{"log-cleaner-backoff", 15 * time.Second, "log.cleaner.backoff.ms: how long an idle log cleaner waits before it looks for dirty logs again"},
	{"tiered-compaction-interval", 30 * time.Second, "how often the remote logs of tiered compacted topics are checked for compaction (negative: never)"},
	{"lease-ttl", 30 * time.Second, "duration of the metadata-log leases of remote jobs (tiered compaction, remote retention)"},
	{"transaction-state-log-num-partitions", 50, "transaction.state.log.num.partitions: partitions of __transaction_state (fixed once created)"},
	{"transaction-state-log-replication-factor", 3, "transaction.state.log.replication.factor: replicas of __transaction_state when it is created (fewer when fewer brokers are up)"},
	{"transaction-state-log-min-isr", 2, "transaction.state.log.min.isr: min.insync.replicas of __transaction_state (at most its replication factor)"},
	{"transaction-max-timeout", 15 * time.Minute, "transaction.max.timeout.ms: the largest transaction.timeout.ms a producer may ask for"},
	{"transaction-abort-interval", 10 * time.Second, "transaction.abort.timed.out.transaction.cleanup.interval.ms: how often open transactions are checked for timeout"},
	{"transactional-id-expiration", 7 * 24 * time.Hour, "transactional.id.expiration.ms: a transactional id with no open transaction and no state change for this long is removed"},
	{"transaction-remove-expired-interval", time.Hour, "transaction.remove.expired.transaction.cleanup.interval.ms: how often transactional ids are checked for expiry"},
}

// topicDefaultSettings are the settings that are defaults of topic configs
// (log-retention-ms of retention.ms), by their Kafka names. Those the
// operator gives (flag, variable, YAML key) are broker.Config's
// StaticConfigs: DescribeConfigs reports them and the topic configs they
// are the default of as STATIC_BROKER_CONFIG, as Kafka reports a value from
// server.properties.
var topicDefaultSettings = map[string]string{
	"message-max-bytes":        "message.max.bytes",
	"log-segment-bytes":        "log.segment.bytes",
	"log-retention-ms":         "log.retention.ms",
	"log-segment-delete-delay": "log.segment.delete.delay.ms",
}

// kafkaSettingNames maps the broker settings that are Kafka broker
// configs to their Kafka names: topicDefaultSettings, a few by hand, and
// every setting whose help starts with its Kafka name ("replica-lag-time-max":
// "replica.lag.time.max.ms: ...").
var kafkaSettingNames = func() map[string][]string {
	m := map[string][]string{"node-id": {"node.id", "broker.id"}, "data-dir": {"log.dirs"},
		"listeners": {"listeners", "listener.security.protocol.map"}, "advertised-listeners": {"advertised.listeners"}}
	for name, kafka := range topicDefaultSettings {
		m[name] = []string{kafka}
	}
	for _, s := range brokerSettings {
		if _, ok := m[s.name]; ok {
			continue
		}
		if k := kafkaNameInHelp.FindStringSubmatch(s.help); k != nil {
			m[s.name] = []string{k[1]}
		}
	}
	return m
}()

var kafkaNameInHelp = regexp.MustCompile(`^([a-z][a-z0-9]*(?:\.[a-z0-9]+)+)(?::|$)`)

// staticConfigs returns the Kafka names of the broker settings set in v
// (kafkaSettingNames): by a flag given, a variable (even empty), or the
// config file; not by a default. DescribeConfigs reports them as
// STATIC_BROKER_CONFIG, as Kafka reports a value from server.properties.
func staticConfigs(v *viper.Viper) map[string]bool {
	m := map[string]bool{}
	for name, kafka := range kafkaSettingNames {
		if v.IsSet(name) {
			for _, k := range kafka {
				m[k] = true
			}
		}
	}
	return m
}

func newBrokerCmd() *cobra.Command { return newBrokerCmdWith(viper.New()) }

// newBrokerCmdWith builds the command around v, which collects the layers.
func newBrokerCmdWith(v *viper.Viper) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a broker (one broker on localhost:9092 with data under ./data by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// A misspelt key is an error, never a silent default
			// (config_check.go).
			if err := checkEnv(os.Environ()); err != nil {
				return err
			}
			if f := v.GetString("config"); f != "" {
				if err := checkConfigFile(f); err != nil {
					return err
				}
				v.SetConfigFile(f)
				if err := v.ReadInConfig(); err != nil {
					return fmt.Errorf("reading config %s: %w", f, err)
				}
			}
			// A value that does not parse is an error too, never a
			// zero (viper's getters return one on failure).
			if err := checkValues(v, cmd.Flags()); err != nil {
				return err
			}
			return runBroker(cmd.Context(), v)
		},
	}
	fs := cmd.Flags()
	fs.String("config", "", "YAML config file (keys as the flag names)")
	for _, s := range brokerSettings {
		switch d := s.def.(type) {
		case int:
			fs.Int(s.name, d, s.help)
		case int64:
			fs.Int64(s.name, d, s.help)
		case bool:
			fs.Bool(s.name, d, s.help)
		case string:
			fs.String(s.name, d, s.help)
		case time.Duration:
			fs.Duration(s.name, d, s.help)
		}
	}
	v.SetEnvPrefix("SEDIMENT")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	// A variable that is set counts even when empty, as a flag or a YAML
	// key does: SEDIMENT_ADMIN_ADDRESS= disables the admin endpoint (viper
	// would skip it and serve the default address). An empty number,
	// bool or duration is then an error (checkValues), as in Kafka.
	v.AllowEmptyEnv(true)
	fs.VisitAll(func(f *pflag.Flag) {
		if err := v.BindPFlag(f.Name, f); err != nil {
			panic(err)
		}
	})
	return cmd
}

// parseListeners reads "NAME://host:port,host:port".
func parseListeners(s string) ([]broker.Listener, error) {
	var out []broker.Listener
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		l := broker.Listener{Name: "PLAINTEXT"}
		if name, addr, ok := strings.Cut(f, "://"); ok {
			l.Name, f = strings.ToUpper(name), addr
		}
		if _, _, err := net.SplitHostPort(f); err != nil {
			return nil, fmt.Errorf("listener %q: %w", f, err)
		}
		l.Addr = f
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, errors.New("no listeners configured")
	}
	return out, nil
}

// newLogger returns the broker's logger on stderr and its level, which the
// broker's BROKER_LOGGER config changes at run time.
func newLogger(level, format string) (*slog.Logger, *slog.LevelVar, error) {
	lv := new(slog.LevelVar)
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), lv, nil
	case "text", "":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), lv, nil
	}
	return nil, nil, fmt.Errorf("log-format %q: want text or json", format)
}

func brokerConfig(v *viper.Viper, log *slog.Logger) (broker.Config, error) {
	migration, err := group.ParseMigrationPolicy(v.GetString("group-consumer-migration-policy"))
	if err != nil {
		return broker.Config{}, err
	}
	listeners, err := parseListeners(v.GetString("listeners"))
	if err != nil {
		return broker.Config{}, err
	}
	if adv := v.GetString("advertised-listeners"); adv != "" {
		advs, err := parseListeners(adv)
		if err != nil {
			return broker.Config{}, fmt.Errorf("advertised-listeners: %w", err)
		}
		for _, a := range advs {
			matched := false
			for i := range listeners {
				if listeners[i].Name == a.Name {
					listeners[i].Advertised, matched = a.Addr, true
				}
			}
			if !matched {
				return broker.Config{}, fmt.Errorf("advertised listener %s has no listener", a.Name)
			}
		}
	}
	voters, err := parseVoters(v.GetString("voters"))
	if err != nil {
		return broker.Config{}, err
	}
	peers, err := parsePeerAddresses(v.GetString("peer-addresses"))
	if err != nil {
		return broker.Config{}, err
	}
	// Ranges and enumerations were checked with the types (checkValues,
	// config_rules.go).
	imbalancePct := v.GetInt("leader-imbalance-per-broker-percentage")
	if imbalancePct == 0 {
		imbalancePct = -1 // broker.Config's "none" (its zero value means the default)
	}
	overrides, err := broker.ParseConnectionOverrides(v.GetString("max-connections-per-ip-overrides"))
	if err != nil {
		return broker.Config{}, err
	}
	cfg := broker.Config{
		MaxConnectionsPerIPOverrides:       overrides,
		Voters:                             voters,
		PeerAddresses:                      peers,
		Rack:                               v.GetString("broker-rack"),
		JoinTimeout:                        v.GetDuration("join-timeout"),
		ReplicaLagTimeMax:                  v.GetDuration("replica-lag-time-max"),
		ReplicaFetchMaxWait:                v.GetDuration("replica-fetch-wait-max"),
		DisableAutoLeaderRebalance:         !v.GetBool("auto-leader-rebalance-enable"),
		LeaderImbalanceCheckInterval:       v.GetDuration("leader-imbalance-check-interval"),
		LeaderImbalancePerBrokerPercentage: imbalancePct,
		StrayLogDeleteDelay:                v.GetDuration("stray-log-delete-delay"),
		DeletedLogDeleteDelay:              v.GetDuration("deleted-log-delete-delay"),
		QuotaWindowNum:                     v.GetInt("quota-window-num"),
		QuotaWindowSize:                    v.GetDuration("quota-window-size"),
		DelegationTokenSecretKey:           v.GetString("delegation-token-secret-key"),
		DelegationTokenMaxLifetime:         v.GetDuration("delegation-token-max-lifetime"),
		DelegationTokenExpiryTime:          v.GetDuration("delegation-token-expiry-time"),
		DelegationTokenExpiryCheckInterval: v.GetDuration("delegation-token-expiry-check-interval"),
		NodeID:                             v.GetInt32("node-id"),
		ClusterID:                          v.GetString("cluster-id"),
		DataDir:                            v.GetString("data-dir"),
		RaftAddr:                           v.GetString("raft-address"),
		Listeners:                          listeners,
		SocketRequestMaxBytes:              v.GetInt32("socket-request-max-bytes"),
		QueuedMaxRequestBytes:              v.GetInt64("queued-max-request-bytes"),
		FetchMaxBytes:                      v.GetInt32("fetch-max-bytes"),
		ConnectionsMaxIdle:                 v.GetDuration("connections-max-idle"),
		ConnectionsMaxReauth:               v.GetDuration("connections-max-reauth"),
		MaxConnectionsPerIP:                v.GetInt("max-connections-per-ip"),
		MaxConnections:                     v.GetInt("max-connections"),
		MaxConnectionCreationRate:          v.GetInt("max-connection-creation-rate"),
		StaticConfigs:                      staticConfigs(v),
		AutoCreateTopics:                   v.GetBool("auto-create-topics-enable"),
		NumPartitions:                      v.GetInt32("num-partitions"),
		DefaultReplicationFactor:           int16(v.GetInt("default-replication-factor")),
		OffsetsTopicReplicationFactor:      int16(v.GetInt("offsets-topic-replication-factor")),
		TransactionStateReplicationFactor:  int16(v.GetInt("transaction-state-log-replication-factor")),
		TransactionStateMinISR:             int16(v.GetInt("transaction-state-log-min-isr")),
		MessageMaxBytes:                    v.GetInt32("message-max-bytes"),
		LogSegmentBytes:                    v.GetInt64("log-segment-bytes"),
		LogRetentionMs:                     v.GetInt64("log-retention-ms"),
		LogSegmentDeleteDelay:              noDelayIsNegative(v.GetDuration("log-segment-delete-delay")),
		LogFlush:                           strings.ToLower(strings.TrimSpace(v.GetString("log-flush"))),
		LogFlushInterval:                   v.GetDuration("log-flush-interval"),
		ShutdownTimeout:                    v.GetDuration("shutdown-timeout"),
		ProducerIDExpiration:               v.GetDuration("producer-id-expiration"),
		ProducerIDExpirationCheckInterval:  v.GetDuration("producer-id-expiration-check-interval"),
		Cleaner: broker.CleanerConfig{
			Threads:                v.GetInt("log-cleaner-threads"),
			DedupeBufferSize:       v.GetInt64("log-cleaner-dedupe-buffer-size"),
			IOMaxBytesPerSecond:    float64(v.GetInt64("log-cleaner-io-max-bytes-per-second")),
			RetentionCheckInterval: v.GetDuration("log-retention-check-interval"),
			Backoff:                v.GetDuration("log-cleaner-backoff"),
			RemoteInterval:         v.GetDuration("tiered-compaction-interval"),
			LeaseTTL:               v.GetDuration("lease-ttl"),
		},
		Groups: group.Config{
			Partitions:            v.GetInt32("offsets-topic-num-partitions"),
			InitialRebalanceDelay: noDelayIsNegative(v.GetDuration("group-initial-rebalance-delay")),
			MinSessionTimeout:     v.GetDuration("group-min-session-timeout"),
			MaxSessionTimeout:     v.GetDuration("group-max-session-timeout"),
			MaxGroupSize:          v.GetInt("group-max-size"),
			OffsetsRetention:      v.GetDuration("offsets-retention"),
			MigrationPolicy:       migration,
		},
		Transactions: txn.Config{
			Partitions:     v.GetInt32("transaction-state-log-num-partitions"),
			MaxTimeout:     v.GetDuration("transaction-max-timeout"),
			AbortInterval:  v.GetDuration("transaction-abort-interval"),
			IDExpiration:   v.GetDuration("transactional-id-expiration"),
			ExpireInterval: v.GetDuration("transaction-remove-expired-interval"),
		},
		Logger: log,
	}
	if err := applySecurity(v, &cfg, log); err != nil { // security.go
		return broker.Config{}, err
	}
	return cfg, nil
}

// noDelayIsNegative maps a configured zero delay to the "none" of
// group.Config's InitialRebalanceDelay and broker.Config's
// LogSegmentDeleteDelay (whose zero values mean Kafka's defaults).
func noDelayIsNegative(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func runBroker(ctx context.Context, v *viper.Viper) error {
	log, level, err := newLogger(strings.TrimSpace(v.GetString("log-level")), v.GetString("log-format"))
	if err != nil {
		return err
	}
	cfg, err := brokerConfig(v, log)
	if err != nil {
		return err
	}
	cfg.LogLevel = level
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	tcfg, err := tieringConfig(ctx, v, cfg.DataDir, log) // tier.go
	if err != nil {
		return err
	}
	cfg.Tiering = tcfg
	if tcfg != nil {
		defer tcfg.Store.Close() // after the broker's Close (deferred below)
	}
	b, err := broker.New(cfg)
	if err != nil {
		return err
	}
	// A test stops the process here, serving, to check what it answers
	// from its first request on (e2e TestTieredFromTheFirstRequest).
	failpoint.Pause(ctx, failpointServing, func() []byte { return []byte(`{}`) })
	if tcfg != nil {
		go checkBucketAccess(ctx, tcfg.Store, log.With("part", "tiering"))
	}
	var admin *http.Server
	adminDone := make(chan struct{})
	if addr := v.GetString("admin-address"); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			b.Close()
			return fmt.Errorf("admin listener: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", b.MetricsHandler())
		mux.Handle("/v1/tier/status", b.TierStatusHandler())
		mux.Handle("/v1/cleaner", b.CleanerStatusHandler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.Handle("/readyz", b.ReadinessHandler())
		admin = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			defer close(adminDone)
			if err := admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin server failed", "err", err)
			}
		}()
		log.Info("admin endpoint", "url", "http://"+ln.Addr().String()+"/metrics")
	} else {
		close(adminDone)
	}
	notifyReady(ctx, b, log) // sdnotify.go

	<-ctx.Done()
	log.Info("shutting down")
	notifyStopping()
	stop() // a second signal kills the process
	if admin != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		admin.Shutdown(sctx)
		cancel()
	}
	<-adminDone
	return b.Close()
}
