package broker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

// Readiness is what /readyz reports: whether this broker should take client
// traffic. /healthz says only that the process started; a broker is ready
// when it also
//
//   - is not shutting down,
//   - hears from a metadata quorum leader (its metadata is current),
//   - is registered and unfenced (the controller counts it live: it may
//     lead and be in ISRs),
//
// and, when asked (/readyz?caught-up, for rolling restarts: restart the next
// broker only when this one is back in every ISR), holds every partition
// replica it is assigned in the ISR.
type Readiness struct {
	Ready   bool     `json:"ready"`
	Reasons []string `json:"reasons,omitempty"`
	// CatchingUp counts the partitions this broker replicates, that have a
	// leader, and whose ISR it is not in.
	CatchingUp int `json:"catching_up_partitions"`
}

// maxReadinessNames bounds the partitions a reason names.
const maxReadinessNames = 5

// Readiness reports whether the broker is ready; caughtUp also requires it
// in the ISR of every partition it replicates.
func (b *Broker) Readiness(caughtUp bool) Readiness {
	var r Readiness
	b.mu.Lock()
	closing := b.mu.closed
	b.mu.Unlock()
	if closing {
		r.Reasons = append(r.Reasons, "shutting down")
	}
	if err := b.meta.Err(); err != nil {
		r.Reasons = append(r.Reasons, fmt.Sprintf("the metadata state machine stopped: %v", err))
	}
	if b.store != nil {
		if p := b.store.storageFault.Load(); p != nil {
			r.Reasons = append(r.Reasons, fmt.Sprintf("a partition log failed after an I/O error (this broker fenced itself; restart it once the disk is fixed): %v", *p))
		}
	}
	if b.meta.Stale() {
		r.Reasons = append(r.Reasons, "no metadata quorum leader heard from within the election timeout")
	}
	st := b.meta.State()
	id := b.cfg.NodeID
	switch br, ok := st.Broker(id); {
	case !ok:
		r.Reasons = append(r.Reasons, "not registered with the controller")
	case br.InControlledShutdown:
		r.Reasons = append(r.Reasons, "in controlled shutdown")
	case br.Fenced:
		r.Reasons = append(r.Reasons, "fenced (catching up with the metadata log, or its heartbeats are not reaching the controller)")
	}
	var names []string
	for _, t := range st.Topics() {
		for _, p := range t.Partitions {
			if p.Leader < 0 || !slices.Contains(p.Replicas, id) || slices.Contains(p.ISR, id) || slices.Contains(p.Removing, id) {
				continue
			}
			r.CatchingUp++
			if len(names) < maxReadinessNames {
				names = append(names, fmt.Sprintf("%s-%d", t.Name, p.Index))
			}
		}
	}
	if caughtUp && r.CatchingUp > 0 {
		more := ""
		if r.CatchingUp > len(names) {
			more = fmt.Sprintf(" and %d more", r.CatchingUp-len(names))
		}
		r.Reasons = append(r.Reasons, fmt.Sprintf("not in the ISR of %d partitions: %v%s", r.CatchingUp, names, more))
	}
	r.Ready = len(r.Reasons) == 0
	return r
}

// ReadinessHandler serves /readyz: 200 when ready, 503 otherwise, with the
// Readiness as JSON; ?caught-up also waits for every ISR.
func (b *Broker) ReadinessHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !readOnly(w, req) {
			return
		}
		r := b.Readiness(req.URL.Query().Has("caught-up"))
		w.Header().Set("Content-Type", "application/json")
		if !r.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(r)
	})
}
