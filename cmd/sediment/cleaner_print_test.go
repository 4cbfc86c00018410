package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"
)

// TestPrintCleanerSeveralAdmins: asked of several brokers' admin
// endpoints, the cleaner rows come sorted by partition, one per replica,
// each naming the endpoint that reported it; one endpoint prints no such
// column.
func TestPrintCleanerSeveralAdmins(t *testing.T) {
	serve := func(body string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(body)) }))
		t.Cleanup(s.Close)
		return strings.TrimPrefix(s.URL, "http://")
	}
	a := serve(`[{"topic":"t","partition":1,"tier":"local","policy":"compact"},{"topic":"t","partition":0,"tier":"local","policy":"compact"}]`)
	b := serve(`[{"topic":"t","partition":0,"tier":"local","policy":"compact"}]`)
	var out bytes.Buffer
	printCleaner(context.Background(), &out, []string{a, b}, "t", false)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "PARTITION  ADMIN") ||
		!strings.HasPrefix(lines[1], "0          "+a) || !strings.HasPrefix(lines[2], "0          "+b) || !strings.HasPrefix(lines[3], "1          "+a) {
		t.Fatalf("cleaner table:\n%s", out.String())
	}
	out.Reset()
	printCleaner(context.Background(), &out, []string{b}, "t", false)
	if strings.Contains(out.String(), "ADMIN") {
		t.Fatalf("one endpoint, an ADMIN column:\n%s", out.String())
	}
}

// TestDefaultAdminOnlyWithDefaultBrokers: the default admin endpoint
// (127.0.0.1:9644) is the local default broker's; with other brokers it is
// not asked.
func TestDefaultAdminOnlyWithDefaultBrokers(t *testing.T) {
	for brokers, want := range map[string]bool{"": true, "localhost:9092": true, "127.0.0.1": true, "10.0.0.5:9092": false, "localhost:29092": false, "localhost:9092,localhost:9093": false} {
		cmd := &cobra.Command{}
		opts := addClientFlags(cmd)
		if brokers != "" {
			if err := cmd.PersistentFlags().Set("brokers", brokers); err != nil {
				t.Fatal(err)
			}
		}
		if got := localDefaultSeeds(opts); got != want {
			t.Errorf("--brokers %q: default admin asked %v, want %v", brokers, got, want)
		}
	}
}

// TestAdminAddressFlagAndVariable: every command that asks a broker's admin
// endpoint takes it as --admin-address or from SEDIMENT_ADMIN_ADDRESS, the
// broker's own setting (so a shell that started `make run` on another admin
// port asks that broker); `tier status` still takes its first names,
// --admin and SEDIMENT_ADMIN.
func TestAdminAddressFlagAndVariable(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/tier/status":
			w.Write([]byte(`{"node_id":1,"partitions":[]}`))
		default:
			w.Write([]byte("ok"))
		}
	}))
	defer s.Close()
	addr := strings.TrimPrefix(s.URL, "http://")
	run := func(env map[string]string, args ...string) {
		t.Helper()
		for _, k := range []string{"SEDIMENT_ADMIN_ADDRESS", "SEDIMENT_ADMIN"} {
			t.Setenv(k, env[k])
		}
		mu.Lock()
		clear(hits)
		mu.Unlock()
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil && strings.Contains(err.Error(), "cannot reach") {
			t.Errorf("%v %q: %v", env, args, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if n := hits["/v1/tier/status"] + hits["/healthz"]; n != 1 {
			t.Errorf("%v %q: the admin endpoint was asked %d times, want 1 (%v)", env, args, n, hits)
		}
	}
	run(nil, "tier", "status", "--admin-address", addr)
	run(nil, "tier", "status", "--admin", addr)
	run(map[string]string{"SEDIMENT_ADMIN_ADDRESS": addr}, "tier", "status")
	run(map[string]string{"SEDIMENT_ADMIN": addr}, "tier", "status")
	run(map[string]string{"SEDIMENT_ADMIN_ADDRESS": addr, "SEDIMENT_ADMIN": "127.0.0.1:1"}, "tier", "status")
	run(nil, "health", "--admin-address", addr)
	run(map[string]string{"SEDIMENT_ADMIN_ADDRESS": addr}, "health")

	// topic describe: the variable is a choice, as the flag is, and is
	// asked whatever --brokers says.
	cmd := &cobra.Command{}
	opts := addClientFlags(cmd)
	var flag []string
	cmd.Flags().StringSliceVar(&flag, "admin-address", []string{"127.0.0.1:9644"}, "")
	if err := cmd.PersistentFlags().Set("brokers", "10.0.0.5:9092"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SEDIMENT_ADMIN_ADDRESS", "")
	if got, explicit := cleanerAdmins(cmd, opts, flag); got != nil || explicit {
		t.Errorf("other brokers, no choice: admins %q (explicit %v), want none", got, explicit)
	}
	t.Setenv("SEDIMENT_ADMIN_ADDRESS", "a:1,b:2")
	if got, explicit := cleanerAdmins(cmd, opts, flag); !slices.Equal(got, []string{"a:1", "b:2"}) || !explicit {
		t.Errorf("SEDIMENT_ADMIN_ADDRESS: admins %q (explicit %v)", got, explicit)
	}
	if err := cmd.Flags().Set("admin-address", "c:3"); err != nil {
		t.Fatal(err)
	}
	if got, explicit := cleanerAdmins(cmd, opts, flag); !slices.Equal(got, []string{"c:3"}) || !explicit {
		t.Errorf("--admin-address over the variable: admins %q (explicit %v)", got, explicit)
	}
}
