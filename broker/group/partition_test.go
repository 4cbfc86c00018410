package group

import "testing"

// Expected values computed with Java (String.hashCode, Math.abs, and
// Kafka's Utils.abs rule that Integer.MIN_VALUE maps to 0).
func TestPartitionFor(t *testing.T) {
	for _, tc := range []struct {
		group  string
		want50 int32
		want3  int32
	}{
		{"g", 3, 1},
		{"h", 4, 2},
		{"a", 47, 1},
		{"d", 0, 1},
		{"groupA", 24, 0},
		{"my-group", 12, 0},
		{"ünïcode", 16, 1},
		{"😀-emoji", 38, 2}, // a surrogate pair in UTF-16
		{"", 0, 0},
		{"polygenelubricants", 0, 0}, // hashCode is Integer.MIN_VALUE
		{"GydZG_", 0, 0},
		{"DESIGNING WORKHOUSES", 0, 0},
	} {
		if got := PartitionFor(tc.group, 50); got != tc.want50 {
			t.Errorf("PartitionFor(%q, 50) = %d, want %d", tc.group, got, tc.want50)
		}
		if got := PartitionFor(tc.group, 3); got != tc.want3 {
			t.Errorf("PartitionFor(%q, 3) = %d, want %d", tc.group, got, tc.want3)
		}
	}
}
