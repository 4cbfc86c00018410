//go:build !linux

package compaction

// allocBuckets returns n zeroed buckets (a Go slice; on Linux a large table
// is mapped with huge pages, buckets_linux.go) and the function that frees
// them (nil: the garbage collector does).
func allocBuckets(n int) ([]mapBucket, func()) { return make([]mapBucket, n), nil }
