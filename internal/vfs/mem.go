package vfs

import (
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"
)

// MemFS is an in-memory file system that remembers what was synced, so that
// CrashClone can show what a machine would find after losing power.
//
// Its durability model: a file's bytes survive a crash once the file is synced;
// a file's creation, removal or rename survives once its directory is synced.
// Directories made by MkdirAll are durable at once (a simplification: the
// callers we test create their directory before they depend on it).
//
// Paths are slash-separated; relative paths are taken from the root.
type MemFS struct {
	mu   sync.Mutex
	root *memNode
}

type memNode struct {
	isDir   bool
	modTime time.Time

	// Files.
	data   []byte
	synced []byte // the data at the last Sync; may share data's array
	shared bool   // data and synced share a backing array
	// diverged is set when data no longer starts with synced (an overwrite or a
	// truncation below the synced length), so a crash cannot keep unsynced bytes.
	diverged bool

	// Directories.
	children       map[string]*memNode
	syncedChildren map[string]*memNode
}

func newDir() *memNode {
	return &memNode{isDir: true, children: map[string]*memNode{}, syncedChildren: map[string]*memNode{}, modTime: time.Now()}
}

// NewMem returns an empty in-memory file system.
func NewMem() *MemFS { return &MemFS{root: newDir()} }

var _ FS = (*MemFS)(nil)

func split(name string) []string {
	name = path.Clean("/" + name)
	if name == "/" {
		return nil
	}
	return strings.Split(name[1:], "/")
}

func pathErr(op, name string, err error) error { return &fs.PathError{Op: op, Path: name, Err: err} }

// lookupLocked returns the node at name, or nil.
func (m *MemFS) lookupLocked(name string) *memNode {
	n := m.root
	for _, p := range split(name) {
		if !n.isDir {
			return nil
		}
		n = n.children[p]
		if n == nil {
			return nil
		}
	}
	return n
}

// parentLocked returns the directory holding name and name's base.
func (m *MemFS) parentLocked(op, name string) (*memNode, string, error) {
	parts := split(name)
	if len(parts) == 0 {
		return nil, "", pathErr(op, name, fs.ErrInvalid)
	}
	dir := m.root
	for _, p := range parts[:len(parts)-1] {
		next := dir.children[p]
		if next == nil {
			return nil, "", pathErr(op, name, fs.ErrNotExist)
		}
		if !next.isDir {
			return nil, "", pathErr(op, name, errors.New("not a directory"))
		}
		dir = next
	}
	return dir, parts[len(parts)-1], nil
}

const (
	modeRead = 1 << iota
	modeWrite
	modeAppend
)

func (m *MemFS) open(op, name string, create, trunc bool, mode int) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parentLocked(op, name)
	if err != nil {
		return nil, err
	}
	n := dir.children[base]
	if n == nil {
		if !create {
			return nil, pathErr(op, name, fs.ErrNotExist)
		}
		n = &memNode{modTime: time.Now()}
		dir.children[base] = n
	} else if n.isDir {
		return nil, pathErr(op, name, errors.New("is a directory"))
	}
	if trunc {
		n.truncateLocked(0)
	}
	return &memFile{fs: m, node: n, name: name, mode: mode}, nil
}

// Create implements FS.
func (m *MemFS) Create(name string) (File, error) {
	return m.open("create", name, true, true, modeRead|modeWrite)
}

// Open implements FS.
func (m *MemFS) Open(name string) (File, error) {
	return m.open("open", name, false, false, modeRead)
}

// OpenReadWrite implements FS.
func (m *MemFS) OpenReadWrite(name string) (File, error) {
	return m.open("open", name, true, false, modeRead|modeWrite)
}

// OpenForAppend implements FS.
func (m *MemFS) OpenForAppend(name string) (File, error) {
	return m.open("open", name, true, false, modeRead|modeWrite|modeAppend)
}

// OpenDir implements FS.
func (m *MemFS) OpenDir(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lookupLocked(name)
	if n == nil {
		return nil, pathErr("open", name, fs.ErrNotExist)
	}
	if !n.isDir {
		return nil, pathErr("open", name, errors.New("not a directory"))
	}
	return &memFile{fs: m, node: n, name: name, mode: modeRead}, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parentLocked("remove", name)
	if err != nil {
		return err
	}
	n := dir.children[base]
	if n == nil {
		return pathErr("remove", name, fs.ErrNotExist)
	}
	if n.isDir && len(n.children) > 0 {
		return pathErr("remove", name, errors.New("directory not empty"))
	}
	delete(dir.children, base)
	return nil
}

// RemoveAll implements FS.
func (m *MemFS) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parentLocked("removeall", name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	delete(dir.children, base)
	return nil
}

// Rename implements FS.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	odir, obase, err := m.parentLocked("rename", oldname)
	if err != nil {
		return err
	}
	n := odir.children[obase]
	if n == nil {
		return pathErr("rename", oldname, fs.ErrNotExist)
	}
	ndir, nbase, err := m.parentLocked("rename", newname)
	if err != nil {
		return err
	}
	if old := ndir.children[nbase]; old != nil && old.isDir {
		return pathErr("rename", newname, errors.New("is a directory"))
	}
	delete(odir.children, obase)
	ndir.children[nbase] = n
	return nil
}

// MkdirAll implements FS.
func (m *MemFS) MkdirAll(dir string, _ os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.root
	for _, p := range split(dir) {
		next := n.children[p]
		if next == nil {
			next = newDir()
			n.children[p] = next
			n.syncedChildren[p] = next // see the type's comment
		} else if !next.isDir {
			return pathErr("mkdir", dir, errors.New("not a directory"))
		}
		n = next
	}
	return nil
}

// List implements FS.
func (m *MemFS) List(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lookupLocked(dir)
	if n == nil {
		return nil, pathErr("readdir", dir, fs.ErrNotExist)
	}
	if !n.isDir {
		return nil, pathErr("readdir", dir, errors.New("not a directory"))
	}
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// Stat implements FS.
func (m *MemFS) Stat(name string) (FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lookupLocked(name)
	if n == nil {
		return nil, pathErr("stat", name, fs.ErrNotExist)
	}
	return n.infoLocked(path.Base(path.Clean("/" + name))), nil
}

// CrashOptions tune CrashCloneWith.
type CrashOptions struct {
	// Rand, if set, is used to keep a random prefix of each file's unsynced
	// appended bytes (a torn write), as a disk may have written them before
	// power was lost. With Rand nil every unsynced byte is dropped.
	Rand *rand.Rand
}

// CrashClone returns a new file system holding only what was durable: each
// file's synced bytes, and each directory's entries as of its last sync.
func (m *MemFS) CrashClone() *MemFS { return m.CrashCloneWith(CrashOptions{}) }

// CrashCloneWith is CrashClone with options.
func (m *MemFS) CrashCloneWith(opts CrashOptions) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*memNode]*memNode{}
	var clone func(n *memNode) *memNode
	clone = func(n *memNode) *memNode {
		if c, ok := seen[n]; ok {
			return c
		}
		c := &memNode{isDir: n.isDir, modTime: n.modTime}
		seen[n] = c
		if n.isDir {
			c.children = make(map[string]*memNode, len(n.syncedChildren))
			c.syncedChildren = make(map[string]*memNode, len(n.syncedChildren))
			for name, child := range n.syncedChildren {
				cc := clone(child)
				c.children[name] = cc
				c.syncedChildren[name] = cc
			}
			return c
		}
		keep := len(n.synced)
		if opts.Rand != nil && !n.diverged && len(n.data) > keep {
			keep += opts.Rand.IntN(len(n.data) - keep + 1)
		}
		src := n.synced
		if keep > len(n.synced) {
			src = n.data
		}
		c.data = append([]byte(nil), src[:keep]...)
		c.synced = c.data[:len(c.data):len(c.data)]
		c.shared = true
		return c
	}
	return &MemFS{root: clone(m.root)}
}

func (n *memNode) infoLocked(name string) FileInfo {
	mode := fs.FileMode(0o644)
	if n.isDir {
		mode = fs.ModeDir | 0o755
	}
	return &memInfo{name: name, size: int64(len(n.data)), mode: mode, modTime: n.modTime}
}

// ownLocked makes data private before bytes at or after off are changed, if
// they would otherwise change the synced snapshot.
func (n *memNode) ownLocked(off int64) {
	if n.shared && off < int64(len(n.synced)) {
		n.data = append(make([]byte, 0, cap(n.data)), n.data...)
		n.shared = false
	}
}

func (n *memNode) truncateLocked(size int64) {
	if size < int64(len(n.synced)) {
		n.diverged = true
	}
	if size <= int64(len(n.data)) {
		n.data = n.data[:size]
	} else {
		n.ownLocked(int64(len(n.data)))
		n.data = append(n.data, make([]byte, size-int64(len(n.data)))...)
	}
	n.modTime = time.Now()
}

func (n *memNode) writeAtLocked(p []byte, off int64) {
	if off < int64(len(n.synced)) {
		n.diverged = true
	}
	n.ownLocked(off)
	end := off + int64(len(p))
	if off > int64(len(n.data)) {
		n.data = append(n.data, make([]byte, off-int64(len(n.data)))...)
	}
	if end <= int64(len(n.data)) {
		copy(n.data[off:], p)
	} else {
		n.data = append(n.data[:off], p...)
	}
	n.modTime = time.Now()
}

type memFile struct {
	fs     *MemFS
	node   *memNode
	name   string
	mode   int
	pos    int64
	closed bool
}

var errClosed = errors.New("vfs: file already closed")

func (f *memFile) Read(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errClosed
	}
	if f.node.isDir {
		return 0, pathErr("read", f.name, errors.New("is a directory"))
	}
	if f.pos >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[f.pos:])
	f.pos += int64(n)
	return n, nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errClosed
	}
	if off < 0 {
		return 0, pathErr("readat", f.name, errors.New("negative offset"))
	}
	if f.node.isDir {
		return 0, pathErr("read", f.name, errors.New("is a directory"))
	}
	if off >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errClosed
	}
	if f.mode&modeWrite == 0 {
		return 0, pathErr("write", f.name, fs.ErrPermission)
	}
	if f.mode&modeAppend != 0 {
		f.pos = int64(len(f.node.data))
	}
	f.node.writeAtLocked(p, f.pos)
	f.pos += int64(len(p))
	return len(p), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errClosed
	}
	f.closed = true
	return nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errClosed
	}
	n := f.node
	if n.isDir {
		n.syncedChildren = make(map[string]*memNode, len(n.children))
		for k, v := range n.children {
			n.syncedChildren[k] = v
		}
		return nil
	}
	n.synced = n.data[:len(n.data):len(n.data)]
	n.shared = true
	n.diverged = false
	return nil
}

func (f *memFile) Stat() (FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return nil, errClosed
	}
	return f.node.infoLocked(path.Base(path.Clean("/" + f.name))), nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errClosed
	}
	if f.mode&modeWrite == 0 || f.node.isDir {
		return pathErr("truncate", f.name, fs.ErrPermission)
	}
	if size < 0 {
		return pathErr("truncate", f.name, fs.ErrInvalid)
	}
	f.node.truncateLocked(size)
	return nil
}

func (f *memFile) Fd() uintptr { return InvalidFd }

type memInfo struct {
	name    string
	size    int64
	mode    fs.FileMode
	modTime time.Time
}

func (i *memInfo) Name() string       { return i.name }
func (i *memInfo) Size() int64        { return i.size }
func (i *memInfo) Mode() fs.FileMode  { return i.mode }
func (i *memInfo) ModTime() time.Time { return i.modTime }
func (i *memInfo) IsDir() bool        { return i.mode.IsDir() }
func (i *memInfo) Sys() any           { return nil }
