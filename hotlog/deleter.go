package hotlog

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/sediment-io/sediment/internal/vfs"
)

// Deleting segment files (Kafka's file.delete.delay.ms).
//
// A segment leaves the log (DeleteBefore, TruncateTo, TruncateFullyAndStartAt,
// a cleaner's ReplaceSegments) in two steps, as in Kafka:
//
//  1. Under the append lock its files are renamed *.deleted and the
//     directory is synced. From here a crash loses them: Open removes every
//     *.deleted file before it lists the segments.
//  2. The files are removed once Config.FileDeleteDelay has passed since the
//     rename and the last reader (a fetch, sendfile, tiering's upload) has
//     released the segment, whichever comes later. A delay of 0 removes them
//     at the last release, on the goroutine that makes it (the deleting
//     goroutine itself if no reader holds the segment), as before the delay
//     existed. With a delay, the log's deleter goroutine removes them, never
//     the cleaner's, the retention worker's or a reader's goroutine: on ext4
//     mounted with discard, unlinking a 1 GiB segment takes tens of
//     milliseconds.
//
// The delay is measured on the monotonic clock (time.Now, time.Timer), so that
// testing/synctest drives it. The deleter goroutine runs only while deletions
// are pending, and exits when none is left.
//
// Close stops the deleter and waits for it: a segment whose files it is
// removing is finished, nothing else. Deletions still pending at Close, and the
// files of segments whose readers release them after Close, are left on disk
// for the next Open to remove (or go with the partition directory when the
// broker removes it): once Close has returned the log removes no file, so a
// caller may remove the directory at once.
//
// Names: a segment's files become <base><suffix>.deleted, unless an earlier
// segment with the same base still has its files under that name (a cleaned
// segment replaced again within the delay; a truncation back to a base), in
// which case they become <base><suffix>.<n>.deleted: a removal never takes
// another segment's files.

// deleter removes the files of a log's deleted segments. Its lock is taken
// after the append lock, never before; it never takes the append lock.
type deleter struct {
	fs     vfs.FS
	logger *slog.Logger

	mu struct {
		sync.Mutex
		// queue holds released segments waiting for their deleteAt, in
		// release order.
		queue []*segment
		// plain are the bases whose files carry the plain .deleted suffix
		// and are not removed yet.
		plain   map[int64]bool
		seq     int64 // numbers the suffixes of name clashes
		running bool  // the goroutine runs (wg counts it)
		closed  bool
	}
	kick chan struct{} // capacity 1: the queue changed
	stop chan struct{} // closed by close
	// wg counts the goroutine and the removals running on releasing
	// goroutines (delay 0); Add only under mu while not closed.
	wg sync.WaitGroup
}

func newDeleter(fs vfs.FS, logger *slog.Logger) *deleter {
	d := &deleter{fs: fs, logger: logger, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	d.mu.plain = map[int64]bool{}
	return d
}

// retireLocked prepares seg, about to be renamed away under the append lock,
// for deletion: the suffix its files take and the time from which they may be
// removed (zero: at the last release). It must be called before the renames;
// seg.renamed and seg.deleted are stored after them.
func (l *Log) retireLocked(seg *segment) {
	seg.del = l.del
	seg.delSuffix = l.del.suffixFor(seg.base)
	if d := l.config().FileDeleteDelay; d > 0 {
		seg.deleteAt = time.Now().Add(d)
	}
}

// suffixFor returns the suffix for the files of a segment at base that are
// renamed away: .deleted, or .<n>.deleted while another segment's files at the
// same base are still there under .deleted.
func (d *deleter) suffixFor(base int64) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.mu.plain[base] {
		d.mu.plain[base] = true
		return deletedSuffix
	}
	d.mu.seq++
	return fmt.Sprintf(".%d%s", d.mu.seq, deletedSuffix)
}

// released is called once the last reference to the deleted segment s is
// dropped (its file closed).
func (d *deleter) released(s *segment) {
	d.mu.Lock()
	if d.mu.closed {
		d.mu.Unlock()
		return // left for the next Open
	}
	if s.deleteAt.IsZero() {
		d.wg.Add(1)
		d.mu.Unlock()
		defer d.wg.Done()
		d.remove(s)
		return
	}
	d.mu.queue = append(d.mu.queue, s)
	if !d.mu.running {
		d.mu.running = true
		d.wg.Add(1)
		go pprof.Do(context.Background(), pprof.Labels("hotlog", "deleter"), func(context.Context) { d.run() })
	}
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default: // a kick is pending
	}
}

// run removes the queued segments as they come due, and returns when the
// queue is empty or the deleter closes.
func (d *deleter) run() {
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		d.mu.Lock()
		if d.mu.closed {
			d.mu.Unlock()
			return
		}
		// Take the due segments out of the queue (one pass, however many
		// a retention run deleted).
		now := time.Now()
		var due []*segment
		var next time.Time
		keep := d.mu.queue[:0]
		for _, s := range d.mu.queue {
			if !s.deleteAt.After(now) {
				due = append(due, s)
				continue
			}
			keep = append(keep, s)
			if next.IsZero() || s.deleteAt.Before(next) {
				next = s.deleteAt
			}
		}
		clear(d.mu.queue[len(keep):])
		d.mu.queue = keep
		if len(due) == 0 && len(keep) == 0 {
			d.mu.running = false
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		if len(due) > 0 {
			for _, s := range due {
				select {
				case <-d.stop:
					return // Close waits for one removal at most; Open removes the rest
				default:
				}
				d.remove(s)
			}
			continue
		}
		timer.Reset(next.Sub(now))
		select {
		case <-timer.C:
		case <-d.kick:
			timer.Stop()
		case <-d.stop:
			timer.Stop()
			return
		}
	}
}

// remove removes the renamed files of s (a missing one is fine: a segment
// without a .txnindex, or an index never written).
func (d *deleter) remove(s *segment) {
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, txnIndexSuffix} {
		if err := d.fs.Remove(s.path(suf)); err != nil && !vfs.IsNotExist(err) {
			// Open removes it.
			d.logger.Warn("hotlog: removing a deleted segment's file", "segment", s.base, "err", err)
		}
	}
	if s.delSuffix == deletedSuffix {
		d.mu.Lock()
		delete(d.mu.plain, s.base)
		d.mu.Unlock()
	}
}

// close stops the deleter and waits for its goroutine and for removals in
// progress; what is pending stays on disk.
func (d *deleter) close() {
	d.mu.Lock()
	if d.mu.closed {
		d.mu.Unlock()
		return
	}
	d.mu.closed = true
	close(d.stop)
	d.mu.Unlock()
	d.wg.Wait()
}
