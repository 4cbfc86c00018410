package tiering_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/metadata"
	"github.com/sediment-io/sediment/objectstore/fs"
	"github.com/sediment-io/sediment/tiering"
)

// metaAdapter is the glue the broker provides: tiering's Committer and
// Leadership over a real metadata node.
type metaAdapter struct {
	node   *metadata.Node
	broker int32
}

func (a *metaAdapter) RemoteLog(ctx context.Context, tp tiering.TopicPartition) (tiering.RemoteLog, error) {
	p, ok := a.node.State().Partition(metadata.UUID(tp.TopicID), tp.Partition)
	if !ok {
		return tiering.RemoteLog{}, fmt.Errorf("unknown partition %s", tp)
	}
	r := p.Remote
	return tiering.RemoteLog{ManifestKey: r.ManifestKey, ManifestVersion: r.ManifestVersion, StartOffset: r.StartOffset,
		EndOffset: r.EndOffset, LeaderEpoch: r.LeaderEpoch}, nil
}

func (a *metaAdapter) CommitRemoteLog(ctx context.Context, tp tiering.TopicPartition, epoch int32, expected int64, key string, start, end int64) error {
	_, err := a.node.Propose(ctx, &metadata.CommitRemoteLog{TopicID: metadata.UUID(tp.TopicID), Partition: tp.Partition,
		LeaderEpoch: epoch, ExpectedManifestVersion: expected, ManifestKey: key, StartOffset: start, EndOffset: end})
	switch {
	case errors.Is(err, metadata.ErrStaleEpoch):
		return fmt.Errorf("%w: %w", tiering.ErrFenced, err)
	case errors.Is(err, metadata.ErrManifestConflict):
		return fmt.Errorf("%w: %w", tiering.ErrConflict, err)
	}
	return err
}

func (a *metaAdapter) LeaderEpoch(tp tiering.TopicPartition) (int32, bool) {
	p, ok := a.node.State().Partition(metadata.UUID(tp.TopicID), tp.Partition)
	if !ok || p.Leader != a.broker {
		return 0, false
	}
	return p.LeaderEpoch, true
}

// TestWithMetadataNode uploads through a real single-node metadata quorum:
// the pointer moves with each commit and a stale epoch is fenced.
func TestWithMetadataNode(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	node, err := metadata.Open(metadata.Config{NodeID: 1, Dir: filepath.Join(dir, "meta"), RaftAddr: "127.0.0.1:0", Bootstrap: true,
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond,
		CommitTimeout: 5 * time.Millisecond, ControllerInterval: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := node.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	reg, err := node.Propose(ctx, &metadata.RegisterBroker{BrokerID: 1, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1,
		Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 9092}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Propose(ctx, &metadata.BrokerHeartbeat{BrokerID: 1, BrokerEpoch: reg.BrokerEpoch}); err != nil {
		t.Fatal(err)
	}
	topicID := metadata.NewUUID()
	if _, err := node.Propose(ctx, &metadata.CreateTopic{Name: "events", TopicID: topicID, NumPartitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	tp := tiering.TopicPartition{Topic: "events", TopicID: topicID, Partition: 0}
	adapter := &metaAdapter{node: node, broker: 1}
	if _, ok := adapter.LeaderEpoch(tp); !ok {
		t.Fatal("broker 1 does not lead events-0")
	}

	store, err := fs.New(filepath.Join(dir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := hotlog.Open(hotlog.Options{Dir: filepath.Join(dir, "log"), Config: hotlog.Config{SegmentBytes: 8 << 10, Flush: hotlog.FlushOS}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	epoch, _ := adapter.LeaderEpoch(tp)
	var produced []byte
	for i := 0; i < 100; i++ {
		b := batch(i)
		if _, err := l.Append(b, hotlog.AppendOptions{LeaderEpoch: epoch}); err != nil {
			t.Fatal(err)
		}
	}
	l.SetHighWatermark(l.LogEndOffset())
	produced, err = l.ReadBytes(0, 1<<30, l.HighWatermark())
	if err != nil {
		t.Fatal(err)
	}
	m, err := tiering.New(tiering.Options{Store: store, Committer: adapter, Leadership: adapter, CacheDir: filepath.Join(dir, "cache"),
		Interval: -1, ChunkSize: 4096, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg := tiering.DefaultTopicConfig()
	cfg.LocalRetentionBytes = 0
	p, err := m.AddPartition(tiering.PartitionOptions{TopicPartition: tp, Log: l, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	ptr, _ := adapter.RemoteLog(ctx, tp)
	if ptr.ManifestVersion != 1 || ptr.EndOffset == 0 || l.LogStartOffset() != ptr.EndOffset {
		t.Fatalf("pointer %+v, local start %d", ptr, l.LogStartOffset())
	}
	var got []byte
	for off := int64(0); off < ptr.EndOffset; {
		res, err := p.Read(ctx, off, 1<<20, l.HighWatermark())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := res.Bytes()
		res.Release()
		got = append(got, b...)
		off = res.NextOffset
	}
	if !bytes.Equal(got, produced[:len(got)]) {
		t.Fatal("remote bytes differ")
	}
	// A commit with a stale epoch is fenced by the metadata log.
	err = adapter.CommitRemoteLog(ctx, tp, epoch-1, ptr.ManifestVersion, "x", ptr.StartOffset, ptr.EndOffset)
	if !errors.Is(err, tiering.ErrFenced) {
		t.Fatalf("stale epoch: %v", err)
	}
	err = adapter.CommitRemoteLog(ctx, tp, epoch, ptr.ManifestVersion-1, "x", ptr.StartOffset, ptr.EndOffset)
	if !errors.Is(err, tiering.ErrConflict) {
		t.Fatalf("stale version: %v", err)
	}
}

// batch builds a one-record v2 batch (with the hotlog package's own checks).
func batch(i int) []byte {
	return tiering.TestBatch(3, 100, time.Now().UnixMilli()+int64(i), uint64(i))
}
