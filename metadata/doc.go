// Package metadata is Sediment's cluster metadata: a Raft log
// (hashicorp/raft, with hashicorp/raft-wal as log and stable store and raft's
// FileSnapshotStore for snapshots) replicated over 1, 3 or 5 voters, a
// deterministic state machine holding brokers, topics, partitions, remote-log
// pointers, producer-id blocks, leases and dynamic configs, the controller
// that runs on the Raft leader, and the API brokers use.
//
// # Usage
//
//	n, err := metadata.Open(metadata.Config{NodeID: 1, Dir: "data/meta", RaftAddr: "127.0.0.1:9093", Bootstrap: true})
//	err = n.WaitForLeader(ctx)
//	res, err := n.Propose(ctx, &metadata.CreateTopic{Name: "orders", NumPartitions: 3, ReplicationFactor: 1})
//	if errors.Is(err, metadata.ErrTopicExists) { ... }      // TOPIC_ALREADY_EXISTS
//	st := n.State()                                         // immutable; st.Version
//	for c := range n.Watch(ctx, st.Version) { ... }         // changes after st.Version
//
// # Determinism
//
// Commands carry everything the state machine needs: timestamps (NowMs) and
// topic ids are chosen by the proposer on the leader (prepare), and so are
// replica assignments (the controller's balanced, rack-aware placement). The
// state machine reads no clock and no random source, and iterates only in key
// order.
//
// # Command encoding (one Raft log entry)
//
//	+---------+----------------------+----------------------------+
//	| type u8 | flags|version u8     | body                       |
//	+---------+----------------------+----------------------------+
//	  flags bit 7: ignorable (a binary that does not know this type or
//	  version skips the entry instead of stopping); bits 0-6: version 1..127.
//
// Bodies are sequences of primitives, in the field order of the command's Go
// struct (see each type's encode method):
//
//	int    zig-zag varint (int32 fields are range-checked on decode)
//	uint   unsigned varint
//	bool   one byte, 0 or 1
//	uuid   16 bytes
//	string uvarint length, bytes
//	[]T    uvarint count, elements (counts are checked against the bytes left)
//	map    uvarint count, (string key, string value) sorted by key
//
// A new field is added by bumping the command's version and decoding the old
// version with a default; an entry with an unknown type or a newer version
// stops the state machine (ErrFSMStopped via Node.Err) unless it is flagged
// ignorable. A stopped state machine applies nothing more and refuses to
// snapshot, so the log it could not read is kept for a newer binary.
//
// # Snapshot encoding (one FileSnapshotStore snapshot)
//
//	+--------+------------+------------------------------------+-----------+
//	| "SDMS" | version u8 | body                               | crc32c u32 |
//	+--------+------------+------------------------------------+-----------+
//	body v1 and v2 (v2 adds the reassignment lists): uint Version, string ClusterID, int NextProducerID, uint NextLeaseToken,
//	  []broker  {int id, uuid incarnation, int epoch, []listener{string name,
//	             string host, int port, int protocol}, string rack, bool fenced,
//	             bool shutdown, int lastHeartbeatMs}            (by id)
//	  []configs {string broker ("" = cluster), map}             (by broker)
//	  []topic   {uuid id, string name, map configs, []partition{[]int replicas,
//	             []int isr, int leader, int leaderEpoch, int partitionEpoch,
//	             string manifestKey, int manifestVersion, int remoteStart,
//	             int remoteEnd, int remoteLeaderEpoch,
//	             []int adding, []int removing (v2 only)}}       (by topic id)
//	  []lease   {string kind, string resource, string holder, uint token,
//	             int expiresMs}                                 (by kind, resource)
//	crc32c (Castagnoli) covers everything before it, big-endian.
//
// # Reads
//
// State is the node's latest applied state and may lag (Stale says when it
// may be far behind). WaitForVersion(v) reads one's own writes (v from a
// Result); Sync is a linearizable read: it waits until this node has applied
// everything the leader had committed when Sync was called.
//
// # Goroutines and locks
//
// Open starts the accept loop, the controller, and raft's own goroutines;
// Propose starts one short-lived goroutine per local proposal (waiting on its
// raft future), Watch one per watcher. Close cancels them all, shuts raft
// down and waits for every one. The locks (fsm.mu, Node.watch, Node.connMu,
// forwarder.mu, Node.goMu) are leaves: none is held while taking another or
// while calling raft, so there is no lock order to keep.
//
// # Network
//
// One TCP listener per node (Config.RaftAddr) carries raft's RPCs and
// proposals forwarded by followers to the leader; transport.go has the
// framing.
package metadata
