// Package hotlog is the local log of one Kafka partition: segments of v2
// record batches, a sparse offset index and a time index per segment, the
// leader-epoch checkpoint, producer-state snapshots, recovery after a crash,
// and reads as file regions that the broker can sendfile.
//
// Usage:
//
//	l, err := hotlog.Open(hotlog.Options{Dir: "/data/orders-0"})
//	res, err := l.Append(records, hotlog.AppendOptions{LeaderEpoch: 3})
//	rr, err := l.Read(res.FirstOffset, 1<<20, l.HighWatermark())
//	defer rr.Release()
//	for _, r := range rr.Regions { /* sendfile(r.File.Fd(), r.Pos, r.Len) */ }
//
// # On-disk layout
//
// A partition directory holds:
//
//	00000000000000000000.log        v2 record batches, as appended
//	00000000000000000000.index      sparse offset index
//	00000000000000000000.timeindex  sparse time index
//	00000000000000000000.txnindex   aborted transactions (only if any; see below)
//	00000000000000001234.log        the next segment: its name is its base offset
//	...
//	00000000000000001200.snapshot   producer state as of offset 1200 (opaque)
//	leader-epoch-checkpoint         epoch -> start offset
//	log-start-offset-checkpoint     the log start offset, once raised
//	clean-shutdown                  present only while the log is closed cleanly
//	00000000000000000000.swap       a segment swap in progress (see below)
//	*.cleaned, *.deleted, *.tmp     leftovers Open finishes or removes
//
// A .log file is a run of batches, each exactly as Kafka defines it
// (big-endian):
//
//	+0  baseOffset int64            set by Append (outside the CRC)
//	+8  batchLength int32           bytes after this field
//	+12 partitionLeaderEpoch int32  set by Append (outside the CRC)
//	+16 magic int8 = 2
//	+17 crc uint32                  CRC-32C of bytes [+21, end)
//	+21 attributes int16            codec(0-2) tsType(3) txn(4) control(5)
//	+23 lastOffsetDelta int32
//	+27 baseTimestamp int64
//	+35 maxTimestamp int64
//	+43 producerId int64
//	+51 producerEpoch int16
//	+53 baseSequence int32
//	+57 numRecords int32
//	+61 records...
//
// The .index file holds 8-byte entries (relativeOffset uint32 | position
// uint32): the batch with base offset base+relativeOffset starts at position.
// An entry is added when more than IndexIntervalBytes were appended since the
// last one. The .timeindex file holds 12-byte entries (timestamp int64 |
// relativeOffset uint32): the segment's max timestamp so far and the base
// offset of the batch holding it, added at the same points and once more when
// the segment is sealed, so its last entry is the segment's max timestamp.
// Both are strictly increasing. The active segment's indexes live in memory
// and are written when it seals or the log closes.
//
// # Durability and recovery
//
// Sealing a segment (on segment.bytes, segment.ms or a full index) syncs its
// .log, writes and syncs its indexes, then creates the next segment and syncs
// the directory: a sealed segment is durable and never changes, so only the
// active segment can have a torn tail. Close writes the clean-shutdown marker
// (active base, size, log end, max timestamp, high watermark, the active
// segment's creation time, CRC); Open removes it before anything changes. A
// clean open trusts the marker and reads nothing but the active segment's
// index files. An unclean open scans the
// active segment, checks every batch's header and CRC, truncates at the first
// torn or invalid batch, and rebuilds its indexes. A sealed segment's index
// files are loaded only when a read first needs them, checked (whole entries,
// strictly increasing, inside the segment) and rebuilt from the log if
// missing or damaged.
//
// TruncateTo and DeleteBefore rename dropped segments to *.deleted (and sync
// the directory) before anything else; Open removes *.deleted and *.tmp files
// and segments wholly below the log-start checkpoint. Files of a dropped
// segment are removed by the log's deleter Config.FileDeleteDelay
// (file.delete.delay.ms) after the rename, and never before the last reader
// releases it; Close leaves pending ones to the next Open. See deleter.go.
//
// # Replacing segments (the log cleaner's swap)
//
// ReplaceSegments swaps a run of adjacent sealed segments for one cleaned
// segment that a SegmentWriter wrote as <base>.log.cleaned (+ .index.cleaned,
// .timeindex.cleaned). The commit point is the atomic write of the marker
// <base>.swap ("SWAP" | 1 | base int64 | end int64 | size int64 | crc uint32 |
// crc32c), which names the range [base, end) replaced and the new segment's
// size and CRC-32C; then the old files become *.deleted and the
// .cleaned files take their final names. Open completes a swap whose marker
// it finds and removes .cleaned files without one, so a crash leaves either
// the old segments or the new one. See replace.go.
//
// # Transaction index
//
// For read_committed fetches a segment has a .txnindex file of Kafka's
// AbortedTxn entries, 34 bytes each, in marker order:
//
//	+0  version int16 = 0
//	+2  producerId int64
//	+10 firstOffset int64       first offset of the aborted transaction
//	+18 lastOffset int64        its abort marker's offset (in this segment)
//	+26 lastStableOffset int64  the partition's LSO once the abort completed
//
// hotlog does not interpret control batches: the appender's
// AppendOptions.Aborted hook says which transactions an append's abort
// markers end. The entries are written and fsynced before the batch (so a
// marker that survives a crash has its entry; Open drops entries past the
// recovered end and a torn last entry), kept in memory (small, never
// evicted; a segment without the file has none and costs no read), cut by
// TruncateTo, carried through ReplaceSegments for the markers the cleaner
// kept, and deleted with their segment. AbortedTxns(from, to) collects the
// entries a read of [from, to) needs from the segment holding from onwards,
// stopping at an entry whose lastStableOffset reaches to. AddAbortedTxn
// adds a missing entry (the broker's replay of the log on open rebuilds a
// lost or damaged index through it).
package hotlog
