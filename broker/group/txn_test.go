package group

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// replayGatedLog is a memLog whose Replay waits for gate.
type replayGatedLog struct {
	memLog
	gate chan struct{}
}

func (l *replayGatedLog) Replay(ctx context.Context, fn func(key, value []byte) error) error {
	<-l.gate
	return l.memLog.Replay(ctx, fn)
}

func fetchOne(t *testing.T, c *Coordinator, stable bool) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 7
	req.Group, req.RequireStable = "g", stable
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "t", []int32{0}
	req.Topics = append(req.Topics, rt)
	resp, err := c.OffsetFetch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != 0 {
		return -1, resp.ErrorCode
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, p.ErrorCode
}

// TestTxnOffsets: TxnOffsetCommit's records count as pending until
// EndTxnOffsets; a commit makes them the group's, an abort does not; an
// end that arrives while the partition loads is applied once loaded.
func TestTxnOffsets(t *testing.T) {
	ctx := context.Background()
	c := New(Config{Partitions: 1, Clock: newFakeClock(), Logger: quiet})
	defer c.Close()
	log := &replayGatedLog{gate: make(chan struct{})}
	close(log.gate)
	if err := <-c.Load(0, log); err != nil {
		t.Fatal(err)
	}
	commit := func(offset int64) []Record {
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.Group, req.Generation = "g", -1
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, offset
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, recs, err := c.TxnOffsetCommit(ctx, req, []string{"t"})
		if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 || len(recs) != 1 {
			t.Fatalf("TxnOffsetCommit: %v %+v", err, resp)
		}
		return recs
	}
	recs := commit(5)
	if off, code := fetchOne(t, c, false); off != -1 || code != 0 {
		t.Fatalf("before the end: %d %v", off, kerr.ErrorForCode(code))
	}
	if _, code := fetchOne(t, c, true); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("require stable: %v", kerr.ErrorForCode(code))
	}
	if err := c.EndTxnOffsets(ctx, 0, recs, true); err != nil {
		t.Fatal(err)
	}
	if off, code := fetchOne(t, c, true); off != 5 || code != 0 {
		t.Fatalf("after commit: %d %v", off, kerr.ErrorForCode(code))
	}
	recs = commit(9)
	c.EndTxnOffsets(ctx, 0, recs, false)
	if off, code := fetchOne(t, c, true); off != 5 || code != 0 {
		t.Fatalf("after abort: %d %v", off, kerr.ErrorForCode(code))
	}

	// An end during a load waits for it.
	reload := &replayGatedLog{gate: make(chan struct{})}
	loaded := c.Load(0, reload)
	if err := c.EndTxnOffsets(ctx, 0, recs, true); err != nil {
		t.Fatal(err)
	}
	close(reload.gate)
	select {
	case err := <-loaded:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("load did not finish")
	}
	if off, code := fetchOne(t, c, true); off != 9 || code != 0 {
		t.Fatalf("end applied after the load: %d %v", off, kerr.ErrorForCode(code))
	}
}
