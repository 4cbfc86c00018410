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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sediment-io/sediment/broker"
)

// TestReassignmentsSetAllTopics: with no topic named, `sediment topic
// reassignments` asks about every partition of every topic; kadm sends no
// request for an empty set, so the command always printed "no reassignment
// in progress".
func TestReassignmentsSetAllTopics(t *testing.T) {
	adm := testAdmin(t)
	ctx := context.Background()
	for _, topic := range []string{"a", "b"} {
		if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	set, err := reassignmentsSet(ctx, adm, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(set["a"]) != 3 || len(set["b"]) != 3 {
		t.Fatalf("every topic's partitions: %v", set)
	}
	if set, err = reassignmentsSet(ctx, adm, []string{"b"}); err != nil || len(set) != 1 || len(set["b"]) != 3 {
		t.Fatalf("topic b: %v %v", set, err)
	}
	if _, err = reassignmentsSet(ctx, adm, []string{"nope"}); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("an unknown topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	// The broker answers a request naming every partition (none moving).
	ls, err := adm.ListPartitionReassignments(ctx, set)
	if err != nil || len(ls.Sorted()) != 0 {
		t.Fatalf("list: %v %v", ls, err)
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
