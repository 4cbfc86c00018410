package main

import (
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sediment-io/sediment/internal/testutil"
)

// TestMain lets a test run this package's main() as a real process: the
// test binary re-executes itself with wantMainEnv set (see sedimentProc).
const wantMainEnv = "GO_WANT_SEDIMENT_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(wantMainEnv) == "1" {
		os.Args = append([]string{"sediment"}, strings.Fields(os.Getenv("GO_SEDIMENT_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// proc is a `sediment` process started from the test binary.
type proc struct {
	cmd    *exec.Cmd
	stderr testutil.Buffer
	done   chan struct{}
	err    error
}

func (p *proc) output() string { return p.stderr.String() }

// sedimentProc starts `sediment args...` with the environment env (plus
// what the re-execution needs, and no SEDIMENT_* of the test's own).
func sedimentProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SEDIMENT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, append(env, wantMainEnv+"=1", "GO_SEDIMENT_ARGS="+strings.Join(args, " "))...)
	p := &proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = io.Discard, &p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("process still running after %v; stderr:\n%s", timeout, p.output())
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatalf("wait: %v", p.err)
	return -1
}

// localArgs are flags for a broker that binds only free loopback ports.
func localArgs(dataDir string) []string {
	return []string{"broker", "--data-dir", dataDir, "--listeners", "PLAINTEXT://127.0.0.1:0",
		"--raft-address", "127.0.0.1:0", "--admin-address=", "--offsets-topic-num-partitions", "1",
		"--transaction-state-log-num-partitions", "1"}
}

// runBrokerCmd executes `sediment broker args...` in-process through cobra
// and returns its error. A broker that wrongly starts stops when ctx ends,
// so a missed check fails the test instead of hanging it.
func runBrokerCmd(t *testing.T, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetContext(ctx)
	return cmd.Execute()
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "sediment.yaml")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestUnknownConfigKeysAreErrors(t *testing.T) {
	for _, c := range []struct {
		yaml    string
		key     string
		closest string
	}{
		{"node_id: 2\n", `"node_id"`, `"node-id"`},
		{"node:\n  id: 2\n", `"node.id"`, `"node-id"`},
		{"log-segment-byte: 1048576\n", `"log-segment-byte"`, `"log-segment-bytes"`},
		{"auto-create-topic-enable: false\n", `"auto-create-topic-enable"`, `"auto-create-topics-enable"`},
		{"listners: PLAINTEXT://127.0.0.1:0\n", `"listners"`, `"listeners"`},
		{"bootstrap-servers-of-mars: x\n", `"bootstrap-servers-of-mars"`, ""},
	} {
		dir := t.TempDir()
		// Valid keys too, so that a broker started by mistake binds
		// nothing fixed and writes only to the test's directory.
		file := writeConfig(t, "data-dir: "+dir+"\nlisteners: PLAINTEXT://127.0.0.1:0\nraft-address: 127.0.0.1:0\nadmin-address: \"\"\n"+c.yaml)
		err := runBrokerCmd(t, "broker", "--config", file)
		if err == nil {
			t.Fatalf("%q: the broker started", c.yaml)
		}
		msg := err.Error()
		if !strings.Contains(msg, "unknown key "+c.key) || !strings.Contains(msg, file) {
			t.Errorf("%q: error %q does not name key %s in %s", c.yaml, msg, c.key, file)
		}
		if c.closest != "" && !strings.Contains(msg, "did you mean "+c.closest) {
			t.Errorf("%q: error %q does not suggest %s", c.yaml, msg, c.closest)
		}
		if c.closest == "" && strings.Contains(msg, "did you mean") {
			t.Errorf("%q: error %q suggests a key far from the typo", c.yaml, msg)
		}
		if _, err := os.Stat(filepath.Join(dir, "meta")); err == nil {
			t.Errorf("%q: the broker opened its data directory before failing", c.yaml)
		}
	}
	// Every key of a valid file passes (and all broker settings are keys).
	var all strings.Builder
	for _, s := range brokerSettings {
		all.WriteString(s.name + ": \"\"\n")
	}
	if err := checkConfigFile(writeConfig(t, all.String())); err != nil {
		t.Fatalf("valid keys refused: %v", err)
	}
}

func TestUnknownEnvironmentVariablesAreErrors(t *testing.T) {
	t.Setenv("SEDIMENT_NODEID", "2")
	t.Setenv("SEDIMENT_LOG_SEGMENT_BYTE", "1048576")
	t.Setenv("SEDIMENT_DATA_DIR", t.TempDir())
	t.Setenv("SEDIMENT_LISTENERS", "PLAINTEXT://127.0.0.1:0")
	t.Setenv("SEDIMENT_RAFT_ADDRESS", "127.0.0.1:0")
	t.Setenv("SEDIMENT_ADMIN_ADDRESS", "")
	err := runBrokerCmd(t, "broker")
	if err == nil {
		t.Fatal("the broker started")
	}
	msg := err.Error()
	for _, want := range []string{
		"unknown environment variable SEDIMENT_NODEID (did you mean \"SEDIMENT_NODE_ID\"?)",
		"unknown environment variable SEDIMENT_LOG_SEGMENT_BYTE (did you mean \"SEDIMENT_LOG_SEGMENT_BYTES\"?)",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	for _, good := range []string{"SEDIMENT_DATA_DIR", "SEDIMENT_LISTENERS"} {
		if strings.Contains(msg, good) {
			t.Errorf("error %q names the valid %s", msg, good)
		}
	}
	// The client commands' variables and --config's are not errors.
	if err := checkEnv([]string{"SEDIMENT_BROKERS=x:9092", "SEDIMENT_TIMEOUT=3s", "SEDIMENT_CLIENT_LOG_LEVEL=info",
		"SEDIMENT_CONFIG=/etc/sediment.yaml", "SEDIMENT_NODE_ID=3", "SEDIMENTARY=rock", "PATH=/bin"}); err != nil {
		t.Fatal(err)
	}
}

// TestBadValuesAreErrors: a value that does not parse as its setting's
// type, from the environment, the file or a flag, stops the broker before it
// opens anything, naming where it came from; viper's getters would have
// read each as zero (SEDIMENT_NUM_PARTITIONS=abc as 0 partitions,
// shutdown-timeout: 30 as 30ns).
func TestBadValuesAreErrors(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SEDIMENT_NUM_PARTITIONS", "abc")
	t.Setenv("SEDIMENT_LOG_RETENTION_MS", "7d")
	t.Setenv("SEDIMENT_JOIN_TIMEOUT", "5")
	t.Setenv("SEDIMENT_PRODUCER_ID_EXPIRATION", "") // set but empty: no duration
	file := writeConfig(t, "data-dir: "+dir+"\nlisteners: PLAINTEXT://127.0.0.1:0\nraft-address: 127.0.0.1:0\nadmin-address: \"\"\n"+
		"shutdown-timeout: 30\nauto-create-topics-enable: yes\nmessage-max-bytes: 3000000000\nlog-flush-interval: soon\n"+
		"node-id: 1.5\nlog-segment-delete-delay: 0\nstray-log-delete-delay: -1s\ntier-cache-bytes: 4294967296\n")
	err := runBrokerCmd(t, "broker", "--config", file, "--default-replication-factor", "40000")
	if err == nil {
		t.Fatal("the broker started")
	}
	msg := err.Error()
	for _, want := range []string{
		`SEDIMENT_NUM_PARTITIONS: "abc" is not an integer`,
		`SEDIMENT_LOG_RETENTION_MS: "7d" is not an integer`,
		`SEDIMENT_JOIN_TIMEOUT: "5" has no unit`,
		"config " + file + ": shutdown-timeout: 30 has no unit",
		"config " + file + `: auto-create-topics-enable: "yes" is not a bool`,
		"config " + file + ": message-max-bytes: 3000000000 is out of range",
		"config " + file + `: log-flush-interval: "soon" is not a duration`,
		"config " + file + ": node-id: 1.5 is not an integer",
		"--default-replication-factor: 40000 is out of range (-32768 to 32767)",
		`SEDIMENT_PRODUCER_ID_EXPIRATION: "" is empty, not a duration`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	// Valid forms are not named: 0 without a unit, negative durations,
	// int64 settings past int32.
	for _, good := range []string{"log-segment-delete-delay", "stray-log-delete-delay", "tier-cache-bytes"} {
		if strings.Contains(msg, good) {
			t.Errorf("error names the valid %s:\n%s", good, msg)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "meta")); err == nil {
		t.Error("the broker opened its data directory before failing")
	}

	// The real binary exits 1 with the message on stderr.
	p := sedimentProc(t, []string{"SEDIMENT_NUM_PARTITIONS=abc"}, localArgs(t.TempDir())...)
	if code := p.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, p.output())
	}
	if out := p.output(); !strings.Contains(out, `SEDIMENT_NUM_PARTITIONS: "abc" is not an integer`) {
		t.Fatalf("stderr:\n%s", out)
	}
}

// TestEmptyEnvironmentVariables: a SEDIMENT_* variable that is set counts
// even when empty, as `--admin-address=` and `admin-address: ""` do:
// SEDIMENT_ADMIN_ADDRESS= disables the admin endpoint and
// SEDIMENT_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM= the host name check
// (viper skips empty variables unless told not to, and the defaults,
// 127.0.0.1:9644 and https, applied). An empty number, bool or duration is
// no value of its type: the broker refuses to start, naming the variable,
// as Kafka refuses `num.partitions=`.
func TestEmptyEnvironmentVariables(t *testing.T) {
	t.Setenv("SEDIMENT_ADMIN_ADDRESS", "")
	t.Setenv("SEDIMENT_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM", "")
	t.Setenv("SEDIMENT_BROKER_RACK", "")
	file := writeConfig(t, "broker-rack: rack-from-file\n")
	vv, flags := parseBrokerFlags(t, file)
	if err := checkValues(vv, flags); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"admin-address", "ssl-endpoint-identification-algorithm", "broker-rack"} {
		if got := vv.GetString(name); got != "" {
			t.Errorf("%s = %q with %s set empty, want empty", name, got, envName(name))
		}
	}
	// A flag still wins over the variable.
	vv, _ = parseBrokerFlags(t, "", "--admin-address", "127.0.0.1:23999")
	if got := vv.GetString("admin-address"); got != "127.0.0.1:23999" {
		t.Errorf("admin-address = %q with the flag given, want the flag's", got)
	}

	dir := t.TempDir()
	t.Setenv("SEDIMENT_NUM_PARTITIONS", "")
	t.Setenv("SEDIMENT_TIERING", " ")
	t.Setenv("SEDIMENT_SHUTDOWN_TIMEOUT", "")
	t.Setenv("SEDIMENT_LOG_SEGMENT_BYTES", "")
	file = writeConfig(t, "data-dir: "+dir+"\nlisteners: PLAINTEXT://127.0.0.1:23103\nraft-address: 127.0.0.1:23104\nadmin-address: \"\"\nnum-partitions: 3\n")
	err := runBrokerCmd(t, "broker", "--config", file)
	if err == nil {
		t.Fatal("the broker started")
	}
	for _, want := range []string{
		`SEDIMENT_NUM_PARTITIONS: "" is empty, not an integer (unset it for the default)`,
		`SEDIMENT_TIERING: " " is empty, not a bool`,
		`SEDIMENT_SHUTDOWN_TIMEOUT: "" is empty, not a duration`,
		`SEDIMENT_LOG_SEGMENT_BYTES: "" is empty, not an integer`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "meta")); err == nil {
		t.Error("the broker opened its data directory before failing")
	}
}

// TestConfigTypoExitsNonZero: the real binary exits with status 1 and the
// message on stderr.
func TestConfigTypoExitsNonZero(t *testing.T) {
	file := writeConfig(t, "data-dir: "+t.TempDir()+"\nnode-idd: 3\n")
	p := sedimentProc(t, nil, "broker", "--config", file)
	if code := p.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, p.output())
	}
	if out := p.output(); !strings.Contains(out, `unknown key "node-idd"`) || !strings.Contains(out, `did you mean "node-id"`) {
		t.Fatalf("stderr:\n%s", out)
	}
	p = sedimentProc(t, []string{"SEDIMENT_LISTENER=PLAINTEXT://127.0.0.1:0"}, "broker", "--data-dir", t.TempDir())
	if code := p.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, p.output())
	}
	if out := p.output(); !strings.Contains(out, `SEDIMENT_LISTENER (did you mean "SEDIMENT_LISTENERS"?)`) {
		t.Fatalf("stderr:\n%s", out)
	}
}

// TestSecondBrokerOnSameDataDirFailsFast: two processes, one data
// directory. The second exits at once naming the first one's pid; after the
// first is killed (SIGKILL: no clean release), a third starts.
func TestSecondBrokerOnSameDataDirFailsFast(t *testing.T) {
	dir := t.TempDir()
	first := sedimentProc(t, nil, localArgs(dir)...)
	testutil.WaitFor(t, 60*time.Second, "the first broker to start", func() bool {
		select {
		case <-first.done:
			t.Fatalf("first broker exited: %v\n%s", first.err, first.output())
		default:
		}
		return strings.Contains(first.output(), "broker started")
	})

	second := sedimentProc(t, nil, localArgs(dir)...)
	start := time.Now()
	if code := second.wait(t, 20*time.Second); code != 1 {
		t.Fatalf("second broker: exit status %d, want 1; stderr:\n%s", code, second.output())
	}
	want := "is in use by pid " + strconv.Itoa(first.cmd.Process.Pid)
	if out := second.output(); !strings.Contains(out, want) || !strings.Contains(out, dir) {
		t.Fatalf("second broker's stderr lacks %q and %s:\n%s", want, dir, out)
	}
	t.Logf("second broker refused in %v", time.Since(start))
	select {
	case <-first.done:
		t.Fatalf("the first broker exited: %v\n%s", first.err, first.output())
	default:
	}

	first.cmd.Process.Signal(syscall.SIGKILL)
	first.wait(t, 20*time.Second)
	third := sedimentProc(t, nil, localArgs(dir)...)
	testutil.WaitFor(t, 60*time.Second, "a broker to start after the holder was killed", func() bool {
		select {
		case <-third.done:
			t.Fatalf("third broker exited: %v\n%s", third.err, third.output())
		default:
		}
		return strings.Contains(third.output(), "broker started")
	})
	third.cmd.Process.Signal(syscall.SIGTERM)
	if code := third.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit status %d; stderr:\n%s", code, third.output())
	}
}

// TestOtherSedimentVarsComplete finds every SEDIMENT_* name the tree's Go
// code and Makefile use and checks that a broker started with it in its
// environment accepts it: a broker setting, SEDIMENT_CONFIG, or one of
// otherSedimentVars. Otherwise `make tier-e2e` in one shell and a broker in
// the same shell would refuse to start. The deliberate misspellings of this
// file are left out.
func TestOtherSedimentVarsComplete(t *testing.T) {
	root := filepath.Join("..", "..")
	name := regexp.MustCompile(`\bSEDIMENT_[A-Z0-9_]*[A-Z0-9]\b`)
	known := map[string]bool{"SEDIMENT_CONFIG": true}
	for _, k := range brokerSettingNames() {
		known[envName(k)] = true
	}
	for _, n := range otherSedimentVars {
		known[n] = true
	}
	found := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if base := d.Name(); base == "node_modules" || base == "testdata" || base == "data" || strings.HasPrefix(base, ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "config_check_test.go" || !strings.HasSuffix(path, ".go") && d.Name() != "Makefile" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range name.FindAllString(string(b), -1) {
			if _, ok := found[n]; !ok {
				found[n] = path
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 10 {
		t.Fatalf("found only %d SEDIMENT_* names under %s: %v", len(found), root, found)
	}
	for n, path := range found {
		if !known[n] {
			t.Errorf("%s (used in %s) is neither a broker setting nor in otherSedimentVars: a broker would refuse it", n, path)
		}
	}
}
