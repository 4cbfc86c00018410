package broker

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sediment-io/sediment/internal/testutil"
)

// A fetcher's failing rounds are a WARN only once they outlast
// replicaFailingAfter, then once a replicaFailingEvery, and an INFO when a
// round succeeds again.
func TestReplicaFetchFailuresLogged(t *testing.T) {
	var logs testutil.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var ff fetchFailures
	t0 := time.Unix(1000, 0)
	err := errors.New("gapped-0: hotlog: replicated batch does not continue the log")
	for _, d := range []time.Duration{0, time.Second, 29 * time.Second} {
		ff.failed(log, err, t0.Add(d))
	}
	if logs.String() != "" {
		t.Fatalf("logged within %v of failing:\n%s", replicaFailingAfter, logs.String())
	}
	for _, d := range []time.Duration{31 * time.Second, 40 * time.Second, 90 * time.Second, 92 * time.Second} {
		ff.failed(log, err, t0.Add(d))
	}
	if n := strings.Count(logs.String(), `level=WARN msg="replication from this leader keeps failing`); n != 2 {
		t.Fatalf("%d WARN lines for 92 s of failures, want 2 (at 31 s and 92 s):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "does not continue the log") {
		t.Fatalf("the error is not in the line:\n%s", logs.String())
	}
	ff.succeeded(log)
	if !strings.Contains(logs.String(), `level=INFO msg="replication from this leader works again"`) {
		t.Fatalf("no line when it works again:\n%s", logs.String())
	}
	before := logs.String()
	ff.failed(log, err, t0.Add(200*time.Second))
	ff.succeeded(log)
	if logs.String() != before {
		t.Fatalf("a short failure logged:\n%s", logs.String()[len(before):])
	}
}
