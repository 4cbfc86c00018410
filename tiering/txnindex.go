package tiering

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/objectstore"
)

// AbortedTxns returns the aborted transactions that a read_committed read
// of [from, to) below the local log start must be told about, from the
// .txnindex objects of the remote segments from the one holding from
// onwards (cached in memory), with Kafka's early stop. complete reports
// that no later segment (remote or local) can add one; otherwise the caller
// goes on with the local log's index from the remote end. Errors wrap
// ErrUnavailable.
func (p *Partition) AbortedTxns(ctx context.Context, from, to int64) (list []hotlog.AbortedTxn, complete bool, err error) {
	if from >= to {
		return nil, true, nil
	}
	st, err := p.current(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	m := st.manifest
	i := m.find(from)
	if i < 0 {
		return nil, false, nil
	}
	for ; i < len(m.Segments); i++ {
		seg := &m.Segments[i]
		if seg.TxnIndexSize == 0 {
			continue
		}
		entries, err := p.m.txnIndex(ctx, seg)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %s: transaction index of %s: %v", ErrUnavailable, p.tp, seg.Stem, err)
		}
		if list, complete = hotlog.CollectAborted(entries, from, to, list); complete {
			return list, true, nil
		}
	}
	return list, false, nil
}

// txnIndex returns seg's decoded transaction index, cached.
func (m *Manager) txnIndex(ctx context.Context, seg *SegmentMeta) ([]hotlog.AbortedTxn, error) {
	if x, ok := m.txnIndexes.get(seg.Stem); ok {
		return x, nil
	}
	b, err := objectstore.ReadAll(ctx, m.store, seg.Stem+SuffixTxnIndex, seg.TxnIndexSize)
	if err != nil {
		return nil, err
	}
	entries, err := hotlog.DecodeTxnIndex(b)
	if err == nil && int64(len(b)) != seg.TxnIndexSize {
		err = fmt.Errorf("%d bytes, manifest says %d", len(b), seg.TxnIndexSize)
	}
	if err == nil && len(entries) > 0 && (entries[0].LastOffset < seg.BaseOffset || entries[len(entries)-1].LastOffset >= seg.EndOffset) {
		err = fmt.Errorf("markers outside [%d, %d)", seg.BaseOffset, seg.EndOffset)
	}
	if err != nil {
		// Unlike a bad offset index, a bad transaction index cannot be
		// worked around: a reader would see aborted records.
		m.metrics.CorruptReads.Add(1)
		return nil, fmt.Errorf("%w: %v", ErrCorruptObject, err)
	}
	m.txnIndexes.put(seg.Stem, entries)
	return entries, nil
}

// txnIndexCache is a small LRU of decoded transaction indexes (segments
// without aborts have none and cost nothing).
type txnIndexCache struct {
	mu      sync.Mutex
	max     int
	lru     *list.List
	entries map[string]*list.Element
}

type txnIndexCacheEntry struct {
	stem    string
	entries []hotlog.AbortedTxn
}

func (c *txnIndexCache) get(stem string) ([]hotlog.AbortedTxn, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[stem]; ok {
		c.lru.MoveToFront(e)
		return e.Value.(*txnIndexCacheEntry).entries, true
	}
	return nil, false
}

func (c *txnIndexCache) put(stem string, entries []hotlog.AbortedTxn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries, c.lru = map[string]*list.Element{}, list.New()
	}
	if _, ok := c.entries[stem]; ok {
		return
	}
	c.entries[stem] = c.lru.PushFront(&txnIndexCacheEntry{stem, entries})
	for c.lru.Len() > max(c.max, 1) {
		e := c.lru.Back()
		c.lru.Remove(e)
		delete(c.entries, e.Value.(*txnIndexCacheEntry).stem)
	}
}
