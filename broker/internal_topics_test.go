package broker

import (
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker/txn"
)

// TestProduceToInternalTopicRefused: a client's Produce to
// __consumer_offsets or __transaction_state is INVALID_TOPIC_EXCEPTION, as
// Kafka's ReplicaManager answers; only the coordinators write there. It
// used to be appended: a keyed record that is no group record made the
// partition's coordinator fail to load for ever (COORDINATOR_LOAD_IN_PROGRESS
// to every group of it), and a forged offset commit took effect (protocol
// review). The group's offsets stay what it committed.
func TestProduceToInternalTopicRefused(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.Groups.Partitions, c.Transactions.Partitions = 1, 1 })
	ctx := testCtx(t)
	createTopic(t, b, "data", 1, nil)
	cl := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "data", Partition: 0, At: 5, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, "victim", offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	if _, err := b.createTxnStateTopic(ctx); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{offsetsTopic, txn.StateTopic} {
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("not a group record"), Value: []byte("x")}).FirstErr()
		if !errors.Is(err, kerr.InvalidTopicException) {
			t.Errorf("produce to %s: %v, want INVALID_TOPIC_EXCEPTION", topic, err)
		}
	}
	// The coordinator still serves the group, at the offset it committed.
	fetched, err := adm.FetchOffsets(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fetched.Lookup("data", 0); !ok || o.Err != nil || o.At != 5 {
		t.Fatalf("victim's offset after the refused writes: %+v", o)
	}
}

// TestReplyBeforeAcks0ProduceIsFlushed: a reply written while an acks=0
// Produce (which gets none) was queued behind it is sent at once. The
// writer skipped its flush for a slot without a reply, so a long-polled
// Fetch's answer stayed in its buffer until the client sent something else
// (protocol review: not there after 10 s, there 1 ms after one more
// request).
func TestReplyBeforeAcks0ProduceIsFlushed(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "pt", 3, nil)
	nc := dial(t, b)
	defer nc.Close()
	f := kmsg.NewPtrFetchRequest()
	f.Version, f.ReplicaID, f.MaxWaitMillis, f.MinBytes, f.MaxBytes, f.SessionEpoch = 12, -1, 300, 1<<30, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "pt"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LastFetchedEpoch = 1<<20, -1, -1
	ft.Partitions = append(ft.Partitions, fp)
	f.Topics = append(f.Topics, ft)
	p := kmsg.NewPtrProduceRequest()
	p.Version, p.Acks, p.TimeoutMillis = 9, 0, 1000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "pt"
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Partition = 2
	pp.Records = buildBatch(-1, -1, -1, 1, 10)
	pt.Partitions = append(pt.Partitions, pp)
	p.Topics = append(p.Topics, pt)
	var fm kmsg.RequestFormatter
	if _, err := nc.Write(append(fm.AppendRequest(nil, f, 1), fm.AppendRequest(nil, p, 2)...)); err != nil {
		t.Fatal(err)
	}
	// A bound, not a wait: the answer comes after max_wait (300 ms).
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		t.Fatalf("the Fetch's answer, with an acks=0 Produce queued behind it: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatalf("the Fetch's answer, with an acks=0 Produce queued behind it: %v", err)
	}
	if corr := int32(binary.BigEndian.Uint32(body)); corr != 1 {
		t.Fatalf("answer to correlation id %d, want 1", corr)
	}
}

// TestMetricsWithNonUTF8Group: a group id that is no UTF-8 (Kafka's
// strings are bytes to a broker) is a label value escaped \xNN, not a
// scrape of /metrics that fails for the whole broker (protocol review).
func TestMetricsWithNonUTF8Group(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "pt", 1, nil)
	adm := kadm.NewClient(newClient(t, b))
	for _, g := range []string{"bad\xffgroup", "bad\xfegroup"} {
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: "pt", Partition: 0, At: 1, LeaderEpoch: -1})
		if resp, err := adm.CommitOffsets(testCtx(t), g, offs); err != nil || resp.Error() != nil {
			t.Fatalf("commit %q: %v %v", g, err, resp.Error())
		}
	}
	mfs, err := b.metrics.reg.Gather()
	if err != nil {
		t.Fatalf("metrics after commits of non-UTF-8 groups: %v", err)
	}
	var groups []string
	for _, mf := range mfs {
		if mf.GetName() != "sediment_consumer_group_committed_offset" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "group" {
					groups = append(groups, l.GetValue())
				}
			}
		}
	}
	slices.Sort(groups)
	if want := []string{`bad\xfegroup`, `bad\xffgroup`}; !slices.Equal(groups, want) {
		t.Fatalf("group labels %q, want %q", groups, want)
	}
}

// TestProduceInvalidRecordCodes: a batch of another magic than 2, and a
// partition with no batch at all, are INVALID_RECORD, as Kafka's
// ProduceRequest.validateRecords answers them (UNSUPPORTED_FOR_MESSAGE_FORMAT
// and CORRUPT_MESSAGE before; protocol review).
func TestProduceInvalidRecordCodes(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "codes", 1, nil)
	nc := dial(t, b)
	defer nc.Close()
	magic1 := buildBatch(-1, -1, -1, 1, 10)
	magic1[16] = 1
	for i, records := range [][]byte{magic1, {}, nil} {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "codes"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = records
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := rawRequest(t, nc, req, int32(i+1)).(*kmsg.ProduceResponse)
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidRecord.Code {
			t.Errorf("records %d: %v, want INVALID_RECORD", i, kerr.ErrorForCode(code))
		}
	}
}
