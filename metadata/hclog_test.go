package metadata

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
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
	h.Error("failed to contact", "server-id", "3", "error", "dial tcp: refused")
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
		{"ERROR", "failed to contact", "server-id", "3"},
	} {
		r := recs[i]
		if r["level"] != want.level || r["msg"] != want.msg || r[want.key] != want.val || r["module"] != "raft" || r["node"] != 1.0 {
			t.Errorf("record %d: %v; want level %s msg %q %s=%q module raft node 1", i, r, want.level, want.msg, want.key, want.val)
		}
	}
}
