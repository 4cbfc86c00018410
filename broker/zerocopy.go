package broker

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sediment-io/sediment/internal/vfs"
)

// Zero-copy Fetch replies.
//
// The fetch handler builds an ordinary kmsg.FetchResponse, but each
// partition's RecordBatches holds a 16-byte marker instead of the records:
// 12 random bytes drawn once per process and the partition's index in
// encode order. The writer encodes the response with kmsg, finds the
// markers in order, and writes the bytes around them with the real length
// prefix in place of the marker's, and the record regions straight from the
// segment files with sendfile(2):
//
//	encoded:  [hdr ... len=16 MARKER0 ... len=16 MARKER1 ...]
//	on wire:  [hdr ... len=N0 ][sendfile N0 bytes][... len=N1][sendfile N1][...]
//
// A marker cannot occur by accident in the fields kmsg writes before it
// except with probability 2^-96 per position (topic names cannot contain
// its bytes' full range, and the other fields are small integers).

const markerLen = 16

var markerPrefix = func() (p [12]byte) {
	if _, err := rand.Read(p[:]); err != nil {
		panic(err)
	}
	return p
}()

func marker(i int) []byte {
	m := make([]byte, markerLen)
	copy(m, markerPrefix[:])
	binary.BigEndian.PutUint32(m[12:], uint32(i))
	return m
}

// regionFile is what a zero-copy region reads from: a segment file.
// Fd returns invalidFd when there is no OS descriptor (in-memory file
// systems); the writer then copies through ReadAt.
type regionFile interface {
	io.ReaderAt
	Fd() uintptr
}

const invalidFd = vfs.InvalidFd

type region struct {
	f        regionFile
	pos, len int64
}

type zcPart struct {
	regions []region
	size    int64
}

type zeroCopy struct {
	parts    []zcPart
	releases []func()
}

// add registers a partition's regions and returns the marker to put in
// its RecordBatches.
func (z *zeroCopy) add(regions []region, size int64, release func()) []byte {
	z.parts = append(z.parts, zcPart{regions: regions, size: size})
	if release != nil {
		z.releases = append(z.releases, release)
	}
	return marker(len(z.parts) - 1)
}

func (r *Reply) release() {
	if r == nil || r.zc == nil {
		return
	}
	for _, f := range r.zc.releases {
		f()
	}
	r.zc.releases = nil
}

func appendLen(dst []byte, n int64, flexible bool) []byte {
	if flexible {
		return binary.AppendUvarint(dst, uint64(n)+1)
	}
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

func (c *conn) writeZeroCopy(w *bufio.Writer, buf []byte, r *Reply, flexible bool) ([]byte, int64, error) {
	buf = r.Msg.AppendTo(buf)
	oldPrefix := 4
	if flexible {
		oldPrefix = 1 // uvarint(16+1)
	}
	type piece struct {
		b    []byte
		part *zcPart
	}
	pieces := make([]piece, 0, 3*len(r.zc.parts)+1)
	total := int64(len(buf) - 4)
	pos := 0
	for i := range r.zc.parts {
		p := &r.zc.parts[i]
		at := bytes.Index(buf[max(pos, 8):], marker(i))
		if at < 0 {
			return buf, 0, fmt.Errorf("broker: fetch marker %d not found", i)
		}
		at += max(pos, 8)
		prefix := appendLen(nil, p.size, flexible)
		pieces = append(pieces, piece{b: buf[pos : at-oldPrefix]}, piece{b: prefix}, piece{part: p})
		total += int64(len(prefix)-oldPrefix-markerLen) + p.size
		pos = at + markerLen
	}
	pieces = append(pieces, piece{b: buf[pos:]})
	if total > 1<<31-1 {
		return buf, 0, errors.New("broker: fetch response too large")
	}
	binary.BigEndian.PutUint32(buf, uint32(total))
	if c.b.cfg.WriteTimeout > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(c.b.cfg.WriteTimeout))
	}
	var scratch []byte
	for _, pc := range pieces {
		if pc.part == nil {
			if _, err := w.Write(pc.b); err != nil {
				return buf, 0, err
			}
			continue
		}
		for _, rg := range pc.part.regions {
			if err := c.sendRegion(w, rg, &scratch); err != nil {
				return buf, 0, err
			}
		}
	}
	return buf, total + 4, nil
}

// sendRegion writes one region to the connection: sendfile(2) when both
// ends are OS descriptors, else a buffered copy.
func (c *conn) sendRegion(w *bufio.Writer, rg region, scratch *[]byte) error {
	if tc, ok := c.nc.(*net.TCPConn); ok && !c.b.cfg.DisableSendfile && rg.f.Fd() != invalidFd {
		if err := w.Flush(); err != nil {
			return err
		}
		err := sendfile(tc, rg.f.Fd(), rg.pos, rg.len)
		if err == nil {
			c.b.metrics.sendfile.Add(float64(rg.len))
		}
		return err
	}
	sr := io.NewSectionReader(rg.f, rg.pos, rg.len)
	if *scratch == nil {
		*scratch = make([]byte, 64<<10)
	}
	n, err := io.CopyBuffer(w, sr, *scratch)
	if err == nil && n != rg.len {
		err = io.ErrUnexpectedEOF
	}
	c.b.metrics.copied.Add(float64(n))
	return err
}

func sendfile(tc *net.TCPConn, fd uintptr, pos, n int64) error {
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(out uintptr) bool {
		for n > 0 {
			chunk := n
			if chunk > 1<<30 {
				chunk = 1 << 30
			}
			k, err := unix.Sendfile(int(out), int(fd), &pos, int(chunk))
			if k > 0 {
				n -= int64(k)
			}
			switch {
			case errors.Is(err, syscall.EAGAIN):
				return false // wait until writable (honours the write deadline)
			case errors.Is(err, syscall.EINTR):
				continue
			case err != nil:
				serr = err
				return true
			case k == 0:
				serr = io.ErrUnexpectedEOF // the file is shorter than the region
				return true
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	return serr
}
