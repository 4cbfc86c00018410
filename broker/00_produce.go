package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/reqtime"
	"github.com/sediment-io/sediment/metadata"
)

// Produce: v3-13
//
// v3 is the first version carrying v2 record batches (magic 2) and Kafka
// 4's minimum. v5+ reports the log start offset, v8+ per-record errors and
// an error message, v9+ is flexible, v13 names topics by id. Each partition
// must carry exactly one batch (as Kafka requires for magic 2). Produce is
// serial per connection: a request's appends take their places in the logs
// only after the previous request's did (an idempotent producer's pipelined
// batches reach each log in the order it sent them), but the fsync waits
// overlap, and a request's partitions append concurrently. acks=-1 waits
// for the in-sync replicas (here the leader alone, so it equals acks=1
// apart from the min.insync.replicas check); acks=0 sends no reply.
// Transactional batches (KIP-98) go through the same producer-state check,
// which also records the first offset of the producer's open transaction
// (the last stable offset stays below it) and refuses an older epoch with
// PRODUCER_FENCED (producers.go, txns.go). The first transactional batch
// of a producer in a partition is checked against the transaction
// coordinator when that is this broker (KIP-890 part 1): a write outside
// the producer's open transaction (a late retry after the commit) gets
// INVALID_TXN_STATE instead of opening a transaction nobody will end.
// v12+ (KIP-890 part 2, transaction.version 2): the client sends no
// AddPartitionsToTxn; the first transactional batch of a producer epoch in
// a partition adds the partition to the transaction at the coordinator.
// A batch with a producer id needs a sequence (INVALID_RECORD otherwise,
// checkProducedSequence), and a producer with a transaction open in the
// partition may write only transactional batches there (INVALID_TXN_STATE,
// producers.go), as in Kafka.

func init() {
	e := regKey(0, 3, 13)
	e.handler = handleProduce
	e.serial = true
	// The records are written to the log (a copy in the page cache) and
	// the partition goroutines end before the handler returns; the
	// producer state, the transaction checks and the reply keep only
	// values parsed from the batch header and strings kmsg copied.
	e.reuseFrame = true
}

func handleProduce(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ProduceRequest)
	collapseProducePartitions(req)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	var ackErr error
	if req.Acks != 0 && req.Acks != 1 && req.Acks != -1 {
		ackErr = errInvalidRequiredAcks
	} else if req.TransactionID == nil && hasTransactionalBatch(req) {
		// Kafka's KafkaApis: transactional records need the
		// transactional id they are written for (and WRITE on it).
		// Without one they would open a transaction that no
		// coordinator knows, so no marker would ever end it.
		ackErr = kerr.TransactionalIDAuthorizationFailed
	}
	st := b.meta.State()
	// Partitions append concurrently (their fsyncs overlap); the next
	// Produce of this connection may start once every partition of this
	// one has its place in its log.
	var ordered, done sync.WaitGroup
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		rt.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
		for i, pt := range t.Partitions {
			rp := &rt.Partitions[i]
			*rp = kmsg.NewProduceResponseTopicPartition()
			rp.Partition = pt.Partition
			rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
			ordered.Add(1)
			done.Add(1)
			isOrdered := sync.OnceFunc(ordered.Done)
			topic := t
			go func() {
				defer done.Done()
				defer isOrdered()
				err := ackErr
				if err == nil {
					err = b.producePartition(r, st, req.Acks, topic, pt, rp, isOrdered)
				}
				if err != nil {
					rp.ErrorCode = errCode(err)
					if errors.Is(err, errTxnProducerFenced) {
						// A fenced transactional producer's Produce is
						// answered INVALID_PRODUCER_EPOCH, as Kafka does
						// since 2.7 (ProducerAppendInfo.checkProducerEpoch):
						// librdkafka raises its fatal _FENCED on it, and
						// the coordinator's PRODUCER_FENCED comes on EndTxn.
						rp.ErrorCode = kerr.InvalidProducerEpoch.Code
					}
					if r.Version >= 10 {
						// KIP-951: where the partition moved (replication.go).
						rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leaderHint(st, topic.Topic, topic.TopicID, r.Version >= 13, pt.Partition, rp.ErrorCode)
					}
					if r.Version >= 8 {
						rp.ErrorMessage = errMessage(err)
						var re *recordErrors
						switch {
						case errors.As(err, &re):
							// The records at fault, by index (KIP-467).
							for _, i := range re.indexes {
								er := kmsg.NewProduceResponseTopicPartitionErrorRecord()
								er.RelativeOffset = i
								er.ErrorMessage = errMessage(re.err)
								rp.ErrorRecords = append(rp.ErrorRecords, er)
							}
						case errors.Is(err, hotlog.ErrCorruptBatch) || errors.Is(err, hotlog.ErrInvalidRecord):
							// librdkafka expects per-record errors.
							er := kmsg.NewProduceResponseTopicPartitionErrorRecord()
							er.ErrorMessage = errMessage(err)
							rp.ErrorRecords = append(rp.ErrorRecords, er)
						}
					}
					b.log.Debug("produce failed", "topic", topic.Topic, "partition", pt.Partition, "err", err)
				}
			}()
		}
		resp.Topics = append(resp.Topics, rt)
	}
	ordered.Wait()
	r.Ordered()
	// What is left is waiting (fsyncs, acks=-1 for the ISR): Kafka's
	// produce purgatory, not charged to a request quota.
	waited := reqtime.Wait(ctx)
	done.Wait()
	waited()
	if req.Acks == 0 {
		// No reply; as Kafka does, a failed partition closes the
		// connection so the client notices and refreshes its metadata.
		failed := false
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				failed = failed || p.ErrorCode != 0
			}
		}
		return &Reply{NoResponse: true, Close: failed}, nil
	}
	if r.Version >= 10 {
		resp.Brokers = produceLeaderEndpoints(b, st, r.Conn.Listener, resp)
	}
	return &Reply{Msg: resp}, nil
}

func (b *Broker) producePartition(r *Request, st *metadata.State, acks int16, t kmsg.ProduceRequestTopic, pt kmsg.ProduceRequestTopicPartition, rp *kmsg.ProduceResponseTopicPartition, ordered func()) error {
	var p *partition
	var err error
	if r.Version >= 13 {
		if !b.store.topicIDKnown(st, t.TopicID) {
			return kerr.UnknownTopicID
		}
		p, err = b.store.partitionByID(st, t.TopicID, pt.Partition)
	} else {
		p, err = b.store.partition(st, t.Topic, pt.Partition)
	}
	if err != nil {
		return err
	}
	if len(pt.Records) == 0 {
		// Kafka's ProduceRequest.validateRecords: at least one batch.
		return fmt.Errorf("%w: no record batch", hotlog.ErrInvalidRecord)
	}
	if isInternalTopic(p.topic) {
		// Kafka's ReplicaManager.appendToLocalLog: only the
		// coordinators write there (not through Produce); a client's
		// record would be read back as a group's or a transaction's.
		return fmt.Errorf("%w: cannot append to internal topic %s", errInvalidTopic, p.topic)
	}
	topic := p.topicConfigs(st)
	// Replication (replication.go): acks=all needs min.insync.replicas in
	// the ISR before appending, and waits for the high watermark after.
	epoch := p.leaderEpoch()
	if !p.isLeader(epoch) {
		return errNotLeader // the metadata moved on since this request's snapshot
	}
	if acks == -1 && int64(p.isrSize()) < configInt(b, topic, "min.insync.replicas") {
		return errNotEnoughReplicas
	}
	verified, err := b.verifyTxnWrite(r.Msg.(*kmsg.ProduceRequest).TransactionID, p, pt.Records, r.Version >= 12)
	if err != nil {
		return err // txns.go
	}
	// As Kafka's analyzeAndValidateRecords, before the records are read:
	// a batch over max.message.bytes is not decompressed.
	maxMessageBytes := int32(configInt(b, topic, "max.message.bytes"))
	if int64(len(pt.Records)) > int64(maxMessageBytes) {
		return fmt.Errorf("%w: batch of %d bytes, max.message.bytes %d", hotlog.ErrBatchTooLarge, len(pt.Records), maxMessageBytes)
	}
	if err := checkProducedSequence(pt.Records); err != nil {
		return err
	}
	lat := configString(b, topic, "message.timestamp.type") == "LogAppendTime"
	records, err := b.checkProducedRecords(topic, pt.Records) // cleaner.go
	if err != nil {
		return err
	}
	// acks=1 and acks=0 are answered once the batch is written, before its
	// fsync (as Kafka and Redpanda do); acks=-1 waits for the ISR's
	// durable copies (the high watermark, which counts only fsynced ends).
	// (A ListOffsets or DeleteRecords right after acks=1 to a partition
	// whose ISR is the leader alone waits for that fsync: awaitLoneWrites.)
	res, err := p.appendProduced(records, maxMessageBytes, epoch, lat, acks != -1, verified, ordered)
	if err != nil {
		return err
	}
	if acks == -1 {
		h, _ := hotlog.ParseBatchHeader(pt.Records)
		timeout := time.Duration(max(r.Msg.(*kmsg.ProduceRequest).TimeoutMillis, 0)) * time.Millisecond
		if err := p.waitCommitted(res.baseOffset+int64(h.LastOffsetDelta), epoch, time.Now().Add(timeout), b.stopping); err != nil {
			return err
		}
		// The high watermark passed the batch, but the ISR may have
		// shrunk below min.insync.replicas meanwhile (a follower
		// dropped out, and the leader alone moved the high watermark):
		// then the batch is not on enough replicas to acknowledge, as
		// Kafka's checkEnoughReplicasReachOffset answers.
		if int64(p.isrSize()) < configInt(b, topic, "min.insync.replicas") {
			return kerr.NotEnoughReplicasAfterAppend
		}
	}
	rp.BaseOffset, rp.LogAppendTime = res.baseOffset, res.logAppendTime
	rp.LogStartOffset = p.log.LogStartOffset()
	return nil
}

func configString(b *Broker, set map[string]string, name string) string {
	v, _ := b.topicConfigValue(set, name)
	return v
}

func configInt(b *Broker, set map[string]string, name string) int64 {
	n, err := strconv.ParseInt(configString(b, set, name), 10, 64)
	if err != nil {
		d := topicConfigDefs[name]
		n, _ = strconv.ParseInt(d.def(&b.cfg), 10, 64)
	}
	return n
}

// collapseProducePartitions makes a Produce name each partition once, as
// Kafka's KafkaApis.handleProduceRequest does: it puts the request's
// records in a map by topic-partition (TopicIdPartition at v13), so a
// partition listed more than once is appended once, with the records of its
// last listing, and answered once (the response is built from the map,
// grouped by topic). Here the partition keeps the place of its first
// listing; a topic listed more than once is merged into its first listing.
// Appending every listing would write the same batch again and again (and
// read it as often: one compressed batch of 2 KB listed 24 times in a
// Produce of 47 KiB was 24 decompressions of 60 MiB).
func collapseProducePartitions(req *kmsg.ProduceRequest) {
	if len(req.Topics) == 0 || len(req.Topics) == 1 && len(req.Topics[0].Partitions) < 2 {
		return
	}
	type topicKey struct {
		name string
		id   [16]byte
	}
	type partKey struct {
		topic topicKey
		part  int32
	}
	key := func(t *kmsg.ProduceRequestTopic) topicKey {
		if req.Version >= 13 {
			return topicKey{id: t.TopicID}
		}
		return topicKey{name: t.Topic}
	}
	n := 0
	for _, t := range req.Topics {
		n += len(t.Partitions)
	}
	topics := make(map[topicKey]int, len(req.Topics))
	parts := make(map[partKey]int, n)
	repeated := false
	for i := range req.Topics {
		t := &req.Topics[i]
		k := key(t)
		if _, ok := topics[k]; ok {
			repeated = true
		}
		topics[k] = 0
		for _, p := range t.Partitions {
			pk := partKey{k, p.Partition}
			if _, ok := parts[pk]; ok {
				repeated = true
			}
			parts[pk] = 0
		}
	}
	if !repeated {
		return
	}
	clear(topics)
	clear(parts)
	out := make([]kmsg.ProduceRequestTopic, 0, len(req.Topics))
	for i := range req.Topics {
		t := &req.Topics[i]
		k := key(t)
		ti, ok := topics[k]
		if !ok {
			ti = len(out)
			topics[k] = ti
			nt := *t
			nt.Partitions = make([]kmsg.ProduceRequestTopicPartition, 0, len(t.Partitions))
			out = append(out, nt)
		}
		for _, p := range t.Partitions {
			pk := partKey{k, p.Partition}
			if pi, ok := parts[pk]; ok {
				out[ti].Partitions[pi] = p // the last listing's records
				continue
			}
			parts[pk] = len(out[ti].Partitions)
			out[ti].Partitions = append(out[ti].Partitions, p)
		}
	}
	req.Topics = out
}

// hasTransactionalBatch reports whether any partition of req carries a
// transactional batch (the first batch's header; each partition carries
// one).
func hasTransactionalBatch(req *kmsg.ProduceRequest) bool {
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			if len(p.Records) < hotlog.BatchHeaderSize {
				continue
			}
			if h, err := hotlog.ParseBatchHeader(p.Records); err == nil && h.IsTransactional() {
				return true
			}
		}
	}
	return false
}

// checkProducedSequence refuses a client's batch with a producer id but no
// sequence (a base sequence below 0, RecordBatch.NO_SEQUENCE being -1) with
// INVALID_RECORD, as Kafka's LogValidator.validateBatch does for every
// batch a client writes, transactional or not: without a sequence the
// producer state could not recognise a retry, and the batch would skip the
// sequence checks (producers.go lets a batch without a sequence through on
// its epoch alone, for the coordinator's own transactional writes, which
// Kafka's check exempts too). In Kafka's order: after a transactional
// batch's verification at the coordinator (a fenced producer is told so
// first; at v12+ the partition is added to the transaction before, as in
// Kafka), before the producer-state checks. A batch whose header does not
// parse is left to the append's own checks.
func checkProducedSequence(records []byte) error {
	if len(records) < hotlog.BatchHeaderSize {
		return nil
	}
	h, err := hotlog.ParseBatchHeader(records)
	if err != nil || h.ProducerID < 0 || h.BaseSequence >= 0 {
		return nil
	}
	return fmt.Errorf("%w: invalid sequence number %d in a batch of producer %d", hotlog.ErrInvalidRecord, h.BaseSequence, h.ProducerID)
}
