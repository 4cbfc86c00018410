package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/internal/testutil"
)

var (
	ctpOnce sync.Once
	ctpBin  string
	ctpErr  error
)

// buildCTP builds the pipeline program (e2e/ctp) once per test binary.
func buildCTP(t *testing.T) string {
	t.Helper()
	ctpOnce.Do(func() {
		dir := filepath.Dir(sedimentBin)
		ctpBin = filepath.Join(dir, "ctp")
		out, err := exec.Command("go", "build", "-o", ctpBin, "github.com/sediment-io/sediment/e2e/ctp").CombinedOutput()
		if err != nil {
			ctpErr = fmt.Errorf("go build e2e/ctp: %v\n%s", err, out)
		}
	})
	if ctpErr != nil {
		t.Fatal(ctpErr)
	}
	return ctpBin
}

// ctpProc is one pipeline instance process.
type ctpProc struct {
	t    *testing.T
	bin  string
	args []string
	log  *syncBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startCTP starts pipeline instance id against the comma-separated seed
// brokers; it is killed at cleanup.
func startCTP(t *testing.T, brokers, id string, batch int) *ctpProc {
	p := &ctpProc{t: t, bin: buildCTP(t), log: &syncBuffer{},
		args: []string{"--brokers", brokers, "--in", "pin", "--out", "pout", "--group", "copy", "--id", id, "--batch", strconv.Itoa(batch)}}
	p.start()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("pipeline %s log:\n%s", id, p.log.String())
		}
	})
	return p
}

func (p *ctpProc) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = brokerEnv()
	cmd.Stderr = p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	fmt.Fprintf(p.log, "=== start %s\n", strings.Join(p.args, " "))
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(p.log, sc.Text())
		}
		err := cmd.Wait()
		fmt.Fprintf(p.log, "=== exited: %v\n", errOrOK(err))
	}()
}

// kill sends SIGKILL and waits for the exit.
func (p *ctpProc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill() //nolint:errcheck // it may have exited
	<-done
}

// clientFunc makes a franz-go client closed at cleanup: Broker.Client or
// Cluster.Client.
type clientFunc func(t testing.TB, opts ...kgo.Opt) *kgo.Client

// pipelineFeed is what the pipeline tests share: the keyed input of topic
// pin (a sequence number per key), produced in stages; the group's
// progress; and the check of the output topic pout.
type pipelineFeed struct {
	t        *testing.T
	ctx      context.Context
	n, keys  int
	seq      []int // input records per key
	input    []*kgo.Record
	sent     int
	producer *kgo.Client
	poll     *kadm.Client
	lastPoll time.Time
	last     int64 // the last progress read, -1 if it failed
}

// newPipelineFeed prepares n records over keys keys, to be produced to pin
// by sendTo.
func newPipelineFeed(t *testing.T, ctx context.Context, n, keys int, client clientFunc) *pipelineFeed {
	f := &pipelineFeed{t: t, ctx: ctx, n: n, keys: keys, seq: make([]int, keys), last: -1,
		producer: client(t, kgo.DefaultProduceTopic("pin"), kgo.ProducerLinger(5*time.Millisecond)),
		// One client serves every poll (it reconnects after broker
		// restarts).
		poll: kadm.NewClient(client(t, kgo.RequestRetries(1))),
	}
	f.input = make([]*kgo.Record, 0, n)
	for i := 0; i < n; i++ {
		k := i % keys
		f.input = append(f.input, &kgo.Record{Key: []byte(fmt.Sprintf("k%02d", k)), Value: []byte(fmt.Sprintf("k%02d-%06d", k, f.seq[k]))})
		f.seq[k]++
	}
	return f
}

// sendTo produces the input up to record upTo (at most n). The tests keep
// the input ahead of the pipeline by at most a step or two, so that every
// event lands while records are being copied (a pipeline faster than the
// events once finished before the fourth and the test waited for records
// that did not exist).
func (f *pipelineFeed) sendTo(upTo int64) {
	f.t.Helper()
	for f.sent < int(min(upTo, int64(f.n))) {
		end := min(f.sent+5000, int(min(upTo, int64(f.n))))
		if err := f.producer.ProduceSync(f.ctx, f.input[f.sent:end]...).FirstErr(); err != nil {
			f.t.Fatal(err)
		}
		f.sent = end
	}
}

// progress is how many input records the group "copy" has committed (their
// copies are committed in the same transactions); -1 while no broker
// answers. It asks at most every 100 ms.
func (f *pipelineFeed) progress() int64 {
	if time.Since(f.lastPoll) < 100*time.Millisecond {
		return f.last
	}
	f.lastPoll = time.Now()
	rctx, rcancel := context.WithTimeout(f.ctx, 3*time.Second)
	defer rcancel()
	offs, err := f.poll.FetchOffsets(rctx, "copy")
	if err != nil {
		f.last = -1
		return -1
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.Topic == "pin" {
			sum += o.At
		}
	})
	f.last = sum
	return sum
}

// waitCopied waits until the group has committed at least target records.
func (f *pipelineFeed) waitCopied(target int64, timeout time.Duration, what string) {
	f.t.Helper()
	testutil.WaitFor(f.t, timeout, fmt.Sprintf("the pipeline to copy %d records (%s)", target, what), func() bool {
		return f.progress() >= target
	})
}

// verify reads pout read_committed: every input record exactly once, in
// order per key (and so no aborted record), and nothing visible after them
// up to the last stable offset. It returns the records read.
func (f *pipelineFeed) verify(client clientFunc) int {
	t, ctx, n := f.t, f.ctx, f.n
	t.Helper()
	consumer := client(t, kgo.ConsumeTopics("pout"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	got := map[string][]string{}
	count := 0
	next := map[int32]int64{}
	for count < n {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading the output: %v (read %d of %d)", ctx.Err(), count, n)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Logf("fetch partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
			next[r.Partition] = r.Offset + 1
			count++
		})
	}
	// Nothing visible after them: a reader from there up to the last
	// stable offset gets no record.
	lso, err := kadm.NewClient(client(t)).ListCommittedOffsets(ctx, "pout")
	if err != nil {
		t.Fatal(err)
	}
	tail := map[string]map[int32]kgo.Offset{"pout": {}}
	lso.Each(func(o kadm.ListedOffset) {
		if o.Offset > next[o.Partition] {
			tail["pout"][o.Partition] = kgo.NewOffset().At(next[o.Partition])
		}
	})
	if len(tail["pout"]) > 0 {
		rest := client(t, kgo.ConsumePartitions(tail), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
		tctx, tcancel := context.WithTimeout(ctx, 3*time.Second)
		fs := rest.PollFetches(tctx)
		tcancel()
		fs.EachRecord(func(r *kgo.Record) {
			t.Errorf("extra output record %s at %d/%d", r.Value, r.Partition, r.Offset)
		})
	}
	for k := 0; k < f.keys; k++ {
		key := fmt.Sprintf("k%02d", k)
		vals := got[key]
		if len(vals) != f.seq[k] {
			t.Errorf("key %s: %d records in the output, %d in the input", key, len(vals), f.seq[k])
		}
		for i, v := range vals {
			if want := fmt.Sprintf("%s-%06d", key, i); v != want {
				t.Fatalf("key %s: output record %d is %s, want %s (a duplicate, a loss or a reordering)", key, i, v, want)
			}
		}
	}
	if count != n {
		t.Fatalf("%d records in the output, %d in the input", count, n)
	}
	return count
}

// finish sends the rest of the input, waits (at most timeout) until the
// pipelines copied it, stops them and checks the output (verify).
func (f *pipelineFeed) finish(pipes []*ctpProc, timeout time.Duration, client clientFunc) int {
	f.t.Helper()
	f.sendTo(int64(f.n))
	f.waitCopied(int64(f.n), timeout, "everything")
	for _, p := range pipes {
		p.kill()
	}
	return f.verify(client)
}

// pipelineRecords is n, or SEDIMENT_E2E_PIPELINE_RECORDS if set.
func pipelineRecords(t *testing.T, n int) int {
	if s := os.Getenv("SEDIMENT_E2E_PIPELINE_RECORDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("SEDIMENT_E2E_PIPELINE_RECORDS=%q", s)
		}
		return v
	}
	return n
}

// TestTxnPipelineSIGKILL runs a consume–transform–produce pipeline of two
// processes (e2e/ctp: franz-go GroupTransactSession, transactions of a few
// hundred records, offsets committed in the transaction) copying N keyed
// records while the test SIGKILLs a pipeline instance three times and the
// broker three times (restarting each). A read_committed consumer of the
// output then sees every input record exactly once, in order per key, and
// so no aborted record. N is 20,000 (SEDIMENT_E2E_PIPELINE_RECORDS sets it;
// `make pipeline` runs 200,000).
func TestTxnPipelineSIGKILL(t *testing.T) {
	n := pipelineRecords(t, 20000)
	const partitions, keys = 4, 64
	b := StartBroker(t, BrokerOptions{})
	b.CreateTopic(t, "pin", partitions, nil)
	b.CreateTopic(t, "pout", partitions, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	feed := newPipelineFeed(t, ctx, n, keys, b.Client)
	pipes := []*ctpProc{startCTP(t, b.Addr, "ctp-a", 300), startCTP(t, b.Addr, "ctp-b", 300)}
	total := int64(n)
	// Six events, each after at least step more records were copied; the
	// pipeline runs at most one step past a target (sendTo), so the last
	// target is below 11 steps: before the end.
	step := total / 16
	feed.sendTo(2 * step)
	last := int64(0)
	for i := 0; i < 6; i++ {
		target := min(last+step, total)
		feed.sendTo(target + step)
		feed.waitCopied(target, 3*time.Minute, fmt.Sprintf("event %d", i))
		last = feed.last
		if i%2 == 0 {
			p := pipes[(i/2)%2]
			t.Logf("event %d at %d copied: SIGKILL of pipeline %s", i, last, p.args[len(p.args)-3])
			p.kill()
			p.start()
		} else {
			t.Logf("event %d at %d copied: SIGKILL of the broker", i, last)
			b.Restart(false)
		}
	}
	count := feed.finish(pipes, 5*time.Minute, b.Client)
	t.Logf("%d records copied exactly once through 3 pipeline and 3 broker SIGKILLs", count)
}
