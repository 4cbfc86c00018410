package main

// sediment consume TOPIC: print records to standard output.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type consumeFlags struct {
	from          string
	partition     int32
	count         int
	exitAtEnd     bool
	group         string
	format        string
	keySeparator  string
	readCommitted bool
}

func newConsumeCmd() *cobra.Command {
	var cf consumeFlags
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Print records of a topic to standard output",
		Long: `Consume prints TOPIC's records, one per line, until interrupted, until -n
records were printed, or (with --exit) once it reached the end offsets the
partitions had when it started.

--from picks where each partition starts:
  earliest        the log start offset (default)
  latest          the end: only records produced from now on
  N               offset N (clamped to the partition's start and end)
  -N              N records before the end
  RFC3339 time    the first record with a timestamp at or after it, e.g. 2026-11-29T10:00:00Z

Without --group the consumer reads every partition (or --partition) directly
and commits nothing. With --group it joins that consumer group: committed
offsets win over --from (which then applies only to partitions with no
commit), and the offsets of the printed records are committed.

Formats: value (the value only), key-value (key, --key-separator, value) and
json (one object per line: topic, partition, offset, timestamp in Unix
milliseconds, key, value, headers; null for a null key or value; a key or
value that is not valid UTF-8 is given as key_base64/value_base64 instead).`,
		Example: `  sediment consume greetings --exit
  sediment consume greetings --from latest --format key-value
  sediment consume audit --from 2026-11-29T00:00:00Z -n 10 --format json
  sediment consume orders --group billing`,
		Args: cobra.ExactArgs(1),
	}
	opts := addClientFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runConsume(cmd, opts, &cf, args[0])
	}
	f := cmd.Flags()
	f.StringVarP(&cf.from, "from", "o", "earliest", "where to start: earliest, latest, OFFSET, -N (N before the end) or an RFC3339 time")
	f.Int32VarP(&cf.partition, "partition", "p", -1, "consume only this partition (-1: all)")
	f.IntVarP(&cf.count, "count", "n", 0, "stop after this many records (0: no limit)")
	f.BoolVarP(&cf.exitAtEnd, "exit", "e", false, "stop at the end offsets the partitions had at start")
	f.StringVarP(&cf.group, "group", "g", "", "consume as a member of this consumer group, committing offsets")
	f.StringVarP(&cf.format, "format", "f", "value", "output format: value, key-value or json")
	f.StringVarP(&cf.keySeparator, "key-separator", "K", "\t", "separator between key and value in the key-value format")
	f.BoolVar(&cf.readCommitted, "read-committed", false, "read only committed transactional records")
	return cmd
}

// startSpec is a parsed --from.
type startSpec struct {
	kind   string // "earliest", "latest", "offset", "relative", "time"
	offset int64  // the offset for "offset", N for "relative"
	millis int64  // for "time"
}

func parseFrom(s string) (startSpec, error) {
	switch strings.ToLower(s) {
	case "earliest", "beginning", "start", "oldest":
		return startSpec{kind: "earliest"}, nil
	case "latest", "end", "newest":
		return startSpec{kind: "latest"}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return startSpec{kind: "relative", offset: -n}, nil
		}
		return startSpec{kind: "offset", offset: n}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return startSpec{kind: "time", millis: t.UnixMilli()}, nil
	}
	return startSpec{}, fmt.Errorf("--from %q: want earliest, latest, an offset, -N or an RFC3339 time such as 2026-11-29T10:00:00Z", s)
}

// resetOffset is the spec as a kgo offset, for group members (applied to
// partitions without a committed offset).
func (s startSpec) resetOffset() kgo.Offset {
	switch s.kind {
	case "latest":
		return kgo.NewOffset().AtEnd()
	case "offset":
		return kgo.NewOffset().At(s.offset)
	case "relative":
		return kgo.NewOffset().AtEnd().Relative(-s.offset)
	case "time":
		return kgo.NewOffset().AfterMilli(s.millis)
	default:
		return kgo.NewOffset().AtStart()
	}
}

// resolve picks the exact start offset of one partition given its log start
// and end offsets (and, for "time", the offset listed for the timestamp).
func (s startSpec) resolve(start, end, atTime int64) int64 {
	var off int64
	switch s.kind {
	case "earliest":
		off = start
	case "latest":
		off = end
	case "offset":
		off = s.offset
	case "relative":
		off = end - s.offset
	case "time":
		off = atTime
	}
	return max(start, min(off, end))
}

func runConsume(cmd *cobra.Command, opts *clientOptions, cf *consumeFlags, topic string) error {
	spec, err := parseFrom(cf.from)
	if err != nil {
		return err
	}
	format, err := newRecordFormatter(cf.format, cf.keySeparator)
	if err != nil {
		return err
	}
	if cf.count < 0 {
		return errors.New("-n must not be negative")
	}
	if cf.group != "" && cf.partition >= 0 {
		return errors.New("--partition cannot be used with --group (the group assigns partitions)")
	}
	if cf.group != "" && cf.exitAtEnd {
		return errors.New("--exit cannot be used with --group (the group assigns partitions); use -n")
	}

	ctx, cancel := signalContext(cmd)
	defer cancel()

	// An admin client first: check the topic (a consumer would otherwise
	// wait for it in silence) and resolve where each partition starts.
	admCl, err := opts.newClient(ctx)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(admCl)
	defer adm.Close()
	details, err := adm.ListTopicsWithInternal(ctx, topic)
	if err != nil {
		return fmt.Errorf("topic %s: metadata: %w", topic, err)
	}
	td, ok := details[topic]
	if !ok || isUnknownTopic(td.Err) {
		return unknownTopicError(topic)
	}
	if td.Err != nil {
		return fmt.Errorf("topic %s: %w", topic, td.Err)
	}
	if cf.partition >= 0 {
		if _, ok := td.Partitions[cf.partition]; !ok {
			return fmt.Errorf("topic %s has no partition %d (it has %s)", topic, cf.partition, plural(len(td.Partitions), "partition"))
		}
	}

	kopts := []kgo.Opt{
		kgo.KeepControlRecords(), // so that --exit sees the offsets of transaction markers too
	}
	if cf.readCommitted {
		kopts = append(kopts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	var ends map[int32]int64
	if cf.group != "" {
		if err := checkGroupSupport(ctx, adm); err != nil {
			return err
		}
		// --from is where partitions without a committed offset start.
		kopts = append(kopts, kgo.ConsumerGroup(cf.group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(spec.resetOffset()), kgo.AutoCommitMarks(), kgo.BlockRebalanceOnPoll())
	} else {
		starts, endOffsets, err := resolveStarts(ctx, adm, topic, td, cf.partition, spec, cf.readCommitted)
		if err != nil {
			return err
		}
		offsets := make(map[int32]kgo.Offset, len(starts))
		for p, o := range starts {
			offsets[p] = kgo.NewOffset().At(o)
		}
		// Should an offset fall out of range later (retention deleted
		// it while we were reading), go on from the log start.
		kopts = append(kopts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if cf.exitAtEnd {
			ends = make(map[int32]int64, len(starts))
			for p, o := range starts {
				if o < endOffsets[p] {
					ends[p] = endOffsets[p]
				}
			}
		}
	}
	// The consumer is created after every check so that a bad flag or a
	// missing topic never joins a group.
	cl, err := opts.newClient(ctx, kopts...)
	if err != nil {
		return err
	}
	return consume(ctx, cl, cmd.OutOrStdout(), cmd.ErrOrStderr(), format, cf, ends, topicGone(adm, topic, td.ID))
}

// topicGone returns a check of whether topic is still the topic consumed
// (its id when the command started): an error saying it was deleted, or
// deleted and created again; nil while it is, or when the brokers cannot
// tell now. franz-go never consumes a topic under another id than the one
// it started with: it reports UNKNOWN_TOPIC_ID and fetches again at once,
// for ever.
func topicGone(adm *kadm.Client, topic string, id kadm.TopicID) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		details, err := adm.ListTopicsWithInternal(ctx, topic)
		if err != nil {
			return nil
		}
		switch td, ok := details[topic]; {
		case !ok || isUnknownTopic(td.Err):
			return fmt.Errorf("topic %s was deleted", topic)
		case td.Err == nil && td.ID != id:
			return fmt.Errorf("topic %s was deleted and created again (topic id %s, consumed: %s); consume it again to read the new one",
				topic, topicID(td.ID), topicID(id))
		}
		return nil
	}
}

// errorReporter prints a consumer's fetch errors to stderr, each distinct
// one (partition and text) at most once per errorRepeatEvery: franz-go
// hands the same error to every poll while it lasts, thousands a second
// for a deleted topic.
type errorReporter struct {
	w       io.Writer
	printed map[string]time.Time
}

const errorRepeatEvery = 10 * time.Second

func (e *errorReporter) report(fe kgo.FetchError) {
	line := fmt.Sprintf("sediment: consume %s[%d]: %v\n", fe.Topic, fe.Partition, fe.Err)
	if last, ok := e.printed[line]; ok && time.Since(last) < errorRepeatEvery {
		return
	}
	if e.printed == nil {
		e.printed = make(map[string]time.Time)
	}
	e.printed[line] = time.Now()
	io.WriteString(e.w, line)
}

// isFatalFetchError reports whether err, from a poll, will not go away by
// fetching again, so that consume ends with it instead of printing it for
// ever: a non-retriable Kafka error (TOPIC_AUTHORIZATION_FAILED for a
// principal that may Describe the topic but not Read it,
// GROUP_AUTHORIZATION_FAILED, UNSUPPORTED_COMPRESSION_TYPE, an invalid
// group...), except those franz-go recovers from by itself (a group member
// rejoining after UNKNOWN_MEMBER_ID, a reset after OFFSET_OUT_OF_RANGE) and
// UNKNOWN_SERVER_ERROR, which a broker may answer for a passing fault (the
// Java consumer retries it too); or a batch too large to decompress, which
// franz-go never fetches again.
func isFatalFetchError(err error) bool {
	if _, ok := errors.AsType[*kgo.ErrDecompressTooLarge](err); ok {
		return true
	}
	ke, ok := errors.AsType[*kerr.Error](err)
	if !ok || ke.Retriable {
		return false
	}
	switch ke {
	case kerr.UnknownServerError, kerr.OffsetOutOfRange,
		kerr.UnknownMemberID, kerr.IllegalGeneration, kerr.RebalanceInProgress,
		kerr.FencedMemberEpoch, kerr.StaleMemberEpoch:
		return false
	}
	return true
}

// fetchErrorf is the error consume ends with for a fatal fetch error: the
// partition's, as errorReporter prints it, or the group's (a group session
// error comes without a partition).
func fetchErrorf(fe kgo.FetchError, group string) error {
	if gs, ok := errors.AsType[*kgo.ErrGroupSession](fe.Err); ok && group != "" {
		return fmt.Errorf("consume: group %s: %w", group, gs.Err)
	}
	if fe.Topic == "" {
		return fmt.Errorf("consume: %w", fe.Err)
	}
	if fe.Partition < 0 {
		return fmt.Errorf("consume %s: %w", fe.Topic, fe.Err)
	}
	return fmt.Errorf("consume %s[%d]: %w", fe.Topic, fe.Partition, fe.Err)
}

// groupAPIs are the requests a classic consumer group member sends.
var groupAPIs = []kmsg.Key{kmsg.FindCoordinator, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.OffsetCommit, kmsg.OffsetFetch}

// checkGroupSupport fails, naming the missing API, when the brokers do not
// advertise consumer groups: a group member would otherwise retry forever.
func checkGroupSupport(ctx context.Context, adm *kadm.Client) error {
	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		return fmt.Errorf("api versions: %w", err)
	}
	for _, v := range versions.Sorted() {
		if v.Err != nil {
			continue
		}
		for _, key := range groupAPIs {
			if _, ok := v.KeyMaxVersion(key.Int16()); !ok {
				return fmt.Errorf("broker %d does not support consumer groups (no %s in its ApiVersions); consume without --group", v.NodeID, key.Name())
			}
		}
	}
	return nil
}

// resolveStarts lists the partitions' log start and end offsets (and the
// offsets for a time) and returns where each consumed partition starts and
// the end offsets --exit stops at.
func resolveStarts(ctx context.Context, adm *kadm.Client, topic string, td kadm.TopicDetail, partition int32, spec startSpec, readCommitted bool) (starts, ends map[int32]int64, err error) {
	list := func(what string, fn func() (kadm.ListedOffsets, error)) (map[int32]int64, error) {
		l, err := fn()
		if err == nil {
			err = l.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("topic %s: listing %s offsets: %w", topic, what, err)
		}
		out := make(map[int32]int64)
		l.Each(func(o kadm.ListedOffset) {
			if o.Topic == topic && o.Partition >= 0 {
				out[o.Partition] = o.Offset
			}
		})
		return out, nil
	}
	logStarts, err := list("start", func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topic) })
	if err != nil {
		return nil, nil, err
	}
	ends, err = list("end", func() (kadm.ListedOffsets, error) {
		if readCommitted {
			return adm.ListCommittedOffsets(ctx, topic)
		}
		return adm.ListEndOffsets(ctx, topic)
	})
	if err != nil {
		return nil, nil, err
	}
	var atTime map[int32]int64
	if spec.kind == "time" {
		atTime, err = list("time", func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, spec.millis, topic) })
		if err != nil {
			return nil, nil, err
		}
	}
	starts = make(map[int32]int64)
	for p := range td.Partitions {
		if partition >= 0 && p != partition {
			continue
		}
		s, ok1 := logStarts[p]
		e, ok2 := ends[p]
		if !ok1 || !ok2 {
			return nil, nil, fmt.Errorf("topic %s: no offsets listed for partition %d", topic, p)
		}
		t, ok := atTime[p]
		if !ok || t < 0 {
			t = e
		}
		starts[p] = spec.resolve(s, e, t)
	}
	return starts, ends, nil
}

// consume polls cl and prints records until ctx ends, cf.count records were
// printed, or (ends non-nil) every partition in ends reached its end offset;
// or, with an error, when gone (if not nil), asked after an unknown topic
// error, says the topic is no longer the one consumed, or at a fetch error
// that fetching again cannot cure (isFatalFetchError). It closes cl,
// committing the printed records' offsets first in a group.
func consume(ctx context.Context, cl *kgo.Client, stdout, stderr io.Writer, format recordFormatter, cf *consumeFlags, ends map[int32]int64, gone func(context.Context) error) error {
	out := bufio.NewWriterSize(stdout, 64<<10)
	printed := 0
	var loopErr, goneErr error
	errs := errorReporter{w: stderr}
	var goneAsked time.Time
	defer cl.Close()
	done := func() bool {
		return (cf.count > 0 && printed >= cf.count) || (ends != nil && len(ends) == 0)
	}
	for !done() {
		limit := -1
		if cf.count > 0 {
			limit = cf.count - printed
		}
		fetches := cl.PollRecords(ctx, limit)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			break
		}
		var fatal error
		for _, fe := range fetches.Errors() {
			if errors.Is(fe.Err, context.Canceled) || errors.Is(fe.Err, context.DeadlineExceeded) {
				continue
			}
			if isFatalFetchError(fe.Err) {
				if fatal == nil {
					fatal = fetchErrorf(fe, cf.group)
				}
				continue
			}
			errs.report(fe)
			if gone != nil && goneErr == nil && isUnknownTopic(fe.Err) && time.Since(goneAsked) >= time.Second {
				goneAsked = time.Now()
				goneErr = gone(ctx)
			}
		}
		var toMark []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) {
			if done() {
				return
			}
			if end, ok := ends[r.Partition]; ok && r.Offset+1 >= end {
				delete(ends, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			if loopErr == nil {
				loopErr = format(out, r)
			}
			printed++
			toMark = append(toMark, r)
		})
		if cf.group != "" {
			cl.MarkCommitRecords(toMark...)
			cl.AllowRebalance()
		}
		if err := out.Flush(); err != nil && loopErr == nil {
			loopErr = err
		}
		if loopErr != nil {
			break
		}
		if fatal != nil {
			loopErr = fatal
			break
		}
		if goneErr != nil {
			loopErr = goneErr
			break
		}
	}
	if err := out.Flush(); err != nil && loopErr == nil {
		loopErr = fmt.Errorf("writing output: %w", err)
	}
	if cf.group != "" {
		commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := cl.CommitMarkedOffsets(commitCtx); err != nil && loopErr == nil {
			loopErr = fmt.Errorf("committing offsets of group %s: %w", cf.group, err)
		}
		// The loop may end right after a poll (interrupted, or -n reached)
		// whose rebalance block (BlockRebalanceOnPoll) was never lifted:
		// leaving waits for it, and Close then waited for ever (found with
		// the broker stopped under a waiting consumer). Then leave within a
		// bound: Close leaves with the client's own context, which never
		// ends, retrying LeaveGroup while no broker answers.
		cl.AllowRebalance()
		leaveCtx, cancelLeave := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancelLeave()
		_ = cl.LeaveGroupContext(leaveCtx)
	}
	return loopErr
}

// recordFormatter writes one record, with its line ending, to w.
type recordFormatter func(w *bufio.Writer, r *kgo.Record) error

func newRecordFormatter(format, keySeparator string) (recordFormatter, error) {
	switch strings.ToLower(format) {
	case "value", "v":
		return func(w *bufio.Writer, r *kgo.Record) error {
			w.Write(r.Value)
			return w.WriteByte('\n')
		}, nil
	case "key-value", "kv":
		return func(w *bufio.Writer, r *kgo.Record) error {
			w.Write(r.Key)
			w.WriteString(keySeparator)
			w.Write(r.Value)
			return w.WriteByte('\n')
		}, nil
	case "json":
		return func(w *bufio.Writer, r *kgo.Record) error {
			b, err := json.Marshal(jsonRecordOf(r))
			if err != nil {
				return err
			}
			w.Write(b)
			return w.WriteByte('\n')
		}, nil
	default:
		return nil, fmt.Errorf("unknown --format %q (want value, key-value or json)", format)
	}
}

// jsonRecord is the json format's object. Key and Value are pointers so that
// a null key or value prints as null and an empty one as "".
type jsonRecord struct {
	Topic       string       `json:"topic"`
	Partition   int32        `json:"partition"`
	Offset      int64        `json:"offset"`
	Timestamp   int64        `json:"timestamp"`
	Key         *string      `json:"key"`
	KeyBase64   string       `json:"key_base64,omitempty"`
	Value       *string      `json:"value"`
	ValueBase64 string       `json:"value_base64,omitempty"`
	Headers     []jsonHeader `json:"headers"`
}

type jsonHeader struct {
	Key         string  `json:"key"`
	Value       *string `json:"value"`
	ValueBase64 string  `json:"value_base64,omitempty"`
}

// jsonBytes renders b as a JSON string, or as base64 when it is not UTF-8
// (JSON strings cannot carry arbitrary bytes).
func jsonBytes(b []byte) (text *string, b64 string) {
	if b == nil {
		return nil, ""
	}
	if utf8.Valid(b) {
		s := string(b)
		return &s, ""
	}
	return nil, base64.StdEncoding.EncodeToString(b)
}

func jsonRecordOf(r *kgo.Record) jsonRecord {
	j := jsonRecord{
		Topic:     r.Topic,
		Partition: r.Partition,
		Offset:    r.Offset,
		Timestamp: r.Timestamp.UnixMilli(),
		Headers:   make([]jsonHeader, 0, len(r.Headers)),
	}
	j.Key, j.KeyBase64 = jsonBytes(r.Key)
	j.Value, j.ValueBase64 = jsonBytes(r.Value)
	for _, h := range r.Headers {
		jh := jsonHeader{Key: h.Key}
		jh.Value, jh.ValueBase64 = jsonBytes(h.Value)
		j.Headers = append(j.Headers, jh)
	}
	return j
}
