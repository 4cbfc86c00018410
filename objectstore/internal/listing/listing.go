// Package listing groups sorted keys by a delimiter the way S3's
// ListObjectsV2 does, for the backends that list by themselves.
package listing

import (
	"slices"
	"strings"

	"github.com/sediment-io/sediment/objectstore"
)

// Group keeps the objects whose keys start with prefix and, with a non-empty
// delimiter, folds those with the delimiter after the prefix into common
// prefixes. objs need not be sorted; the result is.
func Group(objs []objectstore.ObjectInfo, prefix, delimiter string) objectstore.Listing {
	var out objectstore.Listing
	seen := map[string]bool{}
	for _, o := range objs {
		if !strings.HasPrefix(o.Key, prefix) {
			continue
		}
		if delimiter != "" {
			if i := strings.Index(o.Key[len(prefix):], delimiter); i >= 0 {
				p := o.Key[:len(prefix)+i+len(delimiter)]
				if !seen[p] {
					seen[p] = true
					out.Prefixes = append(out.Prefixes, p)
				}
				continue
			}
		}
		out.Objects = append(out.Objects, o)
	}
	slices.SortFunc(out.Objects, func(a, b objectstore.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	slices.Sort(out.Prefixes)
	return out
}
