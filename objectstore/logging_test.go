package objectstore_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/mem"
	"github.com/sediment-io/sediment/objectstore/objectstoretest"
)

func TestLoggingConformance(t *testing.T) {
	objectstoretest.Run(t, func(t *testing.T) objectstore.Store {
		return objectstore.WithLogging(mem.New(nil), slog.New(slog.DiscardHandler))
	}, objectstoretest.Options{})
}

// The log shows every call in order, so tests can assert upload order.
func TestLoggingOrder(t *testing.T) {
	var buf bytes.Buffer
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == "time" || a.Key == "took" {
				return slog.Attr{}
			}
			return a
		},
	})
	s := objectstore.WithLogging(mem.New(nil), slog.New(h))
	ctx := t.Context()
	objectstore.PutBytes(ctx, s, "seg/1.log", []byte("abc"), objectstore.CreateOptions{NoOverwrite: true})
	objectstore.PutBytes(ctx, s, "seg/1.log", []byte("abc"), objectstore.CreateOptions{NoOverwrite: true})
	s.Head(ctx, "missing")
	s.List(ctx, "seg/", "/")
	s.Delete(ctx, "seg/1.log", "seg/2.log")
	want := []string{
		`level=DEBUG msg="objectstore: create-object" key=seg/1.log no-overwrite=true`,
		`level=DEBUG msg="objectstore: commit" key=seg/1.log size=3`,
		`level=DEBUG msg="objectstore: create-object" key=seg/1.log no-overwrite=true`,
		`level=WARN msg="objectstore: commit" key=seg/1.log size=3 err="mem: \"seg/1.log\": objectstore: object already exists"`,
		`level=DEBUG msg="objectstore: abort" key=seg/1.log`,
		`level=WARN msg="objectstore: head" key=missing size=0 err="mem: \"missing\": objectstore: object does not exist"`,
		`level=DEBUG msg="objectstore: list" prefix=seg/ delimiter=/ objects=1 prefixes=0`,
		`level=DEBUG msg="objectstore: delete" keys=seg/1.log,seg/2.log`,
	}
	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
