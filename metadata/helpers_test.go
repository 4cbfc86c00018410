package metadata

import (
	"log/slog"
	"strings"
	"testing"
)

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// stripVersion drops the first line (the version, which differs when a restart
// applies a few no-op entries).
func stripVersion(s string) string {
	_, rest, _ := strings.Cut(s, "\n")
	return rest
}
