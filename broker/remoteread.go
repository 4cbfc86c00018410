package broker

import (
	"context"
	"errors"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/reqtime"
	"github.com/sediment-io/sediment/tiering"
)

// Fetch's reads from the bucket (KIP-405), with KIP-1018's bounded wait.
//
// A read below the local log start runs on its own goroutine, bounded by
// RemoteFetchTimeout, and the Fetch waits for it only until RemoteFetchMaxWait
// after it began reading: the reads of one request run together (each is
// started before the request's partitions are answered in order), and a read
// the Fetch stopped waiting for goes on, its chunks landing in the cache for
// the client's next fetch, while the partition is answered without records
// and without error (Kafka's DelayedRemoteFetch on expiry). Before, each read
// ran in the request's partition loop for up to 10 s: a slow or hanging
// bucket held the fetch's local partitions, and every partition after it.
//
// At most one read a partition is in flight: a fetch that finds one (another
// consumer's, or its own previous fetch's that it stopped waiting for) waits
// for it, then reads for itself from the cache it filled; when that read
// failed at the same offset, it is answered with the read's error.

// remoteOut is what a background remote read produced.
type remoteOut struct {
	res     *tiering.ReadResult
	aborted []hotlog.AbortedTxn // read_committed: the aborted transactions in res
	start   int64               // the log start across tiers, -1 if unknown
	err     error
}

// remoteRead is one partition's background read from the bucket.
type remoteRead struct {
	p                       *partition
	offset, maxBytes, limit int64
	readCommitted           bool
	done                    chan struct{} // closed once out is set

	mu        sync.Mutex
	out       remoteOut
	finished  bool
	abandoned bool // its owner stopped waiting: out.res is released
}

// await waits for rr's outcome until wait is done. ok is false when the read
// is still going: rr is then abandoned (its result released once done).
// Only the fetch that started rr (its owner) calls await or abandon, once.
func (rr *remoteRead) await(wait context.Context) (out remoteOut, ok bool) {
	select {
	case <-rr.done:
	case <-wait.Done():
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if !rr.finished {
		rr.abandoned = true
		return remoteOut{}, false
	}
	return rr.out, true
}

// abandon gives up rr's result, now or when it is done.
func (rr *remoteRead) abandon() {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.abandoned = true
	if rr.finished && rr.out.res != nil {
		rr.out.res.Release()
		rr.out.res = nil
	}
}

// startRead starts the background read of p at offset, unless one of the
// partition is in flight: that one is returned, owner false.
func (g *tierGlue) startRead(tp *tiering.Partition, p *partition, offset, maxBytes, limit int64, readCommitted bool) (rr *remoteRead, owner bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx.Err() != nil {
		return nil, false, tiering.ErrClosed
	}
	if rr := g.mu.reads[tp]; rr != nil {
		return rr, false, nil
	}
	if g.mu.reads == nil {
		g.mu.reads = map[*tiering.Partition]*remoteRead{}
	}
	rr = &remoteRead{p: p, offset: offset, maxBytes: max(maxBytes, 1), limit: limit, readCommitted: readCommitted, done: make(chan struct{})}
	g.mu.reads[tp] = rr
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.runRead(tp, rr)
	}()
	return rr, true, nil
}

// runRead reads rr from the bucket, with what the answer needs beside the
// records (the aborted transactions, the log start), then hands it over.
func (g *tierGlue) runRead(tp *tiering.Partition, rr *remoteRead) {
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.RemoteFetchTimeout)
	defer cancel()
	out := remoteOut{start: -1}
	out.res, out.err = tp.Read(ctx, rr.offset, rr.maxBytes, rr.limit)
	if out.err == nil && out.res.Size > 0 {
		if rr.readCommitted {
			if out.aborted, out.err = remoteAborted(ctx, tp, rr.p, rr.offset, out.res.NextOffset); out.err != nil {
				out.res.Release()
				out.res = nil
			}
		}
		if start, err := tp.EarliestOffset(ctx); err == nil {
			out.start = start
		}
	}
	if out.err != nil && g.ctx.Err() == nil && !errors.Is(out.err, tiering.ErrOffsetOutOfRange) && !errors.Is(out.err, tiering.ErrClosed) {
		g.logRemoteReadError(rr.p, rr.offset, out.err)
	}
	g.mu.Lock()
	if g.mu.reads[tp] == rr {
		delete(g.mu.reads, tp)
	}
	g.mu.Unlock()
	rr.mu.Lock()
	if rr.abandoned && out.res != nil {
		out.res.Release()
		out.res = nil
	}
	rr.out, rr.finished = out, true
	rr.mu.Unlock()
	close(rr.done)
}

// startRemoteReads starts the reads from the bucket that a fetch of parts
// needs (partitions fetched below their local log start), so that they run
// together, as far as max_bytes goes: readRemote then waits for each.
func (b *Broker) startRemoteReads(parts []*fetchPart, maxBytes int64, readCommitted bool) {
	g := b.tier()
	if g == nil {
		return
	}
	var planned int64
	for _, fp := range parts {
		if planned >= maxBytes && planned > 0 {
			return
		}
		if fp.replica || fp.offset >= fp.p.log.LogStartOffset() || (fp.led && !fp.p.isLeader(-1)) {
			continue
		}
		tp := g.tierPartition(fp.p)
		if tp == nil {
			continue
		}
		limit := fp.p.log.HighWatermark()
		if readCommitted {
			limit = fp.p.lastStableOffset()
		}
		budget := max(min(int64(fp.maxBytes), maxBytes-planned), 1)
		rr, owner, err := g.startRead(tp, fp.p, fp.offset, budget, limit, readCommitted)
		if err != nil {
			return
		}
		if owner {
			fp.rr = rr
		}
		planned += budget
	}
}

// abandonRemoteReads gives up the reads startRemoteReads started that the
// fetch did not wait for (a partition answered otherwise).
func abandonRemoteReads(parts []*fetchPart) {
	for _, fp := range parts {
		if fp.rr != nil {
			fp.rr.abandon()
			fp.rr = nil
		}
	}
}

// readRemote serves a fetch below the local log start from the bucket, up
// to limit (the high watermark, or the LSO for read_committed, which also
// gets the aborted transactions of what it reads), waiting until wait is
// done. It returns true when fp.remote holds the data, rp.ErrorCode a
// retriable error, or fp.remotePending is set (the read goes on: the
// partition is answered without records). Otherwise the bucket holds no
// batch at or after fp.offset (it does not hold the offset, or compaction
// emptied the remote log's tail) and next is the offset to go on from in
// the local log (fp.offset, or the remote end).
func (b *Broker) readRemote(ctx, wait context.Context, fp *fetchPart, rp *kmsg.FetchResponseTopicPartition, maxBytes, limit int64, readCommitted bool) (done bool, next int64) {
	rr, owner := fp.rr, fp.rr != nil
	fp.rr = nil
	g := b.tier()
	var tp *tiering.Partition
	if g != nil {
		tp = g.tierPartition(fp.p)
	}
	if tp == nil {
		if rr != nil {
			rr.abandon()
		}
		return false, fp.offset
	}
	// The bucket's latency is not this request's work (Kafka reads remote
	// data on its own thread pool, the request parked meanwhile).
	defer reqtime.Wait(ctx)()
	for !owner {
		if rr == nil {
			var err error
			if rr, owner, err = g.startRead(tp, fp.p, fp.offset, maxBytes, limit, readCommitted); err != nil {
				rp.ErrorCode = errCode(err)
				return true, 0
			}
			if owner {
				break
			}
		}
		// Another fetch's read of the partition is in flight: once it
		// is done its chunks are cached, and this fetch reads its own.
		select {
		case <-rr.done:
		case <-wait.Done():
			g.fetchExpired.Add(1)
			fp.remotePending = true
			return true, 0
		}
		if err := rr.out.err; err != nil && rr.offset == fp.offset && !errors.Is(err, tiering.ErrOffsetOutOfRange) {
			rp.ErrorCode = errCode(err)
			return true, 0
		}
		rr = nil
	}
	out, ok := rr.await(wait)
	if !ok {
		g.fetchExpired.Add(1)
		fp.remotePending = true
		return true, 0
	}
	if errors.Is(out.err, tiering.ErrOffsetOutOfRange) {
		return false, fp.offset
	}
	if out.err != nil {
		rp.ErrorCode = errCode(out.err)
		return true, 0
	}
	res := out.res
	if res.Size == 0 && res.NextOffset > fp.offset {
		// A gap at the remote log's end (compaction): the records
		// go on at res.NextOffset, in the local log.
		res.Release()
		return false, res.NextOffset
	}
	if readCommitted {
		rp.AbortedTransactions = fetchAborted(out.aborted)
	}
	fp.remote = res
	if out.start >= 0 {
		rp.LogStartOffset = out.start
	}
	return true, 0
}
