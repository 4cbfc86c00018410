package broker

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sediment-io/sediment/metadata"
)

func TestReplicationQuota(t *testing.T) {
	var q replicationQuota
	now := time.Unix(1000, 0)
	const rate = 1000
	// A second's burst, then overdrawn by one fetch.
	if over, _ := q.exceeded(rate, now); over {
		t.Fatal("a fresh quota is exceeded")
	}
	q.record(rate, 3000, now)
	over, wait := q.exceeded(rate, now)
	if !over || wait != 2*time.Second {
		t.Fatalf("after 3000 bytes at 1000/s with a burst of 1000: exceeded %v, wait %v; want true, 2s", over, wait)
	}
	if over, _ := q.exceeded(rate, now.Add(1999*time.Millisecond)); !over {
		t.Fatal("the debt was paid back early")
	}
	if over, _ := q.exceeded(rate, now.Add(2*time.Second)); over {
		t.Fatal("the debt was not paid back after 2 s")
	}
	// The burst is capped at one second's worth.
	later := now.Add(time.Hour)
	q.record(rate, 2001, later)
	if over, _ := q.exceeded(rate, later); !over {
		t.Fatal("an hour of idleness gave more than a second's burst")
	}
	// No limit: never exceeded, recording is free.
	for _, r := range []int64{-1, math.MaxInt64} {
		var u replicationQuota
		u.record(r, 1<<40, now)
		if over, _ := u.exceeded(r, now); over {
			t.Fatalf("rate %d: exceeded", r)
		}
	}
	// 0 lets nothing through, as in Kafka.
	var z replicationQuota
	if over, wait := z.exceeded(0, now); !over || wait <= 0 {
		t.Fatalf("rate 0: exceeded %v, wait %v", over, wait)
	}
	// A new rate starts a new bucket.
	q.record(rate, 1<<20, later)
	if over, _ := q.exceeded(2*rate, later); over {
		t.Fatal("a changed rate kept the old debt")
	}
}

func TestThrottledReplicasConfig(t *testing.T) {
	for _, v := range []string{"", "*", "0:1", "0:1,1:2, 2 : 3", " 10:0 "} {
		if err := validateTopicConfig(cfgLeaderThrottledReplicas, &v); err != nil {
			t.Errorf("%q refused: %v", v, err)
		}
	}
	for _, v := range []string{"0", "a:1", "0:b", "0:1,", "-1:2", "0:1:2", "**"} {
		if err := validateTopicConfig(cfgFollowerThrottledReplicas, &v); !errors.Is(err, errInvalidConfig) {
			t.Errorf("%q: %v, want an invalid config", v, err)
		}
	}
	for _, v := range []string{"1000", "0", "9223372036854775807"} {
		if err := validateDynamicBrokerConfig("", cfgLeaderThrottledRate, &v); err != nil {
			t.Errorf("rate %q refused: %v", v, err)
		}
	}
	for _, v := range []string{"-1", "1k", ""} {
		if err := validateDynamicBrokerConfig("1", cfgFollowerThrottledRate, &v); !errors.Is(err, errInvalidConfig) {
			t.Errorf("rate %q: %v, want an invalid config", v, err)
		}
	}
	v := "1"
	for _, name := range []string{"num.partitions", "listeners", "log.dirs", "node.id"} {
		if err := validateDynamicBrokerConfig("", name, &v); !errors.Is(err, metadata.ErrInvalidRequest) {
			t.Errorf("a static broker config %s: %v, want an invalid request", name, err)
		}
	}
	for _, v := range []string{"true", "false"} {
		if err := validateDynamicBrokerConfig("", cfgUncleanLeaderElection, &v); err != nil {
			t.Errorf("cluster-wide unclean election %q refused: %v", v, err)
		}
	}
	if err := validateDynamicBrokerConfig("2", cfgUncleanLeaderElection, &v); !errors.Is(err, metadata.ErrInvalidRequest) {
		t.Errorf("unclean election on one broker: %v, want an invalid request (cluster-wide only)", err)
	}
	bad := "yes"
	if err := validateDynamicBrokerConfig("", cfgUncleanLeaderElection, &bad); !errors.Is(err, errInvalidConfig) {
		t.Errorf("unclean election %q: %v, want an invalid config", bad, err)
	}
}
