package broker

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// aclStrings renders described ACLs as sortable lines.
func aclStrings(res kadm.DescribeACLsResults) []string {
	var out []string
	for _, r := range res {
		for _, d := range r.Described {
			out = append(out, strings.Join([]string{d.Type.String(), d.Pattern.String(), d.Name, d.Principal, d.Host, d.Operation.String(), d.Permission.String()}, " "))
		}
	}
	sort.Strings(out)
	return out
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// TestACLAPIs: CreateAcls, DescribeAcls and DeleteAcls through kadm: filters
// by type, name, pattern (MATCH and ANY included), principal and
// permission; invalid creations and filters get INVALID_REQUEST; the ACLs
// survive a restart.
func TestACLAPIs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// ANONYMOUS (PLAINTEXT) is a super user.
	withAuthorizer := func(c *Config) {
		c.Authorizer = AuthorizerConfig{Enabled: true, SuperUsers: []string{"User:ANONYMOUS"}}
	}
	b := startBroker(t, dir, withAuthorizer)
	adm := kadm.NewClient(newClient(t, b))

	create := func(bl *kadm.ACLBuilder) {
		t.Helper()
		res, err := adm.CreateACLs(ctx, bl)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("create %v: %v", r, r.Err)
			}
		}
	}
	create(kadm.NewACLs().Topics("orders").Allow("User:alice").Operations(kadm.OpRead, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral))
	create(kadm.NewACLs().Topics("logs-").Allow("User:bob").AllowHosts("10.0.0.1").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternPrefixed))
	create(kadm.NewACLs().Groups("g1").Deny("User:*").Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternLiteral))
	create(kadm.NewACLs().Clusters().Allow("User:admin").Operations(kadm.OpAlter).ResourcePatternType(kadm.ACLPatternLiteral))
	// Creating an existing ACL again succeeds and adds nothing.
	create(kadm.NewACLs().Topics("orders").Allow("User:alice").Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral))

	describe := func(bl *kadm.ACLBuilder) []string {
		t.Helper()
		res, err := adm.DescribeACLs(ctx, bl)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("describe: %v", r.Err)
			}
		}
		return aclStrings(res)
	}
	all := kadm.NewACLs().AnyResource().Allow().AllowHosts().Deny().DenyHosts().Operations().ResourcePatternType(kadm.ACLPatternAny)
	want := []string{
		"CLUSTER LITERAL kafka-cluster User:admin * ALTER ALLOW",
		"GROUP LITERAL g1 User:* * ALL DENY",
		"TOPIC LITERAL orders User:alice * DESCRIBE ALLOW",
		"TOPIC LITERAL orders User:alice * READ ALLOW",
		"TOPIC PREFIXED logs- User:bob 10.0.0.1 WRITE ALLOW",
	}
	if got := describe(all); !slices.Equal(got, want) {
		t.Fatalf("all ACLs:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// MATCH: every pattern that applies to the topic logs-app.
	if got := describe(kadm.NewACLs().Topics("logs-app").Allow().AllowHosts().Deny().DenyHosts().Operations().ResourcePatternType(kadm.ACLPatternMatch)); !slices.Equal(got, want[4:]) {
		t.Errorf("MATCH logs-app: %q", got)
	}
	if got := describe(kadm.NewACLs().AnyResource().Allow("User:alice").AllowHosts().Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternAny)); !slices.Equal(got, want[3:4]) {
		t.Errorf("alice READ: %q", got)
	}
	if got := describe(kadm.NewACLs().AnyResource().Deny().DenyHosts().Operations().ResourcePatternType(kadm.ACLPatternAny)); !slices.Equal(got, want[1:2]) {
		t.Errorf("DENY: %q", got)
	}

	// Invalid creations: INVALID_REQUEST each, the valid one beside them lands.
	var cr kmsg.CreateACLsRequest
	cr.SetVersion(3)
	for _, c := range []struct {
		rt        kmsg.ACLResourceType
		name      string
		pt        kmsg.ACLResourcePatternType
		principal string
		op        kmsg.ACLOperation
		perm      kmsg.ACLPermissionType
	}{
		{kmsg.ACLResourceTypeTopic, "t", kmsg.ACLResourcePatternTypeMatch, "User:x", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow},
		{kmsg.ACLResourceTypeAny, "t", kmsg.ACLResourcePatternTypeLiteral, "User:x", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow},
		{kmsg.ACLResourceTypeTopic, "t", kmsg.ACLResourcePatternTypeLiteral, "User:x", kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAllow},
		{kmsg.ACLResourceTypeTopic, "t", kmsg.ACLResourcePatternTypeLiteral, "alice", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow},
		{kmsg.ACLResourceTypeTopic, "", kmsg.ACLResourcePatternTypeLiteral, "User:x", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow},
		{kmsg.ACLResourceTypeCluster, "other", kmsg.ACLResourcePatternTypeLiteral, "User:x", kmsg.ACLOperationAlter, kmsg.ACLPermissionTypeAllow},
		{kmsg.ACLResourceTypeTopic, "a\x00b", kmsg.ACLResourcePatternTypeLiteral, "User:x", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow},
		{kmsg.ACLResourceTypeTopic, "fine", kmsg.ACLResourcePatternTypeLiteral, "User:x", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow},
	} {
		c2 := kmsg.NewCreateACLsRequestCreation()
		c2.ResourceType, c2.ResourceName, c2.ResourcePatternType = c.rt, c.name, c.pt
		c2.Principal, c2.Host, c2.Operation, c2.PermissionType = c.principal, "*", c.op, c.perm
		cr.Creations = append(cr.Creations, c2)
	}
	resp, err := cr.RequestWith(ctx, newClient(t, b))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.Results {
		want := kerr.InvalidRequest.Code
		if i == len(resp.Results)-1 {
			want = 0
		}
		if r.ErrorCode != want {
			t.Errorf("creation %d: error %d (%v), want %d", i, r.ErrorCode, str(r.ErrorMessage), want)
		}
	}
	// An UNKNOWN element in a describe filter: INVALID_REQUEST.
	var dr kmsg.DescribeACLsRequest
	dr.SetVersion(3)
	dr.ResourceType, dr.ResourcePatternType = kmsg.ACLResourceTypeTopic, kmsg.ACLResourcePatternTypeLiteral
	dr.Operation, dr.PermissionType = kmsg.ACLOperationUnknown, kmsg.ACLPermissionTypeAny
	if dresp, err := dr.RequestWith(ctx, newClient(t, b)); err != nil || dresp.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("UNKNOWN operation filter: %v, %+v", err, dresp)
	}

	// Delete: the prefixed ACL and alice's READ; each filter answers what it removed.
	dres, err := adm.DeleteACLs(ctx, kadm.NewACLs().Topics("logs-").Allow().AllowHosts().Deny().DenyHosts().Operations().ResourcePatternType(kadm.ACLPatternPrefixed))
	if err != nil || len(dres) != 1 || dres[0].Err != nil || len(dres[0].Deleted) != 1 || dres[0].Deleted[0].Principal != "User:bob" {
		t.Fatalf("delete prefixed: %v %+v", err, dres)
	}
	if _, err := adm.DeleteACLs(ctx, kadm.NewACLs().AnyResource().Allow("User:alice").AllowHosts().Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternAny)); err != nil {
		t.Fatal(err)
	}
	want = []string{want[0], want[1], want[2], "TOPIC LITERAL fine User:x * READ ALLOW"}
	sort.Strings(want)
	if got := describe(all); !slices.Equal(got, want) {
		t.Fatalf("after delete:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The ACLs live in the metadata log: a restart keeps them.
	b.Close()
	b = startBroker(t, dir, withAuthorizer)
	adm = kadm.NewClient(newClient(t, b))
	if got := describe(all); !slices.Equal(got, want) {
		t.Fatalf("after restart:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestACLAPIsWithoutAuthorizer: as Kafka's, a broker without an authorizer
// refuses ACLs with SECURITY_DISABLED (nothing would enforce them).
func TestACLAPIsWithoutAuthorizer(t *testing.T) {
	ctx := context.Background()
	adm := kadm.NewClient(newClient(t, startBroker(t, "")))
	cres, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("t").Allow("User:a").Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil || len(cres) != 1 || !errors.Is(cres[0].Err, kerr.SecurityDisabled) {
		t.Errorf("CreateAcls: %v %+v", err, cres)
	}
	dres, err := adm.DescribeACLs(ctx, kadm.NewACLs().AnyResource().Allow().AllowHosts().Operations().ResourcePatternType(kadm.ACLPatternAny))
	if err != nil || len(dres) == 0 || !errors.Is(dres[0].Err, kerr.SecurityDisabled) {
		t.Errorf("DescribeAcls: %v %+v", err, dres)
	}
	xres, err := adm.DeleteACLs(ctx, kadm.NewACLs().AnyResource().Allow().AllowHosts().Operations().ResourcePatternType(kadm.ACLPatternAny))
	if err != nil || len(xres) == 0 || !errors.Is(xres[0].Err, kerr.SecurityDisabled) {
		t.Errorf("DeleteAcls: %v %+v", err, xres)
	}
}
