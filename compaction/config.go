package compaction

import (
	"fmt"
	"strings"
	"time"
)

// Policy is a topic's cleanup.policy: delete, compact, or both.
type Policy struct {
	Delete  bool
	Compact bool
}

// ParsePolicy parses cleanup.policy ("delete", "compact", "compact,delete";
// an empty string is Kafka's default, delete).
func ParsePolicy(s string) (Policy, error) {
	var p Policy
	if strings.TrimSpace(s) == "" {
		return Policy{Delete: true}, nil
	}
	for _, part := range strings.Split(s, ",") {
		switch strings.TrimSpace(strings.ToLower(part)) {
		case "delete":
			p.Delete = true
		case "compact":
			p.Compact = true
		default:
			return Policy{}, fmt.Errorf("compaction: unknown cleanup.policy %q", part)
		}
	}
	return p, nil
}

func (p Policy) String() string {
	switch {
	case p.Compact && p.Delete:
		return "compact,delete"
	case p.Compact:
		return "compact"
	case p.Delete:
		return "delete"
	}
	return ""
}

// TopicConfig holds a partition's cleaning and retention settings, named
// after Kafka's topic configs. Zero values take the defaults in brackets.
type TopicConfig struct {
	Policy Policy // cleanup.policy
	// MinCleanableDirtyRatio (min.cleanable.dirty.ratio) [0.5]: a log is
	// cleaned when dirty bytes / (clean + dirty bytes) reach it.
	MinCleanableDirtyRatio float64
	// MinCompactionLag (min.compaction.lag.ms) [0]: records younger than this
	// (by their segment's max timestamp) are not cleaned.
	MinCompactionLag time.Duration
	// MaxCompactionLag (max.compaction.lag.ms) [0: none]: a log whose oldest
	// dirty record is older than this is cleaned whatever its dirty ratio.
	MaxCompactionLag time.Duration
	// DeleteRetention (delete.retention.ms) [24h]: how long tombstones and
	// transaction markers stay after the cleaner first sees them.
	DeleteRetention time.Duration
	// SegmentBytes (segment.bytes) [1 GiB]: the largest segment the cleaner
	// merges a group of segments into.
	SegmentBytes int64
	// Retention (retention.ms) [-1: none]: whole sealed segments whose max
	// timestamp is older are deleted. A zero value means the default (7
	// days) only through DefaultTopicConfig; here 0 is "none" too.
	Retention time.Duration
	// RetentionBytes (retention.bytes) [-1: none]: oldest whole sealed
	// segments are deleted while the log is larger.
	RetentionBytes int64
}

// DefaultTopicConfig is Kafka's defaults: delete, 7 days, no size limit.
func DefaultTopicConfig() TopicConfig {
	return TopicConfig{
		Policy:                 Policy{Delete: true},
		MinCleanableDirtyRatio: 0.5,
		DeleteRetention:        24 * time.Hour,
		SegmentBytes:           1 << 30,
		Retention:              7 * 24 * time.Hour,
		RetentionBytes:         -1,
	}
}

func (c TopicConfig) withDefaults() TopicConfig {
	if c.MinCleanableDirtyRatio <= 0 {
		c.MinCleanableDirtyRatio = 0.5
	}
	if c.DeleteRetention < 0 {
		c.DeleteRetention = 0
	} else if c.DeleteRetention == 0 {
		c.DeleteRetention = 24 * time.Hour
	}
	if c.SegmentBytes <= 0 || c.SegmentBytes > 1<<31-1 {
		c.SegmentBytes = 1 << 30
	}
	return c
}

// CleanerConfig holds the broker-wide cleaner settings (log.cleaner.*).
type CleanerConfig struct {
	// Threads (log.cleaner.threads) [1]: cleaner goroutines of a Manager.
	Threads int
	// DedupeBufferBytes (log.cleaner.dedupe.buffer.size) [128 MiB]: the
	// memory of each cleaner's key map: three quarters for the table (16
	// bytes a slot, 90% load: 17.8 bytes a key), a quarter for its bitmaps
	// (3 bits an offset: 2/3 of the memory in offsets covered). A log
	// with more dirty keys is cleaned in several passes.
	DedupeBufferBytes int64
	// IOMaxBytesPerSecond (log.cleaner.io.max.bytes.per.second) [0: no
	// limit]: read plus written bytes, for all of a Manager's cleaners.
	IOMaxBytesPerSecond float64
	// Backoff (log.cleaner.backoff.ms) [15s]: how long an idle cleaner
	// sleeps before it looks for work again.
	Backoff time.Duration
	// MaxBatchBytes [64 MiB]: the largest decompressed batch the cleaner
	// opens; a larger one fails the clean of its log (as corrupt).
	MaxBatchBytes int
	// ReadChunk [1 MiB]: bytes read from the log at a time.
	ReadChunk int64
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c CleanerConfig) WithDefaults() CleanerConfig {
	if c.Threads <= 0 {
		c.Threads = 1
	}
	if c.DedupeBufferBytes <= 0 {
		c.DedupeBufferBytes = 128 << 20
	}
	if c.Backoff <= 0 {
		c.Backoff = 15 * time.Second
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 64 << 20
	}
	if c.ReadChunk <= 0 {
		c.ReadChunk = 1 << 20
	}
	return c
}
