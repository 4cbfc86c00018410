package errorfs

import (
	"errors"
	"testing"

	"github.com/sediment-io/sediment/internal/vfs"
)

func TestOnIndex(t *testing.T) {
	inj := OnIndex(2, OpFileWrite)
	fs := Wrap(vfs.NewMem(), inj)
	fs.PartialWrites = true
	f, err := fs.Create("/f")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		n, err := f.Write([]byte("abcd"))
		if i == 2 {
			if !errors.Is(err, ErrInjected) || n != 2 {
				t.Fatalf("write %d: n=%d err=%v, want a partial injected failure", i, n, err)
			}
		} else if err != nil || n != 4 {
			t.Fatalf("write %d: n=%d err=%v", i, n, err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	if st.Size() != 4*4+2 {
		t.Fatalf("size %d", st.Size())
	}
	if inj.Fired() != 1 || inj.Count() != 5 {
		t.Fatalf("fired %d count %d", inj.Fired(), inj.Count())
	}
}

func TestStickyToggle(t *testing.T) {
	tog := &Toggle{Injector: OnIndex(0, OpFileSync).Sticky()}
	fs := Wrap(vfs.NewMem(), tog)
	f, _ := fs.Create("/f")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	tog.On()
	for range 3 {
		if err := f.Sync(); !errors.Is(err, ErrInjected) {
			t.Fatalf("sync: %v", err)
		}
	}
	tog.Off()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if f.Fd() != vfs.InvalidFd {
		t.Fatal("wrapped mem file has a descriptor")
	}
}
