package broker

import (
	"context"
	"errors"
	"strconv"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/hotlog"
)

// Produce: v3-13
//
// v3 is the first version carrying v2 record batches (magic 2) and Kafka
// 4's minimum. v5+ reports the log start offset, v8+ per-record errors and
// an error message, v9+ is flexible, v13 names topics by id. Each partition
// must carry exactly one batch (as Kafka requires for magic 2). Requests of
// one connection run in order (serial), so an idempotent producer's
// pipelined batches reach the log in the order it sent them. acks=-1 waits
// for the in-sync replicas (here the leader alone, so it equals acks=1
// apart from the min.insync.replicas check); acks=0 sends no reply.
// Transactional batches (KIP-98) go through the same producer-state check,
// which also records the first offset of the producer's open transaction
// (the last stable offset stays below it) and refuses an older epoch with
// PRODUCER_FENCED (producers.go, txns.go). The partition is trusted to have
// been added to the transaction (no KIP-890 verification yet).

func init() {
	e := regKey(0, 3, 13)
	e.handler = handleProduce
	e.serial = true
}

func handleProduce(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	var ackErr error
	if req.Acks != 0 && req.Acks != 1 && req.Acks != -1 {
		ackErr = errInvalidRequiredAcks
	}
	st := b.meta.State()
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, pt := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = pt.Partition
			rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
			err := ackErr
			var p *partition
			if err == nil {
				if r.Version >= 13 {
					p, err = b.store.partitionByID(st, t.TopicID, pt.Partition)
				} else {
					p, err = b.store.partition(st, t.Topic, pt.Partition)
				}
			}
			if err == nil {
				topic := p.topicConfigs(st)
				maxBytes := configInt(b, topic, "max.message.bytes")
				if req.Acks == -1 && configInt(b, topic, "min.insync.replicas") > 1 {
					err = errNotEnoughReplicas
				} else {
					var res appendResult
					lat := configString(b, topic, "message.timestamp.type") == "LogAppendTime"
					res, err = p.appendBatch(pt.Records, int32(maxBytes), lat)
					if err == nil {
						rp.BaseOffset, rp.LogAppendTime = res.baseOffset, res.logAppendTime
						rp.LogStartOffset = p.log.LogStartOffset()
					}
				}
			}
			if err != nil {
				rp.ErrorCode = errCode(err)
				if r.Version >= 8 {
					rp.ErrorMessage = errMessage(err)
					if errors.Is(err, hotlog.ErrCorruptBatch) || errors.Is(err, hotlog.ErrInvalidRecord) {
						// librdkafka expects per-record errors.
						er := kmsg.NewProduceResponseTopicPartitionErrorRecord()
						er.RelativeOffset = 0
						er.ErrorMessage = errMessage(err)
						rp.ErrorRecords = append(rp.ErrorRecords, er)
					}
				}
				b.log.Debug("produce failed", "topic", t.Topic, "partition", pt.Partition, "err", err)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if req.Acks == 0 {
		return &Reply{NoResponse: true}, nil
	}
	return &Reply{Msg: resp}, nil
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
