package txn

import (
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var errBadRecord = errors.New("txn: malformed __transaction_state record")

func encodeKey(id string) []byte {
	k := kmsg.TxnMetadataKey{Version: 0, TransactionalID: id}
	return k.AppendTo(nil)
}

// encodeValue writes value version 0 (Kafka's classic, non-flexible form),
// or version 1 (flexible, Kafka 4's) when t carries what only its tagged
// fields hold: ClientTransactionVersion 2 when the last epoch bump was an
// EndTxn's (transaction.version 2), so that the coordinator that replays the
// record still answers a retry of that EndTxn; NextProducerId while an end
// at the last epoch hands the producer over to a new id.
func encodeValue(t *txnMeta) []byte {
	v := kmsg.NewTxnMetadataValue()
	v.Version = 0
	if t.endBumped || t.nextProducerID > 0 {
		v.Version = 1
		if t.endBumped {
			v.ClientTransactionVersion = 2
		}
		if t.nextProducerID > 0 {
			v.NextProducerID = t.nextProducerID
		}
	}
	v.ProducerID = t.producerID
	v.ProducerEpoch = t.epoch
	v.TimeoutMillis = t.timeoutMs
	v.State = t.state
	v.LastUpdateTimestamp = t.updateMs
	v.StartTimestamp = t.startMs
	byTopic := map[string][]int32{}
	var topics []string
	for _, tp := range t.parts {
		if _, ok := byTopic[tp.Topic]; !ok {
			topics = append(topics, tp.Topic)
		}
		byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
	}
	sort.Strings(topics)
	for _, name := range topics {
		vt := kmsg.NewTxnMetadataValueTopic()
		vt.Topic = name
		vt.Partitions = byTopic[name]
		v.Topics = append(v.Topics, vt)
	}
	return v.AppendTo(nil)
}

// decodeRecord decodes one record; meta is nil for a tombstone.
func decodeRecord(key, value []byte) (id string, meta *txnMeta, err error) {
	var k kmsg.TxnMetadataKey
	if err := k.ReadFrom(key); err != nil {
		return "", nil, fmt.Errorf("%w: key: %v", errBadRecord, err)
	}
	if k.Version != 0 {
		return "", nil, fmt.Errorf("%w: key version %d", errBadRecord, k.Version)
	}
	if value == nil {
		return k.TransactionalID, nil, nil
	}
	var v kmsg.TxnMetadataValue
	if err := v.ReadFrom(value); err != nil {
		return "", nil, fmt.Errorf("%w: value: %v", errBadRecord, err)
	}
	if v.Version < 0 || v.Version > 1 || v.ProducerID < 0 || v.TimeoutMillis < 0 || v.State < 0 || v.State > kmsg.TransactionStatePrepareEpochFence {
		return "", nil, fmt.Errorf("%w: value of %q", errBadRecord, k.TransactionalID)
	}
	t := &txnMeta{
		id: k.TransactionalID, producerID: v.ProducerID, epoch: v.ProducerEpoch, lastEpoch: -1, prevProducerID: -1,
		timeoutMs: v.TimeoutMillis, state: v.State, startMs: v.StartTimestamp, updateMs: v.LastUpdateTimestamp,
	}
	if v.Version >= 1 {
		// An EndTxn bump always moves the epoch by one (an exhausted
		// epoch goes on at epoch 0 of a new id, with no previous epoch).
		t.endBumped = v.ClientTransactionVersion >= 2
		if t.endBumped && t.epoch > 0 {
			t.lastEpoch = t.epoch - 1
		}
		if v.NextProducerID > 0 {
			t.nextProducerID = v.NextProducerID
		}
	}
	if t.state == kmsg.TransactionStatePrepareEpochFence {
		t.state = kmsg.TransactionStatePrepareAbort
	}
	for _, vt := range v.Topics {
		for _, p := range vt.Partitions {
			t.parts = append(t.parts, TopicPartition{vt.Topic, p})
		}
	}
	return t.id, t, nil
}

// replayRecord applies one record to the map being loaded.
func replayRecord(m map[string]*txnMeta, key, value []byte) error {
	id, t, err := decodeRecord(key, value)
	if err != nil {
		return err
	}
	if t == nil || t.state == kmsg.TransactionStateDead {
		delete(m, id)
		return nil
	}
	if old := m[id]; old != nil && old.producerID == t.producerID && old.epoch == t.epoch && t.lastEpoch < 0 {
		// A record at the same epoch (the completion after a prepare, the
		// next transaction's AddPartitions) keeps what the one before
		// said. A record does not say whose bump moved the epoch (the
		// producer's own, or a new instance's or a timeout's fence), so
		// none is taken for a retry but an EndTxn bump of transaction
		// version 2 (decodeRecord), as Kafka loads the last epoch as -1.
		t.lastEpoch = old.lastEpoch
	}
	m[id] = t
	return nil
}
