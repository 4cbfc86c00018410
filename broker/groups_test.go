package broker

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/hotlog"
)

func TestOffsetsBatchRoundTrip(t *testing.T) {
	recs := []group.Record{
		{Key: []byte("k1"), Value: []byte("v1")},
		{Key: []byte("k2")}, // tombstone
		{Key: []byte("k3"), Value: []byte{}},
	}
	b := encodeOffsetsBatch(recs, 1234)
	if _, err := hotlog.ValidateBatches(b); err != nil {
		t.Fatalf("encoded batch does not validate: %v", err)
	}
	second := encodeOffsetsBatch(recs[:1], 5)
	binary.BigEndian.PutUint64(second, 3) // as the log assigns offsets: base offset 3
	var got []group.Record
	next, err := replayBatches(append(b, second...), 0, func(k, v []byte) error {
		got = append(got, group.Record{Key: append([]byte(nil), k...), Value: v})
		return nil
	})
	if err != nil || next != 4 {
		t.Fatalf("replay: next %d, %v", next, err)
	}
	want := append(append([]group.Record(nil), recs...), recs[0])
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) || (got[i].Value == nil) != (want[i].Value == nil) {
			t.Errorf("record %d: got %q=%q, want %q=%q", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
}

// FuzzReplayBatches: what Replay reads from disk never panics the decoder.
func FuzzReplayBatches(f *testing.F) {
	f.Add(encodeOffsetsBatch([]group.Record{{Key: []byte("k"), Value: []byte("v")}, {Key: []byte("t")}}, 1))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 80))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		_, _ = replayBatches(data, 0, func(k, v []byte) error {
			n++
			if n > len(data) {
				return fmt.Errorf("more records than bytes")
			}
			return nil
		})
	})
}

// TestOffsetsPartitionCountOfExistingTopic: once __consumer_offsets exists,
// its partition count maps groups to partitions, not the configured
// offsets.topic.num.partitions (Kafka reads the count from the topic's
// metadata). A broker restarted with another setting still finds the
// offsets a group committed before.
func TestOffsetsPartitionCountOfExistingTopic(t *testing.T) {
	dir := t.TempDir()
	withPartitions := func(n int32) func(*Config) {
		return func(c *Config) { c.Groups = group.Config{Partitions: n, InitialRebalanceDelay: -1} }
	}
	// A group whose partition differs under 8 and 16 partitions.
	gid := ""
	for i := 0; gid == ""; i++ {
		if id := fmt.Sprintf("moved-%d", i); group.PartitionFor(id, 16) >= 8 {
			gid = id
		}
	}
	b := startBroker(t, dir, withPartitions(8))
	createTopic(t, b, "t", 1, nil)
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	resp, err := adm.CommitOffsets(ctx, gid, kadm.OffsetsFromRecords(kgo.Record{Topic: "t", Partition: 0, Offset: 41}))
	if err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b2 := startBroker(t, dir, withPartitions(16))
	fetched, err := kadm.NewClient(newClient(t, b2)).FetchOffsets(ctx, gid)
	if err != nil || fetched.Error() != nil {
		t.Fatalf("fetch: %v %v", err, fetched.Error())
	}
	if o, ok := fetched.Lookup("t", 0); !ok || o.At != 42 {
		t.Fatalf("after a restart with another offsets.topic.num.partitions: committed %+v (found %v), want 42", o, ok)
	}
}
