package broker

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Kafka's sasl.kerberos.principal.to.local.rules (KerberosShortNamer): how
// a Kerberos principal (alice@REALM, kafka/host@REALM) becomes the
// principal that ACLs and quotas see. A comma-separated list of rules,
// tried in order; the first that gives a name wins:
//
//	DEFAULT                        the first component, when the realm is
//	                               the broker's (alice/host@REALM: alice)
//	RULE:[n:format](match)s/from/to/g/L
//	                               for principals of n components: format
//	                               builds a string from $0 (the realm) and
//	                               $1, $2 (the components); the rule applies
//	                               if match (optional) matches all of it;
//	                               the sed-like s/from/to/ (optional; g:
//	                               every match) rewrites it; L or U lower-
//	                               or upper-cases the result.
//
// A result containing '/' or '@' fails the login, as does a principal no
// rule maps; both are Kafka's. The patterns are Go regular expressions
// (RE2); replacements use Java's $1 for groups. Unlike Kafka, a match
// pattern may hold balanced parentheses, "\/" is a slash inside from or to,
// and a format naming a component the rule's principals cannot have ($2
// in a [1:...] rule) is refused when the rules are read, not at login.

// KerberosNamer maps Kerberos principals to short names; nil maps with
// DEFAULT alone.
type KerberosNamer struct {
	rules []kerberosRule
}

type kerberosRule struct {
	isDefault    bool
	components   int
	format       []formatPart
	match        *regexp.Regexp // nil: every formatted name
	from         *regexp.Regexp // nil: no substitution
	to           string         // regexp.Expand form
	global       bool
	lower, upper bool
	text         string // as written, for errors
}

// formatPart is literal text, or a parameter when param >= 0.
type formatPart struct {
	lit   string
	param int
}

// ParseKerberosRules reads Kafka's rule list; "" or "DEFAULT" gives a nil
// namer.
func ParseKerberosRules(s string) (*KerberosNamer, error) {
	rules, err := parseRuleList(s, "kerberos principal to local rules", parseKerberosRule, func(r kerberosRule) string { return r.text })
	if err != nil {
		return nil, err
	}
	k := &KerberosNamer{rules: rules}
	if len(k.rules) == 0 || (len(k.rules) == 1 && k.rules[0].isDefault) {
		return nil, nil
	}
	return k, nil
}

const kerberosRuleForm = "DEFAULT or RULE:[n:format](match)s/from/to/g/L"

func parseKerberosRule(s string) (kerberosRule, string, error) {
	if strings.HasPrefix(s, "DEFAULT") {
		return kerberosRule{isDefault: true, text: "DEFAULT"}, s[len("DEFAULT"):], nil
	}
	if !strings.HasPrefix(s, "RULE:[") {
		return kerberosRule{}, "", fmt.Errorf("%q: a rule is %s", cut(s), kerberosRuleForm)
	}
	var r kerberosRule
	body := s[len("RULE:["):]
	i := 0
	for i < len(body) && body[i] >= '0' && body[i] <= '9' {
		i++
	}
	if i == 0 || i >= len(body) || body[i] != ':' {
		return kerberosRule{}, "", fmt.Errorf("%q: want RULE:[n:format] with n the principal's number of components", cut(s))
	}
	n, err := strconv.Atoi(body[:i])
	if err != nil || n < 1 || n > 2 {
		// Kafka's names have one component or two (service/host).
		return kerberosRule{}, "", fmt.Errorf("%q: a principal has 1 or 2 components, not %s", cut(s), body[:i])
	}
	r.components = n
	body = body[i+1:]
	end := strings.IndexByte(body, ']')
	if end < 0 {
		return kerberosRule{}, "", fmt.Errorf("%q: the format has no closing ]", cut(s))
	}
	if r.format, err = parseKerberosFormat(body[:end], n); err != nil {
		return kerberosRule{}, "", fmt.Errorf("%q: %w", cut(s), err)
	}
	body = body[end+1:]
	if strings.HasPrefix(body, "(") {
		pat, after, ok := readParenthesized(body)
		if !ok {
			return kerberosRule{}, "", fmt.Errorf("%q: the match pattern has no closing )", cut(s))
		}
		if r.match, err = regexp.Compile("^(?:" + pat + ")$"); err != nil {
			return kerberosRule{}, "", fmt.Errorf("%q: match pattern: %w", cut(s), err)
		}
		body = after
	}
	if strings.HasPrefix(body, "s/") {
		from, after, ok := readRulePart(body[2:])
		if !ok {
			return kerberosRule{}, "", fmt.Errorf("%q: want s/from/to/", cut(s))
		}
		to, after, ok := readRulePart(after)
		if !ok {
			return kerberosRule{}, "", fmt.Errorf("%q: want s/from/to/", cut(s))
		}
		if from == "" {
			return kerberosRule{}, "", fmt.Errorf("%q: the substitution's pattern is empty", cut(s))
		}
		if r.from, err = regexp.Compile(from); err != nil {
			return kerberosRule{}, "", fmt.Errorf("%q: substitution pattern: %w", cut(s), err)
		}
		r.to = javaReplacement(to, r.from.NumSubexp())
		body = after
		if strings.HasPrefix(body, "g") {
			r.global = true
			body = body[1:]
		}
	}
	body = strings.TrimPrefix(body, "/")
	if body != "" && (body[0] == 'L' || body[0] == 'U') {
		r.lower, r.upper = body[0] == 'L', body[0] == 'U'
		body = body[1:]
	}
	r.text = s[:len(s)-len(body)]
	return r, body, nil
}

// parseKerberosFormat reads a rule's format: text with $0 (the realm) and
// $1..$n (the components).
func parseKerberosFormat(f string, n int) ([]formatPart, error) {
	var parts []formatPart
	for f != "" {
		d := strings.IndexByte(f, '$')
		if d < 0 {
			parts = append(parts, formatPart{lit: f, param: -1})
			break
		}
		if d > 0 {
			parts = append(parts, formatPart{lit: f[:d], param: -1})
		}
		j := d + 1
		for j < len(f) && f[j] >= '0' && f[j] <= '9' {
			j++
		}
		if j == d+1 {
			return nil, fmt.Errorf("format %q: '$' without a number", f)
		}
		p, err := strconv.Atoi(f[d+1 : j])
		if err != nil || p > n {
			return nil, fmt.Errorf("format %q: $%s is not one of $0 (the realm) to $%d", f, f[d+1:j], n)
		}
		parts = append(parts, formatPart{param: p})
		f = f[j:]
	}
	return parts, nil
}

// readParenthesized reads "(pattern)" at the start of s, through the ')'
// that balances the first '(' (backslash escapes and character classes
// hold no parentheses that count).
func readParenthesized(s string) (inner, rest string, ok bool) {
	depth, class := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case class:
			if c == ']' {
				class = false
			}
		case c == '[':
			class = true
			// A ']' first in a class is a literal.
			if i+1 < len(s) && s[i+1] == '^' {
				i++
			}
			if i+1 < len(s) && s[i+1] == ']' {
				i++
			}
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return s[1:i], s[i+1:], true
			}
		}
	}
	return "", "", false
}

// errNoKerberosRule is a principal no rule maps; the login fails.
var errNoKerberosRule = errors.New("no sasl.kerberos.principal.to.local.rules rule applies")

// ShortName maps a principal: its components (alice, or kafka and host),
// its realm, and the broker's realm, which DEFAULT compares it with.
func (k *KerberosNamer) ShortName(components []string, realm, defaultRealm string) (string, error) {
	if len(components) == 0 || len(components) > 2 {
		return "", fmt.Errorf("principal %s@%s: %w: a principal has 1 or 2 components", strings.Join(components, "/"), realm, errNoKerberosRule)
	}
	rules := defaultKerberosRules
	if k != nil {
		rules = k.rules
	}
	for _, r := range rules {
		out, ok := r.apply(components, realm, defaultRealm)
		if !ok {
			continue
		}
		if strings.ContainsAny(out, "/@") {
			return "", fmt.Errorf("principal %s@%s: rule %s gives %q, which is not a simple name", strings.Join(components, "/"), realm, r.text, out)
		}
		if out == "" {
			return "", fmt.Errorf("principal %s@%s: rule %s gives an empty name", strings.Join(components, "/"), realm, r.text)
		}
		return out, nil
	}
	if k == nil {
		return "", fmt.Errorf("principal %s@%s: %w (DEFAULT maps the realm %s only)", strings.Join(components, "/"), realm, errNoKerberosRule, defaultRealm)
	}
	return "", fmt.Errorf("principal %s@%s: %w", strings.Join(components, "/"), realm, errNoKerberosRule)
}

var defaultKerberosRules = []kerberosRule{{isDefault: true, text: "DEFAULT"}}

func kerberosDefault(components []string, realm, defaultRealm string) (string, bool) {
	if realm != defaultRealm {
		return "", false
	}
	return components[0], true
}

func (r *kerberosRule) apply(components []string, realm, defaultRealm string) (string, bool) {
	if r.isDefault {
		return kerberosDefault(components, realm, defaultRealm)
	}
	if len(components) != r.components {
		return "", false
	}
	var b strings.Builder
	for _, p := range r.format {
		switch {
		case p.param < 0:
			b.WriteString(p.lit)
		case p.param == 0:
			b.WriteString(realm)
		default:
			b.WriteString(components[p.param-1])
		}
	}
	out := b.String()
	if r.match != nil && !r.match.MatchString(out) {
		return "", false
	}
	if r.from != nil {
		if r.global {
			out = r.from.ReplaceAllString(out, r.to)
		} else if idx := r.from.FindStringSubmatchIndex(out); idx != nil {
			out = out[:idx[0]] + string(r.from.ExpandString(nil, r.to, out, idx)) + out[idx[1]:]
		}
	}
	switch {
	case r.lower:
		out = strings.ToLower(out)
	case r.upper:
		out = strings.ToUpper(out)
	}
	return out, true
}
