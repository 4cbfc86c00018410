package main

// sediment topic reassign / reassignments: moving replicas
// (AlterPartitionReassignments, ListPartitionReassignments, KIP-455), with
// the replication throttles of KIP-73 as kafka-reassign-partitions
// --throttle sets them.

import (
	"context"
	"errors"
	"fmt"
	"io"
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
)

const (
	leaderThrottledRate       = "leader.replication.throttled.rate"
	followerThrottledRate     = "follower.replication.throttled.rate"
	leaderThrottledReplicas   = "leader.replication.throttled.replicas"
	followerThrottledReplicas = "follower.replication.throttled.replicas"
)

func newTopicReassignCmd(opts *clientOptions) *cobra.Command {
	var (
		throttle      int64
		noWait        bool
		cancelParts   []int32
		clearThrottle bool
		rf            int
		drain         []int32
		dryRun        bool
	)
	cmd := &cobra.Command{
		Use:   "reassign TOPIC [PARTITION=BROKER,BROKER...]...",
		Short: "Move partitions' replicas to other brokers, optionally throttled",
		Long: `Reassign moves each named partition's replicas to the brokers listed (the
first is the preferred leader), as kafka-reassign-partitions does. New replicas
copy the partition from the leader, join the in-sync replicas, and then the
replicas not listed are removed.

--throttle BYTES_PER_SECOND limits that copy (KIP-73): the moving partitions'
current replicas are listed in leader.replication.throttled.replicas and their
new ones in follower.replication.throttled.replicas, and the cluster-wide
leader. and follower.replication.throttled.rate are set. Only replicas out of
the ISR are throttled. Once every move is complete the command removes these
configs again (as kafka-reassign-partitions --verify does); with --no-wait it
returns at once and leaves them: remove them later with --clear-throttle.

Instead of assignments, --replication-factor N and --drain-broker ID (either
or both) make the plan, as kafka-reassign-partitions --generate does: every
partition of the topic loses the drained brokers and gets or drops replicas to
have N (the current count without --replication-factor). A replica added goes
to a live broker the partition lacks, one of a rack the partition is not on
first, then the one holding the fewest replicas in the cluster; a replica
dropped is the last listed (the least preferred). --dry-run prints the plan
and changes nothing. Raising the replication factor of __consumer_offsets or
__transaction_state after the cluster has grown is one command.

Without --no-wait the command waits until every move is complete, printing
progress, and is stopped only by Ctrl-C (the moves go on without it).`,
		Example: `  sediment topic reassign orders 0=2,3,4 1=3,4,1 --throttle 50000000
  sediment topic reassign __consumer_offsets --replication-factor 3
  sediment topic reassign orders --drain-broker 4 --dry-run
  sediment topic reassign orders --cancel 1
  sediment topic reassign orders --clear-throttle
  sediment topic reassignments`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			targets, err := parseAssignments(args[1:])
			if err != nil {
				return err
			}
			generate := rf != 0 || len(drain) > 0
			modes := 0
			for _, b := range []bool{len(targets) > 0, len(cancelParts) > 0, clearThrottle, generate} {
				if b {
					modes++
				}
			}
			if modes != 1 {
				return errors.New("give either PARTITION=BROKERS... assignments, --replication-factor and/or --drain-broker, --cancel PARTITION or --clear-throttle")
			}
			if rf < 0 || rf > 32767 {
				return fmt.Errorf("--replication-factor %d: want 1 to 32767", rf)
			}
			if dryRun && !generate {
				return errors.New("--dry-run prints the plan of --replication-factor or --drain-broker")
			}
			if throttle < 0 {
				return errors.New("--throttle must be a positive number of bytes per second")
			}
			ctx, cancel := signalContext(cmd)
			defer cancel()
			adm, err := opts.newAdmin(ctx)
			if err != nil {
				return err
			}
			defer adm.Close()
			out := cmd.OutOrStdout()
			switch {
			case clearThrottle:
				if err := clearThrottles(ctx, adm, topic); err != nil {
					return err
				}
				fmt.Fprintf(out, "removed the replication throttles of topic %s and the cluster-wide throttle rates\n", topic)
				return nil
			case len(cancelParts) > 0:
				var req kadm.AlterPartitionAssignmentsReq
				for _, p := range cancelParts {
					req.CancelAssign(topic, p)
				}
				return alterAssignments(ctx, out, adm, req, "cancelled the reassignment of")
			}

			md, err := adm.Metadata(ctx, topic)
			if generate && err == nil {
				md, err = adm.Metadata(ctx) // every topic: the brokers' load
			}
			if err != nil {
				return err
			}
			td, ok := md.Topics[topic]
			if !ok || td.Err != nil {
				if ok && !isUnknownTopic(td.Err) {
					return fmt.Errorf("topic %s: %w", topic, td.Err)
				}
				return unknownTopicError(topic)
			}
			if generate {
				targets, err = planReassignment(md, td, rf, drain)
				if err != nil {
					return fmt.Errorf("topic %s: %w", topic, err)
				}
				for _, p := range sortedKeys32(targets) {
					fmt.Fprintf(out, "%s-%d: replicas %s -> %s\n", topic, p, joinInt32(td.Partitions[p].Replicas), joinInt32(targets[p]))
				}
				if len(targets) == 0 {
					fmt.Fprintf(out, "topic %s: nothing to move\n", topic)
					return nil
				}
				if dryRun {
					return nil
				}
			}
			for p := range targets {
				if _, ok := td.Partitions[p]; !ok {
					return fmt.Errorf("topic %s has no partition %d", topic, p)
				}
			}
			if throttle > 0 {
				if err := setThrottles(ctx, adm, topic, td, targets, throttle); err != nil {
					return err
				}
				fmt.Fprintf(out, "throttled the moving replicas to %d bytes/s\n", throttle)
			}
			var req kadm.AlterPartitionAssignmentsReq
			for p, brokers := range targets {
				req.Assign(topic, p, brokers)
			}
			if err := alterAssignments(ctx, out, adm, req, "reassigning"); err != nil {
				if throttle > 0 {
					if cerr := clearThrottles(ctx, adm, topic); cerr != nil {
						err = errors.Join(err, cerr)
					}
				}
				return err
			}
			if noWait {
				if throttle > 0 {
					fmt.Fprintf(out, "the throttles stay until: sediment topic reassign %s --clear-throttle\n", topic)
				}
				return nil
			}
			if err := waitReassigned(ctx, out, adm, topic, targets); err != nil {
				return err
			}
			if throttle > 0 {
				if err := clearThrottles(ctx, adm, topic); err != nil {
					return err
				}
				fmt.Fprintln(out, "removed the throttles")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&throttle, "throttle", 0, "limit the copy to new replicas to this many bytes per second (leader and follower side)")
	f.BoolVar(&noWait, "no-wait", false, "return once the moves are accepted")
	f.Int32SliceVar(&cancelParts, "cancel", nil, "cancel the reassignment in progress of these partitions")
	f.BoolVar(&clearThrottle, "clear-throttle", false, "remove the topic's replication throttles and the cluster-wide throttle rates")
	f.IntVar(&rf, "replication-factor", 0, "plan the moves that give every partition this many replicas")
	f.Int32SliceVar(&drain, "drain-broker", nil, "plan the moves that take every replica of the topic off these brokers")
	f.BoolVar(&dryRun, "dry-run", false, "print the plan of --replication-factor / --drain-broker and change nothing")
	return cmd
}

// planReassignment plans the moves of topic td (md: the cluster's brokers
// and every topic, for the load) that give each partition rf replicas (its
// current count when rf is 0) on none of the drained brokers. Replicas kept
// keep their order (the preferred leader stays first unless drained);
// dropped ones are the last listed; added ones go last, each to a broker
// the partition lacks: of a rack the partition is not on first, then with
// the fewest replicas in the cluster, then the lowest id. Partitions left as
// they are are not in the plan.
func planReassignment(md kadm.Metadata, td kadm.TopicDetail, rf int, drain []int32) (map[int32][]int32, error) {
	load := map[int32]int{}
	rack := map[int32]string{}
	var brokers []int32
	for _, b := range md.Brokers {
		if slices.Contains(drain, b.NodeID) {
			continue
		}
		brokers = append(brokers, b.NodeID)
		load[b.NodeID] = 0
		if b.Rack != nil {
			rack[b.NodeID] = *b.Rack
		}
	}
	slices.Sort(brokers)
	known := map[int32]bool{}
	for _, b := range md.Brokers {
		known[b.NodeID] = true
	}
	for _, t := range md.Topics {
		for _, p := range t.Partitions {
			for _, r := range p.Replicas {
				known[r] = true // a broker that is down still holds replicas
				if _, ok := load[r]; ok {
					load[r]++
				}
			}
		}
	}
	for _, id := range drain {
		if !known[id] {
			return nil, fmt.Errorf("--drain-broker %d: no such broker (none is live with that id, and no replica is on it)", id)
		}
	}
	out := map[int32][]int32{}
	for _, p := range sortedKeys32(td.Partitions) {
		cur := td.Partitions[p].Replicas
		want := rf
		if want == 0 {
			want = len(cur)
		}
		if want > len(brokers) {
			return nil, fmt.Errorf("replication factor %d needs %d brokers; %d are live and not drained", want, want, len(brokers))
		}
		var next []int32
		for _, r := range cur {
			if !slices.Contains(drain, r) {
				next = append(next, r)
			}
		}
		for len(next) > want {
			dropped := next[len(next)-1]
			next = next[:len(next)-1]
			if _, ok := load[dropped]; ok {
				load[dropped]--
			}
		}
		for len(next) < want {
			racks := map[string]bool{}
			for _, r := range next {
				if rk, ok := rack[r]; ok {
					racks[rk] = true
				}
			}
			best := int32(-1)
			better := func(c int32) bool {
				if best < 0 {
					return true
				}
				if cn, bn := racks[rack[c]] && rack[c] != "", racks[rack[best]] && rack[best] != ""; cn != bn {
					return !cn
				}
				return load[c] < load[best]
			}
			for _, c := range brokers { // ascending ids: the lowest wins a tie
				if !slices.Contains(next, c) && better(c) {
					best = c
				}
			}
			next = append(next, best)
			load[best]++
		}
		if !slices.Equal(next, cur) {
			out[p] = next
		}
	}
	return out, nil
}

// parseAssignments reads PARTITION=BROKER,BROKER... arguments.
func parseAssignments(args []string) (map[int32][]int32, error) {
	out := map[int32][]int32{}
	for _, a := range args {
		ps, bs, ok := strings.Cut(a, "=")
		p, err := strconv.ParseInt(ps, 10, 32)
		if !ok || err != nil || p < 0 {
			return nil, fmt.Errorf("%q: want PARTITION=BROKER[,BROKER]", a)
		}
		if _, dup := out[int32(p)]; dup {
			return nil, fmt.Errorf("partition %d given twice", p)
		}
		var brokers []int32
		for _, s := range strings.Split(bs, ",") {
			b, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
			if err != nil || b < 0 {
				return nil, fmt.Errorf("%q: %q is not a broker id", a, s)
			}
			if slices.Contains(brokers, int32(b)) {
				return nil, fmt.Errorf("%q: broker %d listed twice", a, b)
			}
			brokers = append(brokers, int32(b))
		}
		out[int32(p)] = brokers
	}
	return out, nil
}

func alterAssignments(ctx context.Context, out io.Writer, adm *kadm.Client, req kadm.AlterPartitionAssignmentsReq, verb string) error {
	resps, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		return fmt.Errorf("alter partition assignments: %w", err)
	}
	var failed []error
	for _, r := range resps.Sorted() {
		if r.Err != nil {
			failed = append(failed, fmt.Errorf("%s-%d: %w", r.Topic, r.Partition, kafkaError(r.Err, r.ErrMessage)))
			continue
		}
		fmt.Fprintf(out, "%s %s-%d\n", verb, r.Topic, r.Partition)
	}
	return errors.Join(failed...)
}

// setThrottles lists the moving partitions' current replicas for the leader
// side and their new ones for the follower side, and sets both rates as the
// cluster default.
func setThrottles(ctx context.Context, adm *kadm.Client, topic string, td kadm.TopicDetail, targets map[int32][]int32, rate int64) error {
	var leaders, followers []string
	for _, p := range sortedKeys32(targets) {
		cur := td.Partitions[p].Replicas
		for _, r := range cur {
			leaders = append(leaders, fmt.Sprintf("%d:%d", p, r))
		}
		for _, r := range targets[p] {
			if !slices.Contains(cur, r) {
				followers = append(followers, fmt.Sprintf("%d:%d", p, r))
			}
		}
	}
	lv, fv := strings.Join(leaders, ","), strings.Join(followers, ",")
	if err := checkAlter(adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: leaderThrottledReplicas, Value: &lv},
		{Op: kadm.SetConfig, Name: followerThrottledReplicas, Value: &fv},
	}, topic)); err != nil {
		return fmt.Errorf("topic %s: setting the throttled replicas: %w", topic, err)
	}
	rs := strconv.FormatInt(rate, 10)
	if err := checkAlter(adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: leaderThrottledRate, Value: &rs},
		{Op: kadm.SetConfig, Name: followerThrottledRate, Value: &rs},
	})); err != nil {
		return fmt.Errorf("setting the cluster-wide throttle rates: %w", err)
	}
	return nil
}

func clearThrottles(ctx context.Context, adm *kadm.Client, topic string) error {
	err1 := checkAlter(adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.DeleteConfig, Name: leaderThrottledReplicas},
		{Op: kadm.DeleteConfig, Name: followerThrottledReplicas},
	}, topic))
	if isUnknownTopic(err1) {
		err1 = nil // deleted since: its configs went with it
	}
	if err1 != nil {
		err1 = fmt.Errorf("topic %s: removing the throttled replicas: %w", topic, err1)
	}
	err2 := checkAlter(adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.DeleteConfig, Name: leaderThrottledRate},
		{Op: kadm.DeleteConfig, Name: followerThrottledRate},
	}))
	if err2 != nil {
		err2 = fmt.Errorf("removing the cluster-wide throttle rates: %w", err2)
	}
	return errors.Join(err1, err2)
}

func checkAlter(resps kadm.AlterConfigsResponses, err error) error {
	if err != nil {
		return err
	}
	var failed []error
	for _, r := range resps {
		if r.Err != nil {
			failed = append(failed, kafkaError(r.Err, r.ErrMessage))
		}
	}
	return errors.Join(failed...)
}

// waitReassigned polls until no partition of targets is being reassigned
// and each has its target replicas, all in sync; it prints each partition
// as it completes, and the progress every 10 seconds.
func waitReassigned(ctx context.Context, out io.Writer, adm *kadm.Client, topic string, targets map[int32][]int32) error {
	pending := map[int32]bool{}
	set := kadm.TopicsSet{topic: {}}
	for p := range targets {
		pending[p] = true
		set[topic][p] = struct{}{}
	}
	lastReport := time.Now()
	for {
		ls, lerr := adm.ListPartitionReassignments(ctx, set)
		md, merr := adm.Metadata(ctx, topic)
		if lerr == nil && merr == nil {
			td := md.Topics[topic]
			for _, p := range sortedKeys32(targets) {
				if !pending[p] {
					continue
				}
				_, moving := ls[topic][p]
				pd := td.Partitions[p]
				if !moving && slices.Equal(pd.Replicas, targets[p]) && len(pd.ISR) == len(pd.Replicas) {
					delete(pending, p)
					fmt.Fprintf(out, "%s-%d: done, replicas %s, leader %d\n", topic, p, joinInt32(pd.Replicas), pd.Leader)
				}
			}
			if len(pending) == 0 {
				return nil
			}
			if time.Since(lastReport) >= 10*time.Second {
				lastReport = time.Now()
				var ps []string
				for _, p := range sortedKeys32(targets) {
					if pending[p] {
						pd := td.Partitions[p]
						ps = append(ps, fmt.Sprintf("%d (replicas %s, in sync %s)", p, joinInt32(pd.Replicas), joinInt32(pd.ISR)))
					}
				}
				fmt.Fprintf(out, "waiting for %s %s\n", topic, strings.Join(ps, ", "))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting; the moves go on (follow them with sediment topic reassignments): %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func sortedKeys32[V any](m map[int32]V) []int32 {
	ks := make([]int32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// reassignmentsSet is every partition of topics, which must exist.
func reassignmentsSet(ctx context.Context, adm *kadm.Client, topics []string) (kadm.TopicsSet, error) {
	md, err := adm.Metadata(ctx, topics...)
	if err != nil {
		return nil, err
	}
	set := kadm.TopicsSet{}
	for _, t := range topics {
		td, ok := md.Topics[t]
		if !ok || td.Err != nil {
			return nil, unknownTopicError(t)
		}
		set[t] = map[int32]struct{}{}
		for p := range td.Partitions {
			set[t][p] = struct{}{}
		}
	}
	return set, nil
}

// listReassignments asks for the reassignments in progress of every
// partition of topics, or with none named of every topic: then the
// request's topics are null, which the brokers answer for the whole cluster
// (as Kafka; it needs DESCRIBE on the cluster, as any
// ListPartitionReassignments). Before, the set was built from the topics
// Metadata listed, which leaves out those the login may not DESCRIBE; for
// a login that could DESCRIBE none, kadm sent nothing and the command
// printed "no reassignment in progress".
func listReassignments(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topics []string, timeout time.Duration) (kadm.ListPartitionReassignmentsResponses, error) {
	req := kmsg.NewPtrListPartitionReassignmentsRequest()
	req.TimeoutMillis = int32(min(timeout, time.Hour) / time.Millisecond)
	if len(topics) > 0 {
		set, err := reassignmentsSet(ctx, adm, topics)
		if err != nil {
			return nil, err
		}
		for t, ps := range set {
			rt := kmsg.NewListPartitionReassignmentsRequestTopic()
			rt.Topic = t
			for p := range ps {
				rt.Partitions = append(rt.Partitions, p)
			}
			req.Topics = append(req.Topics, rt)
		}
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("ListPartitionReassignments: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		msg := "ListPartitionReassignments"
		if resp.ErrorMessage != nil && *resp.ErrorMessage != "" {
			msg += ": " + *resp.ErrorMessage
		} else if errors.Is(err, kerr.ClusterAuthorizationFailed) {
			msg += " refused: listing reassignments needs DESCRIBE on the cluster"
		}
		return nil, kafkaError(err, msg)
	}
	ls := kadm.ListPartitionReassignmentsResponses{}
	for _, rt := range resp.Topics {
		ps := map[int32]kadm.ListPartitionReassignmentsResponse{}
		ls[rt.Topic] = ps
		for _, rp := range rt.Partitions {
			ps[rp.Partition] = kadm.ListPartitionReassignmentsResponse{Topic: rt.Topic, Partition: rp.Partition,
				Replicas: rp.Replicas, AddingReplicas: rp.AddingReplicas, RemovingReplicas: rp.RemovingReplicas}
		}
	}
	return ls, nil
}

func newTopicReassignmentsCmd(opts *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "reassignments [TOPIC...]",
		Short: "List the reassignments in progress",
		RunE: func(cmd *cobra.Command, topics []string) error {
			ctx, cancel := signalContext(cmd)
			defer cancel()
			cl, err := opts.newClient(ctx)
			if err != nil {
				return err
			}
			adm := opts.admin(cl) // listReassignments needs cl too
			defer adm.Close()
			ls, err := listReassignments(ctx, cl, adm, topics, opts.timeout())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			rows := ls.Sorted()
			if len(rows) == 0 {
				fmt.Fprintln(out, "no reassignment in progress")
				return nil
			}
			tw := newTable(out)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tREPLICAS\tADDING\tREMOVING")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", r.Topic, r.Partition, joinInt32(r.Replicas), joinInt32(r.AddingReplicas), joinInt32(r.RemovingReplicas))
			}
			return tw.Flush()
		},
	}
}
