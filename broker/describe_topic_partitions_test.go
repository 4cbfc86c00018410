package broker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// describePages asks for topics page by page, following NextCursor, and
// returns each page as "topic:first-last" (or "topic:error") entries.
func describePages(t *testing.T, cl *kgo.Client, limit int32, topics ...string) [][]string {
	t.Helper()
	var pages [][]string
	var cursor *kmsg.DescribeTopicPartitionsRequestCursor
	for range 100 {
		req := kmsg.NewPtrDescribeTopicPartitionsRequest()
		req.ResponsePartitionLimit = limit
		req.Cursor = cursor
		for _, n := range topics {
			rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
			rt.Topic = n
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(testCtx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		var page []string
		for _, rt := range resp.Topics {
			switch {
			case rt.ErrorCode != 0:
				page = append(page, fmt.Sprintf("%s:%s", *rt.Topic, kerr.ErrorForCode(rt.ErrorCode).(*kerr.Error).Message))
			case len(rt.Partitions) == 0:
				page = append(page, *rt.Topic+":none")
			default:
				for i, p := range rt.Partitions {
					if p.Partition != rt.Partitions[0].Partition+int32(i) || p.LeaderID < 0 || len(p.ISR) != 1 || p.EligibleLeaderReplicas == nil {
						t.Fatalf("%s partition %+v", *rt.Topic, p)
					}
				}
				page = append(page, fmt.Sprintf("%s:%d-%d", *rt.Topic, rt.Partitions[0].Partition, rt.Partitions[len(rt.Partitions)-1].Partition))
				if rt.TopicID == ([16]byte{}) || rt.AuthorizedOperations == authorizedOpsUnknown {
					t.Fatalf("%s: id %x, operations %d", *rt.Topic, rt.TopicID, rt.AuthorizedOperations)
				}
			}
		}
		pages = append(pages, page)
		if resp.NextCursor == nil {
			return pages
		}
		cursor = &kmsg.DescribeTopicPartitionsRequestCursor{Topic: resp.NextCursor.Topic, Partition: resp.NextCursor.Partition}
	}
	t.Fatal("no end of the pages after 100")
	return nil
}

func pagesString(pages [][]string) string {
	var out []string
	for _, p := range pages {
		out = append(out, strings.Join(p, " "))
	}
	return strings.Join(out, " | ")
}

// TestDescribeTopicPartitions: KIP-966 paging as Kafka's handler cuts it
// (sorted by name, a page of at most the limit, the cursor where the next
// starts: mid-topic, or at the next topic when a page ends with one), named
// topics with unknown and invalid names, and the cursor's refusals.
func TestDescribeTopicPartitions(t *testing.T) {
	b := startBroker(t, "")
	createTopic(t, b, "dtp-c", 5, nil)
	createTopic(t, b, "dtp-a", 3, nil)
	createTopic(t, b, "dtp-b", 1, nil)
	cl := newClient(t, b)
	for _, tc := range []struct {
		limit  int32
		topics []string
		want   string
	}{
		{4, []string{"dtp-c", "dtp-a", "dtp-b"}, "dtp-a:0-2 dtp-b:0-0 | dtp-c:0-3 | dtp-c:4-4"},
		{100, []string{"dtp-b", "dtp-a"}, "dtp-a:0-2 dtp-b:0-0"},
		{2, []string{"dtp-a"}, "dtp-a:0-1 | dtp-a:2-2"},
		{0, []string{"dtp-b"}, "dtp-b:0-0"}, // at least one partition
		{100, []string{"dtp-a", "nope", "bad/name", "dtp-a"}, "bad/name:INVALID_TOPIC_EXCEPTION dtp-a:0-2 nope:UNKNOWN_TOPIC_OR_PARTITION"},
	} {
		if got := pagesString(describePages(t, cl, tc.limit, tc.topics...)); got != tc.want {
			t.Errorf("limit %d, topics %v: %s\nwant %s", tc.limit, tc.topics, got, tc.want)
		}
	}
	// Every topic (the coordinators' too, once created), sorted.
	all := pagesString(describePages(t, cl, 2000))
	if !strings.Contains(all, "dtp-a:0-2 dtp-b:0-0 dtp-c:0-4") {
		t.Errorf("all topics: %s", all)
	}

	// A cursor outside the named topics, or a negative partition.
	for _, cur := range []kmsg.DescribeTopicPartitionsRequestCursor{{Topic: "dtp-z"}, {Topic: "dtp-a", Partition: -1}} {
		req := kmsg.NewPtrDescribeTopicPartitionsRequest()
		req.Cursor = &cur
		for _, n := range []string{"dtp-a", "dtp-b"} {
			rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
			rt.Topic = n
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(testCtx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Topics) != 2 || resp.Topics[0].ErrorCode != kerr.InvalidRequest.Code || resp.Topics[1].ErrorCode != kerr.InvalidRequest.Code {
			t.Errorf("cursor %+v: %+v, want INVALID_REQUEST for both", cur, resp.Topics)
		}
	}
}

// TestDescribeTopicPartitionsAuthorization: a client sees only the topics
// it may describe; the others are not counted in a page nor named by a
// cursor, and named ones are TOPIC_AUTHORIZATION_FAILED.
func TestDescribeTopicPartitionsAuthorization(t *testing.T) {
	z := startAuthzBroker(t, false)
	z.createTopics("dtp-a", "dtp-b", "dtp-c")
	z.grant(kadm.NewACLs().Topics("dtp-a", "dtp-c").Allow("User:alice").Operations(kadm.OpDescribe))
	alice := z.user("alice")
	if got := pagesString(describePages(t, alice, 1)); got != "dtp-a:0-0 | dtp-c:0-0" {
		t.Errorf("alice, every topic a partition a page: %s", got)
	}
	if got := pagesString(describePages(t, alice, 10, "dtp-b", "dtp-c")); got != "dtp-c:0-0 dtp-b:TOPIC_AUTHORIZATION_FAILED" {
		t.Errorf("alice, named: %s", got)
	}
}
