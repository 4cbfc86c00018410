package tiering

import (
	"container/list"
	"context"
	"sync"

	"github.com/sediment-io/sediment/objectstore"
)

// readerCache keeps objectstore Readers of recently read .log objects open,
// so that each chunk costs one ranged GET and not also a HEAD (ReadObject).
type readerCache struct {
	store objectstore.Store
	max   int // idle readers kept

	mu      sync.Mutex
	entries map[string]*openReader
	idle    *list.List // of *openReader with refs == 0, front: most recent
}

type openReader struct {
	key  string
	r    objectstore.Reader
	size int64
	refs int
	elem *list.Element // in idle
	dead bool          // dropped: close when the last user is done
}

func newReaderCache(store objectstore.Store, max int) *readerCache {
	return &readerCache{store: store, max: max, entries: map[string]*openReader{}, idle: list.New()}
}

// get returns an open reader of key with a reference; put gives it back.
func (c *readerCache) get(ctx context.Context, key string) (*openReader, error) {
	c.mu.Lock()
	if o, ok := c.entries[key]; ok {
		o.refs++
		if o.elem != nil {
			c.idle.Remove(o.elem)
			o.elem = nil
		}
		c.mu.Unlock()
		return o, nil
	}
	c.mu.Unlock()
	r, size, err := c.store.ReadObject(ctx, key)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o, ok := c.entries[key]; ok { // opened meanwhile by another reader
		r.Close()
		o.refs++
		if o.elem != nil {
			c.idle.Remove(o.elem)
			o.elem = nil
		}
		return o, nil
	}
	o := &openReader{key: key, r: r, size: size, refs: 1}
	c.entries[key] = o
	return o, nil
}

// put releases a reference; with bad the reader is dropped (the object is
// gone or answered wrongly).
func (c *readerCache) put(o *openReader, bad bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o.refs--
	if bad && !o.dead {
		o.dead = true
		if c.entries[o.key] == o {
			delete(c.entries, o.key)
		}
	}
	if o.refs > 0 {
		return
	}
	if o.dead {
		o.r.Close()
		return
	}
	o.elem = c.idle.PushFront(o)
	for c.idle.Len() > c.max {
		old := c.idle.Remove(c.idle.Back()).(*openReader)
		old.elem = nil
		old.dead = true
		delete(c.entries, old.key)
		old.r.Close()
	}
}

// close closes every idle reader.
func (c *readerCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.idle.Front(); e != nil; e = e.Next() {
		o := e.Value.(*openReader)
		o.dead = true
		delete(c.entries, o.key)
		o.r.Close()
	}
	c.idle.Init()
}
