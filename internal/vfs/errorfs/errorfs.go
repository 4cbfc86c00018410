// Package errorfs wraps a vfs.FS so that tests can make chosen operations fail:
// the Nth write, every sync after a point, any operation a function picks.
package errorfs

import (
	"errors"
	"fmt"
	"os"

	"sync/atomic"

	"github.com/sediment-io/sediment/internal/vfs"
)

// ErrInjected is the error that injected failures wrap.
var ErrInjected = errors.New("errorfs: injected error")

// Op is a kind of file-system operation.
type Op uint8

// The operations an Injector is asked about.
const (
	OpCreate Op = iota
	OpOpen
	OpOpenDir
	OpRemove
	OpRename
	OpMkdirAll
	OpList
	OpStat
	OpFileRead
	OpFileWrite
	OpFileSync
	OpFileTruncate
	OpFileStat
	OpFileClose
	numOps
)

var opNames = [...]string{"create", "open", "opendir", "remove", "rename", "mkdirall", "list", "stat",
	"read", "write", "sync", "truncate", "fstat", "close"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", o)
}

// Injector decides whether an operation fails. MaybeError is called before the
// operation runs, possibly from many goroutines at once.
type Injector interface {
	MaybeError(op Op, path string) error
}

// InjectorFunc adapts a function to Injector.
type InjectorFunc func(op Op, path string) error

// MaybeError implements Injector.
func (f InjectorFunc) MaybeError(op Op, path string) error { return f(op, path) }

// Index fails matching operations by their order: the nth (0-based) matching
// operation fails, and with Sticky every matching operation after it too.
type Index struct {
	n      int64
	ops    [numOps]bool
	sticky bool
	count  atomic.Int64
	fired  atomic.Int64
}

// OnIndex returns an Injector that fails the nth (0-based) operation of the
// given kinds (every kind if none is given).
func OnIndex(n int64, ops ...Op) *Index {
	i := &Index{n: n}
	for _, op := range ops {
		i.ops[op] = true
	}
	if len(ops) == 0 {
		for op := range i.ops {
			i.ops[op] = true
		}
	}
	return i
}

// Sticky makes every matching operation from the nth on fail, and returns i.
func (i *Index) Sticky() *Index { i.sticky = true; return i }

// Count is how many matching operations have been seen.
func (i *Index) Count() int64 { return i.count.Load() }

// Fired is how many errors were injected.
func (i *Index) Fired() int64 { return i.fired.Load() }

// MaybeError implements Injector.
func (i *Index) MaybeError(op Op, path string) error {
	if !i.ops[op] {
		return nil
	}
	c := i.count.Add(1) - 1
	if c == i.n || (i.sticky && c > i.n) {
		i.fired.Add(1)
		return fmt.Errorf("%w: %s %s (#%d)", ErrInjected, op, path, c)
	}
	return nil
}

// Toggle switches an Injector on and off; it starts off.
type Toggle struct {
	Injector
	on atomic.Bool
}

// On enables injection.
func (t *Toggle) On() { t.on.Store(true) }

// Off disables injection.
func (t *Toggle) Off() { t.on.Store(false) }

// MaybeError implements Injector.
func (t *Toggle) MaybeError(op Op, path string) error {
	if !t.on.Load() {
		return nil
	}
	return t.Injector.MaybeError(op, path)
}

// FS is a vfs.FS that asks an Injector before every operation.
type FS struct {
	fs  vfs.FS
	inj Injector
	// PartialWrites makes a failed write first write half of its bytes, as a
	// disk that fills up or a short write would.
	PartialWrites bool
}

var _ vfs.FS = (*FS)(nil)

// Wrap returns fs with errors injected by inj.
func Wrap(fs vfs.FS, inj Injector) *FS { return &FS{fs: fs, inj: inj} }

func (e *FS) file(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &file{fs: e, name: name, f: f}, nil
}

// Create implements vfs.FS.
func (e *FS) Create(name string) (vfs.File, error) {
	if err := e.inj.MaybeError(OpCreate, name); err != nil {
		return nil, err
	}
	f, err := e.fs.Create(name)
	return e.file(name, f, err)
}

// Open implements vfs.FS.
func (e *FS) Open(name string) (vfs.File, error) {
	if err := e.inj.MaybeError(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.Open(name)
	return e.file(name, f, err)
}

// OpenReadWrite implements vfs.FS.
func (e *FS) OpenReadWrite(name string) (vfs.File, error) {
	if err := e.inj.MaybeError(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenReadWrite(name)
	return e.file(name, f, err)
}

// OpenForAppend implements vfs.FS.
func (e *FS) OpenForAppend(name string) (vfs.File, error) {
	if err := e.inj.MaybeError(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenForAppend(name)
	return e.file(name, f, err)
}

// OpenDir implements vfs.FS.
func (e *FS) OpenDir(name string) (vfs.File, error) {
	if err := e.inj.MaybeError(OpOpenDir, name); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenDir(name)
	return e.file(name, f, err)
}

// Remove implements vfs.FS.
func (e *FS) Remove(name string) error {
	if err := e.inj.MaybeError(OpRemove, name); err != nil {
		return err
	}
	return e.fs.Remove(name)
}

// RemoveAll implements vfs.FS.
func (e *FS) RemoveAll(name string) error {
	if err := e.inj.MaybeError(OpRemove, name); err != nil {
		return err
	}
	return e.fs.RemoveAll(name)
}

// Rename implements vfs.FS.
func (e *FS) Rename(oldname, newname string) error {
	if err := e.inj.MaybeError(OpRename, oldname); err != nil {
		return err
	}
	return e.fs.Rename(oldname, newname)
}

// MkdirAll implements vfs.FS.
func (e *FS) MkdirAll(dir string, perm os.FileMode) error {
	if err := e.inj.MaybeError(OpMkdirAll, dir); err != nil {
		return err
	}
	return e.fs.MkdirAll(dir, perm)
}

// List implements vfs.FS.
func (e *FS) List(dir string) ([]string, error) {
	if err := e.inj.MaybeError(OpList, dir); err != nil {
		return nil, err
	}
	return e.fs.List(dir)
}

// Stat implements vfs.FS.
func (e *FS) Stat(name string) (vfs.FileInfo, error) {
	if err := e.inj.MaybeError(OpStat, name); err != nil {
		return nil, err
	}
	return e.fs.Stat(name)
}

type file struct {
	fs   *FS
	name string
	f    vfs.File
}

func (f *file) Read(p []byte) (int, error) {
	if err := f.fs.inj.MaybeError(OpFileRead, f.name); err != nil {
		return 0, err
	}
	return f.f.Read(p)
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.inj.MaybeError(OpFileRead, f.name); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

func (f *file) Write(p []byte) (int, error) {
	if err := f.fs.inj.MaybeError(OpFileWrite, f.name); err != nil {
		n := 0
		if f.fs.PartialWrites && len(p) > 1 {
			n, _ = f.f.Write(p[:len(p)/2])
		}
		return n, err
	}
	return f.f.Write(p)
}

func (f *file) Close() error {
	if err := f.fs.inj.MaybeError(OpFileClose, f.name); err != nil {
		f.f.Close()
		return err
	}
	return f.f.Close()
}

func (f *file) Sync() error {
	if err := f.fs.inj.MaybeError(OpFileSync, f.name); err != nil {
		return err
	}
	return f.f.Sync()
}

func (f *file) Stat() (vfs.FileInfo, error) {
	if err := f.fs.inj.MaybeError(OpFileStat, f.name); err != nil {
		return nil, err
	}
	return f.f.Stat()
}

func (f *file) Truncate(size int64) error {
	if err := f.fs.inj.MaybeError(OpFileTruncate, f.name); err != nil {
		return err
	}
	return f.f.Truncate(size)
}

func (f *file) Fd() uintptr { return f.f.Fd() }
