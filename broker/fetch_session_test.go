package broker

import (
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
