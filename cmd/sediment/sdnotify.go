package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/sediment-io/sediment/broker"
)

// systemd's notify protocol (Type=notify, sd_notify(3)), through
// go-systemd: READY=1 once the listeners and the admin endpoint are up (the
// moment /healthz answers: a broker waiting for a quorum of its peers is
// started, or a cluster started one unit at a time would never start),
// STATUS= with the broker's readiness as /readyz reports it, STOPPING=1
// when the shutdown begins, and, with WatchdogSec=, WATCHDOG=1 at half the
// interval as long as the broker's state answers (a deadlocked broker is
// restarted). Without NOTIFY_SOCKET nothing is sent.

// notifyReady tells systemd the broker started and keeps its status and
// watchdog until ctx ends.
func notifyReady(ctx context.Context, b *broker.Broker, log *slog.Logger) {
	sent, err := daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS="+readinessStatus(b))
	if err != nil {
		log.Warn("sd_notify READY", "err", err)
	}
	if !sent {
		return
	}
	watchdog, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("sd_notify watchdog", "err", err)
	}
	tick := 2 * time.Second
	if watchdog > 0 && watchdog/2 < tick {
		tick = watchdog / 2
	}
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		last := ""
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var msg []string
			if s := readinessStatus(b); s != last {
				last = s
				msg = append(msg, "STATUS="+s)
			}
			if watchdog > 0 {
				msg = append(msg, daemon.SdNotifyWatchdog)
			}
			if len(msg) > 0 {
				if _, err := daemon.SdNotify(false, strings.Join(msg, "\n")); err != nil {
					log.Debug("sd_notify", "err", err)
				}
			}
		}
	}()
}

// notifyStopping tells systemd the shutdown began.
func notifyStopping() { daemon.SdNotify(false, daemon.SdNotifyStopping+"\nSTATUS=shutting down") }

func readinessStatus(b *broker.Broker) string {
	r := b.Readiness(false)
	if r.Ready {
		return fmt.Sprintf("ready; %d partitions catching up", r.CatchingUp)
	}
	return "not ready: " + strings.Join(r.Reasons, "; ")
}
