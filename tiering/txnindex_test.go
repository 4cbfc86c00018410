package tiering

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/objectstore"
)

// TestTxnIndexUploadedAndRead: segments' transaction indexes go up with
// them, and the aborted transactions of a remote range come from the
// bucket (with the local log's index past the remote end) exactly as the
// local log answered before its segments were deleted.
func TestTxnIndexUploadedAndRead(t *testing.T) {
	e := newEnv(t, envOptions{cfg: localOnlyTail(0), segmentBytes: 4 << 10})
	var all []hotlog.AbortedTxn
	prevMarker := int64(-1)
	for i := 0; i < 200; i++ {
		b := makeBatch(3, 40, e.clock.Now().UnixMilli(), uint64(len(e.produced)))
		opts := hotlog.AppendOptions{LeaderEpoch: 5}
		if i%9 == 8 {
			opts.Aborted = func(h []hotlog.BatchHeader) []hotlog.AbortedTxn {
				// A transaction from just after the previous abort; some
				// overlap a later one (LSO held below the marker).
				first := prevMarker + 1
				lso := h[0].BaseOffset + 1
				if i%2 == 0 {
					lso = first + 1
				}
				a := hotlog.AbortedTxn{ProducerID: int64(i % 4), FirstOffset: first, LastOffset: h[0].BaseOffset, LastStableOffset: lso}
				all = append(all, a)
				prevMarker = h[0].BaseOffset
				return []hotlog.AbortedTxn{a}
			}
		}
		if _, err := e.log.Append(b, opts); err != nil {
			t.Fatal(err)
		}
		e.produced = append(e.produced, b)
	}
	e.log.SetHighWatermark(e.log.LogEndOffset())
	end := e.log.LogEndOffset()
	type q struct{ from, to int64 }
	var queries []q
	want := map[q][]hotlog.AbortedTxn{}
	for from := int64(0); from < end; from += 37 {
		for _, to := range []int64{from + 1, from + 50, end} {
			got, err := e.log.AbortedTxns(from, to)
			if err != nil {
				t.Fatal(err)
			}
			queries = append(queries, q{from, to})
			want[q{from, to}] = got
		}
	}
	e.run()
	e.run() // local retention after the upload
	if e.log.LogStartOffset() == 0 || e.p.Status().RemoteSegments == 0 {
		t.Fatalf("local start %d, %+v", e.log.LogStartOffset(), e.p.Status())
	}
	n := 0
	for _, k := range e.objects() {
		if strings.HasSuffix(k, SuffixTxnIndex) {
			n++
		}
	}
	if n < 3 {
		t.Fatalf("%d .txnindex objects", n)
	}
	ctx := context.Background()
	for _, qq := range queries {
		if qq.from >= e.log.LogStartOffset() {
			continue
		}
		list, complete, err := e.p.AbortedTxns(ctx, qq.from, qq.to)
		if err != nil {
			t.Fatal(err)
		}
		if !complete {
			local, err := e.log.AbortedTxns(qq.from, qq.to)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range local {
				if len(list) == 0 || a.LastOffset > list[len(list)-1].LastOffset {
					list = append(list, a)
				}
			}
		}
		if !reflect.DeepEqual(list, want[qq]) && !(len(list) == 0 && len(want[qq]) == 0) {
			t.Fatalf("AbortedTxns(%d, %d) from the bucket = %+v, local log said %+v", qq.from, qq.to, list, want[qq])
		}
	}

	// A damaged index object fails the read (a reader must not see
	// aborted records); a fresh Manager has no cached copy.
	e.m.Close()
	e.open(envOptions{}, *localOnlyTail(0))
	for _, k := range e.objects() {
		if strings.HasSuffix(k, SuffixTxnIndex) {
			if err := e.store.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			if err := objectstore.PutBytes(ctx, e.store, k, []byte("garbage garbage garbage garbage xx"), objectstore.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := e.p.AbortedTxns(ctx, 0, end); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("damaged index: %v", err)
	}
}
