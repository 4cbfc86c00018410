//go:build !amd64

package compaction

// prefetchBuckets loads buckets[h] for every h in homes: plain loads, which
// are independent, so their misses overlap as far as the core lets them (on
// amd64 it is one PREFETCHT0 a bucket, prefetch_amd64.s). It returns a sum of the loads, for the caller to keep
// (so that the compiler keeps them).
func prefetchBuckets(buckets []mapBucket, homes []uint32) uint32 {
	var x uint32
	for _, h := range homes {
		x += buckets[h][0].off
	}
	return x
}
