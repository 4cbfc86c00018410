package broker

import (
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestFetchSessions(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "sess", 2, nil)
	nc := dial(t, b)
	prod := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(p int32) {
		if err := prod.ProduceSync(testCtx(t), &kgo.Record{Topic: "sess", Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	corr := int32(0)
	fetch := func(id, epoch int32, parts map[int32]int64, forget []int32) *kmsg.FetchResponse {
		req := kmsg.NewPtrFetchRequest()
		req.Version = 12
		req.MaxBytes, req.MinBytes, req.MaxWaitMillis = 1<<20, 0, 0
		req.SessionID, req.SessionEpoch = id, epoch
		if len(parts) > 0 {
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = "sess"
			for p, off := range parts {
				fp := kmsg.NewFetchRequestTopicPartition()
				fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = p, off, 1<<20
				ft.Partitions = append(ft.Partitions, fp)
			}
			req.Topics = append(req.Topics, ft)
		}
		if len(forget) > 0 {
			f := kmsg.NewFetchRequestForgottenTopic()
			f.Topic, f.Partitions = "sess", forget
			req.ForgottenTopics = append(req.ForgottenTopics, f)
		}
		corr++
		return rawRequest(t, nc, req, corr).(*kmsg.FetchResponse)
	}
	count := func(r *kmsg.FetchResponse) (n int, withData int) {
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				n++
				if len(p.RecordBatches) > 0 {
					withData++
				}
			}
		}
		return
	}
	produce(0)
	full := fetch(0, 0, map[int32]int64{0: 0, 1: 0}, nil)
	if full.SessionID == 0 || full.ErrorCode != 0 {
		t.Fatalf("no session created: %+v", full)
	}
	if n, d := count(full); n != 2 || d != 1 {
		t.Fatalf("full fetch: %d partitions, %d with data", n, d)
	}
	id := full.SessionID
	// Partition 0 moves on to offset 1; nothing new anywhere.
	if r := fetch(id, 1, map[int32]int64{0: 1}, nil); r.ErrorCode != 0 {
		t.Fatalf("incremental: %v", kerr.ErrorForCode(r.ErrorCode))
	} else if n, _ := count(r); n != 0 {
		t.Fatalf("incremental with nothing new reported %d partitions", n)
	}
	produce(1)
	r := fetch(id, 2, nil, nil)
	if n, d := count(r); n != 1 || d != 1 || r.Topics[0].Partitions[0].Partition != 1 {
		t.Fatalf("after producing to partition 1: %d partitions, %d with data", n, d)
	}
	if r := fetch(id, 2, nil, nil); r.ErrorCode != kerr.InvalidFetchSessionEpoch.Code {
		t.Fatalf("stale epoch: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := fetch(id+1000, 1, nil, nil); r.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("unknown session: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	// Forget partition 1: new records there are no longer reported.
	if r := fetch(id, 3, map[int32]int64{}, []int32{1}); r.ErrorCode != 0 {
		t.Fatalf("forget: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	produce(1)
	produce(0)
	r = fetch(id, 4, nil, nil)
	if n, d := count(r); n != 1 || d != 1 || r.Topics[0].Partitions[0].Partition != 0 {
		t.Fatalf("after forgetting partition 1: %d partitions, %d with data", n, d)
	}
	// Epoch -1 closes the session.
	if r := fetch(id, -1, map[int32]int64{0: 0}, nil); r.SessionID != 0 || r.ErrorCode != 0 {
		t.Fatalf("sessionless: %+v", r)
	}
	if r := fetch(id, 5, nil, nil); r.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("closed session: %v", kerr.ErrorForCode(r.ErrorCode))
	}
}

// TestFetchSessionsAcrossRestart: after a broker restart, a client's session
// from before is unknown (FETCH_SESSION_ID_NOT_FOUND, not another client's
// session with a wrong epoch), and the full fetch with which that client
// starts over (franz-go keeps its old id and sends epoch 0, which closes the
// session of that id) must not close a session another client opened on the
// restarted broker. With ids from a counter both clients held id 1.
func TestFetchSessionsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	createTopic(t, b, "sess", 1, nil)
	prod := newClient(t, b)
	if err := prod.ProduceSync(testCtx(t), &kgo.Record{Topic: "sess", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	prod.Close()
	fetch := func(nc net.Conn, corr, id, epoch int32, full bool) *kmsg.FetchResponse {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version = 12
		req.MaxBytes, req.MinBytes, req.MaxWaitMillis = 1<<20, 0, 0
		req.SessionID, req.SessionEpoch = id, epoch
		if full {
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = "sess"
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = 0, 0, 1<<20
			ft.Partitions = append(ft.Partitions, fp)
			req.Topics = append(req.Topics, ft)
		}
		return rawRequest(t, nc, req, corr).(*kmsg.FetchResponse)
	}

	// Client A reads with a session, then the broker restarts.
	ncA := dial(t, b)
	r := fetch(ncA, 1, 0, 0, true)
	if r.ErrorCode != 0 || r.SessionID == 0 {
		t.Fatalf("A's full fetch: %v, session %d", kerr.ErrorForCode(r.ErrorCode), r.SessionID)
	}
	idA := r.SessionID
	if r := fetch(ncA, 2, idA, 1, false); r.ErrorCode != 0 {
		t.Fatalf("A's incremental fetch: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	ncA.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBroker(t, dir)

	// Client B opens a session on the restarted broker.
	ncB := dial(t, b)
	r = fetch(ncB, 1, 0, 0, true)
	if r.ErrorCode != 0 || r.SessionID == 0 {
		t.Fatalf("B's full fetch: %v, session %d", kerr.ErrorForCode(r.ErrorCode), r.SessionID)
	}
	idB := r.SessionID

	// A comes back with its old session: unknown here.
	ncA = dial(t, b)
	if r := fetch(ncA, 1, idA, 2, false); r.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("A's session from before the restart (id %d, B's is %d): got %v, want FETCH_SESSION_ID_NOT_FOUND",
			idA, idB, kerr.ErrorForCode(r.ErrorCode))
	}
	// A starts over as franz-go does: its old id, epoch 0.
	if r := fetch(ncA, 2, idA, 0, true); r.ErrorCode != 0 || r.SessionID == 0 {
		t.Fatalf("A's new full fetch: %v, session %d", kerr.ErrorForCode(r.ErrorCode), r.SessionID)
	}
	// B's session is still there.
	if r := fetch(ncB, 2, idB, 1, false); r.ErrorCode != 0 {
		t.Fatalf("B's incremental fetch after A started over: %v (A's old id %d, B's %d)", kerr.ErrorForCode(r.ErrorCode), idA, idB)
	}
}

// TestFetchSessionCache: a new session enters the cache only when its
// answer goes out: with the cache full, a throttled full fetch evicts no
// one (as Kafka, which creates a session only for a response it sends),
// while one that is answered evicts the least recently used idle session.
// wouldSend, the size a byte-rate quota counts, keeps of an incremental
// fetch only the partitions finish would report.
func TestFetchSessionCache(t *testing.T) {
	var fs fetchSessions
	full := func(p int32) *kmsg.FetchRequest {
		req := kmsg.NewPtrFetchRequest()
		req.SessionID, req.SessionEpoch = 0, 0
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "t"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition = p
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		return req
	}
	answer := func(req *kmsg.FetchRequest, hw int64) *kmsg.FetchResponse {
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			t := kmsg.NewFetchResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewFetchResponseTopicPartition()
				p.Partition, p.HighWatermark, p.LastStableOffset = rp.Partition, hw, hw
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp
	}
	var first int32
	for i := range maxFetchSessions {
		req := full(int32(i))
		_, s, code := fs.begin(req, false)
		if code != 0 || s == nil {
			t.Fatalf("session %d: code %d", i, code)
		}
		resp := answer(req, 5)
		fs.finish(s, resp, true, false)
		if resp.SessionID == 0 {
			t.Fatalf("session %d not opened", i)
		}
		if i == 0 {
			first = resp.SessionID
		}
	}
	// Throttled: nothing evicted, no session.
	req := full(9999)
	_, s, _ := fs.begin(req, false)
	resp := answer(req, 5)
	fs.throttled(s, true, resp)
	if resp.SessionID != 0 || len(fs.m) != maxFetchSessions || fs.m[first] == nil {
		t.Fatalf("a throttled full fetch: session id %d, %d sessions, the oldest kept %v", resp.SessionID, len(fs.m), fs.m[first] != nil)
	}
	// Answered: the oldest idle session makes room.
	_, s, _ = fs.begin(req, false)
	resp = answer(req, 5)
	fs.finish(s, resp, true, false)
	if resp.SessionID == 0 || len(fs.m) != maxFetchSessions || fs.m[first] != nil {
		t.Fatalf("an answered full fetch: session id %d, %d sessions, the oldest kept %v", resp.SessionID, len(fs.m), fs.m[first] != nil)
	}

	// An incremental fetch of a session of three partitions, nothing new:
	// nothing would be sent but what has records or moved.
	var three fetchSessions
	req = full(0)
	for _, p := range []int32{1, 2} {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition = p
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, fp)
	}
	_, s, _ = three.begin(req, false)
	resp = answer(req, 5)
	three.finish(s, resp, true, false)
	inc := kmsg.NewPtrFetchRequest()
	inc.SessionID, inc.SessionEpoch = resp.SessionID, 1
	topics, s, code := three.begin(inc, false)
	if code != 0 || len(topics) != 1 || len(topics[0].Partitions) != 3 {
		t.Fatalf("incremental begin: code %d, topics %v", code, topics)
	}
	resp = answer(&kmsg.FetchRequest{Topics: topics}, 5)
	if got := three.wouldSend(s, resp.Topics, nil, false); len(got) != 0 {
		t.Errorf("nothing new, yet %v would be sent", got)
	}
	resp.Topics[0].Partitions[2].HighWatermark = 6
	got := three.wouldSend(s, resp.Topics, map[[2]int]bool{{0, 0}: true}, false)
	if len(got) != 1 || len(got[0].Partitions) != 2 || got[0].Partitions[0].Partition != 0 || got[0].Partitions[1].Partition != 2 {
		t.Errorf("records on 0, a new high watermark on 2: %v would be sent", got)
	}
	three.finish(s, resp, false, false)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].Partition != 2 {
		t.Errorf("finish kept %v, want partition 2 alone (the records were not in this answer)", resp.Topics)
	}
}
