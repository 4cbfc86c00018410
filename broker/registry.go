package broker

import (
	"context"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The handler registry. Each API lives in its own file named by key
// (00_produce.go, 01_fetch.go, …) whose init function calls regKey with the
// version range the file really handles, and sets handlers[key]. ApiVersions
// is built from this table, so an API without a file is never advertised.
//
// Packages outside broker (the group coordinator in broker/group, later the
// transaction coordinator) plug in through Register, which takes the same
// range and a Handler.

// Request is one decoded request as handlers see it.
type Request struct {
	Conn          *ConnInfo
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      *string
	Msg           kmsg.Request
	// Size is the frame size in bytes (header and body), for quotas and metrics.
	Size int

	ordered func()
	// mute holds the connection's later requests for a throttle time
	// (client quotas, quota.go); nil outside a connection.
	mute func(time.Duration)
	// fetchQuota, set by the quota middleware around a consumer's Fetch,
	// records the response's size (sizeOf, called only by a byte-rate
	// quota: it encodes the response) against the client's quotas once
	// the records are read, and returns the throttle time; when it is
	// above zero the fetch answers without records (quota.go).
	fetchQuota func(sizeOf func() int64) time.Duration
	// topicVisible, set by the authorizer's rule of a request that lists
	// topics page by page (DescribeTopicPartitions), says whether the
	// client may see a topic, so that the handler leaves the others out
	// before it cuts the page; nil: every topic.
	topicVisible func(name string) bool
}

// Ordered tells the connection that a serial request has fixed its order
// (for Produce: every partition's append holds its place in the log), so
// the next serial request may start while this one waits for its fsync.
// It is called at the latest when the handler returns.
func (r *Request) Ordered() {
	if r.ordered != nil {
		r.ordered()
	}
}

// Reply is what a handler returns. Msg is encoded at the request's version.
// Regions, if any, are zero-copy record regions spliced into the encoded
// Msg by the connection writer (Fetch). NoResponse suppresses the reply
// (Produce with acks=0).
type Reply struct {
	Msg        kmsg.Response
	zc         *zeroCopy
	NoResponse bool
	// Close, if set, closes the connection after the reply is written.
	Close bool
}

// Handler handles one request. A returned error closes the connection
// (a request that decoded but makes no sense at the protocol level); every
// Kafka-level failure is an error code inside the reply.
type Handler func(ctx context.Context, b *Broker, r *Request) (*Reply, error)

// Middleware wraps every handler; TLS-independent hooks such as SASL
// authentication state, per-API authorization and quotas go here, in one
// place, without touching handler logic. A middleware keeps nothing of the
// request (r.Msg and its byte slices) after next returns: a Produce
// request's frame is reused then (framepool.go).
type Middleware func(next Handler) Handler

type apiEntry struct {
	key, min, max int16
	handler       Handler
	// serial requests on one connection run one after another in request
	// order (Produce: idempotent sequences must reach the log in the order
	// the client sent them). Others run concurrently; replies are always
	// written in request order.
	serial bool
	// reuseFrame: the handler keeps no reference into the request after
	// it returns (kmsg's decoded []byte fields, a Produce's records, are
	// slices of the frame), so the frame's buffer goes back to the pool
	// then (framepool.go). Nothing it starts reads the request later.
	reuseFrame bool
}

var apis = map[int16]*apiEntry{}

// regKey registers a broker-internal API; the handler is set next to it.
func regKey(key, min, max int16) *apiEntry {
	if _, ok := apis[key]; ok {
		panic("broker: API registered twice: " + kmsg.NameForKey(key))
	}
	e := &apiEntry{key: key, min: min, max: max}
	apis[key] = e
	return e
}

// Register adds an API served by another package (for example the group
// coordinator). It must be called from an init function or before New.
func Register(key, min, max int16, h Handler) {
	regKey(key, min, max).handler = h
}

// supportedAPIs returns the advertised ranges, sorted by key.
func supportedAPIs() []kmsg.ApiVersionsResponseApiKey {
	var out []kmsg.ApiVersionsResponseApiKey
	for _, e := range apis {
		if e.handler == nil {
			continue
		}
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = e.key, e.min, e.max
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ApiKey < out[j].ApiKey })
	return out
}
