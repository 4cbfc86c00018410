package compaction

// prefetchBuckets asks the CPU to bring buckets[h] into its cache for every
// h in homes, without waiting for any of them (prefetch_amd64.s). The puts
// that follow find their buckets in cache, and the misses of a batch
// overlap instead of following one another. It returns 0 (the portable
// version returns a sum of the loads, which its caller keeps).
//
//go:noescape
func prefetchBuckets(buckets []mapBucket, homes []uint32) uint32
