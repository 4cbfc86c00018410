package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestUncleanElectionTiered: an unclean leader election on a tiered topic.
// Three voters and an observer (broker 4) share a bucket; a topic with
// remote storage, 16 KiB segments and no local retention has replicas
// [1, 4]. With broker 4 down, broker 1 alone takes records "b-*" and
// uploads some of them; broker 1 is killed, broker 4 comes back and is
// elected uncleanly (without "b-*") and takes records "c-*" from the
// offset where "b-*" began. Once broker 4 has uploaded them and local
// retention has deleted them locally, a consumer from offset 0 reads every
// "a-*" then every "c-*", in order, and no "b-*". Before, broker 4 uploaded
// from the bucket's end on: its "c-*" records below that end never went
// up, local retention deleted them, and the consumer read broker 1's "b-*"
// records in their place (tiering/lineage.go).
func TestUncleanElectionTiered(t *testing.T) {
	start := time.Now()
	bucketDir := filepath.Join(t.TempDir(), "bucket")
	tierArgs := []string{"--bucket-dir", bucketDir, "--tier-orphan-grace", "1s", "--tier-clean-interval", "1s"}
	c := StartCluster(t, 3, tierArgs...)
	b4 := c.newJoiningBroker(t, 4, tierArgs...)
	if err := b4.start(); err != nil {
		t.Fatalf("broker 4: %v", err)
	}
	c.Brokers = append(c.Brokers, b4)
	t.Logf("cluster up (%.1f s)", time.Since(start).Seconds())

	const topic = "unclean-tiered"
	tc := &tierCheck{t: t, c: c, topic: topic, stopped: map[int]bool{}}
	tc.createTopic([]int32{1, 4}, map[string]string{"segment.bytes": "16384", "remote.storage.enable": "true",
		"local.retention.bytes": "0", "retention.ms": "-1", "min.insync.replicas": "1"})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const n = 300
	filler := strings.Repeat("x", 200)
	produce := func(cl *kgo.Client, prefix string) {
		t.Helper()
		// Ten records a batch: segments roll between batches.
		for i := 0; i < n; i += 10 {
			var recs []*kgo.Record
			for j := i; j < i+10; j++ {
				recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s-%04d-%s", prefix, j, filler)})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce %s-*: %v", prefix, err)
			}
		}
	}
	plain := kgo.ProducerBatchCompression(kgo.NoCompression()) // so that segments fill
	produce(c.Client(t, plain), "a")

	b4.Kill()
	waitFor(t, 60*time.Second, "the ISR to shrink to broker 1", func() bool {
		st, err := leaderSeenBy(t, c.Broker(1).Client(t), topic)
		return err == nil && slices.Equal(st.ISR, []int32{1})
	})
	produce(c.Broker(1).Client(t, plain), "b")
	tc.waitRemoteEndPast(n+n/3, "broker 1 to upload some b-* records")
	oldEnd := tc.committed().RemoteEndOffset
	t.Logf("broker 1 uploaded up to %d (b-* from %d); killing it (%.1f s)", oldEnd, n, time.Since(start).Seconds())

	c.Broker(1).Kill()
	b4.Start()
	adm := kadm.NewClient(c.Broker(2).Client(t))
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "unclean.leader.election.enable", Value: kmsg.StringPtr("true")}}, topic); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "broker 4 to be elected uncleanly", func() bool {
		l := tc.leaderBroker()
		return l != nil && l.NodeID == 4
	})
	cl4 := b4.Client(t, plain)
	produce(cl4, "c")
	produce(cl4, "c2")
	// Uploaded past where broker 1's uploads ended, and deleted locally
	// past where the histories part.
	tc.waitRemoteEndPast(oldEnd+n/3, "broker 4 to upload its records")
	waitFor(t, 90*time.Second, "broker 4's local retention to delete its uploaded records", func() bool {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = -4 // the earliest local offset (KIP-1005)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		req.Version = 9
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		resp, err := req.RequestWith(rctx, cl4)
		if err != nil || len(resp.Topics) == 0 || len(resp.Topics[0].Partitions) == 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			return false
		}
		return resp.Topics[0].Partitions[0].Offset > n+n/3
	})
	t.Logf("broker 4 uploaded up to %d and deleted its local log below the old end (%.1f s)", tc.committed().RemoteEndOffset, time.Since(start).Seconds())

	if !strings.Contains(b4.log.String(), "the bucket held records past this leader's history") {
		t.Errorf("broker 4's log does not say it cut the remote log back")
	}
	consumer := b4.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	var got []string
	for len(got) < 3*n && ctx.Err() == nil {
		fs := consumer.PollFetches(ctx)
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != int64(len(got)) {
				t.Fatalf("record at offset %d after %d records", r.Offset, len(got))
			}
			got = append(got, string(r.Value[:strings.LastIndexByte(string(r.Value), '-')]))
		})
	}
	var want []string
	for _, p := range []string{"a", "c", "c2"} {
		for i := range n {
			want = append(want, fmt.Sprintf("%s-%04d", p, i))
		}
	}
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("read %d records; at offset %d %q, want %q (the old leader's lost history read back)", len(got), i, got[i], want[i])
			}
		}
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
}
