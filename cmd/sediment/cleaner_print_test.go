package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
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
