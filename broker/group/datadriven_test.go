package group

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDataDriven runs the scripts in testdata/: each command drives the
// coordinator with one kmsg request (or moves the fake clock) and prints
// the answer; answers of calls that wait (join, sync) are printed by the
// command after which they arrived. Regenerate with -rewrite.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		e := &env{t: t}
		defer e.close()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			out := e.run(td)
			if err := e.c.barrier(context.Background()); err != nil {
				t.Fatalf("barrier: %v", err)
			}
			for _, s := range e.calls.take() {
				out += s + "\n"
			}
			return out
		})
	})
}

type env struct {
	t     *testing.T
	cfg   Config
	clock *fakeClock
	logs  []*memLog
	c     *Coordinator
	calls *pendingCalls
	ids   int
	// topics backs Config.Topics (KIP-848 assignment needs partition counts).
	topics *testTopics
	// warnings keeps the coordinator's WARN and ERROR lines for the
	// "warnings" command.
	warnings warnRecorder
}

// warnRecorder is a slog.Handler that keeps the messages of WARN and ERROR
// records and drops the rest.
type warnRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnRecorder) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnRecorder) WithGroup(string) slog.Handler                { return w }
func (w *warnRecorder) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Level.String()+" "+r.Message)
	return nil
}

func (w *warnRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

func (e *env) close() {
	if e.c != nil {
		e.c.Close()
	}
}

type args map[string][]string

func parseArgs(td *datadriven.TestData) args {
	a := args{}
	for _, ca := range td.CmdArgs {
		a[ca.Key] = ca.Vals
	}
	return a
}

func (a args) str(k, def string) string {
	if v, ok := a[k]; ok && len(v) > 0 {
		return v[0]
	}
	return def
}

func (a args) ptr(k string) *string {
	if v, ok := a[k]; ok && len(v) > 0 {
		return &v[0]
	}
	return nil
}

func (a args) num(t *testing.T, k string, def int64) int64 {
	v, ok := a[k]
	if !ok || len(v) == 0 {
		return def
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", k, err)
	}
	return n
}

func (a args) dur(t *testing.T, k string, def time.Duration) time.Duration {
	v, ok := a[k]
	if !ok || len(v) == 0 {
		return def
	}
	d, err := time.ParseDuration(v[0])
	if err != nil {
		t.Fatalf("%s: %v", k, err)
	}
	return d
}

func (e *env) start() {
	e.c = New(e.cfg)
	for i, l := range e.logs {
		if err := <-e.c.Load(int32(i), l); err != nil {
			e.t.Fatalf("load: %v", err)
		}
	}
}

func (e *env) run(td *datadriven.TestData) string {
	t := e.t
	a := parseArgs(td)
	switch td.Cmd {
	case "new":
		e.close()
		e.clock = newFakeClock()
		e.calls = newPendingCalls()
		e.ids = 0
		e.cfg = Config{
			Logger:                 slog.New(&e.warnings),
			Partitions:             int32(a.num(t, "partitions", 1)),
			InitialRebalanceDelay:  a.dur(t, "delay", -1),
			MinSessionTimeout:      a.dur(t, "min-session", time.Second),
			MaxSessionTimeout:      a.dur(t, "max-session", time.Minute),
			MaxGroupSize:           int(a.num(t, "max-size", 0)),
			MaxMetadataBytes:       int(a.num(t, "max-metadata", 0)),
			OffsetsRetention:       a.dur(t, "retention", 24*time.Hour),
			RetentionCheckInterval: a.dur(t, "check", time.Hour),
			Clock:                  e.clock,
			newMemberID: func(client string) string {
				e.ids++
				return fmt.Sprintf("%s-%d", client, e.ids)
			},
		}
		e.topics = newTestTopics(a["topics"])
		if _, ok := a["topics"]; ok {
			e.cfg.Topics = e.topics
		}
		e.cfg.ConsumerSessionTimeout = a.dur(t, "cg-session", 45*time.Second)
		if n := a.num(t, "max-cg-record", 0); n > 0 {
			saved := maxConsumerValueBytes
			maxConsumerValueBytes = int(n)
			t.Cleanup(func() { maxConsumerValueBytes = saved })
		}
		policy, err := ParseMigrationPolicy(a.str("policy", "bidirectional"))
		if err != nil {
			t.Fatal(err)
		}
		e.cfg.MigrationPolicy = policy
		e.logs = nil
		for i := int32(0); i < e.cfg.Partitions; i++ {
			e.logs = append(e.logs, &memLog{})
		}
		e.start()
		return "ok\n"

	case "reload":
		// A new coordinator takes over the same partitions and replays them.
		e.c.Close()
		e.calls = newPendingCalls()
		e.start()
		return "ok\n"

	case "unload":
		e.c.Unload(int32(a.num(t, "partition", 0)))
		return "ok\n"

	case "advance":
		e.clock.Advance(a.dur(t, "d", 0))
		return fmt.Sprintf("now +%s\n", e.clock.Now().Sub(newFakeClock().now))

	case "warnings":
		// The WARN and ERROR lines logged since the last "warnings".
		if m := e.warnings.take(); len(m) > 0 {
			return strings.Join(m, "\n") + "\n"
		}
		return "none\n"

	case "fail-next-append":
		err := fmt.Errorf("injected: %w", ErrNotLeader)
		if _, ok := a["unavailable"]; ok {
			err = fmt.Errorf("injected: not enough replicas")
		}
		e.logs[a.num(t, "partition", 0)].failNext = err
		return "ok\n"

	case "log":
		var b strings.Builder
		for i, l := range e.logs {
			s := l.dump()
			if len(e.logs) > 1 && s != "" {
				fmt.Fprintf(&b, "partition %d:\n", i)
			}
			b.WriteString(s)
		}
		if b.Len() == 0 {
			return "(no new records)\n"
		}
		return b.String()

	case "waiting":
		return fmt.Sprintf("%v\n", e.calls.waitingNames())

	case "join":
		req := kmsg.NewPtrJoinGroupRequest()
		req.Version = int16(a.num(t, "v", 9))
		req.Group = a.str("group", "g")
		req.MemberID = a.str("member", "")
		req.InstanceID = a.ptr("instance")
		req.SessionTimeoutMillis = int32(a.dur(t, "session", 10*time.Second).Milliseconds())
		req.RebalanceTimeoutMillis = int32(a.dur(t, "rebalance", 20*time.Second).Milliseconds())
		req.ProtocolType = a.str("type", "consumer")
		protos := a["protos"]
		if protos == nil {
			protos = []string{"range"}
		}
		if _, ok := a["no-protos"]; ok {
			protos = nil
		}
		for _, p := range protos {
			rp := kmsg.NewJoinGroupRequestProtocol()
			rp.Name = p
			rp.Metadata = []byte(a.str("meta", p+"-md"))
			if topics, ok := a["topics"]; ok {
				md := kmsg.NewConsumerMemberMetadata()
				md.Topics = topics
				if n := a.num(t, "userdata", 0); n > 0 {
					md.UserData = make([]byte, n)
				}
				if owned, ok := a["owned"]; ok {
					// Version 1 carries the partitions the member owns
					// (cooperative rebalancing).
					md.Version = 1
					ts, parts := parseTPs(owned)
					for _, t := range ts {
						md.OwnedPartitions = append(md.OwnedPartitions, kmsg.ConsumerMemberMetadataOwnedPartition{Topic: t, Partitions: parts[t]})
					}
				}
				rp.Metadata = md.AppendTo(nil)
			}
			req.Protocols = append(req.Protocols, rp)
		}
		name := a.str("name", "join")
		client := Client{ClientID: a.str("client", "c"), Host: "/127.0.0.1"}
		if !e.calls.start(name) {
			t.Fatalf("%s: a call named %q is still waiting", td.Pos, name)
		}
		e.c.inLoop(func() {
			e.c.handleJoin(client, req, func(r *kmsg.JoinGroupResponse) { e.calls.finish(name, fmtJoin(r)) })
		})
		return ""

	case "sync":
		req := kmsg.NewPtrSyncGroupRequest()
		req.Version = int16(a.num(t, "v", 5))
		req.Group = a.str("group", "g")
		req.MemberID = a.str("member", "")
		req.InstanceID = a.ptr("instance")
		req.Generation = int32(a.num(t, "gen", 1))
		req.Protocol = a.ptr("proto")
		for _, as := range a["assign"] {
			id, val, _ := strings.Cut(as, ":")
			ga := kmsg.NewSyncGroupRequestGroupAssignment()
			ga.MemberID = id
			ga.MemberAssignment = []byte(val)
			req.GroupAssignment = append(req.GroupAssignment, ga)
		}
		// cassign=(m=a/0+a/1,...): ConsumerProtocol assignments.
		for _, as := range a["cassign"] {
			id, val, _ := strings.Cut(as, "=")
			ga := kmsg.NewSyncGroupRequestGroupAssignment()
			ga.MemberID = id
			ga.MemberAssignment = consumerAssignment(val)
			req.GroupAssignment = append(req.GroupAssignment, ga)
		}
		_, decode := a["decode"]
		name := a.str("name", "sync")
		if !e.calls.start(name) {
			t.Fatalf("%s: a call named %q is still waiting", td.Pos, name)
		}
		e.c.inLoop(func() {
			e.c.handleSync(req, func(r *kmsg.SyncGroupResponse) {
				if decode && r.ErrorCode == 0 {
					e.calls.finish(name, fmt.Sprintf("err=%s proto=%s assignment=%s", errName(r.ErrorCode), deref(r.Protocol), fmtConsumerAssignment(r.MemberAssignment)))
					return
				}
				e.calls.finish(name, fmt.Sprintf("err=%s assignment=%q", errName(r.ErrorCode), r.MemberAssignment))
			})
		})
		return ""

	case "heartbeat":
		req := kmsg.NewPtrHeartbeatRequest()
		req.Version = int16(a.num(t, "v", 4))
		req.Group = a.str("group", "g")
		req.MemberID = a.str("member", "")
		req.InstanceID = a.ptr("instance")
		req.Generation = int32(a.num(t, "gen", 1))
		r, err := e.c.Heartbeat(context.Background(), req)
		if err != nil {
			return err.Error() + "\n"
		}
		return fmt.Sprintf("err=%s\n", errName(r.ErrorCode))

	case "leave":
		req := kmsg.NewPtrLeaveGroupRequest()
		req.Version = int16(a.num(t, "v", 5))
		req.Group = a.str("group", "g")
		if req.Version < 3 {
			req.MemberID = a.str("member", "")
		}
		for _, id := range a["members"] {
			m := kmsg.NewLeaveGroupRequestMember()
			m.MemberID = id
			req.Members = append(req.Members, m)
		}
		for _, pair := range a["static"] {
			id, inst, _ := strings.Cut(pair, ":")
			m := kmsg.NewLeaveGroupRequestMember()
			m.MemberID = id
			m.InstanceID = &inst
			req.Members = append(req.Members, m)
		}
		for _, inst := range a["instances"] {
			m := kmsg.NewLeaveGroupRequestMember()
			inst := inst
			m.InstanceID = &inst
			req.Members = append(req.Members, m)
		}
		r, err := e.c.LeaveGroup(context.Background(), req)
		if err != nil {
			return err.Error() + "\n"
		}
		s := fmt.Sprintf("err=%s", errName(r.ErrorCode))
		for _, m := range r.Members {
			id := m.MemberID
			if m.InstanceID != nil {
				id += "(" + *m.InstanceID + ")"
			}
			s += fmt.Sprintf(" %s:%s", id, errName(m.ErrorCode))
		}
		return s + "\n"

	case "commit":
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version = int16(a.num(t, "v", 9))
		req.Group = a.str("group", "g")
		req.MemberID = a.str("member", "")
		req.InstanceID = a.ptr("instance")
		req.Generation = int32(a.num(t, "gen", -1))
		req.RetentionTimeMillis = a.num(t, "retention", -1)
		topics := map[string]int{}
		for _, o := range a["offsets"] {
			tp, off, _ := strings.Cut(o, "=")
			topic, part, _ := strings.Cut(tp, "/")
			pn, _ := strconv.Atoi(part)
			on, _ := strconv.ParseInt(off, 10, 64)
			i, ok := topics[topic]
			if !ok {
				rt := kmsg.NewOffsetCommitRequestTopic()
				rt.Topic = topic
				req.Topics = append(req.Topics, rt)
				i = len(req.Topics) - 1
				topics[topic] = i
			}
			p := kmsg.NewOffsetCommitRequestTopicPartition()
			p.Partition = int32(pn)
			p.Offset = on
			p.LeaderEpoch = int32(a.num(t, "epoch", -1))
			p.Metadata = a.ptr("meta")
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
		}
		r, err := e.c.OffsetCommit(context.Background(), req)
		if err != nil {
			return err.Error() + "\n"
		}
		var parts []string
		for _, rt := range r.Topics {
			for _, p := range rt.Partitions {
				parts = append(parts, fmt.Sprintf("%s/%d:%s", rt.Topic, p.Partition, errName(p.ErrorCode)))
			}
		}
		return strings.Join(parts, " ") + "\n"

	case "fetch":
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = int16(a.num(t, "v", 9))
		_, req.RequireStable = a["stable"]
		var topics []kmsg.OffsetFetchRequestTopic
		if _, all := a["all"]; !all {
			topics = []kmsg.OffsetFetchRequestTopic{}
			idx := map[string]int{}
			for _, tp := range a["topics"] {
				topic, part, _ := strings.Cut(tp, "/")
				pn, _ := strconv.Atoi(part)
				i, ok := idx[topic]
				if !ok {
					rt := kmsg.NewOffsetFetchRequestTopic()
					rt.Topic = topic
					topics = append(topics, rt)
					i = len(topics) - 1
					idx[topic] = i
				}
				topics[i].Partitions = append(topics[i].Partitions, int32(pn))
			}
		}
		groups := a["groups"]
		if groups == nil {
			groups = []string{a.str("group", "g")}
		}
		if req.Version >= 8 {
			for _, g := range groups {
				rg := kmsg.NewOffsetFetchRequestGroup()
				rg.Group = g
				rg.MemberID = a.ptr("member")
				rg.MemberEpoch = int32(a.num(t, "mepoch", -1))
				if topics != nil {
					rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{}
					for _, t := range topics {
						rg.Topics = append(rg.Topics, kmsg.OffsetFetchRequestGroupTopic{Topic: t.Topic, Partitions: t.Partitions})
					}
				}
				req.Groups = append(req.Groups, rg)
			}
		} else {
			req.Group = groups[0]
			req.Topics = topics
		}
		r, err := e.c.OffsetFetch(context.Background(), req)
		if err != nil {
			return err.Error() + "\n"
		}
		var b strings.Builder
		if req.Version >= 8 {
			for _, g := range r.Groups {
				fmt.Fprintf(&b, "group %s: err=%s\n", g.Group, errName(g.ErrorCode))
				for _, t := range g.Topics {
					for _, p := range t.Partitions {
						fmt.Fprintf(&b, "  %s/%d: %d epoch=%d meta=%q err=%s\n", t.Topic, p.Partition, p.Offset, p.LeaderEpoch, deref(p.Metadata), errName(p.ErrorCode))
					}
				}
			}
			return b.String()
		}
		fmt.Fprintf(&b, "err=%s\n", errName(r.ErrorCode))
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				fmt.Fprintf(&b, "  %s/%d: %d epoch=%d meta=%q err=%s\n", t.Topic, p.Partition, p.Offset, p.LeaderEpoch, deref(p.Metadata), errName(p.ErrorCode))
			}
		}
		return b.String()

	case "describe":
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Version = int16(a.num(t, "v", 5))
		req.Groups = a["groups"]
		r, err := e.c.DescribeGroups(context.Background(), req)
		if err != nil {
			return err.Error() + "\n"
		}
		var b strings.Builder
		for _, g := range r.Groups {
			fmt.Fprintf(&b, "%s: err=%s state=%s type=%q proto=%q\n", g.Group, errName(g.ErrorCode), g.State, g.ProtocolType, g.Protocol)
			for _, m := range g.Members {
				inst := ""
				if m.InstanceID != nil {
					inst = "(" + *m.InstanceID + ")"
				}
				fmt.Fprintf(&b, "  %s%s client=%s host=%s metadata=%q assignment=%q\n", m.MemberID, inst, m.ClientID, m.ClientHost, m.ProtocolMetadata, m.MemberAssignment)
			}
		}
		return b.String()

	case "list":
		req := kmsg.NewPtrListGroupsRequest()
		req.Version = int16(a.num(t, "v", 5))
		req.StatesFilter = a["states"]
		r, err := e.c.ListGroups(context.Background(), req)
		if err != nil {
			return err.Error() + "\n"
		}
		s := fmt.Sprintf("err=%s", errName(r.ErrorCode))
		for _, g := range r.Groups {
			s += fmt.Sprintf(" %s(%s,%s)", g.Group, g.ProtocolType, g.GroupState)
		}
		return s + "\n"

	case "delete":
		req := kmsg.NewPtrDeleteGroupsRequest()
		req.Version = int16(a.num(t, "v", 2))
		req.Groups = a["groups"]
		r, err := e.c.DeleteGroups(context.Background(), req)
		if err != nil {
			return err.Error() + "\n"
		}
		var parts []string
		for _, g := range r.Groups {
			parts = append(parts, fmt.Sprintf("%s:%s", g.Group, errName(g.ErrorCode)))
		}
		return strings.Join(parts, " ") + "\n"

	case "offset-delete":
		req := kmsg.NewPtrOffsetDeleteRequest()
		req.Group = a.str("group", "g")
		idx := map[string]int{}
		for _, tp := range a["offsets"] {
			topic, part, _ := strings.Cut(tp, "/")
			pn, _ := strconv.Atoi(part)
			i, ok := idx[topic]
			if !ok {
				req.Topics = append(req.Topics, kmsg.OffsetDeleteRequestTopic{Topic: topic})
				i = len(req.Topics) - 1
				idx[topic] = i
			}
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, kmsg.OffsetDeleteRequestTopicPartition{Partition: int32(pn)})
		}
		r, err := e.c.OffsetDelete(context.Background(), req)
		if err != nil {
			return err.Error() + "\n"
		}
		s := fmt.Sprintf("err=%s", errName(r.ErrorCode))
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				s += fmt.Sprintf(" %s/%d:%s", t.Topic, p.Partition, errName(p.ErrorCode))
			}
		}
		return s + "\n"

	case "state":
		var out string
		e.c.inLoop(func() { out = e.c.dumpGroup(a.str("group", "g")) })
		return out

	case "partition-for":
		return fmt.Sprintf("%d\n", PartitionFor(a.str("group", ""), int32(a.num(t, "n", 50))))

	default:
		if out, ok := e.runConsumer(td, a); ok {
			return out
		}
		t.Fatalf("unknown command %q", td.Cmd)
		return ""
	}
}

func fmtJoin(r *kmsg.JoinGroupResponse) string {
	s := fmt.Sprintf("err=%s gen=%d proto=%s leader=%s member=%s", errName(r.ErrorCode), r.Generation, deref(r.Protocol), r.LeaderID, r.MemberID)
	if r.SkipAssignment {
		s += " skip-assignment"
	}
	if len(r.Members) > 0 {
		var ms []string
		for _, m := range r.Members {
			id := m.MemberID
			if m.InstanceID != nil {
				id += "(" + *m.InstanceID + ")"
			}
			ms = append(ms, fmt.Sprintf("%s=%q", id, m.ProtocolMetadata))
		}
		s += " members=[" + strings.Join(ms, " ") + "]"
	}
	return s
}

// dumpGroup prints a group's internal state. Must run on the loop.
func (c *Coordinator) dumpGroup(id string) string {
	_, g, code := c.lookup(id)
	if code != 0 {
		return errName(code) + "\n"
	}
	if g == nil {
		return "no group\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: state=%s gen=%d type=%q proto=%q leader=%q\n", g.id, g.state, g.generation, g.protocolType, g.protocol, g.leader)
	for _, mid := range g.memberOrder() {
		m := g.members[mid]
		var flags []string
		if m.instanceID != nil {
			flags = append(flags, "instance="+*m.instanceID)
		}
		if m.joinReply != nil {
			flags = append(flags, "awaiting-join")
		}
		if m.syncReply != nil {
			flags = append(flags, "awaiting-sync")
		}
		if _, ok := g.pendingSync[mid]; ok {
			flags = append(flags, "pending-sync")
		}
		fmt.Fprintf(&b, "  member %s %s assignment=%q\n", mid, strings.Join(flags, " "), m.assignment)
	}
	var pend []string
	for id := range g.pending {
		pend = append(pend, id)
	}
	sortStrings(pend)
	for _, id := range pend {
		fmt.Fprintf(&b, "  pending %s\n", id)
	}
	for _, tp := range g.sortedOffsets() {
		o := g.offsets[tp]
		fmt.Fprintf(&b, "  offset %s/%d=%d\n", tp.topic, tp.partition, o.offset)
	}
	return b.String()
}
