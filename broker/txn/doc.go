// Package txn is Sediment's transaction coordinator (KIP-98, with KIP-360's
// epoch bumps): InitProducerId for transactional ids, AddPartitionsToTxn,
// AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions, the
// two-phase commit with its markers, and transaction.timeout.ms.
//
// # Ownership
//
// A Coordinator owns the partitions of __transaction_state that the broker
// leads (Load on gaining leadership, Unload on losing it). A transactional
// id belongs to partition abs(javaStringHashCode(id)) % partitions, as in
// Kafka. All transaction state belongs to one goroutine (run); requests,
// timer ticks, finished appends and finished marker rounds reach it as
// closures on one channel, so nothing is locked. Work that blocks (a log
// append, producer-id allocation, writing markers) runs in a goroutine the
// coordinator owns and reports back to the loop; while it runs the
// transaction is "pending" and other requests for it get
// CONCURRENT_TRANSACTIONS, which clients retry.
//
// # Two phases
//
//	EndTxn(commit) ──► log PrepareCommit ──► reply ──► markers to every
//	partition (and __consumer_offsets) ──► log CompleteCommit
//
// The prepare record is in the log before any marker is written, so a new
// coordinator that replays the partition and finds PrepareCommit or
// PrepareAbort writes the markers again (they are idempotent at the
// partition: a marker for a producer with no open transaction only moves
// the log) and logs the completion.
//
// Markers carry the coordinator epoch: the partition's leader epoch given
// to Load, which the metadata log raises on every leader change, so a
// coordinator that took over sends a higher one than every coordinator
// before it. Partitions refuse a marker whose coordinator epoch is older
// than that of the producer's last marker there
// (TRANSACTION_COORDINATOR_FENCED, broker/producers.go); the same epoch
// passes, so a retried round is written again. A fenced round is retried
// like any failed one until Unload.
//
// Fencing: InitProducerId for an id whose transaction is open bumps the
// epoch, aborts with the new epoch (the markers carry it, so every partition
// refuses the old epoch from then on) and answers CONCURRENT_TRANSACTIONS;
// the client retries and gets the epoch after that. A transaction open
// longer than its timeout is aborted the same way, which fences the
// producer that stalled.
//
// Expiry (transactional.id.expiration.ms): an id with no open transaction
// whose state has not changed for Config.IDExpiration is removed by a
// tombstone (its key with a null value) in its partition; the id is
// forgotten once the tombstone is logged, and a replay drops it too.
//
// # Records
//
// Records are Kafka's own (kmsg.TxnMetadataKey / TxnMetadataValue), so
// Kafka's tools can read the topic and compaction keeps the latest record
// per transactional id:
//
//	key:   int16 version=0 | string transactional id
//	value: int16 version=0 | int64 producer id | int16 producer epoch |
//	       int32 timeout (ms) | int8 state | array of topics:
//	         string topic | array of int32 partitions |
//	       int64 last update timestamp (ms) | int64 start timestamp (ms)
//
// States: 0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort,
// 4 CompleteCommit, 5 CompleteAbort, 6 Dead (7 PrepareEpochFence is read
// as PrepareAbort). Version 1 values (flexible, Kafka 4's) are read too, and
// written when a tagged field is needed:
//
//	tag 1 NextProducerId (int64): the id an end at the last epoch hands over to
//	tag 2 ClientTransactionVersion (int16): 2 when the last epoch bump was an
//	      EndTxn's (transaction.version 2), so that a retry of that EndTxn,
//	      its answer lost with the coordinator, gets it from the next one
package txn
