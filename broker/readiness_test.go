package broker

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReadiness: /readyz of a pair whose followers cannot fetch (their
// TLS handshakes with the leader fail): both brokers are ready (quorum,
// registered, unfenced), but with ?caught-up a broker that dropped out of
// a partition's ISR is not, and says which partition; a closing broker is
// not ready.
func TestReadiness(t *testing.T) {
	pki, other := newTestPKI(t), newTestPKI(t)
	brokers := startTLSPair(t, pki, other.pool, time.Second)
	get := func(b *Broker, query string) (int, Readiness) {
		rec := httptest.NewRecorder()
		b.ReadinessHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz"+query, nil))
		var r Readiness
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatalf("/readyz%s: %v: %q", query, err, rec.Body.String())
		}
		return rec.Code, r
	}
	for _, b := range brokers {
		waitCond(t, func() bool { code, _ := get(b, ""); return code == http.StatusOK })
	}
	cl := secureClient(t, brokers[0], pki, "SSL", nil, kgo.DialTLSConfig(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}))
	createPairTopic(t, kadm.NewClient(cl), "ready", nil)
	// Each broker leads one partition and follows the other; the follower
	// leaves the ISR after a second without fetching.
	for _, b := range brokers {
		waitCond(t, func() bool { _, r := get(b, "?caught-up"); return r.CatchingUp == 1 })
		code, r := get(b, "?caught-up")
		if code != http.StatusServiceUnavailable || r.Ready || len(r.Reasons) != 1 || !strings.Contains(r.Reasons[0], "not in the ISR of 1 partitions: [ready-") {
			t.Errorf("node %d ?caught-up: %d %+v", b.cfg.NodeID, code, r)
		}
		if code, r := get(b, ""); code != http.StatusOK || !r.Ready {
			t.Errorf("node %d: %d %+v, want ready", b.cfg.NodeID, code, r)
		}
	}
	brokers[1].Close()
	if code, r := get(brokers[1], ""); code != http.StatusServiceUnavailable || !strings.Contains(strings.Join(r.Reasons, ";"), "shutting down") {
		t.Errorf("closed broker: %d %+v", code, r)
	}
	rec := httptest.NewRecorder()
	brokers[0].ReadinessHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/readyz", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
}
