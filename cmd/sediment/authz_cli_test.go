package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker"
)

// startAuthzCLIBroker starts a broker with the authorizer on, where
// ANONYMOUS (PLAINTEXT) is no super user but may do anything on a resource
// without ACLs: it creates the topics and the ACLs, which then bind it, as
// they bind a SASL user who is not a super user. grant creates ACLs (it
// needs ALTER on the cluster: before any cluster ACL is granted).
func startAuthzCLIBroker(t *testing.T, ctx context.Context) (b *broker.Broker, adm *kadm.Client, grant func(*kadm.ACLBuilder)) {
	t.Helper()
	b = startCLITestBroker(t, broker.Config{
		Authorizer: broker.AuthorizerConfig{Enabled: true, AllowEveryoneIfNoACLFound: true},
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm = kadm.NewClient(cl)
	grant = func(acls *kadm.ACLBuilder) {
		t.Helper()
		res, err := adm.CreateACLs(ctx, acls)
		if err == nil {
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return b, adm, grant
}

// TestClusterCommandsWithoutClusterDescribe: for a login without DESCRIBE
// on the cluster, `sediment cluster status` and `sediment topic
// reassignments` fail with CLUSTER_AUTHORIZATION_FAILED (exit status 1).
// Before, cluster status ignored DescribeQuorum's refusal and printed
// `controller: -1`, `voters: []`, every broker a non-voter, exit 0; and
// reassignments, for a login that could DESCRIBE no topic, asked nothing
// and printed `no reassignment in progress`. A topic it may not DESCRIBE,
// named, is TOPIC_AUTHORIZATION_FAILED (kadm's Metadata says so).
func TestClusterCommandsWithoutClusterDescribe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, adm, grant := startAuthzCLIBroker(t, ctx)
	run, mustRun := cliRunner(t, ctx, b.Addr())

	// Without an ACL on the cluster, ANONYMOUS may DESCRIBE it.
	if out := mustRun("cluster", "status"); !strings.Contains(out, "controller: 0\nvoters: [0]\n") || strings.Contains(out, "controller: -1") {
		t.Fatalf("cluster status with DESCRIBE on the cluster:\n%s", out)
	}
	if out := mustRun("topic", "reassignments"); out != "no reassignment in progress\n" {
		t.Fatalf("topic reassignments with DESCRIBE on the cluster:\n%s", out)
	}

	// Then the topic and the cluster are someone else's.
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "hidden"); err != nil {
		t.Fatal(err)
	}
	grant(kadm.NewACLs().Topics("hidden").Allow("User:admin").Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternLiteral))
	grant(kadm.NewACLs().Clusters().Allow("User:admin").Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternLiteral))

	for _, tc := range []struct {
		args []string
		want string // the error's start
	}{
		{[]string{"cluster", "status"}, "CLUSTER_AUTHORIZATION_FAILED: cluster status needs DESCRIBE on the cluster"},
		{[]string{"topic", "reassignments"}, "CLUSTER_AUTHORIZATION_FAILED: ListPartitionReassignments refused"},
		{[]string{"topic", "reassignments", "hidden"}, "TOPIC_AUTHORIZATION_FAILED: "},
	} {
		out, err := run(tc.args...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("sediment %s: %v, want %q...", strings.Join(tc.args, " "), err, tc.want)
		}
		if out != "" {
			t.Errorf("sediment %s printed:\n%s", strings.Join(tc.args, " "), out)
		}
	}

	p := sedimentProc(t, nil, "cluster", "status", "--brokers", b.Addr())
	if code := p.wait(t, 30*time.Second); code != 1 || !strings.Contains(p.output(), "CLUSTER_AUTHORIZATION_FAILED") {
		t.Fatalf("sediment cluster status: exit status %d, want 1; stderr:\n%s", code, p.output())
	}
}

// TestTopicCreateWithoutDescribe: `sediment topic create` by a login
// allowed to CREATE the topics but not to DESCRIBE them prints the counts
// it asked for (or none, for the broker's defaults) and warns at once that
// readiness could not be checked. Before, it printed `-1 partitions,
// replication factor -1` (the answer's counts without DESCRIBE_CONFIGS)
// and waited the whole --timeout on TOPIC_AUTHORIZATION_FAILED.
func TestTopicCreateWithoutDescribe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, _, grant := startAuthzCLIBroker(t, ctx)
	grant(kadm.NewACLs().Topics("create-only-").Allow("User:ANONYMOUS").Operations(kadm.OpCreate).ResourcePatternType(kadm.ACLPatternPrefixed))

	for _, tc := range []struct {
		args     []string
		want     string
		describe bool // the login may DESCRIBE the topic: no warning
	}{
		{[]string{"create-only-a", "-p", "2", "-r", "1"}, "created topic create-only-a: 2 partitions, replication factor 1\n", false},
		{[]string{"create-only-b", "-p", "3"}, "created topic create-only-b: 3 partitions\n", false},
		{[]string{"create-only-c"}, "created topic create-only-c\n", false},
		// Without an ACL on it, ANONYMOUS may DESCRIBE the topic: the
		// broker's answer gives its defaults.
		{[]string{"open"}, "created topic open: 1 partition, replication factor 1\n", true},
	} {
		cmd := newRootCmd()
		var out, stderr bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&stderr)
		cmd.SetArgs(append(append([]string{"topic", "create"}, tc.args...), "--timeout", "20s", "--brokers", b.Addr()))
		cmd.SetContext(ctx)
		start := time.Now()
		err := cmd.Execute()
		took := time.Since(start)
		if err != nil || out.String() != tc.want {
			t.Errorf("topic create %v: %v, printed %q, want %q", tc.args, err, out.String(), tc.want)
		}
		if took > 10*time.Second {
			t.Errorf("topic create %v took %s (--timeout 20s)", tc.args, took.Round(time.Millisecond))
		}
		w := stderr.String()
		if tc.describe && w != "" || !tc.describe && (!strings.HasPrefix(w, "warning: created, but whether it is ready on every broker could not be checked") ||
			!strings.Contains(w, "TOPIC_AUTHORIZATION_FAILED")) {
			t.Errorf("topic create %v: stderr %q", tc.args, w)
		}
	}
}
