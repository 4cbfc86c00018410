package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker"
)

// TestReassignmentsSetAllTopics: with no topic named, `sediment topic
// reassignments` asks the brokers about every topic (the request's topics
// null); with topics, about every partition of each. kadm sends no request
// for an empty set, so the command once always printed "no reassignment in
// progress" (and, built from the topics Metadata listed, did so still for a
// login that could DESCRIBE none: TestClusterCommandsWithoutClusterDescribe).
func TestReassignmentsSetAllTopics(t *testing.T) {
	b := startCLITestBroker(t, broker.Config{})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	for _, topic := range []string{"a", "b"} {
		if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	set, err := reassignmentsSet(ctx, adm, []string{"b"})
	if err != nil || len(set) != 1 || len(set["b"]) != 3 {
		t.Fatalf("topic b: %v %v", set, err)
	}
	if _, err = reassignmentsSet(ctx, adm, []string{"nope"}); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("an unknown topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	// The broker answers a request naming every partition, and one naming
	// no topic (none moving).
	for _, topics := range [][]string{{"a", "b"}, nil} {
		ls, err := listReassignments(ctx, cl, adm, topics, time.Minute)
		if err != nil || len(ls.Sorted()) != 0 {
			t.Fatalf("list %v: %v %v", topics, ls, err)
		}
	}
}

// TestTierLsCreatesNothing: `sediment tier ls` of a bucket folder that does
// not exist says so and creates nothing (it made the folder and printed an
// empty table).
func TestTierLsCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no", "bucket")
	cmd := newRootCmd()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"tier", "ls", "--bucket-dir", dir})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "no bucket folder at "+dir) {
		t.Fatalf("tier ls of a missing folder: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
		t.Fatalf("tier ls created %s: %v", filepath.Dir(dir), err)
	}
}

// KAFKA_STORAGE_ERROR is explained (kerr's text blames the disk, where a
// tiered topic's bucket not answering is the usual cause); other errors
// pass as they are.
func TestStorageHint(t *testing.T) {
	for _, err := range []error{kerr.KafkaStorageError, fmt.Errorf("list: %w", kerr.KafkaStorageError)} {
		got := storageHint(err)
		if !errors.Is(got, kerr.KafkaStorageError) || !strings.Contains(got.Error(), "for a topic with remote storage the bucket") {
			t.Fatalf("%v: %v", err, got)
		}
	}
	if got := storageHint(kerr.UnknownTopicOrPartition); got != error(kerr.UnknownTopicOrPartition) {
		t.Fatalf("another error changed: %v", got)
	}
}

// TestClearThrottlesOfDeletedTopic: --clear-throttle of a topic deleted
// since removes the cluster-wide rates and succeeds (it failed on the
// topic's UNKNOWN_TOPIC_OR_PARTITION).
func TestClearThrottlesOfDeletedTopic(t *testing.T) {
	adm := testAdmin(t)
	ctx := context.Background()
	rate := "10000"
	if err := checkAlter(adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: leaderThrottledRate, Value: &rate},
		{Name: followerThrottledRate, Value: &rate}})); err != nil {
		t.Fatal(err)
	}
	if err := clearThrottles(ctx, adm, "gone"); err != nil {
		t.Fatalf("clearThrottles of a deleted topic: %v", err)
	}
	rc, derr := adm.DescribeBrokerConfigs(ctx)
	if derr != nil {
		t.Fatal(derr)
	}
	for _, r := range rc {
		for _, c := range r.Configs {
			if (c.Key == leaderThrottledRate || c.Key == followerThrottledRate) && c.MaybeValue() == rate {
				t.Fatalf("%s is still %s after --clear-throttle of a deleted topic", c.Key, rate)
			}
		}
	}
}

// testAdmin starts a broker in the process (closed with the test) and
// returns an admin client to it.
func testAdmin(t *testing.T) *kadm.Client {
	t.Helper()
	b := startCLITestBroker(t, broker.Config{})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// TestPlanReassignment: the plan of --replication-factor / --drain-broker.
func TestPlanReassignment(t *testing.T) {
	rack := func(s string) *string { return &s }
	md := func(brokers []kadm.BrokerDetail, topics map[string]map[int32][]int32) kadm.Metadata {
		m := kadm.Metadata{Brokers: brokers, Topics: kadm.TopicDetails{}}
		for name, parts := range topics {
			td := kadm.TopicDetail{Topic: name, Partitions: kadm.PartitionDetails{}}
			for p, rs := range parts {
				td.Partitions[p] = kadm.PartitionDetail{Topic: name, Partition: p, Replicas: rs}
			}
			m.Topics[name] = td
		}
		return m
	}
	four := []kadm.BrokerDetail{{NodeID: 1}, {NodeID: 2}, {NodeID: 3}, {NodeID: 4}}
	for _, tc := range []struct {
		name    string
		md      kadm.Metadata
		rf      int
		drain   []int32
		want    map[int32][]int32
		wantErr string
	}{
		{name: "raise to 3, least loaded first", rf: 3,
			md: md(four, map[string]map[int32][]int32{"t": {0: {1}, 1: {2}}, "other": {0: {3, 4}, 1: {3}}}),
			// load: 1:1 2:1 3:2 4:1. p0 [1] takes 2 (load 1, lowest id), then 4; p1 [2] takes 1 (1 < 3's 2), then 4 or 3...
			want: map[int32][]int32{0: {1, 2, 4}, 1: {2, 1, 3}}},
		{name: "lower to 1 drops the last", rf: 1, md: md(four, map[string]map[int32][]int32{"t": {0: {3, 1, 2}, 1: {1}}}),
			want: map[int32][]int32{0: {3}}},
		{name: "drain keeps the count and the order", drain: []int32{1}, md: md(four, map[string]map[int32][]int32{"t": {0: {1, 2}, 1: {2, 3}, 2: {3, 1}}}),
			want: map[int32][]int32{0: {2, 4}, 2: {3, 4}}},
		{name: "drain a broker that is down", drain: []int32{5}, md: md(four, map[string]map[int32][]int32{"t": {0: {5, 2}}}),
			want: map[int32][]int32{0: {2, 1}}},
		{name: "another rack first", rf: 2,
			md: md([]kadm.BrokerDetail{{NodeID: 1, Rack: rack("a")}, {NodeID: 2, Rack: rack("a")}, {NodeID: 3, Rack: rack("b")}},
				map[string]map[int32][]int32{"t": {0: {1}}, "busy": {0: {3}, 1: {3}}}),
			want: map[int32][]int32{0: {1, 3}}},
		{name: "not enough brokers", rf: 4, drain: []int32{1}, md: md(four, map[string]map[int32][]int32{"t": {0: {1}}}),
			wantErr: "replication factor 4 needs 4 brokers; 3 are live and not drained"},
		{name: "unknown broker", drain: []int32{9}, md: md(four, map[string]map[int32][]int32{"t": {0: {1}}}),
			wantErr: "--drain-broker 9: no such broker"},
		{name: "nothing to do", rf: 1, md: md(four, map[string]map[int32][]int32{"t": {0: {1}}}), want: map[int32][]int32{}},
	} {
		got, err := planReassignment(tc.md, tc.md.Topics["t"], tc.rf, tc.drain)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
}
