package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker"
	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/internal/testutil"
)

// TestConsumeEndsOnAuthorizationError: `sediment consume` by a principal
// that may Describe a topic but not Read it (or not use its group) exits
// at once with the error, with --exit or without, and in a group. Before,
// it printed TOPIC_AUTHORIZATION_FAILED every 10 s and fetched for ever.
func TestConsumeEndsOnAuthorizationError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// ANONYMOUS (PLAINTEXT) may do anything on a resource without ACLs:
	// it creates the topics and the ACLs, which then bind it.
	b := startCLITestBroker(t, broker.Config{
		Groups:     group.Config{Partitions: 2, InitialRebalanceDelay: -1, MinSessionTimeout: time.Second},
		Authorizer: broker.AuthorizerConfig{Enabled: true, AllowEveryoneIfNoACLFound: true},
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, topic := range []string{"describe-only", "readable"} {
		if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("one")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	grant := func(b *kadm.ACLBuilder) {
		t.Helper()
		res, err := adm.CreateACLs(ctx, b.ResourcePatternType(kadm.ACLPatternLiteral))
		if err == nil {
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	grant(kadm.NewACLs().Topics("describe-only").Allow("User:ANONYMOUS").Operations(kadm.OpDescribe))
	grant(kadm.NewACLs().Topics("readable").Allow("User:ANONYMOUS").Operations(kadm.OpDescribe, kadm.OpRead))
	// The group "closed" is someone else's.
	grant(kadm.NewACLs().Groups("closed").Allow("User:someone-else").Operations(kadm.OpRead))

	for _, tc := range []struct {
		args []string
		want *kerr.Error
	}{
		{[]string{"describe-only", "-e"}, kerr.TopicAuthorizationFailed},
		{[]string{"describe-only"}, kerr.TopicAuthorizationFailed},
		{[]string{"describe-only", "-p", "1", "-n", "5"}, kerr.TopicAuthorizationFailed},
		{[]string{"describe-only", "-g", "open"}, kerr.TopicAuthorizationFailed},
		{[]string{"readable", "-g", "closed"}, kerr.GroupAuthorizationFailed},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := newRootCmd()
			out, stderr := &testutil.Buffer{}, &testutil.Buffer{}
			cmd.SetOut(out)
			cmd.SetErr(stderr)
			cmd.SetArgs(append(append([]string{"consume"}, tc.args...), "--brokers", b.Addr()))
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			cmd.SetContext(runCtx)
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- cmd.Execute() }()
			select {
			case err := <-done:
				t.Logf("consume %v: %v after %s; stderr:\n%s", tc.args, err, time.Since(start).Round(time.Millisecond), stderr.String())
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.want.Message) {
					t.Fatalf("consume %v: %v, want %s", tc.args, err, tc.want.Message)
				}
			case <-time.After(20 * time.Second):
				stop()
				err := <-done
				t.Fatalf("consume %v still running 20 s on (then, interrupted: %v); stderr:\n%s", tc.args, err, stderr.String())
			}
			if out.String() != "" {
				t.Errorf("consume %v printed records:\n%s", tc.args, out.String())
			}
		})
	}

	// As a process: exit status 1, the error name on stderr.
	p := sedimentProc(t, nil, "consume", "describe-only", "-e", "--brokers", b.Addr())
	if code := p.wait(t, 20*time.Second); code != 1 || !strings.Contains(p.output(), "TOPIC_AUTHORIZATION_FAILED") {
		t.Fatalf("sediment consume describe-only -e: exit status %d, want 1; stderr:\n%s", code, p.output())
	}

	// A readable topic is still read.
	run, _ := cliRunner(t, ctx, b.Addr())
	if got, err := run("consume", "readable", "-e"); err != nil || got != "one\n" {
		t.Fatalf("consume readable -e: %q, %v; want one", got, err)
	}
}

// TestFatalFetchErrors: which poll errors end consume.
func TestFatalFetchErrors(t *testing.T) {
	for _, tc := range []struct {
		err   error
		fatal bool
	}{
		{kerr.TopicAuthorizationFailed, true},
		{&kgo.ErrGroupSession{Err: kerr.GroupAuthorizationFailed}, true},
		{fmt.Errorf("wrapped: %w", kerr.UnsupportedCompressionType), true},
		{&kgo.ErrDecompressTooLarge{Topic: "t"}, true},
		{kerr.NotLeaderForPartition, false},
		{kerr.UnknownTopicOrPartition, false}, // the topic-gone check's
		{kerr.UnknownTopicID, false},
		{kerr.UnknownServerError, false},
		{kerr.OffsetOutOfRange, false},
		{&kgo.ErrGroupSession{Err: kerr.UnknownMemberID}, false},
		{&kgo.ErrGroupSession{Err: kerr.RebalanceInProgress}, false},
		{kgo.ErrClientClosed, false},
		{errors.New("unable to dial"), false},
	} {
		if got := isFatalFetchError(tc.err); got != tc.fatal {
			t.Errorf("isFatalFetchError(%v) = %v, want %v", tc.err, got, tc.fatal)
		}
	}
}
