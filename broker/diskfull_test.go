package broker

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/internal/vfs"
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

// TestFailedOpenBacksOff: a partition whose log cannot be opened (here its
// files cannot be created) is tried again after a backoff, not at every
// metadata change: with a full disk or a low open-file limit, each change
// (every heartbeat commits one) rescanned and logged every such
// partition, thousands of lines a second (an operator review). Once the
// disk is back it opens.
func TestFailedOpenBacksOff(t *testing.T) {
	full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpCreate && strings.Contains(path, "/failing-0/") {
			return syscall.ENOSPC
		}
		return nil
	})}
	full.On()
	b := startBroker(t, "", func(c *Config) { c.LogFS = errorfs.Wrap(vfs.Default, full) })
	var attempts atomic.Int32
	b.testHooks.partitionOpening = func(topic string, idx int32) {
		if topic == "failing" {
			attempts.Add(1)
		}
	}
	createTopic(t, b, "failing", 1, nil)
	for i := range 20 { // 20 metadata changes, each reconciled
		createTopic(t, b, fmt.Sprintf("other-%d", i), 1, nil)
	}
	if n := attempts.Load(); n < 1 || n > 6 {
		t.Fatalf("%d attempts to open the failing partition over 20 metadata changes, want a few (backed off)", n)
	}
	full.Off()
	tm, _ := b.meta.State().Topic("failing")
	testutil.WaitFor(t, 70*time.Second, "the partition to open once the disk is back", func() bool {
		return b.store.opened(tm.ID, 0) != nil
	})
}
