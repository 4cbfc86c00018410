package metadata

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// peerFailureEvery is how often one kind of failure to reach one peer is
// logged while it lasts. hashicorp/raft logs every failed heartbeat and
// append to a peer it cannot reach, at ERROR, with its backoff capped at
// half the heartbeat timeout: a broker down for maintenance filled every
// voter's log with two lines a second (7,000 an hour per peer).
const peerFailureEvery = time.Minute

// peerFailureGap: a failure that comes this long after the last of its kind
// for its peer starts a new outage, logged at once. Raft retries a peer it
// cannot reach at least every 10.24 s (its append backoff's cap), and a
// peer added back to the configuration never fails and resumes, so no
// observation says the old outage ended.
const peerFailureGap = 30 * time.Second

// peerFailureMsgs are raft's per-peer failure lines that peerFailureLog
// throttles; they go out as warnings (the peer is unreachable; this node
// is fine), as Kafka logs a node it cannot connect to.
var peerFailureMsgs = map[string]bool{
	"failed to heartbeat to":                  true,
	"failed to appendEntries to":              true,
	"failed to start pipeline replication to": true,
	"failed to pipeline appendEntries":        true,
	"failed to send snapshot to":              true,
	"failed to make requestVote RPC":          true,
	// The leader's lease check, about every half second per voter it has
	// not heard from (three lines for a follower's clean restart).
	"failed to contact": true,
}

// peerFailureLog decides which of raft's per-peer failure lines to log:
// the first of each kind for each peer, then one a peerFailureEvery while
// the failures go on, with how many were left out. A peer that answers
// again (forget), or whose failures stopped for peerFailureGap, has its next
// failure logged at once.
type peerFailureLog struct {
	now  func() time.Time
	mu   sync.Mutex
	seen map[peerFailureKey]*peerFailureSeen
}

type peerFailureKey struct{ msg, peer string }

type peerFailureSeen struct {
	logged  time.Time // when the last line of this kind was logged
	last    time.Time // when the last failure of this kind came
	omitted int       // lines left out since logged
}

func newPeerFailureLog(now func() time.Time) *peerFailureLog {
	return &peerFailureLog{now: now, seen: map[peerFailureKey]*peerFailureSeen{}}
}

// admit reports whether a failure line msg about peer is logged now and,
// if it is, how many of its kind were left out since the last one logged
// (and when that one was).
func (p *peerFailureLog) admit(msg, peer string) (ok bool, omitted int, since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := peerFailureKey{msg, peer}
	now := p.now()
	s := p.seen[k]
	if s != nil && now.Sub(s.last) >= peerFailureGap {
		s = nil // a new outage
	}
	if s != nil && now.Sub(s.logged) < peerFailureEvery {
		s.omitted++
		s.last = now
		return false, 0, time.Time{}
	}
	if s != nil {
		omitted, since = s.omitted, s.logged
	}
	p.seen[k] = &peerFailureSeen{logged: now, last: now}
	return true, omitted, since
}

// forget drops what was seen of the peers named (an address, or "id N"),
// and reports whether any failure of theirs had been logged.
func (p *peerFailureLog) forget(peers ...string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	found := false
	for k := range p.seen {
		for _, peer := range peers {
			if k.peer == peer {
				delete(p.seen, k)
				found = true
			}
		}
	}
	return found
}

// failurePeer names the peer of one of raft's failure lines: its address
// ("peer" is an address or a server, "target" a server), or "id N".
func failurePeer(rec map[string]any) string {
	for _, key := range []string{"peer", "target"} {
		switch v := rec[key].(type) {
		case string:
			return v
		case map[string]any:
			if a, ok := v["Address"].(string); ok {
				return a
			}
		}
	}
	if id, ok := rec["server-id"].(string); ok {
		return "id " + id
	}
	return ""
}

// DefaultObserverTimeout is how long the leader keeps an observer it cannot
// reach in the Raft configuration (Config.ObserverTimeout): KRaft's leader
// forgets an observer that has not fetched for five minutes.
const DefaultObserverTimeout = 5 * time.Minute

// watchPeers follows raft's heartbeat observations on the leader: an
// observer that has not answered for Config.ObserverTimeout is taken out of
// the configuration, so that no leader dials a broker that is gone for
// ever (one stopped and never unregistered: Kafka fences such a broker and
// stops fetching from it alone). Its registration stays (the broker is
// fenced, as before); when it starts again it asks to observe (the
// broker's join at start, or the rejoin loop of a node cut off), and the
// leader adds it back. Voters are never removed here: only RemoveVoter
// changes the quorum. A peer that answers again after failures is logged.
func (n *Node) watchPeers() {
	ch := make(chan raft.Observation, 64)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	for {
		var o raft.Observation
		select {
		case <-n.ctx.Done():
			return
		case o = <-ch:
		}
		switch d := o.Data.(type) {
		case raft.ResumedHeartbeatObservation:
			s, _ := n.server(d.PeerID)
			if n.hcWriter.failures.forget(string(s.Address), "id "+string(d.PeerID)) {
				n.logger.Info("metadata peer answers again", "peer", d.PeerID, "address", s.Address)
			}
		case raft.FailedHeartbeatObservation:
			down := time.Since(d.LastContact)
			if down < n.cfg.ObserverTimeout || n.raft.State() != raft.Leader {
				continue
			}
			s, ok := n.server(d.PeerID)
			if !ok || s.Suffrage == raft.Voter {
				continue
			}
			id, err := strconv.ParseInt(string(d.PeerID), 10, 32)
			if err != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
			err = n.changeVotersLocal(ctx, opRemoveObserver, int32(id), "")
			cancel()
			if err != nil {
				n.logger.Warn("could not remove an unreachable observer from the metadata quorum", "observer", id, "err", err)
				continue
			}
			n.logger.Warn("removed an unreachable observer from the metadata quorum; it is added back when it starts again",
				"observer", id, "address", s.Address, "unreachable_for", fmt.Sprint(down.Round(time.Second)))
		}
	}
}
