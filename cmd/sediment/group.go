package main

// sediment group list|describe|reset-offsets|delete: consumer group
// administration through kadm (ListGroups, DescribeGroups,
// ConsumerGroupDescribe, OffsetFetch, ListOffsets, OffsetCommit,
// DeleteGroups), as kafka-consumer-groups does.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

func newGroupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "List, describe, reset offsets of and delete consumer groups",
	}
	opts := addClientFlags(cmd)
	cmd.AddCommand(
		newGroupListCmd(opts),
		newGroupDescribeCmd(opts),
		newGroupResetCmd(opts),
		newGroupDeleteCmd(opts),
	)
	return cmd
}

func withAdmin(cmd *cobra.Command, opts *clientOptions, fn func(ctx context.Context, adm *kadm.Client) error) error {
	ctx, cancel := signalContext(cmd)
	defer cancel()
	adm, err := opts.newAdmin(ctx)
	if err != nil {
		return err
	}
	defer adm.Close()
	return fn(ctx, adm)
}

func newGroupListCmd(opts *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List groups with their type and state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				groups, err := adm.ListGroups(ctx)
				if err != nil {
					return fmt.Errorf("list groups: %w", err)
				}
				w := newTable(cmd.OutOrStdout())
				fmt.Fprintln(w, "GROUP\tTYPE\tPROTOCOL-TYPE\tSTATE")
				for _, g := range groups.Sorted() {
					typ := g.GroupType
					if typ == "" {
						typ = "classic"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", g.Group, typ, g.ProtocolType, g.State)
				}
				return w.Flush()
			})
		},
	}
}

// groupInfo is what describe and reset-offsets need of a group, whichever
// protocol it speaks.
type groupInfo struct {
	name, typ, state, protocol string
	members                    []memberInfo
	owner                      map[string]map[int32]*memberInfo
}

type memberInfo struct {
	id, instance, clientID, host string
	assigned                     map[string][]int32
}

func describeGroup(ctx context.Context, adm *kadm.Client, group string) (*groupInfo, error) {
	gi := &groupInfo{name: group, owner: map[string]map[int32]*memberInfo{}}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	lg, ok := listed[group]
	if !ok {
		return nil, &brokerError{code: kerr.GroupIDNotFound, message: fmt.Sprintf("group %q does not exist", group)}
	}
	gi.typ, gi.state = lg.GroupType, lg.State
	if gi.typ == "consumer" {
		ds, err := adm.DescribeConsumerGroups(ctx, group)
		if err != nil {
			return nil, fmt.Errorf("describe group: %w", err)
		}
		d := ds[group]
		if d.Err != nil {
			return nil, fmt.Errorf("describe group %s: %w", group, d.Err)
		}
		gi.state, gi.protocol = d.State, d.AssignorName
		for _, m := range d.Members {
			mi := memberInfo{id: m.MemberID, clientID: m.ClientID, host: m.ClientHost, assigned: map[string][]int32{}}
			if m.InstanceID != nil {
				mi.instance = *m.InstanceID
			}
			for t, ps := range m.Assignment {
				for p := range ps {
					mi.assigned[t] = append(mi.assigned[t], p)
				}
			}
			gi.members = append(gi.members, mi)
		}
	} else {
		gi.typ = "classic"
		ds, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return nil, fmt.Errorf("describe group: %w", err)
		}
		d := ds[group]
		if d.Err != nil {
			return nil, fmt.Errorf("describe group %s: %w", group, d.Err)
		}
		gi.state, gi.protocol = d.State, d.Protocol
		for _, m := range d.Members {
			mi := memberInfo{id: m.MemberID, clientID: m.ClientID, host: m.ClientHost, assigned: map[string][]int32{}}
			if m.InstanceID != nil {
				mi.instance = *m.InstanceID
			}
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					mi.assigned[t.Topic] = append(mi.assigned[t.Topic], t.Partitions...)
				}
			}
			gi.members = append(gi.members, mi)
		}
	}
	for i := range gi.members {
		m := &gi.members[i]
		for t, ps := range m.assigned {
			sort.Slice(ps, func(a, b int) bool { return ps[a] < ps[b] })
			if gi.owner[t] == nil {
				gi.owner[t] = map[int32]*memberInfo{}
			}
			for _, p := range ps {
				gi.owner[t][p] = m
			}
		}
	}
	return gi, nil
}

func fmtAssignment(a map[string][]int32) string {
	var topics []string
	for t := range a {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	var parts []string
	for _, t := range topics {
		var ps []string
		for _, p := range a[t] {
			ps = append(ps, fmt.Sprint(p))
		}
		parts = append(parts, t+":"+strings.Join(ps, ","))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newGroupDescribeCmd(opts *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "describe GROUP...",
		Short: "Show a group's members and, per partition, committed offset, log end offset and lag",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, groups []string) error {
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				for i, g := range groups {
					if i > 0 {
						fmt.Fprintln(cmd.OutOrStdout())
					}
					if err := describeOne(ctx, adm, cmd.OutOrStdout(), g); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
}

func describeOne(ctx context.Context, adm *kadm.Client, out io.Writer, group string) error {
	gi, err := describeGroup(ctx, adm, group)
	if err != nil {
		return err
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return fmt.Errorf("fetch offsets of %s: %w", group, err)
	}
	if err := offs.Error(); err != nil {
		return fmt.Errorf("fetch offsets of %s: %w", group, err)
	}
	topicSet := map[string]bool{}
	offs.Each(func(o kadm.OffsetResponse) { topicSet[o.Topic] = true })
	for t := range gi.owner {
		topicSet[t] = true
	}
	var topics []string
	for t := range topicSet {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	ends := kadm.ListedOffsets{}
	if len(topics) > 0 {
		if ends, err = adm.ListEndOffsets(ctx, topics...); err != nil {
			return fmt.Errorf("list end offsets: %w", err)
		}
	}
	fmt.Fprintf(out, "GROUP %s  TYPE %s  STATE %s  ASSIGNOR %s  MEMBERS %d\n", gi.name, gi.typ, gi.state, orDash(gi.protocol), len(gi.members))
	w := newTable(out)
	if len(gi.members) > 0 {
		fmt.Fprintln(w, "MEMBER-ID\tINSTANCE-ID\tCLIENT-ID\tHOST\tASSIGNMENT")
		for _, m := range gi.members {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.id, orDash(m.instance), m.clientID, m.host, fmtAssignment(m.assigned))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tMEMBER-ID\tCLIENT-ID\tHOST")
	var total int64
	for _, t := range topics {
		parts := map[int32]bool{}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic == t {
				parts[o.Partition] = true
			}
		})
		var ps []int32
		for p := range parts {
			_, committed := offs.Lookup(t, p)
			if committed || gi.owner[t][p] != nil {
				ps = append(ps, p)
			}
		}
		sort.Slice(ps, func(a, b int) bool { return ps[a] < ps[b] })
		for _, p := range ps {
			committed, lag := "-", "-"
			end, _ := ends.Lookup(t, p)
			if o, ok := offs.Lookup(t, p); ok && o.At >= 0 {
				committed = fmt.Sprint(o.At)
				l := max(end.Offset-o.At, 0)
				total += l
				lag = fmt.Sprint(l)
			}
			mid, cid, host := "-", "-", "-"
			if m := gi.owner[t][p]; m != nil {
				mid, cid, host = m.id, m.clientID, m.host
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", t, p, committed, end.Offset, lag, mid, cid, host)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "TOTAL LAG %d\n", total)
	return nil
}

func newGroupResetCmd(opts *clientOptions) *cobra.Command {
	var (
		topics   []string
		all      bool
		earliest bool
		latest   bool
		toOffset int64
		datetime string
		shiftBy  int64
		execute  bool
		dryRun   bool
	)
	cmd := &cobra.Command{
		Use:   "reset-offsets GROUP",
		Short: "Reset a group's committed offsets (the group must be empty); a dry run unless --execute",
		Example: `  sediment group reset-offsets orders-app --topic orders --to-earliest
  sediment group reset-offsets orders-app --all-topics --to-datetime 2026-11-29T12:00:00Z --execute
  sediment group reset-offsets orders-app --topic orders --shift-by -100 --execute`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group := args[0]
			n := 0
			for _, set := range []bool{earliest, latest, cmd.Flags().Changed("to-offset"), datetime != "", cmd.Flags().Changed("shift-by")} {
				if set {
					n++
				}
			}
			if n != 1 {
				return errors.New("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by")
			}
			if (len(topics) == 0) == !all {
				return errors.New("give --topic (repeatable) or --all-topics")
			}
			if execute && dryRun && cmd.Flags().Changed("dry-run") {
				return errors.New("--dry-run and --execute exclude each other")
			}
			var ts int64
			if datetime != "" {
				t, err := time.Parse(time.RFC3339, datetime)
				if err != nil {
					return fmt.Errorf("--to-datetime %q: want RFC 3339 (2026-11-29T12:00:00Z): %w", datetime, err)
				}
				ts = t.UnixMilli()
			}
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				gi, err := describeGroup(ctx, adm, group)
				if err != nil {
					return err
				}
				if !strings.EqualFold(gi.state, "Empty") {
					return fmt.Errorf("group %s is %s with %d members: offsets can only be reset when the group is empty (stop its consumers first)", group, gi.state, len(gi.members))
				}
				offs, err := adm.FetchOffsets(ctx, group)
				if err != nil {
					return fmt.Errorf("fetch offsets: %w", err)
				}
				if err := offs.Error(); err != nil {
					return fmt.Errorf("fetch offsets: %w", err)
				}
				ts2 := topics
				if all {
					seen := map[string]bool{}
					offs.Each(func(o kadm.OffsetResponse) {
						if !seen[o.Topic] {
							seen[o.Topic] = true
							ts2 = append(ts2, o.Topic)
						}
					})
					sort.Strings(ts2)
					if len(ts2) == 0 {
						return fmt.Errorf("group %s has no committed offsets: name the topics with --topic", group)
					}
				}
				starts, err := adm.ListStartOffsets(ctx, ts2...)
				if err != nil {
					return fmt.Errorf("list start offsets: %w", err)
				}
				ends, err := adm.ListEndOffsets(ctx, ts2...)
				if err != nil {
					return fmt.Errorf("list end offsets: %w", err)
				}
				if err := ends.Error(); err != nil {
					return fmt.Errorf("list end offsets: %w", err)
				}
				var byTime kadm.ListedOffsets
				if datetime != "" {
					if byTime, err = adm.ListOffsetsAfterMilli(ctx, ts, ts2...); err != nil {
						return fmt.Errorf("list offsets by time: %w", err)
					}
				}
				plan := kadm.Offsets{}
				w := newTable(cmd.OutOrStdout())
				fmt.Fprintln(w, "TOPIC\tPARTITION\tCURRENT\tNEW")
				var sorted []kadm.ListedOffset
				ends.Each(func(o kadm.ListedOffset) { sorted = append(sorted, o) })
				sort.Slice(sorted, func(i, j int) bool {
					if sorted[i].Topic != sorted[j].Topic {
						return sorted[i].Topic < sorted[j].Topic
					}
					return sorted[i].Partition < sorted[j].Partition
				})
				for _, lo := range sorted {
					start, _ := starts.Lookup(lo.Topic, lo.Partition)
					cur := int64(-1)
					o, committed := offs.Lookup(lo.Topic, lo.Partition)
					if committed {
						cur = o.At
					} else if all {
						// As kafka-consumer-groups.sh: --all-topics is
						// the partitions the group has offsets for.
						continue
					}
					var target int64
					switch {
					case earliest:
						target = start.Offset
					case latest:
						target = lo.Offset
					case datetime != "":
						target = lo.Offset
						if bt, ok := byTime.Lookup(lo.Topic, lo.Partition); ok && bt.Err == nil && bt.Offset >= 0 {
							target = bt.Offset
						}
					case cmd.Flags().Changed("to-offset"):
						target = toOffset
					default:
						base := cur
						if base < 0 {
							base = start.Offset
						}
						target = base + shiftBy
					}
					target = min(max(target, start.Offset), lo.Offset)
					plan.AddOffset(lo.Topic, lo.Partition, target, -1)
					curS := "-"
					if cur >= 0 {
						curS = fmt.Sprint(cur)
					}
					fmt.Fprintf(w, "%s\t%d\t%s\t%d\n", lo.Topic, lo.Partition, curS, target)
				}
				if err := w.Flush(); err != nil {
					return err
				}
				if !execute {
					fmt.Fprintln(cmd.OutOrStdout(), "dry run: nothing changed (add --execute to apply)")
					return nil
				}
				resps, err := adm.CommitOffsets(ctx, group, plan)
				if err != nil {
					return fmt.Errorf("commit offsets: %w", err)
				}
				if err := resps.Error(); err != nil {
					return fmt.Errorf("commit offsets: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "offsets of group %s reset\n", group)
				return nil
			})
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVarP(&topics, "topic", "t", nil, "topic whose offsets to reset (repeatable)")
	fs.BoolVar(&all, "all-topics", false, "reset every partition the group has committed offsets for")
	fs.BoolVar(&earliest, "to-earliest", false, "reset to the log start offset")
	fs.BoolVar(&latest, "to-latest", false, "reset to the log end offset")
	fs.Int64Var(&toOffset, "to-offset", 0, "reset to this offset (clamped to the log's range)")
	fs.StringVar(&datetime, "to-datetime", "", "reset to the first offset at or after this time (RFC 3339)")
	fs.Int64Var(&shiftBy, "shift-by", 0, "move the committed offset by this many (negative: back)")
	fs.BoolVar(&execute, "execute", false, "apply the plan")
	fs.BoolVar(&dryRun, "dry-run", true, "only show the plan (the default)")
	return cmd
}

func newGroupDeleteCmd(opts *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "delete GROUP...",
		Short: "Delete empty groups and their committed offsets",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, groups []string) error {
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				resps, err := adm.DeleteGroups(ctx, groups...)
				if err != nil {
					return fmt.Errorf("delete groups: %w", err)
				}
				var failed []error
				for _, g := range groups {
					r := resps[g]
					if r.Err != nil {
						failed = append(failed, fmt.Errorf("%s: %w", g, r.Err))
						continue
					}
					fmt.Fprintf(cmd.OutOrStdout(), "deleted group %s\n", g)
				}
				return errors.Join(failed...)
			})
		},
	}
}
