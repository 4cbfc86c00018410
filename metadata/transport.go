package metadata

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// One TCP listener per node carries two protocols, told apart by the first
// byte a dialer sends (as consul does):
//
//	'R' raft's own RPCs (hashicorp/raft NetworkTransport)
//	'F' proposals and voter changes forwarded from a follower to the leader
//
// A forward connection carries request/response frames, one at a time:
//
//	request:  | u32 length | u8 op | body                      |
//	          op 1 propose: | u32 timeout ms | command bytes    |
//	          op 2 add voter: | varint id | string address      |
//	          op 3 remove voter: | varint id |
//	          op 4 read index: | u32 timeout ms |  (reply: Result with Version)
//	          op 5 identify: | varint asker id | (reply: | varint node id |
//	              string cluster id | u8 membership |: 0 no Raft configuration
//	              (a node waiting to join), 1 a configuration naming the
//	              asker, 2 one without it (another quorum))
//	          op 6 add observer: | varint id | string address |
//	          op 7 remove observer: | varint id |
//	response: | u32 length | u8 status | body                  |
//	          status 0: Result encoding (identify: its own body);
//	          status 1: u16 error code, string message
//
// Ops 2, 3 and 7 are served by the leader; op 5 by any node, a node waiting to
// be added included: the leader asks a new voter who it is before adding it
// (Node.checkNewVoter). A node that does not know op 5 answers it status 1.
// Op 6 is sent by a joining node to any voter it knows, which forwards it to
// the leader; a node that does not know it answers status 1 (INVALID_REQUEST),
// and the joining node then waits to be added by hand.
const (
	protoRaft    = 'R'
	protoForward = 'F'

	opPropose        = 1
	opAddVoter       = 2
	opRemoveVoter    = 3
	opReadIndex      = 4
	opIdentify       = 5
	opAddObserver    = 6
	opRemoveObserver = 7

	maxFrame = 16 << 20
)

// muxLayer is the raft.StreamLayer: Accept returns only connections that
// announced themselves as raft.
type muxLayer struct {
	ln        net.Listener
	advertise net.Addr
	dial      dialFunc
	raftConns chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

var _ raft.StreamLayer = (*muxLayer)(nil)

func (m *muxLayer) Accept() (net.Conn, error) {
	select {
	case c := <-m.raftConns:
		return c, nil
	case <-m.closed:
		return nil, net.ErrClosed
	}
}

func (m *muxLayer) Close() error {
	m.closeOnce.Do(func() { close(m.closed) })
	return m.ln.Close()
}

func (m *muxLayer) Addr() net.Addr { return m.advertise }

func (m *muxLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return dialProto(m.dial, string(address), timeout, protoRaft)
}

// dialFunc opens a TCP connection to another voter (Config.Dial).
type dialFunc func(address string, timeout time.Duration) (net.Conn, error)

func dialTCP(address string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", address, timeout)
}

func dialProto(dial dialFunc, address string, timeout time.Duration, proto byte) (net.Conn, error) {
	c, err := dial(address, timeout)
	if err != nil {
		return nil, err
	}
	// A read deadline too: on a TLS connection (Config.Dial wraps one for
	// the Raft port's mutual TLS) the first write runs the handshake, which
	// reads the peer's answer. A peer that accepts but never answers (a
	// stopped process, whose kernel still completes the TCP handshake, or
	// another program on the port) held that read for ever, and with it
	// raft's vote or replication goroutine, a forwarded proposal past its
	// context, and raft's Shutdown, which waits for those goroutines.
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte{proto}); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// acceptLoop owns the listener; each connection gets a goroutine that reads
// its protocol byte and either hands it to raft or serves forwards on it.
func (n *Node) acceptLoop() {
	for {
		c, err := n.mux.ln.Accept()
		if err != nil {
			return
		}
		if !n.trackConn(c) {
			c.Close()
			return
		}
		if !n.goTracked("", func() { n.serveConn(c) }) {
			n.untrackConn(c)
			c.Close()
			return
		}
	}
}

func (n *Node) trackConn(c net.Conn) bool {
	n.connMu.Lock()
	defer n.connMu.Unlock()
	if n.conns == nil {
		return false
	}
	n.conns[c] = struct{}{}
	return true
}

func (n *Node) untrackConn(c net.Conn) {
	n.connMu.Lock()
	defer n.connMu.Unlock()
	delete(n.conns, c)
}

func (n *Node) serveConn(raw net.Conn) {
	c := raw
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if n.cfg.TLS != nil {
		tc := tls.Server(raw, n.cfg.TLS)
		if err := tc.Handshake(); err != nil { // under the deadline
			n.logger.Warn("metadata transport: TLS handshake refused", "remote", raw.RemoteAddr().String(), "err", err)
			n.untrackConn(raw)
			raw.Close()
			return
		}
		c = tc
	}
	var proto [1]byte
	if _, err := io.ReadFull(c, proto[:]); err != nil {
		n.untrackConn(raw)
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	switch proto[0] {
	case protoRaft:
		// raft's transport owns it from here; it closes it on shutdown.
		n.untrackConn(raw)
		select {
		case n.mux.raftConns <- c:
		case <-n.mux.closed:
			c.Close()
		}
	case protoForward:
		defer n.untrackConn(raw)
		defer c.Close()
		// A follower may forward to us while Open is still starting raft
		// (a restarted voter that was the leader): wait until it exists.
		select {
		case <-n.raftReady:
		case <-n.mux.closed:
			return
		}
		n.serveForward(c)
	default:
		n.untrackConn(raw)
		c.Close()
	}
}

func (n *Node) serveForward(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		req, err := readFrame(r)
		if err != nil {
			return
		}
		resp := n.handleForward(req)
		if err := writeFrame(c, resp); err != nil {
			return
		}
	}
}

// forwardRequest is one request of the forward protocol, decoded.
type forwardRequest struct {
	op      byte
	timeout time.Duration // ops 1 and 4, whole milliseconds
	command []byte        // op 1: the encoded command
	id      int32         // ops 2, 3, 6, 7: the node; op 5: the asker
	addr    string        // ops 2 and 6
}

func (r forwardRequest) encode() []byte {
	e := encoder{}
	e.u8(r.op)
	switch r.op {
	case opPropose, opReadIndex:
		e.u32(uint32(min(r.timeout.Milliseconds(), math.MaxUint32)))
		e.buf = append(e.buf, r.command...)
	case opAddVoter, opAddObserver:
		e.varint(int64(r.id))
		e.str(r.addr)
	case opRemoveVoter, opRemoveObserver, opIdentify:
		e.varint(int64(r.id))
	}
	return e.buf
}

// decodeForward decodes a request; an unknown op or a truncated body is an
// error. Bytes after the fields an op has are ignored, as before (room for
// fields a later version adds; op 1's command is the rest).
func decodeForward(req []byte) (forwardRequest, error) {
	d := decoder{buf: req}
	r := forwardRequest{op: d.u8()}
	switch r.op {
	case opPropose, opReadIndex:
		r.timeout = time.Duration(d.u32()) * time.Millisecond
		if r.op == opPropose {
			r.command, d.buf = d.buf, nil
		}
	case opAddVoter, opAddObserver:
		r.id, r.addr = d.int32(), d.str()
	case opRemoveVoter, opRemoveObserver, opIdentify:
		r.id = d.int32()
	default:
		if d.err == nil {
			return r, fmt.Errorf("op %d", r.op)
		}
	}
	return r, d.err
}

func (n *Node) handleForward(req []byte) []byte {
	r, err := decodeForward(req)
	if err == nil && r.op == opIdentify {
		e := encoder{}
		e.u8(0)
		e.varint(int64(n.cfg.NodeID))
		e.str(n.clusterID())
		e.u8(n.membership(r.id))
		return e.buf
	}
	var res Result
	switch {
	case err != nil:
		err = reject(ErrInvalidRequest, "forward: %v", err)
	case r.op == opPropose:
		var cmd Command
		cmd, err = DecodeCommand(r.command)
		if err != nil {
			break
		}
		ctx, cancel := context.WithTimeout(n.ctx, r.timeout)
		res, err = n.proposeLocal(ctx, cmd)
		cancel()
	case r.op == opReadIndex:
		res.Version, err = n.readIndexLocal(r.timeout)
	case r.op == opAddVoter, r.op == opRemoveVoter, r.op == opRemoveObserver:
		// The follower's request carries no timeout: its own call gives up
		// at its deadline; the change is bounded here the same way.
		ctx, cancel := context.WithTimeout(n.ctx, voterChangeWait)
		err = n.changeVotersLocal(ctx, r.op, r.id, r.addr)
		cancel()
	case r.op == opAddObserver:
		// Sent to any voter by a node that does not know the leader: this
		// one forwards it there (changeVoters), within the same bound.
		ctx, cancel := context.WithTimeout(n.ctx, voterChangeWait)
		err = n.changeVoters(ctx, opAddObserver, r.id, r.addr)
		cancel()
	}
	if errors.Is(err, raft.ErrNotLeader) {
		err = fmt.Errorf("%w: %v", errNotSent, err)
	}
	if errors.Is(err, ErrClosed) {
		err = fmt.Errorf("%w: leader shutting down (outcome unknown)", ErrNotLeader)
	}
	e := encoder{}
	if err != nil {
		e.u8(1)
		e.buf = binary.BigEndian.AppendUint16(e.buf, codeOf(err))
		e.str(err.Error())
	} else {
		e.u8(0)
		res.encode(&e)
	}
	return e.buf
}

func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size == 0 || size > maxFrame {
		return nil, fmt.Errorf("metadata: forward frame of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func writeFrame(w io.Writer, b []byte) error {
	out := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(out, uint32(len(b)))
	_, err := w.Write(append(out, b...))
	return err
}

// errNotSent marks a forward that failed before the request was written, so
// retrying it cannot apply the command twice.
var errNotSent = errors.New("metadata: forward not sent")

// forwarder keeps a few idle connections to the leader.
type forwarder struct {
	dial dialFunc
	mu   sync.Mutex
	idle map[string][]*fwdConn
}

type fwdConn struct {
	c net.Conn
	r *bufio.Reader
}

func (f *forwarder) get(addr string, timeout time.Duration) (*fwdConn, error) {
	for {
		f.mu.Lock()
		cs := f.idle[addr]
		if len(cs) == 0 {
			f.mu.Unlock()
			break
		}
		c := cs[len(cs)-1]
		f.idle[addr] = cs[:len(cs)-1]
		f.mu.Unlock()
		// An idle connection the leader closed (it shut down) reads EOF at
		// once; a live one times out. Only live ones are reused, so a request
		// is not lost on a dead connection with an unknown outcome.
		if c.r.Buffered() == 0 && connAlive(c.c) {
			return c, nil
		}
		c.c.Close()
	}
	c, err := dialProto(f.dial, addr, timeout, protoForward)
	if err != nil {
		return nil, err
	}
	return &fwdConn{c: c, r: bufio.NewReader(c)}, nil
}

func (f *forwarder) put(addr string, c *fwdConn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.idle == nil || len(f.idle[addr]) >= 8 {
		c.c.Close()
		return
	}
	f.idle[addr] = append(f.idle[addr], c)
}

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, cs := range f.idle {
		for _, c := range cs {
			c.c.Close()
		}
	}
	f.idle = nil
}

// call sends one request to addr and returns the response body.
func (f *forwarder) call(ctx context.Context, addr string, req []byte) (Result, error) {
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			// The deadline passed; ctx.Err may not say so yet.
			return Result{}, fmt.Errorf("%w: %w", ErrNoQuorum, context.DeadlineExceeded)
		}
	}
	c, err := f.get(addr, min(timeout, 2*time.Second))
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", errNotSent, err)
	}
	_ = c.c.SetDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := writeFrame(c.c, req); err != nil {
		c.c.Close()
		return Result{}, fmt.Errorf("%w: forward to %s: %v (outcome unknown)", ErrNotLeader, addr, err)
	}
	resp, err := readFrame(c.r)
	if err != nil {
		c.c.Close()
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("%w: %w", ErrNoQuorum, ctx.Err())
		}
		return Result{}, fmt.Errorf("%w: forward to %s: %v (outcome unknown)", ErrNotLeader, addr, err)
	}
	if !stop() {
		c.c.Close()
	} else {
		_ = c.c.SetDeadline(time.Time{})
		f.put(addr, c)
	}
	d := decoder{buf: resp}
	var res Result
	switch d.u8() {
	case 0:
		res.decode(&d)
		if d.err != nil {
			return Result{}, fmt.Errorf("metadata: bad forward response: %v", d.err)
		}
		return res, nil
	default:
		if len(d.buf) < 2 {
			return Result{}, fmt.Errorf("metadata: bad forward response")
		}
		code := binary.BigEndian.Uint16(d.buf)
		d.buf = d.buf[2:]
		msg := d.str()
		return Result{}, errorFromCode(code, msg)
	}
}

// errNoIdentity: the node answered op 5 with an error (it predates it).
var errNoIdentity = errors.New("metadata: node does not tell its identity")

// Answers of op 5 about the answering node's Raft configuration.
const (
	memberNone      = 0 // no configuration: a node waiting to join
	memberOurs      = 1 // a configuration that names the asker
	memberElsewhere = 2 // a configuration without the asker: another quorum
)

// membership tells how this node's Raft configuration relates to voter
// asker.
func (n *Node) membership(asker int32) byte {
	if !n.hasConfiguration() {
		return memberNone
	}
	if _, ok := n.server(raft.ServerID(strconv.Itoa(int(asker)))); ok {
		return memberOurs
	}
	return memberElsewhere
}

// identity is a node's answer to op 5.
type identity struct {
	id         int32
	cluster    string
	membership byte
}

// identify asks the node at addr who it is (op 5) on a connection of its
// own, within timeout; asker is the asking node's id.
func identify(dial dialFunc, addr string, asker int32, timeout time.Duration) (identity, error) {
	deadline := time.Now().Add(timeout)
	c, err := dialProto(dial, addr, timeout, protoForward)
	if err != nil {
		return identity{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if err := writeFrame(c, forwardRequest{op: opIdentify, id: asker}.encode()); err != nil {
		return identity{}, err
	}
	resp, err := readFrame(bufio.NewReader(c))
	if err != nil {
		return identity{}, err
	}
	return decodeIdentity(resp)
}

// decodeIdentity decodes an answer to op 5.
func decodeIdentity(resp []byte) (identity, error) {
	d := decoder{buf: resp}
	if d.u8() != 0 {
		return identity{}, errNoIdentity
	}
	who := identity{id: d.int32(), cluster: d.str(), membership: d.u8()}
	if d.err != nil {
		return identity{}, fmt.Errorf("metadata: bad identify answer: %v", d.err)
	}
	return who, nil
}
