package objectstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/fs"
)

// A segment goes up once under a unique key, then is read back in ranges.
func Example() {
	dir, _ := os.MkdirTemp("", "bucket")
	defer os.RemoveAll(dir)
	store, err := fs.New(dir) // or s3.New(ctx, s3.Config{…}), mem.New(nil)
	if err != nil {
		panic(err)
	}
	defer store.Close()
	ctx := context.Background()

	key := "3f2a/orders-0/00000000000000000000-e1-x7k2.log"
	w, err := store.CreateObject(ctx, key, objectstore.CreateOptions{NoOverwrite: true})
	if err != nil {
		panic(err)
	}
	if _, err := io.WriteString(w, "record batches…"); err != nil {
		w.Abort()
		panic(err)
	}
	if err := w.Close(); err != nil { // atomic and durable once nil
		panic(err)
	}

	// A retried upload never replaces it.
	err = objectstore.PutBytes(ctx, store, key, []byte("zombie"), objectstore.CreateOptions{NoOverwrite: true})
	fmt.Println(errors.Is(err, objectstore.ErrExists))

	r, size, err := store.ReadObject(ctx, key)
	if err != nil {
		panic(err)
	}
	defer r.Close()
	p := make([]byte, 6)
	if err := r.ReadAt(ctx, p, 0); err != nil {
		panic(err)
	}
	fmt.Println(size, string(p))

	res, _ := store.List(ctx, "3f2a/", "/")
	fmt.Println(res.Prefixes)

	_, err = store.Head(ctx, "3f2a/missing")
	fmt.Println(store.IsNotExistError(err))
	// Output:
	// true
	// 17 record
	// [3f2a/orders-0/]
	// true
}
