package broker

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sediment-io/sediment/metadata"
)

// TestCreateTopicOutcomeUnknown: the metadata leader is lost while a
// CreateTopic is in flight and the command is committed all the same (the
// hook reports the commit as ErrNotLeader, as Propose does when raft loses
// the leadership with the entry appended). The client is answered that its
// topic was created, with its id, not NOT_CONTROLLER (and then, on its
// retry, TOPIC_ALREADY_EXISTS for its own topic). Another create of the
// name is still TOPIC_ALREADY_EXISTS.
func TestCreateTopicOutcomeUnknown(t *testing.T) {
	b := startBroker(t, t.TempDir())
	var calls atomic.Int32
	b.testHooks.createTopicProposed = func(err error) error {
		if calls.Add(1) == 1 && err == nil {
			return fmt.Errorf("%w: leadership lost while committing the command (outcome unknown)", metadata.ErrNotLeader)
		}
		return err
	}
	adm := kadm.NewClient(newClient(t, b))
	resp, err := adm.CreateTopic(testCtx(t), 3, 1, nil, "ambiguous")
	if err != nil || resp.Err != nil {
		t.Fatalf("create with the outcome unknown at first: %v %v (%s)", err, resp.Err, resp.ErrMessage)
	}
	mt, ok := b.meta.State().Topic("ambiguous")
	if !ok || [16]byte(mt.ID) != [16]byte(resp.ID) || len(mt.Partitions) != 3 {
		t.Fatalf("answered id %v, the topic %+v", resp.ID, mt)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d proposals, want 2 (the lost one and the one that found the topic)", n)
	}
	// kadm returns the topic's error as its own too.
	if resp, _ = adm.CreateTopic(testCtx(t), 3, 1, nil, "ambiguous"); !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
		t.Fatalf("a second create: %v, want TOPIC_ALREADY_EXISTS", resp.Err)
	}
}

// An integer config's bounds are printed as integers (they read
// "[1, 2.147483647e+09]").
func TestConfigBoundsPrintedAsIntegers(t *testing.T) {
	v := "0"
	err := validateTopicConfig("segment.bytes", &v)
	if err == nil || strings.Contains(err.Error(), "e+") || !strings.Contains(err.Error(), "2147483647]") {
		t.Fatalf("segment.bytes=0: %v", err)
	}
	for f, want := range map[float64]string{1: "1", 2147483647: "2147483647", math.MaxInt64: "9223372036854775807", -1: "-1", math.MinInt64: "-9223372036854775808"} {
		if got := intBound(f); got != want {
			t.Fatalf("intBound(%v) = %s, want %s", f, got, want)
		}
	}
}
