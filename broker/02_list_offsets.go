package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListOffsets: v0-11
//
// v0 (removed by Kafka 4.0, KIP-896, and still sent by tools built on old
// clients: Burrow up to 1.9.3, Debian's 1.2.1 among them, sends it whatever
// its kafka-version, linkedin/Burrow#843) answers a list of offsets,
// old_style_offsets, of at most max_num_offsets: latest the high
// watermark, earliest the log start, a time the offset v1 gives (Kafka 3.x
// answered segment base offsets before the time, by the files' modification
// times; both are offsets from which a consumer reads what came at or after
// it), none if no record is that recent: then the high watermark.
//
// Timestamps: -1 latest (the high watermark; the last stable offset for
// read_committed), -2 earliest (log start),
// -3 (v7+) the record with the largest timestamp, -4 (v8+) earliest local
// (the same as -2 until tiering), -5 (v9+) the last offset in the bucket,
// -6 (v11+, KIP-1023) the earliest offset not yet in the bucket, anything
// else: the first offset whose timestamp is at or after it, or -1 when
// none is. A negative timestamp that is none of these, or one sent below
// the version that brought it, is UNSUPPORTED_VERSION for its partition, as
// Kafka's (timestampMinSupportedVersion). v4+ reports the leader
// epoch and fences with the current leader epoch; v10 adds a timeout that a
// single-replica leader never needs. Offsets at or below the high watermark
// (latest, max timestamp, by time) of a partition whose ISR is the leader
// alone wait for its pending fsync first (awaitLoneWrites).

func init() { regKey(2, 0, 11).handler = handleListOffsets }

// sentinelMinVersion is the first ListOffsets version of each negative
// timestamp (Kafka's ListOffsetsRequest.timestampMinSupportedVersion).
var sentinelMinVersion = map[int64]int16{-1: 0, -2: 0, -3: 7, -4: 8, -5: 9, -6: 11}

func handleListOffsets(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	st := b.meta.State()
	// A partition asked twice is INVALID_REQUEST at each place, as Kafka's
	// (ListOffsetsRequest.duplicatePartitions).
	type tp struct {
		topic string
		part  int32
	}
	asked := map[tp]int{}
	for _, t := range req.Topics {
		for _, pt := range t.Partitions {
			asked[tp{t.Topic, pt.Partition}]++
		}
	}
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, pt := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = pt.Partition
			rp.Timestamp, rp.Offset, rp.LeaderEpoch = -1, -1, -1
			if asked[tp{t.Topic, pt.Partition}] > 1 {
				rp.ErrorCode = kerr.InvalidRequest.Code
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			p, err := b.store.partition(st, t.Topic, pt.Partition)
			if err == nil && r.Version >= 4 && pt.CurrentLeaderEpoch >= 0 {
				if le := p.leaderEpoch(); pt.CurrentLeaderEpoch < le {
					err = kerr.FencedLeaderEpoch
				} else if pt.CurrentLeaderEpoch > le {
					err = kerr.UnknownLeaderEpoch
				}
			}
			if first, ok := sentinelMinVersion[pt.Timestamp]; err == nil && pt.Timestamp < 0 && (!ok || r.Version < first) {
				err = kerr.UnsupportedVersion
			}
			if err == nil {
				if pt.Timestamp == -1 || pt.Timestamp == -3 || pt.Timestamp >= 0 {
					b.awaitLoneWrites(ctx, p) // read your acks=1 writes (replication.go)
				}
				rp.LeaderEpoch = p.leaderEpoch()
				l := p.log
				switch pt.Timestamp {
				case -1:
					rp.Offset = l.HighWatermark()
					if req.IsolationLevel == 1 {
						rp.Offset = p.lastStableOffset() // txns.go
					}
				case -2:
					rp.Offset, err = b.logStartOffset(ctx, p) // across both tiers (tiering.go)
				case -4:
					rp.Offset = l.LogStartOffset()
				case -5:
					rp.Offset, err = b.latestTieredOffset(ctx, p)
				case -6:
					rp.Offset, err = b.earliestPendingUploadOffset(ctx, st, p)
				case -3:
					rp.Offset, rp.Timestamp, err = p.maxTimestampOffset()
				default:
					var off, ts int64
					if off, ts, err = b.offsetForTime(ctx, p, pt.Timestamp); off >= 0 {
						rp.Offset, rp.Timestamp = off, ts
					}
				}
				// By timestamp and max timestamp, as Kafka's
				// fetchOffsetForTimestamp: an offset a reader of the
				// request's isolation level cannot fetch yet (at or past
				// the last stable offset for read_committed) is none.
				if (pt.Timestamp == -3 || pt.Timestamp >= 0) && req.IsolationLevel == 1 && rp.Offset >= p.lastStableOffset() {
					rp.Offset, rp.Timestamp = -1, -1
				}
			}
			if err != nil {
				rp.ErrorCode = errCode(err)
				rp.Offset, rp.Timestamp = -1, -1
			}
			if r.Version == 0 && rp.ErrorCode == 0 && pt.MaxNumOffsets > 0 {
				off := rp.Offset
				if off < 0 {
					off = p.log.HighWatermark()
				}
				rp.OldStyleOffsets = []int64{off}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return &Reply{Msg: resp}, nil
}
