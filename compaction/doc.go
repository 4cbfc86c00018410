// Package compaction removes records from partition logs: the log cleaner
// for cleanup.policy=compact (keep at least the latest record of every key)
// and retention by time and size for cleanup.policy=delete, or both.
//
// Usage (the broker wires it):
//
//	m := compaction.NewManager(compaction.Config{Cleaner: compaction.CleanerConfig{Threads: 1}, FS: fs})
//	defer m.Close()
//	m.Register(compaction.Partition{Name: "orders-0", Log: l, Config: cfg, Txn: txns})
//	...
//	m.Unregister("orders-0") // before closing the log
//
// One pass of the cleaner (Cleaner.Clean), as Kafka's Cleaner.doClean:
//
//  1. The cleanable range [first dirty, first uncleanable): the first dirty
//     offset is the checkpoint of the last pass; cleaning stops at the
//     active segment, the high watermark, the first unstable offset (an
//     open transaction) and the first segment younger than
//     min.compaction.lag.ms.
//  2. The key map: every keyed record of the dirty range, outside aborted
//     transactions and control batches, puts xxh3-128(key) → offset into a
//     fixed-size open-addressing table (16-byte slots, four to a 64-byte
//     bucket, linear over buckets, 90% load; offsets relative to the first
//     mapped batch), and marks three bitmaps, one bit an offset: mapped,
//     dead (superseded, or a gap) and look (tombstones, transactional
//     batches, producers' last batches). log.cleaner.dedupe.buffer.size sizes
//     both (a quarter for the bitmaps; see offsetmap.go). When the table is
//     full the pass stops mapping at that batch; the next pass continues
//     from there.
//  3. The rewrite: the segments from the log start to the end of the mapped
//     range, in groups of adjacent segments whose sizes add up to at most
//     segment.bytes, are each rewritten into one segment: a record stays if
//     its offset is at least the map's offset for its key, it is not in an
//     aborted transaction, and it is not a tombstone whose batch's delete
//     horizon passed. Control markers stay until their transaction has no
//     data left and their horizon passed. Records past the mapped range are
//     kept as they are (tombstones too: the map does not know them). A
//     mapped record is decided by its dead bit (no hashing, no probe); a
//     batch whose records are all mapped is dropped whole or copied whole
//     from popcounts of its offsets' bits without being decoded; a run of
//     dead offsets without a look bit is not read at all. A
//     batch that loses records is
//     re-encoded: same base offset, last offset delta, producer id, epoch,
//     base sequence, leader epoch and codec (gzip, snappy raw or xerial as it
//     came, lz4 frame, zstd), new record count, max timestamp and CRC-32C. A
//     batch that keeps everything is copied as it is. A batch that keeps no
//     record is dropped, unless it is its producer's last (then its header
//     stays, empty).
//  4. The swap: hotlog's SegmentWriter writes <base>.log.cleaned, and
//     ReplaceSegments commits it with an atomic <base>.swap marker and
//     renames it in (see hotlog/replace.go); a crash leaves the old group or
//     the new segment, never a mix.
//
// Delete horizons are KIP-534's: the first pass that keeps a tombstone or a
// marker in a batch sets the batch's attribute bit 6 and stores now +
// delete.retention.ms in its base timestamp (record timestamp deltas are
// re-based, so record timestamps do not change); a later pass after that
// time drops them. The Manager cleans a log again when its earliest horizon
// passes, dirty or not. A pass reports only horizons still ahead: a marker
// kept past its horizon (its transaction still has data) waits for a dirty
// pass, as only new data can make its data go.
//
// Records without a key are dropped by the cleaner, as Kafka does; the
// broker must refuse them for compacted topics (INVALID_RECORD).
//
// The Manager keeps each log's checkpoint (the next first dirty offset) in
// the file cleaner-offset-checkpoint in the log's directory:
//
//	0\n
//	<first dirty offset>\n
//
// Retention (RetainLocal) deletes the longest prefix of whole sealed
// segments that are past retention.ms or whose removal keeps the log at
// least retention.bytes large, through hotlog's DeleteBefore.
//
// All disk I/O goes through hotlog and internal/vfs.
package compaction
