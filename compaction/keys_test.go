package compaction

import (
	"errors"
	"testing"
)

func FuzzCheckKeys(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, headerSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := CheckKeys(b, 1<<16)
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrMissingKey) {
			t.Fatalf("unexpected error class: %v", err)
		}
	})
}
