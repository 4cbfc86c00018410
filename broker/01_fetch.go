package broker

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/reqtime"
	"github.com/sediment-io/sediment/tiering"
)

// Fetch: v4-18
//
// v4 is Kafka 4's minimum (isolation level, last stable offset), v5+ log
// start offset, v7+ fetch sessions, v9+ current leader epoch, v11+ rack,
// v12+ flexible, v13+ topic ids.
//
// Fetch from follower (KIP-392, v11+): a leader asked by a consumer whose
// rack_id names another rack than its own answers, for each partition with
// an in-sync replica in that rack which has the fetch offset,
// PreferredReadReplica and no records; the client then fetches there. A
// follower serves consumer fetches up to the high watermark it has learned
// from the leader, read_committed ones up to its own last stable offset
// (its producer state and transaction index follow the leader's batches,
// replication.go).
//
// Sessions (v7+, fetch_session.go): epoch 0 opens one with a full fetch,
// later epochs send and receive only what changed, epoch -1 fetches
// without one. An unknown session is FETCH_SESSION_ID_NOT_FOUND, a wrong
// epoch INVALID_FETCH_SESSION_EPOCH, a session of topic names fetched with
// topic ids (or the reverse) FETCH_SESSION_TOPIC_ID_ERROR; the client then
// starts over. With the authorizer, a consumer's partitions of topics it
// may not READ, whether the request or its session names them, are
// TOPIC_AUTHORIZATION_FAILED (authz.go's filter, applied here once the
// session has resolved them).
//
// Long polling: when fewer than min_bytes are ready, the handler registers
// one wake channel with every requested partition and sleeps until an
// append signals it, max_wait passes, or the broker shuts down; then it
// reads again. No busy loop.
//
// Zero copy: record bytes are not read; each partition's batches are hotlog
// regions that the connection writer sends with sendfile(2) (zerocopy.go).
// Only offsets below the high watermark are visible (read_uncommitted);
// read_committed (isolation level 1) reads only below the last stable
// offset and gets the aborted transactions that overlap what it reads
// (txns.go), so the client drops their records.

func init() { regKey(1, 4, 18).handler = handleFetch }

type fetchPart struct {
	topicIdx, partIdx int
	p                 *partition
	offset            int64
	maxBytes          int32
	res               *hotlog.ReadResult
	replica           bool                // a follower's fetch: read to the log end
	remote            *tiering.ReadResult // served from the bucket (tiering.go)
	// led: a consumer's fetch served as this broker's leadership (not
	// KIP-392's follower fetching), which it held when the request came.
	// A long poll that outlives the leadership answers NOT_LEADER, as
	// Kafka's DelayedFetch completes when the leader moves: the replica
	// is a follower then, and while it truncates a divergent tail its
	// producer state and log disagree (truncateTo).
	led bool
	// throttled: a follower's fetch of a throttled replica out of the
	// ISR, under the leader's replication throttle of throttleRate bytes
	// per second (replication_throttle.go).
	throttled    bool
	throttleRate int64
	// rr: the read from the bucket this fetch started for the partition
	// (remoteread.go); remotePending: it was not done in time, and the
	// partition is answered without records.
	rr            *remoteRead
	remotePending bool
}

func handleFetch(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.FetchRequest)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	topics := req.Topics
	var session *fetchSession
	fullSession := false
	byID := r.Version >= 13
	if r.Version >= 7 {
		var code int16
		topics, session, code = b.fetchSessions.begin(req, byID)
		if code != 0 {
			resp.ErrorCode = code
			return &Reply{Msg: resp}, nil
		}
		fullSession = session != nil && req.SessionEpoch == 0
	}
	st := b.meta.State()
	// A follower's fetch (replica id set) reads to the log end and reports
	// its own log end (replication.go).
	replicaID, replicaEpoch := req.ReplicaID, int64(-1)
	if r.Version >= 15 {
		replicaID, replicaEpoch = req.ReplicaState.ID, req.ReplicaState.Epoch
	}
	leaderRate := int64(-1) // the leader side's replication throttle
	if replicaID >= 0 {
		leaderRate, _ = throttleRate(st, b.cfg.NodeID, cfgLeaderThrottledRate)
	}
	var parts []*fetchPart
	redirected := false              // a partition answers with a preferred read replica
	lookupFailed := false            // a partition failed to read: answer at once
	mayRead := fetchTopicFilter(ctx) // ACLs (authz.go); nil: all
	for ti, t := range topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		denied := mayRead != nil && !mayRead(t.Topic, t.TopicID)
		for _, pt := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = pt.Partition
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			// Empty, never null: librdkafka refuses a null record set.
			rp.RecordBatches = []byte{}
			if denied {
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			var p *partition
			var err error
			if r.Version >= 13 {
				p, err = b.store.partitionByID(st, t.TopicID, pt.Partition)
				if err != nil && !b.store.topicIDKnown(st, t.TopicID) {
					rp.ErrorCode = kerr.UnknownTopicID.Code
				}
			} else {
				p, err = b.store.partition(st, t.Topic, pt.Partition)
			}
			// KIP-392: a consumer's fetch (v11+) may be served by a
			// follower, up to the high watermark it knows.
			follower := false
			if errors.Is(err, errNotLeader) && replicaID < 0 && r.Version >= 11 {
				if fp, ferr := b.store.followerPartition(st, t.Topic, t.TopicID, r.Version >= 13, pt.Partition); ferr == nil {
					p, err, follower = fp, nil, true
				}
			}
			if err == nil && r.Version >= 9 && pt.CurrentLeaderEpoch >= 0 {
				if le := p.leaderEpoch(); pt.CurrentLeaderEpoch < le {
					err = kerr.FencedLeaderEpoch
				} else if pt.CurrentLeaderEpoch > le {
					err = kerr.UnknownLeaderEpoch
				}
			}
			if err == nil && replicaID >= 0 && !p.hasFollower(replicaID) {
				// A replica fetch (read to the log end, past the high
				// watermark) from a broker that is not a follower of
				// the partition, as Kafka's followerReplicaOrThrow
				// answers it: retriable, nothing read or recorded.
				err = errNotLeader
				if r.Version >= 9 && pt.CurrentLeaderEpoch >= 0 {
					err = kerr.UnknownLeaderEpoch
				}
			}
			if err != nil {
				if rp.ErrorCode == 0 {
					rp.ErrorCode = errCode(err)
				}
				// As Kafka's fetchMessages (errorReadingData), an error
				// reading a partition (NOT_LEADER_OR_FOLLOWER, a fenced
				// or unknown leader epoch, ...) ends the long poll. One
				// the metadata does not know does not: Kafka answers
				// those beside the read (with the ACL denials above).
				if !errors.Is(err, errUnknownTopicOrPartition) {
					lookupFailed = true
				}
				if r.Version >= 16 {
					// KIP-951: where the partition moved (replication.go).
					rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leaderHint(st, t.Topic, t.TopicID, r.Version >= 13, pt.Partition, rp.ErrorCode)
					resp.Brokers = addFetchLeaderEndpoint(b, st, r.Conn.Listener, resp.Brokers, rp.CurrentLeader.LeaderID)
				}
			} else if id := b.preferredReadReplica(st, p, follower, req, r.Version, pt.FetchOffset); id >= 0 {
				// KIP-392: the consumer should fetch from a replica in its rack.
				rp.PreferredReadReplica = id
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.log.HighWatermark(), p.lastStableOffset(), p.log.LogStartOffset()
				redirected = true
			} else {
				fp := &fetchPart{topicIdx: ti, partIdx: len(rt.Partitions), p: p, offset: pt.FetchOffset, maxBytes: pt.PartitionMaxBytes, replica: replicaID >= 0,
					led: replicaID < 0 && !follower && p.isLeader(-1)}
				if !unlimitedRate(leaderRate) && throttledReplica(st, p.topic, cfgLeaderThrottledReplicas, p.id, b.cfg.NodeID) && !p.inISR(replicaID) {
					fp.throttled, fp.throttleRate = true, leaderRate
				}
				parts = append(parts, fp)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}

	// As Kafka's fetchMaxBytes: the request's max_bytes (already lowered
	// to the client's quota by boundFetch) under the broker's
	// fetch.max.bytes. 0 (or less) is 0: the first batch only.
	maxBytes := max(min(int64(req.MaxBytes), int64(b.cfg.FetchMaxBytes)), 0)
	// min_bytes is capped at max_bytes (as lowered to the client's quota
	// by boundFetch), as Kafka's fetchMinBytes: more can never be ready.
	minBytes := min(int64(req.MinBytes), maxBytes)
	deadline := time.Now().Add(time.Duration(max(req.MaxWaitMillis, 0)) * time.Millisecond)
	var wake chan struct{}
	defer func() {
		if session != nil {
			b.fetchSessions.abandon(session)
		}
		if wake != nil {
			for _, fp := range parts {
				fp.p.removeWaiter(wake)
			}
		}
	}()
	recorded := replicaID < 0
	for {
		ready, failed, pending := b.readFetchParts(ctx, resp, parts, maxBytes, req.IsolationLevel == 1)
		if !recorded {
			// Once, after the first read, as Kafka's readFromLog (not
			// a long poll's later reads).
			recorded = true
			b.recordFollowerFetches(resp, parts, replicaID, replicaEpoch)
		}
		// A read from the bucket that did not finish in time is answered
		// at once, as Kafka's DelayedRemoteFetch: the client asks again
		// and finds its chunks cached (remoteread.go).
		if ready >= minBytes || failed || pending || lookupFailed || redirected || !time.Now().Before(deadline) || len(parts) == 0 {
			break
		}
		// Not enough yet: drop what was read, wait for an append.
		releaseFetchParts(parts)
		if wake == nil {
			wake = make(chan struct{}, 1)
			for _, fp := range parts {
				fp.p.addWaiter(wake)
			}
			continue // re-read once registered: an append may have raced
		}
		t := time.NewTimer(time.Until(deadline))
		waited := reqtime.Wait(ctx) // parked, as in Kafka's fetch purgatory
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		case <-b.stopping:
		}
		waited()
		t.Stop()
		if ctx.Err() != nil || b.isStopping() {
			deadline = time.Now()
		}
	}

	if r.fetchQuota != nil {
		// Client quotas (quota.go): over one, the fetch answers with the
		// throttle time and no records, as Kafka's throttled response.
		// The size is that of the answer as it would be sent: an
		// incremental session's leaves out the partitions with nothing
		// new (Kafka's IncrementalFetchContext.getResponseSize).
		sizeOf := func() int64 {
			var size int64
			withRecords := make(map[[2]int]bool, len(parts))
			for _, fp := range parts {
				switch {
				case fp.remote != nil:
					size += fp.remote.Size
				case fp.res != nil:
					size += fp.res.Size
				default:
					continue
				}
				withRecords[[2]int{fp.topicIdx, fp.partIdx}] = true
			}
			sent := *resp
			if session != nil && !fullSession {
				sent.Topics = b.fetchSessions.wouldSend(session, resp.Topics, withRecords, byID)
			}
			return size + int64(len(sent.AppendTo(nil)))
		}
		if d := r.fetchQuota(sizeOf); d > 0 {
			releaseFetchParts(parts)
			resp.Topics, resp.Brokers = nil, nil
			resp.ThrottleMillis = int32(min(d.Milliseconds(), math.MaxInt32))
			if session != nil {
				b.fetchSessions.throttled(session, fullSession, resp)
				session = nil
			}
			return &Reply{Msg: resp}, nil
		}
	}

	zc := &zeroCopy{}
	now := time.Now()
	for _, fp := range parts {
		rp := &resp.Topics[fp.topicIdx].Partitions[fp.partIdx]
		if fp.throttled && fp.res != nil {
			b.leaderQuota.record(fp.throttleRate, fp.res.Size, now)
			b.metrics.throttledBytes.WithLabelValues("leader").Add(float64(fp.res.Size))
		}
		if fp.remote != nil {
			regions := make([]region, len(fp.remote.Regions))
			for i, rg := range fp.remote.Regions {
				regions[i] = region{f: rg.File, pos: rg.Pos, len: rg.Len}
			}
			rp.RecordBatches = zc.add(regions, fp.remote.Size, fp.remote.Release)
			continue
		}
		if fp.res == nil || fp.res.Size == 0 {
			if fp.res != nil {
				fp.res.Release()
			}
			// Empty, not null: librdkafka (kcat) fails to parse a null
			// record set ("invalid MessageSetSize -1"); Kafka sends empty.
			rp.RecordBatches = []byte{}
			continue
		}
		regions := make([]region, len(fp.res.Regions))
		for i, rg := range fp.res.Regions {
			regions[i] = region{f: rg.File, pos: rg.Pos, len: rg.Len}
		}
		rp.RecordBatches = zc.add(regions, fp.res.Size, fp.res.Release)
	}
	if session != nil {
		// Drops only partitions without records (so without markers):
		// the markers keep their encode order.
		b.fetchSessions.finish(session, resp, fullSession, byID)
		session = nil
	}
	if len(zc.parts) == 0 {
		return &Reply{Msg: resp}, nil
	}
	return &Reply{Msg: resp, zc: zc}, nil
}

// recordFollowerFetches notes a follower's fetch offset (for the ISR and
// the high watermark) for each partition the read served, as Kafka's
// Partition.fetchRecords updates the follower's fetch state only after a
// successful read: a fetch that failed (OFFSET_OUT_OF_RANGE past the log
// end or below the log start, a storage error...) records nothing, so a
// divergent follower fetching past the leader's end is not taken as caught
// up. The answer's high watermark is read again afterwards, so a follower
// learns at once what its own fetch committed.
func (b *Broker) recordFollowerFetches(resp *kmsg.FetchResponse, parts []*fetchPart, replicaID int32, replicaEpoch int64) {
	for _, fp := range parts {
		rp := &resp.Topics[fp.topicIdx].Partitions[fp.partIdx]
		if !fp.replica || rp.ErrorCode != 0 {
			continue
		}
		if fp.p.recordFollowerFetch(replicaID, replicaEpoch, fp.offset) && b.store.repl != nil {
			b.store.repl.kickISR()
		}
		lso := fp.p.lastStableOffset() // first, as readFetchParts: never past the high watermark sent
		rp.HighWatermark, rp.LastStableOffset = fp.p.log.HighWatermark(), lso
	}
}

// readFetchParts reads every partition into fp.res and fills the
// partition headers; it returns the bytes ready and whether a partition
// failed (an error answers at once, as Kafka does).
//
// The bytes ready are what Kafka's readFromLog would read, which min_bytes
// is measured against: it slices each partition's log at its limit, a
// partial last batch included, where hotlog reads whole batches only. A
// read that stopped short of the visible end stopped for lack of budget,
// so Kafka would have read the whole budget there.
func (b *Broker) readFetchParts(ctx context.Context, resp *kmsg.FetchResponse, parts []*fetchPart, maxBytes int64, readCommitted bool) (ready int64, failed, pending bool) {
	var total int64 // the bytes read (whole batches)
	// wait bounds the waits on the bucket (the remote log's state and the
	// reads below the local log start) of the whole read: Kafka's
	// remote.fetch.max.wait.ms (remoteread.go).
	wait := ctx
	if g := b.tier(); g != nil {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, g.cfg.RemoteFetchMaxWait)
		defer cancel()
		for _, fp := range parts {
			fp.remotePending = false
		}
		b.startRemoteReads(parts, maxBytes, readCommitted)
		defer abandonRemoteReads(parts)
	}
	for _, fp := range parts {
		rp := &resp.Topics[fp.topicIdx].Partitions[fp.partIdx]
		fp.res, fp.remote = nil, nil
		if fp.led && !fp.p.isLeader(-1) {
			rp.ErrorCode = kerr.NotLeaderForPartition.Code
			rp.AbortedTransactions = nil
			failed = true
			continue
		}
		l := fp.p.log
		lso := fp.p.lastStableOffset()
		hw := l.HighWatermark()
		rp.ErrorCode = 0
		rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = hw, lso, l.LogStartOffset()
		rp.AbortedTransactions = nil
		if readCommitted {
			hw = lso // the visible end
		}
		fp.res, fp.remote = nil, nil
		if b.tier() != nil {
			start, err := b.logStartOffset(wait, fp.p)
			switch {
			case err == nil:
				rp.LogStartOffset = start
			case fp.offset < l.LogStartOffset() && wait.Err() != nil && ctx.Err() == nil:
				// The remote log's state is still loading (on its
				// own goroutine): answered without records, as a
				// read from the bucket not done in time.
				fp.remotePending, pending = true, true
				continue
			case fp.offset < l.LogStartOffset():
				// The remote log's state cannot be read (the
				// bucket is down): a read below the local log
				// gets the retriable KAFKA_STORAGE_ERROR.
				rp.ErrorCode = errCode(err)
				failed = true
				if ctx.Err() == nil {
					b.tier().logRemoteReadError(fp.p, fp.offset, err)
				}
				continue
			default:
				// Local data is served, but the log start of
				// both tiers is unknown: Kafka's
				// INVALID_LOG_START_OFFSET (-1), never the
				// local start as if there were no remote log.
				rp.LogStartOffset = -1
			}
		}
		if fp.offset < rp.LogStartOffset {
			// Below the log start of both tiers (DeleteRecords,
			// retention), whatever a tier still holds.
			rp.ErrorCode = kerr.OffsetOutOfRange.Code
			failed = true
			continue
		}
		// Size limits (KIP-74): partitions are read in request (or
		// session) order; the first partition with data gets at least its
		// first batch whole, later ones only what fits both their
		// partition_max_bytes and what is left of max_bytes, else nothing
		// (no error: the client asks again).
		budget := min(int64(fp.maxBytes), maxBytes-total)
		// takeRemote keeps a remote read in the answer (or drops it,
		// when it does not fit after an earlier partition's data).
		takeRemote := func() {
			switch {
			case fp.remotePending:
				pending = true
			case fp.remote == nil:
				failed = true
			case total > 0 && fp.remote.Size > budget:
				fp.remote.Release()
				fp.remote = nil
				rp.AbortedTransactions = nil
			default:
				total += fp.remote.Size
				ready += fp.remote.Size
			}
		}
		off := fp.offset
		if off < l.LogStartOffset() && fp.replica && b.tier() != nil {
			// A follower below the local log start, the records
			// between in the bucket (KIP-405): it starts at the
			// remote log end rather than copying them back
			// (replica_tiered.go).
			rp.ErrorCode = kerr.OffsetMovedToTieredStorage.Code
			failed = true
			continue
		}
		if off < l.LogStartOffset() {
			done, next := b.readRemote(ctx, wait, fp, rp, max(budget, 1), hw, readCommitted)
			if done {
				takeRemote()
				continue
			}
			if b.tier() != nil {
				// At or past the log start, and no batch at or after
				// off in the bucket (compaction emptied the remote
				// log's tail, or a gap up to the local log start):
				// the next records are the local log's, as a
				// compacted log's read moves on.
				off = max(next, l.LogStartOffset())
			}
		}
		if off < l.LogStartOffset() || off > l.LogEndOffset() {
			rp.ErrorCode = kerr.OffsetOutOfRange.Code
			failed = true
			continue
		}
		limit := hw
		if fp.replica {
			limit = l.LogEndOffset()
		}
		// A budget of 0 (max_bytes or partition_max_bytes 0, or spent)
		// still reads the first batch of the first partition with data,
		// as Kafka's minOneMessage.
		if off >= limit || (budget <= 0 && total > 0) {
			continue
		}
		if fp.throttled {
			// A throttled replica out of the ISR gets nothing while the
			// leader's quota is used up (KIP-73); it asks again.
			if over, _ := b.leaderQuota.exceeded(fp.throttleRate, time.Now()); over {
				b.metrics.throttledSkips.WithLabelValues("leader").Inc()
				continue
			}
		}
		if b.testHooks.beforeLocalRead != nil {
			b.testHooks.beforeLocalRead(fp.p, off)
		}
		res, err := l.Read(off, budget, limit)
		if err != nil && errors.Is(err, hotlog.ErrOffsetOutOfRange) && b.tier() != nil && off < l.LogStartOffset() {
			// Local retention moved the log start past off since it
			// was checked (the segment was uploaded, then deleted
			// here): the records are in the bucket, where Kafka reads
			// them too, not out of range.
			if fp.replica {
				rp.ErrorCode = kerr.OffsetMovedToTieredStorage.Code
				failed = true
				continue
			}
			if done, _ := b.readRemote(ctx, wait, fp, rp, max(budget, 1), hw, readCommitted); done {
				takeRemote()
				continue
			}
		}
		if err != nil {
			rp.ErrorCode = errCode(err)
			failed = true
			continue
		}
		// hotlog returns at least one whole batch: keep it only for the
		// first partition with data (Kafka reads nothing there either:
		// an incomplete first batch is dropped).
		if total > 0 && res.Size > budget {
			res.Release()
			continue
		}
		if res.NextOffset < limit && res.Size > 0 {
			ready += max(res.Size, budget) // more than the budget was there
		} else {
			ready += res.Size
		}
		fp.res = res
		total += res.Size
		if readCommitted {
			// The transactions with records in what this read returns
			// (Kafka bounds the list by the fetched data too).
			if rp.AbortedTransactions, err = fp.p.abortedTxns(off, min(res.NextOffset, hw)); err != nil {
				res.Release()
				fp.res = nil
				total -= res.Size
				rp.ErrorCode = errCode(err)
				failed = true
			}
		}
	}
	return ready, failed, pending
}

func releaseFetchParts(parts []*fetchPart) {
	for _, fp := range parts {
		if fp.res != nil {
			fp.res.Release()
			fp.res = nil
		}
		if fp.remote != nil {
			fp.remote.Release()
			fp.remote = nil
		}
	}
}
