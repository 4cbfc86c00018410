package compaction

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

const hugePage = 2 << 20

// allocBuckets returns n zeroed buckets and, if they are not a Go slice, the
// function that frees them.
// A table of hugeTableBytes or more is mapped outside the Go heap, aligned
// to 2 MiB and advised MADV_HUGEPAGE, so that transparent huge pages back it
// where the kernel allows them (enabled=madvise): one TLB entry covers 2 MiB
// of the table instead of 4 KiB. Where mmap fails it is a Go slice.
func allocBuckets(n int) ([]mapBucket, func()) {
	size := n * int(unsafe.Sizeof(mapBucket{}))
	if size < hugeTableBytes {
		return make([]mapBucket, n), nil
	}
	mem, err := unix.Mmap(-1, 0, size+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return make([]mapBucket, n), nil
	}
	off := 0
	if r := int(uintptr(unsafe.Pointer(&mem[0])) % hugePage); r != 0 {
		off = hugePage - r
	}
	table := mem[off : off+size]
	_ = unix.Madvise(table, unix.MADV_HUGEPAGE) // advice only
	return unsafe.Slice((*mapBucket)(unsafe.Pointer(&table[0])), n), func() { _ = unix.Munmap(mem) }
}
