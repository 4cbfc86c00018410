package hotlog

import (
	"log/slog"
	"time"

	"github.com/sediment-io/sediment/internal/vfs"
)

// FlushPolicy chooses when appended bytes are fsynced.
type FlushPolicy int

const (
	// FlushEveryCommit fsyncs before Append returns; concurrent appenders share
	// one fsync (group commit). The default, for acks=all.
	FlushEveryCommit FlushPolicy = iota
	// FlushInterval fsyncs in the background every Config.FlushInterval.
	FlushInterval
	// FlushOS leaves flushing to the operating system (Kafka's default);
	// segments are still fsynced when they roll and when the log closes.
	FlushOS
)

func (p FlushPolicy) String() string {
	switch p {
	case FlushEveryCommit:
		return "every-commit"
	case FlushInterval:
		return "interval"
	case FlushOS:
		return "os"
	}
	return "unknown"
}

// Config holds a partition's log settings, named after Kafka's topic configs.
// Zero fields take the defaults in brackets.
type Config struct {
	SegmentBytes int64 // segment.bytes [1 GiB]; at most 2 GiB - 1
	//lint:ignore ST1011 named after Kafka's segment.ms, as the shared contract spells it
	SegmentMs          time.Duration // segment.ms [7 days]
	IndexIntervalBytes int           // index.interval.bytes [4096]
	MaxIndexBytes      int           // segment.index.bytes [10 MiB]
	Flush              FlushPolicy
	FlushInterval      time.Duration // for FlushInterval [1s]
	// MaxMessageBytes (max.message.bytes) refuses larger batches with
	// ErrBatchTooLarge [0: no limit here].
	MaxMessageBytes int32
	// TimestampBeforeMax and TimestampAfterMax (message.timestamp.before.max.ms,
	// .after.max.ms) refuse CreateTime batches whose timestamps are that far
	// behind or ahead of Now, with ErrInvalidTimestamp [0: no limit].
	TimestampBeforeMax time.Duration
	TimestampAfterMax  time.Duration
	// FileDeleteDelay (file.delete.delay.ms) is how long the files of a
	// segment that left the log (retention, DeleteRecords, truncation, a
	// cleaner's swap) stay, renamed *.deleted, before the log's deleter
	// removes them; never before the last reader released the segment
	// (deleter.go) [0: at the last release, on the goroutine that made
	// it; the broker's default is Kafka's 60 s]. Negative is 0. A change
	// applies to segments deleted after it.
	FileDeleteDelay time.Duration
}

const (
	defaultSegmentBytes       = 1 << 30
	defaultSegmentAge         = 7 * 24 * time.Hour
	defaultIndexIntervalBytes = 4096
	defaultMaxIndexBytes      = 10 << 20
	defaultFlushInterval      = time.Second
	maxSegmentBytes           = 1<<31 - 1
)

func (c Config) withDefaults() Config {
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = defaultSegmentBytes
	}
	if c.SegmentBytes > maxSegmentBytes {
		c.SegmentBytes = maxSegmentBytes
	}
	if c.SegmentMs <= 0 {
		c.SegmentMs = defaultSegmentAge
	}
	if c.IndexIntervalBytes <= 0 {
		c.IndexIntervalBytes = defaultIndexIntervalBytes
	}
	if c.MaxIndexBytes <= 0 {
		c.MaxIndexBytes = defaultMaxIndexBytes
	}
	if c.MaxIndexBytes < 4*timeIndexEntrySize {
		c.MaxIndexBytes = 4 * timeIndexEntrySize
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = defaultFlushInterval
	}
	if c.FileDeleteDelay < 0 {
		c.FileDeleteDelay = 0
	}
	return c
}

// Options open a Log.
type Options struct {
	FS     vfs.FS // [vfs.Default]
	Dir    string // the partition directory, created if missing
	Config Config
	Now    func() time.Time // [time.Now]
	Logger *slog.Logger     // [slog.Default()]
	// RollSnapshot, if set, is called under the append lock each time a
	// segment rolls, before the new segment takes any batch; what it
	// returns (nil: nothing) is written as the producer snapshot at the new
	// segment's base, so every sealed segment has the producer state at
	// its end beside it (as Kafka does; tiering uploads it with the
	// segment). Such snapshots stay while their segment is in the log. It
	// must not call back into the Log.
	RollSnapshot func() []byte
	// OnDurable, if set, is called by the log's background syncer after
	// the fsync that a NoSyncWait append started, with DurableEnd. It must
	// not call back into the Log's writers (Close waits for the syncer
	// while holding the append lock); the reading methods are fine.
	OnDurable func(end int64)
	// OnFail, if set, is called once, with the error, when the log fails
	// (an I/O error past the point where an append can be taken back, such
	// as a failed fsync: appends are refused with ErrLogFailed until the
	// log is reopened). It may be called with the log's locks held and
	// must not call back into the Log.
	OnFail func(err error)
}
