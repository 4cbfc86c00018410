package broker

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestConsumerGroupMigration is a rolling upgrade of a group's consumers
// from the classic protocol to KIP-848 and back, with real franz-go
// clients and no downtime (Kafka 4.0's default
// group.consumer.migration.policy, bidirectional): two classic members
// consume; a KIP-848 member joins the running group, which becomes a
// consumer group with the classic members in it; one classic member
// leaves; the KIP-848 member leaves, which turns the group classic again
// with the remaining classic member. Records are produced in each phase and
// every one is consumed exactly once, in order per partition, and the
// committed offsets end at the log end.
func TestConsumerGroupMigration(t *testing.T) {
	for _, tc := range []struct {
		name     string
		balancer kgo.GroupBalancer
	}{
		{"cooperative-sticky", kgo.CooperativeStickyBalancer()},
		{"range", kgo.RangeBalancer()}, // eager: revokes everything before it rejoins
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := groupBroker(t, "")
			topic := "migrate-" + tc.name
			groupID := "gm-" + tc.name
			createTopic(t, b, topic, 8, nil)
			prod := newClient(t, b)
			adm := kadm.NewClient(newClient(t, b))
			tr := newTracker()
			classic := []kgo.Opt{kgo.Balancers(tc.balancer), kgo.FetchMaxPartitionBytes(2000)}
			next := []kgo.Opt{kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer(), kgo.FetchMaxPartitionBytes(2000)}

			total := 0
			phase := func(tag string, n int) {
				t.Helper()
				produceAll(t, prod, makeRecords(topic, n, tag))
				total += n
				tr.waitTotal(t, total)
			}
			groupType := func() string {
				lg, err := adm.ListGroups(testCtx(t))
				if err != nil {
					t.Fatal(err)
				}
				return lg[groupID].GroupType
			}
			// describe returns the member types (0 classic, 1 consumer) and
			// partition counts of a consumer group, nil while it is not one
			// or not stable.
			describe := func() map[string]string {
				req := kmsg.NewPtrConsumerGroupDescribeRequest()
				req.Version = 1
				req.Groups = []string{groupID}
				resp, err := req.RequestWith(testCtx(t), prod)
				if err != nil {
					t.Fatal(err)
				}
				g := resp.Groups[0]
				if g.ErrorCode != 0 || g.State != "Stable" {
					return nil
				}
				out := map[string]string{}
				for _, m := range g.Members {
					n := 0
					for _, tp := range m.Assignment.TopicPartitions {
						n += len(tp.Partitions)
					}
					out[m.MemberID] = fmt.Sprintf("type=%d partitions=%d", m.MemberType, n)
				}
				return out
			}

			a := startConsumer(t, b, groupID, topic, tr, classic...)
			c2 := startConsumer(t, b, groupID, topic, tr, classic...)
			phase("classic", 1000)
			if typ := groupType(); typ != "classic" {
				t.Fatalf("group type %q with two classic members", typ)
			}

			// A KIP-848 member joins the running classic group.
			n := startConsumer(t, b, groupID, topic, tr, next...)
			var last map[string]string
			waitCond(t, func() bool {
				last = describe()
				if len(last) != 3 {
					return false
				}
				types := map[string]int{}
				for _, s := range last {
					var typ, parts int
					fmt.Sscanf(s, "type=%d partitions=%d", &typ, &parts)
					if parts == 0 {
						return false
					}
					types[fmt.Sprint(typ)]++
				}
				return types["0"] == 2 && types["1"] == 1
			})
			t.Logf("mixed group: %v", last)
			phase("mixed", 1500)

			// A classic member leaves (LeaveGroup to a consumer group).
			a.stop()
			waitCond(t, func() bool { last = describe(); return len(last) == 2 })
			phase("after-classic-leave", 1000)

			// The last KIP-848 member leaves: the group turns classic.
			n.stop()
			waitCond(t, func() bool {
				if groupType() != "classic" {
					return false
				}
				d, err := adm.DescribeGroups(testCtx(t), groupID)
				if err != nil {
					t.Fatal(err)
				}
				g := d[groupID]
				return g.State == "Stable" && len(g.Members) == 1 && len(g.AssignedPartitions()[topic]) == 8
			})
			phase("classic-again", 1000)

			ends := endOffsets(t, b, topic)
			c2.stop()
			tr.exactlyOnce(t, ends, nil)
			if got := committed(t, b, groupID); fmt.Sprint(got) != fmt.Sprint(ends) {
				t.Fatalf("committed %v, want the end offsets %v", got, ends)
			}
		})
	}
}
