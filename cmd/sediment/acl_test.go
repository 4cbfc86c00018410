package main

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker"
)

// brokerACLs lists every ACL on the broker through kadm directly (not
// through the command under test), one "TYPE PATTERN NAME PRINCIPAL HOST
// OPERATION PERMISSION" line each, sorted.
func brokerACLs(t *testing.T, ctx context.Context, adm *kadm.Client) []string {
	t.Helper()
	res, err := adm.DescribeACLs(ctx, kadm.NewACLs().AnyResource().Allow().AllowHosts().Deny().DenyHosts().Operations().ResourcePatternType(kadm.ACLPatternAny))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		for _, d := range r.Described {
			out = append(out, strings.Join([]string{d.Type.String(), d.Pattern.String(), d.Name, d.Principal, d.Host, d.Operation.String(), d.Permission.String()}, " "))
		}
	}
	slices.Sort(out)
	return out
}

// TestACLCommands runs `sediment acl` in-process against an in-process
// broker: create (plain, --producer, --consumer, prefixed, a wildcard),
// list (all, by resource, by principal, MATCH, JSON), delete without
// --force (lists, removes nothing, fails) and with it, and a broker error.
func TestACLCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, mustRun, wantACLs := aclTestBroker(t, ctx)

	// Plain: two operations (case-insensitive) on a topic, from any host.
	out := mustRun("create", "--allow-principal", "User:alice", "--operation", "read", "--operation", "DESCRIBE", "--topic", "orders")
	if want := "Added ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:\n" +
		"\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n" +
		"\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"; out != want {
		t.Fatalf("create output:\n%s\nwant:\n%s", out, want)
	}
	alice := []string{
		"TOPIC LITERAL orders User:alice * DESCRIBE ALLOW",
		"TOPIC LITERAL orders User:alice * READ ALLOW",
	}
	wantACLs(alice...)

	// --producer with a transactional id and --idempotent.
	mustRun("create", "--allow-principal", "User:bob", "--producer", "--topic", "payments", "--transactional-id", "tx-1", "--idempotent")
	bob := []string{
		"TOPIC LITERAL payments User:bob * WRITE ALLOW",
		"TOPIC LITERAL payments User:bob * DESCRIBE ALLOW",
		"TOPIC LITERAL payments User:bob * CREATE ALLOW",
		"TRANSACTIONAL_ID LITERAL tx-1 User:bob * WRITE ALLOW",
		"TRANSACTIONAL_ID LITERAL tx-1 User:bob * DESCRIBE ALLOW",
		"CLUSTER LITERAL kafka-cluster User:bob * IDEMPOTENT_WRITE ALLOW",
	}
	wantACLs(slices.Concat(alice, bob)...)

	// --consumer, from one host.
	mustRun("create", "--allow-principal", "User:carol", "--allow-host", "10.0.0.7", "--consumer", "--topic", "orders", "--group", "app")
	carol := []string{
		"TOPIC LITERAL orders User:carol 10.0.0.7 READ ALLOW",
		"TOPIC LITERAL orders User:carol 10.0.0.7 DESCRIBE ALLOW",
		"GROUP LITERAL app User:carol 10.0.0.7 READ ALLOW",
	}
	wantACLs(slices.Concat(alice, bob, carol)...)

	// Prefixed, a deny from one host; and a literal wildcard topic.
	mustRun("create", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.9", "--operation", "Write", "--topic", "logs-", "--resource-pattern-type", "PREFIXED")
	mustRun("create", "--allow-principal", "User:*", "--operation", "describe_configs", "--topic", "*")
	others := []string{
		"TOPIC PREFIXED logs- User:mallory 10.0.0.9 WRITE DENY",
		"TOPIC LITERAL * User:* * DESCRIBE_CONFIGS ALLOW",
	}
	wantACLs(slices.Concat(alice, bob, carol, others)...)

	// list: every ACL, grouped by resource, in a stable order.
	all := "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=*, patternType=LITERAL)`:\n" +
		"\t(principal=User:*, host=*, operation=DESCRIBE_CONFIGS, permissionType=ALLOW)\n" +
		"\n" +
		"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=logs-, patternType=PREFIXED)`:\n" +
		"\t(principal=User:mallory, host=10.0.0.9, operation=WRITE, permissionType=DENY)\n" +
		"\n" +
		"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:\n" +
		"\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n" +
		"\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n" +
		"\t(principal=User:carol, host=10.0.0.7, operation=READ, permissionType=ALLOW)\n" +
		"\t(principal=User:carol, host=10.0.0.7, operation=DESCRIBE, permissionType=ALLOW)\n" +
		"\n" +
		"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=payments, patternType=LITERAL)`:\n" +
		"\t(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW)\n" +
		"\t(principal=User:bob, host=*, operation=CREATE, permissionType=ALLOW)\n" +
		"\t(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)\n" +
		"\n" +
		"Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=app, patternType=LITERAL)`:\n" +
		"\t(principal=User:carol, host=10.0.0.7, operation=READ, permissionType=ALLOW)\n" +
		"\n" +
		"Current ACLs for resource `ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)`:\n" +
		"\t(principal=User:bob, host=*, operation=IDEMPOTENT_WRITE, permissionType=ALLOW)\n" +
		"\n" +
		"Current ACLs for resource `ResourcePattern(resourceType=TRANSACTIONAL_ID, name=tx-1, patternType=LITERAL)`:\n" +
		"\t(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW)\n" +
		"\t(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
	if out := mustRun("list"); out != all {
		t.Fatalf("list:\n%s\nwant:\n%s", out, all)
	}
	if out := mustRun("ls"); out != all {
		t.Fatalf("ls (a second time) differs from list:\n%s", out)
	}

	// By resource: the topic orders' own ACLs only (any pattern type, the
	// default of list: neither the wildcard nor other topics).
	byTopic := "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:\n" +
		"\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n" +
		"\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n" +
		"\t(principal=User:carol, host=10.0.0.7, operation=READ, permissionType=ALLOW)\n" +
		"\t(principal=User:carol, host=10.0.0.7, operation=DESCRIBE, permissionType=ALLOW)\n"
	if out := mustRun("list", "--topic", "orders"); out != byTopic {
		t.Fatalf("list --topic orders:\n%s\nwant:\n%s", out, byTopic)
	}
	if out := mustRun("list", "--group", "app", "--cluster"); !strings.Contains(out, "resourceType=GROUP, name=app") ||
		!strings.Contains(out, "resourceType=CLUSTER") || strings.Contains(out, "TOPIC") {
		t.Fatalf("list --group app --cluster:\n%s", out)
	}
	// A prefixed pattern is listed under its own name, not under a topic it covers.
	if out := mustRun("list", "--topic", "logs-app"); out != "" {
		t.Fatalf("list --topic logs-app (any): %q, want nothing", out)
	}

	// By principal.
	out = mustRun("list", "--principal", "User:carol")
	if strings.Count(out, "(principal=") != 3 || strings.Count(out, "User:carol") != 3 ||
		!strings.Contains(out, "resourceType=GROUP, name=app") {
		t.Fatalf("list --principal User:carol:\n%s", out)
	}
	out = mustRun("list", "--principal", "User:mallory", "--principal", "User:bob", "--topic", "payments", "--topic", "logs-")
	if strings.Count(out, "(principal=") != 4 || strings.Contains(out, "alice") || !strings.Contains(out, "permissionType=DENY") {
		t.Fatalf("list two principals on two topics:\n%s", out)
	}

	// MATCH: every ACL that applies to the topic logs-app: the prefixed
	// deny and the wildcard, nothing of orders.
	match := "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=*, patternType=LITERAL)`:\n" +
		"\t(principal=User:*, host=*, operation=DESCRIBE_CONFIGS, permissionType=ALLOW)\n" +
		"\n" +
		"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=logs-, patternType=PREFIXED)`:\n" +
		"\t(principal=User:mallory, host=10.0.0.9, operation=WRITE, permissionType=DENY)\n"
	if out := mustRun("list", "--topic", "logs-app", "--resource-pattern-type", "match"); out != match {
		t.Fatalf("list --topic logs-app MATCH:\n%s\nwant:\n%s", out, match)
	}

	// JSON.
	var rows []aclJSON
	if err := json.Unmarshal([]byte(mustRun("list", "-o", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 13 || rows[1] != (aclJSON{"TOPIC", "logs-", "PREFIXED", "User:mallory", "10.0.0.9", "WRITE", "DENY"}) {
		t.Fatalf("list -o json: %d rows, %+v", len(rows), rows)
	}
	if out := mustRun("list", "--topic", "nothing-here", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("list -o json of no ACL: %q", out)
	}

	// delete without --force: lists what would go, removes nothing, fails
	// saying why.
	out, err := run("delete", "--topic", "orders", "--allow-principal", "User:carol")
	if err == nil || !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), "not interactive") {
		t.Fatalf("delete without --force: err %v", err)
	}
	if strings.Count(out, "(principal=User:carol") != 2 || !strings.HasPrefix(out, "Would remove ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:") {
		t.Fatalf("delete without --force printed:\n%s", out)
	}
	wantACLs(slices.Concat(alice, bob, carol, others)...)

	// With --force: carol's ACLs on orders (any host, any operation) go,
	// alice's stay; carol's group ACL is another resource and stays.
	out = mustRun("delete", "--topic", "orders", "--allow-principal", "User:carol", "--force")
	if want := "Removed ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:\n" +
		"\t(principal=User:carol, host=10.0.0.7, operation=READ, permissionType=ALLOW)\n" +
		"\t(principal=User:carol, host=10.0.0.7, operation=DESCRIBE, permissionType=ALLOW)\n"; out != want {
		t.Fatalf("delete --force output:\n%s\nwant:\n%s", out, want)
	}
	wantACLs(slices.Concat(alice, bob, carol[2:], others)...)

	// An operation filter: only bob's WRITE on tx-1.
	mustRun("delete", "--transactional-id", "tx-1", "--operation", "write", "--force")
	wantACLs(slices.Concat(alice, bob[:3], bob[4:], carol[2:], others)...)

	// The default pattern type of delete is literal: logs- (prefixed) stays.
	if out := mustRun("delete", "--topic", "logs-", "--force"); !strings.Contains(out, "No ACL matched") {
		t.Fatalf("delete literal logs-: %q", out)
	}
	wantACLs(slices.Concat(alice, bob[:3], bob[4:], carol[2:], others)...)
	mustRun("delete", "--topic", "logs-", "--resource-pattern-type", "prefixed", "--force")
	wantACLs(slices.Concat(alice, bob[:3], bob[4:], carol[2:], others[1:])...)

	// --producer on delete removes what --producer created.
	mustRun("delete", "--allow-principal", "User:bob", "--producer", "--topic", "payments", "--idempotent", "--force")
	wantACLs(slices.Concat(alice, bob[4:5], carol[2:], others[1:])...)

	// A broker error (INVALID_REQUEST: a NUL in the name) is printed and
	// fails the command; the valid creation beside it is made.
	out, err = run("create", "--allow-principal", "User:dave", "--operation", "Read", "--topic", "good", "--topic", "bad\x00name")
	if err == nil || !strings.Contains(err.Error(), "INVALID_REQUEST") || !strings.Contains(err.Error(), "User:dave") {
		t.Fatalf("create with a NUL: err %v", err)
	}
	if !strings.Contains(out, "Added ACLs for resource `ResourcePattern(resourceType=TOPIC, name=good, patternType=LITERAL)`") || strings.Contains(out, "bad") {
		t.Fatalf("create with a NUL printed:\n%s", out)
	}
	wantACLs(slices.Concat(alice, bob[4:5], carol[2:], others[1:], []string{"TOPIC LITERAL good User:dave * READ ALLOW"})...)
}

// TestACLBadFlags: flags that make no sense are refused before any request:
// the broker address is a closed port, so a command that got as far as
// connecting would fail with "cannot connect" instead.
func TestACLBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "--topic", "t", "--operation", "Read"}, "name a principal: --allow-principal or --deny-principal"},
		{[]string{"create", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"}, `--operation "Fly": unknown operation`},
		{[]string{"create", "--allow-principal", "User:a", "--operation", "Any", "--topic", "t"}, `--operation "Any": unknown operation`},
		{[]string{"create", "--allow-principal", "User:a", "--cluster", "--operation", "Alter", "--resource-pattern-type", "prefixed"}, "--cluster takes no --resource-pattern-type prefixed"},
		{[]string{"create", "--allow-principal", "User:a", "--operation", "Read"}, "name a resource"},
		{[]string{"create", "--allow-principal", "alice", "--topic", "t"}, `--allow-principal "alice": want Type:name`},
		{[]string{"create", "--deny-principal", "User:", "--topic", "t"}, `--deny-principal "User:": want Type:name`},
		{[]string{"create", "--allow-principal", "User:a", "--cluster", "--operation", "Read"}, "resource type CLUSTER only supports operations"},
		{[]string{"create", "--allow-principal", "User:a", "--group", "g", "--operation", "Write"}, "resource type GROUP only supports operations"},
		{[]string{"create", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"}, `--resource-pattern-type "match": want literal, prefixed`},
		{[]string{"create", "--allow-principal", "User:a", "--allow-host", "", "--topic", "t"}, "empty host"},
		{[]string{"create", "--deny-principal", "User:a", "--allow-host", "10.0.0.1", "--topic", "t"}, "--allow-host needs an --allow-principal"},
		{[]string{"create", "--allow-principal", "User:a", "--topic", ""}, "--topic: empty name"},
		{[]string{"create", "--allow-principal", "User:a", "--producer"}, "--producer and --consumer need a --topic"},
		{[]string{"create", "--allow-principal", "User:a", "--consumer", "--topic", "t"}, "--consumer needs a --group"},
		{[]string{"create", "--allow-principal", "User:a", "--producer", "--topic", "t", "--group", "g"}, "--group goes with --consumer"},
		{[]string{"create", "--allow-principal", "User:a", "--consumer", "--topic", "t", "--group", "g", "--transactional-id", "x"}, "--transactional-id goes with --producer"},
		{[]string{"create", "--allow-principal", "User:a", "--producer", "--topic", "t", "--operation", "Read"}, "--operation does not go with --producer"},
		{[]string{"create", "--allow-principal", "User:a", "--producer", "--topic", "t", "--cluster"}, "--cluster does not go with --producer"},
		{[]string{"create", "--allow-principal", "User:a", "--topic", "t", "--idempotent"}, "--idempotent goes with --producer"},
		{[]string{"delete", "--allow-principal", "User:a", "--force"}, "name a resource"},
		{[]string{"delete", "--topic", "t", "--resource-pattern-type", "fuzzy", "--force"}, `--resource-pattern-type "fuzzy": want any, match, literal, prefixed`},
		{[]string{"delete", "--topic", "t", "--operation", "Jump", "--force"}, `--operation "Jump"`},
		{[]string{"create", "--allow-principal", "User:a", "--user-principal", "alice", "--operation", "CreateTokens"}, `--user-principal "alice": want Type:name`},
		{[]string{"create", "--allow-principal", "User:a", "--user-principal", "", "--operation", "CreateTokens"}, "--user-principal: empty name"},
		{[]string{"create", "--allow-principal", "User:a", "--user-principal", "User:b", "--operation", "Read"}, "resource type USER only supports operations ALL, CREATE_TOKENS, DESCRIBE_TOKENS"},
		{[]string{"create", "--allow-principal", "User:a", "--delegation-token", "x", "--operation", "CreateTokens"}, "resource type DELEGATION_TOKEN only supports operations ALL, DESCRIBE"},
		{[]string{"create", "--allow-principal", "User:a", "--topic", "t", "--operation", "DescribeTokens"}, "resource type TOPIC only supports operations"},
		{[]string{"create", "--allow-principal", "User:a", "--producer", "--topic", "t", "--user-principal", "User:b"}, "--delegation-token and --user-principal do not go with --producer"},
		{[]string{"list", "--user-principal", "bob"}, `--user-principal "bob": want Type:name`},
		{[]string{"list", "--resource-pattern-type", "match"}, "match needs a resource"},
		{[]string{"list", "--principal", "bob"}, `--principal "bob": want Type:name`},
		{[]string{"list", "-o", "yaml"}, `--output "yaml": want text or json`},
	} {
		cmd := newRootCmd()
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(append(append([]string{"acl"}, c.args...), "--brokers", "127.0.0.1:1", "--timeout", "2s"))
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("acl %q: err %v, want %q", c.args, err, c.want)
		}
	}
}

func TestParseACLOperations(t *testing.T) {
	ops, err := parseACLOperations([]string{"Read", "WRITE", "clusteraction", "Cluster_Action", "describe-configs", "IdempotentWrite", "CreateTokens", "describe_tokens", "all", "read"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range ops {
		got = append(got, op.String())
	}
	if want := "READ WRITE CLUSTER_ACTION DESCRIBE_CONFIGS IDEMPOTENT_WRITE CREATE_TOKENS DESCRIBE_TOKENS ALL"; strings.Join(got, " ") != want {
		t.Fatalf("parsed %q, want %s", got, want)
	}
}

// TestACLTokenResources: `sediment acl` grants, lists and removes
// delegation-token permissions (KIP-48, KIP-373), as kafka-acls.sh's
// --user-principal and --delegation-token: CREATE_TOKENS and
// DESCRIBE_TOKENS on a USER resource (tokens owned by that user), DESCRIBE
// on a DELEGATION_TOKEN. Before, the flags and operations did not exist and
// docs/security.md's CREATE_TOKENS could be granted only through the API.
func TestACLTokenResources(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, mustRun, wantACLs := aclTestBroker(t, ctx)

	user := "Added ACLs for resource `ResourcePattern(resourceType=USER, name=User:alice, patternType=LITERAL)`:\n" +
		"\t(principal=User:scheduler, host=*, operation=CREATE_TOKENS, permissionType=ALLOW)\n" +
		"\t(principal=User:scheduler, host=*, operation=DESCRIBE_TOKENS, permissionType=ALLOW)\n"
	if out := mustRun("create", "--allow-principal", "User:scheduler", "--operation", "CreateTokens", "--operation", "describe_tokens", "--user-principal", "User:alice"); out != user {
		t.Fatalf("create --user-principal:\n%s\nwant:\n%s", out, user)
	}
	token := "Added ACLs for resource `ResourcePattern(resourceType=DELEGATION_TOKEN, name=*, patternType=LITERAL)`:\n" +
		"\t(principal=User:auditor, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
	if out := mustRun("create", "--allow-principal", "User:auditor", "--operation", "Describe", "--delegation-token", "*"); out != token {
		t.Fatalf("create --delegation-token:\n%s\nwant:\n%s", out, token)
	}
	mustRun("create", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders")
	acls := []string{
		"USER LITERAL User:alice User:scheduler * CREATE_TOKENS ALLOW",
		"USER LITERAL User:alice User:scheduler * DESCRIBE_TOKENS ALLOW",
		"DELEGATION_TOKEN LITERAL * User:auditor * DESCRIBE ALLOW",
		"TOPIC LITERAL orders User:alice * READ ALLOW",
	}
	wantACLs(acls...)

	// list: all of them (the two new types after the others, in Kafka's
	// type order), or a type's own.
	all := "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:\n" +
		"\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n" +
		"\n" +
		strings.ReplaceAll(token, "Added", "Current") +
		"\n" +
		strings.ReplaceAll(user, "Added", "Current")
	if out := mustRun("list"); out != all {
		t.Fatalf("list:\n%s\nwant:\n%s", out, all)
	}
	if out := mustRun("list", "--user-principal", "User:alice"); out != strings.ReplaceAll(user, "Added", "Current") {
		t.Fatalf("list --user-principal User:alice:\n%s", out)
	}
	if out := mustRun("list", "--delegation-token", "*", "--principal", "User:auditor"); out != strings.ReplaceAll(token, "Added", "Current") {
		t.Fatalf("list --delegation-token '*':\n%s", out)
	}
	if out := mustRun("list", "--user-principal", "User:bob"); out != "" {
		t.Fatalf("list --user-principal User:bob: %q, want nothing", out)
	}
	var rows []aclJSON
	if err := json.Unmarshal([]byte(mustRun("list", "--user-principal", "User:alice", "-o", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0] != (aclJSON{"USER", "User:alice", "LITERAL", "User:scheduler", "*", "CREATE_TOKENS", "ALLOW"}) {
		t.Fatalf("list -o json: %+v", rows)
	}

	// delete: one operation on the user, then the token's.
	out := mustRun("delete", "--user-principal", "User:alice", "--operation", "DescribeTokens", "--force")
	if want := "Removed ACLs for resource `ResourcePattern(resourceType=USER, name=User:alice, patternType=LITERAL)`:\n" +
		"\t(principal=User:scheduler, host=*, operation=DESCRIBE_TOKENS, permissionType=ALLOW)\n"; out != want {
		t.Fatalf("delete --user-principal:\n%s\nwant:\n%s", out, want)
	}
	wantACLs(acls[0], acls[2], acls[3])
	mustRun("delete", "--delegation-token", "*", "--force")
	wantACLs(acls[0], acls[3])
}

// aclTestBroker starts a broker with the authorizer on (PLAINTEXT's
// ANONYMOUS a super user) and returns runners of `sediment acl` against it
// and a check of the ACLs the broker holds (read through kadm).
func aclTestBroker(t *testing.T, ctx context.Context) (run func(args ...string) (string, error), mustRun func(args ...string) string, wantACLs func(want ...string)) {
	b := startCLITestBroker(t, broker.Config{
		Authorizer: broker.AuthorizerConfig{Enabled: true, SuperUsers: []string{"User:ANONYMOUS"}},
	})
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.Close)
	run, mustRun = cliRunner(t, ctx, b.Addr(), "acl")
	wantACLs = func(want ...string) {
		t.Helper()
		want = slices.Sorted(slices.Values(want))
		if got := brokerACLs(t, ctx, adm); !slices.Equal(got, want) {
			t.Fatalf("ACLs on the broker:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	return run, mustRun, wantACLs
}
