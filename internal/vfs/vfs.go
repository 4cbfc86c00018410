// Package vfs is the small file-system interface through which Sediment's storage
// rooms (hotlog, compaction) reach the disk, so that tests can inject faults and
// simulate crashes.
//
// Three implementations exist: Default (the operating system), NewMem (an
// in-memory file system whose CrashClone drops everything that was not synced)
// and errorfs.Wrap (an error-injecting wrapper around any FS).
//
// Durability contract, the same as POSIX on Linux: bytes written to a file are
// durable after File.Sync returns; a file's creation, removal or rename is
// durable after the directory that holds it is synced (OpenDir(dir).Sync()).
package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// InvalidFd is what File.Fd returns when the file has no operating-system
// descriptor (in-memory files, wrappers that hide it). Callers that want
// sendfile(2) must then fall back to a copy.
const InvalidFd uintptr = ^uintptr(0)

// ErrNotExist is returned (wrapped) when a file or directory does not exist.
// Test it with errors.Is, or with IsNotExist.
var ErrNotExist = fs.ErrNotExist

// ErrExist is returned (wrapped) when a file or directory already exists.
var ErrExist = fs.ErrExist

// IsNotExist reports whether err says that a file does not exist.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// FileInfo describes a file (the io/fs interface).
type FileInfo = fs.FileInfo

// File is an open file. A File is safe for concurrent ReadAt calls; Read, Write,
// Sync and Truncate must not race with each other on the same File.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Closer
	// Sync makes the file's data durable.
	Sync() error
	// Stat describes the file.
	Stat() (FileInfo, error)
	// Truncate changes the file's size (shrinking or extending with zeros).
	Truncate(size int64) error
	// Fd returns the operating-system descriptor, or InvalidFd.
	Fd() uintptr
}

// FS is a file system. All methods are safe for concurrent use.
type FS interface {
	// Create creates or truncates name, opened for reading and writing.
	Create(name string) (File, error)
	// Open opens name for reading.
	Open(name string) (File, error)
	// OpenReadWrite opens name for reading and writing at position 0, creating it
	// if it does not exist; the content is kept.
	OpenReadWrite(name string) (File, error)
	// OpenForAppend opens name for reading and appending (every Write goes to the
	// end of the file), creating it if it does not exist.
	OpenForAppend(name string) (File, error)
	// OpenDir opens a directory so that it can be synced.
	OpenDir(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a path and everything under it; a missing path is not an error.
	RemoveAll(name string) error
	// Rename renames oldname to newname, replacing newname if it exists.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and its missing parents.
	MkdirAll(dir string, perm os.FileMode) error
	// List returns the names (not paths) of a directory's entries, sorted.
	List(dir string) ([]string, error)
	// Stat describes name.
	Stat(name string) (FileInfo, error)
}

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

func (f osFile) Fd() uintptr { return f.File.Fd() }

func (f osFile) Stat() (FileInfo, error) { return f.File.Stat() }

func wrapOS(f *os.File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Create(name string) (File, error) {
	return wrapOS(os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644))
}
func (osFS) Open(name string) (File, error) { return wrapOS(os.Open(name)) }
func (osFS) OpenReadWrite(name string) (File, error) {
	return wrapOS(os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644))
}
func (osFS) OpenForAppend(name string) (File, error) {
	return wrapOS(os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644))
}
func (osFS) OpenDir(name string) (File, error) { return wrapOS(os.Open(name)) }
func (osFS) Remove(name string) error          { return os.Remove(name) }
func (osFS) RemoveAll(name string) error       { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error {
	return os.Rename(oldname, newname)
}
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}
func (osFS) Stat(name string) (FileInfo, error) { return os.Stat(name) }

// SyncDir opens dir and syncs it, making creations, removals and renames of its
// entries durable.
func SyncDir(fsys FS, dir string) error {
	d, err := fsys.OpenDir(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	if serr != nil {
		return serr
	}
	return cerr
}

// WriteFileAtomic durably replaces name with data: it writes name+".tmp", syncs
// it, renames it over name and syncs the directory. After a crash, name holds
// either its old content or data, never a mix.
func WriteFileAtomic(fsys FS, name string, data []byte) error {
	if err := WriteFileReplace(fsys, name, data); err != nil {
		return err
	}
	return SyncDir(fsys, filepath.Dir(name))
}

// WriteFileReplace is WriteFileAtomic without the directory sync: the file
// is found whole or not at all (or as it was before), but a crash may lose
// the rename. For files that can be rebuilt, such as indexes.
func WriteFileReplace(fsys FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		fsys.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		fsys.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		fsys.Remove(tmp)
		return err
	}
	if err := fsys.Rename(tmp, name); err != nil {
		fsys.Remove(tmp)
		return err
	}
	return nil
}

// ReadFile reads a whole file. It refuses files larger than limit bytes.
func ReadFile(fsys FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, errors.New("vfs: " + name + " is larger than the caller's limit")
	}
	buf := make([]byte, st.Size())
	n, err := f.ReadAt(buf, 0)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(buf)) {
		return nil, err
	}
	return buf, nil
}
