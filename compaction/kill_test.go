package compaction

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/vfs"
)

// killChildEnv names the log directory of the child process of
// TestKillDuringCleaning.
const killChildEnv = "SEDIMENT_COMPACTION_KILL_CHILD"

// TestKillDuringCleaning runs a writer-and-cleaner in a child process on the
// OS file system and kills it (SIGKILL) 20 times, at points chosen by its
// progress, often in the middle of a cleaning pass. After every kill the log
// is reopened: the latest record of every key must be the last acknowledged
// write of that key or a later write (one that reached the log but whose
// acknowledgement the kill cut off).
func TestKillDuringCleaning(t *testing.T) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		killChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	acked := map[string]int64{} // key -> last acknowledged sequence number
	rng := rand.New(rand.NewPCG(8, 8))
	seqBase := int64(0)
	interrupted := map[string]int{} // leftovers of interrupted swaps found after kills, by suffix
	for kill := 0; kill < 20; kill++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringCleaning$", "-test.count=1")
		cmd.Env = append(os.Environ(), killChildEnv+"="+dir, "SEDIMENT_SEQ_BASE="+strconv.FormatInt(seqBase, 10))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after a random amount of progress, while a pass runs when
		// the child says one started.
		wantAcks, wantCleans := 50+rng.IntN(300), 1+rng.IntN(3)
		acks, cleans := 0, 0
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 3 && f[0] == "ack":
				seq, _ := strconv.ParseInt(f[2], 10, 64)
				acked[f[1]] = seq
				seqBase = max(seqBase, seq+1)
				acks++
			case len(f) == 1 && f[0] == "clean":
				cleans++
			}
			if acks >= wantAcks && cleans >= wantCleans {
				break
			}
		}
		// The pass runs throttled for tens of milliseconds: kill at a random
		// point of it (a kill point, not a synchronisation).
		<-time.After(time.Duration(rng.IntN(60_000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		go func() {
			for sc.Scan() { // drain
			}
		}()
		cmd.Wait()
		seqBase += 1 << 20 // writes after the last ack may have landed
		names, _ := vfs.Default.List(dir)
		for _, n := range names {
			if strings.Contains(n, ".cleaned") || strings.Contains(n, ".swap") || strings.Contains(n, ".deleted") {
				interrupted[n[strings.IndexByte(n, '.'):]]++
			}
		}

		l, err := hotlog.Open(hotlog.Options{FS: vfs.Default, Dir: dir, Config: killLogConfig, Logger: quiet})
		if err != nil {
			t.Fatalf("kill %d: reopen: %v", kill, err)
		}
		l.SetHighWatermark(l.LogEndOffset())
		got := latest(readView(t, l))
		for k, seq := range acked {
			r, ok := got[k]
			if !ok {
				t.Fatalf("kill %d: key %s (acknowledged seq %d) lost", kill, k, seq)
			}
			v, err := strconv.ParseInt(strings.TrimPrefix(string(r.value), "seq-"), 10, 64)
			if err != nil || v < seq {
				t.Fatalf("kill %d: key %s holds %q, acknowledged seq %d", kill, k, r.value, seq)
			}
			acked[k] = v // the survivor is now the latest write
		}
		l.Close()
	}
	t.Logf("leftovers of interrupted passes seen after the kills: %v", interrupted)
}

var killLogConfig = hotlog.Config{SegmentBytes: 4 << 10, IndexIntervalBytes: 512}

// killChild appends keyed records (acknowledging each on stdout once Append
// returned, which fsyncs) and cleans the log between appends, until killed.
func killChild(dir string) {
	seq, _ := strconv.ParseInt(os.Getenv("SEDIMENT_SEQ_BASE"), 10, 64)
	l, err := hotlog.Open(hotlog.Options{FS: vfs.Default, Dir: dir, Config: killLogConfig, Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	// Throttled (and in small chunks) so that a pass lasts long enough to be
	// killed in the middle.
	c := NewCleaner(CleanerConfig{DedupeBufferBytes: 1 << 16, IOMaxBytesPerSecond: 1 << 20, ReadChunk: 4 << 10}, nil)
	rng := rand.New(rand.NewPCG(uint64(seq), 1))
	var cp int64
	for i := 0; ; i++ {
		// Eight records a batch (one fsync), each acknowledged once Append
		// returned.
		recs := make([]kv, 8)
		for j := range recs {
			recs[j] = kv{[]byte(fmt.Sprintf("key-%03d", rng.IntN(200))), []byte("seq-" + strconv.FormatInt(seq+int64(j), 10))}
		}
		b := makeBatch(nilTB{}, testCodecs[i%len(testCodecs)], time.Now().UnixMilli(), batchOpts{}, recs...)
		if _, err := l.Append(b, hotlog.AppendOptions{}); err != nil {
			fmt.Fprintln(os.Stderr, "child append:", err)
			os.Exit(2)
		}
		for _, r := range recs {
			fmt.Fprintf(w, "ack %s %d\n", r.key, seq)
			seq++
		}
		w.Flush()
		l.SetHighWatermark(l.LogEndOffset())
		if i%5 == 4 {
			fmt.Fprintln(w, "clean")
			w.Flush()
			st, err := c.Clean(context.Background(), Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}, SegmentBytes: 16 << 10}, FirstDirty: cp})
			if err != nil {
				fmt.Fprintln(os.Stderr, "child clean:", err)
				os.Exit(2)
			}
			cp = st.MapEnd
		}
	}
}

// nilTB lets the child use the test helpers outside a test.
type nilTB struct{ testing.TB }

func (nilTB) Helper()                   {}
func (nilTB) Fatal(args ...any)         { fmt.Fprintln(os.Stderr, args...); os.Exit(2) }
func (nilTB) Fatalf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...); os.Exit(2) }
