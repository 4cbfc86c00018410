package group

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/internal/reqtime"
)

// Sentinel errors. The request methods return only ctx.Err() or ErrClosed;
// every protocol-level problem is a Kafka error code inside the response.
var (
	// ErrClosed is returned by request methods after Close. The broker
	// answers such a request with NOT_COORDINATOR so the client looks the
	// coordinator up again.
	ErrClosed = errors.New("group: coordinator closed")
	// ErrNotLeader may be wrapped by a Log's Append to say that this broker
	// no longer leads the offsets partition; the member gets NOT_COORDINATOR
	// instead of COORDINATOR_NOT_AVAILABLE.
	ErrNotLeader = errors.New("group: not the leader of the offsets partition")
	// ErrCorruptRecord is returned by a load when a record of a known key
	// version cannot be decoded.
	ErrCorruptRecord = errors.New("group: corrupt record in offsets partition")
)

// Kafka's defaults for the broker settings of the same names.
const (
	DefaultPartitions             = 50                 // offsets.topic.num.partitions
	DefaultInitialRebalanceDelay  = 3 * time.Second    // group.initial.rebalance.delay.ms
	DefaultMinSessionTimeout      = 6 * time.Second    // group.min.session.timeout.ms
	DefaultMaxSessionTimeout      = 30 * time.Minute   // group.max.session.timeout.ms
	DefaultOffsetsRetention       = 7 * 24 * time.Hour // offsets.retention.minutes
	DefaultRetentionCheckInterval = 10 * time.Minute   // offsets.retention.check.interval.ms
	DefaultMaxMetadataBytes       = 4096               // offset.metadata.max.bytes
	newMemberJoinTimeout          = 5 * time.Minute    // GroupCoordinator.NewMemberJoinTimeoutMs
)

// Config configures a Coordinator. Zero values take Kafka's defaults.
type Config struct {
	// Partitions is the partition count of __consumer_offsets
	// (offsets.topic.num.partitions); it decides which partition, and so
	// which coordinator, owns a group (see PartitionFor).
	Partitions int32
	// PartitionCount, if set, returns the partition count of the existing
	// __consumer_offsets topic (0 while there is none). It wins over
	// Partitions, as Kafka maps groups by the topic's own count once it
	// exists: a broker started with another offsets.topic.num.partitions
	// must not look for a group's offsets in another partition. It is
	// called from request goroutines and the loop, and must not block.
	PartitionCount func() int32
	// InitialRebalanceDelay is group.initial.rebalance.delay.ms: how long
	// the first rebalance of an empty group waits for more members. A
	// negative value means no delay.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound the session timeout a
	// member may ask for (INVALID_SESSION_TIMEOUT outside).
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// MaxGroupSize is group.max.size; 0 means unlimited.
	MaxGroupSize int
	// OffsetsRetention is offsets.retention.minutes: offsets of a group
	// that has been empty this long expire.
	OffsetsRetention time.Duration
	// RetentionCheckInterval is offsets.retention.check.interval.ms.
	RetentionCheckInterval time.Duration
	// MaxMetadataBytes is offset.metadata.max.bytes.
	MaxMetadataBytes int
	// Topics, if set, resolves topic IDs (OffsetCommit/OffsetFetch v10) and
	// lets commits to unknown partitions fail with UNKNOWN_TOPIC_OR_PARTITION.
	// Without it every topic name is accepted and topic IDs are unknown.
	Topics Topics
	// ConsumerSessionTimeout is group.consumer.session.timeout.ms: a
	// KIP-848 member with no heartbeat within it is removed.
	ConsumerSessionTimeout time.Duration
	// ConsumerHeartbeatInterval is group.consumer.heartbeat.interval.ms,
	// the interval KIP-848 members are told to heartbeat at.
	ConsumerHeartbeatInterval time.Duration
	// GroupConfigs, if set, returns the configs set on a group (Kafka
	// 4.0's GROUP config resource): consumer.session.timeout.ms and
	// consumer.heartbeat.interval.ms override the two above for it.
	GroupConfigs func(group string) map[string]string
	// MigrationPolicy is group.consumer.migration.policy: whether a group
	// with members may move between the classic protocol and KIP-848
	// online (migration.go). The zero value is Kafka 4.0's default,
	// bidirectional.
	MigrationPolicy MigrationPolicy
	// Clock defaults to the wall clock; tests inject a fake one.
	Clock Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// newMemberID makes member ids; tests replace it for stable output.
	newMemberID func(clientID string) string
}

// Topics is what the coordinator needs of the cluster's topic metadata. Its
// methods are called from request goroutines and, for KIP-848 assignment,
// from the coordinator's loop: they must be safe for concurrent use and
// must not block.
type Topics interface {
	// Partitions returns the partition count and ID of a topic; ok is false
	// if the topic does not exist.
	Partitions(topic string) (id [16]byte, partitions int32, ok bool)
	// Name returns the name of a topic by ID; ok is false if unknown.
	Name(id [16]byte) (name string, ok bool)
}

// Client describes the connection a request came on: it is shown by
// DescribeGroups and kept in the group metadata record.
type Client struct {
	ClientID string
	Host     string
}

// Coordinator is the classic-protocol group coordinator for the
// __consumer_offsets partitions this broker leads. All group state belongs to
// one goroutine (run); requests, timer expiries, appends that completed and
// loads that finished reach it as closures on one channel.
type Coordinator struct {
	cfg    Config
	clock  Clock
	logger *slog.Logger

	events  chan func()
	stop    chan struct{}
	stopped chan struct{}
	wg      sync.WaitGroup // run, loaders, appenders
	closeMu sync.Once

	// Owned by run.
	partitions  map[int32]*partition
	expiryStop  func() bool
	idleWaiters []chan struct{}
}

// New starts a coordinator that owns no partition until Load is called.
func New(cfg Config) *Coordinator {
	if cfg.Partitions <= 0 {
		cfg.Partitions = DefaultPartitions
	}
	if cfg.InitialRebalanceDelay == 0 {
		cfg.InitialRebalanceDelay = DefaultInitialRebalanceDelay
	} else if cfg.InitialRebalanceDelay < 0 {
		cfg.InitialRebalanceDelay = 0
	}
	if cfg.MinSessionTimeout == 0 {
		cfg.MinSessionTimeout = DefaultMinSessionTimeout
	}
	if cfg.MaxSessionTimeout == 0 {
		cfg.MaxSessionTimeout = DefaultMaxSessionTimeout
	}
	if cfg.OffsetsRetention == 0 {
		cfg.OffsetsRetention = DefaultOffsetsRetention
	}
	if cfg.RetentionCheckInterval == 0 {
		cfg.RetentionCheckInterval = DefaultRetentionCheckInterval
	}
	if cfg.MaxMetadataBytes == 0 {
		cfg.MaxMetadataBytes = DefaultMaxMetadataBytes
	}
	if cfg.ConsumerSessionTimeout == 0 {
		cfg.ConsumerSessionTimeout = DefaultConsumerSessionTimeout
	}
	if cfg.ConsumerHeartbeatInterval == 0 {
		cfg.ConsumerHeartbeatInterval = DefaultConsumerHeartbeatInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.newMemberID == nil {
		cfg.newMemberID = randomMemberID
	}
	c := &Coordinator{
		cfg:        cfg,
		clock:      cfg.Clock,
		logger:     cfg.Logger.With("component", "group-coordinator"),
		events:     make(chan func()),
		stop:       make(chan struct{}),
		stopped:    make(chan struct{}),
		partitions: make(map[int32]*partition),
	}
	c.wg.Add(1)
	go pprof.Do(context.Background(), pprof.Labels("sediment", "group-coordinator"), func(context.Context) {
		defer c.wg.Done()
		c.run()
	})
	return c
}

// Close stops the loop, fails waiting requests with ErrClosed, stops timers
// and waits for every goroutine the coordinator started.
func (c *Coordinator) Close() error {
	c.closeMu.Do(func() { close(c.stop) })
	c.wg.Wait()
	return nil
}

func (c *Coordinator) run() {
	defer close(c.stopped)
	c.expiryStop = c.after(c.cfg.RetentionCheckInterval, c.expireOffsetsTick)
	for {
		select {
		case fn := <-c.events:
			fn()
		case <-c.stop:
			if c.expiryStop != nil {
				c.expiryStop()
			}
			for _, p := range c.partitions {
				c.dropPartition(p, nil)
			}
			return
		}
	}
}

// inLoop runs fn on the loop and waits until it has run. It returns false if
// the coordinator stopped first.
func (c *Coordinator) inLoop(fn func()) bool {
	done := make(chan struct{})
	select {
	case c.events <- func() { fn(); close(done) }:
	case <-c.stop:
		return false
	}
	select {
	case <-done:
		return true
	case <-c.stopped:
		return false
	}
}

// after schedules fn to run on the loop after d. The returned func stops it.
// The clock callback waits until fn has run, so a fake clock's Advance
// returns only after every timer it fired has been handled.
func (c *Coordinator) after(d time.Duration, fn func()) (stop func() bool) {
	return c.clock.AfterFunc(d, func() { c.inLoop(fn) })
}

// submit runs fn on the loop; fn (or something it schedules) must call
// reply exactly once, from the loop.
func submit[T any](ctx context.Context, c *Coordinator, fn func(reply func(T))) (T, error) {
	var zero T
	ch := make(chan T, 1)
	f := func() { fn(func(r T) { ch <- r }) }
	select {
	case c.events <- f:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-c.stop:
		return zero, ErrClosed
	}
	// The loop does the work; this request waits for it (not charged
	// to a request quota).
	defer reqtime.Wait(ctx)()
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-c.stopped:
		// The loop may have answered just before stopping.
		select {
		case r := <-ch:
			return r, nil
		default:
			return zero, ErrClosed
		}
	}
}

// Handle dispatches any group request this package serves. It returns
// (nil, nil) for a request it does not serve.
func (c *Coordinator) Handle(ctx context.Context, client Client, req kmsg.Request) (kmsg.Response, error) {
	var (
		resp kmsg.Response
		err  error
	)
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		resp, err = c.JoinGroup(ctx, client, r)
	case *kmsg.SyncGroupRequest:
		resp, err = c.SyncGroup(ctx, r)
	case *kmsg.HeartbeatRequest:
		resp, err = c.Heartbeat(ctx, r)
	case *kmsg.LeaveGroupRequest:
		resp, err = c.LeaveGroup(ctx, r)
	case *kmsg.OffsetCommitRequest:
		resp, err = c.OffsetCommit(ctx, r)
	case *kmsg.OffsetFetchRequest:
		resp, err = c.OffsetFetch(ctx, r)
	case *kmsg.DescribeGroupsRequest:
		resp, err = c.DescribeGroups(ctx, r)
	case *kmsg.ListGroupsRequest:
		resp, err = c.ListGroups(ctx, r)
	case *kmsg.DeleteGroupsRequest:
		resp, err = c.DeleteGroups(ctx, r)
	case *kmsg.OffsetDeleteRequest:
		resp, err = c.OffsetDelete(ctx, r)
	case *kmsg.ConsumerGroupHeartbeatRequest:
		resp, err = c.ConsumerGroupHeartbeat(ctx, client, r)
	case *kmsg.ConsumerGroupDescribeRequest:
		resp, err = c.ConsumerGroupDescribe(ctx, r)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func randomMemberID(clientID string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", clientID, b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
