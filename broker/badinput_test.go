package broker

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// expectClosed reads until the broker closes the connection.
func expectClosed(t *testing.T, nc net.Conn, what string) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.ReadAll(nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: connection not closed", what)
	}
}

func TestBadInput(t *testing.T) {
	b := startBroker(t, "", func(c *Config) { c.MessageMaxBytes = 64 << 10 })
	createTopic(t, b, "bad", 1, nil)
	// A healthy client that keeps working throughout.
	healthy := newClient(t, b)
	var produced []*kgo.Record
	checkHealthy := func(step string) {
		t.Helper()
		r := &kgo.Record{Topic: "bad", Value: []byte(step)}
		if err := healthy.ProduceSync(testCtx(t), r).FirstErr(); err != nil {
			t.Fatalf("after %s: healthy client failed: %v", step, err)
		}
		produced = append(produced, r)
	}
	checkHealthy("start")

	frames := map[string][]byte{
		"garbage":         []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"2GiB length":     {0x80, 0, 0, 0, 1, 2, 3},
		"max int32":       {0x7f, 0xff, 0xff, 0xff, 0, 0},
		"negative length": {0xff, 0xff, 0xff, 0xf0},
		"too short":       {0, 0, 0, 3, 0, 18, 0},
		"unknown api":     append([]byte{0, 0, 0, 10}, 0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff),
		"bad body":        append([]byte{0, 0, 0, 14}, 0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0, 0xff, 0xff, 0xff),
	}
	for name, frame := range frames {
		nc := dial(t, b)
		nc.Write(frame)
		expectClosed(t, nc, name)
		checkHealthy(name)
	}

	// Truncated: a length promising more than is sent, then EOF.
	nc := dial(t, b)
	nc.Write([]byte{0, 0, 1, 0, 0, 18, 0, 0})
	nc.(*net.TCPConn).CloseWrite()
	expectClosed(t, nc, "truncated")
	checkHealthy("truncated")

	// A frame over socket.request.max.bytes is refused before it is read.
	small := startBroker(t, "", func(c *Config) { c.SocketRequestMaxBytes = 1024 })
	nc = dial(t, small)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 4096)
	nc.Write(hdr[:])
	expectClosed(t, nc, "over socket.request.max.bytes")

	// Record-level errors keep the connection.
	nc = dial(t, b)
	batch := buildBatch(-1, -1, -1, 2, 10)
	batch[len(batch)-1] ^= 0xff // breaks the CRC
	if p := produceRaw(t, nc, "bad", batch, 1, 9, 1); p.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("broken CRC: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if p := produceRaw(t, nc, "bad", buildBatch(-1, -1, -1, 1, 100<<10), 1, 9, 2); p.ErrorCode != kerr.MessageTooLarge.Code {
		t.Fatalf("over max.message.bytes: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if p := produceRaw(t, nc, "bad", buildBatch(-1, -1, -1, 1, 10), 2, 9, 3); p.ErrorCode != kerr.InvalidRequiredAcks.Code {
		t.Fatalf("acks=2: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if p := produceRaw(t, nc, "no-such-topic-here", buildBatch(-1, -1, -1, 1, 10), 1, 9, 4); p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	trunc := buildBatch(-1, -1, -1, 3, 10)
	if p := produceRaw(t, nc, "bad", trunc[:len(trunc)-5], 1, 9, 5); p.ErrorCode != kerr.CorruptMessage.Code && p.ErrorCode != kerr.InvalidRecord.Code {
		t.Fatalf("truncated batch: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	// Fetch out of range.
	freq := kmsg.NewPtrFetchRequest()
	freq.Version = 11
	freq.MaxBytes = 1 << 20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "bad"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset, fp.PartitionMaxBytes = 1<<40, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	freq.Topics = append(freq.Topics, ft)
	if r := rawRequest(t, nc, freq, 6).(*kmsg.FetchResponse); r.Topics[0].Partitions[0].ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch out of range: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	// A version we never advertised closes the connection, as Kafka does.
	mreq := kmsg.NewPtrProduceRequest()
	mreq.Version = 2
	var f kmsg.RequestFormatter
	nc.Write(f.AppendRequest(nil, mreq, 7))
	expectClosed(t, nc, "Produce v2")
	checkHealthy("record errors")

	// acks=0: no reply; a failure closes the connection.
	nc = dial(t, b)
	a0 := kmsg.NewPtrProduceRequest()
	a0.Version, a0.Acks, a0.TimeoutMillis = 9, 0, 1000
	at := kmsg.NewProduceRequestTopic()
	at.Topic = "bad"
	ap := kmsg.NewProduceRequestTopicPartition()
	ap.Records = buildBatch(-1, -1, -1, 1, 10)
	ap.Records[len(ap.Records)-1] ^= 1
	at.Partitions = append(at.Partitions, ap)
	a0.Topics = append(a0.Topics, at)
	nc.Write(f.AppendRequest(nil, a0, 8))
	expectClosed(t, nc, "acks=0 with a corrupt batch")
	checkHealthy("acks=0")

	// Nothing appended was lost.
	got := consumeN(t, b, "bad", len(produced))
	for i, r := range got[0] {
		if string(r.Value) != string(produced[i].Value) {
			t.Fatalf("record %d: %q, want %q", i, r.Value, produced[i].Value)
		}
	}
}
