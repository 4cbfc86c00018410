package broker

import (
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"

	"github.com/sediment-io/sediment/broker/group"
)

// fuzzSource hands out the fuzzer's bytes as choices; once they run out
// every choice is 0 (zero values, empty lists).
type fuzzSource struct{ b []byte }

func (s *fuzzSource) byte() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

func (s *fuzzSource) uint64(n int) uint64 {
	var v uint64
	for range n {
		v = v<<8 | uint64(s.byte())
	}
	return v
}

// fuzzNames are the strings a field may take besides random ones: names
// the broker knows (the fuzz topic, its group, internal topics), Kafka's
// config names, and edge cases.
var fuzzNames = []string{"", "t", "g", "tx", "__consumer_offsets", "__transaction_state", "cleanup.policy",
	"compact", "retention.ms", "-1", "max.message.bytes", "User:*", "*", ".", "..", "a/b", strings.Repeat("x", 300),
	"segment.bytes", "remote.storage.enable", "min.insync.replicas", "share.auto.offset.reset", "PLAIN", "0", "root"}

// fuzzInt returns an integer of the given bit size: edge values, small
// ones, or any.
func (s *fuzzSource) fuzzInt(bits int) int64 {
	lo, hi := int64(-1)<<(bits-1), int64(1)<<(bits-1)-1
	switch c := s.byte(); c % 8 {
	case 0:
		return 0
	case 1:
		return int64(c>>3) % 4 // 0..3: partitions, versions, enums
	case 2:
		return -1 - int64(c>>3)%3 // -1, -2, -3: Kafka's sentinels
	case 3:
		return hi
	case 4:
		return lo
	case 5:
		return int64(s.byte())
	default:
		v := int64(s.uint64(bits / 8))
		return v << (64 - bits) >> (64 - bits) // sign-extend
	}
}

// fill gives v (a kmsg request, or part of one) values drawn from s: every
// integer, bool, string, byte slice and 16-byte id, and up to three
// elements of every list. name is the field's name (wait-like fields are
// bounded so that a request does not legitimately hold the connection).
func fill(v reflect.Value, s *fuzzSource, name string, depth int, records [][]byte, ids [][16]byte) {
	if depth > 6 {
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() || f.Name == "Version" || f.Name == "UnknownTags" {
				continue
			}
			fill(v.Field(i), s, f.Name, depth+1, records, ids)
		}
	case reflect.Bool:
		v.SetBool(s.byte()&1 == 1)
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x := s.fuzzInt(v.Type().Bits())
		if strings.Contains(name, "Timeout") || strings.Contains(name, "MaxWait") || strings.Contains(name, "Wait") {
			x = min(max(x, -1), 50) // no request waits long
		}
		v.SetInt(x)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(s.fuzzInt(v.Type().Bits())))
	case reflect.Float64:
		v.SetFloat(float64(s.fuzzInt(32)) / 8)
	case reflect.String:
		v.SetString(s.string())
	case reflect.Pointer:
		if s.byte()&3 == 0 {
			return // nil
		}
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), s, name, depth+1, records, ids)
		v.Set(p)
	case reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 && v.Len() == 16 {
			switch c := s.byte(); c % 3 {
			case 0: // zero
			case 1:
				if len(ids) > 0 {
					v.Set(reflect.ValueOf(ids[int(c>>2)%len(ids)]))
				}
			default:
				for i := range 16 {
					v.Index(i).SetUint(uint64(s.byte()))
				}
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			c := s.byte()
			switch {
			case c%4 == 0:
				v.SetBytes(nil)
			case c%4 == 1 && len(records) > 0:
				v.SetBytes(slices.Clone(records[int(c>>2)%len(records)]))
			default:
				b := make([]byte, int(s.byte())%64)
				for i := range b {
					b[i] = s.byte()
				}
				v.SetBytes(b)
			}
			return
		}
		n := int(s.byte()) % 4
		if depth > 4 {
			n = min(n, 1)
		}
		sl := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(sl.Index(i), s, name, depth+1, records, ids)
		}
		v.Set(sl)
	}
}

func (s *fuzzSource) string() string {
	c := s.byte()
	if c%4 != 3 {
		return fuzzNames[int(c>>2)%len(fuzzNames)]
	}
	b := make([]byte, int(s.byte())%24)
	for i := range b {
		b[i] = s.byte()
	}
	return string(b)
}

// FuzzHandlers sends requests of every API at every version the broker
// serves, with field values chosen by the fuzzer (fill: edge integers,
// known names, a valid record batch among the byte strings, lists of up to
// three elements), over a real connection to a running broker with a
// topic, records and a group. A handler must not panic (there is no
// recover: a panic would kill a broker), answer within 7 seconds
// (the request's own waits are bounded), keep the Go heap bounded, and
// leave the broker answering a new connection. The seed corpus (every
// API and version, empty and with a few choices) runs in make test.
func FuzzHandlers(f *testing.F) { fuzzHandlers(f) }

// FuzzHandlersAuthorizer is FuzzHandlers with the authorizer on, allowing
// what no ACL covers (allow.everyone.if.no.acl.found), so that requests
// reach the handlers until the fuzzer's own CreateAcls deny them: the
// authorization rules of every API (authz.go) on the fuzzer's requests.
func FuzzHandlersAuthorizer(f *testing.F) {
	fuzzHandlers(f, func(c *Config) { c.Authorizer = AuthorizerConfig{Enabled: true, AllowEveryoneIfNoACLFound: true} })
}

func fuzzHandlers(f *testing.F, mods ...func(*Config)) {
	b := startBroker(f, "", append([]func(*Config){fuzzGroups}, mods...)...)
	createTopic(f, b, "t", 3, nil)
	fuzzBrokers(f, []*Broker{b})
}

// FuzzHandlersPair is FuzzHandlers against two brokers sharing a two-voter
// metadata quorum and a topic replicated on both, each request sent to the
// broker the fuzzer picks: forwarding to the controller and the
// coordinators, follower fetches and leader epochs between real replicas.
func FuzzHandlersPair(f *testing.F) {
	brokers := startPair(f, func(c *Config) {
		c.Listeners = []Listener{{Addr: "127.0.0.1:0"}}
		c.AutoCreateTopics = true
		fuzzGroups(c)
	})
	createPairTopic(f, kadm.NewClient(newClient(f, brokers[0])), "t", nil)
	// RemoveRaftVoter included: a removed voter that runs stays an observer
	// and goes on learning the metadata (before, it was cut off the log for
	// good and the target left RemoveRaftVoter out).
	fuzzBrokers(f, brokers)
}

func fuzzGroups(c *Config) {
	c.Groups = group.Config{Partitions: 4, InitialRebalanceDelay: 0, MinSessionTimeout: time.Millisecond}
}

// fuzzBrokers fuzzes brokers, which have a topic "t", with every API but
// skip.
func fuzzBrokers(f *testing.F, brokers []*Broker, skip ...int16) {
	keepWorkerStderr(f)
	b := brokers[0]
	cl := newClient(f, b)
	for i := range 20 {
		r := &kgo.Record{Topic: "t", Key: []byte{byte(i)}, Value: []byte("v")}
		if err := cl.ProduceSync(f.Context(), r).FirstErr(); err != nil {
			f.Fatal(err)
		}
	}
	// Byte strings may be valid batches: plain, idempotent, transactional,
	// a control batch.
	recs := [][]byte{buildBatch(-1, -1, -1, 3, 10), buildBatch(1000, 0, 0, 2, 5), txnBatch(1001, 0, 0, "x"),
		encodeMarkerBatch(1001, 0, true, 0, 0)}
	var ids [][16]byte
	for _, tp := range b.meta.State().Topics() {
		ids = append(ids, tp.ID)
	}

	keys := make([]int16, 0, len(apis))
	for k := range apis {
		if !slices.Contains(skip, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for i, k := range keys {
		e := apis[k]
		for v := e.min; v <= e.max; v++ {
			f.Add([]byte{byte(i), byte(v - e.min)})
			f.Add([]byte{byte(i), byte(v - e.min), 1, 1, 1, 5, 3, 2, 9, 1, 0, 7, 1, 1, 2, 2, 3, 3})
		}
	}

	conns := make([]net.Conn, len(brokers))
	corr := int32(0)
	var history []string // the worker's last requests: the brokers' state is theirs
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &fuzzSource{b: data}
		key := keys[int(s.byte())%len(keys)]
		e := apis[key]
		version := e.min + int16(s.byte())%(e.max-e.min+1)
		req := kmsg.RequestForKey(key)
		req.SetVersion(version)
		fill(reflect.ValueOf(req).Elem(), s, "", 0, recs, ids)
		to := 0
		if len(brokers) > 1 {
			to = int(s.byte()) % len(brokers)
		}
		b := brokers[to]
		nc := conns[to]
		if nc == nil {
			var err error
			if nc, err = net.DialTimeout("tcp", b.Addr(), time.Second); err != nil {
				t.Fatal(err)
			}
			conns[to] = nc
		}
		corr++
		history = append(history, fmt.Sprintf("to broker %d: %s v%d %+v", b.cfg.NodeID, kmsg.NameForKey(key), version, req))
		if len(history) > 30 {
			history = history[1:]
		}
		dump := func() string { return strings.Join(history, "\n") }
		// A request's own waits are bounded above; what may still take a
		// few seconds is a lookup of a host name the fuzzer made up (an
		// AddRaftVoter's address: at most 5 s). The whole call must end
		// within 10 s: past that go test's fuzz worker panics
		// ("deadlocked!", output discarded) instead of reporting.
		callDeadline := time.Now().Add(9500 * time.Millisecond)
		if err := fuzzRoundTrip(nc, req, corr, 7*time.Second); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("no answer in 7 s (goroutines: %s): %s", saveStacks(), dump())
			}
			nc.Close() // the broker closed it (bad request), or it broke: a new one next time
			conns[to] = nil
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc > 2<<30 {
			t.Fatalf("heap %d MB after %s", ms.HeapAlloc>>20, dump())
		}
		// Every broker still answers a new connection, within what is
		// left of the call's 9.5 s (at least 2.5 s: a second each was
		// too short for an ApiVersions on a machine loaded by other
		// jobs, load average 33 on 2 cores).
		for _, b := range brokers {
			check, err := net.DialTimeout("tcp", b.Addr(), time.Until(callDeadline))
			if err != nil {
				t.Fatalf("dial broker %d after %s: %v", b.cfg.NodeID, dump(), err)
			}
			_, err = roundTrip(check, kmsg.NewPtrApiVersionsRequest(), 1, time.Until(callDeadline))
			check.Close()
			if err != nil {
				t.Fatalf("broker %d's ApiVersions after %s: %v", b.cfg.NodeID, dump(), err)
			}
		}
	})
}

// fuzzRoundTrip sends req and reads one response frame (or none for an
// acks=0 produce), without decoding it: the answer's shape is not what is
// fuzzed, and a response to a request kmsg decoded from garbage may not be
// one kmsg reads back.
func fuzzRoundTrip(nc net.Conn, req kmsg.Request, corr int32, timeout time.Duration) error {
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz")).AppendRequest(nil, req, corr)
	nc.SetWriteDeadline(time.Now().Add(timeout)) // a broker that stops reading is a hang too
	if _, err := nc.Write(frame); err != nil {
		return err
	}
	if p, ok := req.(*kmsg.ProduceRequest); ok && p.Acks == 0 {
		return nil
	}
	nc.SetReadDeadline(time.Now().Add(timeout))
	var sz [4]byte
	if _, err := io.ReadFull(nc, sz[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(sz[:])
	if n > 64<<20 {
		return fmt.Errorf("response of %d bytes", n)
	}
	_, err := io.CopyN(io.Discard, nc, int64(n))
	return err
}

// keepWorkerStderr: go test -fuzz runs the fuzz function in worker
// processes whose output it discards, so a panic on a broker goroutine
// (which kills the worker: "fuzzing process hung or terminated
// unexpectedly: exit status 2") leaves no trace. With SEDIMENT_FUZZ_STDERR
// set to a directory, a worker's stderr goes to worker-PID.log there.
func keepWorkerStderr(f *testing.F) {
	dir := os.Getenv("SEDIMENT_FUZZ_STDERR")
	if fl := flag.Lookup("test.fuzzworker"); dir == "" || fl == nil || fl.Value.String() != "true" {
		return
	}
	out, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d.log", os.Getpid())))
	if err != nil {
		f.Fatal(err)
	}
	if err := unix.Dup2(int(out.Fd()), 2); err != nil {
		f.Fatal(err)
	}
}

// saveStacks writes every goroutine's stack to a file and returns its name:
// where a request that did not answer is held.
func saveStacks() string {
	buf := make([]byte, 32<<20)
	buf = buf[:runtime.Stack(buf, true)]
	f, err := os.CreateTemp("", "fuzzhandlers-stacks-*.txt")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := f.Write(buf); err != nil {
		return err.Error()
	}
	return f.Name()
}
