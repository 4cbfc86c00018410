package mem_test

import (
	"testing"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/mem"
	"github.com/sediment-io/sediment/objectstore/objectstoretest"
)

func TestConformance(t *testing.T) {
	objectstoretest.Run(t, func(t *testing.T) objectstore.Store { return mem.New(nil) }, objectstoretest.Options{})
}
