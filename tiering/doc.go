// Package tiering moves a partition's sealed segments from the local log
// (hotlog) to the bucket (objectstore), keeps the partition's remote
// manifest, applies local and total retention, and serves reads below the
// local log start from the bucket through a bounded on-disk chunk cache.
//
// It imports hotlog and objectstore only. What it needs of the metadata log
// and of partition leadership comes through two small interfaces declared
// here, Committer and Leadership, which the broker implements over
// metadata.Node (see metadata_test.go for that adapter).
//
// Usage:
//
//	m, err := tiering.New(tiering.Options{Store: bucket, Committer: c, Leadership: l, CacheDir: "/data/cache"})
//	p, err := m.AddPartition(tiering.PartitionOptions{TopicPartition: tp, Log: log, Config: cfg})
//	// the Manager's loop uploads, commits and applies retention for p;
//	// a fetch below log.LogStartOffset() is served by:
//	res, err := p.Read(ctx, offset, maxBytes, log.HighWatermark())
//	defer res.Release()
//	for _, r := range res.Regions { /* sendfile(r.File.Fd(), r.Pos, r.Len) */ }
//
// # The bucket
//
// The bucket describes itself: from a listing alone a tool finds every topic
// and partition and can read every record. All integers in keys are decimal;
// <hash> is PartitionHash: FNV-1a 32 of the 16 topic-id bytes followed by the
// big-endian int32 partition, as 8 hex digits, so partitions spread over S3's
// per-prefix request limits.
//
//	topics/<topic-id>/<partition:010d>.partition      descriptor (JSON): topic name, id,
//	                                                  partition, the partition's prefix
//	<hash>/<topic-id>/<partition>/                    the partition's prefix
//	    s/<base:020d>-e<epoch>-<unique>.log           the segment's batches, byte for byte
//	    s/<base:020d>-e<epoch>-<unique>.index         offset index (hotlog format)
//	    s/<base:020d>-e<epoch>-<unique>.timeindex     time index (hotlog format)
//	    s/<base:020d>-e<epoch>-<unique>.snapshot      producer snapshot at the segment's
//	                                                  end (hotlog format), if the log had one
//	    s/<base:020d>-e<epoch>-<unique>.epochs        leader-epoch checkpoint up to the
//	                                                  segment's end (Kafka's text format)
//	    s/<base:020d>-e<epoch>-<unique>.txnindex      the segment's aborted transactions
//	                                                  (hotlog format), if it has any
//	    m/<version:020d>-e<epoch>-<unique>.manifest   manifest version <version> (JSON)
//
// <topic-id> is 32 hex digits, <epoch> the uploading leader's epoch and
// <unique> 16 random hex digits: every upload and every manifest gets a new
// key and is written with NoOverwrite, so a retried or zombie upload never
// replaces an object. Objects are never modified; they are deleted when they
// leave the manifest (retention), when the cleaner finds them unreferenced
// for longer than Options.OrphanGrace, or when the topic is deleted.
//
// The .index object holds 8-byte entries (relativeOffset uint32 | position
// uint32) and the .timeindex object 12-byte entries (timestamp int64 |
// relativeOffset uint32), big-endian and strictly increasing, built by the
// uploader from the bytes it uploads (one entry per IndexIntervalBytes).
//
// A manifest (format 1, JSON) lists the remote segments in order of their
// end offsets, each with its stem, [base, end) offsets, size, the CRC32C of
// the whole .log object and of each ChunkSize-aligned chunk of it, its max
// timestamp, the leader epochs in it and its companions' sizes (see Manifest
// and SegmentMeta). The metadata log keeps per partition only a pointer to
// the current manifest (key, version, start and end offsets, epoch); the
// newest committed manifest is also the one with the highest version (and
// epoch) in the listing, unless a crash left a newer uncommitted one, which
// references only complete uploads.
//
// # Upload
//
// For every sealed segment wholly below the high watermark (and the last
// stable offset, when a LastStableOffset hook is given) and past the remote
// end offset, the leader streams the .log object while checking every batch
// (header, CRC-32C, increasing offsets) and computing the checksums, indexes
// and epochs; then the companions; then a new manifest that adds the
// segments; then CommitRemoteLog (compare-and-set on the manifest version,
// fenced by the leader epoch). A segment partly uploaded, or uploaded but not
// committed, is never in a manifest. Failures back off exponentially with
// jitter (Options.BaseBackoff..MaxBackoff); local data stays and the upload
// lag (Status, Metrics) grows.
//
// read_committed reads of remote ranges get their aborted transactions
// from the .txnindex objects (Partition.AbortedTxns, txnindex.go); since
// only segments below the LSO go up, a segment's index is complete when it
// is uploaded.
//
// # Retention
//
// Local retention (local.retention.ms/bytes) deletes local segments only
// below the committed remote end offset, through hotlog's DeleteBefore. Total
// retention (retention.ms/bytes) spans both tiers, oldest first: expired
// remote segments leave the manifest (a new manifest, committed), then the
// bucket. With remote.storage.enable off nothing is uploaded and local
// retention does not run (only total retention), so turning it on again
// resumes at the remote end without a gap.
//
// # Remote reads
//
// Partition.Read finds the segment in the (cached) manifest, the position
// through its offset index (cached in memory; a sequential reader continues
// from where its last read ended without it), then reads ChunkSize-aligned
// chunks of the .log object with ranged GETs on the Manager's bounded worker
// pool (Options.ReadWorkers) into an on-disk LRU cache (Options.CacheBytes).
// A sequential reader has a read-ahead window of Options.ReadAhead chunks
// from its position on, into the next segments, fetched as runs of chunks of
// one segment, each with one ranged GET (objectstore.OpenRange: no HEAD),
// at most Options.ReadStreams runs at once; a run that ends starts the next,
// so that the GETs follow each other without a gap, and the stream goes on
// from its frontier, never fetching a chunk twice for one window. Each chunk is checked
// against the manifest's CRC32C as it is downloaded (and fetched again, up
// to three times, if it does not match); batches served from a chunk file
// older than Options.RecheckAfter have their CRC-32C checked again in the
// file. A read returns whole, checked batches as file regions or an error
// wrapping ErrUnavailable (retriable), never wrong bytes.
//
// # Goroutines and locks
//
// New starts Options.ReadWorkers download workers (the remote-read pool) and,
// unless Options.Interval is negative, a scheduler and Options.UploadWorkers
// upload workers; Close cancels them all and waits. A round's parallel
// segment and companion uploads are goroutines of the round, waited for
// before it returns. A manifest read runs on a goroutine of its own (at most
// a minute, tracked for Close), shared by every caller that wants it, each
// waiting only as long as its own context allows. Locks: Partition.runMu
// serialises a partition's rounds (upload, retention, orphan cleaning) and
// is taken before Partition.loadMu (state swaps and the read in flight,
// never held during I/O); a partition's read-ahead window has a
// mutex taken before the chunk cache's (it only looks chunks up and queues
// runs without blocking); the chunk cache and the index cache each have one
// mutex, never held while calling out (no I/O but closing and removing a
// dropped cache file). Readers take no partition
// lock: they read the immutable remote state through an atomic pointer.
package tiering
