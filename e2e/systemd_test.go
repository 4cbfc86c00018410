package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSystemdNotify: a broker process started as systemd starts a
// Type=notify unit with WatchdogSec= (NOTIFY_SOCKET, WATCHDOG_USEC) sends
// READY=1 with a STATUS=, then WATCHDOG=1 at half the interval, a STATUS=
// saying it is ready once it is, and STOPPING=1 on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	// A short directory: a socket path is at most 107 bytes.
	dir, err := os.MkdirTemp("", "sdnotify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var mu sync.Mutex
	var msgs []string
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			mu.Lock()
			msgs = append(msgs, string(buf[:n]))
			mu.Unlock()
		}
	}()
	seen := func(what string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				if strings.Contains(m, what) {
					return true
				}
			}
			return false
		}
	}
	b := StartBroker(t, BrokerOptions{Env: []string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=400000"}})
	waitFor(t, 10*time.Second, "READY=1", seen("READY=1"))
	mu.Lock()
	first := msgs[0]
	mu.Unlock()
	if !strings.HasPrefix(first, "READY=1\nSTATUS=") {
		t.Errorf("the first notification is %q, want READY=1 with a STATUS", first)
	}
	waitFor(t, 10*time.Second, "WATCHDOG=1", seen("WATCHDOG=1"))
	waitFor(t, 30*time.Second, "STATUS=ready", seen("STATUS=ready"))
	if seen("STOPPING=1")() {
		t.Fatal("STOPPING=1 before the broker was stopped")
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	waitFor(t, 10*time.Second, "STOPPING=1", seen("STOPPING=1"))
}

// TestHealthCommand: `sediment health` against broker processes' admin
// endpoints: a started broker is up, ready and caught up (exit status 0);
// the last broker of three whose peers are gone is up but not ready, and
// says why (exit status 1); a stopped one is not up.
func TestHealthCommand(t *testing.T) {
	c := StartCluster(t, 3)
	b := c.Brokers[0]
	health := func(args ...string) cmdResult {
		return run(t, "", nil, sedimentBin, append([]string{"health", "--admin-address", b.AdminAddr}, args...)...)
	}
	if r := health(); r.Err != nil || strings.TrimSpace(r.Stdout) != "ok" {
		t.Fatalf("health: %v %q %s", r.Err, r.Stdout, r.Stderr)
	}
	waitFor(t, 30*time.Second, "health --caught-up", func() bool { return health("--caught-up").Err == nil })
	if r := health("--ready"); r.Err != nil || !strings.HasPrefix(r.Stdout, "ready") {
		t.Fatalf("health --ready: %v %q %s", r.Err, r.Stdout, r.Stderr)
	}
	c.Brokers[1].Kill()
	c.Brokers[2].Kill()
	var last cmdResult
	waitFor(t, 30*time.Second, "health --ready to fail without a quorum", func() bool {
		last = health("--ready")
		return last.Err != nil
	})
	if !strings.Contains(last.Stderr, "not ready: ") || !strings.Contains(last.Stderr, "metadata quorum") {
		t.Errorf("health --ready without a quorum: stderr %q", last.Stderr)
	}
	if r := health(); r.Err != nil {
		t.Errorf("health (up) without a quorum: %v %s", r.Err, r.Stderr)
	}
	b.Kill()
	if r := health("--timeout", "2s"); r.Err == nil {
		t.Errorf("health of a stopped broker: exit status 0, %q", r.Stdout)
	}
}
