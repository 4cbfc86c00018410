package metadata

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestHCLoggerToSlog: raft's hclog lines reach slog as records with their
// own level, message and fields (no "[WARN]  raft:" text inside the
// message), and the first election of a voter that never heard from a
// leader is info, while one after a leader is lost stays a warning.
func TestHCLoggerToSlog(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", 1))
	h.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "", "last-leader-id", "")
	h.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "127.0.0.1:9093", "last-leader-id", "2")
	h.Error("failed to take snapshot", "server-id", "3", "error", "disk")
	h.Info("filtered: raft's info is below the adapter's level")

	var recs []map[string]any
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("slog output is not JSON lines: %v\n%s", err, buf.String())
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3: %v", len(recs), recs)
	}
	for i, want := range []struct{ level, msg, key, val string }{
		{"INFO", "heartbeat timeout reached, starting election", "last-leader-id", ""},
		{"WARN", "heartbeat timeout reached, starting election", "last-leader-addr", "127.0.0.1:9093"},
		{"ERROR", "failed to take snapshot", "server-id", "3"},
	} {
		r := recs[i]
		if r["level"] != want.level || r["msg"] != want.msg || r[want.key] != want.val || r["module"] != "raft" || r["node"] != 1.0 {
			t.Errorf("record %d: %v; want level %s msg %q %s=%q module raft node 1", i, r, want.level, want.msg, want.key, want.val)
		}
	}
}

// TestPeerFailuresThrottled: raft's lines about a peer it cannot reach go
// out once per kind and peer, then once a minute with how many were left
// out, as warnings; a peer that answers again, or whose failures stopped
// for peerFailureGap, has its next failure logged at once; other lines are
// not throttled; a server is written ID@address.
func TestPeerFailuresThrottled(t *testing.T) {
	var buf bytes.Buffer
	w := newSlogWriter(slog.New(slog.NewJSONHandler(&buf, nil)))
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	w.failures.now = func() time.Time { return now }
	h := w.hclog()
	server := func(id, addr string) raft.Server {
		return raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr)}
	}
	for range 5 {
		h.Error("failed to heartbeat to", "peer", "127.0.0.1:4", "backoff time", 500*time.Millisecond, "error", "refused")
		h.Error("failed to appendEntries to", "peer", server("4", "127.0.0.1:4"), "error", "refused")
		h.Error("failed to heartbeat to", "peer", "127.0.0.1:5", "error", "refused")
		h.Error("failed to make requestVote RPC", "target", server("5", "127.0.0.1:5"), "error", "refused", "term", 3)
		h.Warn("failed to contact", "server-id", "5", "time", 600*time.Millisecond) // the leader's lease check
		now = now.Add(time.Second)
	}
	h.Error("failed to commit logs", "error", "disk")
	h.Error("failed to commit logs", "error", "disk")
	for range 12 { // 4 failing on: one line a minute
		now = now.Add(5 * time.Second)
		h.Error("failed to heartbeat to", "peer", "127.0.0.1:4", "error", "refused")
	}
	if !w.failures.forget("127.0.0.1:5", "id 5") {
		t.Fatal("forget found no failure of 127.0.0.1:5")
	}
	h.Error("failed to heartbeat to", "peer", "127.0.0.1:5", "error", "refused")
	// 4 answered for longer than peerFailureGap (say it was added back):
	// its next failure starts a new outage.
	now = now.Add(peerFailureGap)
	h.Error("failed to heartbeat to", "peer", "127.0.0.1:4", "error", "refused")
	h.Error("failed to heartbeat to", "peer", "127.0.0.1:4", "error", "refused")

	var got []string
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%s %s %v", r["level"], r["msg"], r["repeated"])
		if p, ok := r["peer"].(string); ok {
			line += " " + p
		}
		got = append(got, line)
	}
	want := []string{
		"WARN failed to heartbeat to <nil> 127.0.0.1:4",
		"WARN failed to appendEntries to <nil> 4@127.0.0.1:4",
		"WARN failed to heartbeat to <nil> 127.0.0.1:5",
		"WARN failed to make requestVote RPC <nil>",
		"WARN failed to contact <nil>",
		"ERROR failed to commit logs <nil>",
		"ERROR failed to commit logs <nil>",
		"WARN failed to heartbeat to 14 127.0.0.1:4",
		"WARN failed to heartbeat to <nil> 127.0.0.1:5",
		"WARN failed to heartbeat to <nil> 127.0.0.1:4",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRaftRoutineLinesLowered: raft's lines about a healthy cluster's
// routine (a follower catching up, a deposed leader, a peer's connection
// breaking) are not errors, and durations read as durations.
func TestRaftRoutineLinesLowered(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	h.Warn("appendEntries rejected, sending older logs", "peer", raft.Server{ID: "2", Address: "127.0.0.1:2"}, "next", 1)
	h.Error("peer has newer term, stopping replication", "peer", raft.Server{ID: "3", Address: "127.0.0.1:3"})
	h.Error("failed to decode incoming command", "error", "transport shutdown")
	h.Warn("failed to contact", "server-id", "3", "time", 1500*time.Millisecond)
	for _, want := range []string{
		`level=INFO msg="appendEntries rejected, sending older logs" module=raft next=1 peer=2@127.0.0.1:2`,
		`level=INFO msg="peer has newer term, stopping replication" module=raft peer=3@127.0.0.1:3`,
		`level=DEBUG msg="failed to decode incoming command" module=raft error="transport shutdown"`,
		`level=WARN msg="failed to contact" module=raft server-id=3 time=1.5s`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no line %q in:\n%s", want, buf.String())
		}
	}
}
