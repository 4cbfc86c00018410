package main

import (
	"log/slog"
	"testing"

	"github.com/sediment-io/sediment/broker"
)

// startCLITestBroker starts an in-process broker for the commands' tests
// with cfg's settings: a temporary data directory, a loopback listener and
// no logs unless cfg sets them. It is closed when the test ends.
func startCLITestBroker(t *testing.T, cfg broker.Config) *broker.Broker {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if len(cfg.Listeners) == 0 {
		cfg.Listeners = []broker.Listener{{Addr: "127.0.0.1:0"}}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
