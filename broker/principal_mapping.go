package broker

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Kafka's ssl.principal.mapping.rules (KIP-371): how a TLS client
// certificate's subject, an RFC 2253 distinguished name
// ("CN=alice,OU=eng,O=acme"), becomes the principal that ACLs and quotas
// see. A comma-separated list of rules, tried in order; the first that
// applies gives the principal:
//
//	RULE:pattern/replacement/[LU]   the pattern must match the whole name; the
//	                                replacement may use its groups ($1); L or U
//	                                lower- or upper-cases the result
//	DEFAULT                         the name as it is
//
// A name no rule applies to fails the connection, as in Kafka. "\/" is a
// slash inside a pattern or replacement. The patterns are Go regular
// expressions (RE2), which take Kafka's usual rules as they are.

// PrincipalMapper maps certificate subjects to principals; nil keeps them
// (DEFAULT alone).
type PrincipalMapper struct {
	rules []principalRule
}

type principalRule struct {
	isDefault bool
	re        *regexp.Regexp
	template  string // regexp.Expand form
	lower     bool
	upper     bool
	text      string // as written, for errors
}

// ParsePrincipalMappingRules reads Kafka's rule list; "" or "DEFAULT" gives
// a nil mapper.
func ParsePrincipalMappingRules(s string) (*PrincipalMapper, error) {
	rules, err := parseRuleList(s, "ssl principal mapping rules", parsePrincipalRule, func(r principalRule) string { return r.text })
	if err != nil {
		return nil, err
	}
	m := &PrincipalMapper{rules: rules}
	if len(m.rules) == 0 || (len(m.rules) == 1 && m.rules[0].isDefault) {
		return nil, nil
	}
	return m, nil
}

// parseRuleList reads a comma-separated list of rules (Kafka's
// ssl.principal.mapping.rules and sasl.kerberos.principal.to.local.rules)
// with one, which reads a rule at the start of its input and returns the
// rest; what names the list in errors.
func parseRuleList[R any](s, what string, one func(string) (R, string, error), text func(R) string) ([]R, error) {
	var rules []R
	rest := strings.TrimSpace(s)
	for rest != "" {
		r, after, err := one(rest)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, s, err)
		}
		rules = append(rules, r)
		rest = strings.TrimSpace(after)
		if rest == "" {
			break
		}
		if rest[0] != ',' {
			return nil, fmt.Errorf("%s %q: %q follows rule %q where a comma or the end belongs", what, s, cut(rest), text(r))
		}
		rest = strings.TrimSpace(rest[1:])
		if rest == "" {
			return nil, fmt.Errorf("%s %q: a rule is missing after the last comma", what, s)
		}
	}
	return rules, nil
}

// parsePrincipalRule reads one rule at the start of s.
func parsePrincipalRule(s string) (principalRule, string, error) {
	if strings.HasPrefix(s, "DEFAULT") {
		return principalRule{isDefault: true, text: "DEFAULT"}, s[len("DEFAULT"):], nil
	}
	if !strings.HasPrefix(s, "RULE:") {
		return principalRule{}, "", fmt.Errorf("%q: a rule is DEFAULT or RULE:pattern/replacement/[LU]", cut(s))
	}
	body := s[len("RULE:"):]
	pattern, body, ok := readRulePart(body)
	if !ok {
		return principalRule{}, "", fmt.Errorf("%q: want RULE:pattern/replacement/[LU]", cut(s))
	}
	replacement, body, ok := readRulePart(body)
	if !ok {
		return principalRule{}, "", fmt.Errorf("%q: want RULE:pattern/replacement/[LU]", cut(s))
	}
	var r principalRule
	if body != "" && (body[0] == 'L' || body[0] == 'U') {
		r.lower, r.upper = body[0] == 'L', body[0] == 'U'
		body = body[1:]
	}
	r.text = s[:len(s)-len(body)]
	if pattern == "" {
		return principalRule{}, "", errors.New("a rule's pattern is empty")
	}
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return principalRule{}, "", fmt.Errorf("rule %q: %w", r.text, err)
	}
	r.re = re
	r.template = javaReplacement(replacement, re.NumSubexp())
	return r, body, nil
}

// readRulePart reads up to an unescaped '/', unescaping "\/"; the other
// escapes stay for the regular expression.
func readRulePart(s string) (part, rest string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '/':
			b.WriteByte('/')
			i++
		case s[i] == '\\' && i+1 < len(s):
			b.WriteString(s[i : i+2])
			i++
		case s[i] == '/':
			return b.String(), s[i+1:], true
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", false
}

// javaReplacement turns a Java replacement ("$1@$2", "\$" for a dollar)
// into regexp.Expand's template ("${1}@${2}", "$$"). As Java's
// Matcher.appendReplacement, a group number takes the digits after '$' only
// while they name a group of the pattern's groups: with one group, "$10"
// is group 1 and a "0".
func javaReplacement(s string, groups int) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] == '$' {
				b.WriteString("$$")
			} else {
				b.WriteByte(s[i])
			}
		case c == '$':
			j := i + 1
			if j >= len(s) || s[j] < '0' || s[j] > '9' {
				b.WriteString("$$")
				continue
			}
			n := int(s[j] - '0')
			j++
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				next := n*10 + int(s[j]-'0')
				if next > groups {
					break
				}
				n = next
				j++
			}
			b.WriteString("${" + strconv.Itoa(n) + "}")
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func cut(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Map gives the principal of a certificate subject. An empty one is an
// error: it would read as ANONYMOUS.
func (m *PrincipalMapper) Map(dn string) (string, error) {
	if dn == "" {
		return "", errors.New("a client certificate with an empty subject has no principal")
	}
	if m == nil {
		return dn, nil
	}
	for _, r := range m.rules {
		if r.isDefault {
			return dn, nil
		}
		idx := r.re.FindStringSubmatchIndex(dn)
		if idx == nil {
			continue
		}
		out := string(r.re.ExpandString(nil, r.template, dn, idx))
		switch {
		case r.lower:
			out = strings.ToLower(out)
		case r.upper:
			out = strings.ToUpper(out)
		}
		if out == "" {
			return "", fmt.Errorf("rule %s maps %q to an empty principal", r.text, dn)
		}
		return out, nil
	}
	return "", fmt.Errorf("no ssl principal mapping rule applies to %q", dn)
}
