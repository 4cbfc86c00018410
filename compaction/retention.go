package compaction

import (
	"time"

	"github.com/sediment-io/sediment/hotlog"
)

// RetentionResult is what one retention check of a log did.
type RetentionResult struct {
	NewLogStart     int64 // the log start after the check
	SegmentsDeleted int
	BytesDeleted    int64
}

// RetainLocal applies retention.ms and retention.bytes to l's local segments,
// as Kafka's deleteOldSegments: it deletes the longest prefix of whole sealed
// segments each of which is past retention.ms (its max timestamp older than
// now minus retention.ms) or whose removal leaves the log at least
// retention.bytes large, by raising the log start offset to the next
// segment's base with hotlog's DeleteBefore. The active segment is never
// deleted. Settings <= 0 are "no limit". limit, if >= 0, caps the new log start
// (local.retention.* must stay below the offset committed to the bucket).
func RetainLocal(l *hotlog.Log, cfg TopicConfig, now time.Time, limit int64) (RetentionResult, error) {
	segs := l.Segments()
	res := RetentionResult{NewLogStart: l.LogStartOffset()}
	var total int64
	for _, s := range segs {
		total += s.Size
	}
	horizon := now.Add(-cfg.Retention).UnixMilli()
	newStart := int64(-1)
	for _, s := range segs {
		if !s.Sealed || (limit >= 0 && s.NextOffset > limit) {
			break
		}
		byTime := cfg.Retention > 0 && s.MaxTimestamp >= 0 && s.MaxTimestamp < horizon
		bySize := cfg.RetentionBytes > 0 && total-s.Size >= cfg.RetentionBytes
		if !byTime && !bySize {
			break
		}
		total -= s.Size
		newStart = s.NextOffset
		res.SegmentsDeleted++
		res.BytesDeleted += s.Size
	}
	if newStart <= res.NewLogStart {
		return RetentionResult{NewLogStart: res.NewLogStart}, nil
	}
	if err := l.DeleteBefore(newStart); err != nil {
		return RetentionResult{NewLogStart: l.LogStartOffset()}, err
	}
	res.NewLogStart = newStart
	return res, nil
}
