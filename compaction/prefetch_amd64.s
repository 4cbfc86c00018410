#include "textflag.h"

// func prefetchBuckets(buckets []mapBucket, homes []uint32) uint32
//
// PREFETCHT0 of the 64-byte bucket buckets[h] for every h in homes. A
// prefetch never faults (an index out of range would be harmless; the
// callers' are in range), and it does not wait for its line, so the misses
// of all homes are in flight together.
TEXT ·prefetchBuckets(SB), NOSPLIT, $0-52
	MOVQ buckets_base+0(FP), AX
	MOVQ homes_base+24(FP), SI
	MOVQ homes_len+32(FP), CX
	TESTQ CX, CX
	JEQ done
loop:
	MOVL (SI), DX
	SHLQ $6, DX
	PREFETCHT0 (AX)(DX*1)
	ADDQ $4, SI
	DECQ CX
	JNE loop
done:
	MOVL $0, ret+48(FP)
	RET
