package metadata

import (
	"errors"
	"fmt"
)

// Rejections. The FSM returns one of these (wrapped with a reason) when it
// refuses a command; Propose returns it to the caller unchanged, also across a
// forward to the leader. Test them with errors.Is. The broker maps them to
// Kafka error codes.
var (
	ErrTopicExists              = errors.New("metadata: topic already exists")            // TOPIC_ALREADY_EXISTS
	ErrUnknownTopic             = errors.New("metadata: unknown topic")                   // UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION
	ErrUnknownPartition         = errors.New("metadata: unknown partition")               // UNKNOWN_TOPIC_OR_PARTITION
	ErrInvalidPartitions        = errors.New("metadata: invalid partition count")         // INVALID_PARTITIONS
	ErrInvalidReplicationFactor = errors.New("metadata: invalid replication factor")      // INVALID_REPLICATION_FACTOR
	ErrInvalidReplicaAssignment = errors.New("metadata: invalid replica assignment")      // INVALID_REPLICA_ASSIGNMENT
	ErrUnknownBroker            = errors.New("metadata: unknown broker")                  // BROKER_NOT_AVAILABLE
	ErrDuplicateBroker          = errors.New("metadata: duplicate broker registration")   // DUPLICATE_BROKER_REGISTRATION
	ErrStaleBrokerEpoch         = errors.New("metadata: stale broker epoch")              // STALE_BROKER_EPOCH
	ErrStaleEpoch               = errors.New("metadata: stale leader or partition epoch") // FENCED_LEADER_EPOCH / INVALID_UPDATE_VERSION
	ErrIneligibleReplica        = errors.New("metadata: replica not eligible")            // INELIGIBLE_REPLICA
	ErrInvalidRequest           = errors.New("metadata: invalid request")                 // INVALID_REQUEST
	ErrInvalidTopic             = errors.New("metadata: invalid topic")                   // INVALID_TOPIC_EXCEPTION
	ErrNoReassignment           = errors.New("metadata: no reassignment in progress")     // NO_REASSIGNMENT_IN_PROGRESS
	ErrInvalidUpdateVersion     = errors.New("metadata: invalid feature update")          // INVALID_UPDATE_VERSION
	ErrManifestConflict         = errors.New("metadata: remote log manifest version conflict")
	ErrLeaseHeld                = errors.New("metadata: lease held by another holder")
	ErrLeaseLost                = errors.New("metadata: lease not held (wrong holder or token)")
	ErrLeaseExpired             = errors.New("metadata: lease expired")
	ErrUnknownCommand           = errors.New("metadata: unknown command type or version")
	ErrCorruptCommand           = errors.New("metadata: corrupt command encoding")
	ErrCorruptSnapshot          = errors.New("metadata: corrupt snapshot")
	ErrFSMStopped               = errors.New("metadata: state machine stopped")
	// ErrVoterUnreachable: AddVoter found no node answering at the new
	// voter's address (nothing was changed). Kafka's REQUEST_TIMED_OUT, its
	// answer for a new voter that is not fetching from the leader.
	ErrVoterUnreachable = errors.New("metadata: new voter unreachable")
)

// Availability errors: not a rejection of the command itself.
var (
	// ErrNotLeader: this node is not the Raft leader and could not forward.
	ErrNotLeader = errors.New("metadata: not the raft leader")
	// ErrNoQuorum: no leader could commit the command before the context's
	// deadline (a majority of voters is unreachable). The command may still
	// commit later if it reached a leader.
	ErrNoQuorum = errors.New("metadata: no quorum")
	// ErrClosed: the node is closed.
	ErrClosed = errors.New("metadata: node closed")
)

// errorCodes gives each sentinel a stable number so that a rejection keeps its
// identity when a follower forwards a proposal to the leader. Never renumber.
var errorCodes = []struct {
	code uint16
	err  error
}{
	{1, ErrTopicExists}, {2, ErrUnknownTopic}, {3, ErrUnknownPartition},
	{4, ErrInvalidPartitions}, {5, ErrInvalidReplicationFactor}, {6, ErrInvalidReplicaAssignment},
	{7, ErrUnknownBroker}, {8, ErrDuplicateBroker}, {9, ErrStaleBrokerEpoch}, {10, ErrStaleEpoch},
	{11, ErrIneligibleReplica}, {12, ErrInvalidRequest}, {13, ErrManifestConflict},
	{14, ErrLeaseHeld}, {15, ErrLeaseLost}, {16, ErrLeaseExpired}, {17, ErrUnknownCommand},
	{18, ErrCorruptCommand}, {19, ErrCorruptSnapshot}, {20, ErrFSMStopped},
	{21, ErrNotLeader}, {22, ErrNoQuorum}, {23, ErrClosed},
	{24, errNotSent}, // the leader was deposed before appending: safe to retry
	{25, ErrNoReassignment}, {26, ErrInvalidUpdateVersion}, {27, ErrVoterUnreachable},
	{28, ErrUpgradeInProgress},
}

func codeOf(err error) uint16 {
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return 0
}

// errorFromCode rebuilds an error received from the leader: the sentinel (if
// known) wrapped with the leader's message.
func errorFromCode(code uint16, msg string) error {
	for _, c := range errorCodes {
		if c.code == code {
			if msg == c.err.Error() {
				return c.err
			}
			return &remoteError{sentinel: c.err, msg: msg}
		}
	}
	return fmt.Errorf("metadata: leader: %s", msg)
}

type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// reject wraps a sentinel with the reason.
func reject(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
