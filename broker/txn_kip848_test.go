package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/broker/txn"
	"github.com/sediment-io/sediment/internal/testutil"
)

// TestTxnOffsetCommitKIP848Member: a GroupTransactSession in a consumer
// (KIP-848) group commits its offsets inside its transactions. The group
// coordinator validates TxnOffsetCommit against the consumer group's member
// and member epoch (Kafka's ConsumerGroup.validateOffsetCommit), not against
// classic members; found by franz-go's TestTxnEtl/*/848, whose sessions
// aborted every transaction on UNKNOWN_MEMBER_ID.
func TestTxnOffsetCommitKIP848Member(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.Groups = group.Config{
			Partitions:                4,
			InitialRebalanceDelay:     100 * time.Millisecond,
			MinSessionTimeout:         time.Second,
			ConsumerHeartbeatInterval: 200 * time.Millisecond,
		}
		c.Transactions = txn.Config{Partitions: 4, AbortInterval: 100 * time.Millisecond}
	})
	createTopic(t, b, "in848", 2, nil)
	createTopic(t, b, "out848", 2, nil)
	const n = 200
	var in []*kgo.Record
	for i := 0; i < n; i++ {
		in = append(in, rec("in848", int32(i%2), fmt.Sprintf("%d/%05d", i%2, i)))
	}
	produceAll(t, newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner())), in)

	s, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(b.Addr()),
		kgo.TransactionalID("copier848"),
		kgo.ConsumerGroup("copy848"),
		kgo.ConsumeTopics("in848"),
		kgo.ServerSideBalancer(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := testCtx(t)
	copied, aborted := 0, 0
	for copied < n {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := s.PollRecords(pctx, 50)
		cancel()
		if ctx.Err() != nil {
			t.Fatalf("copied %d of %d records, %d transactions with records aborted", copied, n, aborted)
		}
		if err := s.Begin(); err != nil {
			t.Fatal(err)
		}
		var out []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) { out = append(out, rec("out848", r.Partition, string(r.Value))) })
		if len(out) > 0 {
			if err := s.ProduceSync(ctx, out...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		committed, err := s.End(ctx, kgo.TryCommit)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case committed:
			copied += len(out)
		case len(out) > 0:
			// One member, no rebalance after its first assignment: an
			// abort is the coordinator refusing the member.
			if aborted++; aborted > 3 {
				t.Fatalf("%d transactions aborted (copied %d of %d)", aborted, copied, n)
			}
		}
	}
	// The transactional offsets become the group's once the last commit's
	// marker is written: the end of the input.
	adm := kadm.NewClient(newClient(t, b))
	testutil.WaitFor(t, 10*time.Second, "committed offsets at the end of the input", func() bool {
		offs, err := adm.FetchOffsets(ctx, "copy848")
		if err != nil {
			t.Fatal(err)
		}
		for p := int32(0); p < 2; p++ {
			if o, ok := offs.Lookup("in848", p); !ok || o.Err != nil || o.At != n/2 {
				return false
			}
		}
		return true
	})
}
