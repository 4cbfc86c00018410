package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sediment-io/sediment/broker"
)

// TestErrorsNameTheKafkaError: errors for a missing topic or group, and a
// broker's refusal of a cluster config, begin with the Kafka error's name
// as docs/cli.md promises; before, "topic nosuch does not exist" and the
// broker's message alone ("metadata: invalid request ...").
func TestErrorsNameTheKafkaError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := startCLITestBroker(t, broker.Config{})
	run, _ := cliRunner(t, ctx, b.Addr())
	for _, tc := range []struct {
		args []string
		want string // the error's start
	}{
		{[]string{"topic", "delete", "nosuch"}, "UNKNOWN_TOPIC_OR_PARTITION: topic nosuch does not exist"},
		{[]string{"topic", "describe", "nosuch"}, "UNKNOWN_TOPIC_OR_PARTITION: topic nosuch does not exist"},
		{[]string{"consume", "nosuch", "-e"}, "UNKNOWN_TOPIC_OR_PARTITION: topic nosuch does not exist"},
		{[]string{"group", "describe", "nosuch"}, `GROUP_ID_NOT_FOUND: group "nosuch" does not exist`},
		{[]string{"cluster", "config", "set", "num.partitions=3"}, "cluster default: INVALID_REQUEST: "},
		{[]string{"cluster", "config", "set", "log.cleaner.threads=100"}, "cluster default: INVALID_CONFIG: "},
		{[]string{"cluster", "config", "set", "--validate-only", "log.cleaner.threads=100"}, "cluster default: INVALID_CONFIG: "},
	} {
		_, err := run(tc.args...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("sediment %s: %v, want %q...", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
