package group

import (
	"fmt"
	"testing"
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
