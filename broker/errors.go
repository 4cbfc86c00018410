package broker

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/metadata"
)

// The one table from core sentinel errors to Kafka error codes. Handlers
// call errCode; nothing else in the broker picks a code for a core error.

var (
	errUnknownTopicOrPartition = errors.New("broker: unknown topic or partition")
	errNotLeader               = errors.New("broker: not the leader of the partition")
	errInvalidRequiredAcks     = errors.New("broker: acks must be -1, 0 or 1")
	errNotEnoughReplicas       = errors.New("broker: fewer in-sync replicas than min.insync.replicas")
	errInvalidTopic            = errors.New("broker: invalid topic")
	errPolicyViolation         = errors.New("broker: policy violation")
	errUnsupportedMagic        = errors.New("broker: record batches before magic 2 are not supported")
	errOneBatch                = errors.New("broker: a produce partition must carry exactly one record batch")
)

var errorTable = []struct {
	err  error
	code *kerr.Error
}{
	// hotlog
	{hotlog.ErrOffsetOutOfRange, kerr.OffsetOutOfRange},
	{hotlog.ErrCorruptBatch, kerr.CorruptMessage},
	{hotlog.ErrInvalidRecord, kerr.InvalidRecord},
	{hotlog.ErrInvalidTimestamp, kerr.InvalidTimestamp},
	{hotlog.ErrBatchTooLarge, kerr.MessageTooLarge},
	{hotlog.ErrLogFailed, kerr.KafkaStorageError},
	{hotlog.ErrIO, kerr.KafkaStorageError},
	{hotlog.ErrClosed, kerr.NotLeaderForPartition},
	{hotlog.ErrUnexpectedOffset, kerr.UnknownServerError},
	// metadata
	{metadata.ErrTopicExists, kerr.TopicAlreadyExists},
	{metadata.ErrUnknownTopic, kerr.UnknownTopicOrPartition},
	{metadata.ErrUnknownPartition, kerr.UnknownTopicOrPartition},
	{metadata.ErrInvalidPartitions, kerr.InvalidPartitions},
	{metadata.ErrInvalidReplicationFactor, kerr.InvalidReplicationFactor},
	{metadata.ErrInvalidReplicaAssignment, kerr.InvalidReplicaAssignment},
	{metadata.ErrUnknownBroker, kerr.BrokerNotAvailable},
	{metadata.ErrStaleEpoch, kerr.FencedLeaderEpoch},
	{metadata.ErrInvalidRequest, kerr.InvalidRequest},
	{metadata.ErrInvalidTopic, kerr.InvalidTopicException},
	{metadata.ErrNoReassignment, kerr.NoReassignmentInProgress},
	{metadata.ErrInvalidUpdateVersion, kerr.InvalidUpdateVersion},
	{metadata.ErrUpgradeInProgress, kerr.UnsupportedVersion},
	{metadata.ErrNotLeader, kerr.NotController},
	{metadata.ErrNoQuorum, kerr.RequestTimedOut},
	{metadata.ErrVoterUnreachable, kerr.RequestTimedOut},
	{metadata.ErrClosed, kerr.NotController},
	// broker
	{errUnknownTopicOrPartition, kerr.UnknownTopicOrPartition},
	{errNotLeader, kerr.NotLeaderForPartition},
	{errInvalidRequiredAcks, kerr.InvalidRequiredAcks},
	{errNotEnoughReplicas, kerr.NotEnoughReplicas},
	{errInvalidTopic, kerr.InvalidTopicException},
	{errPolicyViolation, kerr.PolicyViolation},
	{errInvalidConfig, kerr.InvalidConfig},
	// Kafka's ProduceRequest.validateRecords (v3+, all Sediment serves):
	// only magic 2 batches, INVALID_RECORD.
	{errUnsupportedMagic, kerr.InvalidRecord},
	{errOneBatch, kerr.InvalidRecord},
	{errOutOfOrderSequence, kerr.OutOfOrderSequenceNumber},
	{errProducerFenced, kerr.InvalidProducerEpoch},
	{errTxnProducerFenced, kerr.ProducerFenced},
	{errTxnCoordinatorFenced, kerr.TransactionCoordinatorFenced},
	{errTxnNotOpen, kerr.InvalidTxnState},
	{errTxnWriteExpected, kerr.InvalidTxnState},
	{errTxnVerifyRetriable, kerr.NotEnoughReplicas},
	{context.DeadlineExceeded, kerr.RequestTimedOut},
	{context.Canceled, kerr.RequestTimedOut},
}

// errCode maps an error to its Kafka code (0 for nil).
func errCode(err error) int16 {
	if err == nil {
		return 0
	}
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.code.Code
		}
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	// A file operation that failed (a full disk while a partition opens
	// or its checkpoints are written, too many open files) is what Kafka
	// answers KAFKA_STORAGE_ERROR for, which clients retry; it was
	// UNKNOWN_SERVER_ERROR, which Java and librdkafka do not (an operator
	// review).
	if isFileError(err) {
		return kerr.KafkaStorageError.Code
	}
	return kerr.UnknownServerError.Code
}

// isFileError reports whether err is a failed file operation (not a
// network one).
func isFileError(err error) bool {
	var pe *fs.PathError
	var le *os.LinkError
	var ne *net.OpError
	return (errors.As(err, &pe) || errors.As(err, &le)) && !errors.As(err, &ne)
}

// errMessage is the error message for responses that carry one.
//
// It is the failure's detail, as Kafka's messages are ("Topic 'x' already
// exists."): clients print the error's name beside it. A kerr error's
// long description ("INVALID_REQUEST: This most likely occurs because of
// a request being malformed…") is cut to its name, the packages' "metadata: "
// and "broker: " prefixes are dropped, and the lines errors.Join puts between
// a sentinel and its reason are joined with ": " (an admin review found
// both long descriptions and embedded newlines in answers).
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	var ke *kerr.Error
	if errors.As(err, &ke) {
		if rest, ok := strings.CutPrefix(s, ke.Error()+": "); ok {
			s = rest
		} else {
			s = strings.Replace(s, ke.Error(), ke.Message, 1)
		}
	}
	s = strings.ReplaceAll(s, "\n", ": ")
	for _, pkg := range []string{"metadata: ", "broker: "} {
		s = strings.TrimPrefix(strings.ReplaceAll(s, ": "+pkg, ": "), pkg)
	}
	return &s
}
