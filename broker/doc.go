// Package broker is Sediment's Kafka protocol server: listeners, the
// per-connection request pipeline, one handler file per API (named by API
// key), the partitions this broker leads and their idempotent-producer
// state. It is the composition root: it wires hotlog (partition logs) and
// metadata (the Raft metadata log) together.
//
// Usage:
//
//	b, err := broker.New(broker.Config{
//		DataDir:   "./data",
//		Listeners: []broker.Listener{{Name: "PLAINTEXT", Addr: "localhost:9092"}},
//		AutoCreateTopics: true,
//	})
//	...
//	defer b.Close() // graceful: in-flight requests finish, logs close cleanly
//
// Wire framing (every request and reply):
//
//	+-------------+---------------------------------------------+
//	| size int32  | header + body (size bytes)                  |
//	+-------------+---------------------------------------------+
//	size is checked (8 ≤ size ≤ socket.request.max.bytes) before the
//	frame is allocated; header layout in header.go; bodies are kmsg's.
//
// Data directory:
//
//	<data>/.lock                        held while a broker runs (datadir_lock.go)
//	<data>/broker_epoch                 this broker's last registration epoch
//	<data>/meta/                        metadata node: raft-wal log, snapshots
//	<data>/logs/<topic>-<partition>/    one hotlog (segments, indexes,
//	                                    <offset>.snapshot producer state)
//	<data>/logs/<topic>-<partition>/topic_id   owning topic id (text UUID)
//	<data>/logs/<topic>-<partition>.<unix ms>-stray/   a partition directory
//	                                    the metadata no longer places here,
//	                                    found at start; deleted after
//	                                    StrayLogDeleteDelay (stray.go)
//	<data>/logs/<topic>-<partition>.<unix ms>-delete/  a partition removed
//	                                    from this broker while it ran;
//	                                    removed after DeletedLogDeleteDelay,
//	                                    or at the next start (dir_delete.go)
//	<data>/tier-cache/                  remote-read chunk cache (the default
//	                                    tiering.Options.CacheDir)
//	<data>/bucket/                      the bucket, when sediment broker uses
//	                                    a local folder (cmd/sediment/tier.go)
//
// The producer-state snapshot format is in producers.go, the zero-copy
// Fetch encoding in zerocopy.go, lock order in LOCK_ORDER.md.
package broker
