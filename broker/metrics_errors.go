package broker

import (
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Error codes in replies, by API and code: Kafka's RequestMetrics
// ErrorsPerSec{request,error}, without NONE. A reply's codes are found by
// walking it: every int16 field named ErrorCode or ending in it (and
// kmsg's few Error fields), in the reply and the structs and slices of
// structs it holds, each counted once per place it is set (a Produce to
// three partitions that are not led here counts three
// NOT_LEADER_OR_FOLLOWER, as Kafka's errorCounts does).

// errorPlan is where a struct type holds error codes and further structs
// that hold some.
type errorPlan struct {
	codes  []int         // fields: int16 error codes
	nested []nestedField // fields: structs, pointers to structs, slices of either, with codes
}

type nestedField struct {
	index int
	plan  *errorPlan // of the struct type held; nil for one being built (a type holding itself)
}

var errorPlans sync.Map // reflect.Type (struct) → *errorPlan

// planFor returns t's plan (t a struct type), built once per type.
func planFor(t reflect.Type) *errorPlan {
	if p, ok := errorPlans.Load(t); ok {
		return p.(*errorPlan)
	}
	return buildPlan(t, map[reflect.Type]bool{})
}

// buildPlan builds and stores t's plan and those of the struct types in it.
// A field is nested only if its struct type holds codes at some depth, so
// that a walk skips what cannot hold any (a fetch's leader, snapshot and
// aborted transactions, every reply's tagged fields). building holds the
// types being built (a type holding itself is taken to hold codes).
func buildPlan(t reflect.Type, building map[reflect.Type]bool) *errorPlan {
	if p, ok := errorPlans.Load(t); ok {
		return p.(*errorPlan)
	}
	building[t] = true
	p := &errorPlan{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Type.Kind() == reflect.Int16 && (strings.HasSuffix(f.Name, "ErrorCode") || f.Name == "Error") {
			p.codes = append(p.codes, i)
			continue
		}
		st := structOf(f.Type)
		if st == nil {
			continue
		}
		if building[st] {
			p.nested = append(p.nested, nestedField{index: i})
		} else if np := buildPlan(st, building); len(np.codes) > 0 || len(np.nested) > 0 {
			p.nested = append(p.nested, nestedField{index: i, plan: np})
		}
	}
	delete(building, t)
	errorPlans.Store(t, p)
	return p
}

// structOf is the struct type a field of type t holds (a struct, a pointer
// to one, a slice of either), or nil.
func structOf(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return t
}

// walkErrorCodes calls f with every error code other than 0 in v.
func walkErrorCodes(v reflect.Value, f func(int16)) {
	walkPlan(v, nil, f)
}

// walkPlan walks v, a struct, a pointer to one or a slice of either, whose
// struct type has plan p (nil: looked up).
func walkPlan(v reflect.Value, p *errorPlan, f func(int16)) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			walkPlan(v.Elem(), p, f)
		}
	case reflect.Slice:
		for i := range v.Len() {
			walkPlan(v.Index(i), p, f)
		}
	case reflect.Struct:
		if p == nil {
			p = planFor(v.Type())
		}
		for _, i := range p.codes {
			if c := int16(v.Field(i).Int()); c != 0 {
				f(c)
			}
		}
		for _, n := range p.nested {
			walkPlan(v.Field(n.index), n.plan, f)
		}
	}
}

// errorName is the label of code: Kafka's name of the error.
func errorName(code int16) string {
	if e, ok := kerr.ErrorForCode(code).(*kerr.Error); ok && e.Code == code {
		return e.Message
	}
	return "UNKNOWN_CODE_" + strconv.Itoa(int(code))
}

// countErrors counts the error codes of a reply to an API.
func (m *metrics) countErrors(key int16, msg kmsg.Response) {
	if msg == nil {
		return
	}
	var api string
	walkErrorCodes(reflect.ValueOf(msg), func(code int16) {
		if api == "" {
			api = kmsg.NameForKey(key)
		}
		m.errorCodes.WithLabelValues(api, errorName(code)).Inc()
	})
}
