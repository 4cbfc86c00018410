package broker

import (
	"encoding/binary"
	"errors"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Request header (kmsg has no exported header codec; the header is four
// fixed fields and, for flexible versions, a tag section):
//
//	+---------+-------------+----------------+--------------------+----------------+
//	| api key | api version | correlation id | client id          | tagged fields  |
//	| int16   | int16       | int32          | int16 len + bytes  | header v2 only |
//	+---------+-------------+----------------+--------------------+----------------+
//
// The client id is a nullable non-compact string even in header v2.
// Response header: correlation id (int32), then an empty tag section (one
// zero byte) for flexible responses, except ApiVersions which always uses
// response header v0.

var errMalformed = errors.New("broker: malformed request")

type headerReader struct {
	b   []byte
	bad bool
}

func (r *headerReader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *headerReader) Uvarint() uint32 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > 1<<31 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return uint32(v)
}

func (r *headerReader) Span(n int) []byte { return r.take(n) }
func (r *headerReader) Ok() bool          { return !r.bad }

type reqHeader struct {
	key, version  int16
	correlationID int32
	clientID      *string
}

// parseHeader reads the fixed part of the header: key, version and
// correlation id (always present, so an unsupported request can still be
// answered or logged).
func parseFixedHeader(frame []byte) (reqHeader, error) {
	if len(frame) < 8 {
		return reqHeader{}, errMalformed
	}
	return reqHeader{
		key:           int16(binary.BigEndian.Uint16(frame[0:])),
		version:       int16(binary.BigEndian.Uint16(frame[2:])),
		correlationID: int32(binary.BigEndian.Uint32(frame[4:])),
	}, nil
}

// parseRest reads the client id and, if flexible, the header's tags, and
// returns the body.
func parseRest(h *reqHeader, frame []byte, flexible bool) ([]byte, error) {
	r := &headerReader{b: frame[8:]}
	lb := r.take(2)
	if r.bad {
		return nil, errMalformed
	}
	if l := int16(binary.BigEndian.Uint16(lb)); l >= 0 {
		s := string(r.take(int(l)))
		h.clientID = &s
	} else if l != -1 {
		return nil, errMalformed
	}
	if flexible {
		kmsg.SkipTags(r)
	}
	if r.bad {
		return nil, errMalformed
	}
	return r.b, nil
}

// appendResponseHeader appends a response's size placeholder and header.
func appendResponseHeader(dst []byte, key int16, flexible bool, correlationID int32) []byte {
	dst = append(dst, 0, 0, 0, 0) // size, patched later
	dst = binary.BigEndian.AppendUint32(dst, uint32(correlationID))
	if flexible && key != 18 {
		dst = append(dst, 0)
	}
	return dst
}
