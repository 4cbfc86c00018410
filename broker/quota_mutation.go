package broker

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The controller mutation quota (KIP-599, controller_mutation_rate): how
// many partitions per second a client may create (CreateTopics,
// CreatePartitions) or delete (DeleteTopics). As Kafka, it is a token
// bucket per quota entity (resolved as the byte-rate quotas are), holding
// at most rate x quota-window-num x quota-window-size tokens, one per
// partition:
//
//   - strict, for the versions that know THROTTLING_QUOTA_EXCEEDED
//     (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+): a topic
//     is admitted while the bucket is not below zero (so one request may
//     take it below), the next ones get THROTTLING_QUOTA_EXCEEDED and the
//     response the time until the bucket is back at zero;
//   - permissive, for older versions: everything is done, and the client is
//     throttled (throttle_time_ms, the connection muted) for the debt.
//
// Only successful mutations cost tokens; validate_only requests cost none.

// tokenBucket is Kafka's TokenBucket stat.
type tokenBucket struct {
	mu     sync.Mutex
	tokens float64
	lastMs int64
	init   bool
}

// refillLocked brings the bucket to nowMs at rate, capped at burst.
func (tb *tokenBucket) refillLocked(rate, burst float64, nowMs int64) {
	if !tb.init {
		tb.tokens, tb.lastMs, tb.init = burst, nowMs, true
	}
	tb.tokens = min(burst, tb.tokens+rate*float64(nowMs-tb.lastMs)/1000)
	tb.lastMs = nowMs
}

// throttleLocked is the time until the bucket is back at zero.
func (tb *tokenBucket) throttleLocked(rate float64) time.Duration {
	if tb.tokens >= 0 || rate <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(-tb.tokens/rate*1000)) * time.Millisecond
}

// bucket returns the token bucket of k, creating it.
func (q *quotas) bucket(k sensorKey) *tokenBucket {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.buckets == nil {
		q.mu.buckets = map[sensorKey]*tokenBucket{}
	}
	tb := q.mu.buckets[k]
	if tb == nil {
		tb = &tokenBucket{}
		q.mu.buckets[k] = tb
	}
	return tb
}

// mutation is one topic's worth of partitions created or deleted.
type mutation struct {
	name    string // for matching the result
	id      [16]byte
	permits float64
}

// mutationsOf lists what a request would mutate, and whether it is strict
// (and whether it is validate-only).
func (b *Broker) mutationsOf(r *Request) (muts []mutation, strict, validateOnly bool) {
	st := b.meta.State()
	partitionsOf := func(name string, id [16]byte) float64 {
		if n := topicName(st, name, id); n != "" {
			if t, ok := st.Topic(n); ok {
				return float64(len(t.Partitions))
			}
		}
		return 0
	}
	switch req := r.Msg.(type) {
	case *kmsg.CreateTopicsRequest:
		for _, t := range req.Topics {
			n := float64(t.NumPartitions)
			if len(t.ReplicaAssignment) > 0 {
				n = float64(len(t.ReplicaAssignment))
			} else if n <= 0 {
				n = float64(b.cfg.NumPartitions)
			}
			muts = append(muts, mutation{name: t.Topic, permits: n})
		}
		return muts, r.Version >= 6, req.ValidateOnly
	case *kmsg.CreatePartitionsRequest:
		for _, t := range req.Topics {
			muts = append(muts, mutation{name: t.Topic, permits: max(float64(t.Count)-partitionsOf(t.Topic, [16]byte{}), 0)})
		}
		return muts, r.Version >= 3, req.ValidateOnly
	case *kmsg.DeleteTopicsRequest:
		for _, n := range req.TopicNames {
			muts = append(muts, mutation{name: n, permits: partitionsOf(n, [16]byte{})})
		}
		for _, t := range req.Topics {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			muts = append(muts, mutation{name: name, id: t.TopicID, permits: partitionsOf(name, t.TopicID)})
		}
		return muts, r.Version >= 5, false
	}
	return nil, false, true
}

// mutationResults maps each topic of a CreateTopics, CreatePartitions or
// DeleteTopics response to its error code, by name and by id.
func mutationResults(m kmsg.Response) (byName map[string]int16, byID map[[16]byte]int16) {
	byName, byID = map[string]int16{}, map[[16]byte]int16{}
	switch resp := m.(type) {
	case *kmsg.CreateTopicsResponse:
		for _, t := range resp.Topics {
			byName[t.Topic] = t.ErrorCode
		}
	case *kmsg.CreatePartitionsResponse:
		for _, t := range resp.Topics {
			byName[t.Topic] = t.ErrorCode
		}
	case *kmsg.DeleteTopicsResponse:
		for _, t := range resp.Topics {
			if t.Topic != nil {
				byName[*t.Topic] = t.ErrorCode
			}
			byID[t.TopicID] = t.ErrorCode
		}
	}
	return byName, byID
}

// mutations applies the controller mutation quota around a CreateTopics,
// DeleteTopics or CreatePartitions.
func (q *quotas) mutations(ctx context.Context, b *Broker, r *Request, next Handler) (*Reply, error) {
	t := q.currentTable()
	if !t.any[quotaTypeMutation] {
		return next(ctx, b, r)
	}
	client := ""
	if r.ClientID != nil {
		client = *r.ClientID
	}
	rate, sk, ok := t.resolve(quotaTypeMutation, r.Conn.principal(), client)
	muts, strict, validateOnly := b.mutationsOf(r)
	if !ok || validateOnly || len(muts) == 0 {
		return next(ctx, b, r)
	}
	burst := rate * float64(q.numWindows) * float64(q.windowMs) / 1000
	tb := q.bucket(sk)

	// Strict: admit topics while the bucket is not below zero, charging
	// each; the rest are refused. (A topic the handler then fails is
	// refunded below.)
	var refused map[string]bool
	var refusedIDs map[[16]byte]bool
	charged := map[int]bool{}
	var d time.Duration
	if strict {
		tb.mu.Lock()
		tb.refillLocked(rate, burst, time.Now().UnixMilli())
		for i, m := range muts {
			if tb.tokens < 0 {
				if refused == nil {
					refused, refusedIDs = map[string]bool{}, map[[16]byte]bool{}
				}
				if m.name != "" {
					refused[m.name] = true
				} else {
					refusedIDs[m.id] = true
				}
				continue
			}
			tb.tokens -= m.permits
			charged[i] = true
		}
		d = tb.throttleLocked(rate)
		tb.mu.Unlock()
		if refused != nil {
			dropRefused(r.Msg, refused, refusedIDs)
		}
	}
	reply, err := next(ctx, b, r)
	if err != nil || reply == nil || reply.Msg == nil {
		return reply, err
	}
	// Settle: only successful mutations cost tokens.
	byName, byID := mutationResults(reply.Msg)
	tb.mu.Lock()
	tb.refillLocked(rate, burst, time.Now().UnixMilli())
	for i, m := range muts {
		code, found := byName[m.name]
		if m.name == "" {
			code, found = byID[m.id]
		}
		switch {
		case charged[i] && (!found || code != 0):
			tb.tokens += m.permits // refused by the handler: refund
		case !strict && found && code == 0:
			tb.tokens -= m.permits
		}
	}
	d = max(d, tb.throttleLocked(rate))
	tb.mu.Unlock()
	if refused != nil {
		appendRefused(reply.Msg, muts, refused, refusedIDs, d)
	}
	if d > 0 {
		q.throttleTime.WithLabelValues(quotaTypeNames[quotaTypeMutation]).Observe(d.Seconds())
		if r.mute != nil {
			r.mute(d)
		}
		if tr, ok := reply.Msg.(kmsg.SetThrottleResponse); ok {
			tr.SetThrottle(int32(min(d.Milliseconds(), math.MaxInt32)))
		}
	}
	return reply, nil
}

// dropRefused takes the refused topics out of the request.
func dropRefused(m kmsg.Request, names map[string]bool, ids map[[16]byte]bool) {
	switch req := m.(type) {
	case *kmsg.CreateTopicsRequest:
		req.Topics, _ = split(req.Topics, func(t *kmsg.CreateTopicsRequestTopic) bool { return !names[t.Topic] })
	case *kmsg.CreatePartitionsRequest:
		req.Topics, _ = split(req.Topics, func(t *kmsg.CreatePartitionsRequestTopic) bool { return !names[t.Topic] })
	case *kmsg.DeleteTopicsRequest:
		req.TopicNames, _ = split(req.TopicNames, func(n *string) bool { return !names[*n] })
		req.Topics, _ = split(req.Topics, func(t *kmsg.DeleteTopicsRequestTopic) bool {
			if t.Topic != nil {
				return !names[*t.Topic]
			}
			return !ids[t.TopicID]
		})
	}
}

// appendRefused answers the refused topics THROTTLING_QUOTA_EXCEEDED.
func appendRefused(m kmsg.Response, muts []mutation, names map[string]bool, ids map[[16]byte]bool, d time.Duration) {
	code := kerr.ThrottlingQuotaExceeded.Code
	msg := kmsg.StringPtr("The controller mutation quota is exceeded: retry in " + d.String())
	for _, mu := range muts {
		if (mu.name != "" && !names[mu.name]) || (mu.name == "" && !ids[mu.id]) {
			continue
		}
		switch resp := m.(type) {
		case *kmsg.CreateTopicsResponse:
			t := kmsg.NewCreateTopicsResponseTopic()
			t.Topic, t.ErrorCode, t.ErrorMessage, t.NumPartitions, t.ReplicationFactor = mu.name, code, msg, -1, -1
			resp.Topics = append(resp.Topics, t)
		case *kmsg.CreatePartitionsResponse:
			t := kmsg.NewCreatePartitionsResponseTopic()
			t.Topic, t.ErrorCode, t.ErrorMessage = mu.name, code, msg
			resp.Topics = append(resp.Topics, t)
		case *kmsg.DeleteTopicsResponse:
			t := kmsg.NewDeleteTopicsResponseTopic()
			if mu.name != "" {
				t.Topic = kmsg.StringPtr(mu.name)
			}
			t.TopicID, t.ErrorCode, t.ErrorMessage = mu.id, code, msg
			resp.Topics = append(resp.Topics, t)
		}
	}
}
