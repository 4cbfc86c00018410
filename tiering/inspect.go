package tiering

import (
	"context"
	"fmt"
	"strings"

	"github.com/sediment-io/sediment/objectstore"
)

// BucketPartition is what the bucket alone says about one partition.
type BucketPartition struct {
	Descriptor PartitionDescriptor
	// Manifest is the newest manifest in the listing (nil if none yet).
	Manifest *Manifest
	// Objects and Bytes count everything under the partition's prefix,
	// orphans and superseded manifests included.
	Objects, Bytes int64
}

// InspectBucket lists every topic and partition in the bucket with its newest
// manifest, from the bucket alone (the basis of `sediment tier` tools,
// replay and restore).
func InspectBucket(ctx context.Context, store objectstore.Store) ([]BucketPartition, error) {
	topics, err := store.List(ctx, "topics/", "/")
	if err != nil {
		return nil, err
	}
	var out []BucketPartition
	for _, t := range topics.Prefixes {
		descs, err := store.List(ctx, t, "")
		if err != nil {
			return nil, err
		}
		for _, o := range descs.Objects {
			if !strings.HasSuffix(o.Key, ".partition") {
				continue
			}
			d, err := ReadDescriptor(ctx, store, o.Key)
			if err != nil {
				return nil, err
			}
			bp := BucketPartition{Descriptor: *d}
			list, err := store.List(ctx, d.Prefix, "")
			if err != nil {
				return nil, err
			}
			for _, obj := range list.Objects {
				bp.Objects++
				bp.Bytes += obj.Size
			}
			if m, err := LatestManifest(ctx, store, d.Prefix); err == nil {
				bp.Manifest = m
			} else if !isNoManifest(err) {
				return nil, fmt.Errorf("tiering: %s: %w", d.Prefix, err)
			}
			out = append(out, bp)
		}
	}
	return out, nil
}

func isNoManifest(err error) bool { return strings.Contains(err.Error(), "no manifest under") }
