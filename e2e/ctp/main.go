// Command ctp is one instance of a consume–transform–produce pipeline for
// the e2e tests: it copies every record of --in to the same partition of
// --out in Kafka transactions (franz-go's GroupTransactSession), committing
// the consumed offsets in the same transaction, so that a read_committed
// reader of --out sees every input record exactly once whatever happens to
// this process or the brokers. It runs until killed, printing one line per
// committed transaction ("committed <records>").
//
//	ctp --brokers 127.0.0.1:9092 --in in --out out --group copy --id ctp-a --batch 300
//
// The test kills it with SIGKILL and starts it again with the same --id: the
// new instance's InitProducerId fences the old one and aborts what it left
// open, and its static group membership (--id as group.instance.id) takes
// the old member's partitions back at once.
//
// A transaction that fails to begin or end (the broker died under it: its
// outcome is unknown) ends the session; the process opens a new one with
// the same --id, which recovers the same way a restarted process does.
// franz-go documents no retry of a GroupTransactSession's failed End.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "seed brokers, comma separated")
	in := flag.String("in", "in", "input topic")
	out := flag.String("out", "out", "output topic (as many partitions as the input)")
	group := flag.String("group", "copy", "consumer group")
	id := flag.String("id", "", "transactional id and group instance id of this instance")
	batch := flag.Int("batch", 300, "records per transaction (at most)")
	flag.Parse()
	if *id == "" {
		fmt.Fprintln(os.Stderr, "ctp: --id is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	for ctx.Err() == nil {
		err := run(ctx, strings.Split(*brokers, ","), *in, *out, *group, *id, *batch)
		if err == nil || ctx.Err() != nil {
			return
		}
		if errors.Is(err, errSetup) {
			fmt.Fprintln(os.Stderr, "ctp:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "ctp %s: %v; opening a new session\n", *id, err)
		select { // a pause between sessions, not a synchronisation
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// errSetup marks a session that could not be created (bad options): a new
// one would fail the same way.
var errSetup = errors.New("cannot create the session")

func run(ctx context.Context, brokers []string, in, out, group, id string, batch int) error {
	s, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(brokers...),
		kgo.TransactionalID(id),
		kgo.TransactionTimeout(20*time.Second),
		kgo.ConsumerGroup(group),
		kgo.InstanceID(id),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.SessionTimeout(10*time.Second),
		kgo.RetryTimeout(2*time.Minute),
	)
	if err != nil {
		return fmt.Errorf("%w: %v", errSetup, err)
	}
	defer s.Close()
	for ctx.Err() == nil {
		fs := s.PollRecords(ctx, batch)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			fmt.Fprintf(os.Stderr, "ctp %s: fetch %s-%d: %v\n", id, t, p, err)
		})
		var recs []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			recs = append(recs, &kgo.Record{Topic: out, Partition: r.Partition, Key: r.Key, Value: r.Value})
		})
		if len(recs) == 0 {
			continue
		}
		if err := s.Begin(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if err := s.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			fmt.Fprintf(os.Stderr, "ctp %s: produce: %v (the transaction aborts)\n", id, err)
		}
		committed, err := s.End(ctx, kgo.TryCommit)
		switch {
		case err != nil:
			return fmt.Errorf("end: %w", err)
		case committed:
			fmt.Printf("committed %d\n", len(recs))
		default:
			fmt.Printf("aborted %d\n", len(recs))
		}
	}
	return nil
}
