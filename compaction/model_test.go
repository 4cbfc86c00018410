package compaction

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/vfs"
)

// TestModel runs random operations on a compacted log (keyed appends with
// every codec and tombstones, cleaning passes with random map sizes and
// checkpoints, time passing horizons, reopening, crashes) and after each one
// compares the log to a model, the latest write of every key: a key's latest
// record in the log is always its latest write, or the key is absent when
// that write was a tombstone.
func TestModel(t *testing.T) {
	for seed := range uint64(modelSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 77))
			clk := &clock{}
			clk.ms.Store(1_000_000)
			mem := vfs.NewMem()
			l := openLog(t, mem, 2<<10, clk)
			defer func() { l.Close() }()
			model := map[string]string{} // key -> latest value ("" for a tombstone)
			checkpoint := int64(0)
			seq := 0
			for op := 0; op < 300; op++ {
				switch r := rng.IntN(100); {
				case r < 60: // a keyed batch
					n := 1 + rng.IntN(6)
					recs := make([]kv, n)
					for i := range recs {
						k := fmt.Sprintf("k%02d", rng.IntN(40))
						seq++
						v := []byte(fmt.Sprintf("v%d", seq))
						if rng.IntN(6) == 0 {
							v = nil
						}
						recs[i] = kv{[]byte(k), v}
						model[k] = string(v)
					}
					tc := testCodecs[rng.IntN(len(testCodecs))]
					if _, err := l.Append(makeBatch(t, tc, clk.now().UnixMilli(), batchOpts{}, recs...), hotlog.AppendOptions{}); err != nil {
						t.Fatal(err)
					}
					l.SetHighWatermark(l.LogEndOffset())
				case r < 85: // a pass
					c := NewCleaner(CleanerConfig{DedupeBufferBytes: int64(8+rng.IntN(60)) * offsetMapSlotBytes}, clk.now)
					if rng.IntN(4) == 0 {
						checkpoint = 0
					}
					st, err := c.Clean(context.Background(), Target{Log: l, FirstDirty: checkpoint,
						Config: TopicConfig{Policy: Policy{Compact: true}, DeleteRetention: time.Second, SegmentBytes: int64(2+rng.IntN(8)) << 10}})
					c.Close()
					if err != nil {
						t.Fatalf("op %d: clean: %v", op, err)
					}
					checkpoint = st.MapEnd
				case r < 92:
					clk.add(time.Duration(rng.IntN(1500)) * time.Millisecond)
				case r < 96: // reopen
					l.Close()
					l = openLog(t, mem, 2<<10, clk)
					l.SetHighWatermark(l.LogEndOffset())
				default: // crash: everything was acknowledged (FlushOS, so sync first)
					if err := l.Sync(); err != nil {
						t.Fatal(err)
					}
					crashed := mem.CrashClone()
					l.Close()
					mem = crashed
					l = openLog(t, mem, 2<<10, clk)
					l.SetHighWatermark(l.LogEndOffset())
				}
				got := latest(readView(t, l))
				for k, v := range model {
					g, ok := got[k]
					switch {
					case !ok && v == "":
					case !ok:
						t.Fatalf("op %d: key %s (latest %q) lost", op, k, v)
					case string(g.value) != v || (v == "") != (g.value == nil):
						t.Fatalf("op %d: key %s holds %q, latest write %q", op, k, g.value, v)
					}
				}
				if len(got) > len(model) {
					t.Fatalf("op %d: %d keys in the log, %d written", op, len(got), len(model))
				}
			}
		})
	}
}

// modelSeeds is how many random runs TestModel makes.
var modelSeeds = 4
