package metadata

import (
	"encoding/hex"
	"strconv"
	"strings"
)

// Deleted topics whose bucket objects (tiered storage) are still to be
// deleted. DeleteTopic with DeleteRemote records the topic's id and
// partition count in the same entry that deletes it; whichever broker holds
// the "topic-delete" lease deletes the objects (every partition prefix, then
// the descriptors) and then proposes RemoteTopicDeleted, which removes the
// record. The record is part of the replicated state (and its snapshots), so
// the work survives restarts and failed attempts and does not depend on which
// broker hosted the topic. The records are kept among the non-topic configs
// (brokerConfigs) under remoteDeletionKeyPrefix + the topic id in hex, so
// the snapshot format is unchanged.

func init() {
	register(TypeRemoteTopicDeleted, commandInfo{name: "RemoteTopicDeleted", version: 1, ignorable: true,
		decode: func(_ uint8, d *decoder) Command {
			return &RemoteTopicDeleted{TopicID: d.uuid()}
		}})
}

// remoteDeletionKeyPrefix marks a pending remote deletion in brokerConfigs;
// its map holds remoteDeletionPartitions.
const (
	remoteDeletionKeyPrefix  = "remote-delete:"
	remoteDeletionPartitions = "partitions"
)

// RemoteDeletion is a deleted topic whose bucket objects are still to be
// deleted.
type RemoteDeletion struct {
	TopicID    UUID
	Partitions int32 // the partition count when it was deleted
}

func remoteDeletionKey(id UUID) string { return remoteDeletionKeyPrefix + hex.EncodeToString(id[:]) }

// RemoteDeletions returns the pending remote deletions, in topic-id order.
func (s *State) RemoteDeletions() []RemoteDeletion {
	var out []RemoteDeletion
	for _, k := range sortedKeys(s.brokerConfigs) {
		h, ok := strings.CutPrefix(k, remoteDeletionKeyPrefix)
		if !ok {
			continue
		}
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != len(UUID{}) {
			continue
		}
		n, err := strconv.ParseInt(s.brokerConfigs[k][remoteDeletionPartitions], 10, 32)
		if err != nil || n < 0 {
			continue
		}
		out = append(out, RemoteDeletion{TopicID: UUID(b), Partitions: int32(n)})
	}
	return out
}

// RemoteDeletionPending reports whether id's bucket objects are still to be
// deleted.
func (s *State) RemoteDeletionPending(id UUID) bool {
	_, ok := s.brokerConfigs[remoteDeletionKey(id)]
	return ok
}

func setRemoteDeletion(s *State, id UUID, partitions int32) {
	bc := make(map[string]map[string]string, len(s.brokerConfigs)+1)
	for k, v := range s.brokerConfigs {
		bc[k] = v
	}
	bc[remoteDeletionKey(id)] = map[string]string{remoteDeletionPartitions: strconv.Itoa(int(partitions))}
	s.brokerConfigs = bc
}

// RemoteTopicDeleted removes the record of a deleted topic's pending remote
// deletion once its objects are gone. Flagged ignorable: a binary that
// predates it never wrote such a record (DeleteTopic version 2).
type RemoteTopicDeleted struct {
	TopicID UUID
}

func (*RemoteTopicDeleted) Type() CommandType   { return TypeRemoteTopicDeleted }
func (c *RemoteTopicDeleted) encode(e *encoder) { e.uuid(c.TopicID) }
func (c *RemoteTopicDeleted) apply(s *State, _ uint64) (Result, error) {
	key := remoteDeletionKey(c.TopicID)
	if _, ok := s.brokerConfigs[key]; !ok {
		return Result{}, reject(ErrUnknownTopic, "no pending remote deletion of topic id %s", c.TopicID)
	}
	bc := make(map[string]map[string]string, len(s.brokerConfigs))
	for k, v := range s.brokerConfigs {
		if k != key {
			bc[k] = v
		}
	}
	s.brokerConfigs = bc
	return Result{TopicID: c.TopicID}, nil
}
