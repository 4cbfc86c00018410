package metadata

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/hashicorp/raft"
)

// TestFSM runs the scripts in testdata/fsm against the state machine. Every
// command goes through EncodeCommand, a raft.Log and fsm.ApplyBatch, exactly
// as in a node. Regenerate expectations with -rewrite.
//
// Script commands (ids of topics and incarnations are names, turned into
// UUIDs by nameUUID; a broker or partition epoch left out means "current"):
//
//	register id= inc= [rack=] [prev=] now=      heartbeat id= [epoch=] now= [want-fenced]
//	fence id= [epoch=]  unfence id= [epoch=]    shutdown id= [epoch=]
//	create-topic name= [id=]  (input: one replica list per line, "1,2,3")
//	delete-topic name=  create-partitions name= count= (input: new replica lists)
//	alter-configs type=topic|broker name= [replace] (input: "set k v" / "delete k")
//	isr topic= p= [le=] [pe=] leader= isr=1,2 [broker-epochs=] [unclean]
//	commit-remote topic= p= [le=] expect= key= start= end= [lkind= lres= lholder= ltoken= now=]
//	alloc-pids id= [epoch=] count=
//	acquire kind= res= holder= now= ttl=   renew ... token=   release kind= res= holder= token=
//	raw hex=    state    plan now= [since=]    snapshot-roundtrip
func TestFSM(t *testing.T) {
	datadriven.Walk(t, "testdata/fsm", func(t *testing.T, path string) {
		h := &fsmHarness{f: newFSM(testLogger(t), nil)}
		datadriven.RunTest(t, path, h.handle)
	})
}

type fsmHarness struct {
	f     *fsm
	index uint64
}

func nameUUID(name string) UUID {
	var u UUID
	copy(u[:], name)
	return u
}

func (h *fsmHarness) apply(data []byte) (Result, error) {
	h.index++
	out := h.f.ApplyBatch([]*raft.Log{{Index: h.index, Type: raft.LogCommand, Data: data}})
	r := out[0].(applyResponse)
	return r.result, r.err
}

func (h *fsmHarness) run(cmd Command) string {
	res, err := h.apply(EncodeCommand(cmd))
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok" + fmtResult(res)
}

func fmtResult(r Result) string {
	var b strings.Builder
	if r.BrokerEpoch != 0 {
		fmt.Fprintf(&b, " broker-epoch=%d", r.BrokerEpoch)
	}
	if r.Fenced {
		b.WriteString(" fenced")
	}
	if r.ProducerIDCount != 0 {
		fmt.Fprintf(&b, " pids=[%d,+%d)", r.ProducerIDStart, r.ProducerIDCount)
	}
	if r.LeaseToken != 0 {
		fmt.Fprintf(&b, " token=%d expires=%d", r.LeaseToken, r.LeaseExpiresMs)
	}
	if r.ManifestVersion != 0 {
		fmt.Fprintf(&b, " manifest-version=%d", r.ManifestVersion)
	}
	if r.LeaderEpoch != 0 || r.PartitionEpoch != 0 {
		fmt.Fprintf(&b, " le=%d pe=%d", r.LeaderEpoch, r.PartitionEpoch)
	}
	return b.String()
}

func (h *fsmHarness) handle(t *testing.T, td *datadriven.TestData) string {
	st := h.f.current()
	str := func(key string) string {
		for _, a := range td.CmdArgs {
			if a.Key == key {
				return strings.Join(a.Vals, ",")
			}
		}
		return ""
	}
	has := func(key string) bool { return td.HasArg(key) }
	num := func(key string, def int64) int64 {
		if !has(key) {
			return def
		}
		v, err := strconv.ParseInt(str(key), 10, 64)
		if err != nil {
			td.Fatalf(t, "%s: %v", key, err)
		}
		return v
	}
	// plan runs the controller's planLeadership at now=, since= (when it
	// took over), the scripts' one clock standing for both the proposer's
	// (heartbeats' now=, LastHeartbeatMs) and the controller's monotonic
	// one: a broker's session was renewed at its LastHeartbeatMs, or at
	// since= when that is later. due= is when a leader imbalance check is due (0, the
	// default: none is scheduled, so leadership does not go back to
	// preferred replicas), pct= the imbalance allowed per broker (10),
	// rebalance=off disables the check (TestPlanLeaderRebalance has the
	// check's timing).
	plan := func() []Command {
		rb := rebalance{enabled: str("rebalance") != "off", intervalMs: 300_000, percentage: int(num("pct", 10))}
		cmds, _ := planLeadership(st, num("now", 0), renewedAtHeartbeat(st, num("since", 0)), rb, num("due", 0))
		return cmds
	}
	brokerEpoch := func() int64 {
		if b, ok := st.Broker(int32(num("id", -1))); ok {
			return num("epoch", b.Epoch)
		}
		return num("epoch", 0)
	}
	partition := func() (*Topic, *Partition) {
		tp, ok := st.Topic(str("topic"))
		if !ok {
			return &Topic{ID: nameUUID(str("topic"))}, &Partition{Index: int32(num("p", 0))}
		}
		p, ok := st.Partition(tp.ID, int32(num("p", 0)))
		if !ok {
			return tp, &Partition{Index: int32(num("p", 0))}
		}
		return tp, p
	}
	switch td.Cmd {
	case "register":
		return h.run(&RegisterBroker{BrokerID: int32(num("id", 0)), IncarnationID: nameUUID(str("inc")), Rack: str("rack"),
			PreviousBrokerEpoch: num("prev", -1), NowMs: num("now", 0),
			Listeners: []Listener{{Name: "PLAINTEXT", Host: "localhost", Port: int32(9092 + num("id", 0))}}})
	case "heartbeat":
		return h.run(&BrokerHeartbeat{BrokerID: int32(num("id", 0)), BrokerEpoch: brokerEpoch(), NowMs: num("now", 0), WantFenced: has("want-fenced")})
	case "fence":
		return h.run(&FenceBroker{BrokerID: int32(num("id", 0)), BrokerEpoch: brokerEpoch()})
	case "unfence":
		return h.run(&UnfenceBroker{BrokerID: int32(num("id", 0)), BrokerEpoch: brokerEpoch()})
	case "shutdown":
		return h.run(&ControlledShutdown{BrokerID: int32(num("id", 0)), BrokerEpoch: brokerEpoch()})
	case "unregister":
		return h.run(&UnregisterBroker{BrokerID: int32(num("id", 0))})
	case "create-topic":
		id := str("id")
		if id == "" {
			id = str("name")
		}
		return h.run(&CreateTopic{Name: str("name"), TopicID: nameUUID(id), Assignment: parseAssignment(t, td), Configs: parseConfigs(td)})
	case "delete-topic":
		return h.run(&DeleteTopic{Name: str("name")})
	case "create-partitions":
		return h.run(&CreatePartitions{Name: str("name"), Count: int32(num("count", 0)), Assignment: parseAssignment(t, td)})
	case "alter-configs":
		c := &AlterConfigs{ResourceType: ResourceTopic, ResourceName: str("name"), Replace: has("replace")}
		if str("type") == "broker" {
			c.ResourceType = ResourceBroker
		}
		for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
			f := strings.SplitN(line, " ", 3)
			if line == "" {
				f = nil
			}
			switch {
			case len(f) == 3 && f[0] == "set":
				c.Ops = append(c.Ops, ConfigOp{Key: f[1], Value: f[2]})
			case len(f) == 2 && f[0] == "delete":
				c.Ops = append(c.Ops, ConfigOp{Key: f[1], Delete: true})
			case len(f) == 0:
			default:
				td.Fatalf(t, "bad config op %q", line)
			}
		}
		return h.run(c)
	case "isr":
		tp, p := partition()
		c := &ChangeLeaderAndISR{TopicID: tp.ID, Partition: p.Index, LeaderEpoch: int32(num("le", int64(p.LeaderEpoch))),
			PartitionEpoch: int32(num("pe", int64(p.PartitionEpoch))), Leader: int32(num("leader", -1)), ISR: parseInt32s(t, td, str("isr")),
			Unclean: has("unclean")}
		if be := str("broker-epochs"); be != "" {
			for _, v := range parseInt32s(t, td, be) {
				c.BrokerEpochs = append(c.BrokerEpochs, int64(v))
			}
		}
		return h.run(c)
	case "reassign":
		tp, p := partition()
		var target []int32
		if str("target") != "" {
			target = parseInt32s(t, td, str("target"))
		}
		return h.run(&AlterReassignment{TopicID: tp.ID, Partition: p.Index, Target: target})
	case "commit-remote":
		tp, p := partition()
		return h.run(&CommitRemoteLog{TopicID: tp.ID, Partition: p.Index, LeaderEpoch: int32(num("le", int64(p.LeaderEpoch))),
			ExpectedManifestVersion: num("expect", 0), ManifestKey: str("key"), StartOffset: num("start", 0), EndOffset: num("end", 0),
			Lease: LeaseFence{Kind: str("lkind"), Resource: str("lres"), Holder: str("lholder"), Token: uint64(num("ltoken", 0))}, NowMs: num("now", 0),
			DeleteRemoteLog: has("delete"), TruncateRemoteLog: has("truncate")})
	case "alloc-pids":
		return h.run(&AllocateProducerIDs{BrokerID: int32(num("id", 0)), BrokerEpoch: brokerEpoch(), Count: int32(num("count", 0))})
	case "acquire":
		return h.run(&AcquireLease{Kind: str("kind"), Resource: str("res"), Holder: str("holder"), NowMs: num("now", 0), TTLMs: num("ttl", 0)})
	case "renew":
		return h.run(&RenewLease{Kind: str("kind"), Resource: str("res"), Holder: str("holder"), Token: uint64(num("token", 0)), NowMs: num("now", 0), TTLMs: num("ttl", 0)})
	case "release":
		return h.run(&ReleaseLease{Kind: str("kind"), Resource: str("res"), Holder: str("holder"), Token: uint64(num("token", 0))})
	case "raw":
		var data []byte
		if _, err := fmt.Sscanf(str("hex"), "%x", &data); err != nil {
			td.Fatalf(t, "hex: %v", err)
		}
		_, err := h.apply(data)
		if err != nil {
			return "error: " + err.Error()
		}
		return "ok"
	case "state":
		return st.String()
	case "plan":
		var b strings.Builder
		for _, c := range plan() {
			fmt.Fprintf(&b, "%s %s\n", c.Type(), describe(st, c))
		}
		if b.Len() == 0 {
			return "nothing\n"
		}
		return b.String()
	case "apply-plan":
		var b strings.Builder
		for _, c := range plan() {
			fmt.Fprintf(&b, "%s %s: %s\n", c.Type(), describe(st, c), h.run(c))
		}
		return b.String()
	case "snapshot-roundtrip":
		enc := EncodeSnapshot(st)
		back, err := DecodeSnapshot(enc)
		if err != nil {
			return "error: " + err.Error()
		}
		if back.String() != st.String() {
			return fmt.Sprintf("MISMATCH\n%s\nvs\n%s", st, back)
		}
		return fmt.Sprintf("ok %d bytes", len(enc))
	default:
		td.Fatalf(t, "unknown command %q", td.Cmd)
		return ""
	}
}

func describe(st *State, c Command) string {
	switch c := c.(type) {
	case *FenceBroker:
		return fmt.Sprintf("broker=%d", c.BrokerID)
	case *ChangeLeaderAndISR:
		t, _ := st.TopicByID(c.TopicID)
		return fmt.Sprintf("%s-%d leader=%d isr=%v", t.Name, c.Partition, c.Leader, c.ISR)
	}
	return ""
}

func parseInt32s(t *testing.T, td *datadriven.TestData, s string) []int32 {
	var out []int32
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			td.Fatalf(t, "bad id %q", f)
		}
		out = append(out, int32(v))
	}
	return out
}

func parseAssignment(t *testing.T, td *datadriven.TestData) [][]int32 {
	var out [][]int32
	for _, line := range strings.Split(td.Input, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.Contains(line, "=") {
			continue
		}
		out = append(out, parseInt32s(t, td, line))
	}
	return out
}

// parseConfigs reads "k=v" lines of a create-topic input.
func parseConfigs(td *datadriven.TestData) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(td.Input, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	return m
}
