// Package group is Sediment's consumer-group coordinator for Kafka's classic
// group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
// OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete) and
// the KIP-848 consumer protocol (ConsumerGroupHeartbeat with server-side
// assignment, ConsumerGroupDescribe), with Kafka 4.0's online migration
// between the two (migration.go). It
// takes franz-go kmsg requests and returns kmsg responses; the broker's
// handler files only decode, call and encode.
//
// # Ownership
//
// A Coordinator owns the __consumer_offsets partitions the broker leads
// (Load on gaining leadership, Unload on losing it). A group belongs to the
// partition PartitionFor(groupID, partitions) names: Kafka's
// abs(javaStringHashCode(groupID)) % offsets.topic.num.partitions. All group
// state belongs to one goroutine; requests, timers, finished appends and
// finished loads reach it as closures on one channel, so nothing in a group
// is locked. One appender goroutine per partition writes records through the
// Log interface, batching what queued while it wrote (group commit).
//
// Usage (the broker's side):
//
//	c := group.New(group.Config{Partitions: 50, Topics: topicsAdapter})
//	defer c.Close()
//	loaded := c.Load(7, offsetsLog7) // on becoming leader of __consumer_offsets-7
//	...
//	resp, err := c.JoinGroup(ctx, group.Client{ClientID: id, Host: host}, req)
//	// err is ctx.Err() or ErrClosed; every Kafka error is in resp.
//
// # Records
//
// Records are Kafka's own, encoded and decoded with kmsg, so Kafka's tools
// can read the partitions and the compaction of the topic keeps the latest
// record per key (a nil value is a tombstone):
//
//	offset commit (key version 1; version 0 is read too)
//	  key:   int16 version=1 | string group | string topic | int32 partition
//	  value: int16 version=3 | int64 offset | int32 leader epoch |
//	         string metadata | int64 commit timestamp (ms)
//	         version 1 instead: int64 offset | string metadata |
//	         int64 commit timestamp | int64 expire timestamp
//	         (written when OffsetCommit v2-v4 asks for its own retention)
//
//	group metadata (key version 2)
//	  key:   int16 version=2 | string group
//	  value: int16 version=3 | string protocol type | int32 generation |
//	         nullable string protocol | nullable string leader |
//	         int64 current state timestamp (ms) |
//	         array of members:
//	           string member id | nullable string instance id |
//	           string client id | string client host |
//	           int32 rebalance timeout (ms) | int32 session timeout (ms) |
//	           bytes subscription | bytes assignment
//
//	consumer group, KIP-848 (key version 100, Sediment's own: kmsg has no
//	encoder for Kafka's KIP-848 records)
//	  key:   int16 version=100 | string group
//	  value: int16 version=0 | JSON document:
//	         {"format":"sediment consumer group", "epoch", "target_epoch",
//	          "topic_partitions": {topic: count},
//	          "topic_ids": {topic: hex id},      (since 2026-12; else today's)
//	          "members": [{"id", "instance_id", "rack_id", "client_id",
//	                       "client_host", "rebalance_timeout_ms", "topics",
//	                       "regex", "assignor", "epoch", "previous_epoch",
//	                       "assigned": [{"t": topic, "p": partition,
//	                                     "e": epoch assigned at}],
//	                       "revoking": [{"t", "p"}],
//	                       "classic": {"session_timeout_ms",   (classic
//	                                   "protocols": [{"name",   members,
//	                                   "metadata": base64}]}}], migration.go)
//	          "target": {member id: [{"t", "p"}]}}
//
// Strings are int16-length prefixed, bytes int32-length prefixed, arrays
// int32-count prefixed (value versions 0-3; version 4 is the flexible
// encoding and is read too). Other key versions (Kafka's KIP-848 records,
// 3 to 8, and later ones) are skipped on replay.
//
// See docs/groups.md for the state machine and the timeouts.
package group
