package broker

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/broker/txn"
	"github.com/sediment-io/sediment/internal/miniotest"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/s3"
	"github.com/sediment-io/sediment/tiering"
)

func startTieredTxnBroker(t *testing.T, dir string, store objectstore.Store) *Broker {
	t.Helper()
	b := startBroker(t, dir, func(c *Config) {
		c.LogFlush = "os"
		c.Groups = group.Config{Partitions: 4, InitialRebalanceDelay: 100 * time.Millisecond, MinSessionTimeout: time.Second}
		c.Transactions = txn.Config{Partitions: 4, AbortInterval: 100 * time.Millisecond}
	})
	err := b.EnableTiering(TieringConfig{Store: store, SyncInterval: 20 * time.Millisecond,
		Options: tiering.Options{Interval: 20 * time.Millisecond, ChunkSize: 64 << 10, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTxnTieredReadCommittedMinIO: committed and aborted transactions (some
// spanning segments) on a tiered topic whose old segments live only in a
// MinIO bucket. Nothing at or past an open transaction is uploaded; the
// .txnindex objects go up with their segments; a read_committed consumer
// from offset 0 reads every committed record, in order, and no aborted one,
// before and after a restart.
func TestTxnTieredReadCommittedMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	store, err := s3.New(context.Background(), s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: miniotest.Region,
		PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, MaxAttempts: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	dir := filepath.Join(t.TempDir(), "broker")
	b := startTieredTxnBroker(t, dir, store)
	createTopic(t, b, "ttx", 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1"), "min.insync.replicas": ptr("1")})
	cl := txnClient(t, b, "tiered-a")
	long := func(p string, n int) []string {
		v := values(p, n)
		for i := range v {
			v[i] += "-" + strings.Repeat("x", 80)
		}
		return v
	}
	var want []string
	txns := func(from, to int) {
		for i := from; i < to; i++ {
			n := 40
			if i%5 == 2 {
				n = 300 // spans segments: its marker lands segments later
			}
			vals := long(fmt.Sprintf("t%d", i), n)
			commit := i%3 != 1
			produceTxn(t, cl, "ttx", 0, commit, vals...)
			if commit {
				want = append(want, vals...)
			}
		}
	}
	txns(0, 12)

	// A second producer opens a transaction and leaves it open: the
	// segments after its first record wait.
	other := txnClient(t, b, "tiered-b")
	ctx := testCtx(t)
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r := rec("ttx", 0, "open-0")
	if err := other.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	openAt := r.Offset
	txns(12, 24)
	tp, ok := b.TieringManager().Partition(tiering.TopicPartition{Topic: "ttx", TopicID: topicID(t, b, "ttx"), Partition: 0})
	if !ok {
		t.Fatal("no tiering partition")
	}
	if err := tp.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if end, err := tp.LatestTieredOffset(ctx); err != nil || end >= openAt {
		t.Fatalf("tiered up to %d (%v) while a transaction is open at %d", end, err, openAt)
	}
	if err := other.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	txns(24, 30)
	past := listOffset(t, b, "ttx", -1)
	txns(30, 40)
	waitTiered(t, "old segments only in the bucket, past the aborted open transaction", func() bool {
		local := listOffset(t, b, "ttx", -4)
		tiered := listOffset(t, b, "ttx", -5)
		return local > past && tiered >= local-1
	})
	l, err := store.List(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	txnObjects, snapshots, segments := 0, 0, 0
	for _, o := range l.Objects {
		switch {
		case strings.HasSuffix(o.Key, tiering.SuffixTxnIndex):
			txnObjects++
		case strings.HasSuffix(o.Key, tiering.SuffixSnapshot):
			snapshots++
		case strings.HasSuffix(o.Key, tiering.SuffixLog):
			segments++
		}
	}
	// Every segment goes up with the producer snapshot taken when it
	// rolled (the state at its end).
	if snapshots != segments {
		t.Fatalf("%d producer snapshots for %d segments in the bucket", snapshots, segments)
	}
	// Batches compress well: a segment holds many transactions, so
	// several aborts each.
	if txnObjects < 2 {
		t.Fatalf("%d .txnindex objects in the bucket", txnObjects)
	}

	check := func(what string) {
		t.Helper()
		got := readValues(t, b, "ttx", len(want), true)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			for i := range got {
				if i >= len(want) || got[i] != want[i] {
					t.Fatalf("%s: read_committed record %d is %q, want %q (%d records)", what, i, got[i], want[min(i, len(want)-1)], len(got))
				}
			}
			t.Fatalf("%s: read_committed got %d records, want %d", what, len(got), len(want))
		}
	}
	check("tiered")
	if m := b.TieringManager().Metrics(); m.BytesServed == 0 {
		t.Fatalf("nothing served from the bucket: %+v", m)
	}
	b.Close()
	b = startTieredTxnBroker(t, dir, store)
	check("after restart")
}

func topicID(t *testing.T, b *Broker, name string) [16]byte {
	t.Helper()
	top, ok := b.meta.State().Topic(name)
	if !ok {
		t.Fatalf("no topic %s", name)
	}
	return top.ID
}
