package broker

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/tiering"
)

// segmentObjects lists the .log objects in store (the data of remote
// segments; manifests and descriptors left aside).
func segmentObjects(t *testing.T, store objectstore.Store) []string {
	t.Helper()
	l, err := store.List(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range l.Objects {
		if strings.HasSuffix(o.Key, tiering.SuffixLog) {
			out = append(out, o.Key)
		}
	}
	return out
}

// TestRemoteStorageDisableDeletesRemoteLog (KIP-950): turning
// remote.storage.enable off with remote.log.delete.on.disable=true deletes
// the partition's remote log: the segments leave the bucket, the log start
// of both tiers becomes the local log start (ListOffsets -2 equals -4, -5 is
// -1, a fetch below it is OFFSET_OUT_OF_RANGE), the local records are read
// back exactly, also after a restart. Turned on again, uploads go on from
// the local log start, and the log reads back from there.
func TestRemoteStorageDisableDeletesRemoteLog(t *testing.T) {
	b, store, dir := startFolderTieredBroker(t)
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	const topic = "switched"
	// Local retention keeps the last 64 KiB: part of the log is only in
	// the bucket, part in both tiers.
	createTopic(t, b, topic, 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("65536"),
		"remote.storage.enable": ptr("true"), "retention.ms": ptr("-1"), "min.insync.replicas": ptr("1")})
	cl := smallBatchClient(t, b)
	produced := produceAll(t, cl, makeRecords(topic, 3000, "before"))[0]
	waitTiered(t, "the oldest segments only in the bucket", func() bool { return listOffset(t, b, topic, -4) > 500 })
	// KIP-1023's earliest pending upload (-6): the offset after the last
	// tiered one, once uploads have caught up.
	pendingAfterTiered := func() bool {
		last := listOffset(t, b, topic, -5)
		return last >= 0 && listOffset(t, b, topic, -6) == last+1 && listOffset(t, b, topic, -5) == last
	}
	waitTiered(t, "the earliest pending upload after the last tiered offset", pendingAfterTiered)
	if earliest := listOffset(t, b, topic, -2); earliest != 0 {
		t.Fatalf("earliest %d before the disable, want 0", earliest)
	}

	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("remote.storage.enable", "false"), set("remote.log.delete.on.disable", "true")}, topic)
	if err != nil || rs[0].Err != nil {
		t.Fatalf("disable with remote.log.delete.on.disable: %v %v", err, rs)
	}
	checkDescribed(t, adm, topic, "remote.storage.enable", "false", kmsg.ConfigSourceDynamicTopicConfig)
	waitTiered(t, "the remote log deleted", func() bool {
		return len(segmentObjects(t, store)) == 0 && listOffset(t, b, topic, -5) == -1
	})
	local := listOffset(t, b, topic, -4)
	if earliest := listOffset(t, b, topic, -2); earliest != local || local <= 0 || local >= int64(len(produced)) {
		t.Fatalf("earliest %d, earliest local %d, %d produced", earliest, local, len(produced))
	}
	if pending := listOffset(t, b, topic, -6); pending != -1 {
		t.Fatalf("earliest pending upload %d with remote storage off, want -1 (as Kafka)", pending)
	}
	if rp := fetchAt(t, b, topic, 0); rp.ErrorCode != kerr.OffsetOutOfRange.Code || rp.LogStartOffset != local {
		t.Fatalf("fetch at 0 after the deletion: %v, log start %d (want OFFSET_OUT_OF_RANGE, %d)", kerr.ErrorForCode(rp.ErrorCode), rp.LogStartOffset, local)
	}
	if got := consumeN(t, b, topic, len(produced)-int(local))[0]; digest(got) != digest(produced[local:]) {
		t.Fatalf("consumed %d records from %d: another digest", len(got), got[0].Offset)
	}
	if m := b.TieringManager().Metrics(); m.SegmentsDeletedOnDisable == 0 {
		t.Fatalf("no segment counted as deleted on disable: %+v", m)
	}

	// The deletion is in the metadata log: the same after a restart.
	b.Close()
	b = startTieredBroker(t, filepath.Join(dir, "broker"), store)
	adm = kadm.NewClient(newClient(t, b))
	if earliest := listOffset(t, b, topic, -2); earliest != local {
		t.Fatalf("earliest %d after a restart, want %d", earliest, local)
	}

	// Turned on again: uploads go on from the local log start.
	cl = smallBatchClient(t, b)
	more := produceAll(t, cl, makeRecords(topic, 2000, "after"))[0]
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("remote.storage.enable", "true")}, topic)
	if err != nil || rs[0].Err != nil {
		t.Fatalf("enable again: %v %v", err, rs)
	}
	waitTiered(t, "uploads again, and local retention past the old local start", func() bool {
		return listOffset(t, b, topic, -5) > local && listOffset(t, b, topic, -4) > local+500
	})
	if earliest := listOffset(t, b, topic, -2); earliest != local {
		t.Fatalf("earliest %d after re-enabling, want %d", earliest, local)
	}
	waitTiered(t, "the earliest pending upload after the last tiered offset, re-enabled", pendingAfterTiered)
	all := append(append([]*kgo.Record(nil), produced[local:]...), more...)
	if got := consumeN(t, b, topic, len(all))[0]; digest(got) != digest(all) {
		t.Fatalf("consumed %d records from %d after re-enabling: another digest", len(got), got[0].Offset)
	}
}
