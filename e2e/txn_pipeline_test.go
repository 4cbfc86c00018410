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

func startCTP(t *testing.T, b *Broker, id string, batch int) *ctpProc {
	p := &ctpProc{t: t, bin: buildCTP(t), log: &syncBuffer{},
		args: []string{"--brokers", b.Addr, "--in", "pin", "--out", "pout", "--group", "copy", "--id", id, "--batch", strconv.Itoa(batch)}}
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

// TestTxnPipelineSIGKILL runs a consume–transform–produce pipeline of two
// processes (e2e/ctp: franz-go GroupTransactSession, transactions of a few
// hundred records, offsets committed in the transaction) copying N keyed
// records while the test SIGKILLs a pipeline instance three times and the
// broker three times (restarting each). A read_committed consumer of the
// output then sees every input record exactly once, in order per key, and
// so no aborted record. N is 20,000 (SEDIMENT_E2E_PIPELINE_RECORDS sets it;
// `make pipeline` runs 200,000).
func TestTxnPipelineSIGKILL(t *testing.T) {
	n := 20000
	if s := os.Getenv("SEDIMENT_E2E_PIPELINE_RECORDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("SEDIMENT_E2E_PIPELINE_RECORDS=%q", s)
		}
		n = v
	}
	const partitions, keys = 4, 64
	b := StartBroker(t, BrokerOptions{})
	b.CreateTopic(t, "pin", partitions, nil)
	b.CreateTopic(t, "pout", partitions, nil)

	// The input, keyed, with a sequence number per key.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	producer := b.Client(t, kgo.DefaultProduceTopic("pin"), kgo.ProducerLinger(5*time.Millisecond))
	seq := make([]int, keys)
	input := make([]*kgo.Record, 0, n)
	for i := 0; i < n; i++ {
		k := i % keys
		input = append(input, &kgo.Record{Key: []byte(fmt.Sprintf("k%02d", k)), Value: []byte(fmt.Sprintf("k%02d-%06d", k, seq[k]))})
		seq[k]++
	}
	// The input is produced in stages, ahead of the pipeline by at most
	// two steps, so that every event below lands while records are being
	// copied (a pipeline faster than the events once finished before the
	// fourth and the test waited for records that did not exist).
	sent := 0
	sendTo := func(upTo int64) {
		for sent < int(min(upTo, int64(n))) {
			end := min(sent+5000, int(min(upTo, int64(n))))
			if err := producer.ProduceSync(ctx, input[sent:end]...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			sent = end
		}
	}

	pipes := []*ctpProc{startCTP(t, b, "ctp-a", 300), startCTP(t, b, "ctp-b", 300)}
	// progress is how many input records the group has committed (their
	// copies are committed in the same transactions); -1 while the
	// broker does not answer. One client serves every poll (it reconnects
	// after broker restarts), asked at most every 100 ms.
	pollCl := b.Client(t, kgo.RequestRetries(1))
	pollAdm := kadm.NewClient(pollCl)
	var lastPoll time.Time
	lastValue := int64(-1)
	progress := func() int64 {
		if time.Since(lastPoll) < 100*time.Millisecond {
			return lastValue
		}
		lastPoll = time.Now()
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		defer rcancel()
		offs, err := pollAdm.FetchOffsets(rctx, "copy")
		if err != nil {
			lastValue = -1
			return -1
		}
		var sum int64
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil && o.Topic == "pin" {
				sum += o.At
			}
		})
		lastValue = sum
		return sum
	}
	total := int64(n)
	// Six events, each after at least step more records were copied; the
	// pipeline runs at most one step past a target (sendTo), so the last
	// target is below 11 steps: before the end.
	step := total / 16
	sendTo(2 * step)
	last := int64(0)
	for i := 0; i < 6; i++ {
		target := min(last+step, total)
		sendTo(target + step)
		testutil.WaitFor(t, 3*time.Minute, fmt.Sprintf("the pipeline to copy %d records (event %d)", target, i), func() bool {
			return progress() >= target
		})
		last = lastValue
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
	sendTo(total)
	testutil.WaitFor(t, 5*time.Minute, "the pipeline to copy everything", func() bool { return progress() >= total })
	for _, p := range pipes {
		p.kill()
	}

	// The output, read_committed: N records.
	consumer := b.Client(t, kgo.ConsumeTopics("pout"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
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
	lso, err := b.Admin(t).ListCommittedOffsets(ctx, "pout")
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
		rest := b.Client(t, kgo.ConsumePartitions(tail), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
		tctx, tcancel := context.WithTimeout(ctx, 3*time.Second)
		fs := rest.PollFetches(tctx)
		tcancel()
		fs.EachRecord(func(r *kgo.Record) {
			t.Errorf("extra output record %s at %d/%d", r.Value, r.Partition, r.Offset)
		})
	}
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("k%02d", k)
		vals := got[key]
		if len(vals) != seq[k] {
			t.Errorf("key %s: %d records in the output, %d in the input", key, len(vals), seq[k])
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
	t.Logf("%d records copied exactly once through 3 pipeline and 3 broker SIGKILLs", count)
}
