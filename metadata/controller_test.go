package metadata

import (
	"fmt"
	"slices"
	"testing"
)

// rebalanceState is a cluster for TestPlanLeaderRebalance at time now:
// brokers 1-3 live, broker 4 registered and fenced, and
//
//	a-0..9  replicas [1 2 3], led by 1 but a-0 by 2: broker 1 at 1/10
//	b-0..9  replicas [2 3 1], led by 2 but b-0, b-1 and b-2 by 3, with 2
//	        out of b-2's ISR: broker 2 at 3/10
//	c-0     replicas [4 1 2], ISR [1], no leader: a clean election
//	d-0     replicas [4 2], ISR [4], no leader, unclean election enabled
//
// With balanced, a-0, b-0, b-1 and b-2 are led by their preferred replica
// and c, d are left out. With many, e-0..999 (replicas [3 1 2], led by 1)
// are added. Broker expired's last heartbeat is a session ago.
func rebalanceState(now int64, balanced, many bool, expired int32) *State {
	st := newState()
	for id := int32(1); id <= 4; id++ {
		hb := now
		if id == expired {
			hb = now - defaultSessionTimeoutMs - 1
		}
		st.putBroker(&Broker{ID: id, Epoch: int64(id), Fenced: id == 4, LastHeartbeatMs: hb})
	}
	n := byte(0)
	topic := func(name string, configs map[string]string, parts ...*Partition) {
		n++
		for i, p := range parts {
			p.Index = int32(i)
			p.LeaderEpoch, p.PartitionEpoch = 1, 1
		}
		st.putTopic(&Topic{ID: UUID{n}, Name: name, Configs: configs, Partitions: parts})
	}
	part := func(replicas, isr []int32, leader int32) *Partition {
		return &Partition{Replicas: replicas, ISR: isr, Leader: leader}
	}
	var a, b []*Partition
	for range 10 {
		a = append(a, part([]int32{1, 2, 3}, []int32{1, 2, 3}, 1))
		b = append(b, part([]int32{2, 3, 1}, []int32{2, 3, 1}, 2))
	}
	if !balanced {
		a[0].Leader = 2
		b[0].Leader, b[1].Leader = 3, 3
		b[2].Leader, b[2].ISR = 3, []int32{3, 1}
	}
	topic("a", nil, a...)
	topic("b", nil, b...)
	if !balanced {
		topic("c", nil, part([]int32{4, 1, 2}, []int32{1}, NoLeader))
		topic("d", map[string]string{ConfigUncleanLeaderElection: "true"}, part([]int32{4, 2}, []int32{4}, NoLeader))
	}
	if many {
		var e []*Partition
		for range 1000 {
			e = append(e, part([]int32{3, 1, 2}, []int32{3, 1, 2}, 1))
		}
		topic("e", nil, e...)
	}
	return st
}

// TestPlanLeaderRebalance: leadership goes back to preferred replicas only
// at a leader imbalance check, an interval after an imbalance was first
// seen, and then only for brokers above the allowed imbalance; elections
// of partitions with no leader (clean or unclean) happen at once whatever
// the check's state; auto.leader.rebalance.enable=false never moves
// leadership back.
func TestPlanLeaderRebalance(t *testing.T) {
	const now, interval = int64(1_000_000), int64(300_000)
	on := rebalance{enabled: true, intervalMs: interval, percentage: 10}
	with := func(pct int) rebalance { r := on; r.percentage = pct; return r }
	off := rebalance{enabled: false, intervalMs: interval, percentage: 10}
	leaderless := []string{"c-0 leader=1 isr=[1]", "d-0 leader=2 isr=[2]"}
	plus := func(more ...string) []string { return append(slices.Clone(leaderless), more...) }
	for _, tc := range []struct {
		name             string
		balanced, many   bool
		expired          int32
		rb               rebalance
		due              int64
		want             []string // sorted descriptions (describe)
		wantDue          int64
		wantMovesAtLeast int // with many: preferred moves, beyond want's
	}{
		{name: "an imbalance schedules a check an interval on; nothing moves back yet",
			rb: on, due: 0, want: leaderless, wantDue: now + interval},
		{name: "before the check is due nothing moves back",
			rb: on, due: now + 1, want: leaderless, wantDue: now + 1},
		{name: "at the check: brokers above 10%; broker 1 at 10% stays, b-2's preferred replica is out of its ISR",
			rb: on, due: now, want: plus("b-0 leader=2 isr=[2 3 1]", "b-1 leader=2 isr=[2 3 1]"), wantDue: 0},
		{name: "a check overdue runs the same",
			rb: on, due: now - interval, want: plus("b-0 leader=2 isr=[2 3 1]", "b-1 leader=2 isr=[2 3 1]"), wantDue: 0},
		{name: "0%: every partition whose preferred replica may lead (KRaft's rule)",
			rb: with(0), due: now, want: plus("a-0 leader=1 isr=[1 2 3]", "b-0 leader=2 isr=[2 3 1]", "b-1 leader=2 isr=[2 3 1]"), wantDue: 0},
		{name: "30%: broker 2 at 3/10 is not above it",
			rb: with(30), due: now, want: leaderless, wantDue: 0},
		{name: "29%: broker 2 at 3/10 is above it",
			rb: with(29), due: now, want: plus("b-0 leader=2 isr=[2 3 1]", "b-1 leader=2 isr=[2 3 1]"), wantDue: 0},
		{name: "disabled: nothing scheduled, nothing moves back, leaderless partitions still elected",
			rb: off, due: 0, want: leaderless, wantDue: 0},
		{name: "disabled with a check that was due: nothing moves back",
			rb: off, due: now, want: leaderless, wantDue: 0},
		{name: "balanced: no check scheduled",
			balanced: true, rb: on, due: 0, want: nil, wantDue: 0},
		{name: "balanced at a due check: nothing to do, none scheduled after it",
			balanced: true, rb: on, due: now, want: nil, wantDue: 0},
		{name: "an expired session is fenced first; the check keeps its time",
			expired: 3, rb: on, due: now, want: []string{"fence 3"}, wantDue: now},
		{name: "more moves than a pass proposes: the check runs again on the next tick",
			many: true, rb: on, due: now, want: nil, wantDue: now, wantMovesAtLeast: maxControllerProposals - len(leaderless) - 2}, // b-0, b-1 come before e
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := rebalanceState(now, tc.balanced, tc.many, tc.expired)
			cmds, due := planLeadership(st, now, renewedAtHeartbeat(st, now-interval), tc.rb, tc.due)
			var got []string
			for _, c := range cmds {
				if f, ok := c.(*FenceBroker); ok {
					got = append(got, fmt.Sprintf("fence %d", f.BrokerID))
					continue
				}
				got = append(got, describe(st, c))
			}
			slices.Sort(got)
			if tc.many {
				if len(cmds) != maxControllerProposals {
					t.Fatalf("%d commands, want the cap %d", len(cmds), maxControllerProposals)
				}
				if !slices.Contains(got, leaderless[0]) || !slices.Contains(got, leaderless[1]) {
					t.Errorf("leaderless partitions not elected first: %v", got[:5])
				}
				moves := 0
				for _, g := range got {
					if g[0] == 'e' {
						moves++
					}
				}
				if moves < tc.wantMovesAtLeast {
					t.Errorf("%d preferred moves of e, want at least %d", moves, tc.wantMovesAtLeast)
				}
			} else if want := slices.Sorted(slices.Values(tc.want)); !slices.Equal(got, want) {
				t.Errorf("planned %q, want %q", got, want)
			}
			if due != tc.wantDue {
				t.Errorf("next check due at %d, want %d", due, tc.wantDue)
			}
		})
	}
}

// renewedAtHeartbeat is planLeadership's renewed for tests whose one clock
// stands for both the proposer's and the controller's: a broker's session
// was renewed at its LastHeartbeatMs, or at since (the takeover) when that
// is later.
func renewedAtHeartbeat(st *State, since int64) func(int32) int64 {
	return func(id int32) int64 {
		b, _ := st.Broker(id)
		return max(b.LastHeartbeatMs, since)
	}
}
