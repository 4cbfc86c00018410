package broker

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/internal/reqtime"
	"github.com/sediment-io/sediment/metadata"
)

// ShareFetch: v1
//
// KIP-932 share groups (share_partition.go): acknowledgements piggybacked
// per partition, then records acquired for the member from every partition
// of its share session, long polling up to max_wait for new records or an
// expiring lock. v1-2 (v0 was Kafka 4.0's early access): v2 brings
// KIP-1222's RENEW acknowledgements (IsRenewAck: acknowledge only, nothing
// fetched) and KIP-1206's record-limit acquire mode (ShareAcquireMode 1: at
// most MaxRecords, batches split). Serial on a connection, so a member's
// requests keep their session epochs in order.

func init() {
	e := regKey(78, 1, 2)
	e.handler = handleShareFetch
	e.serial = true
}

const shareDefaultPartitionBytes = 1 << 20

type sharePartResult struct {
	code, ackCode int16
	ackSet        bool
	records       []byte
	ranges        []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
}

func handleShareFetch(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ShareFetchRequest)
	resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
	s := b.shares
	if req.GroupID == nil || *req.GroupID == "" || req.MemberID == nil || *req.MemberID == "" {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return &Reply{Msg: resp}, nil
	}
	group, member := *req.GroupID, *req.MemberID
	st := b.meta.State()
	// The lock duration as the records are acquired (fetchPartition),
	// told again at the end.
	defer func() { resp.AcquisitionLockTimeoutMillis = int32(b.shareLockDuration(group).Milliseconds()) }()

	var add []shareTP
	maxBytes := map[shareTP]int32{}
	acks := map[shareTP][]shareAckBatch{}
	hasAcks := false
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			tp := shareTP{t.TopicID, p.Partition}
			add = append(add, tp)
			if p.PartitionMaxBytes > 0 {
				maxBytes[tp] = p.PartitionMaxBytes
			}
			for _, a := range p.AcknowledgementBatches {
				acks[tp] = append(acks[tp], shareAckBatch{a.FirstOffset, a.LastOffset, a.AcknowledgeTypes})
				hasAcks = true
			}
		}
	}
	var forget []shareTP
	for _, t := range req.ForgottenTopicsData {
		for _, p := range t.Partitions {
			forget = append(forget, shareTP{t.TopicID, p})
		}
	}
	if req.ShareSessionEpoch == 0 && hasAcks {
		resp.ErrorCode = kerr.InvalidRequest.Code // nothing to acknowledge in a new session
		return &Reply{Msg: resp}, nil
	}
	s.mu.Lock()
	ss, code := s.sessionLocked(group, member, req.ShareSessionEpoch, r.Conn.ID, add)
	s.mu.Unlock()
	if code != 0 {
		resp.ErrorCode = code
		return &Reply{Msg: resp}, nil
	}
	// The session is updated as Kafka's ShareSession.update does it:
	// partitions added, then forgotten. A forgotten partition's
	// acknowledgements in this request (the Java consumer's
	// acknowledge-only partition, once no longer assigned) are applied
	// first; what the member still holds there is released after.
	results := map[shareTP]*sharePartResult{}
	result := func(tp shareTP) *sharePartResult {
		if results[tp] == nil {
			results[tp] = &sharePartResult{}
		}
		return results[tp]
	}
	writes := map[shareTP]*shareAckWrite{}
	for tp, batches := range acks {
		res := result(tp)
		res.ackSet = true
		res.ackCode, writes[tp] = s.acknowledge(ctx, st, group, member, tp, batches, req.IsRenewAck)
	}
	for tp, code := range s.settle(ctx, writes) {
		results[tp].ackCode = code
	}
	if len(forget) > 0 && req.ShareSessionEpoch != -1 {
		s.mu.Lock()
		s.forgetLocked(ss, forget)
		s.mu.Unlock()
	}
	// A session close, a renewal (KIP-1222) and a zero max_bytes (as
	// Kafka: nothing may be returned) acknowledge only.
	if req.ShareSessionEpoch == -1 || req.IsRenewAck || req.MaxBytes <= 0 {
		if req.ShareSessionEpoch == -1 {
			s.mu.Lock()
			s.closeSessionLocked(ss)
			s.mu.Unlock()
		}
		buildShareFetchResponse(st, resp, add, results)
		return &Reply{Msg: resp}, nil
	}

	// The broker's fetch.max.bytes bounds the answer whatever max_bytes
	// asks, as for Fetch.
	limit := min(int64(req.MaxBytes), int64(b.cfg.FetchMaxBytes))
	maxRecords := int(req.MaxRecords)
	if maxRecords <= 0 {
		maxRecords = 500
	}
	deadline := time.Now().Add(time.Duration(max(req.MaxWaitMillis, 0)) * time.Millisecond)
	var wake chan struct{}
	var waiting []*partition
	defer func() {
		for _, p := range waiting {
			p.removeWaiter(wake)
		}
	}()
	for {
		s.mu.Lock()
		parts := slices.Clone(ss.parts)
		s.mu.Unlock()
		if len(parts) > 1 {
			// Each request starts at another partition of the session
			// (Kafka's round robin by session epoch): a backlog on
			// the first cannot starve the others of MaxRecords.
			i := int(uint32(req.ShareSessionEpoch) % uint32(len(parts)))
			parts = append(parts[i:], parts[:i]...)
		}
		total, failed, bytes := 0, false, int64(0)
		var nextLock time.Time
		var leaders []*partition
		for _, tp := range parts {
			if total >= maxRecords || bytes >= limit {
				break // the rest next time (KIP-74: the first partition with data may exceed MaxBytes)
			}
			p, err := b.store.partitionByID(st, tp.topicID, tp.part)
			if err == nil && !p.isLeader(-1) {
				err = errNotLeader
			}
			if err != nil {
				res := result(tp)
				res.code = errCode(err)
				if !b.store.topicIDKnown(st, tp.topicID) {
					res.code = kerr.UnknownTopicID.Code
				}
				failed = true
				continue
			}
			leaders = append(leaders, p)
			budget := maxBytes[tp]
			if budget <= 0 {
				budget = shareDefaultPartitionBytes
			}
			// What is left of the request's limit (the first batch
			// read comes whole, whatever its size: KIP-74).
			budget = int32(max(min(int64(budget), limit-bytes), 1))
			got, lockAt, code := s.fetchPartition(ctx, p, sharePartKey{group, tp.topicID, tp.part}, member, maxRecords-total, req.ShareAcquireMode == 1, budget)
			if code != 0 {
				result(tp).code = code
				failed = true
				continue
			}
			if !lockAt.IsZero() && (nextLock.IsZero() || lockAt.Before(nextLock)) {
				nextLock = lockAt
			}
			if got != nil && len(got.ranges) > 0 {
				res := result(tp)
				res.records, res.ranges = got.records, got.ranges
				bytes += int64(len(got.records))
				for _, rg := range got.ranges {
					total += int(rg.LastOffset - rg.FirstOffset + 1)
				}
			}
		}
		if total > 0 || failed || !time.Now().Before(deadline) || len(leaders) == 0 {
			break
		}
		if wake == nil {
			wake = make(chan struct{}, 1)
			for _, p := range leaders {
				p.addWaiter(wake)
			}
			waiting = leaders
			continue // again once registered: an append may have raced
		}
		until := deadline
		if !nextLock.IsZero() && nextLock.Before(until) {
			until = nextLock.Add(time.Millisecond)
		}
		t := time.NewTimer(time.Until(until))
		waited := reqtime.Wait(ctx)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		case <-b.stopping:
		}
		waited()
		t.Stop()
		if ctx.Err() != nil || b.isStopping() {
			break
		}
	}
	buildShareFetchResponse(st, resp, add, results)
	return &Reply{Msg: resp}, nil
}

// fetchPartition acquires up to maxRecords records of p for member. It
// returns what it acquired, the next lock deadline of the share-partition
// (to wait for when nothing was available), or an error code.
func (s *shares) fetchPartition(ctx context.Context, p *partition, key sharePartKey, member string, maxRecords int, strict bool, maxBytes int32) (*sharePartResult, time.Time, int16) {
	logStart, err := s.b.logStartOffset(ctx, p)
	if err != nil {
		return nil, time.Time{}, errCode(err)
	}
	hw := p.log.HighWatermark()
	s.mu.Lock()
	known := s.parts[key] != nil && s.parts[key].epoch == p.leaderEpoch()
	s.mu.Unlock()
	if !known {
		// A share-partition new here is made from the metadata: first
		// read everything committed (a linearizable read), so that the
		// start the previous leader wrote last, or share.auto.offset.reset
		// set just now, is seen.
		if _, err := s.b.meta.Sync(ctx); err != nil {
			return nil, time.Time{}, kerr.RequestTimedOut.Code
		}
	}
	resetAt := int64(-1)
	if st := s.b.meta.State(); !known {
		if _, stored := st.ShareState(key.group)[key.stateKey()]; !stored {
			if d, ok := shareGroupResetDuration(st, key.group); ok {
				// by_duration: looked up here, outside the lock (it
				// may read the bucket).
				var err error
				if resetAt, _, err = s.b.offsetForTime(ctx, p, time.Now().Add(-d).UnixMilli()); err != nil {
					return nil, time.Time{}, errCode(err)
				}
			}
		}
	}
	s.mu.Lock()
	sp := s.stateLocked(p, key, resetAt, logStart)
	s.advanceLocked(sp, time.Now(), logStart)
	from, nextLock, unstored, start := sp.firstAvailable(), sp.earliestDeadline(), sp.unstored, sp.start
	s.mu.Unlock()
	if unstored {
		// A new share-partition: its start is written before anything
		// is delivered from it.
		op := metadata.ConfigOp{Key: key.stateKey(), Value: strconv.FormatInt(start, 10)}
		if _, _, err := s.b.store.propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceShareState, ResourceName: key.group, Ops: []metadata.ConfigOp{op}}); err != nil {
			s.b.log.Warn("share group: start offset not written", "group", key.group, "partition", key.part, "err", err)
			return nil, time.Time{}, kerr.RequestTimedOut.Code
		}
		s.mu.Lock()
		sp.unstored = false
		if sp.storedVal == "" {
			sp.storedVal = op.Value
		}
		s.mu.Unlock()
	}
	// share.isolation.level=read_committed: up to the last stable
	// offset, aborted transactions left out.
	readCommitted := s.b.shareReadCommitted(key.group)
	end := hw
	if readCommitted {
		end = p.lastStableOffset()
	}
	if from >= end {
		return nil, nextLock, 0
	}
	if maxBytes <= 0 {
		maxBytes = shareDefaultPartitionBytes
	}
	data, aborted, code := s.readShare(ctx, p, from, maxBytes, readCommitted)
	if code != 0 {
		return nil, time.Time{}, code
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parts[key] != sp {
		return nil, time.Time{}, kerr.NotLeaderForPartition.Code // leadership changed meanwhile
	}
	now := time.Now()
	// Read now, after the linearizable read a new share-partition starts
	// with: a share.record.lock.duration.ms set just before counts.
	lock := s.b.shareLockDuration(key.group)
	records, ranges := sp.acquire(member, data, aborted, maxRecords, strict, lock, now)
	s.advanceLocked(sp, now, -1)
	return &sharePartResult{records: records, ranges: ranges}, sp.earliestDeadline(), 0
}

// shareAckWrite is the write of acknowledgements applied on partition p,
// led at epoch, by flush pass pass.
type shareAckWrite struct {
	pass  uint64
	p     *partition
	epoch int32
}

// settle waits until the writes are done and returns the error code of
// each that was not: NOT_LEADER_OR_FOLLOWER when its partition is no
// longer led at its epoch, so the new leader holds a state without it (as
// Kafka's share coordinator refuses a fenced leader's write);
// REQUEST_TIMED_OUT when the metadata log did not take it in time (no
// quorum): it may still be written later, but it is not durable yet, and
// an acknowledgement answered without error must be (Kafka rolls back an
// acknowledgement its state write failed and answers the error). Nil
// writes are nothing to wait for.
func (s *shares) settle(ctx context.Context, writes map[shareTP]*shareAckWrite) map[shareTP]int16 {
	var pass uint64
	for _, w := range writes {
		if w != nil {
			pass = max(pass, w.pass)
		}
	}
	if pass == 0 {
		return nil
	}
	written := s.waitFlushed(ctx, pass)
	failed := map[shareTP]int16{}
	for tp, w := range writes {
		switch {
		case w == nil:
		case !w.p.isLeader(w.epoch):
			failed[tp] = kerr.NotLeaderForPartition.Code
		case !written:
			failed[tp] = kerr.RequestTimedOut.Code
		}
	}
	return failed
}

// acknowledge applies a member's acknowledgements on one partition. It
// returns what writes them (nil: nothing to wait for), which the caller
// settles before answering.
func (s *shares) acknowledge(ctx context.Context, st *metadata.State, group, member string, tp shareTP, batches []shareAckBatch, renew bool) (int16, *shareAckWrite) {
	p, err := s.b.store.partitionByID(st, tp.topicID, tp.part)
	if err == nil && !p.isLeader(-1) {
		err = errNotLeader
	}
	if err != nil {
		if !s.b.store.topicIDKnown(st, tp.topicID) {
			return kerr.UnknownTopicID.Code, nil
		}
		return errCode(err), nil
	}
	key := sharePartKey{group, tp.topicID, tp.part}
	logStart, err := s.b.logStartOffset(ctx, p) // outside the lock: it may read the bucket
	if err != nil {
		return errCode(err), nil
	}
	s.mu.Lock()
	known := s.parts[key] != nil && s.parts[key].epoch == p.leaderEpoch()
	s.mu.Unlock()
	if !known {
		// As in fetchPartition: a share-partition new here is built
		// from everything committed (the previous leader's last write).
		if _, err := s.b.meta.Sync(ctx); err != nil {
			return kerr.RequestTimedOut.Code, nil
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp := s.parts[key]; sp == nil || sp.epoch != p.leaderEpoch() {
		if _, stored := s.b.meta.State().ShareState(group)[key.stateKey()]; !stored {
			return kerr.InvalidRecordState.Code, nil // nothing was ever delivered from it
		}
	}
	sp := s.stateLocked(p, key, -1, logStart)
	now := time.Now()
	s.advanceLocked(sp, now, -1) // expired locks first: their records are not the member's any more
	before := sp.version
	code := sp.ack(member, batches, renew, s.b.shareLockDuration(group), now)
	s.advanceLocked(sp, now, -1)
	if code != 0 || sp.version == before {
		return code, nil
	}
	return code, &shareAckWrite{pass: s.passStarted + 1, p: p, epoch: sp.epoch}
}

// sessionLocked applies a request's share session epoch for (group, member):
// 0 opens a new session (ending one the member had), -1 names the session
// being closed, any other must be the session's next epoch. Partitions are
// added to and forgotten from the session as the request says.
func (s *shares) sessionLocked(group, member string, epoch int32, conn uint64, add []shareTP) (*shareSession, int16) {
	key := shareSessionKey{group, member}
	ss := s.sessions[key]
	switch {
	case epoch == 0:
		if ss != nil {
			s.endSessionLocked(ss)
		} else if len(s.sessions) >= s.maxSessions {
			return nil, kerr.ShareSessionLimitReached.Code
		}
		ss = &shareSession{key: key, conn: conn}
		s.sessions[key] = ss
	case ss == nil:
		return nil, kerr.ShareSessionNotFound.Code
	case epoch != ss.epoch && epoch != -1:
		return nil, kerr.InvalidShareSessionEpoch.Code
	}
	ss.conn = conn
	if epoch != -1 {
		ss.epoch = nextShareEpoch(epoch)
	}
	if ss.has == nil {
		ss.has = map[shareTP]bool{}
	}
	for _, tp := range add {
		if !ss.has[tp] && len(ss.parts) < shareMaxSessionParts {
			ss.has[tp] = true
			ss.parts = append(ss.parts, tp)
		}
	}
	return ss, 0
}

// forgetLocked removes partitions from a session and releases what the
// member holds on them.
func (s *shares) forgetLocked(ss *shareSession, forget []shareTP) {
	removed := false
	for _, tp := range forget {
		if !ss.has[tp] {
			continue
		}
		delete(ss.has, tp)
		removed = true
		if sp := s.parts[sharePartKey{ss.key.group, tp.topicID, tp.part}]; sp != nil {
			sp.release(ss.key.member)
			s.advanceLocked(sp, time.Now(), -1)
		}
	}
	if removed {
		ss.parts = slices.DeleteFunc(ss.parts, func(tp shareTP) bool { return !ss.has[tp] })
	}
}

func (s *shares) closeSessionLocked(ss *shareSession) {
	s.endSessionLocked(ss)
	if s.sessions[ss.key] == ss {
		delete(s.sessions, ss.key)
	}
}

func nextShareEpoch(e int32) int32 {
	if e == 1<<31-1 {
		return 1
	}
	return e + 1
}

func buildShareFetchResponse(st *metadata.State, resp *kmsg.ShareFetchResponse, requested []shareTP, results map[shareTP]*sharePartResult) {
	for _, tp := range requested {
		if results[tp] == nil {
			results[tp] = &sharePartResult{}
		}
	}
	byTopic := map[[16]byte][]shareTP{}
	var order [][16]byte
	for tp := range results {
		if _, ok := byTopic[tp.topicID]; !ok {
			order = append(order, tp.topicID)
		}
		byTopic[tp.topicID] = append(byTopic[tp.topicID], tp)
	}
	slices.SortFunc(order, func(a, b [16]byte) int { return slices.Compare(a[:], b[:]) })
	for _, id := range order {
		tps := byTopic[id]
		slices.SortFunc(tps, func(a, b shareTP) int { return int(a.part - b.part) })
		rt := kmsg.NewShareFetchResponseTopic()
		rt.TopicID = id
		for _, tp := range tps {
			res := results[tp]
			rp := kmsg.NewShareFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.AcknowledgeErrorCode = tp.part, res.code, res.ackCode
			rp.Records = res.records
			if rp.Records == nil {
				rp.Records = []byte{}
			}
			rp.AcquiredRecords = res.ranges
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
			if res.code != 0 {
				rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leaderHint(st, "", id, true, tp.part, res.code)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
}
