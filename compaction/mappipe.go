package compaction

import (
	"sync/atomic"

	"github.com/sediment-io/sediment/hotlog"
)

// The map phase on two cores. Reading the log, checking CRCs, decompressing,
// walking the records and hashing their keys (the producer, the goroutine
// that calls buildMap) takes about as long as putting the keys into a key
// map far larger than the CPU's caches (the consumer, a goroutine that
// buildMap starts and waits for). mapPipeline runs them side by side: the
// producer fills chunks with the keys of whole batches, in log order, and
// hands them over; the consumer applies them in that order with exactly the
// serial path's steps (roomFor, then putKeys' marks and puts), so the map, its bitmaps and the
// mapped end are the same as mapBatch's, batch for batch.
//
// Memory: mapPipeChunks chunks of about mapPipeChunkKeys keys (32 bytes
// each; a chunk is handed over once it holds that many, so it may exceed it
// by one batch's keys), 256 KiB in all, besides the key map.
//
// The consumer decides where the map is full (it alone knows the map's
// entries): from that batch on it ignores what it is given and raises
// stopped, which the producer polls to stop reading. The producer may thus
// read and parse up to mapPipeChunks chunks past the full point (counted in
// Stats.BytesRead); what it found there (a corrupt batch, a cancelled
// context) is not reported, as the serial path would not have read it.
const (
	mapPipeChunks    = 4
	mapPipeChunkKeys = 2048
	mapPipeChunkOps  = 512 // batches a chunk (some carry no keys)
)

// mapOp is one batch of a chunk: a data batch to put (its keys are the
// next keys of the chunk), or a batch passed over (control, aborted) that
// only moves the end.
type mapOp struct {
	first, last int64
	records     int32
	keys        int32
	whole       bool
	put         bool
}

type mapChunk struct {
	ops  []mapOp
	keys []keyOffset
}

type mapPipeline struct {
	c       *Cleaner
	full    chan *mapChunk // to the consumer
	free    chan *mapChunk // back to the producer
	done    chan struct{}  // closed when the consumer returns
	cur     *mapChunk
	stopped atomic.Bool // the consumer stopped (map full, or an error)
	homes   []uint32    // the consumer's: home buckets of a chunk's keys

	// Set by the consumer, read after done.
	end int64
	err error
}

// startMapPipeline starts the consumer; end is the mapped end so far (the
// start of the range). The caller must call finish.
func (c *Cleaner) startMapPipeline(end int64) *mapPipeline {
	p := &mapPipeline{c: c, full: make(chan *mapChunk, mapPipeChunks), free: make(chan *mapChunk, mapPipeChunks),
		done: make(chan struct{}), end: end}
	for range mapPipeChunks {
		p.free <- &mapChunk{ops: make([]mapOp, 0, mapPipeChunkOps), keys: make([]keyOffset, 0, mapPipeChunkKeys+128)}
	}
	p.cur = <-p.free
	go p.consume()
	return p
}

// consume applies the chunks in order until full is closed.
func (p *mapPipeline) consume() {
	defer close(p.done)
	for ch := range p.full {
		if !p.stopped.Load() {
			p.apply(ch)
		}
		ch.ops, ch.keys = ch.ops[:0], ch.keys[:0]
		p.free <- ch // never blocks: there are mapPipeChunks chunks
	}
}

// prefetchAhead is how many keys ahead of the put the consumer prefetches
// their buckets: a rolling window over the whole chunk, so that about that
// many misses are always in flight (a puts-only microbenchmark at 1 M keys:
// 53-81 ns a put against 81-87 with a batch's 100 buckets prefetched before
// its puts, 100-119 with plain loads; 256 and 512 ahead were no better).
const prefetchAhead = 128

// apply is mapBatch's roomFor and putKeys for every batch of a chunk, with
// the buckets prefetched prefetchAhead keys ahead across batches.
func (p *mapPipeline) apply(ch *mapChunk) {
	c, om := p.c, p.c.omap
	homes := om.homes(p.homes[:0], ch.keys)
	p.homes = homes
	c.prefetchSink += om.prefetch(homes[:min(prefetchAhead, len(homes))])
	k := 0
	for _, op := range ch.ops {
		if !op.put {
			p.end = op.last + 1
			c.mapPrev = p.end
			continue
		}
		ok, err := c.roomFor(op.first, op.last, op.records)
		if !ok {
			p.err = err
			p.stopped.Store(true)
			return
		}
		om.markBatch(c.mapPrev, op.first, op.last, op.whole)
		c.mapPrev = op.last + 1
		for end := k + int(op.keys); k < end; k++ {
			if k%16 == 0 && k+prefetchAhead < len(homes) {
				c.prefetchSink += om.prefetch(homes[k+prefetchAhead : min(k+prefetchAhead+16, len(homes))])
			}
			key := &ch.keys[k]
			old, _ := om.putHome(key.digest, int(homes[k]), key.offset)
			om.markRecord(key.offset, old, key.tombstone)
		}
		p.end = op.last + 1
	}
}

// send hands the current chunk over once it is full enough (or always).
func (p *mapPipeline) send(always bool) {
	if len(p.cur.ops) == 0 || !always && len(p.cur.keys) < mapPipeChunkKeys && len(p.cur.ops) < mapPipeChunkOps {
		return
	}
	p.full <- p.cur
	p.cur = <-p.free
}

// skip notes a batch the map passes over ([..., last]); more is false once
// the consumer stopped.
func (p *mapPipeline) skip(last int64) (more bool) {
	p.cur.ops = append(p.cur.ops, mapOp{last: last})
	p.send(false)
	return !p.stopped.Load()
}

// batch parses a data batch's keys into the current chunk; more is false
// once the consumer stopped.
func (p *mapPipeline) batch(h *hotlog.BatchHeader, batch []byte, whole bool) (more bool, err error) {
	if p.stopped.Load() {
		return false, nil
	}
	// The keys go to a buffer of the producer's own first (a batch's, in
	// its L1 cache), then into the chunk in one copy. Appended to the chunk
	// one by one as the walk finds them, every store went to a line the
	// consumer had read last (the chunks go round), each a miss to the
	// other core that filled the store buffer and stalled the walk: the
	// walk and its callback took 2-3 times their serial CPU time.
	c := p.c
	if c.keys, err = c.batchKeys(h, batch, c.keys[:0]); err != nil {
		return false, err
	}
	p.cur.keys = append(p.cur.keys, c.keys...)
	p.cur.ops = append(p.cur.ops, mapOp{first: h.BaseOffset, last: h.LastOffset(), records: h.NumRecords,
		keys: int32(len(c.keys)), whole: whole || h.NumRecords == 0, put: true})
	p.send(false)
	return true, nil
}

// finish hands over what is left, waits for the consumer and returns the
// mapped end. scanErr is the producer's error: it stands unless the consumer
// stopped before the batch that caused it.
func (p *mapPipeline) finish(scanErr error) (int64, error) {
	p.send(true) // the batches before an error count: the map may be full before it
	close(p.full)
	<-p.done
	if p.stopped.Load() {
		return p.end, p.err
	}
	return p.end, scanErr
}
