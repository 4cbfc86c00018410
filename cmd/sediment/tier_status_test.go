package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker"
	"github.com/sediment-io/sediment/objectstore/fs"
)

// TestTierStatusOneBrokerDown: `tier status` asked of a running broker
// and of one that is down (its admin port refuses connections) prints the
// running broker's rows, notes the other on stderr, and succeeds, as
// docs/cli.md says ("fails when no broker answers"); it failed on the first
// broker that did not answer, down before the running one or not. Asked of
// the down broker alone, it fails.
func TestTierStatusOneBrokerDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := startCLITestBroker(t, broker.Config{})
	store, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnableTiering(broker.TieringConfig{Store: store, SyncInterval: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, "tiered"); err != nil {
		t.Fatal(err)
	}
	// The tiering manager takes the partitions up at its next sync.
	for len(b.TierStatus(ctx, "tiered").Partitions) != 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("tier status: %+v", b.TierStatus(ctx, "tiered"))
		case <-time.After(20 * time.Millisecond):
		}
	}
	up := httptest.NewServer(b.TierStatusHandler())
	defer up.Close()
	upAddr := strings.TrimPrefix(up.URL, "http://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // a broker that is down: its admin port refuses connections

	run := func(args ...string) (stdout, stderr string, err error) {
		t.Helper()
		t.Setenv("SEDIMENT_ADMIN_ADDRESS", "")
		t.Setenv("SEDIMENT_ADMIN", "")
		cmd := newRootCmd()
		var o, e bytes.Buffer
		cmd.SetOut(&o)
		cmd.SetErr(&e)
		cmd.SetArgs(args)
		err = cmd.Execute()
		return o.String(), e.String(), err
	}
	for _, addrs := range []string{down + "," + upAddr, upAddr + "," + down} {
		stdout, stderr, err := run("tier", "status", "tiered", "-o", "json", "--admin-address", addrs)
		if err != nil {
			t.Fatalf("--admin-address %s: %v (stderr %q)", addrs, err, stderr)
		}
		var rows []tierStatusRow
		if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
			t.Fatalf("--admin-address %s: %v in %q", addrs, err, stdout)
		}
		if len(rows) != 2 || rows[0].Partition != 0 || rows[1].Partition != 1 || !rows[0].Leader || rows[0].NodeID != b.TierStatus(ctx, "").NodeID {
			t.Fatalf("--admin-address %s: rows %+v", addrs, rows)
		}
		if !strings.Contains(stderr, "cannot reach the admin endpoint at "+down) || strings.Contains(stderr, upAddr) || strings.Count(stderr, "\n") != 1 {
			t.Fatalf("--admin-address %s: stderr %q, want one line about %s", addrs, stderr, down)
		}
	}
	// The table too.
	stdout, _, err := run("tier", "status", "--admin-address", down+","+upAddr)
	if err != nil || !strings.Contains(stdout, "tiered") || strings.Count(stdout, "\n") != 3 {
		t.Fatalf("table: %v\n%s", err, stdout)
	}
	// None answers: it fails, naming each.
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down2 := other.Addr().String()
	other.Close()
	_, _, err = run("tier", "status", "--admin-address", down+","+down2)
	if err == nil || !strings.Contains(err.Error(), "no admin endpoint answered") || !strings.Contains(err.Error(), down) || !strings.Contains(err.Error(), down2) {
		t.Fatalf("no broker up: %v", err)
	}
	_, _, err = run("tier", "status", "--admin-address", down)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the admin endpoint at "+down) {
		t.Fatalf("the one broker down: %v", err)
	}
}
