package broker

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/internal/vfs/errorfs"
	"github.com/sediment-io/sediment/metadata"
)

// A produce to a partition whose disk is full is answered
// KAFKA_STORAGE_ERROR, which clients retry (it was UNKNOWN_SERVER_ERROR),
// and the partition takes the same batch once space is back.
func TestDiskFullProduceAnswersStorageError(t *testing.T) {
	var hook func(op errorfs.Op, path string) error
	p := newErrorFSFollower(t, &hook)
	p.applyAssignment(1, &metadata.Partition{Leader: 1, LeaderEpoch: 4, PartitionEpoch: 6,
		Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, 2)
	epoch := p.leaderEpoch()
	batch := func() []byte { return encodeOffsetsBatch([]group.Record{grec("k", "v")}, 1000) }

	hook = func(op errorfs.Op, path string) error {
		if op == errorfs.OpFileWrite && filepath.Ext(path) == ".log" {
			return syscall.ENOSPC
		}
		return nil
	}
	_, err := p.appendBatch(batch(), 1<<20, epoch, false, false, func() {})
	if code := errCode(err); code != kerr.KafkaStorageError.Code {
		t.Fatalf("append with the disk full: %v (code %d), want KAFKA_STORAGE_ERROR", err, code)
	}
	hook = nil
	if _, err := p.appendBatch(batch(), 1<<20, epoch, false, false, func() {}); err != nil {
		t.Fatalf("append after space came back: %v", err)
	}
	if end := p.log.LogEndOffset(); end != 1 {
		t.Fatalf("log end %d, want 1 (the refused append left nothing)", end)
	}
}

// A failed file operation that no sentinel names (a partition directory
// that cannot be created on a full disk, a checkpoint that cannot be
// written) is KAFKA_STORAGE_ERROR, as Kafka answers an IOException, not
// UNKNOWN_SERVER_ERROR, which clients do not retry.
func TestFileErrorIsStorageError(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("broker: open partition: %w", &fs.PathError{Op: "mkdir", Path: "/data/logs/t-0", Err: syscall.ENOSPC}),
		fmt.Errorf("write leader-epoch checkpoint: %w", &os.LinkError{Op: "rename", Old: "a", New: "b", Err: syscall.EIO}),
	} {
		if code := errCode(err); code != kerr.KafkaStorageError.Code {
			t.Errorf("%v: code %d, want KAFKA_STORAGE_ERROR", err, code)
		}
	}
	if code := errCode(&net.OpError{Op: "dial", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}); code == kerr.KafkaStorageError.Code {
		t.Error("a network error answered KAFKA_STORAGE_ERROR")
	}
}
