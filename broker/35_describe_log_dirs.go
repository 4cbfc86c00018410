package broker

import (
	"context"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// DescribeLogDirs: v0-5
//
// One log directory (<data>/logs) with the size of every partition replica
// this broker holds, led or followed (all of them when topics is null). v2+ flexible, v3+
// top-level error code, v4+ total and usable bytes of the file system, v5+
// whether the directory is cordoned (KIP-1066): never, Sediment has one
// log directory and no cordoning.

func init() { regKey(35, 0, 5).handler = handleDescribeLogDirs }

func handleDescribeLogDirs(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeLogDirsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	st := b.meta.State()
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir, _ = filepath.Abs(b.store.logsDir)
	dir.TotalBytes, dir.UsableBytes = -1, -1
	if total, usable, err := fsUsage(b.store.logsDir); err == nil {
		dir.TotalBytes, dir.UsableBytes = total, usable
	}
	addTopic := func(t *metadata.Topic, parts []int32) {
		dt := kmsg.NewDescribeLogDirsResponseDirTopic()
		dt.Topic = t.Name
		for _, idx := range parts {
			if idx < 0 || int(idx) >= len(t.Partitions) {
				continue
			}
			// Every replica in the directory, as Kafka lists: the ones
			// this broker leads (opened if need be) and the ones it
			// follows.
			p := b.store.opened(t.ID, idx)
			if p == nil {
				var err error
				if p, err = b.store.open(t, idx); err != nil {
					continue
				}
			}
			dp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			dp.Partition = idx
			for _, s := range p.log.Segments() {
				dp.Size += s.Size
			}
			// Kafka's getLogEndOffsetLag for a current (not
			// future) replica: how far the log end is below the
			// high watermark, 0 on a leader and a caught-up
			// follower.
			dp.OffsetLag = max(0, p.log.HighWatermark()-p.log.LogEndOffset())
			dt.Partitions = append(dt.Partitions, dp)
		}
		if len(dt.Partitions) > 0 {
			dir.Topics = append(dir.Topics, dt)
		}
	}
	if req.Topics == nil {
		for _, t := range st.Topics() {
			var parts []int32
			for _, p := range t.Partitions {
				parts = append(parts, p.Index)
			}
			addTopic(t, parts)
		}
	} else {
		for _, rt := range req.Topics {
			if t, ok := st.Topic(rt.Topic); ok {
				addTopic(t, rt.Partitions)
			}
		}
	}
	resp.Dirs = append(resp.Dirs, dir)
	return &Reply{Msg: resp}, nil
}

// fsUsage is the size and the bytes available to this process of the file
// system holding dir.
func fsUsage(dir string) (total, usable int64, err error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return 0, 0, err
	}
	return int64(fs.Blocks) * int64(fs.Bsize), int64(fs.Bavail) * int64(fs.Bsize), nil
}
