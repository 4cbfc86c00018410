package hotlog

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sediment-io/sediment/internal/vfs"
)

// modelBatch is one batch as the model of the log keeps it.
type modelBatch struct {
	base, last, maxTs int64
	data              []byte
}

// TestModel runs random operations (appends, truncations, deletions, resets,
// clean reopens, crashes) against the log and a plain model of it, and after
// each one compares the whole content, the offsets, reads at random offsets and
// timestamp lookups. Odd seeds run with a file.delete.delay.ms that never
// passes during the run: deleted segments' files pile up (segments at the
// same base among them) until a reopen removes them.
func TestModel(t *testing.T) {
	for seed := range uint64(modelSeeds) {
		rng := rand.New(rand.NewPCG(seed, 1234))
		mem := vfs.NewMem()
		cfg := Config{SegmentBytes: int64(500 + rng.IntN(3000)), IndexIntervalBytes: 1 + rng.IntN(600)}
		if seed%2 == 1 {
			cfg.FileDeleteDelay = time.Hour
		}
		l := openMem(t, mem, cfg)
		var model []modelBatch
		start, end := int64(0), int64(0)
		epoch := int32(0)
		check := func(op string) {
			t.Helper()
			if l.LogStartOffset() != start || l.LogEndOffset() != end {
				t.Fatalf("seed %d after %s: start/end %d/%d, model %d/%d", seed, op, l.LogStartOffset(), l.LogEndOffset(), start, end)
			}
			var want []byte
			for _, b := range model {
				if b.last >= start {
					want = append(want, b.data...)
				}
			}
			if got := readAll(t, l); !bytes.Equal(got, want) {
				t.Fatalf("seed %d after %s: content differs (%d vs %d bytes)", seed, op, len(got), len(want))
			}
			for range 5 {
				if end == start {
					break
				}
				off := start + rng.Int64N(end-start)
				got, err := l.ReadBytes(off, 1, end)
				if err != nil {
					t.Fatalf("seed %d after %s: read %d: %v", seed, op, off, err)
				}
				for _, b := range model {
					if off >= b.base && off <= b.last && !bytes.Equal(got, b.data) {
						t.Fatalf("seed %d after %s: read %d gave the wrong batch", seed, op, off)
					}
				}
				ts := rng.Int64N(2000)
				gotOff, _, _ := l.OffsetForTimestamp(ts)
				wantOff := int64(-1)
				for _, b := range model {
					if b.last >= start && b.maxTs >= ts {
						wantOff = max(b.base, start)
						break
					}
				}
				// For uncompressed batches the lookup finds the record inside.
				if wantOff == -1 && gotOff != -1 || wantOff != -1 && (gotOff < wantOff || gotOff > wantOff+5) {
					for _, b := range model {
						t.Logf("model batch %d-%d maxTs %d", b.base, b.last, b.maxTs)
					}
					for _, sg := range l.Segments() {
						t.Logf("segment %+v", sg)
					}
					got, _ := l.ReadBytes(gotOff, 1, end)
					h, _ := ParseBatchHeader(got)
					t.Logf("log batch at %d: %+v", gotOff, h)
					t.Fatalf("seed %d after %s: OffsetForTimestamp(%d) = %d, batch at %d", seed, op, ts, gotOff, wantOff)
				}
			}
		}
		for step := range 150 {
			switch r := rng.IntN(100); {
			case r < 60:
				if rng.IntN(10) == 0 {
					epoch++
				}
				b := randomBatch(rng, int64(rng.IntN(1900)))
				res, err := l.Append(b, AppendOptions{LeaderEpoch: epoch})
				if err != nil {
					t.Fatal(err)
				}
				h, _ := ParseBatchHeader(b)
				model = append(model, modelBatch{res.FirstOffset, res.LastOffset, h.MaxTimestamp, b})
				end = res.LastOffset + 1
				check("append")
			case r < 70:
				off := start + rng.Int64N(end-start+1)
				if err := l.TruncateTo(off); err != nil {
					t.Fatal(err)
				}
				for i, b := range model {
					if b.last >= off {
						end = min(end, b.base)
						model = model[:i]
						break
					}
				}
				start = min(start, end)
				check("truncate")
			case r < 78:
				off := start + rng.Int64N(end-start+1)
				if err := l.DeleteBefore(off); err != nil {
					t.Fatal(err)
				}
				start = max(start, off)
				check("delete-before")
			case r < 80:
				off := end + rng.Int64N(50)
				if err := l.TruncateFullyAndStartAt(off); err != nil {
					t.Fatal(err)
				}
				model, start, end = nil, off, off
				check("reset")
			case r < 90:
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				l = openMem(t, mem, cfg)
				if n := countDeleted(t, mem); n != 0 {
					t.Fatalf("seed %d: %d deleted files after a reopen", seed, n)
				}
				check("reopen")
			default:
				// Every operation above returned after its data was durable:
				// a crash loses nothing.
				crashed := mem.CrashCloneWith(vfs.CrashOptions{Rand: rng})
				l.Close()
				mem = crashed
				l = openMem(t, mem, cfg)
				check("crash")
			}
			_ = step
		}
		l.Close()
	}
}

// modelSeeds is raised by hand (or -args) for a long soak.
var modelSeeds = 6
