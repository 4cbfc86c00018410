package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sediment-io/sediment/metadata"
)

// Topic creation shared by CreateTopics and Metadata's auto-creation.

type createTopicSpec struct {
	name              string
	partitions        int32 // -1: num.partitions
	replicationFactor int16 // -1: default.replication.factor
	configs           map[string]string
	assignment        [][]int32
}

// validate checks a spec without touching the metadata log.
func (b *Broker) validateTopic(spec *createTopicSpec) error {
	if err := validTopicName(spec.name); err != nil {
		return fmt.Errorf("%w: %v", errInvalidTopic, err)
	}
	for k, v := range spec.configs {
		v := v
		if err := validateTopicConfig(k, &v); err != nil {
			return err
		}
		spec.configs[k] = canonicalTopicConfig(k, v)
	}
	if err := b.validateTopicConfigSet(nil, spec.configs); err != nil {
		return err
	}
	if len(spec.assignment) > 0 {
		// A manual assignment: checked now as the metadata log will
		// (validate_only answers what creating would), and it gives
		// the counts.
		if len(spec.assignment) > metadata.MaxPartitionsPerCommand {
			return fmt.Errorf("%w: %d partitions is more than this broker allows (%d)", metadata.ErrInvalidPartitions, len(spec.assignment), metadata.MaxPartitionsPerCommand)
		}
		if err := b.checkAssignment(spec.assignment, len(spec.assignment[0])); err != nil {
			return err
		}
		spec.partitions, spec.replicationFactor = int32(len(spec.assignment)), int16(len(spec.assignment[0]))
	}
	if spec.partitions == -1 {
		spec.partitions = b.cfg.NumPartitions
	}
	if spec.replicationFactor == -1 {
		spec.replicationFactor = b.cfg.DefaultReplicationFactor
	}
	if len(spec.assignment) == 0 && spec.partitions <= 0 {
		return fmt.Errorf("%w: %d partitions", metadata.ErrInvalidPartitions, spec.partitions)
	}
	if len(spec.assignment) == 0 && spec.partitions > 100000 {
		return fmt.Errorf("%w: %d partitions is more than this broker allows (100000)", metadata.ErrInvalidPartitions, spec.partitions)
	}
	if len(spec.assignment) == 0 && spec.replicationFactor <= 0 {
		return fmt.Errorf("%w: %d", metadata.ErrInvalidReplicationFactor, spec.replicationFactor)
	}
	if len(spec.assignment) == 0 {
		if n := len(b.meta.State().Brokers()); int(spec.replicationFactor) > n {
			return fmt.Errorf("%w: replication factor %d is larger than the %d available brokers", metadata.ErrInvalidReplicationFactor, spec.replicationFactor, n)
		}
	}
	// Also here for validate_only (the leader checks it again when it
	// prepares the creation).
	if _, exists := b.meta.State().Topic(spec.name); !exists {
		if other, ok := b.meta.State().TopicCollision(spec.name); ok {
			return fmt.Errorf("%w: topic %q collides with existing topic %q", errInvalidTopic, spec.name, other)
		}
	}
	return nil
}

// internalReplicationFactor is the replication factor of an internal topic
// created now: want (its setting), or the number of brokers that can take a
// replica (registered, neither fenced nor shutting down) when fewer, at least
// 1. Kafka refuses the coordinator (COORDINATOR_NOT_AVAILABLE) until enough
// brokers are up; Sediment creates the topic smaller, so that a single
// broker serves groups and transactions, and says so: at INFO when the
// cluster has no more brokers (none registered and down, no more metadata
// voters), else at WARN, as the replicas are then to be added by a
// reassignment (`sediment topic reassign`).
func (b *Broker) internalReplicationFactor(topic, setting string, want int16) int16 {
	all := b.meta.State().Brokers()
	n := 0
	for _, br := range all {
		if !br.Fenced && !br.InControlledShutdown {
			n++
		}
	}
	rf := max(1, min(int(want), n))
	if rf < int(want) {
		size := len(all)
		if voters, err := b.meta.Voters(); err == nil {
			size = max(size, len(voters))
		}
		msg, level := "creating an internal topic with as many replicas as the cluster has brokers", slog.LevelInfo
		if size > n {
			msg, level = "creating an internal topic with fewer replicas than its setting, as some brokers are down: add replicas with `sediment topic reassign` when they are back", slog.LevelWarn
		}
		b.log.Log(context.Background(), level, msg, "topic", topic, "replication_factor", rf, setting, want, "brokers_up", n)
	}
	return int16(rf)
}

// checkAssignment checks a manual replica assignment as Kafka's
// ReplicationControlManager.validateManualPartitionAssignment does (and the
// metadata log will): every partition has rf replicas, none listed twice,
// all of them registered brokers; INVALID_REPLICA_ASSIGNMENT otherwise.
func (b *Broker) checkAssignment(a [][]int32, rf int) error {
	st := b.meta.State()
	for i, replicas := range a {
		switch {
		case len(replicas) == 0:
			return fmt.Errorf("%w: partition %d has an empty replica list", metadata.ErrInvalidReplicaAssignment, i)
		case len(replicas) != rf:
			return fmt.Errorf("%w: partition %d has %d replicas, the others %d", metadata.ErrInvalidReplicaAssignment, i, len(replicas), rf)
		}
		for j, r := range replicas {
			if slices.Contains(replicas[:j], r) {
				return fmt.Errorf("%w: partition %d lists broker %d twice", metadata.ErrInvalidReplicaAssignment, i, r)
			}
			if _, ok := st.Broker(r); !ok {
				return fmt.Errorf("%w: partition %d: broker %d is not registered", metadata.ErrInvalidReplicaAssignment, i, r)
			}
		}
	}
	return nil
}

// createTopic validates and commits a topic; it returns the state that
// includes it.
func (b *Broker) createTopic(ctx context.Context, spec createTopicSpec) (*metadata.State, error) {
	if err := b.validateTopic(&spec); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := &metadata.CreateTopic{
		Name:              spec.name,
		TopicID:           metadata.NewUUID(),
		NumPartitions:     spec.partitions,
		ReplicationFactor: int32(spec.replicationFactor),
		Configs:           spec.configs,
		Assignment:        spec.assignment,
	}
	if len(spec.assignment) > 0 {
		cmd.NumPartitions, cmd.ReplicationFactor = -1, -1
	}
	return b.proposeCreateTopic(ctx, cmd)
}

// proposeCreateTopic proposes cmd, whose topic id the broker chose, until
// its outcome is known. A metadata leader lost while the command was in
// flight (ErrNotLeader: it may have been committed all the same) is asked
// again, and a refusal because the name exists is a success when the topic
// of that name has cmd's id: the earlier attempt created it. Before, the
// client got NOT_CONTROLLER, retried, and got TOPIC_ALREADY_EXISTS for the
// topic its own request had created (an e2e test failed so at a metadata
// election under load); Kafka's controller answers that way too.
func (b *Broker) proposeCreateTopic(ctx context.Context, cmd *metadata.CreateTopic) (*metadata.State, error) {
	for {
		_, st, err := b.store.propose(ctx, cmd)
		if h := b.testHooks.createTopicProposed; h != nil {
			err = h(err)
		}
		switch {
		case err == nil:
			return st, nil
		case errors.Is(err, metadata.ErrNotLeader) && ctx.Err() == nil:
			// Propose waits for the next leader; this only keeps a
			// leader that keeps refusing from being asked in a loop.
			t := time.NewTimer(20 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		case errors.Is(err, metadata.ErrTopicExists):
			if st == nil {
				st = b.meta.State()
			}
			if t, ok := st.Topic(cmd.Name); ok && t.ID == cmd.TopicID {
				return st, nil
			}
		}
		return st, err
	}
}
