package main

// sediment topic create|list|describe|alter|delete: topic administration
// through kadm (CreateTopics, Metadata, DescribeConfigs, ListOffsets,
// CreatePartitions, IncrementalAlterConfigs, DeleteTopics); reassign and
// reassignments are in reassign.go.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/broker"
)

func newTopicCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "Create, list, describe, alter, delete and reassign topics",
	}
	opts := addClientFlags(cmd)
	cmd.AddCommand(
		newTopicCreateCmd(opts),
		newTopicListCmd(opts),
		newTopicDescribeCmd(opts),
		newTopicAlterCmd(opts),
		newTopicDeleteCmd(opts),
		newTopicReassignCmd(opts),
		newTopicReassignmentsCmd(opts),
	)
	return cmd
}

func newTopicCreateCmd(opts *clientOptions) *cobra.Command {
	var (
		partitions  int32
		replication int16
		configs     []string
		ifNotExists bool
		noWait      bool
	)
	cmd := &cobra.Command{
		Use:   "create TOPIC...",
		Short: "Create topics",
		Example: `  sediment topic create orders --partitions 6
  sediment topic create audit -p 3 -r 1 --config retention.ms=-1 --config cleanup.policy=compact`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, topics []string) error {
			kvs, err := parseKeyValues("config", configs)
			if err != nil {
				return err
			}
			var cfg map[string]*string
			if len(kvs) > 0 {
				cfg = make(map[string]*string, len(kvs))
				for _, kv := range kvs {
					cfg[kv[0]] = &kv[1]
				}
			}
			ctx, cancel := signalContext(cmd)
			defer cancel()
			cl, err := opts.newClient(ctx)
			if err != nil {
				return err
			}
			adm := opts.admin(cl) // waitTopicsReady needs cl too
			defer adm.Close()
			resps, err := adm.CreateTopics(ctx, partitions, replication, cfg, topics...)
			if err != nil {
				return fmt.Errorf("create topics: %w", err)
			}
			// Without DESCRIBE_CONFIGS on a topic the answer's counts
			// are -1 (as Kafka's): the ones asked for are the topic's.
			counts := func(r kadm.CreateTopicResponse) (int32, int16) {
				p, rf := r.NumPartitions, r.ReplicationFactor
				if p < 0 {
					p = partitions
				}
				if rf < 0 {
					rf = replication
				}
				return p, rf
			}
			created := map[string]int32{}
			for _, r := range resps {
				if r.Err == nil {
					created[r.Topic], _ = counts(r)
				}
			}
			// The controller answers once the topic is in the metadata
			// log; brokers apply it and leaders open their partitions a
			// moment later. Wait for that, so that the next command
			// (describe, produce) finds the topic on any broker.
			if len(created) > 0 && !noWait {
				wctx, wcancel := context.WithTimeout(ctx, opts.timeout())
				err := waitTopicsReady(wctx, cl, adm, created)
				wcancel()
				switch {
				case errors.Is(err, kerr.TopicAuthorizationFailed):
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: created, but whether it is ready on every broker could not be checked (this login may not DESCRIBE it): %v\n", err)
				case err != nil:
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: created, but not yet ready on every broker: %v\n", err)
				}
			}
			out := cmd.OutOrStdout()
			var failed []error
			for _, r := range resps.Sorted() {
				if r.Err != nil {
					if ifNotExists && isTopicExists(r.Err) {
						fmt.Fprintf(out, "topic %s already exists\n", r.Topic)
						continue
					}
					failed = append(failed, fmt.Errorf("topic %s: %w", r.Topic, kafkaError(r.Err, r.ErrMessage)))
					continue
				}
				// The counts asked for or answered; a broker default the
				// answer did not give is left out.
				var known []string
				p, rf := counts(r)
				if p >= 0 {
					known = append(known, plural(int(p), "partition"))
				}
				if rf >= 0 {
					known = append(known, "replication factor "+strconv.Itoa(int(rf)))
				}
				if len(known) == 0 {
					fmt.Fprintf(out, "created topic %s\n", r.Topic)
				} else {
					fmt.Fprintf(out, "created topic %s: %s\n", r.Topic, strings.Join(known, ", "))
				}
			}
			return errors.Join(failed...)
		},
	}
	f := cmd.Flags()
	f.Int32VarP(&partitions, "partitions", "p", -1, "number of partitions (-1: the broker's num.partitions)")
	f.Int16VarP(&replication, "replication-factor", "r", -1, "replicas per partition (-1: the broker's default.replication.factor)")
	f.StringArrayVarP(&configs, "config", "c", nil, "topic config key=value, repeatable (e.g. retention.ms=604800000)")
	f.BoolVar(&ifNotExists, "if-not-exists", false, "succeed when the topic already exists")
	f.BoolVar(&noWait, "no-wait", false, "return when the controller has created the topics, before every broker knows them and their leaders are ready")
	return cmd
}

// waitTopicsReady returns when every broker's Metadata lists each topic
// with its partitions (want: topic to partition count, -1 unknown), each
// with a leader, and the leaders answer ListOffsets for all of them; or
// with what was still missing when ctx ends; or at once with
// TOPIC_AUTHORIZATION_FAILED, which waiting does not end (a login allowed
// to CREATE a topic and not to DESCRIBE it cannot see it ready: it waited
// the whole --timeout).
func waitTopicsReady(ctx context.Context, cl *kgo.Client, adm *kadm.Client, want map[string]int32) error {
	names := make([]string, 0, len(want))
	for t := range want {
		names = append(names, t)
	}
	sort.Strings(names)
	check := func() error {
		brokers, err := adm.ListBrokers(ctx)
		if err != nil {
			return err
		}
		for _, b := range brokers {
			req := kmsg.NewPtrMetadataRequest()
			for _, t := range names {
				rt := kmsg.NewMetadataRequestTopic()
				rt.Topic = kmsg.StringPtr(t)
				req.Topics = append(req.Topics, rt)
			}
			resp, err := req.RequestWith(ctx, cl.Broker(int(b.NodeID)))
			if err != nil {
				return fmt.Errorf("broker %d: %w", b.NodeID, err)
			}
			if len(resp.Topics) != len(names) {
				return fmt.Errorf("broker %d: Metadata answered %d of %d topics", b.NodeID, len(resp.Topics), len(names))
			}
			for _, rt := range resp.Topics {
				var name string
				if rt.Topic != nil {
					name = *rt.Topic
				}
				if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
					return fmt.Errorf("broker %d: topic %s: %w", b.NodeID, name, err)
				}
				if n := int32(len(rt.Partitions)); n < want[name] {
					return fmt.Errorf("broker %d: topic %s: %d of %d partitions", b.NodeID, name, n, want[name])
				}
				for _, p := range rt.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil || p.Leader < 0 {
						return fmt.Errorf("broker %d: %s-%d has no leader yet", b.NodeID, name, p.Partition)
					}
				}
			}
		}
		ends, err := adm.ListEndOffsets(ctx, names...)
		if err != nil {
			return err
		}
		var errs []error
		for _, t := range names {
			if n := int32(len(ends[t])); n < want[t] {
				errs = append(errs, fmt.Errorf("topic %s: end offsets of %d of %d partitions", t, n, want[t]))
			}
		}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", o.Topic, o.Partition, o.Err))
			}
		})
		return errors.Join(errs...)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error // of the last check that ctx's end did not cut short
	for {
		err := check()
		if err == nil || errors.Is(err, kerr.TopicAuthorizationFailed) {
			return err
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return last
		case <-tick.C:
		}
	}
}

func isTopicExists(err error) bool { return errors.Is(err, kerr.TopicAlreadyExists) }

// storageHint says what KAFKA_STORAGE_ERROR means here: kerr's text blames
// the disk ("Disk error when trying to access log file on the disk."), and
// for a topic with remote storage it is most often the bucket not answering
// (the start offset across both tiers needs the remote log's state).
func storageHint(err error) error {
	if !errors.Is(err, kerr.KafkaStorageError) {
		return err
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && err == error(ke) {
		return kafkaError(err, "the broker could not read the partition's log: its disk, or for a topic with remote storage the bucket (the broker's log says which)")
	}
	return fmt.Errorf("%w (the broker could not read the partition's log: its disk, or for a topic with remote storage the bucket; the broker's log says which)", err)
}

// topicID prints a topic id as Kafka's tools do (Uuid.toString: URL-safe
// base64 without padding), so it can be compared with kafka-topics.sh output.
func topicID(id kadm.TopicID) string {
	return base64.RawURLEncoding.EncodeToString(id[:])
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

func newTopicListCmd(opts *clientOptions) *cobra.Command {
	var internal bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List topics with their partition counts and replication factors",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext(cmd)
			defer cancel()
			adm, err := opts.newAdmin(ctx)
			if err != nil {
				return err
			}
			defer adm.Close()
			var details kadm.TopicDetails
			if internal {
				details, err = adm.ListTopicsWithInternal(ctx)
			} else {
				details, err = adm.ListTopics(ctx)
			}
			if err != nil {
				return fmt.Errorf("list topics: %w", err)
			}
			return printTopicList(cmd.OutOrStdout(), details)
		},
	}
	cmd.Flags().BoolVar(&internal, "internal", false, "include internal topics (such as __consumer_offsets)")
	return cmd
}

func printTopicList(w io.Writer, details kadm.TopicDetails) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tREPLICATION\tID")
	var failed []error
	for _, t := range details.Sorted() {
		if t.Err != nil {
			failed = append(failed, fmt.Errorf("topic %s: %w", t.Topic, t.Err))
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", t.Topic, len(t.Partitions), replicationFactor(t), topicID(t.ID))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return errors.Join(failed...)
}

// replicationFactor is the largest replica count of t's partitions (they are
// equal unless a reassignment is under way).
func replicationFactor(t kadm.TopicDetail) int {
	rf := 0
	for _, p := range t.Partitions {
		rf = max(rf, len(p.Replicas))
	}
	return rf
}

func newTopicDescribeCmd(opts *clientOptions) *cobra.Command {
	var allConfigs bool
	var admins []string
	cmd := &cobra.Command{
		Use:   "describe TOPIC...",
		Short: "Show a topic's partitions (leader, replicas, ISR, offsets) and configs",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, topics []string) error {
			ctx, cancel := signalContext(cmd)
			defer cancel()
			adm, err := opts.newAdmin(ctx)
			if err != nil {
				return err
			}
			defer adm.Close()
			out := cmd.OutOrStdout()
			var failed []error
			printed := false
			admins, explicit := cleanerAdmins(cmd, opts, admins)
			for _, topic := range topics {
				var buf bytes.Buffer
				if err := describeTopic(ctx, &buf, adm, topic, allConfigs); err != nil {
					failed = append(failed, err)
				} else if len(admins) > 0 {
					printCleaner(ctx, &buf, admins, topic, !explicit)
				}
				if buf.Len() == 0 {
					continue
				}
				if printed {
					fmt.Fprintln(out)
				}
				printed = true
				if _, err := out.Write(buf.Bytes()); err != nil {
					return err
				}
			}
			return errors.Join(failed...)
		},
	}
	cmd.Flags().BoolVar(&allConfigs, "all-configs", false, "show every config with its source, not only the ones set on the topic")
	cmd.Flags().StringSliceVar(&admins, "admin-address", []string{"127.0.0.1:9644"},
		"admin endpoints (host:port, as the brokers' --admin-address) asked for the cleaner state: cleanup policy, dirty ratio, last cleaned; empty: skip (the default is asked only with the default --brokers; SEDIMENT_ADMIN_ADDRESS sets it too)")
	return cmd
}

// cleanerAdmins returns the admin endpoints `topic describe` asks for the
// cleaner state, and whether they were chosen (--admin-address, or
// SEDIMENT_ADMIN_ADDRESS, the broker's own variable, as `tier status` and
// `health` read it) rather than the default. The default address is the
// local default broker's: asked about brokers elsewhere it would show
// another cluster's cleaner state for the same name, so it is asked only
// with the default --brokers.
func cleanerAdmins(cmd *cobra.Command, opts *clientOptions, flag []string) ([]string, bool) {
	if cmd.Flags().Changed("admin-address") {
		return flag, true
	}
	if env := os.Getenv("SEDIMENT_ADMIN_ADDRESS"); env != "" {
		return strings.Split(env, ","), true
	}
	if !localDefaultSeeds(opts) {
		return nil, false
	}
	return flag, false
}

func describeTopic(ctx context.Context, w io.Writer, adm *kadm.Client, topic string, allConfigs bool) error {
	details, err := adm.ListTopicsWithInternal(ctx, topic)
	if err != nil {
		return fmt.Errorf("topic %s: metadata: %w", topic, err)
	}
	t, ok := details[topic]
	if !ok {
		return unknownTopicError(topic)
	}
	if t.Err != nil {
		if isUnknownTopic(t.Err) {
			return unknownTopicError(topic)
		}
		return fmt.Errorf("topic %s: %w", topic, t.Err)
	}

	// Offsets and configs are extras: a failure is reported but the rest
	// is still printed.
	var failed []error
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		failed = append(failed, fmt.Errorf("topic %s: start offsets: %w", topic, storageHint(err)))
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		failed = append(failed, fmt.Errorf("topic %s: end offsets: %w", topic, storageHint(err)))
	}
	var configs []kadm.Config
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err == nil {
		var rc kadm.ResourceConfig
		rc, err = rcs.On(topic, nil)
		if err == nil {
			err = kafkaError(rc.Err, rc.ErrMessage)
		}
		configs = rc.Configs
	}
	if err != nil {
		failed = append(failed, fmt.Errorf("topic %s: configs: %w", topic, err))
	}

	fmt.Fprintf(w, "Topic: %s\nID: %s\nPartitions: %d\nReplication factor: %d\n",
		t.Topic, topicID(t.ID), len(t.Partitions), replicationFactor(t))
	if t.IsInternal {
		fmt.Fprintln(w, "Internal: true")
	}
	if err := printTopicConfigs(w, configs, allConfigs); err != nil {
		return err
	}

	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "PARTITION\tLEADER\tEPOCH\tREPLICAS\tISR\tOFFLINE\tSTART\tEND\tERROR")
	for _, p := range t.Partitions.Sorted() {
		errText := ""
		if p.Err != nil {
			errText = p.Err.Error()
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Partition, p.Leader, p.LeaderEpoch,
			joinInt32(p.Replicas), joinInt32(p.ISR), joinInt32(p.OfflineReplicas),
			listedOffset(starts, topic, p.Partition), listedOffset(ends, topic, p.Partition), errText)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return errors.Join(failed...)
}

func printTopicConfigs(w io.Writer, configs []kadm.Config, all bool) error {
	sort.Slice(configs, func(i, j int) bool { return configs[i].Key < configs[j].Key })
	var shown []kadm.Config
	for _, c := range configs {
		if all || c.Source == kmsg.ConfigSourceDynamicTopicConfig {
			shown = append(shown, c)
		}
	}
	if len(shown) == 0 {
		_, err := fmt.Fprintln(w, "Configs: (none set on the topic)")
		return err
	}
	fmt.Fprintln(w, "Configs:")
	tw := newTable(w)
	for _, c := range shown {
		value := c.MaybeValue()
		if c.Sensitive {
			value = "(sensitive)"
		}
		if all {
			fmt.Fprintf(tw, "  %s=%s\t%s\n", c.Key, value, configSourceName(c.Source))
		} else {
			fmt.Fprintf(tw, "  %s=%s\n", c.Key, value)
		}
	}
	return tw.Flush()
}

func configSourceName(s kmsg.ConfigSource) string {
	switch s {
	case kmsg.ConfigSourceDynamicTopicConfig:
		return "topic"
	case kmsg.ConfigSourceDynamicBrokerConfig:
		return "broker (dynamic)"
	case kmsg.ConfigSourceDynamicDefaultBrokerConfig:
		return "cluster default (dynamic)"
	case kmsg.ConfigSourceStaticBrokerConfig:
		return "broker config file"
	case kmsg.ConfigSourceDefaultConfig:
		return "default"
	default:
		return strings.ToLower(s.String())
	}
}

func listedOffset(l kadm.ListedOffsets, topic string, partition int32) string {
	o, ok := l.Lookup(topic, partition)
	if !ok || o.Err != nil {
		return "?"
	}
	return strconv.FormatInt(o.Offset, 10)
}

func joinInt32(xs []int32) string {
	if len(xs) == 0 {
		return "-"
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(int(x))
	}
	return strings.Join(s, ",")
}

func newTopicAlterCmd(opts *clientOptions) *cobra.Command {
	var (
		partitions int
		set        []string
		deletes    []string
	)
	cmd := &cobra.Command{
		Use:   "alter TOPIC...",
		Short: "Add partitions, set or delete topic configs",
		Example: `  sediment topic alter orders --partitions 12
  sediment topic alter orders --config retention.ms=86400000 --delete-config cleanup.policy`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, topics []string) error {
			kvs, err := parseKeyValues("config", set)
			if err != nil {
				return err
			}
			if partitions <= 0 && len(kvs) == 0 && len(deletes) == 0 {
				return errors.New("nothing to alter: give --partitions, --config or --delete-config")
			}
			ctx, cancel := signalContext(cmd)
			defer cancel()
			adm, err := opts.newAdmin(ctx)
			if err != nil {
				return err
			}
			defer adm.Close()
			out := cmd.OutOrStdout()
			var failed []error
			if partitions > 0 {
				resps, err := adm.UpdatePartitions(ctx, partitions, topics...)
				if err != nil {
					return fmt.Errorf("update partitions: %w", err)
				}
				for _, r := range resps.Sorted() {
					if r.Err != nil {
						failed = append(failed, fmt.Errorf("topic %s: partitions: %w", r.Topic, kafkaError(r.Err, r.ErrMessage)))
						continue
					}
					fmt.Fprintf(out, "topic %s now has %s\n", r.Topic, plural(partitions, "partition"))
				}
			}
			if len(kvs) > 0 || len(deletes) > 0 {
				alters := make([]kadm.AlterConfig, 0, len(kvs)+len(deletes))
				for _, kv := range kvs {
					alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: kv[0], Value: &kv[1]})
				}
				for _, k := range deletes {
					alters = append(alters, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
				}
				resps, err := adm.AlterTopicConfigs(ctx, alters, topics...)
				if err != nil {
					return errors.Join(append(failed, fmt.Errorf("alter configs: %w", err))...)
				}
				sort.Slice(resps, func(i, j int) bool { return resps[i].Name < resps[j].Name })
				for _, r := range resps {
					if r.Err != nil {
						failed = append(failed, fmt.Errorf("topic %s: configs: %w", r.Name, kafkaError(r.Err, r.ErrMessage)))
						continue
					}
					fmt.Fprintf(out, "topic %s: configs altered (%s)\n", r.Name, describeAlters(alters))
				}
			}
			return errors.Join(failed...)
		},
	}
	f := cmd.Flags()
	f.IntVarP(&partitions, "partitions", "p", 0, "new total number of partitions (can only grow)")
	f.StringArrayVarP(&set, "config", "c", nil, "set a topic config key=value, repeatable")
	f.StringArrayVar(&deletes, "delete-config", nil, "remove a topic config (back to the broker default), repeatable")
	return cmd
}

func describeAlters(alters []kadm.AlterConfig) string {
	parts := make([]string, len(alters))
	for i, a := range alters {
		if a.Op == kadm.DeleteConfig {
			parts[i] = "-" + a.Name
		} else {
			parts[i] = a.Name + "=" + *a.Value
		}
	}
	return strings.Join(parts, ", ")
}

func newTopicDeleteCmd(opts *clientOptions) *cobra.Command {
	var ifExists bool
	cmd := &cobra.Command{
		Use:     "delete TOPIC...",
		Aliases: []string{"rm"},
		Short:   "Delete topics and all their records",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, topics []string) error {
			ctx, cancel := signalContext(cmd)
			defer cancel()
			adm, err := opts.newAdmin(ctx)
			if err != nil {
				return err
			}
			defer adm.Close()
			resps, err := adm.DeleteTopics(ctx, topics...)
			if err != nil {
				return fmt.Errorf("delete topics: %w", err)
			}
			out := cmd.OutOrStdout()
			var failed []error
			for _, r := range resps.Sorted() {
				if r.Err != nil {
					if isUnknownTopic(r.Err) {
						if ifExists {
							fmt.Fprintf(out, "topic %s does not exist\n", r.Topic)
							continue
						}
						failed = append(failed, unknownTopicError(r.Topic))
						continue
					}
					failed = append(failed, fmt.Errorf("topic %s: %w", r.Topic, kafkaError(r.Err, r.ErrMessage)))
					continue
				}
				fmt.Fprintf(out, "deleted topic %s\n", r.Topic)
			}
			return errors.Join(failed...)
		},
	}
	cmd.Flags().BoolVar(&ifExists, "if-exists", false, "succeed when the topic does not exist")
	return cmd
}

// printCleaner prints the cleaner state of topic's partitions as the admin
// endpoints report it (GET /v1/cleaner?topic=T): each broker reports the
// logs it cleans (local) and the remote logs it compacts as leader (remote).
// An endpoint that does not answer is noted (not at all when quiet and none
// answered: the default endpoint is only a guess), never an error.
// localDefaultSeeds reports whether the command talks to the default
// broker, localhost:9092, whose admin endpoint is the default one.
func localDefaultSeeds(opts *clientOptions) bool {
	seeds, err := opts.seeds()
	return err == nil && len(seeds) == 1 && (seeds[0] == defaultBrokers || seeds[0] == "127.0.0.1:9092")
}

func printCleaner(ctx context.Context, w io.Writer, admins []string, topic string, quiet bool) {
	type row struct {
		broker.CleanerStatus
		admin string
	}
	var all []row
	var notes []string
	for _, a := range admins {
		st, err := fetchCleaner(ctx, a, topic)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %v", a, err))
			continue
		}
		for _, s := range st {
			all = append(all, row{s, a})
		}
	}
	slices.SortStableFunc(all, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Tier, b.Tier))
	})
	several := len(admins) > 1
	if len(all) == 0 && quiet {
		return
	}
	fmt.Fprintln(w)
	if len(all) == 0 {
		fmt.Fprintf(w, "Cleaner: no state reported (%s)\n", strings.Join(append(notes, "no partition of the topic on these brokers"), "; "))
		return
	}
	tw := newTable(w)
	head := "PARTITION\tTIER\tCLEANUP.POLICY\tDIRTY-RATIO\tDIRTY-BYTES\tFIRST-DIRTY\tLAST-CLEANED\tERROR"
	if several {
		head = "PARTITION\tADMIN\tTIER\tCLEANUP.POLICY\tDIRTY-RATIO\tDIRTY-BYTES\tFIRST-DIRTY\tLAST-CLEANED\tERROR" // one row per replica
	}
	fmt.Fprintln(tw, head)
	for _, s := range all {
		last := "never"
		if s.LastCleaned != nil {
			last = s.LastCleaned.UTC().Format(time.RFC3339)
		}
		admin := ""
		if several {
			admin = s.admin + "\t"
		}
		fmt.Fprintf(tw, "%d\t%s%s\t%s\t%.3f\t%d\t%d\t%s\t%s\n", s.Partition, admin, s.Tier, s.Policy, s.DirtyRatio, s.DirtyBytes, s.FirstDirty, last, s.LastError)
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintf(w, "(not reached: %s)\n", n)
	}
}

func fetchCleaner(ctx context.Context, addr, topic string) ([]broker.CleanerStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/cleaner?topic="+url.QueryEscape(topic), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	var out []broker.CleanerStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
