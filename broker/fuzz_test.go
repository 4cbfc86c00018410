package broker

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/xdg-go/scram"
)

// FuzzRequestFrame feeds arbitrary frames (the bytes after the length
// prefix) through the header parser and kmsg's decoders for every API the
// broker registers: no panic, no unbounded allocation.
func FuzzRequestFrame(f *testing.F) {
	var fm kmsg.RequestFormatter
	for _, req := range []kmsg.Request{
		kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrMetadataRequest(), kmsg.NewPtrProduceRequest(),
		kmsg.NewPtrFetchRequest(), kmsg.NewPtrCreateTopicsRequest(), kmsg.NewPtrListOffsetsRequest(),
	} {
		for _, v := range []int16{0, 3, 4, 9, 12} {
			if v > req.MaxVersion() {
				continue
			}
			req.SetVersion(v)
			f.Add(fm.AppendRequest(nil, req, 7)[4:])
		}
	}
	f.Add([]byte{0, 18, 0, 4, 0, 0, 0, 1, 0xff, 0xff, 0x80})
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, err := parseFixedHeader(frame)
		if err != nil {
			return
		}
		e := apis[h.key]
		if e == nil || h.version < e.min || h.version > e.max {
			return
		}
		req, err := decodeBody(&h, frame)
		if err != nil {
			return
		}
		// A decoded request re-encodes.
		_ = req.AppendTo(nil)
	})
}

// FuzzRequestStream: a byte stream as a connection reads it: frames are
// cut by their size prefix (bounded before allocation) and each is decoded,
// until the stream ends or a frame is refused. No panic, no allocation
// beyond the bound.
func FuzzRequestStream(f *testing.F) {
	var fm kmsg.RequestFormatter
	var stream []byte
	for _, req := range []kmsg.Request{kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrMetadataRequest(), kmsg.NewPtrFetchRequest()} {
		stream = fm.AppendRequest(stream, req, 1)
	}
	f.Add(stream)
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 9, 0, 18, 0, 0, 0, 0, 0, 1})
	const maxSize = 1 << 16
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		var sizeBuf [4]byte
		for {
			fr, err := readFrame(r, &sizeBuf, func() (int32, int32) { return 8, maxSize }, nil, nil)
			if err != nil {
				return
			}
			frame := fr.b
			if len(frame) < 8 || len(frame) > maxSize {
				t.Fatalf("frame of %d bytes passed the bound", len(frame))
			}
			h, err := parseFixedHeader(frame)
			if err != nil {
				t.Fatalf("a bounded frame has a fixed header: %v", err)
			}
			if e := apis[h.key]; e != nil && h.version >= e.min && h.version <= e.max {
				if _, err := decodeBody(&h, frame); err != nil {
					return // the connection would close here
				}
				fr.release()
			} else {
				return
			}
		}
	})
}

// FuzzProducerSnapshot: the snapshot decoder rejects garbage cleanly and
// round-trips what it accepts.
func FuzzProducerSnapshot(f *testing.F) {
	s := newProducerState()
	s.apply(batchInfo{producerID: 7, producerEpoch: 1, baseSequence: 0, records: 3, maxTimestamp: 5}, 10, 12, 100)
	s.apply(batchInfo{producerID: 9, producerEpoch: 0, baseSequence: 0, records: 1}, 13, 13, 100)
	f.Add(s.marshal())
	s.apply(batchInfo{producerID: 11, producerEpoch: 0, baseSequence: 0, records: 2, transactional: true}, 14, 15, 1000)
	s.apply(batchInfo{producerID: 11, producerEpoch: 0, baseSequence: -1, records: 1, transactional: true, control: true}, 16, 16, 1000)
	s.apply(batchInfo{producerID: 12, producerEpoch: 0, baseSequence: 0, records: 1, transactional: true}, 17, 17, 1000)
	f.Add(s.marshal())
	// A version 2 snapshot with one aborted transaction.
	f.Add(append(append([]byte{2}, marshalProducerStateV3(s)[1:]...), 1, 0, 0, 0, 0, 0, 0, 0, 11, 0, 0, 0, 0, 0, 0, 0, 14, 0, 0, 0, 0, 0, 0, 0, 16))
	// Version 3, and version 4 with coordinator epochs.
	f.Add(marshalProducerStateV3(s))
	s.apply(batchInfo{producerID: 12, producerEpoch: 0, baseSequence: -1, records: 1, transactional: true, control: true, coordinatorEpoch: 5}, 18, 18, 1000)
	f.Add(s.marshal())
	f.Add([]byte{1, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := unmarshalProducerState(b)
		if err != nil {
			return
		}
		again, err := unmarshalProducerState(st.marshal())
		if err != nil {
			t.Fatalf("re-decoding a marshalled state: %v", err)
		}
		for id, e := range st.m {
			if _, ok := st.open[id]; ok != (e.txnFirstOffset >= 0) {
				t.Fatalf("decoded producer %d: in the open set %v, txnFirstOffset %d", id, ok, e.txnFirstOffset)
			}
		}
		if len(again.m) != len(st.m) {
			t.Fatalf("round trip lost producers: %d != %d", len(again.m), len(st.m))
		}
		for id, e := range st.m {
			a := again.m[id]
			if a == nil || a.epoch != e.epoch || a.lastTimestamp != e.lastTimestamp || len(a.batches) != len(e.batches) ||
				a.txnFirstOffset != e.txnFirstOffset || a.coordinatorEpoch != e.coordinatorEpoch {
				t.Fatalf("round trip changed producer %d: %+v -> %+v", id, e, a)
			}
		}
	})
}

// FuzzControlBatch: the marker reader never panics on arbitrary bytes.
func FuzzControlBatch(f *testing.F) {
	f.Add(encodeMarkerBatch(1, 0, true, 0, 0))
	f.Add(encodeMarkerBatch(1, 0, false, 3, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, coordinatorEpoch, ok := controlType(b); ok && coordinatorEpoch < -1 {
			t.Fatalf("coordinator epoch %d", coordinatorEpoch)
		}
	})
}

// FuzzSASLExchange feeds arbitrary client messages to the PLAIN check and
// the SCRAM server (one known user, "u" with password "p"): no panic, and a
// login succeeds only as that user.
func FuzzSASLExchange(f *testing.F) {
	creds := map[string]scram.StoredCredentials{}
	for m, h := range scramHashes {
		c, _ := h.NewClientUnprepped("u", "p", "")
		cred, err := c.GetStoredCredentialsWithError(scram.KeyFactors{Salt: "salt", Iters: 4096})
		if err != nil {
			f.Fatal(err)
		}
		creds[m] = cred
	}
	lookup := func(user, m string) (scram.StoredCredentials, bool) {
		c, ok := creds[m]
		return c, ok && user == "u"
	}
	f.Add(false, []byte("\x00u\x00p"), []byte(""))
	f.Add(true, []byte("n,,n=u,r=abc"), []byte("c=biws,r=abcdef,p=AAAA"))
	f.Add(true, []byte("y,a=u,n=u=2C=3D,r=x,ext=1"), []byte("c=eSxhPXUs,r=x,p="))
	f.Add(false, []byte("n,,n=tok,r=abc,tokenauth=true"), []byte("c=biws,r=abcdef,p=AAAA"))
	// A delegation token "tok" (KIP-48) logs in as its owner "owner".
	tokenLookup := func(id, m string) (scram.StoredCredentials, string, time.Time, bool) {
		c, ok := creds[m]
		return c, "owner", time.Unix(4102444800, 0), ok && id == "tok"
	}
	f.Fuzz(func(t *testing.T, sha512 bool, first, final []byte) {
		if _, done, user, err := (&plainExchange{lookup: lookup}).step(first); err == nil && (!done || user != "u") {
			t.Fatalf("PLAIN %q: done %v as %q", first, done, user)
		}
		m := MechanismSCRAMSHA256
		if sha512 {
			m = MechanismSCRAMSHA512
		}
		x := &scramExchange{lookup: lookup, tokenLookup: tokenLookup, mechanism: m}
		if _, done, _, err := x.step(first); err != nil || done {
			return
		}
		want := "u"
		if x.tokenAuthenticated() {
			want = "owner"
		}
		if _, done, user, err := x.step(final); err == nil && (!done || user != want) {
			t.Fatalf("SCRAM: done %v as %q (token %v)", done, user, x.tokenAuthenticated())
		}
	})
}

// FuzzOAuthBearerExchange: arbitrary OAUTHBEARER client messages against
// the unsecured validator (the one that parses tokens itself): no panic,
// success only with a principal and an expiry, and a refused token answered
// with the error message of RFC 7628, after which the client's %x01 fails
// the login with that message.
func FuzzOAuthBearerExchange(f *testing.F) {
	v, err := newOAuthValidator(OAuthBearerConfig{Unsecured: true})
	if err != nil {
		f.Fatal(err)
	}
	good := unsecuredToken(map[string]any{"sub": "u", "exp": 4102444800})
	f.Add([]byte("n,,\x01auth=Bearer " + good + "\x01\x01"))
	f.Add([]byte("n,a=u,\x01host=h\x01auth=Bearer " + good + "\x01\x01"))
	f.Add([]byte("n,,\x01auth=Bearer e30.e30.\x01\x01"))
	f.Add([]byte("y,,\x01\x01"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		x := &oauthExchange{v: v}
		out, done, user, err := x.step(msg)
		switch {
		case err != nil:
		case done:
			if user == "" || x.expiry().IsZero() {
				t.Fatalf("%q: done as %q, expiry %v", msg, user, x.expiry())
			}
		default:
			if string(out) != oauthErrorStatus {
				t.Fatalf("%q: not done, no error, answered %q", msg, out)
			}
			var sf *saslFailure
			if _, done, _, err := x.step([]byte{1}); done || !errors.As(err, &sf) || sf.msg != oauthErrorStatus {
				t.Fatalf("%q: %%x01 after the error message: done %v, %v", msg, done, err)
			}
		}
	})
}

// FuzzPrincipalMapping: arbitrary rule lists and subjects: parsing either
// fails or gives a mapper whose Map never panics nor gives an empty
// principal (which would read as ANONYMOUS).
func FuzzPrincipalMapping(f *testing.F) {
	f.Add(`RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L,DEFAULT`, "CN=a,OU=b")
	f.Add(`RULE:^CN=([^,]*)\/x,.*$/u-$1-\$/U`, "CN=b/x,O=c")
	f.Add(`DEFAULT`, "")
	f.Fuzz(func(t *testing.T, rules, dn string) {
		m, err := ParsePrincipalMappingRules(rules)
		if err != nil {
			return
		}
		if p, err := m.Map(dn); err == nil && p == "" {
			t.Fatalf("rules %q map %q to an empty principal", rules, dn)
		}
	})
}
