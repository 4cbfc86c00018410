package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker"
	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/internal/testutil"
)

// TestGroupCommands runs `sediment group` in-process against an in-process
// broker: list, describe (members of a live group, committed offsets, log
// end offsets, lag and the total), reset-offsets (refused for a live group,
// dry run, then each target kind), and delete.
func TestGroupCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := startCLITestBroker(t, broker.Config{
		AutoCreateTopics: true,
		Groups:           group.Config{Partitions: 4, InitialRebalanceDelay: -1, MinSessionTimeout: time.Second},
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var recs []*kgo.Record
	for i := 0; i < 10; i++ {
		recs = append(recs, &kgo.Record{Topic: "orders", Partition: int32(i % 2), Value: []byte(fmt.Sprint(i))})
	}
	kcl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	if err := kcl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Group "app": committed 2 of 5 on partition 0 and 4 of 5 on 1.
	os := kadm.Offsets{}
	os.AddOffset("orders", 0, 2, -1)
	os.AddOffset("orders", 1, 4, -1)
	if err := adm.CommitAllOffsets(ctx, "app", os); err != nil {
		t.Fatal(err)
	}

	run, mustRun := cliRunner(t, ctx, b.Addr())
	expect := func(out string, patterns ...string) {
		t.Helper()
		for _, p := range patterns {
			if !regexp.MustCompile(p).MatchString(out) {
				t.Errorf("output does not match %q:\n%s", p, out)
			}
		}
	}

	// A live member in group "live" (classic, range).
	member, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ClientID("live-client"),
		kgo.ConsumerGroup("live"), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(6*time.Second), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	for got := 0; got < 10; {
		fs := member.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}

	// A live KIP-848 member in group "next" (server-side uniform assignor).
	next, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ClientID("next-client"),
		kgo.ConsumerGroup("next"), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer(), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	for got := 0; got < 10; {
		fs := next.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	if err := next.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}

	out := mustRun("group", "list")
	expect(out, `(?m)^app\s+classic\s+Empty`, `(?m)^live\s+classic\s+consumer\s+Stable`, `(?m)^next\s+consumer\s+consumer\s+Stable`)

	out = mustRun("group", "describe", "next")
	expect(out,
		`GROUP next  TYPE consumer  STATE Stable  ASSIGNOR uniform  MEMBERS 1`,
		`(?m)^\S+\s+-\s+next-client\s+/127\.0\.0\.1\s+orders:0,1$`,
		`(?m)^orders\s+1\s+5\s+5\s+0\s+\S+\s+next-client\s+/127\.0\.0\.1$`,
		`TOTAL LAG 0`)

	out = mustRun("group", "describe", "live")
	expect(out,
		`GROUP live  TYPE classic  STATE Stable  ASSIGNOR cooperative-sticky  MEMBERS 1`,
		`(?m)^live-client-\S+\s+-\s+live-client\s+/127\.0\.0\.1\s+orders:0,1$`,
		`(?m)^orders\s+0\s+5\s+5\s+0\s+live-client-\S+\s+live-client\s+/127\.0\.0\.1$`,
		`TOTAL LAG 0`)

	out = mustRun("group", "describe", "app")
	expect(out, `GROUP app  TYPE classic  STATE Empty`,
		`(?m)^orders\s+0\s+2\s+5\s+3\s+-\s+-\s+-$`,
		`(?m)^orders\s+1\s+4\s+5\s+1\s+-\s+-\s+-$`,
		`TOTAL LAG 4`)

	// A live group cannot be reset.
	if out, err := run("group", "reset-offsets", "live", "--topic", "orders", "--to-earliest"); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("reset of a live group: %v\n%s", err, out)
	}

	// Dry run by default: the plan is shown, nothing changes.
	out = mustRun("group", "reset-offsets", "app", "--topic", "orders", "--to-earliest")
	expect(out, `(?m)^orders\s+0\s+2\s+0$`, `(?m)^orders\s+1\s+4\s+0$`, `dry run`)
	expect(mustRun("group", "describe", "app"), `TOTAL LAG 4`)

	// --all-topics is the partitions the group has offsets for, as
	// kafka-consumer-groups.sh's: not orders-0 of a group that committed
	// orders-1 only.
	var one kadm.Offsets
	one.AddOffset("orders", 1, 3, -1)
	if err := adm.CommitAllOffsets(ctx, "partial", one); err != nil {
		t.Fatal(err)
	}
	out = mustRun("group", "reset-offsets", "partial", "--all-topics", "--to-earliest")
	expect(out, `(?m)^orders\s+1\s+3\s+0$`)
	if regexp.MustCompile(`(?m)^orders\s+0\s`).MatchString(out) {
		t.Errorf("--all-topics plans a partition group partial has no offset for:\n%s", out)
	}

	mustRun("group", "reset-offsets", "app", "--all-topics", "--to-earliest", "--execute")
	expect(mustRun("group", "describe", "app"), `(?m)^orders\s+0\s+0\s+5\s+5`, `TOTAL LAG 10`)

	mustRun("group", "reset-offsets", "app", "--topic", "orders", "--shift-by", "3", "--execute")
	expect(mustRun("group", "describe", "app"), `(?m)^orders\s+0\s+3\s+5\s+2`, `TOTAL LAG 4`)

	mustRun("group", "reset-offsets", "app", "--topic", "orders", "--to-offset", "99", "--execute") // clamped to the end
	expect(mustRun("group", "describe", "app"), `TOTAL LAG 0`)

	mustRun("group", "reset-offsets", "app", "--topic", "orders", "--to-datetime", start.Add(-time.Hour).UTC().Format(time.RFC3339), "--execute")
	expect(mustRun("group", "describe", "app"), `TOTAL LAG 10`)

	mustRun("group", "reset-offsets", "app", "--topic", "orders", "--to-latest", "--execute")
	expect(mustRun("group", "describe", "app"), `TOTAL LAG 0`)

	if _, err := run("group", "reset-offsets", "app", "--topic", "orders"); err == nil {
		t.Fatal("reset-offsets without a target succeeded")
	}

	// Delete: a live group is refused, an empty one goes.
	if _, err := run("group", "delete", "live"); err == nil || !strings.Contains(err.Error(), "NON_EMPTY_GROUP") {
		t.Fatalf("delete of a live group: %v", err)
	}
	expect(mustRun("group", "delete", "app"), `deleted group app`)
	out = mustRun("group", "list")
	if strings.Contains(out, "app ") {
		t.Fatalf("app still listed after delete:\n%s", out)
	}
}

// cliRunner runs sediment commands against the broker at addr: run returns
// stdout and the error, mustRun fails the test on an error. prefix goes
// before the arguments ("acl").
func cliRunner(t *testing.T, ctx context.Context, addr string, prefix ...string) (run func(args ...string) (string, error), mustRun func(args ...string) string) {
	run = func(args ...string) (string, error) {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(append(append(slices.Clone(prefix), args...), "--brokers", addr))
		cmd.SetContext(ctx)
		err := cmd.Execute()
		return out.String(), err
	}
	mustRun = func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("%v %q: %v\n%s", prefix, args, err, out)
		}
		return out
	}
	return run, mustRun
}

// TestConsumeGroupExitsWithoutBroker: `sediment consume -g` interrupted
// after its broker stopped exits. Before, the loop could end after a poll
// whose rebalance block (BlockRebalanceOnPoll) was never lifted, and
// leaving the group, in Close, waited for it for ever (found by a helper
// trying Burrow by hand).
func TestConsumeGroupExitsWithoutBroker(t *testing.T) {
	b, err := broker.New(broker.Config{
		DataDir:          t.TempDir(),
		Listeners:        []broker.Listener{{Addr: "127.0.0.1:0"}},
		AutoCreateTopics: true,
		Logger:           slog.New(slog.DiscardHandler),
		Groups:           group.Config{Partitions: 2, InitialRebalanceDelay: -1, MinSessionTimeout: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			b.Close()
		}
	}()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("gone"))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	if _, err := kadm.NewClient(pcl).CreateTopic(context.Background(), 1, 1, nil, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := pcl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("one")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumerGroup("gone-group"), kgo.ConsumeTopics("gone"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	if err != nil {
		t.Fatal(err)
	}
	format, err := newRecordFormatter("value", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	out := &testutil.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- consume(ctx, cl, out, io.Discard, format, &consumeFlags{group: "gone-group", partition: -1}, nil, nil)
	}()
	testutil.WaitFor(t, 30*time.Second, "the record to be consumed", func() bool { return strings.Contains(out.String(), "one") })
	b.Close()
	closed = true
	interrupt()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("consume did not return within 30 s of the interrupt with its broker gone; goroutines:\n%s", buf[:n])
	}
}

// TestConsumeEndsWhenTopicDeleted: `sediment consume` (by partition and in
// a group) of a topic deleted under it exits with an error saying so, having
// printed the fetch error a few times at most; before, franz-go's
// UNKNOWN_TOPIC_ID was printed at every poll, thousands of lines a second,
// with a Fetch each, for ever.
func TestConsumeEndsWhenTopicDeleted(t *testing.T) {
	b := startCLITestBroker(t, broker.Config{
		Groups: group.Config{Partitions: 2, InitialRebalanceDelay: -1, MinSessionTimeout: time.Second},
	})
	pcl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	adm := kadm.NewClient(pcl)
	for _, args := range [][]string{{}, {"-g", "deleted-group"}} {
		topic := "deleted" + strings.Join(args, "")
		if _, err := adm.CreateTopic(context.Background(), 2, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		if err := pcl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte("one")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		cmd := newRootCmd()
		out, stderr := &testutil.Buffer{}, &testutil.Buffer{}
		cmd.SetOut(out)
		cmd.SetErr(stderr)
		cmd.SetArgs(append([]string{"consume", topic, "--brokers", b.Addr(), "--from", "earliest"}, args...))
		done := make(chan error, 1)
		go func() { done <- cmd.Execute() }()
		testutil.WaitFor(t, 30*time.Second, "the record consumed", func() bool { return strings.Contains(out.String(), "one") })
		if _, err := adm.DeleteTopic(context.Background(), topic); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		select {
		case err := <-done:
			t.Logf("consume %v: %v, %s after the delete; stderr:\n%s", args, err, time.Since(deleted).Round(time.Millisecond), stderr.String())
			if err == nil || !strings.Contains(err.Error(), "topic "+topic+" was deleted") {
				t.Fatalf("consume %v: %v, want the topic deleted", args, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("consume %v went on for 60 s after its topic was deleted; stderr has %d lines", args, strings.Count(stderr.String(), "\n"))
		}
		if n := strings.Count(stderr.String(), "UNKNOWN_TOPIC_ID"); n > 4 {
			t.Errorf("consume %v printed UNKNOWN_TOPIC_ID %d times:\n%.2000s", args, n, stderr.String())
		}
	}
}
