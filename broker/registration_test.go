package broker

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sediment-io/sediment/metadata"
)

// TestRestartWaitsForLiveSession: a broker restarted while its previous
// registration's session is still live, and that cannot name it (its
// broker_epoch file is stale, as after a restore from a backup), is refused
// as a duplicate (DUPLICATE_BROKER_REGISTRATION) until that session
// expires. It waits, says so once at INFO, and registers once the session
// has expired (broker.session.timeout.ms, 5 s here), as Kafka's broker
// retries its registration; it exited with "duplicate broker registration"
// instead.
func TestRestartWaitsForLiveSession(t *testing.T) {
	const timeout = 5 * time.Second
	dir := t.TempDir()
	b := startBroker(t, dir)
	ctx := testCtx(t)
	if _, err := b.meta.Propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceBroker,
		Ops: []metadata.ConfigOp{{Key: metadata.ConfigSessionTimeoutMs, Value: strconv.Itoa(int(timeout.Milliseconds()))}}}); err != nil {
		t.Fatal(err)
	}
	oldEpoch := b.store.brokerEpoch
	// A single broker's Close fences nothing (there is no other broker to
	// move leaderships to): the session stays live after it, as after a
	// SIGKILL. Its last renewal is this heartbeat or a later one.
	if err := b.store.heartbeat(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if br, ok := b.meta.State().Broker(b.cfg.NodeID); !ok || br.Fenced || br.InControlledShutdown || br.Epoch != oldEpoch {
		t.Fatalf("the old registration after Close: %+v (want it live, epoch %d)", br, oldEpoch)
	}
	if err := os.WriteFile(filepath.Join(dir, "broker_epoch"), []byte(strconv.FormatInt(oldEpoch-1, 10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	var log logLines
	b2, err := New(Config{
		DataDir:   dir,
		Listeners: []Listener{{Addr: "127.0.0.1:0"}},
		Logger:    slog.New(slog.NewTextHandler(&log, nil)),
	})
	if err != nil {
		t.Fatalf("restart while the old session is live: %v", err)
	}
	t.Cleanup(func() { b2.Close() })
	if n := len(log.with("level=INFO", "live session", "waiting for it to expire", "session_timeout="+timeout.String())); n != 1 {
		t.Errorf("%d INFO lines about waiting for the old session, want 1; log:\n%s", n, log.String())
	}
	if len(log.with("level=INFO", "the previous session of this broker id expired")) != 1 {
		t.Errorf("no INFO line about registering after the wait; log:\n%s", log.String())
	}
	br, ok := b2.meta.State().Broker(b2.cfg.NodeID)
	if !ok || br.Epoch <= oldEpoch || br.Fenced {
		t.Fatalf("the new registration: %+v (old epoch %d)", br, oldEpoch)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "broker_epoch"))
	if err != nil || string(raw) != strconv.FormatInt(br.Epoch, 10)+"\n" {
		t.Fatalf("broker_epoch %q (%v), want %d", raw, err, br.Epoch)
	}
}

// TestRegisterGivesUpOnRenewedSession: the wait for a live session is
// bounded (the session timeout plus registerDuplicateMargin from the first
// refusal): a registration under the id of a broker that goes on
// heartbeating (another broker with the same node id) fails with
// ErrDuplicateBroker, saying it is still live, and leaves that broker's
// registration alone.
func TestRegisterGivesUpOnRenewedSession(t *testing.T) {
	defer func(m time.Duration) { registerDuplicateMargin = m }(registerDuplicateMargin)
	registerDuplicateMargin = 500 * time.Millisecond
	const timeout = 2500 * time.Millisecond
	b := startBroker(t, "")
	ctx := testCtx(t)
	if _, err := b.meta.Propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceBroker,
		Ops: []metadata.ConfigOp{{Key: metadata.ConfigSessionTimeoutMs, Value: strconv.Itoa(int(timeout.Milliseconds()))}}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, waited, err := b.store.register(ctx, &metadata.RegisterBroker{BrokerID: b.cfg.NodeID, IncarnationID: metadata.NewUUID(), PreviousBrokerEpoch: -1})
	if !errors.Is(err, metadata.ErrDuplicateBroker) || !waited || !strings.Contains(err.Error(), "still live after") {
		t.Fatalf("registering under a heartbeating broker's id: waited %v, %v; want ErrDuplicateBroker after a wait", waited, err)
	}
	if d := time.Since(start); d < timeout+registerDuplicateMargin {
		t.Fatalf("gave up after %v, before the session timeout plus the margin", d)
	}
	if br, ok := b.meta.State().Broker(b.cfg.NodeID); !ok || br.Fenced || br.Epoch != b.store.brokerEpoch {
		t.Fatalf("the running broker's registration: %+v", br)
	}
}
