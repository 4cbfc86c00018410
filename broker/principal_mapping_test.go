package broker

import "testing"

// TestPrincipalMapping: Kafka's ssl.principal.mapping.rules, with the cases
// of Kafka's own SslPrincipalMapperTest.
func TestPrincipalMapping(t *testing.T) {
	const rules = `RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT`
	m, err := ParsePrincipalMappingRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	for dn, want := range map[string]string{
		"CN=Duke,OU=ServiceUsers,O=Org,C=US":        "Duke",
		"CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US": "duke@sme",
		"cn=duke,ou=JavaSoft,o=Sun Microsystems":    "DUKE",
		"OU=JavaSoft,O=Sun Microsystems,C=US":       "OU=JavaSoft,O=Sun Microsystems,C=US",
		"CN=alice,O=acme":                           "ALICE",
	} {
		if got, err := m.Map(dn); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", dn, got, err, want)
		}
	}

	// Slashes escaped, a dollar sign kept, no DEFAULT: an unmatched name fails.
	m, err = ParsePrincipalMappingRules(`RULE:^CN=([^,]*)\/x,.*$/user-$1-\$/`)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.Map("CN=bob/x,O=acme"); err != nil || got != "user-bob-$" {
		t.Errorf("escaped rule: %q, %v", got, err)
	}
	if _, err := m.Map("O=acme"); err == nil {
		t.Error("no rule applies: want an error")
	}

	// As Java's appendReplacement: with one group "$10" is group 1 and a
	// "0"; with ten or more it is group 10.
	m, err = ParsePrincipalMappingRules(`RULE:^CN=([^,]*),.*$/$10/, RULE:^(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)$/$10$11/`)
	if err != nil {
		t.Fatal(err)
	}
	for dn, want := range map[string]string{"CN=bob,O=acme": "bob0", "abcdefghij": "ja1"} {
		if got, err := m.Map(dn); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", dn, got, err, want)
		}
	}

	for _, s := range []string{"", "DEFAULT", " DEFAULT "} {
		if m, err := ParsePrincipalMappingRules(s); err != nil || m != nil {
			t.Errorf("%q: %v, %v; want the identity (nil)", s, m, err)
		}
	}
	if got, _ := (*PrincipalMapper)(nil).Map("CN=x"); got != "CN=x" {
		t.Errorf("nil mapper: %q", got)
	}
	// An empty subject is no principal (it would read as ANONYMOUS).
	for _, m := range []*PrincipalMapper{nil, m} {
		if p, err := m.Map(""); err == nil {
			t.Errorf("empty subject: %q", p)
		}
	}
	for _, bad := range []string{
		"RULE:^CN=(.*)$", "RULE:^CN=(.*)$/$1", "RULE:(/$1/", "RULE://", "DEFAULT,", "DEFAULT RULE:a/b/",
		"NOPE", "RULE:a/b/,,DEFAULT", "RULE:a/b/X",
	} {
		if _, err := ParsePrincipalMappingRules(bad); err == nil {
			t.Errorf("%q: parsed, want an error", bad)
		}
	}
}
