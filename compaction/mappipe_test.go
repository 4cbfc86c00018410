package compaction

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/vfs"
)

// mapSnapshot is everything the map phase leaves behind.
type mapSnapshot struct {
	end, base, latest, mapPrev int64
	entries, usedWords         int
	err                        error
	buckets                    []mapBucket
	mapped, dead, look         []uint64
}

func buildMapWith(t *testing.T, tg Target, memory int64, pipeline bool, from, to int64) mapSnapshot {
	t.Helper()
	c := NewCleaner(CleanerConfig{DedupeBufferBytes: memory}, nil)
	defer c.Close()
	c.pipeline = pipeline
	var st Stats
	c.stats = &st
	end, err := c.buildMap(context.Background(), tg, from, to)
	om := c.omap
	return mapSnapshot{end: end, base: om.base, latest: om.latest, mapPrev: c.mapPrev, entries: om.entries, usedWords: om.usedWords,
		err: err, buckets: slices.Clone(om.buckets), mapped: slices.Clone(om.mapped), dead: slices.Clone(om.dead), look: slices.Clone(om.look)}
}

func sameMap(t *testing.T, what string, serial, piped mapSnapshot) {
	t.Helper()
	if (serial.err == nil) != (piped.err == nil) || serial.err != nil && serial.err.Error() != piped.err.Error() {
		t.Fatalf("%s: error serial %v, pipelined %v", what, serial.err, piped.err)
	}
	if serial.end != piped.end || serial.base != piped.base || serial.latest != piped.latest || serial.mapPrev != piped.mapPrev ||
		serial.entries != piped.entries || serial.usedWords != piped.usedWords {
		t.Fatalf("%s: serial end %d base %d latest %d prev %d entries %d words %d; pipelined %d %d %d %d %d %d", what,
			serial.end, serial.base, serial.latest, serial.mapPrev, serial.entries, serial.usedWords,
			piped.end, piped.base, piped.latest, piped.mapPrev, piped.entries, piped.usedWords)
	}
	if !slices.Equal(serial.buckets, piped.buckets) || !slices.Equal(serial.mapped, piped.mapped) ||
		!slices.Equal(serial.dead, piped.dead) || !slices.Equal(serial.look, piped.look) {
		t.Fatalf("%s: the maps or bitmaps differ", what)
	}
}

// TestMapPipelineMatchesSerial: the two-goroutine map phase leaves exactly
// the serial map phase's key map, bitmaps, mapped end and error, for maps
// that hold everything, that fill up at some batch (each pass from the
// serial pass's end), that are too small for one batch, and for a corrupt
// batch before and after the point where the map is full.
func TestMapPipelineMatchesSerial(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	l := openLog(t, vfs.NewMem(), 64<<10, clk)
	defer l.Close()
	fx := newFixtureTxns()
	app := appendTo(t, l)
	rng := rand.New(rand.NewPCG(3, 3))
	// Keyed batches with tombstones; an aborted and a committed
	// transaction with their markers, a keyless record and an empty stretch
	// in the middle.
	writeKeyed(t, l, clk, rng, testCodecs[5], 400, 6000, 10)
	ts := clk.now().UnixMilli()
	r1 := app(makeBatch(t, testCodecs[0], ts, batchOpts{producerID: 7, transactional: true}, kv{keyOf(1), []byte("aborted")}))
	app(makeBatch(t, testCodecs[0], ts, batchOpts{producerID: 8, transactional: true}, kv{keyOf(2), []byte("committed")}))
	abort := app(controlBatch(t, ts, 7, false))
	commit := app(controlBatch(t, ts, 8, true))
	fx.aborted = []AbortedTxn{{ProducerID: 7, FirstOffset: r1.FirstOffset, LastOffset: abort.FirstOffset}}
	fx.last[7], fx.last[8] = abort.LastOffset, commit.LastOffset
	app(makeBatch(t, testCodecs[0], ts, batchOpts{}, kv{nil, []byte("keyless")}, kv{keyOf(3), []byte("x")}))
	writeKeyed(t, l, clk, rng, testCodecs[0], 900, 6000, 0)
	seal(t, l, clk, 64<<10)
	tg := Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, DeleteRetention: time.Minute}, Txn: fx}
	to := l.HighWatermark() - 2 // before the seal batch
	for _, memory := range []int64{1 << 20, 64 << 10, 16 << 10, 4 << 10} {
		for from, pass := int64(0), 0; from < to; pass++ {
			what := fmt.Sprintf("map of %d bytes, pass %d from %d", memory, pass, from)
			serial := buildMapWith(t, tg, memory, false, from, to)
			sameMap(t, what, serial, buildMapWith(t, tg, memory, true, from, to))
			if serial.err != nil {
				t.Fatalf("%s: %v", what, serial.err)
			}
			if serial.end <= from {
				t.Fatalf("%s: no progress", what)
			}
			from = serial.end
		}
	}
	// A batch of more records than the map holds (room for 14 keys).
	l2 := openLog(t, vfs.NewMem(), 64<<10, clk)
	defer l2.Close()
	recs := make([]kv, 20)
	for i := range recs {
		recs[i] = kv{keyOf(i), []byte("v")}
	}
	app2 := func(b []byte) {
		if _, err := l2.Append(b, hotlog.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	app2(makeBatch(t, testCodecs[0], ts, batchOpts{}, recs[:5]...))
	app2(makeBatch(t, testCodecs[0], ts, batchOpts{}, recs...))
	seal(t, l2, clk, 64<<10)
	tg2 := Target{Log: l2, Config: tg.Config}
	for _, from := range []int64{0, 5} {
		tiny := buildMapWith(t, tg2, 64, false, from, 25)
		if wantErr := from == 5; errors.Is(tiny.err, ErrMapTooSmall) != wantErr || tiny.end != 5 {
			t.Fatalf("a 64-byte map from %d: end %d, %v", from, tiny.end, tiny.err)
		}
		sameMap(t, "a 64-byte map", tiny, buildMapWith(t, tg2, 64, true, from, 25))
	}
}

func TestMapPipelineCorruptBatch(t *testing.T) {
	clk := &clock{}
	l := openLog(t, vfs.NewMem(), 64<<10, clk)
	defer l.Close()
	rng := rand.New(rand.NewPCG(4, 4))
	writeKeyed(t, l, clk, rng, testCodecs[0], 3000, 6000, 0)
	// A batch whose CRC is right but whose compressed payload is garbage.
	b := makeBatch(t, testCodecs[1], 0, batchOpts{}, kv{[]byte("k"), []byte("v")})
	for i := hotlog.BatchHeaderSize; i < len(b); i++ {
		b[i] = 0xAA
	}
	fixCRC(b)
	if _, err := l.Append(b, hotlog.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	seal(t, l, clk, 64<<10)
	tg := Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}}}
	to := l.HighWatermark() - 2
	// The map holds everything: both report the corrupt batch.
	big := buildMapWith(t, tg, 1<<20, false, 0, to)
	if !errors.Is(big.err, ErrCorrupt) {
		t.Fatalf("serial, large map: %v", big.err)
	}
	sameMap(t, "large map", big, buildMapWith(t, tg, 1<<20, true, 0, to))
	// The map is full long before it: neither reads that far.
	small := buildMapWith(t, tg, 16<<10, false, 0, to)
	if small.err != nil || small.end >= to {
		t.Fatalf("serial, small map: end %d of %d, %v", small.end, to, small.err)
	}
	sameMap(t, "small map", small, buildMapWith(t, tg, 16<<10, true, 0, to))
}
