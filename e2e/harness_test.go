package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sediment-io/sediment/internal/testutil"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sedimentBin is the binary TestMain built for this run.
var sedimentBin string

const (
	// startTimeout bounds how long a broker may take to answer
	// ApiVersions (a race-enabled binary on a busy 2-core machine is slow).
	startTimeout = 90 * time.Second
	// stopTimeout is how long SIGTERM may take before SIGKILL.
	stopTimeout = 30 * time.Second
	// commandTimeout bounds one run of sediment or kcat.
	commandTimeout = 2 * time.Minute
)

// TestMain builds the binary once. The tests that call t.Parallel() start their own brokers
// on ports freePort hands out, use only t.TempDir() for files, change no
// environment and wait for conditions with generous deadlines, so Go runs
// them two at a time (-parallel defaults to GOMAXPROCS) after the serial
// ones: make test's e2e package, its longest, was 18 minutes of mostly idle
// cores. Tests that kill brokers on purpose, measure rates (quotas,
// throttles), share an npm project directory, run a KDC or MinIO, or run
// chaos stay serial, alone on the machine.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped with -short (these tests start broker processes)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "sediment-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	sedimentBin = filepath.Join(dir, "sediment")
	args := []string{"build", "-o", sedimentBin}
	if raceEnabled {
		// A broker built with the race detector turns the e2e load into
		// a race hunt; Broker fails the test on any race report.
		args = append(args, "-race")
	}
	args = append(args, "github.com/sediment-io/sediment/cmd/sediment")
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go %s: %v\n", strings.Join(args, " "), err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback TCP port that nothing listens on right now.
//
// Ports come from below the kernel's ephemeral range when there is room
// there: a broker killed and started again binds the same addresses, and
// in the ephemeral range any outgoing connection or listen on port 0 of
// any process (a client, another test package) may hold the port by then.
// Below that range only an explicit bind can take it.
func freePort(t testing.TB) int {
	t.Helper()
	givenPorts.Lock()
	defer givenPorts.Unlock()
	lo, hi := portRange()
	for range 1000 {
		port := lo + givenPorts.rng.IntN(hi-lo)
		if givenPorts.m[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // in use
		}
		l.Close()
		givenPorts.m[port] = true
		return port
	}
	t.Fatalf("free port: none free in [%d, %d) after 1000 tries", lo, hi)
	return 0
}

// portRange is where freePort looks: [10000, the ephemeral range's low
// end), or, when the ephemeral range starts too low to leave 5000 ports,
// the 10000 ports above its top.
func portRange() (lo, hi int) {
	eLo, eHi := 32768, 60999 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && l <= h {
				eLo, eHi = l, h
			}
		}
	}
	if eLo-10000 >= 5000 {
		return 10000, eLo
	}
	if eHi+10000 <= 65535 {
		return eHi + 1, eHi + 10001
	}
	return 1024, 65536 // no room outside it: take what there is
}

// givenPorts are the ports freePort has handed out in this run.
var givenPorts = struct {
	sync.Mutex
	m   map[int]bool
	rng *rand.Rand
}{m: map[int]bool{}, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))}

// syncBuffer is a goroutine-safe log sink for a broker's stdout and stderr.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	tee io.Writer // os.Stderr with SEDIMENT_E2E_VERBOSE, else nil
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tee != nil {
		s.tee.Write(p) //nolint:errcheck // a best-effort copy for humans
	}
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// BrokerOptions configures StartBroker. Zero values pick defaults.
type BrokerOptions struct {
	NodeID int
	// DataDir is reused if set (e.g. a second broker over the same
	// data); otherwise a fresh t.TempDir().
	DataDir string
	// ExtraArgs are appended to the broker command line.
	ExtraArgs []string
	// Env is added to the broker's environment (e.g. AWS credentials).
	Env []string
	// Listeners are more listeners after the first (the PLAINTEXT one at
	// Addr, which the harness probes): NAME://host:port,...
	Listeners string
}

// Broker is one `sediment broker` process. Its address, admin address and
// data directory stay the same across restarts.
type Broker struct {
	t         testing.TB
	NodeID    int
	Addr      string // Kafka listener, 127.0.0.1:port
	AdminAddr string // admin (metrics) listener
	RaftAddr  string // the metadata quorum's Raft transport
	DataDir   string
	extra     []string
	env       []string
	listeners string // BrokerOptions.Listeners
	// leadListeners come before Addr's: the first carries the brokers'
	// own traffic (replica fetches, transaction markers).
	leadListeners string
	log           *syncBuffer
	starts        int

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current process has exited
	exitErr error         // its Wait result, valid after exited is closed
}

// StartBroker starts a broker and waits until it answers ApiVersions and
// Metadata. The broker is stopped (SIGTERM, then SIGKILL) at cleanup, and its
// log is written to the test log if the test failed.
func StartBroker(t testing.TB, opts BrokerOptions) *Broker {
	t.Helper()
	if opts.NodeID == 0 {
		opts.NodeID = 1
	}
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(t.TempDir(), "data")
	}
	b := &Broker{
		t:         t,
		NodeID:    opts.NodeID,
		DataDir:   opts.DataDir,
		extra:     opts.ExtraArgs,
		env:       opts.Env,
		listeners: opts.Listeners,
		log:       &syncBuffer{},
	}
	if os.Getenv("SEDIMENT_E2E_VERBOSE") != "" {
		b.log.tee = os.Stderr
	}
	t.Cleanup(func() {
		b.Stop()
		logText := b.log.String()
		if strings.Contains(logText, "WARNING: DATA RACE") {
			t.Errorf("broker %d: the race detector reported a data race (log below)", b.NodeID)
		}
		if t.Failed() {
			t.Logf("broker %d log (%s, data %s):\n%s", b.NodeID, b.Addr, b.DataDir, logText)
		}
	})
	// A port found free may be taken by another process before the broker
	// binds it (other tests run on this machine too): then pick new ones.
	for attempt := 1; ; attempt++ {
		b.pickPorts()
		logLen := len(b.log.String())
		err := b.start()
		if err == nil {
			break
		}
		if attempt < 3 && strings.Contains(b.log.String()[logLen:], "address already in use") {
			fmt.Fprintf(b.log, "=== e2e: a port was taken, trying others\n")
			continue
		}
		t.Fatalf("broker %d at %s did not come up: %v (its log follows)", b.NodeID, b.Addr, err)
	}
	return b
}

// brokerArgs is the command line of `sediment broker`, kept in one place so
// that it follows the broker's flags.
func (b *Broker) brokerArgs() []string {
	listeners := b.Addr
	if b.leadListeners != "" {
		listeners = b.leadListeners + "," + listeners
	}
	if b.listeners != "" {
		listeners += "," + b.listeners
	}
	args := []string{
		"broker",
		"--listeners", listeners,
		"--admin-address", b.AdminAddr,
		"--raft-address", b.RaftAddr,
		"--data-dir", b.DataDir,
		"--node-id", strconv.Itoa(b.NodeID),
	}
	return append(args, b.extra...)
}

// Start starts the process (again, after Stop or Kill) and waits until it is
// ready; it fails the test with the broker's log if it exits or times out.
func (b *Broker) Start() {
	b.t.Helper()
	if err := b.start(); err != nil {
		b.t.Fatalf("broker %d at %s did not come up: %v (its log follows)", b.NodeID, b.Addr, err)
	}
}

// start runs the process and waits for it to be ready.
func (b *Broker) start() error {
	b.mu.Lock()
	if b.cmd != nil {
		b.mu.Unlock()
		return errors.New("Start while running")
	}
	b.starts++
	fmt.Fprintf(b.log, "=== e2e: start #%d: %s %s\n", b.starts, sedimentBin, strings.Join(b.brokerArgs(), " "))
	cmd := exec.Command(sedimentBin, b.brokerArgs()...)
	// Run in a directory of its own so that no sediment.yaml lying
	// around is picked up, and with no SEDIMENT_* settings of ours.
	cmd.Dir = filepath.Dir(b.DataDir)
	cmd.Env = append(brokerEnv(), b.env...)
	cmd.Stdout, cmd.Stderr = b.log, b.log
	// If the test binary dies, the kernel kills the broker too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.mu.Unlock()
		return fmt.Errorf("start %s: %w", sedimentBin, err)
	}
	exited := make(chan struct{})
	b.cmd, b.exited = cmd, exited
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		b.mu.Lock()
		b.exitErr = err
		b.mu.Unlock()
		fmt.Fprintf(b.log, "=== e2e: process exited: %v\n", errOrOK(err))
		close(exited)
	}()
	return b.waitReady(exited)
}

// pickPorts chooses free loopback ports for the broker's listeners.
func (b *Broker) pickPorts() {
	b.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(b.t)))
	b.AdminAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(b.t)))
	b.RaftAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(b.t)))
}

func errOrOK(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func brokerEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		// Nor a systemd notify socket of whatever runs the tests.
		if !strings.HasPrefix(kv, "SEDIMENT_") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") && !strings.HasPrefix(kv, "WATCHDOG_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitReady polls, until startTimeout, for an ApiVersions answer and then a
// Metadata answer that lists this broker. It returns early with the exit
// status if the process dies.
func (b *Broker) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for attempt := 0; ; attempt++ {
		select {
		case <-exited:
			b.mu.Lock()
			err := b.exitErr
			b.cmd = nil
			b.mu.Unlock()
			return fmt.Errorf("the process exited (%s) before it answered ApiVersions", errOrOK(err))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no ApiVersions/Metadata answer within %v; last error: %v", startTimeout, last)
		}
		if last = b.probe(); last == nil {
			return nil
		} else if errors.Is(last, errNotServing) {
			return last
		}
		// Poll again shortly, but wake at once if the process exits.
		select {
		case <-exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// errNotServing marks a probe failure that waiting will not fix.
var errNotServing = errors.New("the broker cannot serve clients")

// probe sends ApiVersions and Metadata over a fresh connection.
func (b *Broker) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.DialTimeout(time.Second), kgo.RequestRetries(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("ApiVersions: %w", err)
	}
	if resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		return fmt.Errorf("ApiVersions: error code %d, %d API keys", resp.ErrorCode, len(resp.ApiKeys))
	}
	hasMetadata := false
	for _, k := range resp.ApiKeys {
		hasMetadata = hasMetadata || k.ApiKey == kmsg.Metadata.Int16()
	}
	if !hasMetadata {
		return fmt.Errorf("%w: its ApiVersions answer does not list Metadata (key 3)", errNotServing)
	}
	brokers, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("Metadata: %w", err)
	}
	for _, br := range brokers.Brokers {
		if int(br.NodeID) == b.NodeID {
			return nil
		}
	}
	return fmt.Errorf("Metadata does not list broker %d yet (brokers %v)", b.NodeID, brokers.Brokers)
}

// running reports whether the broker's process was started and has not
// been stopped or killed through b.
func (b *Broker) running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cmd != nil
}

// Stop sends SIGTERM and waits for the process to exit; after stopTimeout it
// sends SIGKILL and fails the test (a clean shutdown must not hang). It
// returns the exit error (nil for status 0). Stopping a stopped broker is a
// no-op.
func (b *Broker) Stop() error {
	return b.signal(syscall.SIGTERM, stopTimeout)
}

// Kill sends SIGKILL and waits for the process to exit.
func (b *Broker) Kill() {
	b.signal(syscall.SIGKILL, stopTimeout) //nolint:errcheck // a killed process always "fails"
}

func (b *Broker) signal(sig syscall.Signal, timeout time.Duration) error {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.mu.Unlock()
	if cmd == nil {
		return nil
	}
	fmt.Fprintf(b.log, "=== e2e: sending %v\n", sig)
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		b.t.Errorf("broker %d: signal %v: %v", b.NodeID, sig, err)
	}
	select {
	case <-exited:
	case <-time.After(timeout):
		b.t.Errorf("broker %d did not exit within %v of %v; SIGQUIT for its goroutines (in its log), then SIGKILL", b.NodeID, timeout, sig)
		// The Go runtime prints every goroutine's stack on SIGQUIT and
		// exits: what the broker was stuck in.
		cmd.Process.Signal(syscall.SIGQUIT) //nolint:errcheck // it may have exited meanwhile
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill() //nolint:errcheck // it may have exited meanwhile
			<-exited
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cmd = nil
	return b.exitErr
}

// Restart stops the broker with SIGTERM (graceful) or SIGKILL (crash) and
// starts it again over the same data directory and ports.
func (b *Broker) Restart(graceful bool) {
	b.t.Helper()
	if graceful {
		if err := b.Stop(); err != nil {
			b.t.Errorf("broker %d: graceful stop exited with %v", b.NodeID, err)
		}
	} else {
		b.Kill()
	}
	b.Start()
}

// Log returns everything the broker wrote so far (all runs).
func (b *Broker) Log() string { return b.log.String() }

// Client returns a franz-go client seeded with this broker, closed at cleanup.
func (b *Broker) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns a kadm client over a fresh franz-go client.
func (b *Broker) Admin(t testing.TB) *kadm.Client {
	return kadm.NewClient(b.Client(t))
}

// CreateTopic creates a topic through kadm and fails the test on error.
func (b *Broker) CreateTopic(t testing.TB, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := b.Admin(t).CreateTopic(ctx, partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v (%s)", topic, err, resp.ErrMessage)
	}
}

// cmdResult is the outcome of one command run.
type cmdResult struct {
	Stdout, Stderr string
	Err            error
}

// run runs name with args, stdin, and the given extra environment, bounded by
// commandTimeout.
func run(t testing.TB, stdin string, env []string, name string, args ...string) cmdResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(brokerEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s timed out after %v: %w", name, commandTimeout, err)
	}
	return cmdResult{Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
}

// sediment runs the sediment binary against b (SEDIMENT_BROKERS) and fails
// the test if it fails.
func (b *Broker) sediment(t testing.TB, stdin string, args ...string) cmdResult {
	t.Helper()
	r := b.sedimentMayFail(t, stdin, args...)
	if r.Err != nil {
		t.Fatalf("sediment %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
	}
	return r
}

// sedimentMayFail runs the sediment binary against b and returns whatever
// happened.
func (b *Broker) sedimentMayFail(t testing.TB, stdin string, args ...string) cmdResult {
	t.Helper()
	return run(t, stdin, []string{"SEDIMENT_BROKERS=" + b.Addr}, sedimentBin, args...)
}

// kcatPath returns kcat's path or fails: the kcat tests are part of the
// suite, not optional (.ci/run installs the Debian package).
func kcatPath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat is not installed (apt-get install kcat, or run .ci/run): %v", err)
	}
	return p
}

// kcat runs kcat against b and fails the test if it fails.
func (b *Broker) kcat(t testing.TB, stdin string, args ...string) cmdResult {
	t.Helper()
	r := run(t, stdin, nil, kcatPath(t), append([]string{"-b", b.Addr}, args...)...)
	if r.Err != nil {
		t.Fatalf("kcat %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
	}
	return r
}

// waitFor polls cond every few milliseconds until it is true or timeout
// passes, then fails the test with what.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, timeout, what, cond)
}

// bgCommand is a sediment process running in the background whose standard
// output is collected line by line.
type bgCommand struct {
	name   string
	cmd    *exec.Cmd
	stderr syncBuffer
	done   chan struct{} // closed when the process has exited and its output is read

	mu    sync.Mutex
	lines []string
	err   error // Wait's result, valid after done
}

// startSediment starts the sediment binary against b in the background. It
// is killed at cleanup if still running.
func (b *Broker) startSediment(t testing.TB, args ...string) *bgCommand {
	t.Helper()
	c := &bgCommand{name: "sediment " + strings.Join(args, " "), done: make(chan struct{})}
	c.cmd = exec.Command(sedimentBin, args...)
	c.cmd.Env = append(brokerEnv(), "SEDIMENT_BROKERS="+b.Addr)
	c.cmd.Stderr = &c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", c.name, err)
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
		}
		err := c.cmd.Wait()
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			c.cmd.Process.Kill() //nolint:errcheck // it may have exited meanwhile
			<-c.done
		}
		if t.Failed() {
			c.mu.Lock()
			t.Logf("%s: %d lines printed, exit: %v; its stderr:\n%s", c.name, len(c.lines), c.err, c.stderr.String())
			c.mu.Unlock()
		}
	})
	return c
}

// Exited reports whether the process has exited (and its output is read).
func (c *bgCommand) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Stderr returns what the process wrote to standard error so far.
func (c *bgCommand) Stderr() string { return c.stderr.String() }

// Lines returns a copy of the lines printed so far.
func (c *bgCommand) Lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

// Interrupt sends SIGINT, as Ctrl-C does, and waits for the exit; it returns
// the exit error and fails the test if the process does not stop in time.
func (c *bgCommand) Interrupt(t testing.TB) error {
	t.Helper()
	if err := c.cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("%s: SIGINT: %v", c.name, err)
	}
	select {
	case <-c.done:
	case <-time.After(stopTimeout):
		t.Errorf("%s did not exit within %v of SIGINT", c.name, stopTimeout)
		c.cmd.Process.Kill() //nolint:errcheck // it may have exited meanwhile
		<-c.done
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return fmt.Errorf("%s: %w; stderr:\n%s", c.name, c.err, c.stderr.String())
	}
	return nil
}
