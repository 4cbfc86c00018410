// Package miniotest runs a real MinIO server for tests: it finds the minio
// binary, starts it on a free loopback port with a temporary folder and
// root credentials, waits until /minio/health/ready answers, hands out
// buckets created with minio-go (the independent client tests check the
// system under test with), and stops it.
//
// If the binary is missing, tests fail when the environment variable CI is
// set (CI must test against MinIO) and are skipped otherwise, with a message
// saying how to install it:
//
//	go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c
//
// One server per test binary is usual (starting one takes about a second):
//
//	func TestMain(m *testing.M) { os.Exit(miniotest.Main(m)) }
//
//	func TestX(t *testing.T) {
//		srv := miniotest.Shared(t)
//		bucket := srv.NewBucket(t)
//		...
//	}
package miniotest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/build"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// InstallHint says how to get the server.
const InstallHint = "go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"

// Region is the region the server and its buckets use.
const Region = "us-east-1"

// Server is a running MinIO server.
type Server struct {
	Endpoint  string // "http://127.0.0.1:PORT"
	Host      string // "127.0.0.1:PORT"
	AccessKey string
	SecretKey string
	Dir       string        // the server's data folder
	Client    *minio.Client // minio-go, with root credentials

	cmd     *exec.Cmd
	output  *syncBuffer
	exited  chan struct{} // closed when the process has exited
	ownsDir bool
	stopped atomic.Bool
}

// Binary returns the path of the minio binary: $MINIO_BINARY, else minio
// on PATH, else GOPATH/bin/minio.
func Binary() (string, error) {
	if p := os.Getenv("MINIO_BINARY"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	for _, gopath := range filepath.SplitList(build.Default.GOPATH) {
		p := filepath.Join(gopath, "bin", "minio")
		if info, err := os.Stat(p); err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("miniotest: no minio binary on PATH or in GOPATH/bin; install it with: " + InstallHint)
}

// InCI reports whether the tests run in CI (CI set to anything but "" / "false" / "0").
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "false" && v != "0"
}

// requireBinary returns the binary, or fails (CI) or skips (locally).
func requireBinary(t testing.TB) string {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if InCI() {
			t.Fatalf("%v (CI is set, so this is a failure)", err)
		}
		t.Skipf("%v (skipped locally; CI fails here)", err)
	}
	return bin
}

// Options tune StartServer.
type Options struct {
	Binary    string // default Binary()
	Dir       string // default a new temporary folder, removed by Stop
	AccessKey string // default "sediment"
	SecretKey string // default "sediment-secret"
	// StartTimeout bounds the wait for readiness (default 60s).
	StartTimeout time.Duration
}

// StartServer starts a server; the caller must Stop it.
func StartServer(opts Options) (*Server, error) {
	if opts.Binary == "" {
		bin, err := Binary()
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	if opts.AccessKey == "" {
		opts.AccessKey = "sediment"
	}
	if opts.SecretKey == "" {
		opts.SecretKey = "sediment-secret"
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	ownsDir := false
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "miniotest-")
		if err != nil {
			return nil, err
		}
		opts.Dir, ownsDir = dir, true
	}
	// A port found free may be taken before the server binds it; try again.
	var lastErr error
	for range 3 {
		s, err := start(opts, ownsDir)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	if ownsDir {
		os.RemoveAll(opts.Dir)
	}
	return nil, lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func start(opts Options, ownsDir bool) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	consolePort, err := freePort()
	if err != nil {
		return nil, err
	}
	host := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(opts.Binary, "server", opts.Dir,
		"--address", host, "--console-address", fmt.Sprintf("127.0.0.1:%d", consolePort), "--quiet")
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+opts.AccessKey,
		"MINIO_ROOT_PASSWORD="+opts.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		"MINIO_REGION="+Region,
	)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	setProcAttrs(cmd) // dies with the test process (Linux)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("miniotest: starting %s: %w", opts.Binary, err)
	}
	s := &Server{
		Endpoint: "http://" + host, Host: host, AccessKey: opts.AccessKey, SecretKey: opts.SecretKey,
		Dir: opts.Dir, cmd: cmd, output: out, exited: make(chan struct{}), ownsDir: ownsDir,
	}
	go func() { // owned by s: Stop waits for it through s.exited
		cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(opts.StartTimeout); err != nil {
		s.kill()
		return nil, fmt.Errorf("miniotest: %w; server output:\n%s", err, out.String())
	}
	client, err := minio.New(host, &minio.Options{
		Creds:  credentials.NewStaticV4(opts.AccessKey, opts.SecretKey, ""),
		Region: Region,
	})
	if err != nil {
		s.kill()
		return nil, err
	}
	s.Client = client
	return s, nil
}

// waitReady polls the readiness endpoint until it answers 200, the process
// exits, or the timeout passes.
func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(s.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v (last: %v)", timeout, err)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("server exited before it was ready")
		case <-tick.C:
		}
	}
}

func (s *Server) kill() {
	s.cmd.Process.Kill()
	<-s.exited
}

// Stop stops the server (SIGTERM, then SIGKILL after 10s), waits for it,
// and removes its folder if StartServer made it.
func (s *Server) Stop() error {
	if s.stopped.Swap(true) {
		return nil
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.kill()
	}
	if s.ownsDir {
		return os.RemoveAll(s.Dir)
	}
	return nil
}

// Output returns what the server printed so far.
func (s *Server) Output() string { return s.output.String() }

// Start starts a server for one test and stops it when the test ends.
// Without the binary it fails in CI and skips locally.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := requireBinary(t)
	s, err := StartServer(Options{Binary: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("miniotest: stop: %v", err)
		}
	})
	return s
}

var shared struct {
	mu  sync.Mutex
	srv *Server
	err error
}

// Shared returns the test binary's shared server, starting it on first
// use. Main stops it. Without the binary it fails in CI and skips locally.
func Shared(t testing.TB) *Server {
	t.Helper()
	bin := requireBinary(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil && shared.err == nil {
		shared.srv, shared.err = StartServer(Options{Binary: bin})
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// Main runs the tests and then stops the shared server, if one was
// started; use it from TestMain: os.Exit(miniotest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "miniotest: stop:", err)
			code = 1
		}
		shared.srv = nil
	}
	return code
}

var bucketSeq atomic.Int64

// NewBucket creates a new, empty bucket with minio-go and returns its name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test-%d-%d", os.Getpid(), bucketSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: Region}); err != nil {
		t.Fatalf("miniotest: make bucket %s: %v", name, err)
	}
	return name
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 { // keep the server's chatter bounded
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
