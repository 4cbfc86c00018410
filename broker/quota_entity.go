package broker

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Client quota entities and keys (KIP-13 byte rates, KIP-55 user quotas,
// KIP-546 DescribeClientQuotas/AlterClientQuotas), validated as Kafka's
// controller does (ClientQuotaControlManager): every mistake is
// INVALID_REQUEST with a message.
//
// An entity is a user, a client id, or the pair; either name may be the
// default entity (null on the wire, "<default>" in kafka-configs). It is
// stored in the metadata log (metadata.ResourceClientQuota) under its
// canonical string: the present components in the order user, client-id,
// joined by "&", each "type=" and its query-escaped name, or the bare type
// for the default:
//
//	user=alice                  client-id=app%2B1
//	user=alice&client-id        (alice, default client id)
//	user                        (the default user)

const (
	quotaEntityUser     = "user"
	quotaEntityClientID = "client-id"
	quotaEntityIP       = "ip"

	quotaProducerByteRate  = "producer_byte_rate"
	quotaConsumerByteRate  = "consumer_byte_rate"
	quotaRequestPercentage = "request_percentage"
	quotaControllerMutRate = "controller_mutation_rate"
	quotaConnectionRate    = "connection_creation_rate"
)

// quotaKeys are the quota keys of user and client-id entities, with whether
// the value must be a whole number (Kafka's LONG type). An ip entity has
// connection_creation_rate alone (an INT; conn_limits.go).
var quotaKeys = map[string]struct{ integral bool }{
	quotaProducerByteRate:  {integral: true},
	quotaConsumerByteRate:  {integral: true},
	quotaControllerMutRate: {integral: false}, // partitions per second (quota_mutation.go)
	quotaRequestPercentage: {integral: false}, // percent of one request handler (quota.go)
}

// quotaEntity is one client quota entity: a user, a client id or both, or
// an ip (KIP-612, alone). A nil name is the default.
type quotaEntity struct {
	hasUser, hasClient, hasIP bool
	user, client, ip          *string
}

// codedError is a Kafka error code with a message for it, alone (the
// response's error_message, one line: an errors.Join of the code's sentinel
// and the message printed the sentinel's text on a line of its own).
type codedError struct {
	code error // a *kerr.Error, or a sentinel broker/errors.go maps to one
	msg  string
}

func (e *codedError) Error() string { return e.msg }
func (e *codedError) Unwrap() error { return e.code }

// errQuotaRequest is INVALID_REQUEST with a message.
func errQuotaRequest(format string, args ...any) error {
	return &codedError{kerr.InvalidRequest, fmt.Sprintf(format, args...)}
}

// parseQuotaEntity checks the components of an entity as Kafka does.
func parseQuotaEntity(components []quotaComponent) (quotaEntity, error) {
	var e quotaEntity
	if len(components) == 0 {
		return e, errQuotaRequest("Invalid empty client quota entity")
	}
	seen := map[string]bool{}
	for _, c := range components {
		if seen[c.typ] {
			return e, errQuotaRequest("Invalid client quota entity, duplicate entity entry %s", c.typ)
		}
		seen[c.typ] = true
		switch c.typ {
		case quotaEntityUser:
			e.hasUser, e.user = true, c.name
		case quotaEntityClientID:
			e.hasClient, e.client = true, c.name
		case quotaEntityIP:
			e.hasIP, e.ip = true, c.name
		default:
			return e, errQuotaRequest("Unhandled client quota entity type: %s", c.typ)
		}
		if c.name != nil && *c.name == "" {
			return e, errQuotaRequest("Empty %s not supported", c.typ)
		}
	}
	if e.hasIP && (e.hasUser || e.hasClient) {
		// Kafka's message, its missing space included.
		return e, errQuotaRequest("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
	}
	if e.hasIP && e.ip != nil && resolveQuotaIP(*e.ip) == nil {
		return e, errQuotaRequest("%s is not a valid IP or resolvable host.", *e.ip)
	}
	return e, nil
}

// resolveQuotaIP is the addresses an ip entity's name stands for: itself
// if an IP address, else what the name resolves to now (Kafka takes a
// resolvable host name too); nil if neither.
func resolveQuotaIP(name string) []string {
	if ip := net.ParseIP(strings.Trim(name, "[]")); ip != nil {
		return []string{ip.String()}
	}
	ips, err := net.LookupIP(name)
	if err != nil || len(ips) == 0 {
		return nil
	}
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// validateQuotaValue checks one quota key and value of entity e as Kafka's
// validateQuotaKeyValue does.
func validateQuotaValue(e quotaEntity, key string, value float64) error {
	if e.hasIP {
		if key != quotaConnectionRate {
			return errQuotaRequest("Invalid configuration key %s", key)
		}
		if math.IsNaN(value) || math.IsInf(value, 0) {
			return errQuotaRequest("Quota %s must be a finite number", key)
		}
		if value <= 0 {
			return errQuotaRequest("Quota %s must be greater than 0", key)
		}
		if value > math.MaxInt32 {
			return errQuotaRequest("Proposed value for %s is too large for an INT.", key)
		}
		if math.Abs(math.Mod(value, 1)) > 1e-6 {
			return errQuotaRequest("%s cannot be a fractional value.", key)
		}
		return nil
	}
	k, ok := quotaKeys[key]
	if !ok {
		return errQuotaRequest("Invalid configuration key %s", key)
	}
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return errQuotaRequest("Quota %s must be a finite number", key)
	}
	if value <= 0 {
		return errQuotaRequest("Quota %s must be greater than 0", key)
	}
	if k.integral {
		if value > math.MaxInt64 {
			return errQuotaRequest("Proposed value for %s is too large for a LONG.", key)
		}
		if math.Abs(math.Mod(value, 1)) > 1e-6 {
			return errQuotaRequest("%s cannot be a fractional value.", key)
		}
	}
	return nil
}

// String is the entity's canonical form (the metadata resource name).
func (e quotaEntity) String() string {
	var parts []string
	add := func(typ string, name *string) {
		if name == nil {
			parts = append(parts, typ)
		} else {
			parts = append(parts, typ+"="+url.QueryEscape(*name))
		}
	}
	if e.hasUser {
		add(quotaEntityUser, e.user)
	}
	if e.hasClient {
		add(quotaEntityClientID, e.client)
	}
	if e.hasIP {
		add(quotaEntityIP, e.ip)
	}
	return strings.Join(parts, "&")
}

// parseCanonicalQuotaEntity reads back what String wrote.
func parseCanonicalQuotaEntity(s string) (quotaEntity, bool) {
	var e quotaEntity
	if s == "" {
		return e, false
	}
	for _, p := range strings.Split(s, "&") {
		typ, esc, named := strings.Cut(p, "=")
		var name *string
		if named {
			n, err := url.QueryUnescape(esc)
			if err != nil {
				return e, false
			}
			name = &n
		}
		switch {
		case typ == quotaEntityUser && !e.hasUser && !e.hasClient:
			e.hasUser, e.user = true, name
		case typ == quotaEntityClientID && !e.hasClient && !e.hasIP:
			e.hasClient, e.client = true, name
		case typ == quotaEntityIP && !e.hasUser && !e.hasClient && !e.hasIP:
			e.hasIP, e.ip = true, name
		default:
			return e, false
		}
	}
	return e, true
}

// components lists the entity as the protocol does (user first).
func (e quotaEntity) components() []quotaComponent {
	var out []quotaComponent
	if e.hasUser {
		out = append(out, quotaComponent{quotaEntityUser, e.user})
	}
	if e.hasClient {
		out = append(out, quotaComponent{quotaEntityClientID, e.client})
	}
	if e.hasIP {
		out = append(out, quotaComponent{quotaEntityIP, e.ip})
	}
	return out
}

type quotaComponent struct {
	typ  string
	name *string
}

// formatQuotaValue is how a value is kept in the metadata log.
func formatQuotaValue(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// parseQuotaValues reads an entity's stored quotas; a value that does not
// parse (never written by this code) is left out.
func parseQuotaValues(m map[string]string) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[k] = f
		}
	}
	return out
}

func sortedQuotaKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
