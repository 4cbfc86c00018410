package tiering

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/faulty"
	"github.com/sediment-io/sediment/objectstore/mem"
)

// TestFailAtEveryStep fails the k-th durable step of a round (each object
// commit, then the metadata commit) for every k, restarts, and checks that
// the next round completes, that the manifest references only complete
// uploads with no offset twice, that every record reads back, and that the
// cleaner leaves exactly the referenced objects.
func TestFailAtEveryStep(t *testing.T) {
	// Count the steps of a clean round first.
	probe := newEnv(t, envOptions{store: mem.New(nil), cfg: localOnlyTail(0)})
	probe.produce(60, 5, 40)
	before := probe.m.Metrics().Puts
	probe.run()
	steps := int(probe.m.Metrics().Puts-before) + 1 // + the metadata commit
	if steps < 6 {
		t.Fatalf("only %d steps", steps)
	}
	for k := 0; k < steps; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			fs := faulty.Wrap(mem.New(nil), uint64(k))
			e := newEnv(t, envOptions{store: fs, cfg: localOnlyTail(0)})
			e.produce(60, 5, 40)
			if k < steps-1 {
				fs.SetRules(faulty.Rule{Ops: faulty.OpCommit, After: k, Times: 1})
			} else {
				e.com.failCommit = func() (error, bool) {
					e.com.failCommit = nil
					return fmt.Errorf("injected: crash at the commit"), false
				}
			}
			if err := e.p.RunOnce(context.Background()); err == nil {
				t.Fatal("the failed step went unnoticed")
			}
			if st := e.p.Status(); e.log.LogStartOffset() > max(st.RemoteEndOffset, 0) {
				t.Fatal("deleted locally what is not committed remotely")
			}
			e.m.Close()
			e.open(envOptions{}, e.p.Config())
			e.run()
			m := assertManifestMatchesBucket(t, e)
			if len(m.Segments) == 0 || e.log.LogStartOffset() != m.EndOffset {
				t.Fatalf("after recovery: %d segments, local start %d, remote end %d", len(m.Segments), e.log.LogStartOffset(), m.EndOffset)
			}
			got, err := e.readAll(0, e.log.HighWatermark(), 1<<20)
			if err != nil || !bytes.Equal(got, e.stampedFrom(0)) {
				t.Fatalf("read back: %v", err)
			}
			e.clock.Advance(2 * time.Hour)
			if _, err := e.p.CleanOrphans(context.Background()); err != nil {
				t.Fatal(err)
			}
			want := 1 // the manifest
			for _, s := range m.Segments {
				want += len(s.Keys())
			}
			if n := len(e.objects()); n != want {
				t.Fatalf("%d objects after cleaning, want %d", n, want)
			}
		})
	}
}

// recordingStore logs the order of durable steps.
type recordingStore struct {
	objectstore.Store
	mu  sync.Mutex
	ops []string
}

func (s *recordingStore) note(op string) {
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.mu.Unlock()
}

func (s *recordingStore) CreateObject(ctx context.Context, key string, opts objectstore.CreateOptions) (objectstore.Writer, error) {
	w, err := s.Store.CreateObject(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	if !opts.NoOverwrite {
		s.note("OVERWRITABLE " + key)
	}
	return &recordingWriter{Writer: w, s: s, key: key}, nil
}

func (s *recordingStore) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		s.note("delete " + k)
	}
	return s.Store.Delete(ctx, keys...)
}

type recordingWriter struct {
	objectstore.Writer
	s   *recordingStore
	key string
}

func (w *recordingWriter) Close() error {
	err := w.Writer.Close()
	if err == nil {
		w.s.note("put " + w.key)
	}
	return err
}

// TestStepOrder: every object of a segment is durable before the manifest
// that names it, the manifest before the commit, and expired objects are
// deleted only after the commit that drops them. Nothing is written with
// overwrite allowed.
func TestStepOrder(t *testing.T) {
	rec := &recordingStore{Store: mem.New(nil)}
	cfg := *localOnlyTail(0)
	e := newEnv(t, envOptions{store: rec, cfg: &cfg})
	e.com.failCommit = func() (error, bool) {
		rec.note("commit")
		return nil, true
	}
	e.produce(100, 5, 40)
	e.run()
	cfg.RetentionBytes = 1
	e.p.SetConfig(cfg)
	e.run()
	seen := map[string]int{}
	for i, op := range rec.ops {
		seen[op] = i
	}
	commits := []int{}
	for i, op := range rec.ops {
		if op == "commit" {
			commits = append(commits, i)
		}
		if bytes.HasPrefix([]byte(op), []byte("OVERWRITABLE")) {
			t.Fatalf("%s", op)
		}
	}
	if len(commits) != 2 {
		t.Fatalf("%d commits: %v", len(commits), rec.ops)
	}
	ctx := context.Background()
	// The first manifest and its segments were put before the first commit.
	for i, op := range rec.ops[:commits[0]] {
		k, err := ParseKey(op[len("put "):])
		if err != nil {
			continue
		}
		if k.Kind == 'm' {
			b, _ := objectstore.ReadAll(ctx, rec.Store, k.Stem+k.Suffix, 1<<20)
			m, err := DecodeManifest(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range m.Segments {
				for _, key := range s.Keys() {
					if j, ok := seen["put "+key]; !ok || j > i {
						t.Fatalf("%s named by the manifest before it was put", key)
					}
				}
			}
		}
	}
	for i, op := range rec.ops {
		if bytes.HasPrefix([]byte(op), []byte("delete ")) && i < commits[1] {
			t.Fatalf("%s before the commit that drops it", op)
		}
	}
}
