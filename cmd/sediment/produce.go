package main

// sediment produce TOPIC: one record per line of standard input.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type produceFlags struct {
	keySeparator string
	headers      []string
	partition    int32
	acks         string
	compression  string
	idempotent   bool
	nullEmpty    bool
	maxLineBytes int
	quiet        bool
}

func newProduceCmd() *cobra.Command {
	var pf produceFlags
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce one record per line of standard input",
		Long: `Produce reads standard input and sends one record per line (without the line
ending) to TOPIC. With --key-separator each line is split at the first
separator into key and value; a line without the separator has a null key.
Keyed records are partitioned as Kafka's Java client does (murmur2 of the key,
modulo the partition count); unkeyed records use sticky partitioning.`,
		Example: `  printf 'user-1:hello\nuser-2:world\n' | sediment produce greetings --key-separator :
  sediment produce audit --header source=cli --header v=1 --acks all --compression zstd < events.txt`,
		Args: cobra.ExactArgs(1),
	}
	opts := addClientFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runProduce(cmd, opts, &pf, args[0])
	}
	f := cmd.Flags()
	f.StringVarP(&pf.keySeparator, "key-separator", "K", "", "split each line at the first SEP into key and value (default: no key)")
	f.StringArrayVarP(&pf.headers, "header", "H", nil, "header key=value added to every record, repeatable")
	f.Int32VarP(&pf.partition, "partition", "p", -1, "produce every record to this partition (-1: murmur2 of the key, sticky for null keys)")
	f.StringVar(&pf.acks, "acks", "all", "acknowledgement: all (-1), leader (1) or none (0)")
	f.StringVarP(&pf.compression, "compression", "z", "none", "batch compression: none, gzip, snappy, lz4, zstd")
	f.BoolVar(&pf.idempotent, "idempotent", true, "idempotent producer (needs --acks all)")
	f.BoolVar(&pf.nullEmpty, "null-empty", false, "send an empty value as null (a tombstone for compacted topics)")
	f.IntVar(&pf.maxLineBytes, "max-line-bytes", 1<<20, "longest accepted input line")
	f.BoolVarP(&pf.quiet, "quiet", "q", false, "do not print the summary on stderr")
	return cmd
}

// producerOpts turns the flags into kgo options.
func (pf *produceFlags) producerOpts(explicitIdempotent bool) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	var acks kgo.Acks
	allAcks := false
	switch strings.ToLower(pf.acks) {
	case "all", "-1":
		acks, allAcks = kgo.AllISRAcks(), true
	case "leader", "1":
		acks = kgo.LeaderAck()
	case "none", "0":
		acks = kgo.NoAck()
	default:
		return nil, fmt.Errorf("unknown --acks %q (want all, leader or none; or -1, 1, 0)", pf.acks)
	}
	opts = append(opts, kgo.RequiredAcks(acks))
	if !allAcks || !pf.idempotent {
		if explicitIdempotent && pf.idempotent {
			return nil, fmt.Errorf("--idempotent needs --acks all (got --acks %s)", pf.acks)
		}
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	codec, err := compressionCodec(pf.compression)
	if err != nil {
		return nil, err
	}
	opts = append(opts, kgo.ProducerBatchCompression(codec))
	if pf.partition >= 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	} else {
		opts = append(opts, kgo.RecordPartitioner(keyPartitioner()))
	}
	if pf.maxLineBytes <= 0 {
		return nil, fmt.Errorf("--max-line-bytes must be positive")
	}
	return opts, nil
}

// keyPartitioner is Kafka's default partitioner: murmur2 of the key, high bit
// masked, modulo the partition count, so that a key lands on the partition
// Java, librdkafka's murmur2_random and franz-go's default all pick. Records
// without a key stick to one partition per batch.
func keyPartitioner() kgo.Partitioner {
	// nil selects kgo.KafkaHasher(murmur2); the Sarama hashers differ.
	return kgo.StickyKeyPartitioner(nil)
}

func compressionCodec(name string) (kgo.CompressionCodec, error) {
	switch strings.ToLower(name) {
	case "", "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	default:
		return kgo.CompressionCodec{}, fmt.Errorf("unknown --compression %q (want none, gzip, snappy, lz4 or zstd)", name)
	}
}

// lineRecord builds the record for one input line.
func lineRecord(topic string, line []byte, keySeparator string, headers []kgo.RecordHeader, partition int32, nullEmpty bool) *kgo.Record {
	r := &kgo.Record{Topic: topic, Headers: headers}
	value := line
	if keySeparator != "" {
		if k, v, ok := bytes.Cut(line, []byte(keySeparator)); ok {
			r.Key = bytes.Clone(k)
			value = v
		}
	}
	if len(value) > 0 || !nullEmpty {
		r.Value = append([]byte{}, value...) // never nil: an empty line is an empty value
	}
	if partition >= 0 {
		r.Partition = partition
	}
	return r
}

func runProduce(cmd *cobra.Command, opts *clientOptions, pf *produceFlags, topic string) error {
	kopts, err := pf.producerOpts(cmd.Flags().Changed("idempotent"))
	if err != nil {
		return err
	}
	hkv, err := parseKeyValues("header", pf.headers)
	if err != nil {
		return err
	}
	var headers []kgo.RecordHeader
	for _, kv := range hkv {
		headers = append(headers, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
	}
	// Like Kafka's console producer, rely on the broker's
	// auto.create.topics.enable for a topic that does not exist yet.
	kopts = append(kopts, kgo.AllowAutoTopicCreation(), kgo.RecordDeliveryTimeout(opts.timeout()))

	ctx, cancel := signalContext(cmd)
	defer cancel()
	cl, err := opts.newClient(ctx, kopts...)
	if err != nil {
		return err
	}
	defer cl.Close()

	if pf.partition >= 0 {
		if err := checkPartition(ctx, cl, topic, pf.partition); err != nil {
			return err
		}
	}
	n, err := produceLines(ctx, cl, cmd.InOrStdin(), topic, pf, headers)
	if !pf.quiet {
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "produced %s to %s before the error\n", plural(int(n), "record"), topic)
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "produced %s to %s\n", plural(int(n), "record"), topic)
		}
	}
	return err
}

// produceLines sends every line of in and waits until each record is
// acknowledged. It returns how many were acknowledged and the first error.
func produceLines(ctx context.Context, cl *kgo.Client, in io.Reader, topic string, pf *produceFlags, headers []kgo.RecordHeader) (int64, error) {
	var (
		mu       sync.Mutex
		acked    int64
		failures int64
		firstErr error
	)
	promise := func(r *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failures++
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		acked++
	}

	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, min(64<<10, pf.maxLineBytes)), pf.maxLineBytes)
	var lines int64
	var readErr error
	for sc.Scan() {
		lines++
		cl.Produce(ctx, lineRecord(topic, sc.Bytes(), pf.keySeparator, headers, pf.partition, pf.nullEmpty), promise)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			readErr = fmt.Errorf("line %d is longer than --max-line-bytes %d", lines+1, pf.maxLineBytes)
		} else {
			readErr = fmt.Errorf("reading standard input: %w", err)
		}
	}
	flushErr := cl.Flush(ctx)

	mu.Lock()
	defer mu.Unlock()
	var errs []error
	if readErr != nil {
		errs = append(errs, readErr)
	}
	if failures > 0 {
		errs = append(errs, fmt.Errorf("%d of %d records were not acknowledged; first error: %w", failures, lines, firstErr))
	} else if flushErr != nil {
		errs = append(errs, fmt.Errorf("waiting for acknowledgements: %w", flushErr))
	}
	return acked, errors.Join(errs...)
}

// checkPartition fails if topic exists and has no such partition (a topic
// that does not exist yet is left to auto-creation).
func checkPartition(ctx context.Context, cl *kgo.Client, topic string, partition int32) error {
	details, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("topic %s: metadata: %w", topic, err)
	}
	td, ok := details[topic]
	if !ok || td.Err != nil {
		return nil
	}
	if _, ok := td.Partitions[partition]; !ok {
		return fmt.Errorf("topic %s has no partition %d (it has %s)", topic, partition, plural(len(td.Partitions), "partition"))
	}
	return nil
}
