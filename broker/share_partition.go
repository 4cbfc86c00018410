package broker

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/metadata"
)

// Share groups (KIP-932): the partition leader's side.
//
// For each (share group, partition) it leads, a broker keeps the
// share-partition: its start offset (SPSO: every record before it is done),
// its end (SPEO: the first offset never delivered), and between them the
// records in flight, each available or acquired by a member until a lock
// deadline, with its delivery count. A record acknowledged (ACCEPT), rejected
// (REJECT), a gap, or delivered group.share.delivery.count.limit times is
// done; RELEASE and an expired lock make it available again. Done records at
// the start move the SPSO forward. The state (SPSO, end, the records in
// flight with their delivery counts: share_state.go) is written to the
// metadata log (metadata.ResourceShareState) as it changes, in one command
// per group for what changed meanwhile (at most one every
// shareFlushInterval), and an acknowledgement is answered once the write
// holding it is committed, so that a new leader (after a failover or a
// restart) delivers again only what was in flight. A new share-partition
// with no stored state begins at share.auto.offset.reset: latest (the
// default, as Kafka), earliest or by_duration.
//
// ShareFetch and ShareAcknowledge run in share sessions, one per (group,
// member) on this broker, like fetch sessions: epoch 0 opens one, each
// request carries the next epoch, -1 closes it. A session belongs to the
// connection that opened it: when that connection closes, or the session is
// closed or replaced, the member's acquired records become available again.

const (
	shareFlushInterval   = 20 * time.Millisecond
	shareAckWriteWait    = 5 * time.Second
	shareMaxRecordLocks  = 2000 // group.share.partition.max.record.locks
	shareDeliveryLimit   = 5    // group.share.delivery.count.limit
	shareMaxSessionParts = 10000
	shareMaxSessions     = 2000 // group.share.max.share.sessions
)

// shareStats counts what the share-partitions of a broker do, for metrics
// (share_metrics.go).
type shareStats struct {
	acquired atomic.Int64    // deliveries
	acks     [5]atomic.Int64 // records acknowledged, by type (1 ACCEPT … 4 RENEW; 0 GAP)
	archived atomic.Int64    // records that reached the delivery limit
}

// archive drops a record that reached the delivery limit.
func (sp *sharePartition) archive(off int64) {
	delete(sp.recs, off)
	if sp.stats != nil {
		sp.stats.archived.Add(1)
	}
}

type sharePartKey struct {
	group   string
	topicID [16]byte
	part    int32
}

func (k sharePartKey) stateKey() string {
	return hex.EncodeToString(k.topicID[:]) + ":" + strconv.Itoa(int(k.part))
}

type shareRec struct {
	acquired   bool
	deliveries int16
	member     string
	deadline   time.Time
}

type sharePartition struct {
	key        sharePartKey
	epoch      int32 // the leader epoch this state belongs to
	start, end int64
	recs       map[int64]*shareRec // offsets in [start, end) in flight; absent: done
	// version counts changes of the state; marked is the version last
	// marked dirty for the flusher.
	version, marked uint64
	// storedVal is the value this broker last saw committed to the
	// metadata log for it (share_state.go; "": none); a different value
	// there, or none, while nothing of this broker's is on its way, is an
	// admin's change (AlterShareGroupOffsets, DeleteShareGroupOffsets,
	// DeleteGroups).
	storedVal string
	// unstored: made from share.auto.offset.reset, its start not yet in
	// the metadata log; nothing is delivered until it is, or a new leader
	// could reset again past records delivered but not acknowledged.
	unstored bool
	stats    *shareStats // nil in unit tests
}

type shareSessionKey struct{ group, member string }

type shareTP struct {
	topicID [16]byte
	part    int32
}

type shareSession struct {
	key   shareSessionKey
	epoch int32 // the epoch the next request must carry
	conn  uint64
	parts []shareTP        // in the order added
	has   map[shareTP]bool // parts, as a set
}

type shares struct {
	b     *Broker
	coord *shareCoordinator

	mu       sync.Mutex
	parts    map[sharePartKey]*sharePartition
	sessions map[shareSessionKey]*shareSession
	stats    shareStats
	dirty    map[sharePartKey]bool
	writing  map[sharePartKey]string // being written by flush
	// Flush passes: started and done counts, and flushed, closed and
	// replaced when a pass is done (waitFlushed).
	passStarted, passDone uint64
	flushed               chan struct{}

	maxSessions int // shareMaxSessions; tests lower it

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

func newShares(b *Broker) *shares {
	s := &shares{b: b, coord: newShareCoordinator(b), parts: map[sharePartKey]*sharePartition{},
		sessions: map[shareSessionKey]*shareSession{}, dirty: map[sharePartKey]bool{}, writing: map[sharePartKey]string{},
		maxSessions: shareMaxSessions, flushed: make(chan struct{}),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if b.metrics != nil {
		b.metrics.reg.MustRegister(&shareCollector{s})
	}
	return s
}

func (s *shares) start() {
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.kick:
				s.flush()
			case <-s.stop:
				s.flush()
				return
			}
			// What changes meanwhile goes in the next command: at most
			// one proposal per shareFlushInterval.
			t := time.NewTimer(shareFlushInterval)
			select {
			case <-t.C:
			case <-s.stop:
				t.Stop()
				s.flush()
				return
			}
		}
	}()
}

// close writes the last start offsets (before the metadata node closes).
func (s *shares) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// flush writes the state of the changed share-partitions, one metadata
// command per group.
func (s *shares) flush() {
	type write struct {
		sp  *sharePartition
		val string
	}
	s.mu.Lock()
	s.passStarted++
	pass := s.passStarted
	byGroup := map[string][]metadata.ConfigOp{}
	writes := map[sharePartKey]write{}
	for k := range s.dirty {
		sp := s.parts[k]
		if sp == nil {
			continue
		}
		if p := s.b.store.opened(metadata.UUID(k.topicID), k.part); p == nil || !p.isLeader(sp.epoch) {
			continue // no longer the leader (of that epoch): its state is the new leader's to write
		}
		v := sp.encodeState()
		if v == sp.storedVal {
			continue
		}
		byGroup[k.group] = append(byGroup[k.group], metadata.ConfigOp{Key: k.stateKey(), Value: v})
		writes[k] = write{sp, v}
		s.writing[k] = v
	}
	s.dirty = map[sharePartKey]bool{}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed := false
	for g, ops := range byGroup {
		_, _, err := s.b.store.propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceShareState, ResourceName: g, Ops: ops})
		failed = failed || err != nil
		s.mu.Lock()
		for k, w := range writes {
			if k.group != g {
				continue
			}
			delete(s.writing, k)
			if err != nil {
				s.dirty[k] = true
			} else if s.parts[k] == w.sp {
				w.sp.storedVal = w.val
			}
		}
		s.mu.Unlock()
		if err != nil {
			s.b.log.Warn("share group: state not written; retrying", "group", g, "err", err)
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
	}
	s.mu.Lock()
	if !failed {
		s.passDone = pass // a failed pass is done by the retry's
	}
	close(s.flushed)
	s.flushed = make(chan struct{})
	s.mu.Unlock()
}

// markLocked notes a change of sp for the flusher and returns the flush
// pass that will write it (waitFlushed).
func (s *shares) markLocked(sp *sharePartition) uint64 {
	if sp.version != sp.marked {
		sp.marked = sp.version
		s.dirty[sp.key] = true
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return s.passStarted + 1
}

// waitFlushed waits until flush pass has written what changed before it
// started (at most shareAckWriteWait, or until ctx ends) and reports
// whether it has: acknowledgements are answered once they are in the
// metadata log, as Kafka answers them once its share coordinator has them.
// Those not written in time are answered with an error (settle): the
// flusher goes on retrying them, but a leader that stops before the quorum
// is back loses them, and the records come again.
func (s *shares) waitFlushed(ctx context.Context, pass uint64) bool {
	t := time.NewTimer(shareAckWriteWait)
	defer t.Stop()
	for {
		s.mu.Lock()
		done, ch := s.passDone, s.flushed
		s.mu.Unlock()
		if done >= pass {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		case <-s.stop:
			return false
		}
	}
}

// connClosed releases what the sessions of a closed connection hold.
func (s *shares) connClosed(connID uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ss := range s.sessions {
		if ss.conn == connID {
			s.endSessionLocked(ss)
			delete(s.sessions, k)
		}
	}
}

// endSessionLocked releases the member's acquired records on the session's
// partitions.
func (s *shares) endSessionLocked(ss *shareSession) {
	now := time.Now()
	for _, tp := range ss.parts {
		if sp := s.parts[sharePartKey{ss.key.group, tp.topicID, tp.part}]; sp != nil {
			sp.release(ss.key.member)
			s.advanceLocked(sp, now, -1)
		}
	}
}

// release makes the member's acquired records available again.
func (sp *sharePartition) release(member string) {
	for off, r := range sp.recs {
		if r.acquired && r.member == member {
			sp.version++
			r.acquired, r.member = false, ""
			if r.deliveries >= shareDeliveryLimit {
				sp.archive(off)
			}
		}
	}
}

// advanceLocked expires locks and moves the start past done records; a
// logStart >= 0 also drops what retention removed.
func (s *shares) advanceLocked(sp *sharePartition, now time.Time, logStart int64) {
	for off, r := range sp.recs {
		if r.acquired && now.After(r.deadline) {
			sp.version++
			r.acquired, r.member = false, ""
			if r.deliveries >= shareDeliveryLimit {
				sp.archive(off)
			}
		}
	}
	if logStart > sp.start {
		sp.version++
		for off := range sp.recs {
			if off < logStart {
				delete(sp.recs, off)
			}
		}
		sp.start = logStart
		sp.end = max(sp.end, logStart)
	}
	start := sp.start
	if len(sp.recs) == 0 {
		sp.start = sp.end
	} else {
		for sp.start < sp.end && sp.recs[sp.start] == nil {
			sp.start++
		}
	}
	if sp.start != start {
		sp.version++
	}
	s.markLocked(sp)
}

// stateLocked returns the share-partition of key on p, this broker's
// partition that it leads, (re)built when it is new here or leadership
// changed. resetAt is where a by_duration reset starts, found by the
// caller outside the lock (-1: none found, which resets to latest), and
// logStart the partition's log start across both tiers (logStartOffset,
// which may read the bucket, also outside the lock).
func (s *shares) stateLocked(p *partition, key sharePartKey, resetAt, logStart int64) *sharePartition {
	epoch := p.leaderEpoch()
	// The state now, not a request's (older) snapshot: storedVal may
	// already be from a later write.
	st := s.b.meta.State()
	stored, hasStored := st.ShareState(key.group)[key.stateKey()]
	if sp := s.parts[key]; sp != nil && sp.epoch == epoch {
		_, dirty := s.dirty[key]
		_, writing := s.writing[key]
		if dirty || writing || sp.unstored || (hasStored && stored == sp.storedVal) {
			return sp
		}
		// The state was changed or deleted by an admin: start again
		// from what the metadata says (records in flight go back).
		s.b.log.Info("share-partition changed by an admin request", "group", key.group, "partition", key.part, "was", sp.storedVal, "now", stored)
	}
	sp := &sharePartition{key: key, epoch: epoch, recs: map[int64]*shareRec{}, stats: &s.stats}
	hw, leo := p.log.HighWatermark(), p.log.LogEndOffset()
	inFlight := 0
	if saved, ok := parseShareState(stored); hasStored && ok {
		// Not clamped to the high watermark: a new leader's lags
		// until its followers fetch again; reads wait for it.
		sp.start = min(max(saved.start, logStart), leo)
		sp.end = min(max(saved.end, sp.start), leo)
		for _, r := range saved.runs {
			if r.deliveries >= shareDeliveryLimit {
				// Acquired for the last time when the state was
				// written: a new delivery would be past
				// group.share.delivery.count.limit, so archived.
				continue
			}
			for off := max(r.first, sp.start); off <= r.last && off < sp.end; off++ {
				sp.recs[off] = &shareRec{deliveries: r.deliveries}
				inFlight++
			}
		}
		sp.storedVal = stored
	} else {
		_, byDuration := shareGroupResetDuration(st, key.group)
		switch {
		case s.b.shareGroupResetEarliest(st, key.group):
			sp.start = logStart
		case byDuration && resetAt >= 0:
			sp.start = min(max(resetAt, logStart), hw)
		default:
			sp.start = hw
		}
		sp.end, sp.unstored = sp.start, true
	}
	s.b.log.Info("share-partition opened", "group", key.group, "topic_id", hex.EncodeToString(key.topicID[:]), "partition", key.part,
		"leader_epoch", epoch, "start", sp.start, "end", sp.end, "in_flight", inFlight, "stored", hasStored, "high_watermark", hw)
	s.parts[key] = sp
	s.advanceLocked(sp, time.Now(), -1)
	return sp
}

// ack applies acknowledgement batches of member; a batch that names a
// record the member does not hold fails the partition's acknowledgement
// with INVALID_RECORD_STATE and changes nothing. renew allows RENEW (4,
// KIP-1222: the lock starts again, for v2 requests that say IsRenewAck).
func (sp *sharePartition) ack(member string, batches []shareAckBatch, renew bool, lock time.Duration, now time.Time) int16 {
	maxType := int8(3)
	if renew {
		maxType = 4
	}
	prevLast := int64(-1)
	for _, b := range batches {
		// In offset order, none overlapping (Kafka's
		// validateAcknowledgementBatches): a record is acknowledged
		// once, and the loops below are bounded by the window.
		if b.first < 0 || b.last < b.first || b.first <= prevLast || len(b.types) == 0 || (len(b.types) != 1 && int64(len(b.types)) != b.last-b.first+1) {
			return kerr.InvalidRequest.Code
		}
		prevLast = b.last
		for _, t := range b.types {
			if t < 0 || t > maxType {
				return kerr.InvalidRequest.Code
			}
		}
		if b.first < sp.start || b.last >= sp.end {
			return kerr.InvalidRecordState.Code // not in flight (this bounds the loops below)
		}
		for off := b.first; off <= b.last; off++ {
			r := sp.recs[off]
			if r == nil || !r.acquired || r.member != member {
				return kerr.InvalidRecordState.Code
			}
		}
	}
	for _, b := range batches {
		if slices.ContainsFunc(b.types, func(t int8) bool { return t != 4 }) {
			sp.version++ // RENEW alone changes no stored state
			break
		}
	}
	for _, b := range batches {
		for off := b.first; off <= b.last; off++ {
			t := b.types[0]
			if len(b.types) > 1 {
				t = b.types[off-b.first]
			}
			r := sp.recs[off]
			if sp.stats != nil {
				sp.stats.acks[t].Add(1)
			}
			switch t {
			case 2: // RELEASE
				r.acquired, r.member = false, ""
				if r.deliveries >= shareDeliveryLimit {
					sp.archive(off)
				}
			case 4: // RENEW
				r.deadline = now.Add(lock)
			default: // ACCEPT, REJECT, GAP: done
				delete(sp.recs, off)
			}
		}
	}
	return 0
}

type shareAckBatch struct {
	first, last int64
	types       []int8
}

// acquire takes, from the batches read (starting at or before the first
// record it can give), the records available to member, up to maxRecords:
// whole batches, or exactly (strict: KIP-1206's record-limit mode, which
// splits a batch), and returns the batches that hold them and the acquired
// ranges. aborted, for a read_committed group, lists the aborted
// transactions with records in batches (as a Fetch response does): their
// records are done without being delivered, as markers are.
func (sp *sharePartition) acquire(member string, batches []byte, aborted []kmsg.FetchResponseTopicPartitionAbortedTransaction, maxRecords int, strict bool, lock time.Duration, now time.Time) ([]byte, []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) {
	var out []byte
	var ranges []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	acquired := 0
	aborted = slices.Clone(aborted)
	slices.SortFunc(aborted, func(a, b kmsg.FetchResponseTopicPartitionAbortedTransaction) int {
		return cmp.Compare(a.FirstOffset, b.FirstOffset)
	})
	var abortedPIDs map[int64]bool
	oldEnd, dropped := sp.end, false
	defer func() {
		if len(ranges) > 0 || sp.end != oldEnd || dropped {
			sp.version++
		}
	}()
	add := func(off int64, deliveries int16) {
		if sp.stats != nil {
			sp.stats.acquired.Add(1)
		}
		if n := len(ranges); n > 0 && ranges[n-1].LastOffset == off-1 && ranges[n-1].DeliveryCount == deliveries {
			ranges[n-1].LastOffset = off
			return
		}
		r := kmsg.NewShareFetchResponseTopicPartitionAcquiredRecord()
		r.FirstOffset, r.LastOffset, r.DeliveryCount = off, off, deliveries
		ranges = append(ranges, r)
	}
	for len(batches) >= hotlog.BatchHeaderSize && acquired < maxRecords {
		h, err := hotlog.ParseBatchHeader(batches)
		if err != nil || int64(len(batches)) < h.Size() {
			break
		}
		raw := batches[:h.Size()]
		batches = batches[h.Size():]
		base, last := h.BaseOffset, h.LastOffset()
		// The aborted transactions begun by now (a consumer's
		// read_committed filter): a producer's transactional batches
		// are dropped until its marker.
		for len(aborted) > 0 && aborted[0].FirstOffset <= last {
			if abortedPIDs == nil {
				abortedPIDs = map[int64]bool{}
			}
			abortedPIDs[aborted[0].ProducerID] = true
			aborted = aborted[1:]
		}
		skip := false
		if h.IsControl() {
			delete(abortedPIDs, h.ProducerID)
			skip = true // markers are never delivered
		} else if h.IsTransactional() && abortedPIDs[h.ProducerID] {
			skip = true
		}
		if last < sp.start {
			continue
		}
		if skip {
			// Never delivered (nor counted against the in-flight
			// window): done. The loop is bounded by the window,
			// whatever the batch's offset range claims.
			for off := max(base, sp.start); off <= last && off < sp.end; off++ {
				if sp.recs[off] != nil {
					delete(sp.recs, off)
					dropped = true
				}
			}
			sp.end = max(sp.end, last+1)
			continue
		}
		if last >= sp.end && sp.end-sp.start >= shareMaxRecordLocks {
			break // the in-flight window is full
		}
		got := 0
		next := last + 1 // the first offset of the batch not looked at
		for off := max(base, sp.start); off <= last; off++ {
			if strict && acquired+got >= maxRecords {
				next = off
				break
			}
			if off >= sp.end {
				if off-sp.start >= shareMaxRecordLocks {
					// The window is full inside this batch: the
					// rest of it later. A compressed batch's record
					// count is not read on produce, so its offset
					// range may claim any number of records.
					next = off
					break
				}
				sp.recs[off] = &shareRec{acquired: true, deliveries: 1, member: member, deadline: now.Add(lock)}
				add(off, 1)
				got++
				continue
			}
			r := sp.recs[off]
			if r == nil || r.acquired {
				continue
			}
			r.acquired, r.member, r.deadline = true, member, now.Add(lock)
			r.deliveries++
			add(off, r.deliveries)
			got++
		}
		if next > sp.end {
			sp.end = next
		}
		if got > 0 {
			out = append(out, raw...)
			acquired += got
		}
	}
	return out, ranges
}

// firstAvailable is where a read for new deliveries starts: the lowest
// available record in flight, else the end.
func (sp *sharePartition) firstAvailable() int64 {
	from := sp.end
	for off, r := range sp.recs {
		if !r.acquired && off < from {
			from = off
		}
	}
	return from
}

// earliestDeadline is the first lock to expire on sp, or zero.
func (sp *sharePartition) earliestDeadline() time.Time {
	var t time.Time
	for _, r := range sp.recs {
		if r.acquired && (t.IsZero() || r.deadline.Before(t)) {
			t = r.deadline
		}
	}
	return t
}

// readShare reads whole batches of p from offset (either tier), up to
// maxBytes, into memory; readCommitted reads up to the last stable offset
// and returns the aborted transactions in what it read.
func (s *shares) readShare(ctx context.Context, p *partition, offset int64, maxBytes int32, readCommitted bool) ([]byte, []kmsg.FetchResponseTopicPartitionAbortedTransaction, int16) {
	resp := kmsg.NewFetchResponse()
	rt := kmsg.NewFetchResponseTopic()
	rt.Partitions = []kmsg.FetchResponseTopicPartition{kmsg.NewFetchResponseTopicPartition()}
	resp.Topics = []kmsg.FetchResponseTopic{rt}
	fp := &fetchPart{p: p, offset: offset, maxBytes: max(maxBytes, 1), led: true}
	_, failed, _ := s.b.readFetchParts(ctx, &resp, []*fetchPart{fp}, int64(max(maxBytes, 1)), readCommitted)
	if failed {
		releaseFetchParts([]*fetchPart{fp})
		code := resp.Topics[0].Partitions[0].ErrorCode
		if code == 0 {
			code = kerr.UnknownServerError.Code
		}
		return nil, nil, code
	}
	aborted := resp.Topics[0].Partitions[0].AbortedTransactions
	var regions []hotlog.Region
	var size int64
	var release func()
	switch {
	case fp.remote != nil:
		regions, size, release = fp.remote.Regions, fp.remote.Size, fp.remote.Release
	case fp.res != nil:
		regions, size, release = fp.res.Regions, fp.res.Size, fp.res.Release
	default:
		return nil, nil, 0
	}
	defer release()
	buf := make([]byte, size)
	b := buf
	for _, rg := range regions {
		if _, err := rg.File.ReadAt(b[:rg.Len], rg.Pos); err != nil {
			return nil, nil, errCode(fmt.Errorf("%w: %v", hotlog.ErrCorruptBatch, err))
		}
		b = b[rg.Len:]
	}
	return buf, aborted, 0
}
