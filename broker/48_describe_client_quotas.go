package broker

import (
	"context"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeClientQuotas: v0-1
//
// KIP-546, as Kafka's ClientQuotasImage answers it: each filter component
// names an entity type ("user", "client-id", "ip") and matches an exact
// name (0), the default entity (1) or any entity of the type, the default
// included (2); strict keeps only entities with no other component. A bad
// filter (empty or repeated type, a match string where none belongs, none
// for an exact match, ip with user or client-id, an unknown match type) is
// INVALID_REQUEST and an unknown entity type UNSUPPORTED_VERSION, for the
// whole request. v1 flexible.

func init() { regKey(48, 0, 1).handler = handleDescribeClientQuotas }

func handleDescribeClientQuotas(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeClientQuotasRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	filter, err := parseQuotaFilter(req)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		return &Reply{Msg: resp}, nil
	}
	all := b.meta.State().ClientQuotas()
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		e, ok := parseCanonicalQuotaEntity(name)
		if !ok || !filter.matches(e, req.Strict) {
			continue
		}
		vals := parseQuotaValues(all[name])
		if len(vals) == 0 {
			continue
		}
		entry := kmsg.NewDescribeClientQuotasResponseEntry()
		for _, c := range e.components() {
			ee := kmsg.NewDescribeClientQuotasResponseEntryEntity()
			ee.Type, ee.Name = c.typ, c.name
			entry.Entity = append(entry.Entity, ee)
		}
		for _, k := range sortedQuotaKeys(vals) {
			v := kmsg.NewDescribeClientQuotasResponseEntryValue()
			v.Key, v.Value = k, vals[k]
			entry.Values = append(entry.Values, v)
		}
		resp.Entries = append(resp.Entries, entry)
	}
	return &Reply{Msg: resp}, nil
}

// quotaFilter is a checked DescribeClientQuotas filter: exact holds the
// types matched by name (nil: the default), anyOf the types matched by
// presence.
type quotaFilter struct {
	exact map[string]*string
	anyOf map[string]bool
}

func parseQuotaFilter(req *kmsg.DescribeClientQuotasRequest) (quotaFilter, error) {
	f := quotaFilter{exact: map[string]*string{}, anyOf: map[string]bool{}}
	for _, c := range req.Components {
		if c.EntityType == "" {
			return f, errQuotaRequest("Invalid empty entity type.")
		}
		if _, dup := f.exact[c.EntityType]; dup || f.anyOf[c.EntityType] {
			return f, errQuotaRequest("Entity type %s cannot appear more than once in the filter.", c.EntityType)
		}
		switch c.EntityType {
		case quotaEntityUser, quotaEntityClientID, quotaEntityIP:
		default:
			return f, &codedError{kerr.UnsupportedVersion, "Unsupported entity type " + c.EntityType}
		}
		switch c.MatchType {
		case kmsg.QuotasMatchTypeExact:
			if c.Match == nil {
				return f, errQuotaRequest("Request specified MATCH_TYPE_EXACT, but set match string to null.")
			}
			f.exact[c.EntityType] = c.Match
		case kmsg.QuotasMatchTypeDefault:
			if c.Match != nil {
				return f, errQuotaRequest("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
			}
			f.exact[c.EntityType] = nil
		case kmsg.QuotasMatchTypeAny:
			if c.Match != nil {
				return f, errQuotaRequest("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
			}
			f.anyOf[c.EntityType] = true
		default:
			return f, errQuotaRequest("Unknown match type %d", c.MatchType)
		}
	}
	has := func(t string) bool { _, ok := f.exact[t]; return ok || f.anyOf[t] }
	if has(quotaEntityIP) && (has(quotaEntityUser) || has(quotaEntityClientID)) {
		return f, errQuotaRequest("Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.")
	}
	return f, nil
}

func (f quotaFilter) matches(e quotaEntity, strict bool) bool {
	comps := e.components()
	if strict && len(comps) != len(f.exact)+len(f.anyOf) {
		return false
	}
	names := map[string]*string{}
	for _, c := range comps {
		names[c.typ] = c.name
	}
	for typ, want := range f.exact {
		got, ok := names[typ]
		if !ok || (got == nil) != (want == nil) || (got != nil && *got != *want) {
			return false
		}
	}
	for typ := range f.anyOf {
		if _, ok := names[typ]; !ok {
			return false
		}
	}
	return true
}
