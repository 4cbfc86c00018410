package group

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestUniformSticky: 8 members share 64 partitions 8 each; a ninth joins.
// The uniform assignor balances (7 or 8 each) and moves only the 7
// partitions the new member needs. Then one member leaves: only its
// partitions move.
func TestUniformSticky(t *testing.T) {
	parts := map[string]int32{"t": 64}
	topics := []string{"t"}
	var ids []string
	for i := 0; i < 8; i++ {
		ids = append(ids, fmt.Sprintf("m%d", i))
	}
	subs := func(string) []string { return ids }
	first := assignUniform(ids, topics, parts, subs, nil)
	for _, id := range ids {
		if len(first[id]) != 8 {
			t.Fatalf("%s has %d partitions", id, len(first[id]))
		}
	}
	moved := func(a, b map[string]partSet) int {
		n := 0
		for id, set := range b {
			for tp := range set {
				if _, ok := a[id][tp]; !ok {
					n++
				}
			}
		}
		return n
	}
	ids = append(ids, "m8")
	second := assignUniform(ids, topics, parts, subs, first)
	total := 0
	for _, id := range ids {
		if n := len(second[id]); n < 7 || n > 8 {
			t.Fatalf("%s has %d partitions after the join", id, n)
		}
		total += len(second[id])
	}
	if total != 64 {
		t.Fatalf("%d partitions assigned", total)
	}
	if n := moved(first, second); n != 7 {
		t.Fatalf("%d partitions moved on join, want 7", n)
	}
	ids = append(ids[:3:3], ids[4:]...) // m3 leaves
	delete(second, "m3")
	third := assignUniform(ids, topics, parts, subs, second)
	if n := moved(second, third); n != 8 && n != 7 {
		t.Fatalf("%d partitions moved on leave, want m3's", n)
	}
	for _, id := range ids {
		if len(third[id]) != 8 {
			t.Fatalf("%s has %d partitions after the leave", id, len(third[id]))
		}
	}
}

// TestUniformHeterogeneous: members subscribe to different topics; each
// partition goes to a member that subscribes to its topic, evenly.
func TestUniformHeterogeneous(t *testing.T) {
	parts := map[string]int32{"a": 4, "b": 2}
	subs := func(topic string) []string {
		if topic == "a" {
			return []string{"x", "y"}
		}
		return []string{"y", "z"}
	}
	out := assignUniform([]string{"x", "y", "z"}, []string{"a", "b"}, parts, subs, nil)
	for tp := range out["x"] {
		if tp.topic != "a" {
			t.Fatalf("x got %v", tp)
		}
	}
	for tp := range out["z"] {
		if tp.topic != "b" {
			t.Fatalf("z got %v", tp)
		}
	}
	if len(out["x"])+len(out["y"])+len(out["z"]) != 6 || len(out["x"]) != 2 || len(out["y"]) != 2 || len(out["z"]) != 2 {
		t.Fatalf("unbalanced: %v", out)
	}
}

func TestRangeAssignor(t *testing.T) {
	out := assignRange([]string{"a", "b", "c"}, []string{"t"}, map[string]int32{"t": 8}, func(string) []string { return []string{"a", "b", "c"} })
	want := map[string]string{"a": "[t/0 t/1 t/2]", "b": "[t/3 t/4 t/5]", "c": "[t/6 t/7]"}
	for id, w := range want {
		set := map[string][]int32{}
		for tp := range out[id] {
			set[tp.topic] = append(set[tp.topic], tp.partition)
		}
		if got := fmtParts(set); got != w {
			t.Errorf("%s: %s, want %s", id, got, w)
		}
	}
}

// TestUniformProperties checks the uniform assignor on random groups
// (members joining and leaving, heterogeneous subscriptions, previous
// targets naming partitions that no longer exist or are no longer
// subscribed): every partition of a topic with a subscriber in the group
// goes to exactly one subscriber and nothing else is assigned; no partition
// could move to a subscriber with at least two fewer (the balance pass's
// end). (Before the assignor's rewrite for large groups, 3000 such random
// cases gave exactly the old assignor's targets.)
func TestUniformProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for iter := range 2000 {
		var ids []string
		for i := range 1 + rng.IntN(15) {
			ids = append(ids, fmt.Sprintf("m%02d", i))
		}
		var topics []string
		parts := map[string]int32{}
		subsOf := map[string][]string{}
		for i := range 1 + rng.IntN(6) {
			name := fmt.Sprintf("t%d", i)
			topics = append(topics, name)
			parts[name] = int32(rng.IntN(30))
			for _, id := range ids {
				if iter%2 == 0 || rng.IntN(3) > 0 {
					subsOf[name] = append(subsOf[name], id)
				}
			}
		}
		prev := map[string]partSet{}
		for _, id := range ids {
			ps := partSet{}
			for range rng.IntN(12) {
				ps[topicPartition{fmt.Sprintf("t%d", rng.IntN(len(topics)+1)), int32(rng.IntN(35))}] = struct{}{}
			}
			prev[id] = ps
		}
		out := assignUniform(ids, topics, parts, func(t string) []string { return subsOf[t] }, prev)
		subscribed := func(id, topic string) bool { return slices.Contains(subsOf[topic], id) }
		owner := map[topicPartition]string{}
		total := 0
		for _, id := range ids {
			for tp := range out[id] {
				if o, dup := owner[tp]; dup {
					t.Fatalf("iter %d: %v assigned to %s and %s", iter, tp, o, id)
				}
				if !subscribed(id, tp.topic) || tp.partition >= parts[tp.topic] || parts[tp.topic] == 0 {
					t.Fatalf("iter %d: %s got %v", iter, id, tp)
				}
				owner[tp] = id
				total++
			}
		}
		want := 0
		for _, topic := range topics {
			if len(subsOf[topic]) > 0 {
				want += int(parts[topic])
			}
		}
		if total != want {
			t.Fatalf("iter %d: %d partitions assigned, want %d", iter, total, want)
		}
		for tp, from := range owner {
			for _, to := range subsOf[tp.topic] {
				if len(out[to]) < len(out[from])-1 {
					t.Fatalf("iter %d: %v could move from %s (%d) to %s (%d)", iter, tp, from, len(out[from]), to, len(out[to]))
				}
			}
		}
	}
}

// BenchmarkAssignUniform: one target assignment of a 1000-member group
// subscribing to one topic of 10000 partitions, the members' previous
// targets those of 999 of them (a member joins), and of a group whose
// members subscribe to a random half of 100 topics of 100 partitions each.
// Beside it, the machine's pace for the same partitions: sorting them
// (sortTPs), which any assignor that orders partitions does at least once.
func BenchmarkAssignUniform(b *testing.B) {
	var ids []string
	for i := range 1000 {
		ids = append(ids, fmt.Sprintf("member-%04d", i))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	hetero := map[string][]string{}
	var heteroTopics []string
	heteroParts := map[string]int32{}
	for i := range 100 {
		name := fmt.Sprintf("t%03d", i)
		heteroTopics = append(heteroTopics, name)
		heteroParts[name] = 100
		for _, id := range ids {
			if rng.IntN(2) == 0 {
				hetero[name] = append(hetero[name], id)
			}
		}
	}
	for _, c := range []struct {
		name   string
		topics []string
		parts  map[string]int32
		subs   func(string) []string
	}{
		{"homogeneous", []string{"t"}, map[string]int32{"t": 10000}, func(string) []string { return ids }},
		{"heterogeneous", heteroTopics, heteroParts, func(t string) []string { return hetero[t] }},
	} {
		b.Run(c.name, func(b *testing.B) {
			prev := assignUniform(ids[:999], c.topics, c.parts, c.subs, nil)
			var all []topicPartition
			for _, t := range c.topics {
				for p := range c.parts[t] {
					all = append(all, topicPartition{t, p})
				}
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				assignUniform(ids, c.topics, c.parts, c.subs, prev)
			}
			per := time.Since(start) / time.Duration(b.N)
			b.StopTimer()
			sortStart := time.Now()
			const sorts = 20
			for range sorts {
				tps := slices.Clone(all)
				rng.Shuffle(len(tps), func(i, j int) { tps[i], tps[j] = tps[j], tps[i] })
				sortTPs(tps)
			}
			sortPer := time.Since(sortStart) / sorts
			b.ReportMetric(float64(per.Microseconds()), "µs/assignment")
			b.ReportMetric(float64(per)/float64(sortPer), "ratio-of-sort")
		})
	}
}
