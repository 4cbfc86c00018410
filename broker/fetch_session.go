package broker

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch sessions (KIP-227, Fetch v7+). A client opens a session with a full
// fetch (session id 0, epoch 0); the broker remembers the partitions and
// their fetch positions, and later requests (same id, next epoch) list only
// the partitions that changed and the ones to forget. The reply of an
// incremental fetch carries only partitions with records, an error, or a
// changed high watermark, last stable offset or log start offset.
//
// Sessions live in one cache per broker, bounded (the least recently used
// is evicted when full); an evicted or unknown session answers
// FETCH_SESSION_ID_NOT_FOUND and the client starts over with a full fetch.
//
// Session ids are random (as Kafka's are), never a counter: a client that
// starts over sends a full fetch carrying its old id, which closes the
// session of that id. After a broker restart a counter would hand out the
// same small ids again, so one client's reset would close another client's
// brand-new session (and that one's reset the next, ...).

const maxFetchSessions = 1000

type sessionKey struct {
	topic     string
	topicID   [16]byte
	partition int32
}

type sessionPart struct {
	key               sessionKey
	req               kmsg.FetchRequestTopicPartition
	hw, lso, logStart int64
	sent              bool // reported at least once
}

type fetchSession struct {
	id       int32
	epoch    int32 // the epoch the next request must carry
	parts    map[sessionKey]*sessionPart
	order    []sessionKey // insertion order, for stable replies
	lastUsed time.Time
	busy     bool
	byID     bool // opened with topic ids (v13+): its keys are ids, not names
}

type fetchSessions struct {
	mu sync.Mutex
	m  map[int32]*fetchSession
}

// sessionFetch resolves a request's session. It returns the topics to read
// (the whole session for an incremental fetch), the session (nil when
// sessionless) and an error code for the whole request.
func (fs *fetchSessions) begin(req *kmsg.FetchRequest, byID bool) ([]kmsg.FetchRequestTopic, *fetchSession, int16) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m == nil {
		fs.m = make(map[int32]*fetchSession)
	}
	key := func(t *kmsg.FetchRequestTopic, p int32) sessionKey {
		if byID {
			return sessionKey{topicID: t.TopicID, partition: p}
		}
		return sessionKey{topic: t.Topic, partition: p}
	}
	switch {
	case req.SessionEpoch == -1: // sessionless; closes the named session
		delete(fs.m, req.SessionID)
		return req.Topics, nil, 0
	case req.SessionEpoch == 0: // a new session with a full fetch
		delete(fs.m, req.SessionID)
		// Provisional: it enters the cache (evicting another if full)
		// only when its answer goes out (finish), as Kafka creates a
		// session only for a response it sends, not a throttled one.
		s := &fetchSession{parts: map[sessionKey]*sessionPart{}, byID: byID}
		for i := range req.Topics {
			t := &req.Topics[i]
			for _, p := range t.Partitions {
				s.put(key(t, p.Partition), p)
			}
		}
		s.busy = true
		return req.Topics, s, 0
	}
	s := fs.m[req.SessionID]
	if s == nil {
		return nil, nil, kerr.FetchSessionIDNotFound.Code
	}
	if s.busy || req.SessionEpoch != s.epoch {
		return nil, nil, kerr.InvalidFetchSessionEpoch.Code
	}
	if s.byID != byID {
		// As Kafka's FetchManager.newContext: a session keyed by topic
		// ids takes only v13+ requests, one keyed by names only older.
		return nil, nil, kerr.FetchSessionTopicIDError.Code
	}
	s.busy = true
	for i := range req.Topics {
		t := &req.Topics[i]
		for _, p := range t.Partitions {
			s.put(key(t, p.Partition), p)
		}
	}
	for _, f := range req.ForgottenTopics {
		for _, p := range f.Partitions {
			k := sessionKey{topic: f.Topic, partition: p}
			if byID {
				k = sessionKey{topicID: f.TopicID, partition: p}
			}
			s.forget(k)
		}
	}
	// The whole session, grouped by topic in session order.
	var topics []kmsg.FetchRequestTopic
	idx := map[sessionKey]int{}
	for _, k := range s.order {
		sp := s.parts[k]
		tk := sessionKey{topic: k.topic, topicID: k.topicID}
		i, ok := idx[tk]
		if !ok {
			t := kmsg.NewFetchRequestTopic()
			t.Topic, t.TopicID = k.topic, k.topicID
			topics = append(topics, t)
			i = len(topics) - 1
			idx[tk] = i
		}
		topics[i].Partitions = append(topics[i].Partitions, sp.req)
	}
	return topics, s, 0
}

// insertLocked gives a new session its id and puts it in the cache,
// evicting the least recently used idle session when full; false when
// every session is busy (the fetch is then answered sessionless).
func (fs *fetchSessions) insertLocked(s *fetchSession) bool {
	if len(fs.m) >= maxFetchSessions {
		var victim *fetchSession
		for _, s := range fs.m {
			if !s.busy && (victim == nil || s.lastUsed.Before(victim.lastUsed)) {
				victim = s
			}
		}
		if victim == nil {
			return false
		}
		delete(fs.m, victim.id)
	}
	for {
		s.id = 1 + rand.Int32N(math.MaxInt32) // 1 ... MaxInt32; 0 means "no session"
		if _, used := fs.m[s.id]; !used {
			break
		}
	}
	fs.m[s.id] = s
	return true
}

func (s *fetchSession) put(k sessionKey, p kmsg.FetchRequestTopicPartition) {
	if sp, ok := s.parts[k]; ok {
		sp.req = p
		return
	}
	s.parts[k] = &sessionPart{key: k, req: p}
	s.order = append(s.order, k)
}

func (s *fetchSession) forget(k sessionKey) {
	if _, ok := s.parts[k]; !ok {
		return
	}
	delete(s.parts, k)
	for i, o := range s.order {
		if o == k {
			s.order = append(s.order[:i:i], s.order[i+1:]...)
			break
		}
	}
}

// finish records what the reply reports and, for an incremental fetch,
// drops the partitions with nothing new. full is true for the session's
// first (full) fetch, which reports every partition.
func (fs *fetchSessions) finish(s *fetchSession, resp *kmsg.FetchResponse, full, byID bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	s.busy = false
	if full && !fs.insertLocked(s) {
		resp.SessionID = 0 // a cache full of busy sessions: sessionless
		return
	}
	s.advance(resp)
	var served []sessionKey // partitions that returned records
	topics := resp.Topics[:0]
	for _, t := range resp.Topics {
		parts := t.Partitions[:0]
		for _, p := range t.Partitions {
			k := sessionKey{topic: t.Topic, partition: p.Partition}
			if byID {
				k = sessionKey{topicID: t.TopicID, partition: p.Partition}
			}
			changed := s.changed(k, &p)
			if sp := s.parts[k]; sp != nil {
				sp.sent, sp.hw, sp.lso, sp.logStart = true, p.HighWatermark, p.LastStableOffset, p.LogStartOffset
				if p.ErrorCode != 0 {
					// As Kafka's maybeUpdateResponseData: once
					// the error clears, the partition is sent again.
					sp.hw = -1
				}
				if len(p.RecordBatches) > 0 {
					served = append(served, k)
				}
			}
			if full || changed {
				parts = append(parts, p)
			}
		}
		if len(parts) > 0 {
			t.Partitions = parts
			topics = append(topics, t)
		}
	}
	resp.Topics = topics
	if len(served) > 0 {
		// As Kafka does: partitions that returned records move to the
		// end of the session's order, so that under max_bytes the next
		// fetch serves the others first and none starves.
		moved := make(map[sessionKey]bool, len(served))
		for _, k := range served {
			moved[k] = true
		}
		order := make([]sessionKey, 0, len(s.order))
		for _, k := range s.order {
			if !moved[k] {
				order = append(order, k)
			}
		}
		s.order = append(order, served...)
	}
}

// wouldSend is the part of an incremental fetch's topics that finish would
// keep, given which partitions carry records ([topic, partition] indexes
// into topics), without changing the session.
func (fs *fetchSessions) wouldSend(s *fetchSession, topics []kmsg.FetchResponseTopic, withRecords map[[2]int]bool, byID bool) []kmsg.FetchResponseTopic {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []kmsg.FetchResponseTopic
	for ti, t := range topics {
		var parts []kmsg.FetchResponseTopicPartition
		for pi, p := range t.Partitions {
			k := sessionKey{topic: t.Topic, partition: p.Partition}
			if byID {
				k = sessionKey{topicID: t.TopicID, partition: p.Partition}
			}
			if withRecords[[2]int{ti, pi}] || s.changed(k, &p) {
				parts = append(parts, p)
			}
		}
		if len(parts) > 0 {
			t.Partitions = parts
			out = append(out, t)
		}
	}
	return out
}

// changed reports whether an incremental fetch reports partition k's
// answer p: new to the session, an error, records, a preferred read
// replica, or a moved high watermark, last stable or log start offset.
func (s *fetchSession) changed(k sessionKey, p *kmsg.FetchResponseTopicPartition) bool {
	sp := s.parts[k]
	return sp == nil || !sp.sent || p.ErrorCode != 0 || len(p.RecordBatches) > 0 || p.PreferredReadReplica >= 0 ||
		p.HighWatermark != sp.hw || p.LastStableOffset != sp.lso || p.LogStartOffset != sp.logStart
}

// abandon releases a session whose fetch failed before finish.
func (fs *fetchSessions) abandon(s *fetchSession) {
	fs.mu.Lock()
	s.busy = false
	fs.mu.Unlock()
}

// throttled ends a fetch answered without records for a client quota, as
// Kafka's throttled response: a new session is not kept (session id 0; the
// client's next fetch is full again), an incremental one moves to its next
// epoch but remembers nothing of this answer, so the next reports what
// this one would have.
func (fs *fetchSessions) throttled(s *fetchSession, full bool, resp *kmsg.FetchResponse) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	s.busy = false
	if full {
		resp.SessionID = 0 // never entered the cache
		return
	}
	s.advance(resp)
}

// advance moves a session to its next epoch (1 after the largest) and names
// it in the answer.
func (s *fetchSession) advance(resp *kmsg.FetchResponse) {
	s.epoch++
	if s.epoch <= 0 {
		s.epoch = 1
	}
	s.lastUsed = time.Now()
	resp.SessionID = s.id
}
