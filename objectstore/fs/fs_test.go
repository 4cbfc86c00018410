package fs_test

import (
	"testing"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/fs"
	"github.com/sediment-io/sediment/objectstore/objectstoretest"
)

func TestConformance(t *testing.T) {
	objectstoretest.Run(t, func(t *testing.T) objectstore.Store {
		s, err := fs.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, objectstoretest.Options{})
}
