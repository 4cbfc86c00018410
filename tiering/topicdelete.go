package tiering

import (
	"context"
	"fmt"

	"github.com/sediment-io/sediment/objectstore"
)

// PurgeTopic deletes the objects of a deleted topic (by its id: a topic
// re-created under the same name has another id, so none of its objects is
// touched): each partition's prefix, then the topic's descriptors, at most
// limit objects in all (limit ≤ 0: no limit). It returns how many objects it
// found (and deleted, unless err is set): 0 means that nothing of the topic
// is left in the bucket. It is idempotent; the broker calls it for the
// topics the metadata log records as deleted with remote data to delete,
// until a call finds nothing.
func PurgeTopic(ctx context.Context, store objectstore.Store, topicID [16]byte, partitions int32, limit int) (int, error) {
	found := 0
	for p := int32(0); p < partitions && (limit <= 0 || found < limit); p++ {
		n, err := purgePrefix(ctx, store, PartitionPrefix(topicID, p), limit-found)
		found += n
		if err != nil {
			return found, err
		}
	}
	if found > 0 {
		// Descriptors last: a listing of topics/ shows the topic until
		// its data is gone.
		return found, nil
	}
	return purgePrefix(ctx, store, TopicPrefix(topicID), limit)
}

func purgePrefix(ctx context.Context, store objectstore.Store, prefix string, limit int) (int, error) {
	list, err := store.List(ctx, prefix, "")
	if err != nil {
		return 0, fmt.Errorf("tiering: list %s: %w", prefix, err)
	}
	keys := make([]string, 0, len(list.Objects))
	for _, o := range list.Objects {
		if limit > 0 && len(keys) >= limit {
			break
		}
		keys = append(keys, o.Key)
	}
	if len(keys) == 0 {
		return 0, nil
	}
	if err := store.Delete(ctx, keys...); err != nil {
		return len(keys), fmt.Errorf("tiering: delete %s: %w", prefix, err)
	}
	return len(keys), nil
}

// PurgeTopic forgets the topic's partitions here and deletes its objects
// (the package function, through the Manager's counted store).
func (m *Manager) PurgeTopic(ctx context.Context, topicID [16]byte, partitions int32, limit int) (int, error) {
	for _, p := range m.partitions() {
		if p.tp.TopicID == topicID {
			m.RemovePartition(p.tp)
		}
	}
	return PurgeTopic(ctx, m.store, topicID, partitions, limit)
}
