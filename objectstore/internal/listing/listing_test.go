package listing_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/internal/listing"
)

// FuzzGroup checks Group against the definition: every key with the
// prefix is either an object (no delimiter after the prefix) or covered by
// exactly one common prefix, results are sorted and unique.
func FuzzGroup(f *testing.F) {
	f.Add("a\nb/4\nb/5\nc/d/e", "", "/")
	f.Add("t/0001-a/x\nt/0001-b\nt/0002/y", "t/", "-")
	f.Add("aa\naaa\na", "a", "a")
	f.Fuzz(func(t *testing.T, keysText, prefix, delim string) {
		var objs []objectstore.ObjectInfo
		seen := map[string]bool{}
		for _, k := range strings.Split(keysText, "\n") {
			if !seen[k] {
				seen[k] = true
				objs = append(objs, objectstore.ObjectInfo{Key: k})
			}
		}
		res := listing.Group(objs, prefix, delim)
		if !slices.IsSortedFunc(res.Objects, func(a, b objectstore.ObjectInfo) int { return strings.Compare(a.Key, b.Key) }) || !slices.IsSorted(res.Prefixes) {
			t.Fatal("not sorted")
		}
		if len(slices.Compact(slices.Clone(res.Prefixes))) != len(res.Prefixes) {
			t.Fatal("duplicate prefixes")
		}
		objects := map[string]bool{}
		for _, o := range res.Objects {
			objects[o.Key] = true
		}
		for _, p := range res.Prefixes {
			if !strings.HasPrefix(p, prefix) || delim == "" || !strings.HasSuffix(p, delim) || strings.Contains(p[len(prefix):len(p)-len(delim)], delim) {
				t.Fatalf("bad common prefix %q", p)
			}
		}
		for k := range seen {
			if !strings.HasPrefix(k, prefix) {
				if objects[k] {
					t.Fatalf("%q listed without the prefix", k)
				}
				continue
			}
			covered := 0
			for _, p := range res.Prefixes {
				if strings.HasPrefix(k, p) {
					covered++
				}
			}
			hasDelim := delim != "" && strings.Contains(k[len(prefix):], delim)
			switch {
			case hasDelim && (covered != 1 || objects[k]):
				t.Fatalf("%q: covered by %d prefixes, object %v", k, covered, objects[k])
			case !hasDelim && (!objects[k] || covered != 0):
				t.Fatalf("%q: should be an object alone (covered %d)", k, covered)
			}
		}
	})
}
