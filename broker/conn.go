package broker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ConnInfo describes a client connection to handlers and middleware.
type ConnInfo struct {
	ID       uint64
	Remote   net.Addr
	Listener string
	// SecurityProtocol is the listener's (security.go).
	SecurityProtocol string
	// Principal is the authenticated user (security.go): a SASL user
	// name, or a TLS client certificate's subject; empty means
	// anonymous. On a SASL connection it is set once, by the
	// SaslAuthenticate that succeeds, before any other request is read.
	Principal string

	sasl *saslConn // nil unless the listener is SASL_*
}

// maxInflight bounds the requests one connection may have in flight
// (decoded, not yet answered); the reader stops reading when it is reached.
const maxInflight = 64

// slot is one request's place in the connection's reply order.
type slot struct {
	hdr      reqHeader
	flexible bool
	done     chan struct{}
	reply    *Reply
	err      error
	// rawToken, if set, is a raw SASL token to send as it is, size
	// prefixed (SaslHandshake v0's exchange); reply is nil then.
	rawToken *[]byte
}

type conn struct {
	b *Broker
	// raw is the accepted connection (closed and interrupted through it);
	// nc is what requests are read from and replies written to: raw, or
	// the TLS connection over it, once serve has set it up.
	raw   net.Conn
	nc    net.Conn
	lis   Listener
	info  ConnInfo
	log   *slog.Logger
	slots chan *slot

	ctx    context.Context
	cancel context.CancelFunc

	// lastSerial is closed when the previous serial request finished.
	lastSerial chan struct{}

	closeOnce sync.Once
	handlers  sync.WaitGroup
	stopRead  atomic.Bool
	// mutedUntil (Unix ns): no request is read or handled before it
	// (Request.mute: client quotas, quota.go).
	mutedUntil atomic.Int64
}

var connIDs atomic.Uint64

func newConn(b *Broker, nc net.Conn, l Listener) *conn {
	ctx, cancel := context.WithCancel(b.ctx)
	c := &conn{
		b:      b,
		raw:    nc,
		nc:     nc,
		lis:    l,
		info:   ConnInfo{ID: connIDs.Add(1), Remote: nc.RemoteAddr(), Listener: l.Name, SecurityProtocol: l.SecurityProtocol},
		slots:  make(chan *slot, maxInflight),
		ctx:    ctx,
		cancel: cancel,
	}
	c.log = b.log.With("conn", c.info.ID, "remote", c.info.Remote.String())
	done := make(chan struct{})
	close(done)
	c.lastSerial = done
	return c
}

// serve runs the connection until the peer leaves, a frame is malformed or
// the broker shuts down. It returns after every handler and the writer are done.
func (c *conn) serve() {
	c.b.metrics.connections.Inc()
	defer c.b.metrics.connections.Dec()
	nc, sc, principal, err := c.b.secure(c.raw, c.lis)
	if err != nil {
		c.log.Info("closing connection", "err", err)
		c.cancel()
		c.raw.Close()
		return
	}
	c.nc, c.info.sasl, c.info.Principal = nc, sc, principal
	if sc != nil {
		sc.loggedIn = c.afterLogin
	}
	writerDone := make(chan struct{})
	go pprof.Do(c.ctx, pprof.Labels("sediment", "conn-writer"), func(context.Context) {
		defer close(writerDone)
		c.writeLoop()
	})
	c.readLoop()
	close(c.slots)
	<-writerDone
	c.handlers.Wait()
	if c.b.shares != nil {
		c.b.shares.connClosed(c.info.ID) // its share sessions' records go back
	}
	c.cancel()
	c.raw.Close()
}

// shutdown stops reading new requests; in-flight requests finish and their
// replies are written before the connection closes.
func (c *conn) shutdown() {
	c.stopRead.Store(true)
	c.raw.SetReadDeadline(time.Now())
}

// afterLogin replaces the login's read deadline (handshakeTimeout after
// the connection), under which the reader may already wait for the next
// request, by the idle one, or none.
func (c *conn) afterLogin() {
	if idle := c.b.cfg.ConnectionsMaxIdle; idle > 0 {
		c.nc.SetReadDeadline(time.Now().Add(idle))
	} else {
		c.nc.SetReadDeadline(time.Time{})
	}
	if c.stopRead.Load() { // shutdown's deadline stands
		c.raw.SetReadDeadline(time.Now())
	}
}

func (c *conn) kill() {
	c.closeOnce.Do(func() {
		c.cancel()
		c.raw.Close()
	})
}

func (c *conn) readLoop() {
	var sizeBuf [4]byte
	maxSize := c.b.cfg.SocketRequestMaxBytes
	authBy := time.Now().Add(handshakeTimeout)
	sc := c.info.sasl
	// bounds are a frame's: not authenticated yet, small frames only
	// (perhaps a raw SASL token, SaslHandshake v0, checked below). Taken
	// once the size has come, not before the read waits: the login's
	// answer, written after done is set, may have let the client send a
	// large first request (a Produce) while the reader waited.
	bounds := func() (int32, int32) {
		if sc != nil && !sc.done.Load() {
			return 0, min(maxSize, saslMaxReceive)
		}
		return 8, maxSize
	}
	for first := true; ; first = false {
		if sc != nil && !sc.done.Load() {
			// The whole exchange within handshakeTimeout (afterLogin
			// moves the deadline when the login succeeds).
			c.nc.SetReadDeadline(authBy)
		} else if idle := c.b.cfg.ConnectionsMaxIdle; idle > 0 {
			c.nc.SetReadDeadline(time.Now().Add(idle))
		}
		// Checked after setting the idle deadline: shutdown stores the
		// flag before moving the deadline to now, so one of the two
		// stops this read.
		if c.stopRead.Load() {
			return
		}
		fr, err := readFrame(c.nc, &sizeBuf, bounds, c.reserve, c.overdraw)
		if err != nil {
			switch {
			case errors.Is(err, errFrameSize):
				c.log.Warn("closing connection", "err", err)
			case !errors.Is(err, io.EOF) && !c.stopRead.Load():
				c.log.Debug("read failed", "err", err)
			}
			return
		}
		size := int32(len(fr.b))
		c.b.metrics.bytesIn.Add(float64(size + 4))
		// Loaded after the read: the handshake that switches to raw
		// tokens may have finished while the reader waited.
		raw := sc != nil && !sc.done.Load() && sc.raw.Load()
		if first && sc != nil && !raw && c.legacyGSSAPI(sc, fr.b) {
			raw = true
		}
		if !raw && size < 8 {
			c.reserve(-int64(size))
			fr.release()
			c.log.Warn("closing connection", "err", fmt.Errorf("%w: %d", errFrameSize, size))
			return
		}
		if raw {
			s, ok := c.rawSASLToken(sc, fr.b)
			c.reserve(-int64(size))
			fr.release()
			if !ok {
				return
			}
			c.slots <- s
			continue
		}
		if !c.waitMuted() {
			c.reserve(-int64(size))
			fr.release()
			return
		}
		s, run, ok := c.decode(fr)
		if !ok {
			c.reserve(-int64(size))
			fr.release() // nothing decoded is kept
			return
		}
		if run == nil {
			c.reserve(-int64(size))
			fr.release() // answered without decoding the body
		}
		c.slots <- s
		if run != nil {
			c.handlers.Add(1)
			go run()
		}
	}
}

var errFrameSize = errors.New("broker: request size out of bounds")

// readFrame reads one size-prefixed frame. The size is checked against
// bounds() [minSize, maxSize] (8 for a request: its fixed header), taken
// once the size has been read, before anything is allocated; a short read
// is an error.
// reserve, if set, is called before the allocation (the broker's memory
// budget); it waits for the bytes, returns false to abandon the read, and
// gives bytes back when called with a negative count. A frame of up to
// eagerFrame bytes is reserved and allocated whole at once; a larger one
// takes eagerFrame first, then grows its buffer (and its reservation) as
// its bytes arrive, each step at most doubling what has come, through
// overdraw, which takes the bytes without waiting: a connection that
// announces a large frame and stalls holds at most eagerFrame of the
// budget, not the size it announced (six such connections used to stall
// every client of the broker for the idle timeout), and a frame partly read
// never waits for budget that other partly read frames hold. The frame
// costs a copy of what came at each growth, at most its size in all. The
// caller releases the frame once nothing refers to its bytes
// (framepool.go).
func readFrame(r io.Reader, sizeBuf *[4]byte, bounds func() (minSize, maxSize int32), reserve func(int64) bool, overdraw func(int64)) (*requestFrame, error) {
	if _, err := io.ReadFull(r, sizeBuf[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
	if minSize, maxSize := bounds(); size < minSize || size > maxSize {
		return nil, fmt.Errorf("%w: %d (max %d)", errFrameSize, size, maxSize)
	}
	first := min(int(size), eagerFrame)
	if reserve != nil && !reserve(int64(first)) {
		return nil, errBudget
	}
	frame := newRequestFrame(first)
	got := 0
	for {
		n, err := io.ReadFull(r, frame.b[got:])
		got += n
		if err != nil {
			if reserve != nil {
				reserve(-int64(len(frame.b)))
			}
			frame.release()
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // after the size, or a part
			}
			return nil, err
		}
		if got == int(size) {
			return frame, nil
		}
		next := newRequestFrame(min(int(size), 2*got))
		if overdraw != nil {
			overdraw(int64(len(next.b) - len(frame.b)))
		}
		copy(next.b, frame.b[:got])
		frame.release()
		frame = next
	}
}

// eagerFrame is the most of a frame readFrame reserves before its bytes
// come: a Produce of one 1 MiB batch is read at once, without a copy.
const eagerFrame = 1<<20 + 64<<10

// overdraw takes n bytes of the broker's request budget at once, past its
// limit if need be (a frame partly read, growing as its bytes come).
func (c *conn) overdraw(n int64) { c.b.budget.overdraw(n) }

var errBudget = errors.New("broker: shutting down while waiting for request memory")

// reserve takes n bytes of the broker's request budget (a negative n gives
// them back).
func (c *conn) reserve(n int64) bool {
	if n < 0 {
		c.b.budget.release(-n)
		return true
	}
	return c.b.budget.acquire(c.ctx, n)
}

// decode turns a frame into a slot and the function that handles it. ok is
// false when the connection must close. run releases the frame when the
// API's handler keeps nothing of it (apiEntry.reuseFrame); otherwise the
// buffer is left to the garbage collector.
func (c *conn) decode(fr *requestFrame) (s *slot, run func(), ok bool) {
	frame := fr.b
	hdr, err := parseFixedHeader(frame)
	if err != nil {
		return nil, nil, false
	}
	s = &slot{hdr: hdr, done: make(chan struct{})}
	if sc := c.info.sasl; sc != nil && !sc.done.Load() && !saslPreAuthAPI(hdr.key) {
		// As Kafka: anything but the SASL exchange before it has
		// succeeded closes the connection; once the handshake has
		// chosen a mechanism, after the request's own answer with
		// ILLEGAL_SASL_STATE (illegalSASLState).
		c.log.Info("closing connection: request before SASL authentication", "api", kmsg.NameForKey(hdr.key))
		if sc.handshaken() && c.illegalSASLState(s, frame) {
			return s, nil, true
		}
		return nil, nil, false
	} else if sc != nil && hdr.key != 17 && hdr.key != 36 && sc.reauth.Load() {
		// As Kafka's SaslServerAuthenticator: after a
		// re-authentication's handshake only its SaslAuthenticate may
		// come; anything else is an illegal SASL state, answered so
		// and then closed (illegalSASLState).
		c.log.Info("closing connection: request during SASL re-authentication", "api", kmsg.NameForKey(hdr.key), "principal", c.info.Principal)
		if c.illegalSASLState(s, frame) {
			return s, nil, true
		}
		return nil, nil, false
	} else if sc != nil && hdr.key != 17 && hdr.key != 36 && sc.sessionExpired(time.Now()) {
		// KIP-368: the session ended and the client did not log in
		// again.
		c.log.Info("closing connection: SASL session expired", "api", kmsg.NameForKey(hdr.key), "principal", c.info.Principal)
		return nil, nil, false
	}
	e := apis[hdr.key]
	if e == nil || e.handler == nil {
		c.log.Warn("closing connection: unsupported API", "key", hdr.key, "version", hdr.version)
		return nil, nil, false
	}
	if hdr.version < e.min || hdr.version > e.max {
		if hdr.key != 18 {
			// As Kafka does: a version that was never advertised is a
			// client bug; the request cannot be parsed, so the
			// connection closes.
			c.log.Warn("closing connection: unsupported version", "api", kmsg.NameForKey(hdr.key), "version", hdr.version)
			return nil, nil, false
		}
		// ApiVersions newer than we know: the v0-shaped answer with
		// UNSUPPORTED_VERSION and, as Kafka's (KIP-511), only our
		// ApiVersions range, so the client retries at the version it
		// names (franz-go takes a list of every range as the answer
		// itself, without the v3+ fields: no finalized features).
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.Version = 0
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = 18, e.min, e.max
		resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{k}
		s.hdr.version = 0
		s.reply = &Reply{Msg: resp}
		close(s.done)
		return s, nil, true
	}
	req, err := decodeBody(&s.hdr, frame)
	if err != nil {
		c.log.Warn("closing connection: malformed request", "api", kmsg.NameForKey(hdr.key), "version", hdr.version, "err", err)
		return nil, nil, false
	}
	s.flexible = req.IsFlexible()
	r := &Request{
		Conn:          &c.info,
		Key:           hdr.key,
		Version:       hdr.version,
		CorrelationID: hdr.correlationID,
		ClientID:      s.hdr.clientID,
		Msg:           req,
		Size:          len(frame),
		mute:          c.mute,
	}
	var prev chan struct{}
	if e.serial {
		var mine chan struct{}
		prev, mine = c.lastSerial, make(chan struct{})
		c.lastSerial = mine
		r.ordered = sync.OnceFunc(func() { close(mine) })
	}
	h := c.b.chains[hdr.key]
	run = func() {
		defer c.handlers.Done()
		defer close(s.done)
		defer c.reserve(-int64(len(frame)))
		if e.reuseFrame {
			// After the handler, its middleware and the deferred
			// Ordered: the request and its slices are dead then.
			defer fr.release()
		}
		if prev != nil {
			select {
			case <-prev:
			case <-c.ctx.Done():
				s.err = c.ctx.Err()
				r.ordered()
				return
			}
			defer r.ordered()
		}
		if !c.waitMuted() { // read before an earlier reply's throttle (quota.go)
			s.err = c.ctx.Err()
			return
		}
		start := time.Now()
		pprof.Do(c.ctx, pprof.Labels("sediment", "handler", "api", kmsg.NameForKey(hdr.key)), func(ctx context.Context) {
			s.reply, s.err = h(ctx, c.b, r)
		})
		c.b.metrics.observe(hdr.key, time.Since(start), s.err)
		if s.reply != nil && s.err == nil {
			c.b.metrics.countErrors(hdr.key, s.reply.Msg)
		}
	}
	return s, run, true
}

// replyWriters are the connections' write buffers: a connection takes one
// while it has replies to send and gives it back once it is idle, so that
// thousands of idle connections do not each hold 64 KiB (an operator review
// measured about 130 KB of heap per idle connection).
var replyWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

func (c *conn) writeLoop() {
	var w *bufio.Writer
	get := func() *bufio.Writer {
		if w == nil {
			w = replyWriters.Get().(*bufio.Writer)
			w.Reset(c.nc)
		}
		return w
	}
	failed := false
	var buf []byte
	// idle gives the writer back once everything in it is sent, and drops
	// an encoding buffer a large reply grew.
	idle := func() {
		if w != nil && (w.Buffered() == 0 || failed) {
			w.Reset(nil)
			replyWriters.Put(w)
			w = nil
		}
		if cap(buf) > 64<<10 {
			buf = nil
		}
	}
	defer idle()
	flush := func() error {
		if w == nil {
			return nil
		}
		return w.Flush()
	}
	for s := range c.slots {
		select {
		case <-s.done:
		default:
			// The next reply is not ready (a long poll, an fsync):
			// send what is buffered rather than hold it behind.
			if !failed {
				if err := flush(); err != nil {
					failed = true
					c.kill()
				}
				idle()
			}
			<-s.done
		}
		if failed {
			s.reply.release()
			continue
		}
		if s.rawToken != nil {
			if err := writeRawToken(get(), *s.rawToken); err != nil {
				failed = true
				c.kill()
			}
			continue
		}
		if s.err != nil {
			c.log.Warn("closing connection: handler failed", "api", kmsg.NameForKey(s.hdr.key), "err", s.err)
			failed = true
			c.kill()
			continue
		}
		if s.reply == nil || s.reply.NoResponse {
			if s.reply != nil && s.reply.Close {
				flush()
				failed = true
				c.kill()
			} else if len(c.slots) == 0 {
				// An earlier reply written while this one (an
				// acks=0 Produce) was queued is still buffered:
				// nothing else would send it until the client
				// sends again.
				if err := flush(); err != nil {
					failed = true
					c.kill()
				}
				idle()
			}
			continue
		}
		var n int64
		var err error
		buf, n, err = c.writeReply(get(), buf[:0], s)
		s.reply.release()
		c.b.metrics.bytesOut.Add(float64(n))
		if err == nil && len(c.slots) == 0 {
			err = flush()
		}
		if err == nil && s.reply.Close {
			err = errors.New("closing after reply")
		}
		if err != nil {
			c.log.Debug("write failed", "err", err)
			failed = true
			c.kill()
		}
		if len(c.slots) == 0 {
			idle()
		}
	}
	if !failed {
		flush()
	}
}

func (c *conn) writeReply(w *bufio.Writer, buf []byte, s *slot) ([]byte, int64, error) {
	r := s.reply
	r.Msg.SetVersion(s.hdr.version)
	flexible := r.Msg.IsFlexible()
	buf = appendResponseHeader(buf, s.hdr.key, flexible, s.hdr.correlationID)
	if r.zc == nil {
		buf = r.Msg.AppendTo(buf)
		binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
		if c.b.cfg.WriteTimeout > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(c.b.cfg.WriteTimeout))
		}
		_, err := w.Write(buf)
		return buf, int64(len(buf)), err
	}
	return c.writeZeroCopy(w, buf, r, flexible)
}

// illegalSASLState answers a request that came where only SaslAuthenticate
// may (after a SASL handshake) as Kafka's SaslServerAuthenticator does:
// the request's error response with ILLEGAL_SASL_STATE, then the connection
// closes. Kafka's error responses set every item's code; here the code goes
// into the response's top-level ErrorCode, so a request whose response has
// none (of a version that has none), or that does not decode, is closed
// unanswered. It reports whether s now holds that answer.
func (c *conn) illegalSASLState(s *slot, frame []byte) bool {
	e := apis[s.hdr.key]
	if e == nil || e.handler == nil || s.hdr.version < e.min || s.hdr.version > e.max {
		return false
	}
	req, err := decodeBody(&s.hdr, frame)
	if err != nil {
		return false
	}
	resp := req.ResponseKind()
	resp.SetVersion(s.hdr.version)
	f := reflect.ValueOf(resp).Elem().FieldByName("ErrorCode")
	if !f.IsValid() || f.Kind() != reflect.Int16 || !versionHasErrorCode(resp) {
		return false
	}
	f.SetInt(int64(kerr.IllegalSaslState.Code))
	s.flexible = req.IsFlexible()
	s.reply = &Reply{Msg: resp, Close: true}
	close(s.done)
	return true
}

// versionHasErrorCode reports whether resp, at its version, writes its
// top-level ErrorCode: the encoding with a code of 1 differs from the one
// with 0.
func versionHasErrorCode(resp kmsg.Response) bool {
	f := reflect.ValueOf(resp).Elem().FieldByName("ErrorCode")
	old := f.Int()
	defer f.SetInt(old)
	f.SetInt(0)
	a := resp.AppendTo(nil)
	f.SetInt(1)
	return !bytes.Equal(a, resp.AppendTo(nil))
}

// decodeBody decodes the rest of the header and the body of a request
// whose key and version were checked against the registry.
func decodeBody(h *reqHeader, frame []byte) (kmsg.Request, error) {
	req := kmsg.RequestForKey(h.key)
	if req == nil || h.version < 0 || h.version > req.MaxVersion() {
		return nil, errMalformed
	}
	req.SetVersion(h.version)
	body, err := parseRest(h, frame, req.IsFlexible())
	if err != nil {
		return nil, err
	}
	if err := req.ReadFrom(body); err != nil {
		return nil, err
	}
	return req, nil
}
