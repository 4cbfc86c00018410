package faulty

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Request kinds, as RequestKind names them.
const (
	KindGetObject               = "GetObject"
	KindHeadObject              = "HeadObject"
	KindPutObject               = "PutObject"
	KindCreateMultipartUpload   = "CreateMultipartUpload"
	KindUploadPart              = "UploadPart"
	KindCompleteMultipartUpload = "CompleteMultipartUpload"
	KindAbortMultipartUpload    = "AbortMultipartUpload"
	KindListObjects             = "ListObjects"
	KindDeleteObject            = "DeleteObject"
	KindDeleteObjects           = "DeleteObjects"
	KindOther                   = "Other"
)

// RequestKind names the S3 operation an HTTP request carries.
func RequestKind(req *http.Request) string {
	q := req.URL.Query()
	switch req.Method {
	case http.MethodGet:
		if q.Has("list-type") || q.Has("prefix") || q.Has("delimiter") {
			return KindListObjects
		}
		return KindGetObject
	case http.MethodHead:
		return KindHeadObject
	case http.MethodPut:
		if q.Has("partNumber") {
			return KindUploadPart
		}
		return KindPutObject
	case http.MethodPost:
		switch {
		case q.Has("uploads"):
			return KindCreateMultipartUpload
		case q.Has("uploadId"):
			return KindCompleteMultipartUpload
		case q.Has("delete"):
			return KindDeleteObjects
		}
	case http.MethodDelete:
		if q.Has("uploadId") {
			return KindAbortMultipartUpload
		}
		return KindDeleteObject
	}
	return KindOther
}

// HTTPRule describes one fault in the HTTP traffic.
type HTTPRule struct {
	// Kinds lists the request kinds (RequestKind) the rule applies to;
	// empty means all.
	Kinds []string
	// After, Times and Probability are as in Rule.
	After       int
	Times       int
	Probability float64

	// Latency delays the request before anything else.
	Latency time.Duration
	// Status, if set, answers the request with this status and an S3
	// error document (Code, default from the status: 503 SlowDown, 500
	// InternalError, 429 SlowDown, else InjectedFault), without sending
	// it on.
	Status int
	Code   string
	// DropConnection fails the request before sending it, as a reset
	// connection does.
	DropConnection bool
	// LostResponse sends the request (it takes effect) and then fails as
	// if the connection dropped before the answer arrived.
	LostResponse bool
	// TruncateBody sends the request and cuts the response body in half
	// (io.ErrUnexpectedEOF); for GetObject.
	TruncateBody bool
	// CorruptRequest flips one bit of the request body on the way, as a
	// bad NIC or proxy might; the service must refuse it (checksums).
	CorruptRequest bool
	// CorruptResponse flips one bit of the response body on the way.
	CorruptResponse bool
}

type httpRuleState struct {
	HTTPRule
	seen, fired int
}

// Transport is an http.RoundTripper that injects faults; give it to the s3
// backend through s3.Config.WrapTransport.
type Transport struct {
	base http.RoundTripper
	mu   struct {
		sync.Mutex
		rng      *rand.Rand
		rules    []*httpRuleState
		injected map[string]int
		requests map[string]int
	}
}

// NewTransport wraps base with the rules; seed drives Probability.
func NewTransport(base http.RoundTripper, seed uint64, rules ...HTTPRule) *Transport {
	t := &Transport{base: base}
	t.mu.rng = rand.New(rand.NewPCG(seed, 0x7a11))
	t.mu.injected = map[string]int{}
	t.mu.requests = map[string]int{}
	t.SetRules(rules...)
	return t
}

// SetRules replaces the rules.
func (t *Transport) SetRules(rules ...HTTPRule) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.rules = t.mu.rules[:0]
	for _, r := range rules {
		t.mu.rules = append(t.mu.rules, &httpRuleState{HTTPRule: r})
	}
}

// Injected returns how many faults fired on requests of the given kinds
// (all kinds if none given).
func (t *Transport) Injected(kinds ...string) int { return t.count(t.mu.injected, kinds) }

// Requests returns how many requests of the given kinds (all if none) were
// seen, faulty or not.
func (t *Transport) Requests(kinds ...string) int { return t.count(t.mu.requests, kinds) }

func (t *Transport) count(m map[string]int, kinds []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k, c := range m {
		if len(kinds) == 0 || contains(kinds, k) {
			n += c
		}
	}
	return n
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (t *Transport) match(kind string) *HTTPRule {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.requests[kind]++
	for _, r := range t.mu.rules {
		if len(r.Kinds) > 0 && !contains(r.Kinds, kind) {
			continue
		}
		r.seen++
		if r.seen <= r.After || (r.Times > 0 && r.fired >= r.Times) {
			continue
		}
		if r.Probability > 0 && r.Probability < 1 && t.mu.rng.Float64() >= r.Probability {
			continue
		}
		r.fired++
		t.mu.injected[kind]++
		rule := r.HTTPRule
		return &rule
	}
	return nil
}

// connError looks like a reset connection to the SDK's retryer.
type connError struct{ msg string }

func (e *connError) Error() string {
	return "faulty: " + e.msg + ": connection reset by peer (injected)"
}
func (e *connError) ConnectionError() bool { return true }
func (e *connError) Timeout() bool         { return false }
func (e *connError) Temporary() bool       { return true }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	kind := RequestKind(req)
	rule := t.match(kind)
	if rule == nil {
		return t.base.RoundTrip(req)
	}
	if rule.Latency > 0 {
		timer := time.NewTimer(rule.Latency)
		select {
		case <-req.Context().Done():
			timer.Stop()
			return nil, req.Context().Err()
		case <-timer.C:
		}
	}
	switch {
	case rule.Status != 0:
		drain(req)
		return errorResponse(req, rule.Status, rule.Code), nil
	case rule.DropConnection:
		drain(req)
		return nil, &connError{msg: kind + " before sending"}
	case rule.CorruptRequest && req.Body != nil && req.Body != http.NoBody:
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		if len(body) > 0 {
			body[len(body)/2] ^= 0x01
		}
		clone := req.Clone(req.Context())
		clone.Body = io.NopCloser(bytes.NewReader(body))
		clone.GetBody = nil
		return t.base.RoundTrip(clone)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	switch {
	case rule.LostResponse:
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, &connError{msg: kind + " answered, answer lost"}
	case rule.TruncateBody && resp.StatusCode/100 == 2:
		n := resp.ContentLength / 2
		resp.Body = &halfBody{rc: resp.Body, left: n}
	case rule.CorruptResponse && resp.StatusCode/100 == 2:
		resp.Body = &flipReader{rc: resp.Body}
	}
	return resp, nil
}

func drain(req *http.Request) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
}

func errorResponse(req *http.Request, status int, code string) *http.Response {
	if code == "" {
		switch status {
		case http.StatusServiceUnavailable, http.StatusTooManyRequests:
			code = "SlowDown"
		case http.StatusInternalServerError:
			code = "InternalError"
		default:
			code = "InjectedFault"
		}
	}
	body := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>`+
		`<Error><Code>%s</Code><Message>injected by faulty</Message><RequestId>faulty</RequestId></Error>`, code)
	if req.Method == http.MethodHead {
		body = ""
	}
	h := http.Header{}
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("x-amz-request-id", "faulty")
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// halfBody ends with io.ErrUnexpectedEOF after left bytes.
type halfBody struct {
	rc   io.ReadCloser
	left int64
}

func (h *halfBody) Read(p []byte) (int, error) {
	if h.left <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if int64(len(p)) > h.left {
		p = p[:h.left]
	}
	n, err := h.rc.Read(p)
	h.left -= int64(n)
	return n, err
}

func (h *halfBody) Close() error { return h.rc.Close() }
