package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

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

// TestResponseErrorMessage: a response's error code and message read as
// "CODE: message", without kerr's generic description of the code between
// them (a review saw "UNSUPPORTED_VERSION: The version of API is not
// supported.: …" from `cluster features`); errors.Is still finds the code.
func TestResponseErrorMessage(t *testing.T) {
	msg := "brokers [3] have not recorded metadata level 1"
	err := responseError(kerr.UnsupportedVersion.Code, &msg)
	if err == nil || err.Error() != "UNSUPPORTED_VERSION: "+msg || !errors.Is(err, kerr.UnsupportedVersion) {
		t.Fatalf("responseError: %v", err)
	}
	if err := responseError(0, &msg); err != nil {
		t.Fatalf("no error code: %v", err)
	}
}
