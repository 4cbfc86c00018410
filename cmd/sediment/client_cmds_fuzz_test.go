package main

import (
	"bytes"
	"testing"
)

// FuzzParseFrom: any --from either is refused or resolves to an offset
// within the partition's [start, end].
func FuzzParseFrom(f *testing.F) {
	for _, s := range []string{"earliest", "latest", "0", "-1", "42", "-9223372036854775808", "2026-11-29T10:00:00Z", "x"} {
		f.Add(s, int64(10), int64(100), int64(42))
	}
	f.Fuzz(func(t *testing.T, from string, start, end, atTime int64) {
		spec, err := parseFrom(from)
		if err != nil {
			return
		}
		if start < 0 || end < start {
			return // brokers never list such offsets
		}
		if got := spec.resolve(start, end, atTime); got < start || got > end {
			t.Fatalf("--from %q resolves to %d, outside [%d, %d]", from, got, start, end)
		}
	})
}

// FuzzLineRecord: a keyed line splits at the first separator and the parts
// join back into the line; the record never aliases the input.
func FuzzLineRecord(f *testing.F) {
	f.Add([]byte("k:v"), ":")
	f.Add([]byte("no separator"), "::")
	f.Add([]byte(""), "")
	f.Fuzz(func(t *testing.T, line []byte, sep string) {
		orig := bytes.Clone(line)
		r := lineRecord("t", line, sep, nil, -1, false)
		for i := range line {
			line[i] ^= 0xff
		}
		if r.Value == nil {
			t.Fatal("nil value without --null-empty")
		}
		switch {
		case sep == "" || !bytes.Contains(orig, []byte(sep)):
			if r.Key != nil || !bytes.Equal(r.Value, orig) {
				t.Fatalf("line %q sep %q: key %q value %q, want a null key and the whole line", orig, sep, r.Key, r.Value)
			}
		default:
			if bytes.Contains(r.Key, []byte(sep)) || !bytes.Equal(append(append(bytes.Clone(r.Key), sep...), r.Value...), orig) {
				t.Fatalf("line %q sep %q: key %q value %q", orig, sep, r.Key, r.Value)
			}
		}
	})
}
