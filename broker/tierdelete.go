package broker

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/sediment-io/sediment/compaction"
	"github.com/sediment-io/sediment/metadata"
)

// Deleting a deleted topic's objects from the bucket (Kafka: the partition
// leaders' RemoteLogManager.stopPartitions with deleteRemoteLog, then
// deleteRemoteLogPartition). The DeleteTopics handler asks the metadata log
// to record, in the entry that deletes the topic, that its remote data is to
// be deleted (DeleteTopic.DeleteRemote; State.RemoteDeletions holds the
// topic id and partition count). Every broker with tiering looks at those
// records every RemoteDeleteInterval (2 s); the one that gets the "topic-delete"
// lease deletes each recorded topic's objects (every partition prefix, then
// the descriptors; the keys carry the topic id, so a topic re-created under
// the same name is never touched) and, once passes have found nothing left
// for RemoteDeleteGrace (5 min: what a stale leader's upload in flight adds
// meanwhile is deleted too), proposes RemoteTopicDeleted, which removes the
// record. So the work is
// driven by the replicated state: it survives restarts of any broker,
// retries after a failed delete, and does not depend on which brokers hosted
// the topic or which one is the metadata leader.

// remoteDeleteLease is the lease kind of the deletion worker (one for the
// cluster: resource "").
const remoteDeleteLease = compaction.LeaseKind("topic-delete")

// Bounds of one pass: topics, and objects deleted per topic.
const (
	remoteDeleteTopicsPerPass  = 16
	remoteDeleteObjectsPerPass = 10_000
)

// deleteRemoteOnTopicDelete tells whether deleting t must record its bucket
// data for deletion: the topic may have remote data (remote.storage.enable
// set on it or by default, or a remote log committed). Not every deletion on
// a broker that tiers: a topic that never tiered has no object (its
// partitions never upload), and its DeleteTopic entry then stays at version
// 1, which binaries before tiered topic deletion read: every deletion was a
// version 2 entry that stopped their metadata state machine in a rolling
// upgrade (a review), and cost a pass of LISTs over its partitions.
func (b *Broker) deleteRemoteOnTopicDelete(t *metadata.Topic) bool {
	if enable, _ := b.topicConfigValue(t.Configs, "remote.storage.enable"); strings.EqualFold(enable, "true") {
		return true
	}
	for _, p := range t.Partitions {
		if p.Remote.ManifestVersion > 0 {
			return true
		}
	}
	return false
}

// remoteDeleter is the deletion worker's memory: the backoff of topics whose
// deletion failed, and since when passes find nothing of a topic (only its
// goroutine uses it; a restart starts the grace again).
type remoteDeleter struct {
	g          *tierGlue
	grace      time.Duration
	retry      map[metadata.UUID]remoteDeleteRetry
	emptySince map[metadata.UUID]time.Time
}

type remoteDeleteRetry struct {
	fails int
	next  time.Time
}

func (g *tierGlue) startRemoteDeletion(ctx context.Context) {
	interval := g.cfg.RemoteDeleteInterval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	grace := g.cfg.RemoteDeleteGrace
	if grace <= 0 {
		grace = 5 * time.Minute
	}
	d := &remoteDeleter{g: g, grace: grace, retry: map[metadata.UUID]remoteDeleteRetry{}, emptySince: map[metadata.UUID]time.Time{}}
	g.wg.Add(1)
	go pprof.Do(ctx, pprof.Labels("sediment", "tiering-topic-delete"), func(ctx context.Context) {
		defer g.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			d.pass(ctx)
		}
	})
}

// pass is one pass over the recorded deletions, under the cluster's
// "topic-delete" lease: at most remoteDeleteTopicsPerPass topics (those not
// backing off after a failure), remoteDeleteObjectsPerPass objects each.
func (d *remoteDeleter) pass(ctx context.Context) {
	g := d.g
	b := g.b
	pending := b.meta.State().RemoteDeletions()
	for id := range d.retry {
		if !slices.ContainsFunc(pending, func(p metadata.RemoteDeletion) bool { return p.TopicID == id }) {
			delete(d.retry, id)
		}
	}
	for id := range d.emptySince {
		if !slices.ContainsFunc(pending, func(p metadata.RemoteDeletion) bool { return p.TopicID == id }) {
			delete(d.emptySince, id)
		}
	}
	now := time.Now()
	pending = slices.DeleteFunc(pending, func(p metadata.RemoteDeletion) bool { return now.Before(d.retry[p.TopicID].next) })
	if b.isStopping() || len(pending) == 0 {
		return
	}
	ttl := b.cfg.Cleaner.LeaseTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	leases := b.leases(fmt.Sprintf("broker-%d", b.cfg.NodeID), ttl)
	err := compaction.RunLeased(ctx, leases, remoteDeleteLease, "", nil, func(ctx context.Context, _ compaction.Lease) error {
		st := b.meta.State()
		for i, p := range pending {
			if i == remoteDeleteTopicsPerPass || ctx.Err() != nil {
				break
			}
			if _, ok := st.TopicByID(p.TopicID); ok || !st.RemoteDeletionPending(p.TopicID) {
				continue // done meanwhile (a live id with a record: never, CreateTopic refuses it)
			}
			n, err := g.m.PurgeTopic(ctx, p.TopicID, p.Partitions, remoteDeleteObjectsPerPass)
			if err == nil && n == 0 {
				if _, ok := d.emptySince[p.TopicID]; !ok {
					d.emptySince[p.TopicID] = time.Now()
				}
				g.emptyDeletePasses.Add(1)
			} else {
				delete(d.emptySince, p.TopicID)
			}
			if err == nil && n == 0 && time.Since(d.emptySince[p.TopicID]) >= d.grace {
				_, _, err = b.store.propose(ctx, &metadata.RemoteTopicDeleted{TopicID: p.TopicID})
				if errors.Is(err, metadata.ErrUnknownTopic) {
					err = nil // another worker recorded it
				}
			}
			if err != nil && ctx.Err() != nil {
				return nil // shutting down: the next start goes on
			}
			if err != nil {
				r := d.retry[p.TopicID]
				r.fails++
				r.next = time.Now().Add(min(time.Minute, time.Second<<min(r.fails-1, 6)))
				d.retry[p.TopicID] = r
				b.log.Warn("tiering: deleting a deleted topic's objects; will retry", "topic_id", topicIDString(p.TopicID), "objects", n,
					"retry_in", time.Until(r.next).Round(time.Second), "err", err)
				continue
			}
			delete(d.retry, p.TopicID)
			if n > 0 {
				// Recorded done once passes have found nothing for
				// the grace (after what an upload in flight when the
				// topic went may still have added).
				b.log.Info("tiering: deleted a deleted topic's objects", "topic_id", topicIDString(p.TopicID), "objects", n)
			}
		}
		return nil
	})
	switch {
	case err == nil || errors.Is(err, compaction.ErrLeaseHeld) || ctx.Err() != nil:
	case errors.Is(err, metadata.ErrNotLeader) || errors.Is(err, metadata.ErrNoQuorum):
		// The metadata quorum is electing a leader: the next pass takes
		// the lease (a WARN at every election read like a failure).
		b.log.Debug("tiering: no lease for deleting deleted topics' objects while the metadata quorum has no leader; next pass", "err", err)
	default:
		b.log.Warn("tiering: the lease for deleting deleted topics' objects failed; next pass", "err", err)
	}
}
