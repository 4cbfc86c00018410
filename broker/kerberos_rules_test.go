package broker

import (
	"strings"
	"testing"
)

// TestKerberosRules: sasl.kerberos.principal.to.local.rules with the cases
// of Kafka's KerberosNameTest (groups, g, L and U, DEFAULT, refused rules),
// and what fails a login: no rule applies, a result with '/' or '@'.
func TestKerberosRules(t *testing.T) {
	split := func(p string) ([]string, string) {
		name, realm, _ := strings.Cut(p, "@")
		return strings.Split(name, "/"), realm
	}
	cases := []struct {
		rules string
		want  map[string]string // principal -> short name, "" refused
	}{
		{"", map[string]string{
			"alice@REALM.COM": "alice", "alice/host@REALM.COM": "alice", "alice@OTHER.COM": "",
		}},
		{`RULE:[1:$1](App\..*)s/App\.(.*)/$1/g,RULE:[2:$1](App\..*)s/App\.(.*)/$1/g,DEFAULT`, map[string]string{
			"App.service-name/example.com@REALM.COM": "service-name",
			"App.service-name@REALM.COM":             "service-name",
			"user/host@REALM.COM":                    "user",
			"user/host@OTHER.COM":                    "",
		}},
		{`RULE:[1:$1]/L, RULE:[2:$1](Test.*)s/ABC///L, RULE:[2:$1](ABC.*)s/ABC/XYZ/g/L, RULE:[2:$1](App\..*)s/App\.(.*)/$1/g/L, RULE:[2:$1]/L, DEFAULT`, map[string]string{
			"User@REALM.COM":                         "user",
			"TestABC/host@FOO.COM":                   "test",
			"ABC_User_ABC/host@FOO.COM":              "xyz_user_xyz",
			"App.SERVICE-name/example.com@REALM.COM": "service-name",
			"User/root@REALM.COM":                    "user",
		}},
		{`RULE:[1:$1]/U,RULE:[2:$1](Test.*)s/ABC///U,RULE:[2:$1](ABC.*)s/ABC/XYZ/g/U,RULE:[2:$1](App\..*)s/App\.(.*)/$1/g/U,RULE:[2:$1]/U,DEFAULT`, map[string]string{
			"User@REALM.COM":                         "USER",
			"TestABC/host@FOO.COM":                   "TEST",
			"ABC_User_ABC/host@FOO.COM":              "XYZ_USER_XYZ",
			"App.SERVICE-name/example.com@REALM.COM": "SERVICE-NAME",
			"User/root@REALM.COM":                    "USER",
		}},
		// Without g only the first match is replaced; a match pattern with
		// groups; a realm other than the broker's mapped by a rule.
		{`RULE:[1:$1](a.*)s/a/b/, RULE:[2:$1@$0](.*@(EXAMPLE|CORP)\.COM)s/@.*//, RULE:[1:$1@$0](.*@PARTNER\.COM)s/(.*)@PARTNER\.COM/partner-$1/`, map[string]string{
			"aaa@REALM.COM":          "baa",
			"svc/host@CORP.COM":      "svc",
			"svc/host@EXAMPLE.COM":   "svc",
			"svc/host@ELSEWHERE.COM": "",
			"bob@PARTNER.COM":        "partner-bob",
			"bob@REALM.COM":          "",
		}},
		// docs/security.md's example: a trusted realm, lower-cased.
		{`RULE:[2:$1@$0](.*@CORP\.EXAMPLE\.COM)s/@.*//L,RULE:[1:$1@$0](.*@CORP\.EXAMPLE\.COM)s/@.*//L,DEFAULT`, map[string]string{
			"Alice@CORP.EXAMPLE.COM":     "alice",
			"etl/host7@CORP.EXAMPLE.COM": "etl",
			"bob@REALM.COM":              "bob",
			"bob@EVIL.COM":               "",
		}},
		// Java's group references: "$10" with one group is group 1 and "0".
		{`RULE:[1:$1](a.*)s/(a)/$10/g`, map[string]string{"aba@REALM.COM": "a0ba0"}},
		// A result that is not a simple name fails, rather than trying the
		// next rule, as in Kafka.
		{`RULE:[2:$1/$2],DEFAULT`, map[string]string{"svc/host@REALM.COM": "", "alice@REALM.COM": "alice"}},
		{`RULE:[1:$1@$0],DEFAULT`, map[string]string{"alice@REALM.COM": ""}},
	}
	for _, c := range cases {
		k, err := ParseKerberosRules(c.rules)
		if err != nil {
			t.Errorf("%q: %v", c.rules, err)
			continue
		}
		for p, want := range c.want {
			comps, realm := split(p)
			got, err := k.ShortName(comps, realm, "REALM.COM")
			if want == "" {
				if err == nil {
					t.Errorf("%q maps %s to %q, want a failed login", c.rules, p, got)
				}
				continue
			}
			if err != nil || got != want {
				t.Errorf("%q maps %s to %q (%v), want %q", c.rules, p, got, err, want)
			}
		}
	}
	if k, err := ParseKerberosRules(" DEFAULT "); err != nil || k != nil {
		t.Errorf("DEFAULT alone: %v %v, want the nil namer", k, err)
	}
	for _, bad := range []string{
		"default", "DEFAUL", "DEFAULT/L", "DEFAULT/g", "rule:[1:$1]", "RULE:[1:$1]/L/U", "RULE:[1:$1]/U/L",
		"RULE:[1:$1]/LU", "RULE:[1:$1]/UL", "RULE:[1:$1]/Uu", "RULE:[1:$1]/Ll", "RULE:[1:$1]/g",
		"RULE:[1:$1", "RULE:[:$1]", "RULE:[0:$1]", "RULE:[3:$1]", "RULE:[1:$2]", "RULE:[2:$3]", "RULE:[1:$]", "RULE:[1:x\\$y$1]",
		"RULE:[1:$1](a", "RULE:[1:$1](a(b)", "RULE:[1:$1](a)s/b", "RULE:[1:$1]s/b/c", "RULE:[1:$1]s//c/",
		"RULE:[1:$1](*)", "RULE:[1:$1]s/*/x/", "DEFAULT,", "DEFAULT DEFAULT", ",DEFAULT",
	} {
		if _, err := ParseKerberosRules(bad); err == nil {
			t.Errorf("rules %q were accepted", bad)
		}
	}
	k, _ := ParseKerberosRules("DEFAULT")
	if _, err := k.ShortName([]string{"a", "b", "c"}, "REALM.COM", "REALM.COM"); err == nil {
		t.Error("a principal of three components was mapped")
	}
}

// FuzzKerberosRules: arbitrary rules and principals: no panic, and a name
// that is mapped is simple and not empty.
func FuzzKerberosRules(f *testing.F) {
	f.Add(`RULE:[2:$1@$0](.*@(A|B)\.COM)s/@.*//g/L,DEFAULT`, "svc/host@A.COM")
	f.Add(`RULE:[1:$1]/U`, "alice@R")
	f.Add(`RULE:[1:$0$1$0](.*)s/(.)/$1$1/g`, "x@")
	f.Fuzz(func(t *testing.T, rules, principal string) {
		k, err := ParseKerberosRules(rules)
		if err != nil {
			return
		}
		name, realm, _ := strings.Cut(principal, "@")
		got, err := k.ShortName(strings.Split(name, "/"), realm, "R")
		if err == nil && (got == "" || strings.ContainsAny(got, "/@")) {
			t.Fatalf("rules %q map %q to %q", rules, principal, got)
		}
	})
}
